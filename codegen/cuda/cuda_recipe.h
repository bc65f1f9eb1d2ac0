/*
 * cuda_recipe.h -- how each kernel group of a plan runs on a CUDA device,
 * decided once, here, and kept as data (DESIGN.md, "Runtime rules").
 *
 *   kf_plan + kf_cuda_target (arch, SM count, flags)
 *       --kf_cuda_recipes_create--> one kf_cuda_recipe per group:
 *           variants (one, or several that the executor times once and
 *           chooses among), each an ordered list of steps:
 *             KERNEL  a generated kernel: its source (and its digest), name,
 *                     grid / block / cluster in x, y, z, dynamic shared
 *                     memory, and its by-value arguments (buffer pointers,
 *                     64-bit scalars, TMA descriptors);
 *             GEMM    a library matmul (cuBLASLt): shape, operand layouts,
 *                     its native epilogue, bias and residual;
 *           plus the buffers each step reads and writes: a plan tensor's
 *           buffer (a view's base) at an offset, or a scratch buffer of the
 *           recipe.
 *
 * Who reads the recipes:
 *   - runtime/cuda_exec.c executes them: it lays the buffers out, compiles
 *     (through the cache) and loads each KERNEL step, binds arguments and
 *     launches; it makes no lowering decision of its own;
 *   - `kfuse aot` compiles exactly the KERNEL steps of every variant;
 *   - the report prints them (kf_cuda_recipes_print, text and JSON).
 *
 * Purity: the recipes are a function of (plan, target) only. The same graph
 * gives the same recipes (same bytes when printed) in `kfuse aot` or
 * `kfuse report` on a machine with no GPU as in kf_compile on the GPU, when
 * the target is the same (the executor fills it from the device: arch, SM
 * count; the flags from the context).
 */
#ifndef KF_CODEGEN_CUDA_RECIPE_H
#define KF_CODEGEN_CUDA_RECIPE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "codegen/cuda/cuda_codegen.h"

/* ------------------------------------------------------------------------ */
/* Target                                                                     */
/* ------------------------------------------------------------------------ */

/* Recipe flags (bitwise or). */
enum {
    KF_CUDA_RECIPE_NO_LT_EPILOGUE = 1u << 0,    /* cuBLASLt runs bare GEMMs; every epilogue is
                                                   a generated kernel (KF_FLAG_NO_CUBLASLT) */
    KF_CUDA_RECIPE_GEMM_GENERATED = 1u << 1,    /* a GEMM group the generated GEMM kernel takes
                                                   runs it alone (KF_GEMM_GENERATED) */
    KF_CUDA_RECIPE_GEMM_MEASURED = 1u << 2,     /* ... or measured against cuBLASLt: variant 0
                                                   the kernel, variant 1 cuBLASLt */
    KF_CUDA_RECIPE_UNFUSED_ATTENTION = 1u << 3, /* every attention group runs unfused
                                                   (KF_FLAG_UNFUSED_ATTENTION); without it a
                                                   group the fused kernel takes is one kernel */
    KF_CUDA_RECIPE_ATTENTION_FA2 = 1u << 4,     /* a fused attention group runs the mma.sync (FA2)
                                                   kernel also on sm_90a (KF_ATTENTION_FA2);
                                                   without it the sm_90a kernel runs wherever it
                                                   takes the group */
    /* Internal (no kf_options field): the bench and the tests set these on
     * a target to compare the generated GEMM's schedules on one device. */
    KF_CUDA_RECIPE_GEMM_PINGPONG = 1u << 5,   /* generated GEMMs take ping-pong 128-wide tiles
                                                 wherever some block gets two tiles */
    KF_CUDA_RECIPE_GEMM_STAGED_EPI = 1u << 6, /* generated GEMMs stage the accumulators
                                                 through shared memory for the epilogue (the
                                                 schedule before the register epilogue) */
    KF_CUDA_RECIPE_ATTENTION_DECODE = 1u << 7,  /* a fused attention group runs the split-KV
                                                   decode kernels whatever its query length
                                                   (KF_ATTENTION_DECODE); without it they run
                                                   where the query is short (Sq <= 16) and
                                                   ATTENTION_FA2 is not asked for */
    KF_CUDA_RECIPE_GEMM_SM80 = 1u << 8,         /* with GEMM_GENERATED or GEMM_MEASURED: the
                                                   generated GEMM is the sm_80 (mma.sync)
                                                   kernel on any arch from sm_80, also 9.x
                                                   (KF_GEMM_SM80); without it the sm_80 kernel
                                                   on 8.x and the sm_90a one on sm_90a */
    KF_CUDA_RECIPE_GEMM_SM80_8WARPS = 1u << 9,  /* internal: the sm_80 kernel's 128 x 128 tile
                                                   on 8 warps of 64 x 32 (the layout before
                                                   the 4 warps of 64 x 64; the bench compares
                                                   them) */
    KF_CUDA_RECIPE_GEMM_EPI_REGS = 1u << 13,     /* internal: generated sm_90a GEMMs store
                                                    from the registers (the quad transposes'
                                                    vectors) where they would store through
                                                    shared memory by TMA (the default for one
                                                    bf16/f16 output: kf_cuda_gemm_shape.epi_tma;
                                                    the bench compares) */
    KF_CUDA_RECIPE_GEMM_NORM_IN_RING = 1u << 10, /* internal: a generated GEMM (not a pair)
                                                    normalizes A's tiles in the ring instead of
                                                    folding the norm into B or reading A from
                                                    the prologue's scratch (the schedule
                                                    before; the bench and the tests compare) */
    KF_CUDA_RECIPE_GEMM_CLUSTER2 = 1u << 11,     /* internal: generated sm_90a GEMMs (either
                                                    schedule) run as 2-CTA clusters, tile
                                                    pairs sharing B by TMA multicast (the
                                                    bench and the tests compare; a sibling
                                                    set's one kernel too); a SwiGLU
                                                    pair's cooperative 128 x (2 x 128)
                                                    tiles take them by default (see
                                                    GEMM_DUAL_F32T) */
    KF_CUDA_RECIPE_GEMM_EPI_AHEAD = 1u << 14,    /* internal: the TMA-store epilogue computes
                                                    two chunks' values before it stores the
                                                    first (not with a norm folded into B, the
                                                    head view, stream-K or a sibling set;
                                                    measured slower, the bench compares) */
    KF_CUDA_RECIPE_GEMM_PP_EARLY = 1u << 12,     /* internal: a ping-pong consumer passes the
                                                    turn once its main loop's wgmmas are
                                                    issued, not done (not with a row
                                                    epilogue; measured no faster, the bench
                                                    compares) */
    KF_CUDA_RECIPE_GEMM_STREAMK = 1u << 20,      /* internal: generated sm_90a GEMMs in the
                                                    cooperative schedule whose last wave is
                                                    at most 3/4 full (or whose tiles are
                                                    fewer than the SMs: decode shapes) cut
                                                    the tail's K steps evenly over every
                                                    block (stream-K, gemm_sm90.cuh KF_SK;
                                                    the bench and the tests compare) */
    KF_CUDA_RECIPE_GEMM_SK_NARROW = 1u << 21,    /* internal: with GEMM_STREAMK, one tile row
                                                    (decode) keeps 128-wide tiles where it
                                                    would take 128 x 256 (the bench compares) */
    KF_CUDA_RECIPE_ATTENTION_PIN_SOFTMAX = 1u << 16, /* internal: the sm_90a attention kernel
                                                        keeps a key tile's whole softmax in
                                                        front of P.V's wait, under P.V
                                                        (templates/attention_sm90.cuh,
                                                        KF_PIN_SOFTMAX); measured slower
                                                        (H200, 9f046fe), kept for measuring */
    KF_CUDA_RECIPE_GEMM_NO_SIBLINGS = 1u << 18,    /* internal: each member of a GEMM sibling
                                                      set (gemm.sib_*: Q, K, V behind one norm)
                                                      runs its own recipe, the norm computed by
                                                      each (the schedule before; the bench
                                                      compares). Without it the set runs in its
                                                      first member's recipe with the norm
                                                      computed once (recipe_gemm_siblings.c) */
    KF_CUDA_RECIPE_GEMM_SIB_ONE = 1u << 25,        /* internal: a GEMM sibling set's generated
                                                      side is ONE kernel over its members'
                                                      concatenated columns (sm_90a or sm_80:
                                                      kf_cuda_codegen_gemm_sm90_set, _sm80_set),
                                                      where it
                                                      takes the set, whatever the default
                                                      (recipe_gemm_siblings.c's SIB_ONE_DEFAULT:
                                                      on) */
    KF_CUDA_RECIPE_GEMM_SIB_APART = 1u << 26,      /* internal: the members of a GEMM sibling
                                                      set keep their own GEMM kernels (the
                                                      schedule before the one kernel; the bench
                                                      compares) */
    KF_CUDA_RECIPE_GEMM_SIMT_ROW_SPLIT = 1u << 15, /* internal: the SIMT kernel's row
                                                      epilogue in the split form (GEMM, then a
                                                      row pass) even where the tile holds the
                                                      rows (the form before; the bench
                                                      compares) */
    KF_CUDA_RECIPE_ATTENTION_F32_SCORE = 1u << 17, /* internal: the sm_90a attention kernel
                                                      takes a scale of Q.K^T (then at most a
                                                      -inf mask) in f32, unrounded, folded into
                                                      the softmax's exp2 (cg_attention.c,
                                                      fold_scale); the default since it won
                                                      (H200, 4784014), so the flag changes
                                                      nothing but where ROUNDED_SCORE is set */
    KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX = 1u << 24, /* internal: the sm_90a attention kernel
                                                         takes a key tile's row max and row sum
                                                         as trees (4 partial maxima and 4
                                                         partial sums a row) where they are
                                                         chains of 33 and 32 (templates/
                                                         attention_sm90.cuh, KF_TREE_SOFTMAX):
                                                         the default at head dim 128 since
                                                         sfx13's run (H100, 9c0c856, a whole
                                                         tree: causal 0.916 / 0.921 ms against
                                                         0.935 / 0.941), asked for at 64;
                                                         CHAIN_SOFTMAX overrides it */
    KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE = 1u << 23, /* internal: the sm_90a attention kernel
                                                          rounds its scale of Q.K^T as the
                                                          reference stores it (the default
                                                          before f32 scores; the bench and the
                                                          tests compare), unless F32_SCORE is
                                                          set too */
    KF_CUDA_RECIPE_GEMM_DECODE = 1u << 19, /* internal: with GEMM_GENERATED or GEMM_MEASURED,
                                              a bf16 / f16 GEMM group with M <= 64 (decode)
                                              runs the decode kernel (templates/
                                              gemm_decode.cuh: B streamed once, split-K
                                              reduced in the kernel) where it takes the
                                              group, on any arch from sm_80; without it
                                              M <= 32 on sm_90a does, unless GEMM_SM80
                                              (recipe_gemm_decode.c) */
    KF_CUDA_RECIPE_GEMM_NO_DECODE = 1u << 27, /* internal: no decode kernel (the tiled
                                                 kernels at every M; the bench and the tests
                                                 compare) */
    KF_CUDA_RECIPE_ATTENTION_TAIL_LPT = 1u << 22, /* internal: the sm_90a attention kernel's
                                                     persistent blocks take the last two
                                                     rounds' units and the leftover as single
                                                     query tiles, longest first, in a snake
                                                     (templates/attention_sm90.cuh,
                                                     KF_TAIL_LPT; kernel letter l): by
                                                     default for a causal or window mask
                                                     at head dim 128 (and a keep map's
                                                     paired units), where
                                                     the flag then keeps the grid-strided
                                                     walk (cg_attention.c, measured there);
                                                     elsewhere the flag asks for it */
};

/* Recipe flags past bit 31 (kf_cuda_target.flags is 64 bits; an enum
 * constant is an int), and bit 30. */
/* internal, measure-only: an elementwise kernel reads the two remapped loads
 * of a pair (rotate_half's halves under their concat's where) apart, each
 * behind its own vector / one-load / per-element branch in the body, the
 * form before they were read as one load (cg_elementwise.c, find_pairs) */
#define KF_CUDA_RECIPE_EW_PAIRS_APART (UINT64_C(1) << 30)
/* internal: the sm_90a attention kernel runs as 2-CTA clusters where no mask
 * cuts tiles at head dim 128 with an even count of query tiles: the CTAs take
 * query tiles 2p and 2p + 1 of one batch-head and each loads half of every K
 * and V tile, multicast to both (templates/attention_sm90.cuh, KF_CLUSTER);
 * 2-3% slower (H100, 7905c13: L2 was at 41% of its peak), so off */
#define KF_CUDA_RECIPE_ATTENTION_CLUSTER2 (UINT64_C(1) << 32)
/* internal: the decode kernel on sm_90a in its TMA form
 * (templates/gemm_decode.cuh, KF_TMA): A and B by cp.async.bulk.tensor boxes
 * from a producer warp into a ring on mbarriers, every stage in flight, in
 * place of the 128 threads' 16-byte cp.async copies. Faster than the cp.async
 * form on every decode row run (H100, 020d5bb, ms, TMA / cp.async / cuBLASLt:
 * M 32 GEMM + bias + GELU 32x4096x16384 0.0710 / 0.0737 / 0.0521; M x 4096 x
 * 4096 at M 1 0.0156 / 0.0194 / 0.0132, 8 0.0155 / 0.0180 / 0.0118, 16
 * 0.0167 / 0.0203 / 0.0115, 32 0.0186 / 0.0236 / 0.0111, 64 0.0216 / 0.0328
 * / 0.0115), still off: the MLP's 11008 rows and the full GPU suite with it
 * on have not run (recipe_gemm_decode.c) */
#define KF_CUDA_RECIPE_GEMM_DEC_TMA (UINT64_C(1) << 43)
/* internal: the decode kernel's register form where M <= 32
 * (templates/gemm_decode.cuh, KF_REG): B and A by 16-byte loads straight
 * into the MMA's registers, two chunks of 32 K values a warp in flight, 4
 * blocks an SM to M 8 and 2 past (its registers), no ring and no barrier in
 * the K loop; it takes precedence over DEC_TMA (recipe_gemm_decode.c).
 * Measured on an H100 (bd56b63 and c76f3eb, two runs, ms, register / ring /
 * cuBLASLt): M 32 GEMM + bias + GELU 32x4096x16384 (B N-major) 0.0676,
 * 0.0689 / 0.0764, 0.0753 / 0.0521, 0.0524 (A B B A: 0.0613 / 0.0707, and
 * 0.0613 against cuBLASLt's 0.0501); weights [N, K]: M 16 x 11008 x 4096
 * 0.0428, 0.0424 / 0.0455, 0.0447 / 0.0372, 0.0375; M 16 x 4096 x 11008
 * 0.0490, 0.0476 / 0.0418, 0.0444 / 0.0382, 0.0382 (slower there); M x 4096
 * x 4096 (in L2) at M 1 0.0155 / 0.0174 / 0.0128, 8 0.0152 / 0.0176 /
 * 0.0118, 32 0.0182 / 0.0227 / 0.0107. Off: cuBLASLt is faster in every
 * row, so the measured choice would not run it, and the ring wins the long
 * K-major row. Bit 28 was DEC_BK64 (K steps of 64 in the ring,
 * measure-only, retired with its rows and tests); bit 30 (DEC_WIDE, strips
 * of 128 columns, slower in every row: the ring at fce0fb6, the register
 * form at bd56b63 (M 32 row 0.0774); then, at
 * c76f3eb, DEC_PF: the register form prefetching B into L2 4 chunks ahead,
 * 10-25% slower) is free */
#define KF_CUDA_RECIPE_GEMM_DEC_REG (UINT64_C(1) << 28)
/* internal: the sm_90a attention kernel takes key tiles of 128 where it would
 * take 176 (cg_attention.c, sm90_shape_of): 176-key tiles are the default
 * where no mask cuts tiles (no causal, window or block-sparse mask) at head
 * dim 128 with 3+ key tiles and a score that reads no tensor, with one Q
 * buffer and two 88 KiB stages (H100, ac341ae, non-causal B4 H32 S4096 D128:
 * 1.679 ms against 128 keys' 1.784, cuDNN 1.681); this flag keeps the
 * 128-key form for comparing (bit 29, ATTENTION_WIDE_KEYS, asked for the
 * wide form before it was the default: retired, free) */
#define KF_CUDA_RECIPE_ATTENTION_NARROW_KEYS (UINT64_C(1) << 33)
/* internal: the sm_90a attention kernel's wide form (176-key tiles) runs a
 * ragged last key tile at the full width, its keys past Skv masked, where by
 * default that tile's Q.K^T, softmax and P.V take its keys rounded up to 16
 * alone (cg_attention.c, sm90_shape_of: KF_BC_LAST, kernel letter r): the
 * form before nc14, kept for comparing (H100, 727df10, non-causal B4 H32
 * S4096 D128, one run: 1.6743 ms against the narrower tile's 1.6422, cuDNN
 * 1.6230) */
#define KF_CUDA_RECIPE_ATTENTION_FULL_LAST_TILE (UINT64_C(1) << 59)
/* internal: a generated sm_90a GEMM with the TMA-store epilogue (or the
 * register epilogue, not a row epilogue in the tile: the split row form's
 * GEMM) prefetches the epilogue's row operands (a residual: a load that
 * varies with the row) of a tile into L2 when the tile starts
 * (cp.async.bulk.prefetch.L2, one per 64 columns of a row), so the
 * epilogue's loads of them hit L2 where they waited on DRAM between the
 * store barriers, or all at once after the main loop (gemm_sm90.cuh
 * KF_EPI_PF). Measured slower on the register epilogue (H100, 32085d9: the
 * split LayerNorm's GEMM 8192 x 4096 x 4096 + bias + residual 0.4737 ms
 * against 0.4341 idle, A B B A 0.5431 against 0.5047) */
#define KF_CUDA_RECIPE_GEMM_EPI_PF (UINT64_C(1) << 39)
/* internal: a generated sm_90a GEMM with the TMA-store epilogue and K <= 1024
 * keeps the cooperative 128 x 256 tiles where the default takes ping-pong
 * 128 x 128 (measured on an H200; the bench compares them on one device) */
#define KF_CUDA_RECIPE_GEMM_SHORT_COOP (UINT64_C(1) << 40)
/* internal: a generated sm_90a GEMM on ping-pong tiles counts a consumer's
 * tiles from its warpgroup index as it is, which ptxas takes as varying within
 * a warp: the tile counter, the stage index and all that derives from them
 * then live in vector registers, and each K step builds its wgmma descriptors
 * there and moves them to uniform ones by R2UR before every HGMMA. By default
 * the first tile comes through a shuffle from lane 0 (uniform to ptxas): GPT-2's
 * FC1 and LN + Q/K/V GEMMs (8 HGMMA a K step) 112 -> 58 SASS instructions a
 * K step, the out projection 125 -> 69, the LN + Q/K/V sibling set's one
 * kernel 127 -> 98 (gemm_sm90.cuh, KF_PP_VARYING). H100, 7f5077c: FC1 0.2391
 * -> 0.2300 ms at rest, A B B A under load 0.2775 -> 0.2682; LN + Q/K/V
 * 0.1741 -> 0.1710, A B B A a tie (0.2001 -> 0.2006). The form before, kept
 * to measure. (Bit 41 was GEMM_EPI_NTEST, retired: measured
 * slower in every row at a358742.) */
#define KF_CUDA_RECIPE_GEMM_PP_VARYING (UINT64_C(1) << 41)
/* internal: the sm_90a SwiGLU pair's form before session 17's sw17b: one-CTA
 * tiles (unless GEMM_CLUSTER2 asks for clusters), its register epilogue on
 * the f32 quad transposes of both accumulators (kf_epi<8>, the column test)
 * and silu by the expf sigmoid. By default the pair's cooperative 128 x
 * (2 x 128) tiles with two tile rows or more run as 2-CTA clusters (B by
 * multicast), and a pair in clusters takes its epilogue on packed pairs
 * (cuda_codegen.h epi_pk: kf_epi on the fragment's pairs, the quad
 * transposes on the packed words, no column test where the tiles cover N)
 * with silu by ex2 and rcp (silu_ex2). Measured on an H100 (fe74e00,
 * 8192 x 4096 x (2 x 11008), one run, A B B A): the clusters 0.978x of
 * this form, packed in clusters 0.983x of that; idle 2.0522 / 1.9140 /
 * 1.8208 ms. The packed epilogue without clusters measured slower (H100,
 * 7d2b7d8: 2.2523 ms against 2.1959, A B B A) and is retired (bit 42 was
 * DUAL_PK, which asked for it; before that EPI_NIN_ALL). The bench compares
 * (swiglu_generated_f32t, _c2f32t). */
#define KF_CUDA_RECIPE_GEMM_DUAL_F32T (UINT64_C(1) << 42)
/* internal: the sm_90a attention kernel keeps its running row max (and O's
 * rescale) even where the score expression bounds every score (a softcap:
 * cg_attention.c, score_max), which by default takes the bound as a fixed
 * shift instead; kept to measure the two against each other */
#define KF_CUDA_RECIPE_ATTENTION_ROW_MAX (UINT64_C(1) << 37)
/* internal: the sm_90a attention kernel with a whole-tile block-sparse keep
 * map lets the compiler merge its edge path (a ragged or dropped key tile:
 * the inner score or the fill) into the inner tiles' path, a select of every
 * score by whether the tile is kept -- 64 FSEL a 128-key tile on every kept
 * tile (templates/attention_sm90.cuh, KF_BS_EDGE_MERGED) -- where by default
 * the edge path stays a branch: the kernel before att16, kept to measure the
 * two against each other. (Bit 38 was ATTENTION_SCALAR_SCORE, the inner
 * score element by element where the pair form is shorter: the pair form
 * won (score12), and att16 retired the flag to reuse its bit.) */
#define KF_CUDA_RECIPE_ATTENTION_BS_EDGE_MERGED (UINT64_C(1) << 38)
/* internal, off by default: the sm_90a attention kernel's pair form splits a
 * score at its rounded tanh (cg_attention_pair.c, pair_split): a warp whose
 * operands of a key tile all lie where the tanh rounds to its operand takes
 * the operand, no MUFU.TANH; the first tile that needs the tanh sends the
 * item's later tiles to the pair form whole. It wins only where scores are
 * small: softcap 1.144 -> 1.056 ms on the bench's uniform inputs, 1.218 ->
 * 1.272 on scores 8 times as large (H100, scr13), so the default keeps the
 * tanh on every tile */
#define KF_CUDA_RECIPE_ATTENTION_TANH_SKIP (UINT64_C(1) << 47)
/* internal: the sm_90a attention kernel walks a causal or sliding-window
 * item's key tiles diagonal-first, descending (templates/attention_sm90.cuh,
 * KF_DESC_WALK; kernel letter d), where by default it walks them ascending,
 * the diagonal tile last: the row max is then nearly settled by the first
 * tile, so the lazy O rescale (KF_LAZY_RESCALE, head dim 128) stays idle
 * where a bias grows toward the diagonal (ALiBi). Block-sparse and unmasked
 * kernels keep the ascending walk. (Bit 48 was ATTENTION_DIAG_EACH_ROW,
 * ALiBi's diagonal for each of a thread's two rows, a form of the rounded
 * scores only: once for both won, 1.1157 -> 1.0921 ms (scr13); att17b
 * retired it to reuse its bit.) */
#define KF_CUDA_RECIPE_ATTENTION_KEYS_DESC (UINT64_C(1) << 48)
/* internal: the sm_90a attention kernel's f32 affine diagonal (ALiBi's
 * slope x (kv - q), KF_DIAG_LIN) stepped along the tile into a register a
 * key (34 FFMAs a 128-key tile, held across Q.K^T's wait) and added to each
 * scaled score (the form before att18), where by default, when the score is
 * the score times a positive constant plus the diagonal, the tile keeps
 * that sum's affine part (one FFMA of an immediate a score) and the softmax
 * applies the scale and the diagonal's row terms once a row
 * (cg_attention_pair.c, diag_add; attention_sm90.cuh, KF_DIAG_ADD); kept to
 * measure the two against each other. (Bit 62 was DIAG_COMPUTE: the rounded
 * form's bf16(kv - q) pairs computed on every tile, not read from the shared
 * table; the table measured 0.5% ahead, ali15 on an H200 at ae4d8ad;
 * att18 retired it to reuse its bit.) */
#define KF_CUDA_RECIPE_ATTENTION_DIAG_STEPPED (UINT64_C(1) << 62)
/* internal: the sm_90a attention kernel's ascending causal walk peels an
 * item's last step, the only one that can be an edge with 128-row and
 * 128-key tiles (attention_sm90.cuh, KF_EDGE_LAST; kernel letter u), so the
 * main loop's steps carry no edge path (B4 H32 S4096 causal: 764 -> 517
 * SASS instructions a step), where by default every step checks for an
 * edge. Measured on an H200 (att17c, cb011fc): causal and GQA a tie,
 * ALiBi 1-3% and head dim 64 3.5% slower, the softcap 3% faster; so off,
 * but for a softcap's f32-score kernel at head dim 128 (a bounded score
 * with a tanh), where the peeled step is the default since att18 (H200,
 * 0bc2f96: 1.0132 against 1.0454 ms, A B B A 0.980) and the flag keeps the
 * edge check in every step instead.
 * (Bit 63 was EDGE_SCALAR: a causal diagonal tile's scalar score where the
 * default takes the pair form there too and then the mask; slower, ali15;
 * att17c retired it to reuse its bit.) */
#define KF_CUDA_RECIPE_ATTENTION_EDGE_LAST (UINT64_C(1) << 63)
/* internal: a generated sm_90a GEMM's TMA-store epilogue without its bf16
 * pair forms (cg_raw_feed: a bf16x2 op's rounded operand packed from its
 * unrounded values by one cvt; kf_gm_pack2 packing an exact bf16x2 result by
 * bit operations; kf_gm_ldv unpacking bf16 pairs by a shift and a mask): the
 * code before, kept to measure the two against each other (GPT-2's out
 * projection: 266 SASS instructions a 64 x 64 chunk against ~160) */
#define KF_CUDA_RECIPE_GEMM_EPI_UNPACKED (UINT64_C(1) << 44)
/* internal: a generated sm_90a GEMM's consumers rebuild every wgmma
 * descriptor from its shared address each K step (mask, shift, or: the main
 * loop of 8192^3 is 82 SASS instructions a K step a warp for its 4 HGMMA),
 * where by default they step them by constant adds from the ring's
 * (KF_DESC_STEP: 43; gm14 found the kernels issuing 196M warp instructions
 * against cuBLASLt's 183M, 199M against 134M with bias + GELU, ncu, and
 * under the power cap instructions are energy, energy is time). The stepped
 * form won every pair run (H200, aa24eb8, blocks A B B A under sustained
 * load: 8192^3 1.6031 -> 1.5987 ms, + bias + GELU 8192 x 4096 x 16384
 * 1.6288 -> 1.6177, LLaMA's q projection 0.8452 -> 0.8351; after 1 s idle
 * 1.3886 -> 1.3688, 1.3831 -> 1.3788, 0.7163 -> 0.7006). The form before,
 * kept to measure */
#define KF_CUDA_RECIPE_GEMM_DESC_REBUILD (UINT64_C(1) << 34)
/* internal: a generated sm_90a GEMM walks its tiles KF_RASTER rows at a time
 * with the rows chosen so that a wave's DRAM panels are few: about
 * sqrt(SMs x tile width / 128) rows, a power of two (recipe_gemm.c,
 * square_raster: 16 for 128 x 256 tiles on 132 SMs), where by default it
 * walks 8. A wave of 132 tiles of 128 x 256 over 8192 x 4096 then takes 16
 * A panels and 8 B panels where it took 8 and 16 (every B column): a
 * wave-by-wave count of the panels gives 1.29 GB of DRAM reads against 1.54
 * (what ncu measured, gm14; cuBLASLt's 1.21). Measured slower (H200,
 * 98bc45c): DRAM reads 1.57 -> 1.36 GB but L2 traffic 8.34 -> 9.08 GB, and
 * A B B A under sustained load 1.5744 -> 1.5918 ms (8192^3 1.5694 -> 1.5767,
 * LLaMA's q projection 0.8171 -> 0.8165); kept to measure */
#define KF_CUDA_RECIPE_GEMM_RASTER_SQ (UINT64_C(1) << 35)
/* internal: a generated sm_90a GEMM's epilogue takes gelu_tanh as one
 * tanh.approx.f32 (MUFU.TANH; 0.5 x + 0.5 x tanh(u), relative error of the
 * tanh 2^-11, so an absolute error up to ~|x| 2^-12 where the result is
 * near zero, x < -3) where by default it takes x / (1 + 2^t) by ex2 and rcp,
 * within an ulp or two of f32: two MUFU ops an element. ncu (H200, 98bc45c)
 * counts 2.15M MUFU warp instructions for issue 13's 8192 x 4096 bias + GELU
 * against cuBLASLt's GELU_BIAS epilogue's 1.08M, and the epilogue costs the
 * kernel 4.9% (idle) against the same GEMM without it, cuBLASLt's 0.9%.
 * Measured no faster (H200, e1f1b0b, A B B A under sustained load: 1.5926
 * -> 1.5973 ms; with EPI_AHEAD 1.5964 -> 1.6312, its clocks 1490 -> 1449 MHz
 * at the same power); kept to measure */
#define KF_CUDA_RECIPE_GEMM_GELU_MUFU (UINT64_C(1) << 36)
/* internal: the sm_90a attention kernel with a block-sparse keep map shared by
 * every batch-head reads the map per key tile from global memory (producer and
 * consumers each walking to the next kept tile) and takes its query tiles in
 * their order, where by default each block first builds the map's walk in
 * shared memory -- the next kept key tile from every tile, a query tile's
 * kept count -- and the units pair query tiles by kept count (the most with
 * the fewest), the tail longest first (cg_attention.c, bs_table_ok;
 * templates/attention_sm90.cuh, KF_BS_TABLE): the kernel before, kept to
 * measure the two against each other */
#define KF_CUDA_RECIPE_ATTENTION_BS_MAP_WALK (UINT64_C(1) << 49)
/* internal: the sm_90a block-sparse kernel (KF_MASK_SKIP 3) steers L2 (kernel
 * letter v; templates/attention_sm90.cuh, KF_BS_L2): K's and V's TMA loads
 * evict_last, Q's loads and O's stores evict_first (each is touched once), and
 * the producer prefetches the next kept tile's K and V into L2 along the
 * walk, where by default none of it: a head's query tiles reach a key tile at
 * different steps of their walks, so its K and V stay live over an item (bs17:
 * ~0.76 GB of DRAM traffic a launch against 0.54 minimal); to measure it.
 * Measured slower (H100, 2837e32, bench/results/...-2837e32-bs17b-notes.txt):
 * 0.8905 against 0.8687 ms, A B B A at the power cap 1.014x, ncu 1.018x; the
 * L2 read hit rate 77.5% -> 87.2% but DRAM reads only 0.630 -> 0.616 GB: the
 * L2 misses are not what limits the kernel. Bit 50 was BS_TILE_ORDER (the walk without the pairing by kept count,
 * measured slower in bsp13: 1.028 against 0.954 ms), retired here. */
#define KF_CUDA_RECIPE_ATTENTION_BS_L2 (UINT64_C(1) << 50)
/* internal: a generated sm_90a GEMM's TMA-store epilogue on ping-pong tiles
 * loads its residual (kf_cuda_gemm_rs_node) from global memory chunk by chunk,
 * between the store barriers, where by default (kf_cuda_gemm_shape.epi_rs) the
 * producer loads it by TMA into the store buffers under the main loop (a ring
 * stage fewer: 5 of 128 x 128 where 6; H100, c4e282c: GPT-2's out projection
 * 0.0672 ms against 0.0689 with this flag); kept to measure the two */
#define KF_CUDA_RECIPE_GEMM_EPI_GLOBAL_RS (UINT64_C(1) << 51)
/* internal: a generated sm_90a GEMM's TMA-store epilogue takes the 4 in-place
 * chunk buffers of the residual's form wherever the template does: on 128 x
 * 256 cooperative tiles too (a residual then by TMA: 3 ring stages where 4),
 * and without a residual (one barrier and 4 TMA stores in flight a tile).
 * Measured slower (H100, c4e282c): GPT-2's FC2 0.1910 ms against 0.1891, its
 * FC1 (a norm folded into B, whose column terms then come from L2) 0.2726
 * against 0.2504; kept to measure */
#define KF_CUDA_RECIPE_GEMM_EPI_BUF4 (UINT64_C(1) << 52)
/* internal: a generated sm_90a GEMM's TMA-store epilogue loads its column
 * operands (a bias) from global memory in each 64 x 64 chunk, between the
 * store barriers (the form before), where by default
 * (kf_cuda_gemm_shape.epi_cs) the consumer copies the tile's columns of them
 * into its staging area by cp.async when the tile starts and the chunks read
 * them from shared memory. Measured (H100, 5103701 / 32085d9): 16384 x 4096
 * x 1024 + bias + gelu_tanh 0.2177 -> 0.2015 ms idle, A B B A 0.2474 ->
 * 0.2312; + bias 0.1968 -> 0.1870; issue 13's 8192 x 4096 x 16384 a tie
 * idle (1.3865 -> 1.3891, three samples each), A B B A 1.5975 -> 1.5715
 * and 1.5917 -> 1.5849; kept to measure the two */
#define KF_CUDA_RECIPE_GEMM_EPI_COLS_GLOBAL (UINT64_C(1) << 53)
/* internal: a generated sm_90a GEMM whose LayerNorm prologue is folded into
 * B keeps the bias it adds to the product (h + b, kf_cuda_gemm_fold_bias)
 * in its epilogue, a load and an add per element, where by default the
 * pre-pass adds it into the fold's column terms d once per column
 * (kf_cuda_gemm_shape.fold_bias, kf_cuda_fold_shape.bias) and the epilogue
 * skips it: GPT-2's FC1 and Q/K/V behind their LayerNorms. The form before,
 * kept to measure. (Bit 31 was GEMM_PREPASS_ONE, which asked for the
 * pre-passes in one launch: the default since 214feea's run, so the flag
 * changed nothing; GEMM_PREPASS_APART still keeps them apart.) */
#define KF_CUDA_RECIPE_GEMM_FOLD_BIAS_EPI (UINT64_C(1) << 31)
/* internal: a folded norm's pre-passes apart (a statistics kernel, then a
 * fold kernel a B), where by default they take ONE launch
 * (kf_cuda_codegen_gemm_prepass, templates/gemm_prepass.cuh: the row
 * statistics of A and diag(gamma) B of every B of the group or sibling set;
 * the default since its measurement, H100, 214feea: GPT-2's Q/K/V set 5%
 * faster in A B B A pairs, ln_qkv and FC1 even; recipe_gemm.c's
 * PREPASS_ONE_DEFAULT); the form before, kept to measure */
#define KF_CUDA_RECIPE_GEMM_PREPASS_APART (UINT64_C(1) << 29)
/* internal: the sm_90a attention kernel takes a share of its softmax's
 * exp2s as an FMA-pipe polynomial (templates/attention_sm90.cuh,
 * kf_ex2_poly; cg_attention.c, KF_SM90_EXP2_POLY_*: a quarter of a key
 * tile's column groups at head dim 128, an eighth at 64), where by default
 * every exp2 is MUFU.EX2 (kernel letter e). Measured slower (H100, 9c0c856,
 * where it was the default: causal B4 H32 S4096 D128 0.962 / 0.996 ms
 * against MUFU's 0.935 / 0.941 in two rounds, non-causal 1.787 / 1.696,
 * GQA 0.951 / 0.922, GPT-2's D64 0.116 / 0.115; half the exp2s slower still)
 * but for a softcap, whose tanh takes MUFU too (1.116 against 1.145, one
 * round): kept to measure */
#define KF_CUDA_RECIPE_ATTENTION_EXP2_POLY (UINT64_C(1) << 45)
/* internal: the sm_90a attention kernel takes a key tile's row max and row
 * sum as chains (a running max of 33 FMNMX, one sum), where at head dim 128
 * it takes them as trees by default (KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX,
 * which asks for them at 64): the form before, kept to measure */
#define KF_CUDA_RECIPE_ATTENTION_CHAIN_SOFTMAX (UINT64_C(1) << 46)
/* internal: the sm_90a attention kernel at head dim 128 rescales O, l and m
 * to every key tile's row max (the kernel before att16; kernel letter y),
 * where by default it rescales them only where a row max of the warp grew
 * past 2^8 (in exp2's units) since the last rescale (templates/
 * attention_sm90.cuh, KF_LAZY_RESCALE: a warp vote and a branch in place of
 * O's 64 FMULs, l's 2 and alpha's 2 MUFU.EX2 on nearly every tile, and in
 * the 176-key form the row max then runs before P.V's wait, which ptxas
 * otherwise hoists above it for P's registers). Not with a bounded score
 * (KF_SCORE_MAX: no running max). Measured (H100, e5fbc65, two runs of one
 * process each, the lazy form then the opt-in flag 54, peers in the second):
 * non-causal B4 H32 S4096 D128 1.6443 / 1.6531 -> 1.6035 / 1.6196 ms idle,
 * A B B A under load 1.8110 / 1.8440 -> 1.8043 / 1.7972 (cuDNN 1.6905);
 * causal 0.9149 / 0.9166 -> 0.9105 / 0.9032, A B B A 1.0312 -> 1.0226
 * (cuDNN 0.9555); GQA 0.9102 -> 0.8987; block-sparse 0.9170 / 0.9129 ->
 * 0.8992 / 0.8972, A B B A 1.0465 -> 1.0252 (Flex 1.5018); but GPT-2's
 * causal B16 H16 S1024 D64 0.1098 / 0.1092 -> 0.1172 / 0.1155, slower, so
 * head dim 64 keeps the per-tile rescale (the build-time
 * KF_SM90_LAZY_RESCALE asks for the lazy one there too: letter z) */
#define KF_CUDA_RECIPE_ATTENTION_EAGER_RESCALE (UINT64_C(1) << 54)
/* internal: a bounded score with a tanh (a softcap: cg_attention.c,
 * score_max) keeps every softmax exp2 on MUFU in the sm_90a kernel, where at
 * head dim 128 it takes a quarter of them (KF_SM90_EXP2_POLY_D128) as the
 * FMA-pipe polynomial (kf_ex2_poly, kernel letter e) by default: the kernel
 * before, kept to measure. H100 at a89fcf4, two rounds: the softcap 1.156 /
 * 1.180 ms with it against 1.143 / 1.145 by default, on scores 8 times as
 * large 1.215 / 1.229 against 1.191 / 1.194 (FlexAttention: 3.067) */
#define KF_CUDA_RECIPE_ATTENTION_SOFTCAP_MUFU (UINT64_C(1) << 57)
/* internal: the sm_90a sliding-window kernel (a window mask, 128-key tiles,
 * the ascending walk) keeps the edge check in every step of an item's main
 * loop, where ptxas merges the two-sided mask into each step -- where by
 * default (win18, session 19) it takes the item's edge steps out of the main
 * loop (attention_sm90.cuh, KF_EDGE_LAST with KF_MASK_SKIP 2; kernel letter
 * u, the report says "the window's edge steps out of the main loop"): the
 * first step (the window's far edge), the far edge's second tile where the
 * window is not a multiple of 128 (plus one) in a loop of its own with the
 * edge check, the diagonal's step peeled after the loop, and the loop
 * between them without the edge path (B4 H32 S4096 window 1024, D128,
 * NVRTC: main loop 1098 -> 557 SASS instructions, its FSEL and ISETP 169 ->
 * 6, no spills; the kernel 10270 -> 15020 SASS lines). Measured (H100,
 * 796d4fc, one run): the peeled window 0.5126 ms idle against 0.5194 with
 * the check in the loop (after the sleep 0.5130 / 0.5199), A B B A 0.5819 /
 * 0.5907 (0.985x). The form before, kept to measure (bench
 * attn_window_inloop). (Bit 58 was ATTENTION_TANH_POLY: a softcap's tanh in
 * 2 of every 8 column groups as an FMA-pipe rational, kernel letter h;
 * measured slower, H100, a89fcf4: 1.259 / 1.273 ms with the exp2 share,
 * 1.268 / 1.251 alone, where the default takes 1.143 / 1.145 -- each moved
 * tanh costs 13 issue slots for 8 MUFU clocks; win18 retired it with its
 * code, rows and tests.) */
#define KF_CUDA_RECIPE_ATTENTION_WINDOW_INLOOP (UINT64_C(1) << 58)
/* internal: the sm_90a attention kernel takes its work items one at a time
 * (kernel letter i): an item's last P.V alone, outside the ping-pong turns,
 * waited for, O stored, then the next item's first Q.K^T alone -- where by
 * default, with two Q buffers (templates/attention_sm90.cuh,
 * KF_ITEM_OVERLAP; at head dim 128 as cg_attention.c's KF_SM90_JOIN_D128
 * says), the next item's first Q.K^T and this item's last P.V share one
 * turn and O leaves after the next item's first softmax. The form before,
 * kept to measure */
#define KF_CUDA_RECIPE_ATTENTION_ITEMS_APART (UINT64_C(1) << 55)
/* internal: the sm_90a attention kernel joins its work items
 * (KF_ITEM_OVERLAP) where they are apart by default with two Q buffers --
 * head dim 128 where KF_SM90_JOIN_D128 is 0 -- (kernel letter j);
 * ITEMS_APART wins over it. For measuring the join there: block-sparse,
 * whose items are half as long as dense ones, still runs slower joined
 * (H100, efee87e, bs17: A B B A 1.0135x) */
#define KF_CUDA_RECIPE_ATTENTION_ITEMS_JOINED (UINT64_C(1) << 56)
/* internal: a decode attention group whose split count is 1 (one chunk of
 * every key tile: a long batch, e.g. B64 H32) keeps the two-step form -- the
 * split kernel's f32 partial and lse into the workspace, then the combine
 * kernel -- where by default the split kernel writes O itself (KF_DIRECT:
 * one launch, no workspace; recipe_attention_decode.c). The form before,
 * kept to measure and test: slower (H200, 35215ea, A B B A blocks: B64 H32
 * Skv 8192 1.9008 ms against the direct kernel's 1.8691, B16 H32 0.4873
 * against 0.4718) */
#define KF_CUDA_RECIPE_ATTENTION_DECODE_COMBINE (UINT64_C(1) << 60)
/* internal: the decode attention recipe takes twice the split count its rule
 * gives (kf_cuda_attention_decode_splits; at most the key tiles), with the
 * combine after the splits: for measuring the tail of the rule's waves
 * against shorter chunks (B64 H32: 2 splits where the rule gives 1). Slower
 * where measured (H200, 35215ea, A B B A: B64 H32 1.9018 ms against one
 * split's direct kernel 1.8691; B16 H32 0.4934 against 0.4815, one run each):
 * the shorter tail does not pay for the partials and the combine */
#define KF_CUDA_RECIPE_ATTENTION_DECODE_SPLITS_X2 (UINT64_C(1) << 61)

/* What the recipes are made for. */
typedef struct kf_cuda_target {
    char arch[KF_CUDA_ARCH_MAX]; /* "sm_80", "sm_90a" (kf_nvrtc_arch_check-valid) */
    int sm_count;                /* the grids fill this many SMs (>= 1) */
    uint64_t flags;              /* KF_CUDA_RECIPE_* (64 bits: the ones past 31 are
                                    macros, an enum constant being an int) */
} kf_cuda_target;

/* The recipe flags of a context's KF_FLAG_* flags, GEMM mode (kf_gemm_mode)
 * and attention mode (kf_attention_mode): NO_CUBLASLT gives NO_LT_EPILOGUE;
 * GENERATED gives GEMM_GENERATED; SM80 gives GEMM_GENERATED | GEMM_SM80;
 * AUTO and MEASURED give GEMM_MEASURED (the generated kernel timed against
 * cuBLASLt wherever it takes the group);
 * CUBLASLT neither; KF_FLAG_UNFUSED_ATTENTION and KF_ATTENTION_UNFUSED give
 * UNFUSED_ATTENTION; KF_ATTENTION_FA2 gives ATTENTION_FA2; KF_ATTENTION_DECODE
 * gives ATTENTION_DECODE; AUTO and SM90 none (the sm_90a kernel where it takes
 * the group). */
uint64_t kf_cuda_recipe_flags(unsigned kf_flags, int gemm_mode, int attention_mode);

/* The target of a device that is not at hand: "h100" and "h200" (sm_90a, 132
 * SMs), "a100" (sm_80, 108 SMs). KF_ERR_NOT_FOUND for another name. */
kf_status kf_cuda_target_for_device(const char *device, kf_cuda_target *out);

/* The target `kfuse aot` and the report assume for an arch alone: its
 * flagship's SM count (sm_90*: 132, sm_80: 108, else 80). The SM count only
 * sizes grids, never a kernel's source, so a cache filled for one SM count
 * serves every device of the arch. */
void kf_cuda_target_for_arch(const char *arch, kf_cuda_target *out);

/* ------------------------------------------------------------------------ */
/* Buffers                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum kf_cuda_buf_kind {
    KF_CUDA_BUF_NONE = 0, /* no buffer (an absent bias or residual) */
    KF_CUDA_BUF_TENSOR,   /* the buffer of plan tensor `id` (never a VIEW: its base) */
    KF_CUDA_BUF_SCRATCH,  /* scratch buffer `id` of the recipe, live only in its group */
    KF_CUDA_BUF_FLAGS,    /* the program's clamp flag word (one per program, kept across runs) */
    KF_CUDA_BUF_COUNT
} kf_cuda_buf_kind;

typedef struct kf_cuda_buf {
    kf_cuda_buf_kind kind;
    uint32_t id;
    int64_t offset; /* bytes from the buffer's start */
} kf_cuda_buf;

/* A recipe's scratch buffer. */
typedef struct kf_cuda_scratch {
    kf_cuda_param_kind role; /* ACC, SCORES, SCRATCH or PARTIALS: what the kernels call it; COUNTERS:
                                kept across runs in the constants region, zeroed once at
                                prepare (every run leaves it zero) */
    uint32_t tensor;         /* the tensor whose values it holds (the matmul, A, Q.K^T) */
    uint64_t bytes;
} kf_cuda_scratch;

/* ------------------------------------------------------------------------ */
/* Kernel steps                                                               */
/* ------------------------------------------------------------------------ */

typedef enum kf_cuda_arg_kind {
    KF_CUDA_ARG_PTR = 0, /* 8 bytes: the device address of `buf` */
    KF_CUDA_ARG_I64,     /* 8 bytes: `value` */
    KF_CUDA_ARG_TMAP,    /* 128 bytes (64-aligned): a TMA descriptor of `tmap` over `buf`,
                            encoded by the executor once the address is known */
    KF_CUDA_ARG_COUNT
} kf_cuda_arg_kind;

#define KF_CUDA_TMAP_MAX_RANK 5

/* A tiled TMA descriptor (cuTensorMapEncodeTiled) over a buffer. */
typedef struct kf_cuda_tmap {
    kf_dtype dtype;
    int rank;                                    /* 1..5, dims innermost first */
    uint64_t dims[KF_CUDA_TMAP_MAX_RANK];        /* global extent per dim */
    uint64_t strides[KF_CUDA_TMAP_MAX_RANK - 1]; /* bytes between dims 1.. (dim 0 is packed) */
    uint32_t box[KF_CUDA_TMAP_MAX_RANK];         /* the tile one copy moves */
    uint32_t swizzle;                            /* 0, 32, 64 or 128 (bytes) */
} kf_cuda_tmap;

typedef struct kf_cuda_arg {
    kf_cuda_arg_kind kind;
    bool written;    /* the kernel writes through it */
    kf_cuda_buf buf; /* PTR, TMAP */
    int64_t value;   /* I64; TMAP: index into kf_cuda_kstep.tmaps */
} kf_cuda_arg;

/* A's map and each member's B and output maps for a GEMM sibling set's one
 * kernel (KF_CUDA_SIB_MAX members). Maps are __grid_constant__ params of 128
 * bytes: 9 of them and KF_CUDA_MAX_PARAMS pointers are 1,664 bytes, within
 * the 4 KiB a launch's parameters may take. */
#define KF_CUDA_MAX_TMAPS (1 + 2 * KF_CUDA_SIB_MAX)
_Static_assert(KF_CUDA_MAX_TMAPS * 128 + KF_CUDA_MAX_PARAMS * 8 <= 4096,
               "the tensor maps and pointers fit a launch's 4 KiB of parameters");

/* The tensor maps of the sm_90a attention kernel of group `group`
 * (kf_cuda_codegen_attention_sm90), Q, K, V in its argument order, each over
 * the buffer of bases[i] (a view's base) from element offsets[i] of it (a
 * sliced view's start; 16-byte aligned): dims {head dim, rows, the batch
 * axes it does not broadcast, innermost first}, boxes {64, 128} (K and V:
 * {64, the key tile} -- 176 in the wide form, the default where it applies,
 * 128 with ATTENTION_NARROW_KEYS -- halved in the ATTENTION_CLUSTER2 form,
 * whose CTAs each multicast half a tile), 128-byte
 * swizzle; `rflags` the recipe flags the kernel was made with.
 * KF_ERR_UNSUPPORTED where the kernel does not take the group. */
kf_status kf_cuda_attention_sm90_maps(const kf_plan *plan, uint32_t group, uint64_t rflags,
                                      kf_cuda_tmap maps[3], uint32_t bases[3],
                                      int64_t offsets[3]);

typedef struct kf_cuda_kstep {
    kf_cuda_kernel kernel;                  /* source, name, arch, template, params */
    kf_cuda_role role;                      /* which generator made it */
    uint64_t digest;                        /* 64-bit FNV-1a of the source: names it in reports */
    uint32_t grid[3], block[3], cluster[3]; /* cluster {1, 1, 1}: none */
    uint32_t shared_bytes;                  /* dynamic shared memory */
    uint32_t n_args;
    kf_cuda_arg args[KF_CUDA_MAX_PARAMS];
    uint32_t n_tmaps;
    kf_cuda_tmap tmaps[KF_CUDA_MAX_TMAPS];
} kf_cuda_kstep;

/* ------------------------------------------------------------------------ */
/* Library GEMM steps                                                         */
/* ------------------------------------------------------------------------ */

/* The library's fused epilogues: D = act(A.B + beta C + bias). */
typedef enum kf_cuda_lt_epilogue {
    KF_CUDA_LT_EPI_NONE = 0,
    KF_CUDA_LT_EPI_RELU,
    KF_CUDA_LT_EPI_GELU, /* the tanh form: kfuse's gelu_tanh */
    KF_CUDA_LT_EPI_BIAS,
    KF_CUDA_LT_EPI_RELU_BIAS,
    KF_CUDA_LT_EPI_GELU_BIAS,
    KF_CUDA_LT_EPI_COUNT
} kf_cuda_lt_epilogue;

/* "none", "relu", "gelu", "bias", "relu_bias", "gelu_bias". */
const char *kf_cuda_lt_epilogue_name(kf_cuda_lt_epilogue e);

/* A logical row-major matrix [rows, cols] in a buffer, batch-strided. */
typedef struct kf_cuda_operand {
    kf_cuda_buf buf;
    int64_t row_stride, col_stride; /* elements; one of them is 1 */
    int64_t batch_stride;           /* elements between batches; 0 broadcasts */
} kf_cuda_operand;

typedef struct kf_cuda_gstep {
    kf_dtype dtype;
    int64_t m, n, k, batch;
    kf_cuda_operand a, b, c, d; /* logical [m, k], [k, n], [m, n], [m, n]; c.buf NONE: beta 0 */
    double beta;                /* 0 or 1 */
    kf_cuda_lt_epilogue epilogue;
    kf_cuda_buf bias; /* n elements, when the epilogue has a bias */
} kf_cuda_gstep;

/* ------------------------------------------------------------------------ */
/* Recipes                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum kf_cuda_step_kind {
    KF_CUDA_STEP_KERNEL = 0,
    KF_CUDA_STEP_GEMM,
    KF_CUDA_STEP_COUNT
} kf_cuda_step_kind;

typedef struct kf_cuda_step {
    kf_cuda_step_kind kind;
    kf_cuda_kstep *kernel; /* KERNEL */
    kf_cuda_gstep gemm;    /* GEMM */
} kf_cuda_step;

/* How the executor picks among a recipe's variants. */
typedef enum kf_cuda_choice {
    KF_CUDA_CHOICE_ONLY = 0, /* one variant */
    KF_CUDA_CHOICE_MEASURED, /* each variant is timed once per device (the winner is kept in
                                the cache: runtime/cuda_choice.h); the fastest runs */
    KF_CUDA_CHOICE_COUNT
} kf_cuda_choice;

#define KF_CUDA_MAX_VARIANTS 2
#define KF_CUDA_MAX_SCRATCH 16 /* a GEMM sibling set's recipe holds its members' */

typedef struct kf_cuda_variant {
    char label[32];      /* "cublaslt", "generated", ... */
    uint32_t first_step; /* into recipe->steps */
    uint32_t n_steps;
    char how[512]; /* what runs and why, for the report */
} kf_cuda_variant;

typedef struct kf_cuda_recipe {
    uint32_t group;
    kf_cuda_choice choice;
    uint32_t n_variants; /* 0 for VIEW groups: no step */
    kf_cuda_variant variants[KF_CUDA_MAX_VARIANTS];
    kf_cuda_step *steps;
    uint32_t n_steps, cap_steps;
    uint32_t n_scratch;
    kf_cuda_scratch scratch[KF_CUDA_MAX_SCRATCH];
    uint32_t n_members; /* the groups this recipe runs, from `group` on: 1, or a GEMM sibling
                           set's members (recipe_gemm_siblings.c), whose own recipes
                           then have no step; 0 for a group another recipe runs */
} kf_cuda_recipe;

typedef struct kf_cuda_recipes {
    kf_mem mem;
    const kf_plan *plan;
    kf_cuda_target target;
    kf_cuda_recipe *recipes; /* plan->n_groups, in group order */
    uint32_t n;
} kf_cuda_recipes;

/* Makes the recipes of every group of `plan` (which must outlive them) for
 * `target`, allocating with `mem`. Errors (message in err, KF_MSG_MAX):
 * KF_ERR_INVALID_ARGUMENT (NULL argument, a bad arch or SM count),
 * KF_ERR_UNSUPPORTED (a group the CUDA target cannot run: the message names
 * the group and the construct), KF_ERR_OUT_OF_MEMORY. On failure *out is NULL. */
kf_status kf_cuda_recipes_create(const kf_plan *plan, const kf_cuda_target *target,
                                 const kf_mem *mem, kf_cuda_recipes **out, char *err);
void kf_cuda_recipes_destroy(kf_cuda_recipes *r);

/* The number of KERNEL steps over every variant of every recipe: what `kfuse
 * aot` compiles. */
uint32_t kf_cuda_recipes_kernel_count(const kf_cuda_recipes *r);

/* Appends a step to recipe `rc` (the builders; tests that hand-make a recipe).
 * A KERNEL step's kstep is allocated zeroed with `mem` and owned by the
 * recipe. */
kf_status kf_cuda_recipe_add_step(kf_cuda_recipe *rc, const kf_mem *mem, kf_cuda_step_kind kind,
                                  kf_cuda_step **out);

/* Fills a KERNEL step from a generated kernel (moved into it: `k` is left
 * zeroed): grid from the target's SM count, block, shared memory, one PTR
 * argument per parameter resolved through `resolve`, the source digest. */
typedef kf_status (*kf_cuda_param_resolver)(void *user, const kf_cuda_param *p, kf_cuda_buf *out,
                                            char *err);
kf_status kf_cuda_kstep_from_kernel(kf_cuda_kstep *ks, kf_cuda_role role, kf_cuda_kernel *k,
                                    int sm_count, kf_cuda_param_resolver resolve, void *user,
                                    char *err);

/* The recipes as text (one block per group: variants and steps) or as the
 * JSON value of the report's "cuda" member (docs/report-schema.md), with no
 * trailing newline. Deterministic: the same recipes give the same bytes.
 * KF_ERR_IO when the stream fails. */
kf_status kf_cuda_recipes_print(const kf_cuda_recipes *r, bool json, FILE *out);

#endif /* KF_CODEGEN_CUDA_RECIPE_H */
