/*
 * cost.c -- the cost model (issue 3, item 4): how much arithmetic and memory
 * traffic each kernel group of a plan costs, how much traffic the unfused
 * graph would have cost for the same ops, and a roofline estimate of the time
 * on a named device.
 *
 * It reads only the plan and the graph; it never changes a fusion decision.
 * `kfuse report` prints what it fills in, and bench/ measures the real thing:
 * the ceilings below are NOMINAL datasheet numbers (and, for "cpu", a round
 * guess for a small 2-core machine), not measurements.
 *
 * The model, per group g:
 *
 *   flops(g)         sum over the tensors g computes of op_flops(t):
 *                      matmul             2 * M * N * K * batch
 *                      elementwise op     numel(t) * w(op), w = 1, or
 *                                         KF_COST_TRANSCENDENTAL for ops with
 *                                         KF_TRAIT_TRANSCENDENTAL; cast,
 *                                         compare and where count 1
 *                      reduce_*           numel(input)       (one op per element read)
 *                      softmax            numel * (4 + KF_COST_TRANSCENDENTAL)
 *                                         (max, sub, exp, sum, div)
 *                      layer_norm         numel * 8, rms_norm numel * 6
 *                      sources, layout    0 (iota and constants computed inline
 *                                         are index arithmetic; reshape/permute move data)
 *                    An attention group with a causal or sliding-window mask
 *                    counts only the fraction of the (q, kv) grid its mask
 *                    keeps (cell-exact: a floor, tiled kernels keep the
 *                    diagonal tiles whole).
 *   bytes_read(g)    sum over g->reads of numel * dtype size: each tensor a
 *                    group loads is counted once, at its own (pre-broadcast)
 *                    size, as if the cache held it for the whole kernel
 *   bytes_written(g) sum over g->writes of numel * dtype size
 *   unfused_bytes(g) what the same tensors cost when every op is its own
 *                    kernel: each op reads each distinct operand once and
 *                    writes its result; reshape is free (a view in every
 *                    framework) except of a permute's result, which it copies;
 *                    permute reads and writes (a contiguous copy);
 *                    inline sources (iota, constants) write their result when
 *                    some op consumes them, since an unfused framework makes them
 *                    tensors too
 *   est_time_s(g)    max(gemm_flops / peak_gemm(dtype) + other_flops / peak_simt,
 *                        (bytes_read + bytes_written) / bandwidth)
 *                    with no launch overhead: a floor, not a prediction.
 *                    GEMM and attention matmul flops run at the tensor-core
 *                    peak of the group's dtype (f16/bf16: dense tensor core;
 *                    f32: the FP32 SIMT peak, no TF32; f64: the FP64 peak);
 *                    everything else at the FP32 SIMT peak.
 *
 * Plan totals: total_bytes and total_unfused_bytes sum the groups' traffic;
 * total_time_s sums the kernels' floors, as if they ran one after another.
 *
 * A VIEW group is no kernel: it costs nothing, fused or not (its unfused cost
 * is the permute copy described above, counted where the view is computed).
 */
#include <ctype.h>
#include <string.h>

#include "fusion/fusion.h"

/* How many plain flops a transcendental (exp, tanh, erf, ...) is worth. On
 * NVIDIA GPUs the SFU issues at 1/4 (sm_80/sm_90) of the FMA rate and gelu and
 * friends take a few more operations around it; 8 is a round middle. */
#define KF_COST_TRANSCENDENTAL 8.0

typedef struct kf_device_ceiling {
    const char *name;
    const char *what;
    double bandwidth; /* bytes/s */
    double peak_16;   /* f16/bf16 dense tensor-core flop/s */
    double peak_f32;  /* f32 SIMT flop/s (also elementwise work of every dtype) */
    double peak_f64;  /* f64 flop/s */
} kf_device_ceiling;

/* Nominal ceilings (datasheets, dense, no sparsity). */
static const kf_device_ceiling kf_devices[] = {
    {"h100", "NVIDIA H100 SXM5 (HBM3 3.35 TB/s, bf16 989 TFLOP/s dense, f32 67 TFLOP/s)", 3.35e12,
     989e12, 67e12, 67e12},
    {"h200", "NVIDIA H200 SXM (HBM3e 4.8 TB/s, compute as H100)", 4.8e12, 989e12, 67e12, 67e12},
    {"a100", "NVIDIA A100 SXM4 80GB (HBM2e 2.0 TB/s, bf16 312 TFLOP/s, f32 19.5 TFLOP/s)", 2.0e12,
     312e12, 19.5e12, 19.5e12},
    {"cpu", "this machine's CPU, nominal (2 cores: ~20 GB/s, ~100 GFLOP/s f32; not measured)", 20e9,
     100e9, 100e9, 50e9},
};
#define KF_N_DEVICES (sizeof kf_devices / sizeof kf_devices[0])

static double bytes_of(const kf_tensor *t) {
    return (double)kf_ir_numel(t) * (double)kf_dtype_size(t->dtype);
}

/* The flops of computing `t` from its operands (see the table at the top). */
static double op_flops(const kf_tensor *t) {
    const kf_op_info *info = kf_op_get(t->op);
    double n = (double)kf_ir_numel(t);
    if (info->traits & (KF_TRAIT_SOURCE | KF_TRAIT_LAYOUT))
        return 0.0;
    if (info->traits & KF_TRAIT_GEMM) {
        const kf_tensor *a = t->src[0];
        int64_t k = t->attr.transpose_a ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
        return 2.0 * n * (double)k; /* numel(C) = M * N * batch */
    }
    if (info->traits & KF_TRAIT_REDUCTION)
        return (double)kf_ir_numel(t->src[0]);
    if (info->traits & KF_TRAIT_SOFTMAX)
        return n * (4.0 + KF_COST_TRANSCENDENTAL);
    if (info->traits & KF_TRAIT_NORM)
        return n * (t->op == KF_OP_LAYER_NORM ? 8.0 : 6.0);
    if (info->traits & KF_TRAIT_ELEMENTWISE)
        return n * ((info->traits & KF_TRAIT_TRANSCENDENTAL) ? KF_COST_TRANSCENDENTAL : 1.0);
    return n; /* an op the table grows later: one flop per element until it is modelled */
}

/* What computing `t` as its own kernel moves: distinct operands read, result
 * written. */
static double op_unfused_bytes(const kf_tensor *t) {
    if (t->op == KF_OP_INPUT)
        return 0.0;
    /* A reshape is a view, unless its operand is a permute's (non-contiguous)
     * result: frameworks copy then. */
    if (t->op == KF_OP_RESHAPE && t->src[0]->op != KF_OP_PERMUTE)
        return 0.0;
    double b = bytes_of(t);
    for (int k = 0; k < t->nsrc; k++) {
        bool seen = false;
        for (int j = 0; j < k; j++)
            seen = seen || t->src[j] == t->src[k];
        if (!seen)
            b += bytes_of(t->src[k]);
    }
    return b;
}

/* The fraction of an attention group's (q, kv) grid that its mask keeps:
 * kv <= q (causal) and also q - kv < window (sliding window); 1 otherwise.
 * Cell-exact, so a floor: tiled kernels compute the diagonal tiles whole. */
static double attention_keep_fraction(const kf_group *grp) {
    const kf_attn_info *a = &grp->attn;
    if (grp->kind != KF_GROUP_ATTENTION || a->sq <= 0 || a->skv <= 0 ||
        (a->mask != KF_MASK_CAUSAL && a->mask != KF_MASK_SLIDING_WINDOW))
        return 1.0;
    double kept = 0.0;
    for (int64_t q = 0; q < a->sq; q++) {
        int64_t n = q + 1 < a->skv ? q + 1 : a->skv;
        if (a->mask == KF_MASK_SLIDING_WINDOW && a->window < n)
            n = a->window > 0 ? a->window : 0;
        kept += (double)n;
    }
    return kept / ((double)a->sq * (double)a->skv);
}

/* Case-insensitive equality of device names. */
static bool name_eq(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return false;
    return *a == *b;
}

const char *kf_plan_device_for_gpu(const char *gpu_name) {
    if (gpu_name && strstr(gpu_name, "H200"))
        return "h200";
    if (gpu_name && strstr(gpu_name, "A100"))
        return "a100";
    return "h100";
}

kf_status kf_plan_estimate(kf_plan *plan, const char *device) {
    if (!plan || !plan->graph)
        return KF_ERR_INVALID_ARGUMENT;
    if (!device)
        device = "h100";
    const kf_device_ceiling *dev = NULL;
    for (size_t i = 0; i < KF_N_DEVICES && !dev; i++)
        if (name_eq(device, kf_devices[i].name))
            dev = &kf_devices[i];
    if (!dev) {
        snprintf(plan->error, sizeof plan->error,
                 "estimate: unknown device '%.64s'; known devices: h100, h200, a100, cpu", device);
        return KF_ERR_NOT_FOUND;
    }
    const kf_graph *g = plan->graph;
    snprintf(plan->device, sizeof plan->device, "%s", dev->name);
    plan->total_bytes = plan->total_unfused_bytes = plan->total_time_s = 0.0;

    for (uint32_t gi = 0; gi < plan->n_groups; gi++) {
        kf_group *grp = &plan->groups[gi];
        grp->flops = grp->bytes_read = grp->bytes_written = 0.0;
        grp->unfused_bytes = grp->est_time_s = 0.0;
        double gemm_flops = 0.0;
        for (uint32_t i = 0; i < grp->n_computed; i++) {
            if (KF_NEVER(grp->computed[i] >= g->n_nodes))
                continue;
            const kf_tensor *t = g->nodes[grp->computed[i]];
            double f = op_flops(t);
            if (kf_op_has(t->op, KF_TRAIT_GEMM))
                gemm_flops += f;
            grp->flops += f;
            /* A tensor several groups recompute (an inline source, a norm
             * prologue) costs the unfused graph one op, counted in the first
             * group that computes it. */
            if (plan->group_of && plan->group_of[t->id] != grp->id)
                continue;
            grp->unfused_bytes += op_unfused_bytes(t);
        }
        /* A causal or sliding-window attention skips the masked scores:
         * only the kept fraction of the score grid is computed. */
        double keep = attention_keep_fraction(grp);
        grp->flops *= keep;
        gemm_flops *= keep;
        if (!grp->is_kernel) {
            /* A VIEW moves nothing; its unfused copy (permute) stays in unfused_bytes. */
            grp->flops = 0.0;
            plan->total_unfused_bytes += grp->unfused_bytes;
            continue;
        }
        for (uint32_t i = 0; i < grp->n_reads; i++)
            if (!KF_NEVER(grp->reads[i] >= g->n_nodes))
                grp->bytes_read += bytes_of(g->nodes[grp->reads[i]]);
        for (uint32_t i = 0; i < grp->n_writes; i++)
            if (!KF_NEVER(grp->writes[i] >= g->n_nodes))
                grp->bytes_written += bytes_of(g->nodes[grp->writes[i]]);

        double peak_mm = grp->dtype == KF_DTYPE_F16 || grp->dtype == KF_DTYPE_BF16 ? dev->peak_16
                         : grp->dtype == KF_DTYPE_F64                              ? dev->peak_f64
                                                                                   : dev->peak_f32;
        double t_math = gemm_flops / peak_mm + (grp->flops - gemm_flops) / dev->peak_f32;
        double t_mem = (grp->bytes_read + grp->bytes_written) / dev->bandwidth;
        grp->est_time_s = t_math > t_mem ? t_math : t_mem;

        plan->total_bytes += grp->bytes_read + grp->bytes_written;
        plan->total_unfused_bytes += grp->unfused_bytes;
        plan->total_time_s += grp->est_time_s;
    }
    return KF_OK;
}
