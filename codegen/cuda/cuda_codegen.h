/*
 * cuda_codegen.h -- CUDA C for the memory-bound kernels of a plan: elementwise
 * groups, row-wise groups (norms, softmax, reductions with prologue and
 * epilogue), column reductions, layout copies, the part of a GEMM group that
 * cuBLASLt cannot apply (its epilogue, its norm prologue on A) and the
 * row-wise softmax of the unfused attention fallback. codegen/ includes ir/
 * and fusion/ only; runtime/ compiles (NVRTC), caches and launches what this
 * module produces.
 *
 *   kf_plan, group g, arch --kf_cuda_codegen_*--> kf_cuda_kernel
 *        source (one self-contained translation unit: templates/<kind>.cuh + the
 *                group's expressions, no #include, no toolkit header needed)
 *        name   (what it is: ew_gelu_mul_bf16_65536x4096_sm90)
 *        params (which buffer each kernel argument is)
 *        launch (block size, work per block; grid from the device's SM count)
 *
 * The contract the execution side relies on:
 *
 *   1. Deterministic: the same plan, group, entry point and arch give the same
 *      bytes of source and the same name. Nothing depends on pointers, time,
 *      the environment or the device; the problem size is compiled in.
 *   2. The kernel's C symbol is exactly kf_cuda_kernel.name (extern "C").
 *   3. Every kernel argument is 8 bytes: argument i is params[i], a device
 *      pointer for the buffer kinds (kf_cuda_param_kind) or an int64/double for
 *      the scalar kinds. Launch with void *args[i] = &slot[i] where slot is a
 *      uint64_t array. Buffers are laid out as the plan says: a tensor that a
 *      VIEW group aliases is passed as its base's buffer (param.tensor is the
 *      base); every other tensor is contiguous row-major. Pointers need only
 *      element alignment: the kernels test 16-byte alignment themselves and
 *      take the vectorized path only when every vector operand has it.
 *   4. Any grid.x >= 1 computes the right result (grid-stride loops); block.x
 *      must be launch.block (the kernels are compiled for that block size).
 *      kf_cuda_kernel_grid() gives the grid that fills a device.
 *   5. Compile with runtime/cuda_kernel.h's kf_cuda_kernel_compile_options():
 *      NVRTC with the kernel's arch, no fast math (erff, tanhf, expf as the
 *      reference has them), no include path. kf_cuda_kernel_cache_key() there
 *      is the disk-cache key both `kfuse aot` and the execution side use, so a
 *      cache filled ahead of time is hit at run time.
 *
 * Numerics: every node that stands for a graph tensor rounds to its dtype as
 * the reference evaluator stores it (round to nearest even for f16/bf16; done
 * with bit operations in the template, so no cuda_fp16.h/cuda_bf16.h is
 * needed); nodes without a tensor and row statistics compute in f32 (f64 when
 * the row dtype is f64).
 *
 * Files: cuda_codegen.c (the entry points below, the template report, the
 * roles), one per kernel kind (cg_elementwise.c, cg_rowwise.c,
 * cg_colreduce.c), and the parts they share, declared in cg.h: cg_core.c
 * (state, names, params, the head of every source), cg_expr.c (scalar
 * expressions), cg_access.c (how operands are read).
 */
#ifndef KF_CODEGEN_CUDA_CODEGEN_H
#define KF_CODEGEN_CUDA_CODEGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fusion/fusion.h"
#include "ir/ir.h"

/* Bumped whenever generated code or templates change in a way the source text
 * alone would not show (it is part of every cache key). */
#define KF_CUDA_CODEGEN_VERSION 6u

/* Longest kernel name, with the NUL. */
#define KF_CUDA_NAME_MAX 160
/* The compute capability of "sm_NN[a|f]" (80 for "sm_80", 90 for "sm_90a"),
 * 0 when `arch` is not one. */
int kf_cuda_arch_cc(const char *arch);

/* Longest arch string, with the NUL (runtime/nvrtc.h's KF_ARCH_MAX). */
#define KF_CUDA_ARCH_MAX 16

/* ------------------------------------------------------------------------ */
/* Templates                                                                  */
/* ------------------------------------------------------------------------ */

/* The kernel templates (templates/<name>.cuh, embedded at build time) and the
 * variant chosen for a group. */
typedef enum kf_cuda_template {
    KF_CUDA_TEMPLATE_ELEMENTWISE = 0,     /* flat grid-stride loop, 16-byte vectors + scalar tail */
    KF_CUDA_TEMPLATE_ROW_WARP,            /* one warp per row, row in registers (L <= 4096) */
    KF_CUDA_TEMPLATE_ROW_BLOCK,           /* one block per row, row in registers */
    KF_CUDA_TEMPLATE_ROW_BLOCK_MULTIPASS, /* one block per row, row re-read from memory per pass */
    KF_CUDA_TEMPLATE_COLREDUCE,           /* columns across threads, the axis split over warps */
    KF_CUDA_TEMPLATE_ROW_WARP_STAGED,     /* one warp per row, the row-shaped loads staged through
                                             a cp.async ring in shared memory (sm_80+) */
    KF_CUDA_TEMPLATE_ELEMENTWISE_BULK,    /* elementwise whose whole chunks move through a ring
                                             in shared memory by bulk copies (sm_90+), then the
                                             grid-stride loops for the rest */
    KF_CUDA_TEMPLATE_GEMM_SM90,           /* a whole GEMM group: TMA ring, wgmma, warp-specialized,
                                             persistent, the epilogue on the accumulators (sm_90a) */
    KF_CUDA_TEMPLATE_ATTENTION_MMA,       /* fused attention: mma.sync m16n8k16, cp.async K/V
                                             tiles, online softmax (sm_80+) */
    KF_CUDA_TEMPLATE_ATTENTION_SM90,      /* fused attention: TMA K/V ring on mbarriers, wgmma,
                                             a producer and two consumer warpgroups (sm_90a) */
    KF_CUDA_TEMPLATE_ROW_ARGMAX,          /* argmax over the last axis: one warp per row, the
                                             (value, index) pairs reduced by shuffles */
    KF_CUDA_TEMPLATE_ATTENTION_DECODE,    /* decode attention: split-KV partials (mma.sync,
                                             cp.async ring) and their combine (sm_80+) */
    KF_CUDA_TEMPLATE_COL_ARGMAX,          /* argmax over another axis: columns across threads, the
                                             axis split over warps (templates/argmax.cuh) */
    KF_CUDA_TEMPLATE_GEMM_SM80,           /* a whole GEMM group: cp.async ring, ldmatrix,
                                             mma.sync m16n8k16, the epilogue on the
                                             accumulators (sm_80+) */
    KF_CUDA_TEMPLATE_GEMM_FOLD,           /* a GEMM's norm prologue folded into its B: diag(gamma) B
                                             and the column sums a LayerNorm needs (sm_80+) */
    KF_CUDA_TEMPLATE_GEMM_SIMT,           /* a whole f32 / f64 GEMM group: FFMA / DFMA from a
                                             cp.async ring, the epilogue on the accumulators
                                             (sm_80+) */
    KF_CUDA_TEMPLATE_ATTENTION_SIMT,      /* fused attention without tensor cores: FFMA, f32
                                             arithmetic, cp.async K/V tiles (sm_80+) */
    KF_CUDA_TEMPLATE_GEMM_DECODE,         /* a GEMM group with M <= 64: B streamed once by a
                                             cp.async ring, mma.sync with A and B swapped,
                                             split-K reduced in the kernel (sm_80+) */
    KF_CUDA_TEMPLATE_COUNT
} kf_cuda_template;

/* "elementwise", "row_warp", "row_block", "row_block_multipass", "colreduce",
 * "row_warp_staged", "elementwise_bulk", "gemm_sm90", "attention_mma", "attention_sm90",
 * "attention_decode", "gemm_sm80". */
const char *kf_cuda_template_name(kf_cuda_template t);

/* ------------------------------------------------------------------------ */
/* Kernels                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum kf_cuda_param_kind {
    KF_CUDA_PARAM_IN = 0,  /* const pointer: the buffer of plan tensor `tensor` (read) */
    KF_CUDA_PARAM_OUT,     /* pointer: the buffer of plan tensor `tensor` (written) */
    KF_CUDA_PARAM_ACC,     /* const pointer: a GEMM's result as cuBLASLt wrote it, contiguous,
                              dtype of anchor tensor `tensor` (epilogue kernels only) */
    KF_CUDA_PARAM_SCORES,  /* const pointer: raw Q.K^T scores, contiguous [batch, heads, sq, skv]
                              in the dtype of tensor `tensor` (attn.qk) (attention softmax) */
    KF_CUDA_PARAM_SCRATCH, /* pointer: a temporary, contiguous, `bytes` long, dtype `dtype`,
                              for tensor `tensor` (a GEMM's A computed by its norm prologue) */
    KF_CUDA_PARAM_I64,     /* scalar (none emitted yet; reserved for shape-generic kernels) */
    KF_CUDA_PARAM_FLAGS,   /* pointer: the program's clamp flag word (one unsigned, `tensor`
                              KF_NONE), set by a kernel that clamped a gather index
                              (kf_expr.clamp_report; read by kf_program_index_clamps) */
    KF_CUDA_PARAM_COUNTERS, /* pointer: `bytes` of unsigned counters, the kernel's own, kept
                               across runs (the constants region): zero before its first run,
                               and every run leaves them zero (a split-K GEMM's per-tile
                               arrivals) */
    KF_CUDA_PARAM_PARTIALS, /* pointer: a split-K GEMM's f32 partial tiles, `bytes` long, for
                               its product `tensor` (a scratch live in its group) */
    KF_CUDA_PARAM_COUNT
} kf_cuda_param_kind;

typedef struct kf_cuda_param {
    kf_cuda_param_kind kind;
    uint32_t tensor; /* plan/graph tensor id (for IN: the buffer's owner, a view's base) */
    kf_dtype dtype;  /* element type of the buffer */
    uint64_t bytes;  /* bytes the kernel may touch: numel * size of that buffer */
} kf_cuda_param;

#define KF_CUDA_MAX_PARAMS 64

/* How to launch: block.x = block; grid.x from kf_cuda_kernel_grid(). */
typedef struct kf_cuda_launch_rule {
    uint32_t block;           /* threads per block (fixed: compiled in) */
    uint64_t work_items;      /* independent items: vectors/elements, rows, or column tiles */
    uint32_t items_per_block; /* items one block handles per grid-stride step */
    uint32_t blocks_per_sm;   /* resident blocks per SM to aim for */
    uint32_t shared_bytes;    /* dynamic shared memory (0: everything is static) */
    uint32_t grid_multiple;   /* the grid is rounded down to a multiple of this when it is at
                                 least that large (0 or 1: any grid); the elementwise template's
                                 hoisted path needs threads * vector a multiple of its period */
} kf_cuda_launch_rule;

typedef struct kf_cuda_kernel {
    char name[KF_CUDA_NAME_MAX]; /* the extern "C" symbol */
    char arch[KF_CUDA_ARCH_MAX]; /* "sm_80", "sm_90a" */
    kf_cuda_template tmpl;
    uint32_t group;    /* the plan group it came from */
    char *source;      /* NUL-terminated CUDA C, allocated with `mem` */
    size_t source_len; /* strlen(source) */
    size_t source_cap; /* bytes allocated */
    size_t body;       /* where the part the cache key covers begins: after the header
                          comment that names the plan group and its tensors, so two
                          groups that generate the same code share one key (and one
                          compile); 0: the whole source */
    kf_cuda_param params[KF_CUDA_MAX_PARAMS];
    uint32_t n_params;
    kf_cuda_launch_rule launch;
    uint32_t vec;           /* elements per vector access (1: scalar only) */
    char error[KF_MSG_MAX]; /* why generation failed */
} kf_cuda_kernel;

/* Generates the kernel of group `group` (ELEMENTWISE, ROWWISE, COLREDUCE or
 * LAYOUT) for `arch` ("sm_80", "sm_90a", any kf_nvrtc_arch_check-valid arch).
 * `out` is overwritten; release it with kf_cuda_kernel_release whatever the
 * status. Errors: KF_ERR_INVALID_ARGUMENT (bad arch or group index, a group
 * kind this entry point does not generate: GEMM, ATTENTION, VIEW),
 * KF_ERR_UNSUPPORTED (a construct the templates do not cover; the message in
 * out->error names the group and the construct), KF_ERR_OUT_OF_MEMORY. */
kf_status kf_cuda_codegen_group(const kf_plan *plan, uint32_t group, const char *arch,
                                const kf_mem *mem, kf_cuda_kernel *out);
/* The same with the recipe flags `rflags` (KF_CUDA_RECIPE_*) that choose
 * among the kernel's forms: EW_PAIRS_APART; the others are ignored. */
kf_status kf_cuda_codegen_group_flags(const kf_plan *plan, uint32_t group, const char *arch,
                                      uint64_t rflags, const kf_mem *mem, kf_cuda_kernel *out);

/* For a GEMM group whose epilogue cuBLASLt does not apply natively: a kernel
 * over the GEMM's output space that reads each anchor's result from an ACC
 * buffer (param kind ACC; two for SwiGLU) and computes every write of the
 * group from it (an elementwise kernel, or a row-wise one when the group has
 * a row epilogue: gemm.row_epilogue). Run it after the GEMM(s). A GEMM group
 * whose only write is the bare matmul (no epilogue) gets KF_ERR_NOT_FOUND:
 * cuBLASLt writes the output itself. */
kf_status kf_cuda_codegen_epilogue(const kf_plan *plan, uint32_t group, const char *arch,
                                   const kf_mem *mem, kf_cuda_kernel *out);

/* For a GEMM group with a norm prologue on operand A (gemm.a_prologue): a
 * row-wise kernel computing A (node gemm.a_root) into a SCRATCH buffer that
 * the GEMM then reads as a contiguous A. It also writes any tensor of the
 * group that lives in the prologue's space. Run it before the GEMM(s).
 * KF_ERR_NOT_FOUND for a GEMM group without a prologue. */
kf_status kf_cuda_codegen_gemm_prologue(const kf_plan *plan, uint32_t group, const char *arch,
                                        const kf_mem *mem, kf_cuda_kernel *out);

/* For an ATTENTION group run unfused (Q.K^T by cuBLASLt into a scores buffer,
 * then this, then P.V by cuBLASLt): a row-wise softmax over the key axis whose
 * prologue is the group's score expression with its mask (attn.score, leaves
 * SCORE read from the SCORES param), writing P contiguous in the dtype of the
 * softmax tensor (param OUT, tensor attn.softmax). P is what the reference
 * computes for the softmax tensor. */
kf_status kf_cuda_codegen_attention_softmax(const kf_plan *plan, uint32_t group, const char *arch,
                                            const kf_mem *mem, kf_cuda_kernel *out);

/* For an ATTENTION group: the whole group as one fused kernel
 * (templates/attention.cuh, sm_80 and later): Q, K, V read through their
 * strides (views, broadcast heads), the score expression and mask inlined,
 * O written contiguous (param OUT, tensor attn.pv). KF_ERR_UNSUPPORTED (the
 * message says why) for a group it does not take: see
 * kf_cuda_attention_supported. */
kf_status kf_cuda_codegen_attention(const kf_plan *plan, uint32_t group, const char *arch,
                                    const kf_mem *mem, kf_cuda_kernel *out);

/* Whether kf_cuda_codegen_attention takes group `group` for `arch`: bf16 or
 * f16 throughout, head dim 64 or 128 (Q.K^T's and the output's), Q, K and V
 * with a unit stride along the head dim and 16-byte multiples elsewhere, the
 * output the group's only write. When not, `why` (size bytes) says what
 * stops it, for the report. */
bool kf_cuda_attention_supported(const kf_plan *plan, uint32_t group, const char *arch, char *why,
                                 size_t size);

/* For an ATTENTION group the tensor-core kernels refuse (f32 operands, a head
 * dim other than 64 / 128, D != Dv, rows that are not 16-byte aligned), on
 * sm_80 and later: the whole group as one SIMT kernel (templates/
 * attention_simt.cuh: FFMA, f32 arithmetic, each of Q, K, V converted from
 * its own dtype as it leaves shared memory), with the mma.sync kernel's
 * score expression, masks, tile skipping, views and log-sum-exp. Params as
 * kf_cuda_codegen_attention's. KF_ERR_UNSUPPORTED (the message says why)
 * for a group it does not take: see kf_cuda_attention_simt_supported. */
kf_status kf_cuda_codegen_attention_simt(const kf_plan *plan, uint32_t group, const char *arch,
                                         const kf_mem *mem, kf_cuda_kernel *out);
/* Whether kf_cuda_codegen_attention_simt takes group `group` for `arch`: Q, K,
 * V and O f32, bf16 or f16 (none of the group's tensors f64), head dims 1 to
 * 256, O's head dim contiguous, the tiles in the arch's shared memory. When
 * not, `why` (size bytes) says what stops it. */
bool kf_cuda_attention_simt_supported(const kf_plan *plan, uint32_t group, const char *arch,
                                      char *why, size_t size);

/* For an ATTENTION group on sm_90a: the whole group as one kernel
 * (templates/attention_sm90.cuh: Q, K, V by TMA into an mbarrier ring, wgmma
 * for Q.K^T and P.V, a producer and two consumer warpgroups), the score
 * expression and mask inlined as in kf_cuda_codegen_attention, O written
 * contiguous. Its arguments are three tensor maps (Q, K, V: see
 * kf_cuda_attention_sm90_maps) then one pointer per param. KF_ERR_UNSUPPORTED
 * (the message says why) for a group it does not take: see
 * kf_cuda_attention_sm90_supported. */
kf_status kf_cuda_codegen_attention_sm90(const kf_plan *plan, uint32_t group, const char *arch,
                                         const kf_mem *mem, kf_cuda_kernel *out);
/* The same with the recipe flags `rflags` (KF_CUDA_RECIPE_*) that choose
 * among the kernel's forms: ATTENTION_PIN_SOFTMAX, ATTENTION_F32_SCORE,
 * ATTENTION_ROUNDED_SCORE, ATTENTION_TREE_SOFTMAX, ATTENTION_TAIL_LPT; the
 * others are ignored. */
kf_status kf_cuda_codegen_attention_sm90_flags(const kf_plan *plan, uint32_t group,
                                               const char *arch, uint64_t rflags,
                                               const kf_mem *mem, kf_cuda_kernel *out);

/* Whether kf_cuda_codegen_attention_sm90 takes group `group` for `arch`: what
 * kf_cuda_attention_supported takes, on sm_90a, with each of Q, K and V one
 * TMA map (at most 3 batch axes it does not broadcast, strides below 2^40
 * bytes). When not, `why` (size bytes) says what stops it. */
bool kf_cuda_attention_sm90_supported(const kf_plan *plan, uint32_t group, const char *arch,
                                      char *why, size_t size);

/* The (query tile, key tile) pairs the fused attention kernel (the sm_90a one
 * when `sm90`, else the mma.sync one: their tiles differ) visits per batch x
 * head for group `group`, and all there are: fewer when a CAUSAL or
 * SLIDING_WINDOW mask lets it skip tiles wholly outside (for the report). */
void kf_cuda_attention_tiles(const kf_plan *plan, uint32_t group, bool sm90, uint64_t *visited,
                             uint64_t *total);
/* The same for tiles of br query rows x bc keys (the SIMT kernel's:
 * kf_cuda_attention_simt_tiles gives them, 0 where it does not take the
 * group). */
void kf_cuda_attention_tiles_of(const kf_plan *plan, uint32_t group, int64_t br, int64_t bc,
                                uint64_t *visited, uint64_t *total);
void kf_cuda_attention_simt_tiles(const kf_plan *plan, uint32_t group, const char *arch, int *br,
                                  int *bc);

/* The split-KV decode path of an ATTENTION group (cg_attention_decode.c,
 * templates/attention_decode.cuh): for a few query rows against a long K/V.
 * Its kv items are the batch axes along which K or V moves; the query heads
 * that share one K/V head (the axes where K and V both broadcast: GQA / MQA)
 * and their Sq rows are one item's rows, read against one pass over its K/V
 * chunk. */
typedef struct kf_cuda_decode_shape {
    int64_t kv_items;            /* (kv item, row block of <= 64 rows) pairs: blocks a split */
    int64_t rows;                /* output rows: kv items x query heads a K/V head x Sq */
    int64_t group_heads;         /* query heads sharing a K/V head (1 without GQA) */
    int64_t tiles;               /* 64-key tiles the mask lets any row see */
    uint64_t ws_bytes_per_split; /* f32 workspace (partial O and lse) one split needs */
    uint32_t shared_bytes;       /* dynamic shared memory of the split kernel */
    uint32_t blocks_per_sm;      /* split-kernel blocks an SM of the arch holds (1..4) */
} kf_cuda_decode_shape;

/* Whether the decode kernels take group `group` for `arch`: what
 * kf_cuda_attention_supported takes (bf16/f16, head dim 64 or 128, 16-byte
 * rows), any Sq and Skv. When not, `why` (size bytes) says what stops it. */
bool kf_cuda_attention_decode_supported(const kf_plan *plan, uint32_t group, const char *arch,
                                        char *why, size_t size);

/* The decode shape of group `group` (KF_ERR_UNSUPPORTED where the decode
 * kernels do not take it). */
kf_status kf_cuda_attention_decode_shape(const kf_plan *plan, uint32_t group, const char *arch,
                                         kf_cuda_decode_shape *out);

/* The split count the decode recipe gives shape `s` on a device of
 * `sm_count` SMs: the smallest that fills the block slots to 90% over whole
 * waves (else the best fill), at most the key tiles and 256. */
uint32_t kf_cuda_attention_decode_splits(const kf_cuda_decode_shape *s, int sm_count);

/* The split kernel: per (kv item, row block, split) the partial O / l and
 * lse of its key chunk into a SCRATCH param (f32, keyed by attn.pv, whose
 * `bytes` is one split's: the recipe grows it to n splits), the score
 * expression and mask inlined as in kf_cuda_codegen_attention. Its arguments
 * are one pointer per param, then the split count n (an int64 the recipe
 * adds: any n >= 1, the same n as the combine's; grid any size). */
kf_status kf_cuda_codegen_attention_decode(const kf_plan *plan, uint32_t group, const char *arch,
                                           const kf_mem *mem, kf_cuda_kernel *out);

/* The split kernel's one-split form: one chunk of every key tile per (kv
 * item, row block), writing the normalized O (param OUT, tensor attn.pv,
 * contiguous, in its dtype; NaN in a row every key of which is masked) where
 * the combine would, with no workspace param and no combine after it. Its
 * arguments are one pointer per param, then the split count (an int64 the
 * recipe adds, 1); grid any size. */
kf_status kf_cuda_codegen_attention_decode_direct(const kf_plan *plan, uint32_t group,
                                                  const char *arch, const kf_mem *mem,
                                                  kf_cuda_kernel *out);

/* The combine kernel: merges the n splits' partials of each row by their lse
 * and writes O (param OUT, tensor attn.pv, contiguous). Arguments: O, the
 * workspace, then the split count n. */
kf_status kf_cuda_codegen_attention_combine(const kf_plan *plan, uint32_t group, const char *arch,
                                            const kf_mem *mem, kf_cuda_kernel *out);

/* The kernels of a group on the CUDA target, by role: which generator made
 * a kernel. Which roles a group runs, in which order and with which library
 * calls between them, is its recipe's business (cuda_recipe.h). */
typedef enum kf_cuda_role {
    KF_CUDA_ROLE_GROUP = 0,         /* kf_cuda_codegen_group */
    KF_CUDA_ROLE_GEMM_PROLOGUE,     /* kf_cuda_codegen_gemm_prologue (before the GEMM) */
    KF_CUDA_ROLE_EPILOGUE,          /* kf_cuda_codegen_epilogue (after the GEMM) */
    KF_CUDA_ROLE_ATTENTION_SOFTMAX, /* kf_cuda_codegen_attention_softmax (between the GEMMs) */
    KF_CUDA_ROLE_GEMM,              /* kf_cuda_codegen_gemm_sm90 or _sm80 (the whole GEMM
                                       group) */
    KF_CUDA_ROLE_ATTENTION,         /* kf_cuda_codegen_attention (the whole group) */
    KF_CUDA_ROLE_ATTENTION_SM90,    /* kf_cuda_codegen_attention_sm90 (the whole group; its
                                       recipe step adds the three tensor maps) */
    KF_CUDA_ROLE_ATTENTION_DECODE,  /* kf_cuda_codegen_attention_decode (the split-KV partials;
                                       its recipe step adds the split count) */
    KF_CUDA_ROLE_ATTENTION_COMBINE, /* kf_cuda_codegen_attention_combine (after the partials) */
    KF_CUDA_ROLE_ATTENTION_SIMT,    /* kf_cuda_codegen_attention_simt (the whole group) */
    KF_CUDA_ROLE_COUNT
} kf_cuda_role;

/* "group", "gemm_prologue", "epilogue", "attention_softmax", "gemm", "attention",
 * "attention_sm90", "attention_decode", "attention_combine", "attention_simt". */
const char *kf_cuda_role_name(kf_cuda_role role);

/* How a generated GEMM kernel reads its operands (the recipe decides it from
 * the operands' strides; the TMA descriptors it encodes must agree). */
typedef struct kf_cuda_gemm_shape {
    int64_t m, n, k, batch;    /* the output is contiguous [batch, m, n] */
    bool a_kmajor;             /* A [m, k] has k contiguous (else m: wgmma's transposed A) */
    bool b_kmajor;             /* B [k, n] has k contiguous (else n: wgmma's transposed B) */
    bool a_batched, b_batched; /* the operand's tensor map has a batch dim (else shared) */
    uint32_t bn;               /* tile columns: 128 or 256 (tile rows are 128, K step 64) */
    bool pingpong;             /* the consumers take alternate tiles, each the whole tile, and
                                  one's epilogue overlaps the other's main loop (bn 128);
                                  else both share every tile (cooperative) */
    bool pp_early;             /* ping-pong: a consumer passes the turn once its main loop's
                                  wgmmas are issued, not done (the default), and takes it
                                  after its tile's loads (internal; measured no faster) */
    uint32_t stages;           /* depth of the shared-memory ring */
    uint32_t cluster;          /* CTAs of a thread-block cluster: 0 or 1 none; 2 tile pairs of
                                  adjacent rows sharing their B tile, each CTA multicasting
                                  half of it (a K-major B's map then has boxes of bn / 2 rows;
                                  the launch's cluster is 2 x 1 x 1); ping-pong too, where
                                  both CTAs' consumer i % 2 takes the pair's tile i */
    bool dual;                 /* two GEMMs sharing A (SwiGLU): the B tile is bn / 2 columns of
                                  each B (a third tensor map, the second B), the output tile
                                  bn / 2 wide, and the epilogue reads both accumulators */
    bool a_norm;               /* the group's norm prologue applied to A's tiles in shared
                                  memory, from the row statistics kf_cuda_codegen_gemm_stats
                                  writes (A: the norm's loaded input, K-major, batch 1) */
    bool a_fold;               /* the group's norm prologue folded into B (kf_cuda_gemm_fold_of):
                                  A is the norm's loaded input (as a_norm), B the pre-pass's
                                  diag(gamma) B (kf_cuda_codegen_gemm_fold), and the
                                  accumulators get the row scale (LayerNorm: the mean times
                                  B's column sums, beta's product) before the epilogue */
    bool a_gscale;             /* with a_fold (sm_90a, an RMSNorm's, A bf16 and K-major, K a
                                  multiple of 8, cooperative 128 x 256 tiles with epi_tma, not
                                  epi_rs or stream-K): B is the operand itself, not diag(gamma)
                                  B; the producer copies each K step's gammas with the stage,
                                  each warp loads its A fragments by ldmatrix, multiplies them
                                  by gamma (bf16, rounded once) and runs wgmma with A from
                                  registers; the pre-pass takes the row statistics alone */
    bool fold_bias;            /* with a_fold (a LayerNorm's): the bias the epilogue adds to the
                                  product (kf_cuda_gemm_fold_bias) comes in the fold's column
                                  terms d, which the pre-pass writes (fold shape .bias), and
                                  the epilogue's load of it reads -0 (the add a no-op) */
    bool a_scratch;            /* the group's norm prologue already ran (the recipe's prologue
                                  kernel wrote A, normalized, to scratch): A is read as it is,
                                  and the norm is not the kernel's (a SwiGLU pair, a transposed
                                  A: what a_norm does not take) */
    bool epi_staged;           /* the epilogue leaves the accumulators through shared memory
                                  (a warpgroup barrier per chunk); else from the registers,
                                  8 adjacent columns a thread after a shuffle within each quad
                                  of lanes (the default) */
    bool epi_tma;              /* sm_90a, one bf16/f16 output written whole, not staged, dual or
                                  head-split: the epilogue runs on the accumulator fragment (2
                                  columns a call) and its output leaves through shared memory
                                  by TMA stores (a third tensor map, the output's, after A's
                                  and B's) */
    bool epi_ahead;            /* with epi_tma: two 64 x 64 chunks' values computed before
                                  the first is stored, their loads in flight together (internal;
                                  measured slower), where the default computes each chunk's
                                  between the previous chunk's store barriers */
    bool epi_unpacked;         /* sm_90a: the TMA-store epilogue without its bf16 pair forms
                                  (the code before; internal, for measuring:
                                  KF_CUDA_RECIPE_GEMM_EPI_UNPACKED) */
    bool desc_step;            /* sm_90a: the consumers' wgmma descriptors stepped by
                                  constant adds from the ring's (internal:
                                  KF_CUDA_RECIPE_GEMM_DESC_REBUILD asks for the form before) */
    bool pp_varying;           /* sm_90a, ping-pong: a consumer's tile counter from its index
                                  as it is, varying to ptxas (the form before the shuffle;
                                  internal: KF_CUDA_RECIPE_GEMM_PP_VARYING) */
    uint32_t raster;           /* sm_90a: tile rows the raster walks at a time (KF_RASTER, a
                                  multiple of the cluster's CTAs); 0: the template's 8 */
    bool gelu_mufu;            /* sm_90a: the epilogue's gelu_tanh by one tanh.approx.f32
                                  (internal: KF_CUDA_RECIPE_GEMM_GELU_MUFU) */
    bool epi_pk;               /* sm_90a, a SwiGLU pair (dual) with one bf16/f16 output of the
                                  product's dtype, N a multiple of 8, the register epilogue, no
                                  fold: kf_epi runs on the fragment's pairs, the quad transposes
                                  move the packed output words, one 16-byte store a lane, and
                                  the column test only where the tiles do not cover N
                                  (gemm_sm90.cuh KF_EPI_PK; where the pair runs in 2-CTA
                                  clusters, unless KF_CUDA_RECIPE_GEMM_DUAL_F32T) */
    bool silu_ex2;             /* sm_90a: silu as x / (1 + 2^(-x log2 e)) by ex2 and rcp
                                  (kf_gm_silu_ex2) where the default takes x times the branch-free
                                  expf sigmoid (with epi_pk) */
    bool epi_rs;               /* with epi_tma (one CTA, no stream-K, pair or head view; 128 x
                                  128 ping-pong or 128 x 256 cooperative tiles): each chunk is
                                  computed in place in one of 4 store buffers, and the
                                  epilogue's residual, if it has one (kf_cuda_gemm_rs_node: a
                                  bf16/f16 operand laid out as the output), comes into them by
                                  TMA under the main loop, a fourth tensor map after the
                                  output's (gemm_sm90.cuh KF_EPI_RS; the recipe's default with a
                                  residual on ping-pong tiles) */
    bool row_rs;               /* a row epilogue in the tile (the register epilogue) whose norm
                                  input adds a residual laid out as the output
                                  (kf_cuda_gemm_rs_node), N a multiple of 8: each consumer
                                  copies its rows of the residual into 32 KiB of shared memory
                                  by cp.async when a tile starts (the layout and stages of
                                  epi_rs), and kf_pre reads its pairs there (gemm_sm90.cuh
                                  KF_ROW_RS) */
    bool epi_cs;               /* with epi_tma (one CTA or a pair, no stream-K, 4 store
                                  buffers, fold, head view, SwiGLU pair or sibling set): the
                                  epilogue's column operands (a bias: bf16/f16, N a multiple of
                                  8) are copied into the consumer's staging area by cp.async
                                  when a tile starts, and kf_epi reads them there (gemm_sm90.cuh
                                  KF_EPI_CS), where each 64 x 64 chunk waited on its own global
                                  loads between the store barriers (the recipe's default;
                                  internal KF_CUDA_RECIPE_GEMM_EPI_COLS_GLOBAL: the form
                                  before) */
    bool epi_pf;               /* with epi_tma or the register epilogue (not a row epilogue
                                  in the tile): the epilogue's row operands (a residual) of
                                  a tile prefetched into L2 when the tile starts (internal:
                                  KF_CUDA_RECIPE_GEMM_EPI_PF) */
    bool x_scratch;            /* the write of tensor x_tensor goes to a SCRATCH param keyed by
                                  it (a value the plan does not materialize: the split row
                                  form's pre-norm rows, which the row pass after the GEMM
                                  reads), not to its OUT buffer */
    uint32_t x_tensor;
    uint32_t sk_grid; /* stream-K (sm_90a, cooperative, no cluster; 0: none): the most blocks
                         (SMs) the kernel runs on. The tiles after the whole waves but one (all
                         of them when fewer than the blocks: decode shapes) are cut by K
                         steps into one even range per block (with fewer than half as many
                         tiles as blocks: each tile's steps interleaved over G / tiles blocks,
                         gemm_sm90.cuh KF_SK 2); the pieces' f32 partials go to a
                         PARTIALS workspace (two slots a block), a COUNTERS word per tile half
                         elects the block that adds them and runs the epilogue */
    /* The sm_80 kernel (kf_cuda_codegen_gemm_sm80) reads A and B through
     * pointers; bn above is its tile's columns too (bm x bn: 128 x 128 or
     * 64 x 64), stages its ring's depth. */
    uint32_t bm;    /* tile rows: 128 or 64 */
    uint32_t warps; /* of a 128 x 128 tile: 4 (2 x 2 warp tiles of 64 x 64, the default) or
                       8 (2 x 4 of 64 x 32); a 64 x 64 tile has 4 (of 32 x 32) */
    int64_t lda;    /* elements between the stored rows of A (M rows when a_kmajor, else K) */
    int64_t ldb;    /* elements between the stored rows of B (N rows when b_kmajor, else K) */
    int64_t sa, sb; /* elements between batches of A and B; 0: shared by every batch */
    int64_t ldb2, sb2; /* dual: the second B's (the same major as B's) */
    /* The SIMT kernel (kf_cuda_codegen_gemm_simt) reads A and B through
     * pointers as the sm_80 kernel does (bm x bn: its tile, bn output
     * columns; stages, lda, ldb, sa, sb, ldb2, sb2 as above, any multiple
     * of an element); where an operand's rows, batch stride and address are
     * 16-byte multiples its copies are 16 bytes (N-major B, and A). */
    bool a_vec, b_vec;
    /* The decode kernel (kf_cuda_codegen_gemm_decode, M <= 64) reads A and B
     * through pointers (lda, ldb as above, multiples of 8 elements); bn is
     * its strip's output columns (64, or 128: two row groups of warps),
     * dec_bk its K step (64 or 128), stages its ring's depth, and dec_split
     * the blocks each strip's K range is cut over (1: no split). dec_tma
     * (sm_90a): the TMA form, A and B read through two tensor maps (the
     * kernel's first two params, in place of the pointers) by a producer
     * warp into a ring on mbarriers. dec_reg (M <= 32): the register form,
     * B and A read by 16-byte loads straight into the MMA's registers in
     * chunks of 32 K values (no ring: dec_bk and stages unused). */
    uint32_t dec_split, dec_bk;
    bool dec_tma, dec_reg;
} kf_cuda_gemm_shape;

/* Shared memory a GEMM kernel of `bn` columns and `stages` stages asks for
 * (the ring plus the 1024 bytes that align it). */
uint32_t kf_cuda_gemm_smem(uint32_t bn, uint32_t stages);
/* The same with the residual by TMA (shape.epi_rs): the ring, the two
 * consumers' 32 KiB of chunk buffers (in place of the staging areas), the
 * 1024 that align the ring. */
uint32_t kf_cuda_gemm_smem_rs(uint32_t bn, uint32_t stages);
/* The expression node of GEMM group `group`'s epilogue that shape.epi_rs
 * loads by TMA: the first LOAD, reachable from a write, of a bf16 or f16
 * tensor laid out as the output (the output space's contiguous strides, no
 * offset: a residual), in a group whose output space is the product's
 * [batch, M, N] with no head view; KF_NONE where there is none. */
uint32_t kf_cuda_gemm_rs_node(const kf_plan *plan, uint32_t group);

/* For a GEMM group on sm_90a: ONE kernel computing the whole group -- the
 * matmul with wgmma from a TMA-fed ring, and every write of the group from the
 * f32 accumulators through the group's epilogue expressions (templates/
 * gemm_sm90.cuh). Its arguments are two tensor maps (A, B: 128-byte
 * swizzle, boxes {64, 128} / {64, bn} for a K-major operand, {64, 64} for an
 * M/N-major one, a third dim of box 1 when batched), three when shape->dual
 * (A, the first anchor's B, the second's, the B boxes {64, bn / 2} when
 * K-major), then one pointer per param. Errors: KF_ERR_INVALID_ARGUMENT (not
 * a GEMM group, a bad shape), KF_ERR_UNSUPPORTED (an arch other than sm_90a,
 * a dtype other than bf16/f16, two anchors without shape->dual, a norm
 * prologue, a row epilogue, a write that is not the full output, an
 * expression outside the output space: the message says which). */
kf_status kf_cuda_codegen_gemm_sm90(const kf_plan *plan, uint32_t group, const char *arch,
                                    const kf_cuda_gemm_shape *shape, const kf_mem *mem,
                                    kf_cuda_kernel *out);

/* The most members a GEMM sibling set's one kernel takes (its tensor maps:
 * A, and each member's B and output). */
#define KF_CUDA_SIB_MAX 4

/* A GEMM sibling set (the plan's gemm.sib_*: GEMMs reading one A) as ONE
 * sm_90a kernel over the members' concatenated columns: groups[0..n) with
 * their shapes (each as kf_cuda_codegen_gemm_sm90 would take it alone; all
 * alike but in n: tile, ring, operand majors, norm form, epilogue form). The
 * persistent scheduler walks every member's column tiles as one N range; the
 * producer loads B from the member's map, the epilogue runs the member's own
 * expressions and stores through the member's outputs. Its tensor maps, in
 * argument order before the params: A, member 0's B (and output, epi_tma),
 * member 1's B (and output), ... KF_ERR_UNSUPPORTED (the message says why)
 * where a member or the set is outside what it takes; the members then run
 * their own kernels. */
kf_status kf_cuda_codegen_gemm_sm90_set(const kf_plan *plan, const uint32_t *groups, uint32_t n,
                                        const char *arch, const kf_cuda_gemm_shape *shapes,
                                        const kf_mem *mem, kf_cuda_kernel *out);

/* Shared memory the sm_80 GEMM kernel of a bm x bn tile and `stages`
 * stages asks for (its ring; K steps of 32). */
uint32_t kf_cuda_gemm_sm80_smem(uint32_t bm, uint32_t bn, uint32_t stages);

/* For a GEMM group on sm_80 or later (8.x, and 9.x when asked for): ONE
 * kernel computing the whole group -- the matmul by mma.sync m16n8k16 from a
 * cp.async ring in shared memory, and every write of the group from the f32
 * accumulators through the same epilogue as the sm_90a kernel's
 * (cg_gemm_epi.c; templates/gemm_sm80.cuh). Its arguments are A's and B's
 * addresses (each at its first element; the strides are in `shape`: lda,
 * ldb, sa, sb, each a multiple of 8 elements, or the extent along it 1),
 * then one pointer per param; one block per tile (launch.work_items: the
 * tiles of one batch) of 32 x shape->warps threads (128 x 128) or 128
 * (64 x 64), the batch in grid z. Errors as
 * kf_cuda_codegen_gemm_sm90's, and KF_ERR_UNSUPPORTED for a SwiGLU pair or a
 * norm prologue (the sm_80 kernel takes neither yet) or an arch below sm_80. */
kf_status kf_cuda_codegen_gemm_sm80(const kf_plan *plan, uint32_t group, const char *arch,
                                    const kf_cuda_gemm_shape *shape, const kf_mem *mem,
                                    kf_cuda_kernel *out);

/* A GEMM sibling set as ONE sm_80 kernel (mma.sync, templates/gemm_sm80.cuh
 * with KF_SIB) over the members' concatenated columns: groups[0..n) with
 * their shapes (each as kf_cuda_codegen_gemm_sm80 would take it alone, batch
 * 1, no pair; all alike but in n and ldb: A, tile, ring, B's major, norm
 * form). Each block takes one tile of the set's raster, loads B from its
 * member's pointer and runs the member's own epilogue. Its arguments: A's
 * address, each member's B address in member order, then the params; one
 * block per tile (launch.work_items) of 32 x shape->warps threads.
 * KF_ERR_UNSUPPORTED (the message says why) where a member or the set is
 * outside what it takes; the members then run their own kernels. */
kf_status kf_cuda_codegen_gemm_sm80_set(const kf_plan *plan, const uint32_t *groups, uint32_t n,
                                        const char *arch, const kf_cuda_gemm_shape *shapes,
                                        const kf_mem *mem, kf_cuda_kernel *out);

/* The SIMT GEMM kernel's K step for a bm x bn tile of `es`-byte elements
 * (16 for f32's 128 x 128, else 8), and the shared memory it asks for: its
 * ring of `stages` stages of bm x bk of A and (dual ? 2 : 1) x bn x bk of B. */
uint32_t kf_cuda_gemm_simt_bk(uint32_t bm, uint32_t bn, size_t es);
uint32_t kf_cuda_gemm_simt_smem(uint32_t bm, uint32_t bn, bool dual, uint32_t stages, size_t es);

/* For an f32 or f64 GEMM group on sm_80 or later: ONE kernel computing the
 * whole group (templates/gemm_simt.cuh) -- the matmul by fused multiply-adds
 * in the operands' precision, 256 threads a tile of bm x bn (128 x 128 or
 * 64 x 64 for f32, 128 x 64 or 64 x 64 for f64; a pair 128 x (2 x 64)), each
 * thread a register tile of whole rows of 8 adjacent columns, and every
 * write from the accumulators through the epilogue the other generated
 * kernels share (cg_gemm_epi.c, on f32 or f64 accumulators). Its arguments
 * are A's and B's addresses (the pair's second B's), then one pointer per
 * param; one block per tile, the batch in grid z. A norm prologue only from
 * the prologue kernel's scratch (shape.a_scratch). Errors as
 * kf_cuda_codegen_gemm_sm80's, KF_ERR_UNSUPPORTED for a dtype other than
 * f32 / f64, a row epilogue, a head-split epilogue. */
kf_status kf_cuda_codegen_gemm_simt(const kf_plan *plan, uint32_t group, const char *arch,
                                    const kf_cuda_gemm_shape *shape, const kf_mem *mem,
                                    kf_cuda_kernel *out);

/* The decode GEMM kernel (templates/gemm_decode.cuh) for a bf16 / f16 GEMM
 * group whose M is 64 or fewer, on sm_80 or later: the product as
 * Y^T = B^T . A^T by mma.sync (B's columns the MMA's M side, a strip of
 * shape.bn = 64 or 128 a block; the tokens its N side, padded to 8), a
 * cp.async ring of shape.stages K steps of shape.dec_bk, each strip's K
 * range cut
 * over shape.dec_split blocks whose f32 partials the last block to arrive
 * adds (a PARTIALS workspace and a COUNTERS word a strip, which every launch
 * leaves zero) before the group's epilogue (cg_gemm_epi.c's kf_epi). A is
 * K-major, batch 1; lda and ldb multiples of 8 elements (16-byte copies).
 * Its arguments are A's and B's addresses, then one pointer per param; the
 * grid is kf_cuda_gemm_decode_grid blocks of 128 threads. Errors as
 * kf_cuda_codegen_gemm_simt's; KF_ERR_UNSUPPORTED (the message says why)
 * for M past 64, a batch, an M-major A, a dtype other than bf16 / f16, a
 * SwiGLU pair, a norm in the kernel, a row or head-split epilogue. */
kf_status kf_cuda_codegen_gemm_decode(const kf_plan *plan, uint32_t group, const char *arch,
                                      const kf_cuda_gemm_shape *shape, const kf_mem *mem,
                                      kf_cuda_kernel *out);
/* The decode kernel's blocks (strips x dec_split) and shared memory (its
 * ring, or the 4 warps' f32 sums when they take more). */
uint32_t kf_cuda_gemm_decode_grid(const kf_cuda_gemm_shape *shape);
uint32_t kf_cuda_gemm_decode_smem(const kf_cuda_gemm_shape *shape);
/* The blocks an SM the decode kernel is compiled for (its launch bounds),
 * which the recipe's split fills: 2 (the ring sized for two), 1 for the TMA
 * form past M = 32; the register form 4 to 8 tokens, 2 past. */
uint32_t kf_cuda_gemm_decode_blocks_per_sm(const kf_cuda_gemm_shape *shape);

/* The statistics pre-pass of a GEMM group's norm prologue for the generated
 * GEMM (shape.a_norm): one row kernel over A's rows (the row stage's input, a
 * load) that writes, per row, the statistics `stats` (1u << KF_STAT_MEAN,
 * RSTD, RMS_RSTD) as f32 in enum order into a SCRATCH param keyed by the
 * loaded tensor, and nothing else; the GEMM normalizes A's tiles with them.
 * Errors: KF_ERR_NOT_FOUND (no such prologue). */
/* A GEMM group's norm prologue as an affine map of A's row input x per
 * element, n = (x - mean) * rstd * gamma + beta (LayerNorm) or x * rstd *
 * gamma (RMSNorm), gamma and beta loads that depend on k alone (either may be
 * absent), casts and roundings between them ignored: the fold keeps f32
 * where the reference rounds the norm's steps (templates/gemm_fold.cuh). */
typedef struct kf_cuda_gemm_fold {
    bool ln;
    uint32_t gamma, beta; /* LOAD nodes of the group's expressions, or KF_NONE */
    uint32_t rstd, mean;  /* STAT nodes (mean: KF_NONE for an RMSNorm) */
} kf_cuda_gemm_fold;

/* Whether group `group`'s norm prologue on A has that form (and *f it). */
bool kf_cuda_gemm_fold_of(const kf_plan *plan, uint32_t group, kf_cuda_gemm_fold *f);

/* The column load the epilogue of a LayerNorm-folded GEMM group adds to
 * its product first (h + bias: the accumulator's one reader, the bias read
 * nowhere else, one anchor, the product itself not written), which the
 * fold's column terms d can carry instead (d[n] + bias[n]); KF_NONE when
 * the group has none. */
uint32_t kf_cuda_gemm_fold_bias(const kf_plan *plan, uint32_t group);

/* Whether group `group`'s fold (kf_cuda_gemm_fold_of) can take gamma on A's
 * fragments (shape.a_gscale): an RMSNorm whose gamma, if any, is a
 * contiguous bf16 vector starting on a 16-byte boundary of its buffer (the
 * kernel's bulk copies; the executor binds GEMM arguments 16-byte aligned).
 * (The kernel also needs A bf16 and K-major, K a multiple of 8.) */
bool kf_cuda_gemm_gscale_takes(const kf_plan *plan, uint32_t group);

/* B of anchor `anchor` (0, or 1: a SwiGLU pair's second) as the fold
 * pre-pass reads it: logical [k, n], element (i, j) at i * sk + j * sn of
 * its buffer (one of the strides 1). bias: d takes the group's
 * kf_cuda_gemm_fold_bias too (the GEMM shape's fold_bias). */
typedef struct kf_cuda_fold_shape {
    int anchor;
    int64_t k, n, sk, sn;
    bool bias;
} kf_cuda_fold_shape;

/* The fold pre-pass of a GEMM group whose norm prologue kf_cuda_gemm_fold_of
 * takes (templates/gemm_fold.cuh): params IN B (the recipe points it at the
 * operand's view), IN gamma / beta, SCRATCH W = diag(gamma) B keyed by B's
 * tensor (B's dtype, [k, n] or [n, k] contiguous as B's major), and for a
 * LayerNorm SCRATCH c, d keyed by the anchor (f32, 2 n). Errors:
 * KF_ERR_NOT_FOUND (no such prologue), KF_ERR_INVALID_ARGUMENT (a bad shape). */
kf_status kf_cuda_codegen_gemm_fold(const kf_plan *plan, uint32_t group, const char *arch,
                                    const kf_mem *mem, const kf_cuda_fold_shape *fs,
                                    kf_cuda_kernel *out);

/* One fold of a pre-pass kernel: B of anchor fs.anchor of GEMM group `group`. */
typedef struct kf_cuda_fold_job {
    uint32_t group;
    kf_cuda_fold_shape fs;
} kf_cuda_fold_job;
#define KF_CUDA_PREPASS_JOBS 8

/* The pre-passes of a GEMM group, or of a sibling set, whose norm prologue
 * is folded into B, as ONE kernel (templates/gemm_prepass.cuh): with
 * `stats`, the row statistics of jobs[0].group's norm input (SCRATCH keyed
 * by that input, packed as kf_cuda_codegen_gemm_stats packs them), and the
 * fold of each of the n jobs' B (its params as kf_cuda_codegen_gemm_fold's;
 * every job's norm the same). Errors: KF_ERR_NOT_FOUND (a job's group has
 * no prologue the fold takes), KF_ERR_UNSUPPORTED (statistics of an input
 * that is not a contiguous f32 / f16 / bf16 row-major matrix, more than
 * KF_CUDA_PREPASS_JOBS jobs, too many params), KF_ERR_INVALID_ARGUMENT. */
kf_status kf_cuda_codegen_gemm_prepass(const kf_plan *plan, const kf_cuda_fold_job *jobs,
                                       uint32_t n, bool stats, const char *arch, const kf_mem *mem,
                                       kf_cuda_kernel *out);

kf_status kf_cuda_codegen_gemm_stats(const kf_plan *plan, uint32_t group, const char *arch,
                                     const kf_mem *mem, unsigned stats, kf_cuda_kernel *out);

/* The statistics (1u << KF_STAT_*) the norm prologue of GEMM group `group`
 * reads, which kf_cuda_codegen_gemm_stats writes and shape.a_norm's kernel
 * reads, packed in enum order; 0 when none or one the pre-pass lacks. */
unsigned kf_cuda_gemm_norm_stats(const kf_plan *plan, uint32_t group);

/* Dispatches to the entry point of `role` (KF_CUDA_ROLE_GEMM needs a shape:
 * KF_ERR_INVALID_ARGUMENT here). */
kf_status kf_cuda_codegen(const kf_plan *plan, uint32_t group, kf_cuda_role role, const char *arch,
                          const kf_mem *mem, kf_cuda_kernel *out);

/* Frees out->source (with `mem`) and clears the kernel. Accepts a zeroed or
 * failed kernel. */
void kf_cuda_kernel_release(const kf_mem *mem, kf_cuda_kernel *k);

/* grid.x that fills a device with `sm_count` SMs: min(ceil(work / per block),
 * sm_count * blocks_per_sm), at least 1. */
uint32_t kf_cuda_kernel_grid(const kf_cuda_kernel *k, int sm_count);

/* Compiling and caching a kernel is runtime/'s job (codegen/ does not include
 * runtime/): runtime/cuda_kernel.h has kf_cuda_kernel_compile_options,
 * kf_cuda_kernel_cache_key (the key `kfuse aot` stores under and the execution
 * side looks up) and kf_cuda_kernel_cubin (get-or-compile through the cache). */

#endif /* KF_CODEGEN_CUDA_CODEGEN_H */
