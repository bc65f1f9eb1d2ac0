/*
 * cg_attention.c -- the fused attention kernels of an ATTENTION group:
 *   FA2  templates/attention.cuh: mma.sync m16n8k16, ldmatrix, cp.async K/V
 *        tiles, online softmax in registers, for sm_80 and later;
 *   SM90 templates/attention_sm90.cuh (sm_90a only): Q, K, V by TMA into an
 *        mbarrier ring, wgmma for Q.K^T and P.V, a producer and two consumer
 *        warpgroups; it takes what FA2 takes when every operand fits a TMA
 *        map (at most 3 batch axes that are not broadcast, 16-byte strides),
 *        and its maps (kf_cuda_attention_sm90_maps) are the recipe's TMAP
 *        arguments. Both share the parameters and the score functions.
 *
 *   group ──► supported? (kf_cuda_attention_supported: dtypes, head dim,
 *             operand layouts, writes; else the recipe keeps the unfused
 *             fallback and the report says why)
 *        ──► params: Q, K, V (their bases: views are read through their
 *             strides, a broadcast head axis -- GQA / MQA -- has stride 0, so
 *             nothing is copied), O, then the score expression's loads
 *        ──► source: the head (common.cuh), the sizes, kf_bh_offsets (the
 *             element offsets of each operand for a flattened batch x head
 *             index), kf_score_full (the whole score expression, mask
 *             included) and kf_score_inner (the mask's where() replaced by its
 *             kept branch: for tiles wholly inside a CAUSAL / SLIDING_WINDOW
 *             mask), then templates/attention.cuh
 *
 * Numerics: the SCORE leaf is the f32 accumulator of Q.K^T, unrounded, as a
 * GEMM's epilogue takes its accumulator (kf_ir_eval_fused, the judge's second
 * reference: the generated GEMM and cuBLASLt's epilogues do the same), and
 * every other node that stands for a tensor rounds as the reference stores it
 * (cg_emit_nodes); P is rounded to the mma's operand type before it is
 * normalized. Rounding the leaf as well (the first version) made q.k^T the
 * one product in the block rounded before its epilogue while the q, k, v
 * GEMMs' were not: the scores then matched neither reference, and on the
 * GPT-2 block's ill-conditioned attention the output's error was an
 * independent draw, 2.96x the reference's on one seed of 200 (H100,
 * b2329e9). That holds for the rounded form (KF_CUDA_RECIPE_ATTENTION_
 * ROUNDED_SCORE) and the FA2 kernel. The sm_90a kernel's f32 scores (the
 * default) round no score node at all: a scale of Q.K^T folds into the
 * softmax (fold_scale), and any other score expression keeps every float node
 * in f32 (c.score_f32: ALiBi's bias and sum, a softcap's quotient, tanh and
 * product; att17), as the exact value does -- the value the GPU tests judge
 * against (kf_graph_check: within twice the reference's own error), which the
 * unrounded scores are closer to than the reference's rounded ones. (Not
 * rounding them was tried at 03aa5c7, when the tests compared against the
 * reference's values: an ALiBi bias of slope x 190 in bf16 has an ulp of 2,
 * and the kernel's scores then differed from the reference's by 8.5%.) Two
 * shortcuts stay, each under the rounding that follows it in the rounded form:
 * a division by a constant is a multiply (div_by_mul) and tanh is
 * tanh.approx.f32 (relative error 2^-11): the accurate tanhf and division made
 * a softcap score cost more than the two GEMMs (5.74 against 2.40 ms, H100).
 */
#include "codegen/cuda/cg.h"

#include <math.h>

#include "codegen/cuda/cuda_recipe.h"
#include "codegen/cuda/templates.h"

/* Tile shape: ATTN_BR query rows (warps of 16 rows) x 64 keys per tile.
 * KF_ATTN_BR (a build-time define, for measuring) may set 128 rows, 8 warps,
 * one block an SM: on an H100 (2a4c13b, B4 H32 S4096 D128 bf16) that ran
 * non-causal 5.48 ms against 4.97 for 64 rows, softcap 3.70 against 3.25,
 * causal 2.47 against 2.44; halving the K/V tile traffic did not pay for
 * losing the second block's overlap. */
#ifndef KF_ATTN_BR
#define KF_ATTN_BR 64
#endif
#define ATTN_BR KF_ATTN_BR
#define ATTN_BC 64
_Static_assert(ATTN_BR == 64 || ATTN_BR == 128, "64 or 128 query rows a block");

/* The sm_90a kernel: 128 query rows (two consumers of 64) x 128 keys a tile;
 * a ring of 3 K/V stages for head dim 64 (two Q buffers of 16 KiB + 96 KiB),
 * 2 for 128 (2 x 32 + 128 KiB: 193 KiB of the 227 an SM gives a block), as
 * FlashAttention-3 sizes its own ring for these head dims. */
#define SM90_BR 128
#define SM90_BC 128
/* Q buffers: 2, so that the next item's Q lands while the block still runs
 * the last one (templates/attention_sm90.cuh). KF_SM90_QBUF (a build-time
 * define, for measuring) may set 1, the kernel before 2 buffers. */
#ifndef KF_SM90_QBUF
#define KF_SM90_QBUF 2
#endif
_Static_assert(KF_SM90_QBUF == 1 || KF_SM90_QBUF == 2, "one or two Q buffers");
/* KF_SM90_STAGES_D64 (build-time, for measuring): the ring's stages at head
 * dim 64 (3; at 128, two Q buffers leave room for 2). */
#ifndef KF_SM90_STAGES_D64
#define KF_SM90_STAGES_D64 3
#endif
_Static_assert(KF_SM90_STAGES_D64 >= 2 && KF_SM90_STAGES_D64 <= 6, "2 to 6 stages at head dim 64");
/* KF_SM90_STAGES_D128 (build-time, for measuring): the ring's stages at head
 * dim 128 (2; 3 fits 227 KiB with one Q buffer alone, KF_SM90_QBUF=1). Both
 * (bs17, H100, efee87e, the next process after the default's): block-sparse
 * 0.9170 ms against 0.9125, dense 128-key 1.7026 against 1.7220, causal
 * 0.9106 against 0.9160 -- no gain where the keys are sparse, the rest within
 * two processes' spread. */
#ifndef KF_SM90_STAGES_D128
#define KF_SM90_STAGES_D128 2
#endif
_Static_assert(KF_SM90_STAGES_D128 == 2 || (KF_SM90_STAGES_D128 == 3 && KF_SM90_QBUF == 1),
               "2 stages at head dim 128, or 3 with one Q buffer (shared memory)");
static uint32_t sm90_stages(int64_t d) {
    return d == 64 ? KF_SM90_STAGES_D64 : KF_SM90_STAGES_D128;
}
/* KF_SM90_L2_PREFETCH (build-time, for measuring; 0: off): the producer
 * asks L2 for the K and V tiles this many tiles ahead of the one it loads
 * (cp.async.bulk.prefetch.tensor), so the blocks that walk one head's keys
 * together meet DRAM's latency less often than once a tile. */
#ifndef KF_SM90_L2_PREFETCH
#define KF_SM90_L2_PREFETCH 0
#endif
/* KF_SM90_DESC_ADD (build-time, for measuring; 1: the default): the
 * kernel's wgmma descriptors as one per tile plus each step's offset
 * (templates/attention_sm90.cuh, kf_desc_at) -- the same bits, fewer
 * uniform instructions a key tile (35 of the head-dim-64 loop's). */
#ifndef KF_SM90_DESC_ADD
#define KF_SM90_DESC_ADD 1
#endif
/* KF_SM90_LAZY_RESCALE (build-time, for measuring; 0: off): the sm_90a
 * kernel rescales O, l and m only when a warp's row max grew past 2^8
 * (templates/attention_sm90.cuh), not at every key tile, at head dim 64 too
 * (at 128 it does by default since att16: KF_CUDA_RECIPE_ATTENTION_EAGER_
 * RESCALE has the measurements). It takes 46
 * instructions out of a head-dim-64 key tile (the rescale's 32 FMULs and
 * 2 exp2s), but puts a warp vote and a branch between the row max and the
 * exp2s, and the kernel is not issue-bound there: H200, B16 H16 S1024 D64
 * causal, two interleaved rounds, 0.121 / 0.122 ms with it against 0.115 /
 * 0.116 without (NVIDIA-H200-2216768-attention-ab.json). Its GPU numerics
 * passed (test_cuda_exec's sm_90a and log-sum-exp cases at 2216768). */
#ifndef KF_SM90_LAZY_RESCALE
#define KF_SM90_LAZY_RESCALE 0
#endif
/* KF_SM90_SCALE_FOLD (build-time, for measuring; 1: the default): a score
 * that is a power-of-two scale of Q.K^T (then, at most, a -inf mask) leaves
 * the scale to the softmax's exp2 (fold_scale below): one FMUL a score less,
 * 64 of the head-dim-64 loop's 613 instructions a key tile. */
#ifndef KF_SM90_SCALE_FOLD
#define KF_SM90_SCALE_FOLD 1
#endif
/* KF_SM90_EXP2_POLY_D128 / _D64 (build-time, for measuring): of every 8
 * column groups of a key tile, how many take the softmax's exp2 as an
 * FMA-pipe polynomial (templates/attention_sm90.cuh, kf_ex2_poly: 8
 * instructions on the FMA and ALU pipes for one MUFU.EX2) at head dim 128 and
 * 64 where KF_CUDA_RECIPE_ATTENTION_EXP2_POLY asks for the polynomial (by
 * default every exp2 is MUFU.EX2). The model it was made on: MUFU takes 16
 * lanes a clock an SM, so a key tile's 66 exp2s hold a consumer warp's
 * scheduler 528 clocks, the longest stretch of its softmax; a quarter moved
 * (16 exp2s: 112 more issue slots, 128 MUFU clocks less) at head dim 128, an
 * eighth at 64 (where a scheduler already issues about 446 a warp a tile
 * beside 512 tensor clocks a consumer). Measured (H100, 9c0c856, where it was
 * the default): slower, 3-6% causal, 5-15% non-causal, 3% GQA, 1% at head
 * dim 64, half the exp2s slower still; only a softcap, whose tanh also takes
 * MUFU, ran faster (2.6%, one round). The kernel's exp2 phase is not MUFU's
 * pace: the extra instructions cost more than the MUFU clocks they free. */
#ifndef KF_SM90_EXP2_POLY_D128
#define KF_SM90_EXP2_POLY_D128 2
#endif
#ifndef KF_SM90_EXP2_POLY_D64
#define KF_SM90_EXP2_POLY_D64 1
#endif
/* A softcap's tanh as an FMA-pipe rational in a share of a key tile's column
 * groups (14 instructions for one MUFU.TANH; KF_CUDA_RECIPE_ATTENTION_
 * TANH_POLY, kernel letter h) measured slower and was retired by win18 (the
 * rational is in README's sc14 section): every tanh is MUFU.TANH. A bounded
 * score with a tanh (a softcap) at head
 * dim 128 takes KF_SM90_EXP2_POLY_D128 of its exp2s by polynomial by default
 * (kernel letter e; KF_CUDA_RECIPE_ATTENTION_SOFTCAP_MUFU: every exp2 on
 * MUFU). The model: a consumer warp's inner softcap key tile (SASS, B4 H32
 * S4096 D128 at c6b8cf2, 64 scores a thread) issues 803 instructions and 128
 * MUFU ops (64 MUFU.TANH, 64 MUFU.EX2), 1024 of MUFU's clocks at 4 lanes a
 * clock a scheduler -- the other consumer's whole GEMM time -- beside 238
 * ALU (192 F2FP) and 335 FMA-pipe instructions; each exp2 moved costs 7
 * issue slots (916 a tile with a quarter), each tanh 13 (1126 with a quarter
 * of both), for 8 MUFU clocks. Measured (H100, a89fcf4, two rounds, the
 * bench's softcap and its 8x wider scores): the exp2 share alone 1.143 /
 * 1.145 ms and 1.191 / 1.194, every op on MUFU 1.156 / 1.180 and 1.215 /
 * 1.229, the tanh share alone 1.268 / 1.251 and 1.302 / 1.293, both shares
 * 1.259 / 1.273 and 1.305 / 1.302, half the tanhs and a quarter of the
 * exp2s 1.352 / 1.334 and 1.422 / 1.420: the issue slots, not MUFU's
 * clocks, set the pace of a moved tanh, so none moves by default. */
_Static_assert(KF_SM90_EXP2_POLY_D128 >= 0 && KF_SM90_EXP2_POLY_D128 <= 8 &&
                   KF_SM90_EXP2_POLY_D64 >= 0 && KF_SM90_EXP2_POLY_D64 <= 8,
               "exp2s by polynomial: 0 to 8 of every 8 column groups");
/* The sm_90a kernel's softmax reductions (a key tile's row max and row sum)
 * as trees by default at head dim 128 (KF_TREE_SOFTMAX: 4 partial maxima
 * and sums a row, 7 FMNMX deep into the row max's shuffle where ptxas's
 * chain is 17). A whole tree (6 deep) measured faster than the chains on an
 * H100 at 9c0c856, causal B4 H32 S4096 0.916 / 0.921 ms against 0.935 /
 * 0.941 in two rounds (H200, 4784014: 0.903 against 0.924), but its first
 * level's 32 values spilled where the chains do not (Skv 300-520); the
 * partial maxima spill where the chains do and nowhere else. Head dim 64
 * keeps the chains until measured; KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX asks
 * for trees there, KF_CUDA_RECIPE_ATTENTION_CHAIN_SOFTMAX for chains
 * everywhere. */
static bool sm90_trees(const kf_attn_info *at, uint64_t rflags) {
    if (rflags & KF_CUDA_RECIPE_ATTENTION_CHAIN_SOFTMAX)
        return false;
    return (rflags & KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX) || at->d == 128;
}
/* The sm_90a kernel's shape for one group (sm90_shape_of): its key tile
 * width, ring stages, Q buffers, the producer's and consumers' registers
 * (setmaxnreg; they add up to 168 x 384), its CTAs a cluster, and the
 * ragged last key tile's width (0: bc, as every tile). */
typedef struct sm90_shape {
    int bc, bcl;
    uint32_t stages, qbuf;
    int preg, creg;
    int cluster;
} sm90_shape;

/* The key tile of the wide form, the default where nothing cuts tiles (no
 * causal, window or block-sparse mask) at head dim 128: 176 keys a tile, as
 * FlashAttention-3 shapes that case: 1.375x the work a key tile for the same
 * per-tile costs (the barriers, the row max's shuffles, alpha, O's rescale
 * of 64 FMULs a thread). Its S accumulator (88 floats), P (44 registers) and
 * O (64) fit the consumers' 232 registers with no spill (FlashAttention-3
 * gives them 240 and the producer 24: 24 spilled kfuse's producer, whose
 * batch-head coordinates are 64-bit divisions, 40 bytes in the GQA case),
 * and two 88 KiB stages leave room for one Q buffer. Once the f32 scores
 * took the scale (ac341ae) it paid: H100, non-causal B4 H32 S4096, 1.679 ms
 * against 128 keys' 1.784 (cuDNN 1.681) in one run; before, with every score
 * rounded twice, the two were alike (7905c13: 1.902 / 1.901).
 * KF_CUDA_RECIPE_ATTENTION_NARROW_KEYS keeps 128 keys for comparing
 * (H100, efee87e: 1.7220 ms against 176 keys' 1.5982). 192 keys spill at
 * the consumers' 232 registers (bs17: 48 bytes at Skv 4224 = 22 x 192, P's
 * registers stored and reloaded around P.V in the main loop: S 96, P 48 and
 * O 64 a thread). */
#ifndef KF_SM90_BC_WIDE
#define KF_SM90_BC_WIDE 176
#endif
/* Whether the sm_90a kernel joins its work items (templates/
 * attention_sm90.cuh, KF_ITEM_OVERLAP) at head dim 128 by default, as it
 * does at 64 (gen, below; the recipe flags ITEMS_APART and ITEMS_JOINED
 * ask for either form). Joined against apart (bench/results, ovl14 JSON):
 *
 *   case (bf16)                   H100, f56c649      H200, 39bbdf8
 *   GPT-2 causal B16 H16 S1024 D64  0.1105 / 0.1151    0.1087 / 0.1152 ms
 *   causal B4 H32 S4096 D128        0.9162 / 0.9067    0.9019 / 0.9073
 *   GQA 32:8 causal                 0.9102 / 0.8981    0.8921 / 0.8958
 *   window 1024                     0.5456 / 0.5221    0.5297 / 0.5219
 *   block-sparse, 52% kept          0.9544 / 0.9330    0.9522 / 0.9337
 *
 * (at f56c649 O's row guard was a lane-divergent branch inside the item
 * loop, which took ptxas's wgmma descriptor arithmetic off the uniform
 * datapath, R2UR 145 where 37; at 39bbdf8 the main loop is as long as the
 * form apart's, causal 771 instructions a step against 757, window 1069
 * against 1082). Head dim 64 wins 4-6%; at 128, where items see 8-16 key
 * tiles, causal and GQA are even and window and block-sparse 1.5-2% slower
 * joined, so 128 keeps the items apart (0); ITEMS_JOINED measures it. Again
 * for block-sparse (bs17, H100, efee87e, with the lazy rescale and the edge
 * branch): 0.9246 joined against 0.9125 ms, A B B A 1.0135x. */
#ifndef KF_SM90_JOIN_D128
#define KF_SM90_JOIN_D128 0
#endif
_Static_assert(KF_SM90_BC_WIDE % 16 == 0 && KF_SM90_BC_WIDE <= 192, "a wide key tile");
#define SM90_BC_WIDE KF_SM90_BC_WIDE

/* Whether group g takes the 2-CTA cluster form (KF_CUDA_RECIPE_ATTENTION_
 * CLUSTER2): no mask that cuts tiles (both CTAs walk every key tile of one
 * batch-head), no block-sparse map, head dim 128, an even count of query
 * tiles (a cluster takes query tiles 2p and 2p + 1). */
static bool sm90_cluster_ok(const kf_group *g) {
    const kf_attn_info *at = &g->attn;
    return cg_attn_mask_skip(g) == 0 && at->mask != KF_MASK_BLOCK_SPARSE && at->d == 128 &&
           ((at->sq + SM90_BR - 1) / SM90_BR) % 2 == 0;
}

/* Whether group g's score expression reads a tensor (an additive mask): its
 * loads' registers leave the sm_90a consumers less room. */
static bool score_loads(const kf_group *g) {
    for (uint32_t i = 0; i < g->n_expr; i++)
        if (g->expr[i].kind == KF_EXPR_LOAD)
            return true;
    return false;
}

/* Whether the score expression holds a bf16 tanh (a softcap's). */
static bool has_tanh(const kf_group *g) {
    for (uint32_t i = 0; i < g->n_expr; i++)
        if (g->expr[i].kind == KF_EXPR_OP && g->expr[i].op == KF_OP_TANH &&
            g->expr[i].dtype == KF_DTYPE_BF16)
            return true;
    return false;
}

static sm90_shape sm90_shape_of(const kf_group *g, uint64_t rflags) {
    const kf_attn_info *at = &g->attn;
    sm90_shape sh = {SM90_BC, 0, sm90_stages(at->d), KF_SM90_QBUF, 40, 232, 1};
    /* wide where the keys make 3 tiles or more (with 2, the second ragged --
     * Skv 256 or 300 -- ptxas lays the one main-loop step out straight and
     * spills 64-328 bytes; long key sequences are where it pays) and the
     * score reads no tensor (an additive mask's loads spilled 16 bytes) */
    const bool loads = score_loads(g);
    if (!(rflags & KF_CUDA_RECIPE_ATTENTION_NARROW_KEYS) && at->d == 128 &&
        cg_attn_mask_skip(g) == 0 && at->mask != KF_MASK_BLOCK_SPARSE &&
        at->skv > 2 * SM90_BC_WIDE && !loads) {
        sh.bc = SM90_BC_WIDE;
        sh.stages = 2;
        sh.qbuf = 1;
    }
    if ((rflags & KF_CUDA_RECIPE_ATTENTION_CLUSTER2) && sm90_cluster_ok(g))
        sh.cluster = 2;
    /* the wide form's ragged last key tile as narrow as its keys, rounded up
     * to 16 (KF_BC_LAST): every item walks every tile there, so the last is
     * the same for all and its width a constant; the fourth or later (with
     * three, Skv 360-400, the consumers spilled 96-136 bytes). Non-causal Skv 4096: 23
     * tiles of 176 and one of 48, where 24 full ones multiplied and
     * exponentiated 4224 keys a row (ncu, H100, c6b8cf2: the tensor pipe
     * busy 3.1% more cycles than cuDNN's kernel; after, as many as cuDNN's,
     * and 1.6422 ms against the full tile's 1.6743, cuDNN 1.6230, H100,
     * 727df10, one run). 32 keys at least (the tree
     * softmax's 4 partial maxima: 16 or fewer keys take 32) and 64 at most:
     * from 80 on the consumers
     * spilled (NVRTC 13.0, Sq 500: Skv 608 24 bytes, 640 184, 3968 88, 4000
     * 240, 4032 336; 560, 592, 3904, 3936 and 4096 none), and there the
     * full tile wastes 96 keys or fewer. KF_CUDA_RECIPE_ATTENTION_FULL_LAST_
     * TILE keeps the full-width last tile (the form before) for comparing. */
    const int64_t rem = at->skv - (at->skv - 1) / sh.bc * sh.bc;
    const int64_t bcl = rem <= 32 ? 32 : (rem + 15) / 16 * 16;
    if (!(rflags & KF_CUDA_RECIPE_ATTENTION_FULL_LAST_TILE) && sh.bc == SM90_BC_WIDE &&
        sh.bc != SM90_BC && sh.cluster == 1 && at->skv > 3 * sh.bc && bcl <= 64)
        sh.bcl = (int)bcl;
    return sh;
}

static uint32_t sm90_smem(int64_t d, const sm90_shape *sh) {
    return 1024u + sh->qbuf * (uint32_t)(SM90_BR * d * 2) +
           sh->stages * (uint32_t)(2 * sh->bc * d * 2);
}

static uint32_t base_of(const kf_plan *plan, uint32_t t, int64_t *strides, int64_t *off) {
    const kf_tensor *x = plan->graph->nodes[t];
    uint32_t g = plan->group_of ? plan->group_of[t] : KF_NONE;
    *off = 0;
    if (g != KF_NONE && plan->groups[g].kind == KF_GROUP_VIEW) {
        memcpy(strides, plan->groups[g].view_strides, sizeof(int64_t) * KF_MAX_RANK);
        *off = plan->groups[g].view_offset;
        return kf_plan_buffer_of(plan, plan->groups[g].view_base);
    }
    int64_t acc = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
        strides[d] = acc;
        acc *= x->dims[d];
    }
    return t;
}

/* rows_first_when_plain: the operand's logical layout is [.., rows, cols]
 * without its transpose flag (Q, V), else [.., cols, rows] (K as matmul's B). */
void cg_attn_op_layout(const kf_plan *plan, uint32_t t, bool rows_first_when_plain, bool trans,
                       int R, cg_attn_op *o) {
    const kf_tensor *x = plan->graph->nodes[t];
    int64_t s[KF_MAX_RANK] = {0};
    o->base = base_of(plan, t, s, &o->off);
    int r = x->rank;
    bool rows_first = rows_first_when_plain != trans;
    o->s_row = rows_first ? s[r - 2] : s[r - 1];
    o->s_col = rows_first ? s[r - 1] : s[r - 2];
    int64_t rows = rows_first ? x->dims[r - 2] : x->dims[r - 1];
    if (rows == 1)
        o->s_row = 0;
    memset(o->bstride, 0, sizeof o->bstride);
    for (int d = 0; d < R - 2; d++) {
        int ax = d - (R - r);
        if (ax >= 0 && x->dims[ax] != 1)
            o->bstride[d] = s[ax];
    }
}

/* Why the fused kernel cannot run group g for arch (NULL: it can). */
static const char *unsupported(const kf_plan *plan, const kf_group *g, const char *arch,
                               cg_attn_op ops[3], char *why, size_t size) {
    const kf_attn_info *at = &g->attn;
    const kf_graph *gr = plan->graph;
    if (g->kind != KF_GROUP_ATTENTION || at->score == KF_NONE)
        return snprintf(why, size, "not an attention group"), why;
    if (atoi(arch + 3) < 80)
        return snprintf(why, size, "%s has no bf16 mma.sync (sm_80 and later)", arch), why;
    kf_dtype dt = gr->nodes[at->q]->dtype;
    if (dt != KF_DTYPE_BF16 && dt != KF_DTYPE_F16)
        return snprintf(why, size, "dtype %s (the tensor-core kernels take bf16 and f16)",
                        kf_dtype_name(dt)),
               why;
    const uint32_t same[] = {at->k, at->v, at->qk, at->softmax, at->pv};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        if (gr->nodes[same[i]]->dtype != dt)
            return snprintf(why, size, "Q, K, V, the scores, P and O are not all %s",
                            kf_dtype_name(dt)),
                   why;
    if (at->d != at->dv || (at->d != 64 && at->d != 128))
        return snprintf(why, size, "head dim %lld / %lld (the tensor-core kernels take 64 and 128)",
                        (long long)at->d, (long long)at->dv),
               why;
    int R = g->rank;
    const kf_tensor *pv = gr->nodes[at->pv];
    if (R < 2 || pv->rank != R || memcmp(pv->dims, g->dims, sizeof(int64_t) * (size_t)(R - 2)))
        return snprintf(why, size, "the output's batch dims differ from the scores'"), why;
    for (uint32_t w = 0; w < g->n_writes; w++)
        if (g->writes[w] != at->out && g->writes[w] != at->lse)
            return snprintf(why, size, "the group writes a tensor besides its output"), why;
    if (at->lse != KF_NONE && gr->nodes[at->lse]->dtype == KF_DTYPE_F64)
        return snprintf(why, size, "the log-sum-exp is f64 (the kernels write f32, bf16, f16)"),
               why;
    /* O is stored as rows of D contiguous elements, two at a time */
    for (int d = 0; d < R - 1; d++)
        if (at->o_strides[d] % 2 != 0 || at->o_strides[R - 1] != 1)
            return snprintf(why, size, "O's strides are not even with a unit last one"), why;
    int64_t bh = 1;
    for (int d = 0; d < R - 2; d++)
        bh *= g->dims[d];
    if (at->sq > INT32_MAX - ATTN_BR || at->skv > INT32_MAX - ATTN_BC ||
        bh > INT64_MAX / (at->sq + ATTN_BR))
        return snprintf(why, size, "too large for 32-bit row indices"), why;
    cg_attn_op_layout(plan, at->q, true, at->q_transposed, R, &ops[0]);
    cg_attn_op_layout(plan, at->k, false, at->k_transposed, R, &ops[1]);
    cg_attn_op_layout(plan, at->v, true, at->v_transposed, R, &ops[2]);
    static const char *const names[3] = {"Q", "K", "V"};
    for (int i = 0; i < 3; i++) {
        bool ok = ops[i].s_col == 1 && (ops[i].s_row * 2) % 16 == 0 && (ops[i].off * 2) % 16 == 0;
        for (int d = 0; d < R - 2 && ok; d++)
            ok = (ops[i].bstride[d] * 2) % 16 == 0;
        if (!ok)
            return snprintf(why, size,
                            "%s is not read as 16-byte rows (its head dim must have stride 1 "
                            "and its other strides and offset be multiples of 8 elements)",
                            names[i]),
                   why;
    }
    return NULL;
}

bool kf_cuda_attention_supported(const kf_plan *plan, uint32_t group, const char *arch, char *why,
                                 size_t size) {
    if (!plan || group >= plan->n_groups || !arch || strncmp(arch, "sm_", 3) != 0) {
        snprintf(why, size, "bad arguments");
        return false;
    }
    cg_attn_op ops[3];
    return unsupported(plan, &plan->groups[group], arch, ops, why, size) == NULL;
}

/* The extent of the batch axes inside score-space batch axis ax (those
 * after it, up to the rows): bh / it % dims[ax] is bh's coordinate on ax. */
static int64_t bh_inner(const kf_group *g, int ax) {
    int64_t inner = 1;
    for (int d = ax + 1; d < g->rank - 2; d++)
        inner *= g->dims[d];
    return inner;
}

/* The TMA map axes of operand o beyond (head dim, rows): its batch axes of
 * the score space that it does not broadcast, innermost first, into ax[]
 * (at most 3: a map has 5 dims); -1 when there are more. */
static int map_axes(const kf_group *g, const cg_attn_op *o, int ax[3]) {
    int n = 0;
    for (int d = g->rank - 3; d >= 0; d--) {
        if (!o->bstride[d])
            continue;
        if (n == 3)
            return -1;
        ax[n++] = d;
    }
    return n;
}

/* Why the sm_90a kernel cannot run group g (NULL: it can). */
static const char *unsupported_sm90(const kf_plan *plan, const kf_group *g, const char *arch,
                                    cg_attn_op ops[3], char *why, size_t size) {
    if (unsupported(plan, g, arch, ops, why, size))
        return why;
    if (strcmp(arch, "sm_90a") != 0)
        return snprintf(why, size, "%s is not sm_90a (wgmma, TMA)", arch), why;
    const kf_attn_info *at = &g->attn;
    if (at->mask == KF_MASK_BLOCK_SPARSE && at->mask_node == at->score &&
        (at->keep_bq % SM90_BR != 0 || at->keep_bk % SM90_BC != 0))
        return snprintf(why, size,
                        "block-sparse keep map tiles %lldx%lld are not whole %dx%d kernel tiles "
                        "(the mma.sync kernel tests tiles that mix kept and dropped keys)",
                        (long long)at->keep_bq, (long long)at->keep_bk, SM90_BR, SM90_BC),
               why;
    static const char *const names[3] = {"Q", "K", "V"};
    for (int i = 0; i < 3; i++) {
        int ax[3];
        if (map_axes(g, &ops[i], ax) < 0)
            return snprintf(why, size, "%s has more than 3 batch axes (one TMA map)", names[i]),
                   why;
        bool ok = ops[i].s_row * 2 < ((int64_t)1 << 40);
        for (int d = 0; d < g->rank - 2 && ok; d++)
            ok = ops[i].bstride[d] * 2 < ((int64_t)1 << 40);
        if (!ok)
            return snprintf(why, size, "%s has a stride past 2^40 bytes (TMA)", names[i]), why;
    }
    return NULL;
}

bool kf_cuda_attention_sm90_supported(const kf_plan *plan, uint32_t group, const char *arch,
                                      char *why, size_t size) {
    if (!plan || group >= plan->n_groups || !arch || strncmp(arch, "sm_", 3) != 0) {
        snprintf(why, size, "bad arguments");
        return false;
    }
    cg_attn_op ops[3];
    return unsupported_sm90(plan, &plan->groups[group], arch, ops, why, size) == NULL;
}

kf_status kf_cuda_attention_sm90_maps(const kf_plan *plan, uint32_t group, uint64_t rflags,
                                      kf_cuda_tmap maps[3], uint32_t bases[3], int64_t offsets[3]) {
    char why[160];
    cg_attn_op ops[3];
    if (!plan || group >= plan->n_groups || !maps || !bases || !offsets ||
        unsupported_sm90(plan, &plan->groups[group], "sm_90a", ops, why, sizeof why))
        return KF_ERR_UNSUPPORTED;
    const kf_group *g = &plan->groups[group];
    const kf_attn_info *at = &g->attn;
    kf_dtype dt = plan->graph->nodes[at->q]->dtype;
    const sm90_shape sh = sm90_shape_of(g, rflags);
    for (int i = 0; i < 3; i++) {
        kf_cuda_tmap *t = &maps[i];
        memset(t, 0, sizeof *t);
        int ax[3];
        int n = map_axes(g, &ops[i], ax);
        t->dtype = dt;
        t->rank = 2 + n;
        t->dims[0] = (uint64_t)at->d;
        t->dims[1] = (uint64_t)(i == 0 ? at->sq : at->skv);
        /* a row stride over one row is never taken: any valid one will do */
        int64_t rs = ops[i].s_row ? ops[i].s_row : at->d;
        t->strides[0] = (uint64_t)(rs * 2);
        for (int a = 0; a < n; a++) {
            t->dims[2 + a] = (uint64_t)g->dims[ax[a]];
            t->strides[1 + a] = (uint64_t)(ops[i].bstride[ax[a]] * 2);
        }
        t->box[0] = 64;
        /* K and V: a cluster's CTAs each load (and multicast) half a tile */
        t->box[1] = i == 0 ? SM90_BR : (uint32_t)(sh.bc / sh.cluster);
        for (int a = 2; a < KF_CUDA_TMAP_MAX_RANK; a++)
            t->box[a] = 1;
        t->swizzle = 128;
        bases[i] = ops[i].base;
        offsets[i] = ops[i].off;
    }
    return KF_OK;
}

/* Whether the mask lets a kernel skip tiles: 1 CAUSAL, 2 SLIDING_WINDOW,
 * 3 BLOCK_SPARSE, 0 not. A sliding window whose last rows keep no key at all
 * (sq - window >= skv) is not skipped: those rows are the reference's, over
 * every key. */
int cg_attn_mask_skip(const kf_group *g) {
    const kf_attn_info *at = &g->attn;
    if (at->mask_node != at->score)
        return 0;
    if (at->mask == KF_MASK_BLOCK_SPARSE && at->keep_node != KF_NONE)
        return 3;
    if (at->mask == KF_MASK_CAUSAL)
        return 1;
    if (at->mask == KF_MASK_SLIDING_WINDOW && at->window > 0 && at->sq - at->window < at->skv)
        return 2;
    return 0;
}

void kf_cuda_attention_tiles(const kf_plan *plan, uint32_t group, bool sm90, uint64_t *visited,
                             uint64_t *total) {
    kf_cuda_attention_tiles_of(plan, group, sm90 ? SM90_BR : ATTN_BR, sm90 ? SM90_BC : ATTN_BC,
                               visited, total);
}

void kf_cuda_attention_tiles_of(const kf_plan *plan, uint32_t group, int64_t br, int64_t bc,
                                uint64_t *visited, uint64_t *total) {
    *visited = *total = 0;
    if (!plan || group >= plan->n_groups || plan->groups[group].kind != KF_GROUP_ATTENTION ||
        br < 1 || bc < 1)
        return;
    const kf_group *g = &plan->groups[group];
    const kf_attn_info *at = &g->attn;
    int skip = cg_attn_mask_skip(g);
    int64_t nqt = (at->sq + br - 1) / br, nkt = (at->skv + bc - 1) / bc;
    /* the kernels' own bounds (templates/attention.cuh, attention_sm90.cuh) */
    for (int64_t qt = 0; qt < nqt; qt++) {
        int64_t q0 = qt * br, lo = 0, hi = at->skv;
        if (skip == 1 || skip == 2) /* block-sparse (3): the map's, known at run time */
            hi = q0 + br < at->skv ? q0 + br : at->skv;
        if (skip == 2)
            lo = q0 - at->window + 1 > 0 ? q0 - at->window + 1 : 0;
        int64_t t_lo = lo / bc, t_hi = (hi + bc - 1) / bc;
        *visited += (uint64_t)(t_hi > t_lo ? t_hi - t_lo : 0);
        *total += (uint64_t)nkt;
    }
}

/* The block-sparse walk in shared memory (the sm_90a kernel, bs_table_ok):
 * kf_bs_build(KF_PARAMS), which the block's 384 threads call once before
 * their roles split, reads the map (one map shared by every batch-head) into
 *   kf_bs_nx[qt][j]: the first key tile >= j (j <= nkt) that query tile qt
 *     visits (nkt: none; j itself where qt holds an all-dropped map row, whose
 *     tile visits every key tile), so kf_bs_next is one shared-memory load
 *     where it was a walk of global loads, each waiting on the last, in the
 *     producer and in every consumer thread, on every key tile;
 *   kf_bs_dz[qt]: qt holds an all-dropped row (kf_bs_dense);
 *   kf_bs_ord[r]: the query tiles by the key tiles they visit, fewest first
 *     (ties by index): the kernel's units pair ranks NQT - 1 - p and p
 *     (KF_QT), the most with the fewest, as a causal mask's tiles pair by
 *     index; a random map's counts vary by row (the bench's 32 x 32 map at
 *     51%: 9 to 22 tiles), and pairs by index left some blocks ~9% more
 *     work than the average (bench/gpu_bench.c's map, counted on the host).
 * Entries are bytes: nkt < 256 and nqt x (nkt + 1) <= KF_BS_TABLE_MAX. */
#define KF_BS_TABLE_MAX 12288
static void emit_bs_table(cg *c, const kf_attn_info *at, int64_t nqt, int64_t nkt, int64_t br,
                          int64_t bc, bool order) {
    /* KF_QT(r): the query tile of rank r (the template's default: r) */
    if (order)
        cg_puts(&c->s, "#define KF_QT(r_) ((int)kf_bs_ord[r_])\n");
    cg_printf(&c->s,
              "#define KF_BS_TABLE 1\n#define KF_BS_TQ %lld\n#define KF_BS_TK %lld\n"
              "__shared__ unsigned char kf_bs_nx[KF_BS_TQ * (KF_BS_TK + 1)], kf_bs_dz[KF_BS_TQ];\n"
              "__shared__ unsigned char kf_bs_ord[KF_BS_TQ], kf_bs_w[KF_BS_TQ];\n"
              "__device__ __forceinline__ bool kf_bs_dense(long long, int q0, KF_PARAMS) {\n"
              "    return kf_bs_dz[q0 / %lld] != 0;\n}\n"
              "__device__ __forceinline__ int kf_bs_next(long long, int q0, bool, int j, int hi, "
              "KF_PARAMS) {\n"
              "    return j < hi ? min((int)kf_bs_nx[q0 / %lld * (KF_BS_TK + 1) + j], hi) : j;\n}\n"
              "__device__ __forceinline__ bool kf_bs_kept(long long bh, int q0, int j, KF_PARAMS) "
              "{\n    return kf_bs_keep(bh, q0 / %lld, j / %lld, KF_ARGS);\n}\n"
              "#define KF_BS_WHOLE 1\n"
              "__device__ void kf_bs_build(KF_PARAMS) {\n"
              "    for (int i = threadIdx.x; i < KF_BS_TQ * KF_BS_TK; i += blockDim.x) {\n"
              "        const int qt = i / KF_BS_TK, j = i %% KF_BS_TK;\n"
              "        kf_bs_nx[qt * (KF_BS_TK + 1) + j] =\n"
              "            kf_bs_keep(0, qt * %lld / %lld, j / %lld, KF_ARGS) ? 1 : 0;\n    }\n"
              "    __syncthreads();\n"
              "    for (int qt = threadIdx.x; qt < KF_BS_TQ; qt += blockDim.x) {\n"
              "        unsigned char *row = kf_bs_nx + qt * (KF_BS_TK + 1);\n"
              "        int n = 0, nx = KF_BS_TK;\n"
              "        row[KF_BS_TK] = (unsigned char)KF_BS_TK;\n"
              "        for (int j = KF_BS_TK - 1; j >= 0; j--) {\n"
              "            if (row[j]) {\n                nx = j;\n                n++;\n"
              "            }\n            row[j] = (unsigned char)nx;\n        }\n"
              "        if (n == 0)\n            for (int j = 0; j < KF_BS_TK; j++)\n"
              "                row[j] = (unsigned char)j;\n"
              "        kf_bs_dz[qt] = n == 0;\n"
              "        kf_bs_w[qt] = (unsigned char)(n == 0 ? KF_BS_TK : n);\n    }\n"
              "    __syncthreads();\n"
              "    for (int qt = threadIdx.x; qt < KF_BS_TQ; qt += blockDim.x) {\n"
              "        const int w = kf_bs_w[qt];\n        int r = 0;\n"
              "        for (int q = 0; q < KF_BS_TQ; q++)\n"
              "            r += kf_bs_w[q] < w || (kf_bs_w[q] == w && q < qt);\n"
              "        kf_bs_ord[r] = (unsigned char)qt;\n    }\n"
              "    /* the kernel's __syncthreads after the barriers' setup follows */\n}\n\n",
              (long long)nqt, (long long)nkt, (long long)br, (long long)br, (long long)at->keep_bq,
              (long long)(at->keep_bk / bc), (long long)br, (long long)at->keep_bq,
              (long long)(at->keep_bk / bc));
}

static void emit_block_sparse(cg *c, const kf_group *g, int skip, int64_t br, int64_t bc,
                              bool table, bool order);

/* The block-sparse tile functions (templates/attention.cuh and
 * attention_sm90.cuh call them whatever the mask; without a keep map they
 * are constants the compiler folds away):
 *   kf_bs_dense(bh, q0): the query tile at row q0 holds a row whose keep-map
 *     row drops every tile, so the tile visits every key tile (the dropped
 *     ones through kf_score_full, which gives the fill): such a row is the
 *     reference's all-masked row (NaN with a -inf fill, a uniform average
 *     with a finite one), never a softmax over the kept keys alone;
 *   kf_bs_state(bh, q0, j): 0 when key tile j is dropped for every row of the
 *     query tile, 1 when every element is kept, 2 when mixed (the kernel
 *     tile spans several keep-map tiles);
 *   kf_bs_next(bh, q0, dense, j, hi): the first key tile >= j (< hi) the
 *     query tile visits, else hi;
 *   kf_bs_mixed(bh, q0, dense, j): whether tile j needs kf_score_full.
 * The producer and the consumers of the sm_90a kernel each call them and get
 * the same tiles: the map is read-only during the run. */
void cg_attn_emit_block_sparse(cg *c, const kf_group *g, int skip, int64_t br, int64_t bc) {
    emit_block_sparse(c, g, skip, br, bc, false, false);
}

static void emit_block_sparse(cg *c, const kf_group *g, int skip, int64_t br, int64_t bc,
                              bool table, bool order) {
    const kf_attn_info *at = &g->attn;
    if (skip != 3) {
        cg_puts(&c->s,
                "__device__ __forceinline__ bool kf_bs_dense(long long, int, KF_PARAMS) { return "
                "true; }\n"
                "__device__ __forceinline__ int kf_bs_next(long long, int, bool, int j, int, "
                "KF_PARAMS) { return j; }\n"
                "__device__ __forceinline__ bool kf_bs_mixed(long long, int, bool, int, KF_PARAMS) "
                "{ return false; }\n#define KF_BS_WHOLE 0\n\n");
        return;
    }
    const kf_expr *e = &g->expr[at->keep_node];
    int R = g->rank;
    cg_printf(&c->s,
              "/* block-sparse: keep map tiles of %lld x %lld; kernel tiles of %lld x %lld */\n"
              "__device__ __forceinline__ bool kf_bs_keep(long long bh, int qb, int kb, KF_PARAMS) "
              "{\n    long long o = %lldLL + (long long)qb * %lldLL + (long long)kb * %lldLL;\n",
              (long long)at->keep_bq, (long long)at->keep_bk, (long long)br, (long long)bc,
              (long long)e->offset, (long long)e->dyn_strides[at->keep_src_q],
              (long long)e->dyn_strides[at->keep_src_k]);
    int64_t inner = 1;
    for (int d = R - 3; d >= 0; d--) {
        if (g->dims[d] != 1 && e->strides[d] != 0)
            cg_printf(&c->s, "    o += bh / %lldLL %% %lldLL * %lldLL;\n", (long long)inner,
                      (long long)g->dims[d], (long long)e->strides[d]);
        inner *= g->dims[d];
    }
    cg_printf(&c->s, "    (void)bh;\n    return (kf_ld(p%d + o) != 0) == %s;\n}\n",
              c->param[at->keep_node], at->keep_when_true ? "true" : "false");
    if (table) {
        emit_bs_table(c, at, (at->sq + br - 1) / br, (at->skv + bc - 1) / bc, br, bc, order);
        return;
    }
    if (at->keep_bq % br == 0 && at->keep_bk % bc == 0) {
        /* Map tiles in whole kernel tiles: a query tile reads one map row,
         * a key tile one entry, and no tile is mixed. (The general form
         * below held more registers: in the sm_90a consumer it spilled.) */
        cg_printf(&c->s,
                  "#define KF_BS_NK ((KF_SKV + %lld - 1) / %lld)\n"
                  "__device__ __forceinline__ bool kf_bs_dense(long long bh, int q0, KF_PARAMS) {\n"
                  "    const int qb = q0 / %lld;\n    bool any = false;\n"
                  "#pragma unroll 8\n"
                  "    for (int kb = 0; kb < KF_BS_NK; kb++)\n"
                  "        any = any | kf_bs_keep(bh, qb, kb, KF_ARGS);\n"
                  "    return !any;\n}\n"
                  "__device__ __forceinline__ int kf_bs_next(long long bh, int q0, bool dense, int j, "
                  "int hi, KF_PARAMS) {\n"
                  "    if (!dense)\n        while (j < hi && !kf_bs_keep(bh, q0 / %lld, j / %lld, "
                  "KF_ARGS))\n            j++;\n    return j;\n}\n"
                  "__device__ __forceinline__ bool kf_bs_kept(long long bh, int q0, int j, KF_PARAMS) "
                  "{\n    return kf_bs_keep(bh, q0 / %lld, j / %lld, KF_ARGS);\n}\n"
                  "#define KF_BS_WHOLE 1\n\n",
                  (long long)at->keep_bk, (long long)at->keep_bk, (long long)at->keep_bq,
                  (long long)at->keep_bq, (long long)(at->keep_bk / bc), (long long)at->keep_bq,
                  (long long)(at->keep_bk / bc));
        return;
    }
    cg_printf(&c->s,
              "#define KF_BS_BQ %lld\n#define KF_BS_BK %lld\n"
              "#define KF_BS_NK ((KF_SKV + KF_BS_BK - 1) / KF_BS_BK)\n"
              "__device__ __forceinline__ bool kf_bs_dense(long long bh, int q0, KF_PARAMS) {\n"
              "    const int qb1 = (min(q0 + %lld, KF_SQ) - 1) / KF_BS_BQ;\n"
              "    for (int qb = q0 / KF_BS_BQ; qb <= qb1; qb++) {\n"
              "        bool any = false;\n"
              "#pragma unroll 8\n"
              "        for (int kb = 0; kb < KF_BS_NK; kb++)\n"
              "            any = any | kf_bs_keep(bh, qb, kb, KF_ARGS);\n"
              "        if (!any)\n            return true;\n    }\n    return false;\n}\n"
              "__device__ __forceinline__ int kf_bs_state(long long bh, int q0, int j, KF_PARAMS) {\n"
              "    const int qb0 = q0 / KF_BS_BQ, qb1 = (min(q0 + %lld, KF_SQ) - 1) / KF_BS_BQ;\n"
              "    const int kb0 = j * %lld / KF_BS_BK, kb1 = (min(j * %lld + %lld, KF_SKV) - 1) / "
              "KF_BS_BK;\n"
              "    bool any = false, all = true;\n"
              "    for (int qb = qb0; qb <= qb1; qb++)\n"
              "        for (int kb = kb0; kb <= kb1; kb++) {\n"
              "            const bool k = kf_bs_keep(bh, qb, kb, KF_ARGS);\n"
              "            any = any | k;\n            all = all & k;\n        }\n"
              "    return any ? (all ? 1 : 2) : 0;\n}\n"
              "__device__ __forceinline__ int kf_bs_next(long long bh, int q0, bool dense, int j, "
              "int hi, KF_PARAMS) {\n"
              "    if (!dense)\n        while (j < hi && kf_bs_state(bh, q0, j, KF_ARGS) == 0)\n"
              "            j++;\n    return j;\n}\n"
              "__device__ __forceinline__ bool kf_bs_mixed(long long bh, int q0, bool dense, int j, "
              "KF_PARAMS) {\n    return dense || kf_bs_state(bh, q0, j, KF_ARGS) == 2;\n}\n"
              "#define KF_BS_WHOLE 0\n\n",
              (long long)at->keep_bq, (long long)at->keep_bk, (long long)br, (long long)br,
              (long long)bc, (long long)bc, (long long)bc);
}

/* The kept branch of the mask's where(): the one that is not the fill. */
static uint32_t kept_branch(const kf_group *g) {
    const kf_expr *w = &g->expr[g->attn.mask_node];
    const kf_expr *f = &g->expr[w->src[2]];
    return f->kind == KF_EXPR_CONST && f->value <= -1e4 ? w->src[1] : w->src[2];
}

/* The fill branch of the mask's where(). */
static uint32_t fill_branch(const kf_group *g) {
    const kf_expr *w = &g->expr[g->attn.mask_node];
    const kf_expr *f = &g->expr[w->src[2]];
    return f->kind == KF_EXPR_CONST && f->value <= -1e4 ? w->src[2] : w->src[1];
}

/* The users of node i among the group's nodes: how many source slots name
 * it, and the last node that does (in *user). */
static uint32_t users_of(const cg *c, uint32_t i, uint32_t *user) {
    uint32_t n = 0;
    for (uint32_t u = 0; u < c->n; u++) {
        const kf_expr *e = &c->g->expr[u];
        if (e->kind != KF_EXPR_OP && e->kind != KF_EXPR_LOAD && e->kind != KF_EXPR_ACC)
            continue;
        for (int k = 0; k < 3; k++)
            if (e->src[k] == i) {
                n++;
                *user = u;
            }
    }
    return n;
}

/* The node whose scale the sm_90a kernel may fold into its softmax, and the
 * scale (*scale), or KF_NONE: the mul(SCORE, c) that is the SCORE leaf's one
 * use, c a constant power of two > 0, rounded to bf16 or kept in f32, that is
 * the score itself or the kept branch (its one use) of the score's -inf mask.
 * Then round(s c) = c round(s) exactly (bf16 has f32's exponents; a product
 * in f32's subnormals aside, which the exp2 that follows cannot tell apart),
 * and a -inf mask and the row max commute with a positive scale, so the
 * kernel may take the scores unscaled, the mask applied, and put c into the
 * one FFMA each exp2 has anyway (KF_SCORE_SCALE): one FMUL a score less. Not
 * for f16 (its narrower exponents: s may overflow where s c does not) nor
 * for a finite fill (its value would need dividing by c).
 * With `f32` (the default; the recipe flag KF_CUDA_RECIPE_ATTENTION_ROUNDED_
 * SCORE turns it off, KF_CUDA_RECIPE_ATTENTION_F32_SCORE back on) the node
 * is not rounded at all (emit_score_fn gives it as s), so any positive
 * finite c folds, in f16 too: the scores the softmax sees are s c in f32,
 * closer to the exact value than the reference's rounded ones -- a
 * departure from the reference's roundings that the GPU tests judge (error
 * against the exact value), and one FMUL and one F2FP a score less. */
/* Node u itself, or past it the last of a chain of mul(x, 1) of u's dtype,
 * each its predecessor's one use: x times the constant 1 is x exactly (in
 * any rounding, NaN, infinities and -0 included), so the chain's top stands
 * for u. A graph that writes its scores as mul(mul(Q.K^T, c), 1) (the
 * bench's non-causal text) then folds as mul(Q.K^T, c) does: its kernel ran
 * two bf16 roundings and a multiply a score (160 F2FP and 130 FMUL of a key
 * tile's 710 instructions a warp, ncu on an H100 at 7905c13) where the
 * folded one has 32 and 66. */
static uint32_t past_unit_muls(const cg *c, uint32_t u) {
    const kf_group *g = c->g;
    for (;;) {
        uint32_t w = KF_NONE;
        if (u == g->attn.score || users_of(c, u, &w) != 1)
            return u;
        const kf_expr *m = &g->expr[w];
        if (m->kind != KF_EXPR_OP || m->op != KF_OP_MUL || m->dtype != g->expr[u].dtype ||
            m->src[0] == m->src[1])
            return u;
        const kf_expr *k = &g->expr[m->src[0] == u ? m->src[1] : m->src[0]];
        if (k->kind != KF_EXPR_CONST || k->value != 1.0)
            return u;
        u = w;
    }
}

static uint32_t fold_scale(const cg *c, bool f32, double *scale) {
    const kf_group *g = c->g;
    const kf_attn_info *at = &g->attn;
    uint32_t sn = KF_NONE, u = KF_NONE, w = KF_NONE;
    for (uint32_t i = 0; i < c->n; i++)
        if (g->expr[i].kind == KF_EXPR_SCORE) {
            if (sn != KF_NONE)
                return KF_NONE;
            sn = i;
        }
    if (sn == KF_NONE || users_of(c, sn, &u) != 1)
        return KF_NONE;
    const kf_expr *m = &g->expr[u];
    if (m->kind != KF_EXPR_OP || m->op != KF_OP_MUL ||
        (m->dtype != KF_DTYPE_BF16 && m->dtype != KF_DTYPE_F32 &&
         !(f32 && m->dtype == KF_DTYPE_F16)))
        return KF_NONE;
    const kf_expr *k = &g->expr[m->src[0] == sn ? m->src[1] : m->src[0]];
    int ex = 0;
    if (k->kind != KF_EXPR_CONST || !(k->value > 0) || !isfinite(k->value) ||
        (!f32 && frexp(k->value, &ex) != 0.5))
        return KF_NONE;
    /* the fold node: u, or the top of a chain of mul(., 1) above it */
    u = past_unit_muls(c, u);
    if (at->score != u) {
        const kf_expr *we = &g->expr[at->score];
        if (at->mask_node != at->score || we->kind != KF_EXPR_OP || kept_branch(g) != u ||
            we->src[0] == u || users_of(c, u, &w) != 1 || w != at->score ||
            (we->dtype != KF_DTYPE_BF16 && we->dtype != KF_DTYPE_F32 &&
             !(f32 && we->dtype == KF_DTYPE_F16)))
            return KF_NONE;
        const kf_expr *f = &g->expr[fill_branch(g)];
        if (f->kind != KF_EXPR_CONST || !(isinf(f->value) && f->value < 0))
            return KF_NONE;
    }
    *scale = k->value;
    return u;
}

/* Node i is x * k, k * x or x / k for a constant k > 0 finite whose f32
 * value and reciprocal are normal, x no constant: *x and the factor *k (1 / k
 * for the division) set. */
static bool scale_operand(const kf_group *g, uint32_t i, uint32_t *x, double *k) {
    const kf_expr *e = &g->expr[i];
    if (e->kind != KF_EXPR_OP || (e->op != KF_OP_MUL && e->op != KF_OP_DIV) ||
        e->src[0] == e->src[1])
        return false;
    for (int j = e->op == KF_OP_MUL ? 0 : 1; j < 2; j++) {
        const kf_expr *ke = &g->expr[e->src[j]];
        const kf_expr *xe = &g->expr[e->src[1 - j]];
        if (ke->kind != KF_EXPR_CONST || xe->kind == KF_EXPR_CONST || !(ke->value > 0) ||
            !isnormal((float)ke->value) || !isnormal((float)(1.0 / ke->value)))
            continue;
        *x = e->src[1 - j];
        *k = e->op == KF_OP_DIV ? 1.0 / ke->value : ke->value;
        return true;
    }
    return false;
}

/* With f32 scores and no fold_scale node, the score's last scale: node t, the
 * score itself or the kept branch (its one use) of the score's -inf mask, a
 * float x * k (scale_operand), whose constant the kernel may fold into its
 * softmax's exp2 as fold_scale's (KF_SCORE_SCALE k; the scores it sees are
 * x, t's operand): a softcap's 30 tanh(s / 30) is then tanh(s / 30), one
 * FMUL a score less. In f32 alone: t is then never rounded (a bf16 t's
 * rounding does not commute with the scale unless k is a power of two).
 * Returns t (*scale: k), or KF_NONE. */
static uint32_t top_scale(const cg *c, double *scale) {
    const kf_group *g = c->g;
    const kf_attn_info *at = &g->attn;
    uint32_t t = at->score, x = KF_NONE, w = KF_NONE;
    double k = 0.0;
    if (at->mask_node == at->score) {
        const kf_expr *we = &g->expr[at->score];
        const kf_expr *f = &g->expr[fill_branch(g)];
        if (we->kind != KF_EXPR_OP || we->op != KF_OP_WHERE || f->kind != KF_EXPR_CONST ||
            !(isinf(f->value) && f->value < 0))
            return KF_NONE;
        t = kept_branch(g);
        if (we->src[0] == t || users_of(c, t, &w) != 1 || w != at->score)
            return KF_NONE;
    }
    const kf_expr *te = &g->expr[t];
    if (te->kind != KF_EXPR_OP || !kf_dtype_is_float(te->dtype) || !scale_operand(g, t, &x, &k) ||
        g->expr[x].kind == KF_EXPR_SCORE)
        return KF_NONE;
    *scale = k;
    return t;
}

/* A bound on |value| of node i of the score expression, -inf counting as 0
 * (exp gives it 0 whatever the shift), before the roundings' growth; < 0:
 * none known. Only what a capped score needs: tanh (|tanh| <= 1 in any
 * rounding), a multiply or divide by a constant, a cast between floats,
 * where() (its branches), finite constants. */
static double score_bound(const kf_group *g, uint32_t i, int depth) {
    const kf_expr *e = &g->expr[i];
    if (depth > 16)
        return -1.0;
    if (e->kind == KF_EXPR_CONST)
        return isinf(e->value) && e->value < 0 ? 0.0 : isfinite(e->value) ? fabs(e->value) : -1.0;
    if (e->kind != KF_EXPR_OP || !kf_dtype_is_float(e->dtype))
        return -1.0;
    switch (e->op) {
    case KF_OP_TANH:
        return 1.0;
    case KF_OP_CAST:
        return kf_dtype_is_float(g->expr[e->src[0]].dtype) ? score_bound(g, e->src[0], depth + 1)
                                                           : -1.0;
    case KF_OP_WHERE: {
        double a = score_bound(g, e->src[1], depth + 1), b = score_bound(g, e->src[2], depth + 1);
        return a < 0 || b < 0 ? -1.0 : fmax(a, b);
    }
    case KF_OP_MUL:
    case KF_OP_DIV: {
        int k = g->expr[e->src[1]].kind == KF_EXPR_CONST ? 1
                : e->op == KF_OP_MUL && g->expr[e->src[0]].kind == KF_EXPR_CONST ? 0
                                                                                 : -1;
        if (k < 0)
            return -1.0;
        double c = g->expr[e->src[k]].value, b = score_bound(g, e->src[1 - k], depth + 1);
        if (b < 0 || !isfinite(c) || (e->op == KF_OP_DIV && c == 0.0))
            return -1.0;
        return e->op == KF_OP_MUL ? b * fabs(c) : b / fabs(c);
    }
    default:
        return -1.0;
    }
}

/* The sm_90a kernel's fixed softmax shift (templates/attention_sm90.cuh,
 * KF_SCORE_MAX), or 0: where every score is -inf or at most B in magnitude,
 * B the bound of score_bound grown by 2^-5 for the roundings (each of bf16's
 * grows a value by at most 2^-9), and exp(s - B) >= exp(-2 B) stays in the
 * normal range of P's type `dt` (the P.V operand): 2 B log2(e) < 126 for bf16
 * (f32's exponents), < 14 for f16 -- exp(s - B) is then never past 1 nor
 * subnormal, where the running row max would only cost its reductions and
 * O's rescale (a softcap of 30: B = 30.9, bf16 alone; in f16 its P of
 * e^-31 flushed to 0: error 1 on an H100 at c0d8fb0). Not with a folded
 * scale (the kernel's scores are then divided by it). */
static double score_max(const kf_group *g, uint32_t fold, kf_dtype dt) {
    if (fold != KF_NONE)
        return 0.0;
    double b = score_bound(g, g->attn.score, 0);
    if (!(b > 0))
        return 0.0;
    b *= 1.0 + 1.0 / 32.0;
    return 2.0 * b * 1.4426950408889634 < (dt == KF_DTYPE_BF16 ? 126.0 : 14.0) ? b : 0.0;
}

/* One score function: the score expression at (bh, q, kv) with `s` the f32
 * Q.K^T dot product; `inner` 1: the mask's where() replaced by its kept
 * branch, 2: by its fill (a dropped element's score); `fold` (fold_scale's
 * node, or KF_NONE): that node is s rounded to its dtype, the scale left to
 * the kernel; `tfold` (top_scale's node, or KF_NONE): that node is its
 * operand, its constant left to the kernel. */
static void emit_score_fn(cg *c, chunk_ctx *x, const char *name, int inner, uint32_t fold, bool f32,
                          uint32_t tfold) {
    const kf_group *g = c->g;
    const kf_attn_info *at = &g->attn;
    memset(c->need, 0, c->n * sizeof *c->need);
    for (uint32_t i = 0; i < c->n; i++) {
        c->ov[i][0] = 0;
        if (g->expr[i].kind == KF_EXPR_SCORE)
            snprintf(c->ov[i], OV_MAX, "s"); /* unrounded: see the top of this file */
    }
    if (fold != KF_NONE)
        snprintf(c->ov[fold], OV_MAX, "%s",
                 !f32 && g->expr[fold].dtype == KF_DTYPE_BF16 ? "kf_round_bf16(s)" : "s");
    uint32_t tx = KF_NONE;
    double tk = 0.0;
    if (tfold != KF_NONE && scale_operand(g, tfold, &tx, &tk)) {
        snprintf(c->ov[tfold], OV_MAX, "v%u", tx);
        cg_mark(c, tx);
    }
    if (inner) {
        uint32_t k = inner == 2 ? fill_branch(g) : kept_branch(g);
        snprintf(c->ov[at->mask_node], OV_MAX, "v%u", k);
        cg_mark(c, k);
    }
    cg_mark(c, at->score);
    cg_printf(&c->s,
              "__device__ __forceinline__ float %s(float s, long long bh, int q, int kv, "
              "KF_PARAMS) {\n",
              name);
    cg_emit_loads(c, x, 1, "    ", NULL, NULL);
    cg_emit_nodes(c, cg_coord_of, x, "    ", false);
    cg_printf(&c->s, "    (void)s; (void)bh; (void)q; (void)kv;\n    return (float)v%u;\n}\n\n",
              at->score);
}

void cg_attn_emit_score_fn(cg *c, chunk_ctx *x, const char *name, int inner) {
    emit_score_fn(c, x, name, inner, KF_NONE, false, KF_NONE);
}

/* cg_attn_emit_score_fns with fold_scale's node `fold` (or KF_NONE), `f32`
 * as fold_scale's, top_scale's node `tfold` (or KF_NONE); `approx`: tanh as
 * tanh.approx.f32 (kf_tanh_approx). */
static kf_status emit_score_fns_tanh(cg *c, bool skip, uint32_t fold, bool f32, uint32_t tfold,
                                     bool approx, bool pair, unsigned forms) {
    const kf_group *g = c->g;
    const kf_attn_info *at = &g->attn;
    int R = g->rank;
    if (approx)
        cg_puts(&c->s, "__device__ __forceinline__ float kf_tanh_approx(float x) {\n"
                       "    float y;\n    asm(\"tanh.approx.f32 %0, %1;\" : \"=f\"(y) : \"f\"(x));\n"
                       "    return y;\n}\n#define kf_tanh kf_tanh_approx\n\n");
    /* The score functions: coordinates of the score space from (bh, q, kv). */
    chunk_ctx *x = kf_mem_calloc(c->mem, 1, sizeof *x);
    if (!x)
        return cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    cg_coords_linear(x, KF_SPACE_OUT, R - 2, g->dims, "bh");
    snprintf(x->coord[KF_SPACE_OUT][R - 2], sizeof x->coord[0][0], "(long long)q");
    snprintf(x->coord[KF_SPACE_OUT][R - 1], sizeof x->coord[0][0], "(long long)kv");
    snprintf(x->lin[KF_SPACE_OUT], sizeof x->lin[0], "(bh * %lldLL + q) * %lldLL + kv",
             (long long)at->sq, (long long)at->skv);
    x->vrank[KF_SPACE_OUT] = 0;
    x->vrank[KF_SPACE_ROW] = 0;
    emit_score_fn(c, x, "kf_score_full", 0, fold, f32, tfold);
    if (at->mask == KF_MASK_BLOCK_SPARSE && at->mask_node == at->score)
        emit_score_fn(c, x, "kf_score_fill", 2, fold, f32, tfold);
    if (skip)
        emit_score_fn(c, x, "kf_score_inner", 1, fold, f32, tfold);
    else
        cg_puts(&c->s, "#define kf_score_inner kf_score_full\n\n");
    kf_status st = pair ? cg_attn_emit_score_pair(c, x, skip ? kept_branch(g) : KF_NONE,
                                                  fold != KF_NONE ? fold : tfold, forms)
                        : KF_OK;
    kf_mem_free(c->mem, x, sizeof *x);
    return st;
}

static kf_status emit_score_fns(cg *c, bool skip, uint32_t fold, bool f32, uint32_t tfold,
                                bool pair, unsigned forms) {
    return emit_score_fns_tanh(c, skip, fold, f32, tfold, true, pair, forms);
}

kf_status cg_attn_emit_score_fns(cg *c, bool skip) {
    return emit_score_fns(c, skip, KF_NONE, false, KF_NONE, false, 0);
}

kf_status cg_attn_emit_score_fns_exact(cg *c, bool skip) {
    return emit_score_fns_tanh(c, skip, KF_NONE, false, KF_NONE, false, false, 0);
}

/* The wgmma instructions of the sm_90a kernel (their accumulator register
 * lists are written out): kf_wgmma_qk0 (S = A.B: the first 16-deep step,
 * whose accumulators are outputs only, so S's old values are dead once P is
 * packed -- as "+f" operands they stayed live, and with P, O and S all live
 * at the P.V issue the softcap variant spilled) and kf_wgmma_qk (S += A.B),
 * m64n{bc}k16, A and B from shared memory, K-major both; kf_wgmma_pv
 * (O += P.V, m64n{D}k16, A = P from registers, B = V from shared memory,
 * MN-major). */
static void emit_wgmma_sm90(cg *c, int64_t d, int bc, int bcl, kf_dtype dt) {
    const char *ty = dt == KF_DTYPE_BF16 ? "bf16" : "f16";
    for (int fi = 0; fi < 5; fi++) { /* qk0, qk, pv, then qkl0, qkl where bcl is set */
        if (fi >= 3 && !bcl)
            break;
        const int f = fi % 3;
        bool pv = f == 2;
        unsigned n = pv ? (unsigned)d : (unsigned)(fi >= 3 ? bcl : bc), nr = n / 2;
        if (pv)
            cg_puts(&c->s, "__device__ __forceinline__ void kf_wgmma_pv(float *d, const unsigned "
                           "*a, unsigned long long db) {\n");
        else
            cg_printf(&c->s,
                      "__device__ __forceinline__ void kf_wgmma_qk%s%s(float *d, unsigned long "
                      "long da, unsigned long long db) {\n",
                      fi >= 3 ? "l" : "", f == 0 ? "0" : "");
        cg_printf(&c->s,
                  "    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%u, 0;\\n\"\n"
                  "        \"wgmma.mma_async.sync.aligned.m64n%uk16.f32.%s.%s {\"\n        \"",
                  pv ? nr + 5 : nr + 2, n, ty, ty);
        for (unsigned i = 0; i < nr; i++)
            cg_printf(&c->s, "%%%u%s%s", i, i + 1 < nr ? ", " : "",
                      (i % 16 == 15) ? "\"\n        \"" : "");
        if (pv)
            cg_printf(&c->s, "}, {%%%u, %%%u, %%%u, %%%u}, %%%u, p, 1, 1, 1;\\n}\\n\"\n        : ",
                      nr, nr + 1, nr + 2, nr + 3, nr + 4);
        else
            cg_printf(&c->s, "}, %%%u, %%%u, p, 1, 1, 0, 0;\\n}\\n\"\n        : ", nr, nr + 1);
        for (unsigned i = 0; i < nr; i++)
            cg_printf(&c->s, "\"%sf\"(d[%u])%s%s", f == 0 ? "=" : "+", i, i + 1 < nr ? ", " : "",
                      (i % 8 == 7) ? "\n          " : "");
        if (pv)
            cg_puts(&c->s, "\n        : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), "
                           "\"l\"(db), \"r\"(1)\n        : \"memory\");\n}\n\n");
        else
            cg_printf(&c->s,
                      "\n        : \"l\"(da), \"l\"(db), \"r\"(%d)\n        : "
                      "\"memory\");\n}\n\n",
                      f == 0 ? 0 : 1);
    }
}

/* The score nodes' rounding to bf16 / f16 (every node that stands for a
 * tensor rounds as the reference stores it) through the packed conversion,
 * cvt.rn.{bf16,f16}x2.f32 with a zero high half: ptxas makes the scalar
 * cvt.rn.bf16.f32 of common.cuh an F2F, which runs on the XU pipe (16 a
 * clock an SM) beside the softmax's exp2 (MUFU, the same pipe), while the
 * packed one is an F2FP on the ALU pipe. The same rounding, bit for bit
 * (round to nearest even, NaN stays NaN, overflow to inf). Read from the
 * SASS of cf02bc2's non-causal B4 H32 S4096 kernel: per thread and key tile
 * 128 F2F (two rounded score nodes) + 66 MUFU on the XU pipe against 64
 * MUFU for the softmax alone. The bf16 one converts x into the high half
 * (cvt's first source) beside a zero: the pair's bits are then the rounded
 * float itself, where converting into the low half needed a shift after it
 * (an IMAD.U32 per rounding, four an element of the ALiBi score). */
static void emit_round_sm90(cg *c) {
    cg_puts(&c->s,
            "__device__ __forceinline__ float kf_round_bf16_alu(float x) {\n"
            "    unsigned r;\n    asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(r) : \"f\"(x), "
            "\"f\"(0.0f));\n"
            "    return __uint_as_float(r);\n}\n"
            "__device__ __forceinline__ float kf_round_f16_alu(float x) {\n"
            "    unsigned r;\n    asm(\"cvt.rn.f16x2.f32 %0, %1, %2;\" : \"=r\"(r) : \"f\"(0.0f), "
            "\"f\"(x));\n"
            "    return kf_f16_to_f32((unsigned short)(r & 0xffffu));\n}\n"
            "#define kf_round_bf16 kf_round_bf16_alu\n#define kf_round_f16 kf_round_f16_alu\n"
            "/* two floats rounded to bf16 in one conversion, as a bf16x2 pair (lo: a) */\n"
            "__device__ __forceinline__ unsigned kf_rnd2_bf16(float a, float b) {\n"
            "    unsigned r;\n    asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(r) : \"f\"(b), "
            "\"f\"(a));\n    return r;\n}\n\n");
}

/* l2_policy: the L2 policy of an operand's loads (0: Q, 1: K, 2: V; 3: O's
 * stores) where `l2` asks (KF_CUDA_RECIPE_ATTENTION_BS_L2): K and V
 * evict_last, Q and O evict_first. */
static const char *l2_policy(int i) {
    return i == 1 || i == 2 ? "evict_last" : "evict_first";
}

/* The rest of a TMA load's inline asm after its "[dst], [map, {c0, row":
 * the batch axes' coordinate placeholders, "}], [bar], <next>;" and the
 * operands up to the batch coordinates (bh's on the map's batch axes ax,
 * innermost first); the caller appends bar's and its own last operand. */
static void tma_box_operands(cg *c, const kf_group *g, const int *ax, int n) {
    for (int a = 0; a < n; a++)
        cg_printf(&c->s, ", %%%d", 4 + a);
    cg_printf(&c->s,
              "}], [%%%d], %%%d;\" :: \"r\"(dst), \"l\"((unsigned long long)m), "
              "\"r\"(c0), \"r\"(row)",
              4 + n, 5 + n);
    for (int a = 0; a < n; a++)
        cg_printf(&c->s, ", \"r\"((int)(bh / %lldLL %% %lldLL))", (long long)bh_inner(g, ax[a]),
                  (long long)g->dims[ax[a]]);
}

/* kf_tma_q / _k / _v: box (c0, row) of the operand's map for batch x head bh
 * (its coordinates on the map's batch axes, innermost first). With 2-CTA
 * clusters (`cluster` 2) K's and V's boxes are multicast to both CTAs of the
 * cluster, landing at dst and counted on bar in each. With `l2` each load
 * (and kf_tmapf_k / _v's prefetch) carries its L2 policy (l2_policy), and
 * kf_o_pol gives O's stores theirs. */
static void emit_tma_fns(cg *c, const kf_group *g, const cg_attn_op ops[3], int cluster, int l2) {
    static const char *const fn[3] = {"kf_tma_q", "kf_tma_k", "kf_tma_v"};
    for (int i = 0; i < 3; i++) {
        int ax[3];
        int n = map_axes(g, &ops[i], ax);
        if (i > 0 && cluster == 2) {
            cg_printf(&c->s,
                      "__device__ __forceinline__ void %s(unsigned dst, const kf_tmap *m, int c0, "
                      "int row, long long bh, unsigned bar) {\n    asm volatile(\"cp.async.bulk."
                      "tensor.%dd.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::"
                      "cluster [%%0], [%%1, {%%2, %%3",
                      fn[i], 2 + n);
            tma_box_operands(c, g, ax, n);
            cg_puts(&c->s, ", \"r\"(bar), \"h\"((unsigned short)3) : \"memory\");\n"
                           "    (void)bh;\n}\n");
            continue;
        }
        if (l2) {
            cg_printf(&c->s,
                      "__device__ __forceinline__ void %s(unsigned dst, const kf_tmap *m, int c0, "
                      "int row, long long bh, unsigned bar) {\n    unsigned long long pol;\n"
                      "    asm(\"createpolicy.fractional.L2::%s.b64 %%0, 1.0;\" : \"=l\"(pol));\n"
                      "    asm volatile(\"cp.async.bulk.tensor.%dd.shared::cluster.global."
                      "mbarrier::complete_tx::bytes.L2::cache_hint [%%0], [%%1, {%%2, %%3",
                      fn[i], l2_policy(i), 2 + n);
            tma_box_operands(c, g, ax, n);
            cg_puts(&c->s, ", \"r\"(bar), \"l\"(pol) : \"memory\");\n    (void)bh;\n}\n");
            continue;
        }
        cg_printf(&c->s,
                  "__device__ __forceinline__ void %s(unsigned dst, const kf_tmap *m, int c0, int "
                  "row, long long bh, unsigned bar) {\n    kf_hp_tma%d(dst, m, c0, row",
                  fn[i], 2 + n);
        for (int a = 0; a < n; a++)
            cg_printf(&c->s, ", (int)(bh / %lldLL %% %lldLL)", (long long)bh_inner(g, ax[a]),
                      (long long)g->dims[ax[a]]);
        cg_puts(&c->s, ", bar);\n    (void)bh;\n}\n");
    }
    /* kf_tmapf_k / _v: the same boxes of K and V into L2 alone */
    for (int i = 1; i < 3; i++) {
        int ax[3];
        int n = map_axes(g, &ops[i], ax);
        cg_printf(&c->s,
                  "__device__ __forceinline__ void kf_tmapf_%c(const kf_tmap *m, int c0, int row, "
                  "long long bh) {\n",
                  i == 1 ? 'k' : 'v');
        if (l2)
            cg_printf(&c->s,
                      "    unsigned long long pol;\n    asm(\"createpolicy.fractional.L2::%s.b64 "
                      "%%0, 1.0;\" : \"=l\"(pol));\n",
                      l2_policy(i));
        cg_printf(&c->s,
                  "    asm volatile(\"cp.async.bulk.prefetch.tensor.%dd.L2.global.tile%s [%%0, "
                  "{%%1, %%2",
                  2 + n, l2 ? ".L2::cache_hint" : "");
        for (int a = 0; a < n; a++)
            cg_printf(&c->s, ", %%%d", 3 + a);
        cg_puts(&c->s, "}]");
        if (l2)
            cg_printf(&c->s, ", %%%d", 3 + n);
        cg_puts(&c->s, ";\" :: \"l\"((unsigned long long)m), \"r\"(c0), \"r\"(row)");
        for (int a = 0; a < n; a++)
            cg_printf(&c->s, ", \"r\"((int)(bh / %lldLL %% %lldLL))",
                      (long long)bh_inner(g, ax[a]), (long long)g->dims[ax[a]]);
        if (l2)
            cg_puts(&c->s, ", \"l\"(pol)");
        cg_puts(&c->s, " : \"memory\");\n    (void)bh;\n}\n");
    }
    /* kf_o_pol: O's stores' policy (templates/attention_sm90.cuh, KF_BS_L2) */
    if (l2)
        cg_printf(&c->s,
                  "__device__ __forceinline__ unsigned long long kf_o_pol() {\n"
                  "    unsigned long long pol;\n    asm(\"createpolicy.fractional.L2::%s.b64 %%0, "
                  "1.0;\" : \"=l\"(pol));\n    return pol;\n}\n",
                  l2_policy(3));
    cg_puts(&c->s, "\n");
}

/* kf_bh_offsets(bh, oq, ok, ov): the batch axes' coordinates from bh, times
 * each operand's strides. */
void cg_attn_emit_bh_offsets(cg *c, const kf_group *g, const cg_attn_op ops[3]) {
    int R = g->rank;
    cg_puts(&c->s, "__device__ __forceinline__ void kf_bh_offsets(long long bh, long long &oq, "
                   "long long &ok, long long &ov) {\n");
    int64_t inner = 1;
    cg_puts(&c->s, "    oq = 0; ok = 0; ov = 0;\n");
    for (int d = R - 3; d >= 0; d--) {
        if (g->dims[d] != 1) {
            cg_printf(&c->s, "    {\n        const long long i = bh / %lldLL %% %lldLL;\n",
                      (long long)inner, (long long)g->dims[d]);
            static const char *const on[3] = {"oq", "ok", "ov"};
            for (int o = 0; o < 3; o++)
                if (ops[o].bstride[d])
                    cg_printf(&c->s, "        %s += i * %lldLL;\n", on[o],
                              (long long)ops[o].bstride[d]);
            cg_puts(&c->s, "    }\n");
        }
        inner *= g->dims[d];
    }
    cg_puts(&c->s, "    (void)bh;\n}\n\n");
}

/* kf_o_offset(bh, q): the element offset in O's buffer of row q of batch x
 * head bh. Row-major [.., sq, d] when the group writes P.V itself; at the
 * strides of the permute it absorbed ([B, H, S, D] stored as [B, S, H, D])
 * otherwise, so the reshape that merges the heads is a view. */
void cg_attn_emit_o_offset(cg *c, const kf_group *g, const char *row_len) {
    const kf_attn_info *at = &g->attn;
    int R = g->rank;
    cg_puts(&c->s, "__device__ __forceinline__ long long kf_o_offset(long long bh, int q) {\n");
    if (at->out == at->pv) {
        cg_printf(&c->s, "    return (bh * KF_SQ + q) * %s;\n}\n\n", row_len);
        return;
    }
    cg_printf(&c->s, "    long long o = (long long)q * %lldLL;\n", (long long)at->o_strides[R - 2]);
    int64_t inner = 1;
    for (int d = R - 3; d >= 0; d--) {
        if (g->dims[d] != 1)
            cg_printf(&c->s, "    o += bh / %lldLL %% %lldLL * %lldLL;\n", (long long)inner,
                      (long long)g->dims[d], (long long)at->o_strides[d]);
        inner *= g->dims[d];
    }
    cg_puts(&c->s, "    (void)bh;\n    return o;\n}\n\n");
}

/* Whether the sm_90a kernel of group g builds its block-sparse walk in
 * shared memory (emit_bs_table): a keep map (of whole kernel tiles: the
 * sm_90a kernel takes no other) that no batch axis indexes, so one walk
 * serves every batch-head, small enough for byte entries; not where
 * KF_CUDA_RECIPE_ATTENTION_BS_MAP_WALK asks for the walk through the map. */
static bool bs_table_ok(const kf_group *g, uint64_t rflags, int64_t br, int64_t bc) {
    const kf_attn_info *at = &g->attn;
    if (cg_attn_mask_skip(g) != 3 || (rflags & KF_CUDA_RECIPE_ATTENTION_BS_MAP_WALK) ||
        at->keep_bq % br != 0 || at->keep_bk % bc != 0)
        return false;
    const kf_expr *e = &g->expr[at->keep_node];
    for (int d = 0; d < g->rank - 2; d++)
        if (g->dims[d] != 1 && e->strides[d] != 0)
            return false;
    const int64_t nqt = (at->sq + br - 1) / br, nkt = (at->skv + bc - 1) / bc;
    return nkt < 256 && nqt <= 256 && nqt * (nkt + 1) <= KF_BS_TABLE_MAX;
}

/* The kv - q range of the sm_90a kernel's diagonal (templates/
 * attention_sm90.cuh, KF_SCORE_DIAG: kf_score_diag at rows qr below sqp,
 * the query tiles' padded end, and keys kv0 - 8 + 2 t4 + 8 i on the inner
 * tiles and a causal mask's edge tiles (CG_PAIR_DIAG_EDGE), tiles that
 * start before Skv, so kv in [-8, Skv + bc - 3]; with a causal or window
 * skip the tiles start before q0 + br, so kv - qr <= br + bc - 3) into
 * c->dtab_lo, c->dtab_n, and whether a table of as many 4-byte entries
 * fits in shared memory beside the kernel's dynamic shared memory and its
 * static arrays (a block-sparse walk's included, KF_BS_TABLE_MAX bytes, and
 * 4 KiB for the barriers and the pinned softmax's sink). */
static bool dtab_fits(cg *c, const kf_attn_info *at, int skip, int64_t sqp, int64_t br,
                      const sm90_shape *sh, const char *arch) {
    int64_t hi = at->skv + sh->bc - 3;
    if ((skip == 1 || skip == 2) && hi > br + sh->bc - 3)
        hi = br + sh->bc - 3;
    c->dtab_lo = -8 - sqp;
    c->dtab_n = hi - c->dtab_lo + 1;
    uint32_t per_block = 0, per_sm = 0;
    if (!cg_stage_smem_limits(arch, &per_block, &per_sm) || c->dtab_n <= 0)
        return false;
    return (int64_t)sm90_smem(at->d, sh) + 4 * c->dtab_n + KF_BS_TABLE_MAX + 4096 <=
           (int64_t)per_block;
}

static kf_status gen(const kf_plan *plan, uint32_t group, const char *arch, const kf_mem *mem,
                     kf_cuda_kernel *out, bool sm90, uint64_t rflags) {
    const int pin = sm90 && (rflags & KF_CUDA_RECIPE_ATTENTION_PIN_SOFTMAX) ? 1 : 0;
    /* f32 scores by default (they won: H200, 4784014, causal S4096 D128
     * 0.955 -> 0.924 ms, LLaMA's block layouts 0.539 -> 0.518); ROUNDED_SCORE
     * alone gives the rounded form */
    const bool f32s = sm90 && ((rflags & KF_CUDA_RECIPE_ATTENTION_F32_SCORE) ||
                               !(rflags & KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE));
    int lpt = sm90 && (rflags & KF_CUDA_RECIPE_ATTENTION_TAIL_LPT) ? 1 : 0;
    cg c;
    kf_status st = cg_begin(&c, plan, group, arch, mem, out);
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    cg_attn_op ops[3];
    char why[160];
    if (sm90 ? unsupported_sm90(plan, g, arch, ops, why, sizeof why)
             : unsupported(plan, g, arch, ops, why, sizeof why))
        return cg_end(&c, cg_fail(&c, KF_ERR_UNSUPPORTED, "group %u (%s): fused attention%s: %s",
                                  g->id, g->name, sm90 ? " (sm_90a)" : "", why));
    const kf_attn_info *at = &g->attn;
    const kf_graph *gr = plan->graph;
    kf_dtype dt = gr->nodes[at->q]->dtype;
    int R = g->rank;
    int64_t bh = 1;
    for (int d = 0; d < R - 2; d++)
        bh *= g->dims[d];
    const int64_t br = sm90 ? SM90_BR : ATTN_BR;
    int64_t nqt = (at->sq + br - 1) / br;
    int skip = cg_attn_mask_skip(g);
    /* the FA2 kernel takes none of the sm_90a kernel's forms (nor its wide
     * default) */
    const sm90_shape sh = sm90_shape_of(g, sm90 ? rflags : KF_CUDA_RECIPE_ATTENTION_NARROW_KEYS);
    /* the block-sparse walk in shared memory (s) and with it the units
     * paired by kept count (k) with the tail longest first: with a random
     * map the pairs by index left blocks up to ~9% over the average, the
     * pairs by count with the tail ~2% (bench/gpu_bench.c's map, counted) */
    const bool bst = sm90 && bs_table_ok(g, rflags, br, sh.bc);
    const bool bsk = bst;
    /* a keep map's L2 policies and its walk's prefetch (v) where
     * KF_CUDA_RECIPE_ATTENTION_BS_L2 asks (templates/attention_sm90.cuh,
     * KF_BS_L2); no keep map takes the 2-CTA form */
    const int bsl2 =
        sm90 && skip == 3 && sh.cluster == 1 && (rflags & KF_CUDA_RECIPE_ATTENTION_BS_L2) ? 1 : 0;
    if (bsk)
        lpt = 1;
    /* the tail longest first by default where a causal or window mask gives
     * the items unequal key tiles, at head dim 128 (att19's schedule model,
     * bench/attn_schedule.py: grid-strided, the slowest block 3.1% over the
     * mean at causal S4096, 0.6% with the tail; H100, de9d9a2, after 1 ms
     * asleep: causal 0.9019 -> 0.8935 ms, A B B A 0.994x; the softcap 1.0187
     * -> 0.9927, A B B A 0.990x; window 1024 0.5212 -> 0.5138; H200,
     * 59e2145: causal 0.8884 -> 0.8788, softcap 1.0138 -> 0.9834, ALiBi
     * 0.9596 -> 0.9377, GQA 0.8821 -> 0.8701, each won its A B B A by
     * 0.4-1%), where KF_CUDA_RECIPE_ATTENTION_TAIL_LPT then keeps the
     * grid-strided walk to the end (the form before, kept to measure);
     * elsewhere the flag asks for the tail (unmasked items are all alike;
     * GPT-2's causal B16 H16 S1024 at head dim 64 ran 7% slower with it,
     * H200, 59e2145: 0.1093 -> 0.1171 ms, A B B A 1.067x) */
    if (sm90 && (skip == 1 || skip == 2) && at->d == 128)
        lpt = !lpt;
    /* the tail's item arithmetic is 32-bit (templates/attention_sm90.cuh) */
    if (bh * ((nqt + 1) / 2) >= (INT64_C(1) << 30))
        lpt = 0;
    /* a cluster's items are all alike (no mask cuts tiles): no tail order */
    if (sh.cluster == 2)
        lpt = 0;
    const int tree = sm90 && sm90_trees(at, rflags) ? 1 : 0;
    /* the items joined (templates/attention_sm90.cuh, KF_ITEM_OVERLAP: an
     * item's last P.V in the next item's first turn) where the next item's
     * Q has its own buffer: at head dim 64, and at 128 where
     * KF_SM90_JOIN_D128 (above) says; one at a time (kernel letter i) where
     * KF_CUDA_RECIPE_ATTENTION_ITEMS_APART asks, joined where they are not
     * by default (letter j) where KF_CUDA_RECIPE_ATTENTION_ITEMS_JOINED
     * does. The one-Q-buffer (176-key) and 2-CTA forms keep them apart with
     * no letter: their next Q lands only once both consumers are done with
     * this item's */
    const bool two_q = sm90 && sh.qbuf == 2 && sh.cluster == 1;
    const bool ovl_ok = two_q && (at->d == 64 || KF_SM90_JOIN_D128);
    const bool joined = two_q && !ovl_ok && (rflags & KF_CUDA_RECIPE_ATTENTION_ITEMS_JOINED) &&
                        !(rflags & KF_CUDA_RECIPE_ATTENTION_ITEMS_APART);
    const int ovl =
        (ovl_ok && !(rflags & KF_CUDA_RECIPE_ATTENTION_ITEMS_APART)) || joined ? 1 : 0;
    const bool apart = ovl_ok && !ovl;
    /* the softmax's exp2s by polynomial, of every 8 column groups, where
     * KF_CUDA_RECIPE_ATTENTION_EXP2_POLY asks (kernel letter e; else 0: all
     * on MUFU); none where the score reads a tensor and the keys make two
     * tiles or fewer, where ptxas lays the one main-loop step out straight
     * (sm90_shape_of's rule for wide tiles): an additive mask [120, 140] at
     * head dim 128 spilled 56 bytes with a quarter, 32 with an eighth;
     * [1000, 1000] and ALiBi's slopes spill nothing */
    int poly = at->d == 64 ? KF_SM90_EXP2_POLY_D64 : KF_SM90_EXP2_POLY_D128;
    if (!sm90 || !(rflags & KF_CUDA_RECIPE_ATTENTION_EXP2_POLY) ||
        (score_loads(g) && at->skv <= 2 * sh.bc))
        poly = 0;

    double scale = 1.0;
    const uint32_t fold =
        sm90 && (KF_SM90_SCALE_FOLD || f32s) ? fold_scale(&c, f32s, &scale) : KF_NONE;
    /* f32 scores where the flag asks for them: the scale folded where the
     * score takes it, and every other float node of the score expression
     * unrounded (c.score_f32: ALiBi's bias and sum, a softcap's quotient,
     * tanh and product; see the top of this file) */
    const bool f32 = f32s;
    /* with f32 scores, a scale at the score's top folded the same way
     * (top_scale: a softcap's 30) */
    double tscale = 1.0;
    const uint32_t tfold = sm90 && f32 && fold == KF_NONE ? top_scale(&c, &tscale) : KF_NONE;
    if (tfold != KF_NONE)
        scale = tscale;
    /* a bounded score's fixed softmax shift (score_max) */
    const double smax =
        (sm90 && !(rflags & KF_CUDA_RECIPE_ATTENTION_ROW_MAX) ? score_max(g, fold, dt) : 0.0) /
        (tfold != KF_NONE ? tscale : 1.0);
    /* a bounded score with a tanh (a softcap) at head dim 128 holds two MUFU
     * ops a score, the tanh and the exp2: by default a share of its exp2s goes
     * to the FMA pipe (KF_CUDA_RECIPE_ATTENTION_SOFTCAP_MUFU keeps them on
     * MUFU) */
    const bool capping = sm90 && smax > 0 && at->d == 128 && has_tanh(g);
    if (capping && !(rflags & KF_CUDA_RECIPE_ATTENTION_SOFTCAP_MUFU) &&
        !(score_loads(g) && at->skv <= 2 * sh.bc))
        poly = KF_SM90_EXP2_POLY_D128;
    /* O, l and m rescaled lazily where the scores have a running max (not a
     * bounded score's fixed shift): by default at head dim 128 (but where
     * KF_CUDA_RECIPE_ATTENTION_EAGER_RESCALE keeps the per-tile rescale:
     * kernel letter y), at 64 where the build-time KF_SM90_LAZY_RESCALE
     * asks (letter z: measured slower there) */
    const bool runmax = sm90 && smax <= 0;
    const bool eager =
        runmax && at->d == 128 && (rflags & KF_CUDA_RECIPE_ATTENTION_EAGER_RESCALE);
    const int lazy = runmax && !eager && (at->d == 128 || KF_SM90_LAZY_RESCALE) ? 1 : 0;
    /* a block-sparse keep map's edge path merged into the inner one (the
     * kernel before att16: KF_CUDA_RECIPE_ATTENTION_BS_EDGE_MERGED) */
    const int merged =
        sm90 && skip == 3 && (rflags & KF_CUDA_RECIPE_ATTENTION_BS_EDGE_MERGED) ? 1 : 0;
    /* a causal or window item's key tiles diagonal-first (templates/
     * attention_sm90.cuh, KF_DESC_WALK; kernel letter d) where
     * KF_CUDA_RECIPE_ATTENTION_KEYS_DESC asks: the row max settles on the
     * first tile, so the lazy rescale stays idle under ALiBi's bias, which
     * grows toward the diagonal. A keep map's walk and the narrower last
     * tile (no mask) keep the ascending order */
    const int desc = sm90 && (skip == 1 || skip == 2) && sh.bcl == 0 &&
                             (rflags & KF_CUDA_RECIPE_ATTENTION_KEYS_DESC)
                         ? 1
                         : 0;
    /* an ascending causal item's last step peeled after the loop, the only
     * one that can be an edge tile (attention_sm90.cuh, KF_EDGE_LAST; kernel
     * letter u), so the loop's steps carry no edge path: by default for a
     * softcap's f32-score kernel (capping: measured 3.1% faster, A B B A
     * 2.0%, H200, att18 at 0bc2f96; 3% at cb011fc, att17c), where KF_CUDA_
     * RECIPE_ATTENTION_EDGE_LAST then keeps every step's edge check;
     * elsewhere (the rounded forms too) where the flag asks (measured: a tie
     * on causal, slower on ALiBi and head dim 64). A window's item the same
     * by default (the same letter u; KF_CUDA_RECIPE_ATTENTION_WINDOW_INLOOP
     * keeps the edge check in every step): its far-edge steps after the
     * first in a loop of their own, the loop between them and the diagonal
     * without the edge path (win18: B4 H32 S4096 window 1024 main loop 1098
     * -> 557 SASS instructions; 1.3% faster idle, 1.5% A B B A, H100,
     * 796d4fc) */
    const bool ewin = sm90 && skip == 2 && sh.bc == SM90_BR && sh.bcl == 0 && !desc &&
                      !(rflags & KF_CUDA_RECIPE_ATTENTION_WINDOW_INLOOP);
    const int elast = (sm90 && skip == 1 && sh.bc == SM90_BR && sh.bcl == 0 && !desc &&
                       ((rflags & KF_CUDA_RECIPE_ATTENTION_EDGE_LAST) != 0) != (capping && f32)) ||
                              ewin
                          ? 1
                          : 0;
    /* fa3_ the sm_90a kernel; p: its softmax pinned, f: f32 scores, t: the
     * softmax's reductions as trees, l: the tail longest first, w: 176-key
     * tiles (r: the ragged last one narrower), c: 2-CTA clusters, b: bounded
     * scores, a fixed shift, e: exp2s partly by polynomial, i: items one at
     * a time, j: items joined where they are not by default, z: O rescaled lazily where it is not by default (head
     * dim 64), y: O rescaled every key tile where it is lazy by default (head
     * dim 128), m: a keep map's edge path merged, v: a keep map's L2
     * policies and prefetch along its walk, d: causal or window key tiles
     * diagonal-first, u: a causal item's last step peeled (a window's far
     * edge's steps too), the loop's steps without an edge path (fa3p_, fa3f_, fa3pf_, fa3t_, ...,
     * fa3pftlwrcbvseizmdu_; h, a tanh partly by a rational, was retired
     * with its flag TANH_POLY) */
    char prefix[24] = "fa_";
    if (sm90)
        snprintf(prefix, sizeof prefix, "fa3%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s_", pin ? "p" : "",
                 f32 ? "f" : "", tree ? "t" : "", lpt ? "l" : "", sh.bc != SM90_BC ? "w" : "",
                 sh.bcl ? "r" : "", sh.cluster == 2 ? "c" : "", smax > 0 ? "b" : "",
                 bsl2 ? "v" : "", bst ? "s" : "", bsk ? "k" : "", poly > 0 ? "e" : "",
                 apart ? "i" : joined ? "j" : "",
                 lazy && at->d != 128 ? "z" : eager ? "y" : "", merged ? "m" : "",
                 desc ? "d" : "", elast ? "u" : "");
    cg_set_name(&c, prefix);
    c.div_by_mul = true;
    out->tmpl = sm90 ? KF_CUDA_TEMPLATE_ATTENTION_SM90 : KF_CUDA_TEMPLATE_ATTENTION_MMA;
    out->vec = 8;
    /* Params: Q, K, V, O, then the score expression's loads. */
    int pq = cg_param_add(&c, KF_CUDA_PARAM_IN, ops[0].base, dt, cg_tensor_bytes(&c, ops[0].base));
    int pk = cg_param_add(&c, KF_CUDA_PARAM_IN, ops[1].base, dt, cg_tensor_bytes(&c, ops[1].base));
    int pvp = cg_param_add(&c, KF_CUDA_PARAM_IN, ops[2].base, dt, cg_tensor_bytes(&c, ops[2].base));
    int po = cg_param_add(&c, KF_CUDA_PARAM_OUT, at->out, dt, cg_tensor_bytes(&c, at->out));
    /* the log-sum-exp, a row-major row each (templates: KF_LSE) */
    int pl = at->lse == KF_NONE ? -1
                                : cg_param_add(&c, KF_CUDA_PARAM_OUT, at->lse,
                                               gr->nodes[at->lse]->dtype,
                                               cg_tensor_bytes(&c, at->lse));
    for (uint32_t i = 0; i < c.n; i++)
        if (g->expr[i].kind == KF_EXPR_SCORE)
            snprintf(c.ov[i], OV_MAX, "s");
    cg_mark(&c, at->score);
    cg_load_params(&c);
    if (c.st != KF_OK)
        return cg_end(&c, c.st);
    uint32_t block = ATTN_BR / 16 * 32;
    uint32_t smem = (uint32_t)(ATTN_BR + 4 * ATTN_BC) * (uint32_t)at->d * 2u;
    out->launch.block = sm90 ? 384 : block;
    out->launch.items_per_block = 1;
    if (sm90 && sh.cluster == 2) {
        /* persistent clusters of 2: a cluster takes query tiles 2p and
         * 2p + 1 of a batch-head, a block each; whole clusters */
        out->launch.work_items = (uint64_t)(bh * nqt);
        out->launch.blocks_per_sm = 1;
        out->launch.grid_multiple = 2;
    } else if (sm90) {
        /* persistent: at most one block an SM, each taking units (pairs of
         * query tiles, templates/attention_sm90.cuh) grid-strided */
        out->launch.work_items = (uint64_t)(bh * ((nqt + 1) / 2));
        out->launch.blocks_per_sm = 1;
    } else {
        /* every item its own block (the grid-stride loop serves any grid) */
        out->launch.work_items = (uint64_t)(bh * nqt);
        out->launch.blocks_per_sm = 65535;
    }
    out->launch.shared_bytes = sm90 ? sm90_smem(at->d, &sh) : smem;

    if (sm90) {
        cg_emit_head(&c, "fused attention (sm_90a wgmma/TMA kernel)");
        if (pin || f32 || tree || lpt || sh.bc != SM90_BC || sh.cluster == 2 || smax > 0 || bst ||
            poly > 0 || apart || joined || lazy || eager || merged || bsl2 || desc ||
            elast)
            cg_printf(&c.s, "/* forms: %s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s */\n",
                      desc    ? "key tiles diagonal-first; "
                      : ewin  ? "the window's edge steps out of the main loop; "
                      : elast ? "the last key tile's step peeled; "
                              : "",
                      merged ? "the keep map's edge path merged; " : "",
                      bsl2 ? "the keep map's L2 policies and walk prefetch; " : "",
                      lazy ? "O rescaled lazily; " : eager ? "O rescaled every key tile; " : "",
                      apart ? "items one at a time; " : joined ? "items joined; " : "",
                      poly > 0 ? "exp2s partly by polynomial; " : "",
                      bst ? "the keep map's walk in shared memory; " : "",
                      bsk ? "query tiles paired by kept count; " : "",
                      smax > 0 ? "bounded scores, a fixed softmax shift; " : "",
                      pin ? "softmax pinned under P.V; " : "",
                      f32 && fold != KF_NONE ? "f32 scores, the scale folded into exp2; "
                      : f32                  ? "f32 scores; "
                                             : "",
                      tree ? "row max and sum as trees; " : "",
                      lpt ? "the tail's items longest first; " : "",
                      sh.bc != SM90_BC ? "176-key tiles; " : "",
                      sh.bcl ? "the ragged last key tile narrower; " : "",
                      sh.cluster == 2 ? "2-CTA clusters sharing K and V" : "");
        cg_puts(&c.s, kf_cuda_tpl_hopper);
        /* the folded scale (1: none), exact in hex: a power of two, or with
         * f32 scores any positive constant */
        cg_printf(&c.s,
                  "\n#define KF_SCORE_SCALE %af\n#define KF_LAZY_RESCALE %d\n#define "
                  "KF_L2_PREFETCH %d\n#define KF_PIN_SOFTMAX %d\n#define KF_TREE_SOFTMAX %d\n"
                  "#define KF_TAIL_LPT %d\n#define KF_CLUSTER %d\n#define KF_PRODUCER_REGS %d\n"
                  "#define KF_CONSUMER_REGS %d\n#define KF_EXP2_POLY %d\n"
                  "#define KF_ITEM_OVERLAP %d\n#define KF_BS_EDGE_MERGED %d\n#define KF_BS_L2 %d\n"
                  "#define KF_DESC_WALK %d\n#define KF_EDGE_LAST %d\n",
                  scale, lazy, KF_SM90_L2_PREFETCH, pin, tree, lpt, sh.cluster,
                  sh.preg, sh.creg, poly, ovl, merged, bsl2, desc, elast);
        cg_printf(
            &c.s,
            "#define KF_D %lld\n#define KF_BR %d\n#define KF_BC %d\n#define KF_STAGES %u\n"
            "#define KF_QBUF %d\n#define KF_DESC_ADD %d\n"
            "#define KF_SQ %lld\n#define KF_SKV %lld\n#define KF_BH %lldLL\n#define KF_AB \"%s\"\n"
            "#define KF_ELEM %s\n#define KF_MASK_SKIP %d\n#define KF_WINDOW %lld\n"
            "#define KF_O p%d\n#define KF_BC_LAST %d\n"
            "/* mask %s; Q, K and V through TMA maps */\n\n",
            (long long)at->d, SM90_BR, sh.bc, sh.stages, sh.qbuf, KF_SM90_DESC_ADD,
            (long long)at->sq, (long long)at->skv, (long long)bh,
            dt == KF_DTYPE_BF16 ? "bf16" : "f16", cg_storage_type(dt), skip,
            (long long)(skip == 2 ? at->window : 0), po, sh.bcl, kf_mask_kind_name(at->mask));
        (void)pq;
        (void)pk;
        (void)pvp;
        if (smax > 0)
            cg_printf(&c.s, "#define KF_SCORE_MAX %af /* %g: the scores' bound */\n", (float)smax,
                      smax);
        emit_tma_fns(&c, g, ops, sh.cluster, bsl2);
        emit_wgmma_sm90(&c, at->d, sh.bc, sh.bcl, dt);
        emit_round_sm90(&c);
    } else {
    cg_emit_head(&c, "fused attention (sm_80 mma.sync kernel)");
    cg_printf(
        &c.s,
        "#define KF_D %lld\n#define KF_BR %d\n#define KF_BC %d\n#define KF_SQ %lld\n"
        "#define KF_SKV %lld\n#define KF_BH %lldLL\n#define KF_AB \"%s\"\n#define KF_MINB %d\n"
        "#define KF_ELEM %s\n#define KF_MASK_SKIP %d\n#define KF_WINDOW %lld\n"
        "#define KF_Q (p%d + %lldLL)\n#define KF_K (p%d + %lldLL)\n#define KF_V (p%d + %lldLL)\n"
        "#define KF_O p%d\n"
        "#define KF_Q_RS %lldLL\n#define KF_K_RS %lldLL\n#define KF_V_RS %lldLL\n"
        "/* mask %s; dynamic shared memory: Q %d x %lld, K and V 2 x %d x %lld each */\n\n",
        (long long)at->d, ATTN_BR, ATTN_BC, (long long)at->sq, (long long)at->skv, (long long)bh,
        dt == KF_DTYPE_BF16 ? "bf16" : "f16", ATTN_BR == 64 ? 2 : 1, cg_storage_type(dt), skip,
        (long long)(skip == 2 ? at->window : 0), pq, (long long)ops[0].off, pk,
        (long long)ops[1].off, pvp, (long long)ops[2].off, po, (long long)ops[0].s_row,
        (long long)ops[1].s_row, (long long)ops[2].s_row, kf_mask_kind_name(at->mask), ATTN_BR,
        (long long)at->d, ATTN_BC, (long long)at->d);

    cg_attn_emit_bh_offsets(&c, g, ops);
    cg_puts(&c.s, "__device__ __forceinline__ bool kf_attn_aligned(KF_PARAMS) {\n"
                  "    return kf_aligned(KF_Q, 16) && kf_aligned(KF_K, 16) && kf_aligned(KF_V, 16);"
                  "\n}\n\n");
    }
    cg_attn_emit_o_offset(&c, g, "KF_D");
    if (pl >= 0)
        cg_printf(&c.s, "#define KF_LSE p%d /* the scores' log-sum-exp, [.., sq] */\n\n", pl);

    /* the sm_90a kernel's pair form of the inner score where it takes the
     * score (the scalar one elsewhere); split at a tanh only where
     * KF_CUDA_RECIPE_ATTENTION_TANH_SKIP asks for it (the tanh on every
     * tile otherwise); its diagonal once for both rows (scr13: the inner
     * tile's score 371 -> 280 instructions; the form for each row, the flag
     * DIAG_EACH_ROW, was retired by att17b to reuse its bit); its part
     * free of loads read from a table in shared memory where the table fits
     * (dtab_fits; the form computing it on every tile, flag DIAG_COMPUTE,
     * was retired by att18 to reuse its bit); a causal mask's edge tiles by
     * the pair form too (the scalar score there, flag EDGE_SCALAR, was
     * retired by att17c to reuse its bit); an affine diagonal added to the
     * scaled score as the tile's affine part (CG_PAIR_DIAG_ADD) but where
     * KF_CUDA_RECIPE_ATTENTION_DIAG_STEPPED keeps the stepped diagonal */
    const bool dtab = sm90 && !f32 && dtab_fits(&c, at, skip, nqt * br, br, &sh, arch);
    /* (a folded scale's score functions keep their mask's rounding, as
     * before: the causal, window and block-sparse kernels unchanged) */
    c.score_f32 = f32 && fold == KF_NONE;
    st = emit_score_fns(&c, skip != 0, fold, f32 && fold != KF_NONE, tfold, sm90,
                        (rflags & KF_CUDA_RECIPE_ATTENTION_TANH_SKIP ? CG_PAIR_SPLIT : 0u) |
                            CG_PAIR_DIAG |
                            (dtab ? CG_PAIR_DIAG_TAB : 0u) | CG_PAIR_DIAG_EDGE |
                            (rflags & KF_CUDA_RECIPE_ATTENTION_DIAG_STEPPED ? 0u
                                                                            : CG_PAIR_DIAG_ADD));
    c.score_f32 = false;
    if (st != KF_OK)
        return cg_end(&c, st);
    emit_block_sparse(&c, g, skip, br, sm90 ? sh.bc : ATTN_BC, bst, bsk);
    cg_puts(&c.s, kf_cuda_tpl_attention_common);
    cg_puts(&c.s, sm90 ? kf_cuda_tpl_attention_sm90 : kf_cuda_tpl_attention);
    return cg_end(&c, c.st);
}

kf_status kf_cuda_codegen_attention(const kf_plan *plan, uint32_t group, const char *arch,
                                    const kf_mem *mem, kf_cuda_kernel *out) {
    return gen(plan, group, arch, mem, out, false, 0);
}

kf_status kf_cuda_codegen_attention_sm90(const kf_plan *plan, uint32_t group, const char *arch,
                                         const kf_mem *mem, kf_cuda_kernel *out) {
    return gen(plan, group, arch, mem, out, true, 0);
}

kf_status kf_cuda_codegen_attention_sm90_flags(const kf_plan *plan, uint32_t group,
                                               const char *arch, uint64_t rflags,
                                               const kf_mem *mem, kf_cuda_kernel *out) {
    return gen(plan, group, arch, mem, out, true, rflags);
}
