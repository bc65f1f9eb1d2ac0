/*
 * compile.c -- the public compile/run API: kf_compile plans the graph
 * (fusion/), lowers and JIT-compiles the plan for the target (today the CPU:
 * codegen/llvm + runtime/cpu) and kf_program_run checks the caller's bindings
 * the way kf_graph_eval does, places them and runs the kernels.
 *
 * The CPU backend exists only when the library was built with LLVM
 * (KF_HAVE_LLVM, cmake/kf_llvm.cmake); without it every compile for the CPU
 * returns KF_ERR_UNSUPPORTED and says how to get it. The CUDA target
 * (runtime/cuda_exec.c) is always built: it needs only the driver at run
 * time. KF_TARGET_AUTO is CUDA when a device is present, else the CPU.
 *
 * Compiled CPU code and CUDA kernels go through the context's disk cache
 * (kf_ctx_cache) unless the context says KF_FLAG_NO_CACHE.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cuda/cuda_recipe.h"
#include "frontend/compile.h"
#include "fusion/fusion.h"
#include "ir/ir.h"
#include "runtime/ctx.h"
#include "runtime/cuda_exec.h"
#ifdef KF_HAVE_LLVM
#include "runtime/cpu/cpu.h"
#endif

struct kf_program {
    kf_ctx *ctx;
    kf_mem mem;
    /* The program's own copy of the caller's graph (kf_ir_graph_clone): the
     * plan and both executors point into it (tensors, shapes, constant data),
     * so the caller may destroy its graph as soon as kf_compile returns. */
    kf_graph *graph;
    kf_plan *plan;
    kf_cuda_exec *cuda; /* the CUDA target; NULL on the CPU */
#ifdef KF_HAVE_LLVM
    kf_cpu_exec *exec;
#endif
    void **bound;        /* graph->n_nodes entries, rebuilt by each run */
    atomic_bool running; /* a thread is inside a run (a second one is KF_ERR_BUSY) */
    char error[KF_MSG_MAX];
};

static kf_status fail(kf_program *p, kf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static kf_status fail(kf_program *p, kf_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->error, sizeof p->error, fmt, ap);
    va_end(ap);
    return st;
}

void kf_program_destroy(kf_program *p) {
    if (!p)
        return;
    kf_cuda_exec_destroy(p->cuda);
#ifdef KF_HAVE_LLVM
    kf_cpu_exec_destroy(p->exec);
#endif
    kf_plan_destroy(p->plan);
    if (p->bound) {
        uint32_t nn = p->graph->n_nodes ? p->graph->n_nodes : 1;
        kf_mem_free(&p->mem, p->bound, nn * sizeof *p->bound);
    }
    kf_ir_graph_destroy(p->graph); /* last: everything above may point into it */
    kf_mem m = p->mem;
    kf_mem_free(&m, p, sizeof *p);
}

kf_status kf_compile(kf_ctx *ctx, kf_graph *graph, kf_program **out) {
    if (out)
        *out = NULL;
    if (!ctx || !graph || !out)
        return graph ? kf_ir_note(graph, KF_ERR_INVALID_ARGUMENT, "kf_compile: %s is NULL",
                                  !ctx ? "ctx" : "out")
                     : KF_ERR_INVALID_ARGUMENT;
    if (graph->status != KF_OK)
        return graph->status;
    kf_target target = ctx->target;
    if (target == KF_TARGET_AUTO)
        target = kf_cuda_exec_available(ctx) ? KF_TARGET_CUDA : KF_TARGET_CPU;
#ifndef KF_HAVE_LLVM
    if (target == KF_TARGET_CPU)
        return kf_ir_note(graph, KF_ERR_UNSUPPORTED,
                          "kf_compile: this libkfuse was built without LLVM, so it has no CPU "
                          "backend; install LLVM 19 (llvm-19-dev, scripts/install-deps.sh) and "
                          "rebuild");
#endif
    kf_program *p = kf_mem_calloc(&ctx->mem, 1, sizeof *p);
    if (!p)
        return kf_ir_note(graph, KF_ERR_OUT_OF_MEMORY, "kf_compile: out of memory");
    p->ctx = ctx;
    p->mem = ctx->mem;
    atomic_init(&p->running, false);
    p->graph = kf_ir_graph_clone(graph);
    if (p->graph)
        p->bound = kf_mem_calloc(&p->mem, graph->n_nodes ? graph->n_nodes : 1, sizeof *p->bound);
    if (!p->bound) {
        kf_program_destroy(p);
        return kf_ir_note(graph, KF_ERR_OUT_OF_MEMORY, "kf_compile: out of memory");
    }
    kf_plan_options popt;
    kf_plan_options_for_flags(ctx->flags, &popt);
    kf_status st = kf_plan_create(p->graph, &popt, &p->plan);
    if (st != KF_OK) {
        /* The planner put its message on the copy; the caller reads its own
         * graph. Its IR passes (CSE, idioms) return out of memory without
         * one: say where it happened. */
        const char *why = kf_graph_error(p->graph);
        if (*why)
            kf_ir_note(graph, st, "%s", why);
        else
            kf_ir_note(graph, st, "kf_compile: planning failed: %s", kf_status_str(st));
        p->plan = NULL;
        kf_program_destroy(p);
        return st;
    }
    char err[KF_MSG_MAX];
    if (target == KF_TARGET_CUDA) {
        st = kf_cuda_exec_build(ctx, p->plan, &p->cuda, err);
        if (st != KF_OK) {
            kf_program_destroy(p);
            if (st == KF_ERR_UNSUPPORTED && !kf_cuda_exec_available(ctx))
                return kf_ir_note(graph, st,
                                  "kf_compile (cuda): %s; create the context with "
                                  "KF_TARGET_CPU or KF_TARGET_AUTO to run on the CPU",
                                  err);
            return kf_ir_note(graph, st, "kf_compile (cuda): %s", err);
        }
        /* The report's cost columns, for the GPU the program runs on. */
        (void)kf_plan_estimate(p->plan, kf_plan_device_for_gpu(kf_cuda_exec_device_name(p->cuda)));
        *out = p;
        return KF_OK;
    }
#ifdef KF_HAVE_LLVM
    struct kf_cache *cache = NULL;
    st = kf_ctx_cache(ctx, &cache, err);
    if (st != KF_OK) {
        kf_program_destroy(p);
        return kf_ir_note(graph, st,
                          "kf_compile: the kernel cache cannot be used: %s (point the context's "
                          "cache_dir at a directory of your own, or create it with "
                          "KF_FLAG_NO_CACHE to compile without a cache)",
                          err);
    }
    kf_cpu_options copt = {
        .opt_level = ctx->cpu_opt_level,
        .threads = ctx->num_threads,
        .no_reuse = (ctx->flags & KF_FLAG_CPU_KEEP_BUFFERS) != 0,
        .dump_ir = (ctx->flags & KF_FLAG_DUMP_LLVM_IR) != 0,
        .timing = (ctx->flags & KF_FLAG_CPU_TIMING) != 0,
    };
    st = kf_cpu_exec_create(&p->mem, p->plan, &copt, cache, &p->exec, err);
    if (st != KF_OK) {
        kf_program_destroy(p);
        return kf_ir_note(graph, st, "kf_compile (cpu): %s", err);
    }
    (void)kf_plan_estimate(p->plan, "cpu"); /* the report's cost columns */
    *out = p;
    return KF_OK;
#else
    kf_program_destroy(p);
    return kf_ir_note(graph, KF_ERR_INTERNAL, "kf_compile: no backend");
#endif
}

kf_status kf_cuda_exec_build(kf_ctx *ctx, const kf_plan *plan, kf_cuda_exec **out, char *err) {
    *out = NULL;
    kf_cuda_exec *ex = NULL;
    kf_cuda_target target;
    kf_status st = kf_cuda_exec_open_for(ctx, plan, &ex, &target, err);
    if (st != KF_OK)
        return st;
    kf_cuda_recipes *recipes = NULL;
    st = kf_cuda_recipes_create(plan, &target, &ctx->mem, &recipes, err);
    if (st == KF_OK)
        st = kf_cuda_exec_prepare(ex, plan, recipes, err); /* owns the recipes from here */
    if (st != KF_OK) {
        kf_cuda_exec_destroy(ex);
        return st;
    }
    *out = ex;
    return KF_OK;
}

/* The report's CUDA part of a program: its recipes and what its run measured. */
static void write_cuda(void *user, kf_report_format format, FILE *out) {
    const kf_program *p = user;
    if (format == KF_REPORT_JSON) {
        fputs(",\n  \"cuda\": ", out);
        kf_cuda_recipes_print(kf_cuda_exec_recipes(p->cuda), true, out);
        fputs(",\n  \"cuda_run\": ", out);
        kf_cuda_exec_report(p->cuda, true, out);
    } else {
        kf_cuda_exec_report(p->cuda, false, out);
        kf_cuda_recipes_print(kf_cuda_exec_recipes(p->cuda), false, out);
    }
}

kf_status kf_program_report(const kf_program *p, kf_report_format format, FILE *out) {
    if (!p || !out || (unsigned)format >= KF_REPORT_FORMAT_COUNT)
        return KF_ERR_INVALID_ARGUMENT;
    kf_report_extra extra = {write_cuda, (void *)p};
    kf_status st = kf_plan_report_with(p->plan, format, p->cuda ? &extra : NULL, out);
    if (st == KF_OK && format == KF_REPORT_TEXT && !p->cuda)
        fprintf(out, "cpu: every kernel group runs as LLVM-compiled host code\n");
    return ferror(out) ? KF_ERR_IO : st;
}

const char *kf_program_error(const kf_program *p) { return p ? p->error : "program is NULL"; }

size_t kf_program_kernel_count(const kf_program *p) {
    return p && p->plan ? kf_plan_kernel_count(p->plan) : 0;
}

static size_t tensor_bytes(const kf_tensor *t) {
    return (size_t)kf_ir_numel(t) * kf_dtype_size(t->dtype);
}

void kf_plan_options_for_flags(unsigned flags, kf_plan_options *popt) {
    kf_plan_options_init(popt);
    popt->debug = (flags & KF_FLAG_DEBUG_PASSES) != 0;
    if (flags & KF_FLAG_SPLIT_ROW_NORMS)
        popt->gemm_row_split_max_n = KF_GEMM_ROW_SPLIT_MAX_N;
    popt->gemm_head_epilogue = (flags & KF_FLAG_GEMM_HEAD_EPILOGUE) != 0;
}

/* The alignment kf_program_run_device asks of every device pointer. */
#define DEVICE_ALIGN 16u

static kf_status check_binding(kf_program *p, const char *fn, bool device, const char *what,
                               const kf_binding *b, const kf_tensor *t) {
    char ts[160];
    if (!b->data)
        return fail(p, KF_ERR_INVALID_ARGUMENT,
                    "%s: %s '%s' has NULL data; bind a %sbuffer of %zu bytes", fn, what, b->name,
                    device ? "device " : "", tensor_bytes(t));
    if (b->size != tensor_bytes(t))
        return fail(p, KF_ERR_INVALID_ARGUMENT, "%s: %s '%s' is %s: expected %zu bytes, got %zu",
                    fn, what, b->name, kf_ir_type_str(t, ts, sizeof ts), tensor_bytes(t), b->size);
    if (!p->cuda)
        return KF_OK;
    /* The CUDA target: the pointer is the kind of memory the call takes. */
    char err[KF_MSG_MAX];
    kf_status st = kf_cuda_exec_check_pointer(p->cuda, b->data, b->size, device, DEVICE_ALIGN, err);
    return st == KF_OK ? KF_OK : fail(p, st, "%s: %s '%s': %s", fn, what, b->name, err);
}

/* KF_FLAG_CHECK_NUMERICS: judges every bound output by kf_graph_check's rule
 * (ir/judge.c): its error against the graph's exact value at most twice the
 * reference evaluator's own error, plus a small floor. */
static kf_status check_numerics(kf_program *p, const kf_binding *inputs, size_t n_inputs,
                                const kf_binding *outputs, size_t n_outputs) {
    if (n_outputs == 0)
        return KF_OK;
    kf_graph *g = p->graph;
    kf_check_result *res = kf_mem_calloc(&p->mem, n_outputs, sizeof *res);
    if (!res)
        return fail(p, KF_ERR_OUT_OF_MEMORY,
                    "kf_program_run: checking numerics: out of memory for %zu verdicts", n_outputs);
    kf_status st = kf_graph_check(g, inputs, n_inputs, outputs, n_outputs, res);
    if (st != KF_OK)
        fail(p, st, "kf_program_run: checking numerics: the reference evaluator failed: %s",
             kf_graph_error(g));
    for (size_t i = 0; st == KF_OK && i < n_outputs; i++) {
        if (!res[i].pass)
            st = fail(p, KF_ERR_INTERNAL,
                      "kf_program_run: output '%s' is wrong: its error against the exact value "
                      "is %g, beyond %g (twice the larger of the reference evaluator's own "
                      "error %g and its GEMM-arithmetic twin's %g, plus the floor); a kfuse "
                      "bug, or an input so ill-conditioned that f32 arithmetic amplifies its "
                      "rounding",
                      outputs[i].name, res[i].err, res[i].bound, res[i].ref_err, res[i].fused_err);
    }
    kf_mem_free(&p->mem, res, n_outputs * sizeof *res);
    return st;
}

/* One run, host or device bindings (fn names the public call in messages);
 * the caller holds p->running. */
static kf_status program_run(kf_program *p, const char *fn, bool device, const kf_binding *inputs,
                             size_t n_inputs, const kf_binding *outputs, size_t n_outputs,
                             void *stream) {
    kf_graph *g = p->graph;
    if ((n_inputs && !inputs) || (n_outputs && !outputs))
        return fail(p, KF_ERR_INVALID_ARGUMENT, "%s: %s is NULL but its count is %zu", fn,
                    (n_inputs && !inputs) ? "inputs" : "outputs",
                    (n_inputs && !inputs) ? n_inputs : n_outputs);
    memset(p->bound, 0, (g->n_nodes ? g->n_nodes : 1) * sizeof *p->bound);
    for (size_t i = 0; i < n_inputs; i++) {
        const kf_binding *b = &inputs[i];
        if (!b->name)
            return fail(p, KF_ERR_INVALID_ARGUMENT, "%s: input binding %zu has no name", fn, i);
        const kf_tensor *t = NULL;
        for (uint32_t k = 0; k < g->n_inputs && !t; k++)
            if (strcmp(g->inputs[k]->name, b->name) == 0)
                t = g->inputs[k];
        if (!t)
            return fail(p, KF_ERR_NOT_FOUND,
                        "%s: input binding %zu names '%s', which is not a graph input", fn, i,
                        b->name);
        if (p->bound[t->id])
            return fail(p, KF_ERR_INVALID_ARGUMENT,
                        "%s: input '%s' is bound twice; bind each input once", fn, b->name);
        kf_status st = check_binding(p, fn, device, "input", b, t);
        if (st != KF_OK)
            return st;
        p->bound[t->id] = b->data;
    }
    for (uint32_t k = 0; k < g->n_inputs; k++) {
        if (!p->bound[g->inputs[k]->id]) {
            char ts[160];
            return fail(p, KF_ERR_NOT_FOUND,
                        "%s: graph input '%s' %s is not bound; add a binding of %zu "
                        "bytes for it",
                        fn, g->inputs[k]->name, kf_ir_type_str(g->inputs[k], ts, sizeof ts),
                        tensor_bytes(g->inputs[k]));
        }
    }
    /* Outputs: the first binding of a computed tensor receives it directly;
     * the rest (inputs or constants as outputs, a tensor under two names) are
     * copied after the run. */
    uint64_t copy_mask[8] = {0};
    bool copy_any = false; /* any output to copy after the run */
    for (size_t i = 0; i < n_outputs; i++) {
        const kf_binding *b = &outputs[i];
        if (!b->name)
            return fail(p, KF_ERR_INVALID_ARGUMENT, "%s: output binding %zu has no name", fn, i);
        const kf_tensor *t = NULL;
        for (uint32_t k = 0; k < g->n_outputs && !t; k++)
            if (strcmp(g->outputs[k].name, b->name) == 0)
                t = g->outputs[k].tensor;
        if (!t)
            return fail(p, KF_ERR_NOT_FOUND,
                        "%s: output binding %zu names '%s', which is not a graph output", fn, i,
                        b->name);
        for (size_t j = 0; j < i; j++)
            if (outputs[j].name && strcmp(outputs[j].name, b->name) == 0)
                return fail(p, KF_ERR_INVALID_ARGUMENT,
                            "%s: output '%s' is bound twice; bind each output at most once", fn,
                            b->name);
        kf_status st = check_binding(p, fn, device, "output", b, t);
        if (st != KF_OK)
            return st;
        const kf_group *gr = kf_plan_group_of(p->plan, t);
        bool computed = gr && gr->is_kernel && t->op != KF_OP_INPUT && t->op != KF_OP_CONST;
        if (computed && !p->bound[t->id]) {
            p->bound[t->id] = b->data;
        } else {
            copy_any = true;
            if (i < 512)
                copy_mask[i / 64] |= 1ull << (i % 64);
        }
    }
    char err[KF_MSG_MAX];
    kf_status st;
    if (p->cuda && device) {
        st = kf_cuda_exec_run_device(p->cuda, p->bound, stream, err);
    } else if (p->cuda) {
        st = kf_cuda_exec_run(p->cuda, p->bound, stream, err);
    } else {
#ifdef KF_HAVE_LLVM
        st = kf_cpu_exec_run(p->exec, p->bound, err);
#else
        st = KF_ERR_INTERNAL;
        snprintf(err, sizeof err, "no backend");
#endif
    }
    if (st != KF_OK)
        return fail(p, st, "%s: %s", fn, err);
    for (size_t i = 0; copy_any && i < n_outputs; i++) {
        bool copy = i < 512 ? (copy_mask[i / 64] >> (i % 64)) & 1 : true;
        const kf_tensor *t = NULL;
        for (uint32_t k = 0; k < g->n_outputs && !t; k++)
            if (strcmp(g->outputs[k].name, outputs[i].name) == 0)
                t = g->outputs[k].tensor;
        if (!copy || outputs[i].data == p->bound[t->id])
            continue;
        if (device) {
            /* On the stream, from wherever the tensor's bytes are now. */
            st = kf_cuda_exec_copy_device(p->cuda, t->id,
                                          (unsigned long long)(uintptr_t)outputs[i].data,
                                          outputs[i].size, stream, err);
            if (st != KF_OK)
                return fail(p, st, "%s: output '%s': %s", fn, outputs[i].name, err);
            continue;
        }
        if (p->bound[t->id]) {
            memmove(outputs[i].data, p->bound[t->id], outputs[i].size);
            continue;
        }
        if (p->cuda) {
            st = kf_cuda_exec_copy_out(p->cuda, t->id, outputs[i].data, outputs[i].size, err);
            if (st != KF_OK)
                return fail(p, st, "%s: output '%s': %s", fn, outputs[i].name, err);
            continue;
        }
#ifdef KF_HAVE_LLVM
        const void *src = kf_cpu_exec_buffer(p->exec, t->id);
        const kf_group *vg = kf_plan_group_of(p->plan, t);
        if (!src && vg && vg->kind == KF_GROUP_VIEW && vg->view_contiguous &&
            vg->view_base != KF_NONE)
            src = kf_cpu_exec_buffer(p->exec, vg->view_base); /* the output aliases its base */
#else
        const void *src = NULL;
#endif
        if (!src)
            return fail(p, KF_ERR_INTERNAL,
                        "%s: output '%s' has no buffer after the run (a kfuse bug)", fn,
                        outputs[i].name);
        memmove(outputs[i].data, src, outputs[i].size);
    }
    if (!device && (p->ctx->flags & KF_FLAG_CHECK_NUMERICS))
        return check_numerics(p, inputs, n_inputs, outputs, n_outputs);
    return KF_OK;
}

/* Holds p->running around one run: a second thread in a run of the same
 * program is refused, not let in to share its state. */
static kf_status run_exclusive(kf_program *p, const char *fn, bool device, const kf_binding *inputs,
                               size_t n_inputs, const kf_binding *outputs, size_t n_outputs,
                               void *stream) {
    if (atomic_exchange(&p->running, true))
        return KF_ERR_BUSY; /* the message buffer belongs to the run in progress */
    p->error[0] = '\0';
    kf_status st = program_run(p, fn, device, inputs, n_inputs, outputs, n_outputs, stream);
    atomic_store(&p->running, false);
    return st;
}

kf_status kf_program_run(kf_program *p, const kf_binding *inputs, size_t n_inputs,
                         const kf_binding *outputs, size_t n_outputs, void *stream) {
    /* stream: a CUstream for the CUDA target (NULL: the program's own); the CPU
     * target runs synchronously on the calling thread + pool and ignores it. */
    if (!p)
        return KF_ERR_INVALID_ARGUMENT;
    return run_exclusive(p, "kf_program_run", false, inputs, n_inputs, outputs, n_outputs, stream);
}

kf_status kf_program_run_device(kf_program *p, const kf_binding *inputs, size_t n_inputs,
                                const kf_binding *outputs, size_t n_outputs, void *stream) {
    if (!p)
        return KF_ERR_INVALID_ARGUMENT;
    if (!p->cuda) {
        if (atomic_load(&p->running))
            return KF_ERR_BUSY;
        return fail(p, KF_ERR_UNSUPPORTED,
                    "kf_program_run_device: the program runs on the CPU, whose runs take host "
                    "pointers; call kf_program_run (or compile for KF_TARGET_CUDA)");
    }
    return run_exclusive(p, "kf_program_run_device", true, inputs, n_inputs, outputs, n_outputs,
                         stream);
}

kf_status kf_program_workspace_size(const kf_program *p, size_t *bytes) {
    if (bytes)
        *bytes = 0;
    if (!p || !bytes)
        return KF_ERR_INVALID_ARGUMENT;
    if (!p->cuda)
        return KF_ERR_UNSUPPORTED;
    *bytes = kf_cuda_exec_workspace_size(p->cuda);
    return KF_OK;
}

kf_status kf_program_index_clamps(kf_program *p, void *stream, int *clamped) {
    if (clamped)
        *clamped = 0;
    if (!p || !clamped)
        return KF_ERR_INVALID_ARGUMENT;
    if (!p->cuda)
        return KF_OK; /* the CPU target fails a run on such an index instead */
    if (atomic_exchange(&p->running, true))
        return KF_ERR_BUSY;
    char err[KF_MSG_MAX];
    bool seen = false;
    kf_status st = kf_cuda_exec_index_clamps(p->cuda, stream, &seen, err);
    if (st != KF_OK)
        fail(p, st, "kf_program_index_clamps: %s", err);
    *clamped = seen;
    atomic_store(&p->running, false);
    return st;
}

kf_status kf_program_set_workspace(kf_program *p, void *workspace, size_t bytes) {
    if (!p)
        return KF_ERR_INVALID_ARGUMENT;
    if (!p->cuda)
        return fail(p, KF_ERR_UNSUPPORTED,
                    "kf_program_set_workspace: the program runs on the CPU, which has no device "
                    "workspace");
    if (atomic_exchange(&p->running, true))
        return KF_ERR_BUSY;
    char err[KF_MSG_MAX];
    kf_status st =
        kf_cuda_exec_set_workspace(p->cuda, (unsigned long long)(uintptr_t)workspace, bytes, err);
    if (st != KF_OK)
        fail(p, st, "kf_program_set_workspace: %s", err);
    atomic_store(&p->running, false);
    return st;
}
