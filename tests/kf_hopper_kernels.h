/*
 * kf_hopper_kernels.h -- two handwritten sm_90a kernels that exercise what
 * the Hopper templates will lean on, shared by test_cuda (which compiles them
 * with NVRTC on any machine, so CI proves the sources and their inline PTX
 * are valid) and test_cuda_gpu (which runs them and checks every value).
 *
 *   kf_cluster_probe   one record per block of a 3-D grid launched in
 *                      thread-block clusters: its blockIdx and the cluster
 *                      special registers, and a value read from a peer
 *                      block's shared memory through the cluster (DSMEM).
 *   kf_tma_tile_f32    one TMA load (cp.async.bulk.tensor.2d) per block of a
 *                      2-D f32 tensor map taken by value, completed on an
 *                      mbarrier, written back to global memory as a tile.
 *
 * The sources use no headers (NVRTC runs with no include path in kfuse).
 */
#ifndef KF_HOPPER_KERNELS_H
#define KF_HOPPER_KERNELS_H

/* kf_cluster_probe(unsigned *out): block b (x fastest) writes
 * out[b * KF_PROBE_WORDS + KF_PROBE_*]. Launch with any 3-D grid, block and
 * cluster; every thread of a block must run it (cluster barriers). */
extern const char kf_cluster_probe_src[];
enum {
    KF_PROBE_BLOCK_X, /* blockIdx */
    KF_PROBE_BLOCK_Y,
    KF_PROBE_BLOCK_Z,
    KF_PROBE_RANK,          /* %cluster_ctarank */
    KF_PROBE_NRANK,         /* %cluster_nctarank */
    KF_PROBE_CLUSTER_DIM_X, /* %cluster_nctaid */
    KF_PROBE_CLUSTER_DIM_Y,
    KF_PROBE_CLUSTER_DIM_Z,
    KF_PROBE_CTAID_X, /* %cluster_ctaid: the block's place in its cluster */
    KF_PROBE_CTAID_Y,
    KF_PROBE_CTAID_Z,
    KF_PROBE_CLUSTER_X, /* %clusterid: the cluster's place in the grid */
    KF_PROBE_CLUSTER_Y,
    KF_PROBE_CLUSTER_Z,
    KF_PROBE_PEER, /* the tag of rank (rank + 1) % nrank, read over DSMEM */
    KF_PROBE_TAG,  /* this block's own tag: 1 + its linear index */
    KF_PROBE_WORDS
};

/* kf_tma_tile_f32(const __grid_constant__ CUtensorMap map, float *tiles,
 * int box_w, int box_h, int swizzle128): block (bx, by) loads the box at
 * element (bx * box_w, by * box_h) of a 2-D f32 map whose box is
 * box_w x box_h, and writes it row-major to tiles + (by * gridDim.x + bx) *
 * box_w * box_h, elements outside the tensor included (the map's fill).
 * swizzle128 != 0 when the map uses SWIZZLE_128B (then box_w * 4 == 128): the
 * kernel undoes the swizzle when it reads shared memory, so the tiles read
 * the same either way. Needs KF_TMA_TILE_SMEM(box_w, box_h) bytes of dynamic
 * shared memory (the tile, aligned to 1024 bytes inside it). */
extern const char kf_tma_tile_src[];
#define KF_TMA_TILE_SMEM(box_w, box_h) ((unsigned)(box_w) * (unsigned)(box_h)*4u + 1024u)

#endif /* KF_HOPPER_KERNELS_H */
