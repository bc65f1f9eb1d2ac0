/* ---- hopper.cuh: the sm_90a pieces the GEMM and attention templates share --
 *
 * Tensor maps passed by value (__grid_constant__), mbarriers, TMA tile copies
 * into shared memory counted on an mbarrier, and wgmma shared-memory
 * descriptors for the 128-byte swizzle. Put after common.cuh and before
 * gemm_sm90.cuh / attention_sm90.cuh by their generators.
 *
 * mbarrier parities: a barrier starts in phase 0; waiting for parity 1 on a
 * fresh barrier returns at once, so a producer waits for a free slot with
 * `phase ^ 1` and a consumer for a full one with `phase`.
 *
 * wgmma descriptors (128-byte swizzle, every tile 1024-byte aligned):
 *   K-major operand (the 64 K values of a row are its 128 bytes): rows r at
 *     r * 128; a 16-deep K step adds 32 bytes; SBO 1024 (8-row groups);
 *   MN-major operand (M or N contiguous, wgmma's transpose bit): rows are K,
 *     each 64 M/N values; a K step adds 16 rows (2048 bytes); SBO 1024; LBO
 *     the distance between 64-wide M/N atoms.
 */

struct __align__(64) kf_tmap {
    unsigned long long opaque[16];
};

__device__ __forceinline__ void kf_hp_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void kf_hp_wait(unsigned bar, unsigned parity) {
    asm volatile("{\n.reg .pred p;\nkf_hp_wait_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra kf_hp_wait_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void kf_hp_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void kf_hp_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
/* A TMA box at (c0, c1[, c2[, c3[, c4]]]) of `map` into shared address dst,
 * counted on bar (complete_tx: the whole box's bytes, zeros included). */
__device__ __forceinline__ void kf_hp_tma2(unsigned dst, const kf_tmap *map, int c0, int c1,
                                           unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
                 "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void kf_hp_tma3(unsigned dst, const kf_tmap *map, int c0, int c1, int c2,
                                           unsigned bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
                 "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void kf_hp_tma4(unsigned dst, const kf_tmap *map, int c0, int c1, int c2,
                                           int c3, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst),
                 "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void kf_hp_tma5(unsigned dst, const kf_tmap *map, int c0, int c1, int c2,
                                           int c3, int c4, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];" ::"r"(dst),
                 "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4),
                 "r"(bar)
                 : "memory");
}
/* A wgmma shared-memory descriptor, 128-byte swizzle. */
__device__ __forceinline__ unsigned long long kf_hp_desc(unsigned addr, unsigned lbo,
                                                         unsigned sbo) {
    return (unsigned long long)((addr & 0x3ffffu) >> 4) |
           ((unsigned long long)((lbo >> 4) & 0x3fffu) << 16) |
           ((unsigned long long)((sbo >> 4) & 0x3fffu) << 32) | (1ull << 62);
}

/* ---- 2-CTA clusters (the GEMM's KF_CLUSTER 2) --------------------------------
 *
 * A TMA box multicast to the CTAs of ctaMask: each lands at the same
 * CTA-relative shared address dst, counted on the barrier at the same
 * CTA-relative address bar in each; the CTA's own rank (%cluster_ctarank);
 * the shared::cluster address of a local shared address in CTA `rank`
 * (mapa); an arrival on a barrier of another CTA of the cluster (the
 * consumer's wgmma reads of its stage are done before the peer's producer
 * overwrites it); and the cluster-wide barrier (every thread
 * of every CTA), acquire on the wait. */
__device__ __forceinline__ void kf_hp_tma2_mc(unsigned dst, const kf_tmap *map, int c0, int c1,
                                              unsigned bar, unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
                 "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
                 : "memory");
}
__device__ __forceinline__ void kf_hp_tma3_mc(unsigned dst, const kf_tmap *map, int c0, int c1,
                                              int c2, unsigned bar, unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;" ::"r"(dst),
                 "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "h"(mask)
                 : "memory");
}
__device__ __forceinline__ unsigned kf_hp_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned kf_hp_mapa(unsigned addr, unsigned rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
__device__ __forceinline__ void kf_hp_arrive_cluster(unsigned cluster_bar) {
    /* .release at CTA scope (the default): what must come before it is
     * this warp's own wgmma reads, done at its wait_group; .cluster scope
     * puts a MEMBAR.ALL.GPU before every arrival (SASS, sm_90a) */
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar) : "memory");
}
__device__ __forceinline__ void kf_hp_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
