/*
 * exec.c -- compiling a plan for the host CPU and running it.
 *
 *   plan --codegen/llvm--> module --LLVMVerifyModule--> default<O3> (host TM)
 *        --ORC LLJIT--> one function pointer per kernel group
 *   run: bufs[t] = caller buffer | graph constant | arena + offset
 *        for each group in order: pool_run(kernel, [0, outer))
 *
 * The target machine gets the host's CPU name and feature string, so the
 * vectorizer sees AVX2 / AVX-512 where the machine has them. libm symbols
 * (expf, tanhf, erfcf, powf, ...) resolve from the process. The arena holds
 * every materialized tensor that the caller did not bind; slots of tensors
 * whose live ranges (writer group .. last reader group) do not overlap share
 * bytes (runtime/arena.h places them, as it does for the CUDA executor).
 * Graph outputs keep their own slots (used when the caller leaves one
 * unbound), so a run never reads a half-overwritten output.
 */
#include "runtime/cpu/cpu.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/llvm/codegen_llvm.h"
#include "runtime/arena.h"
#include "runtime/cache.h"
#include "runtime/cpu/pool.h"

struct kf_cpu_exec {
    kf_mem mem;
    const kf_plan *plan;
    LLVMOrcLLJITRef jit;
    kf_cpu_kernel *kernels; /* plan->n_groups */
    kf_pool_fn *fns;        /* plan->n_groups, NULL for views */
    int64_t *slot;          /* graph->n_nodes: arena offset, or -1 */
    size_t arena_size;
    void *arena;
    void **bufs;    /* graph->n_nodes */
    size_t scratch; /* max over kernels */
    kf_pool *pool;
    int n_threads;
    kf_cpu_options opts;
    bool cache_hit; /* the object file came from the disk cache */
};

#include <time.h>
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static pthread_once_t llvm_once = PTHREAD_ONCE_INIT;
static char host_name[1024];

static void llvm_init(void) {
    LLVMInitializeNativeTarget();
    LLVMInitializeNativeAsmPrinter();
    char *cpu = LLVMGetHostCPUName();
    char *feat = LLVMGetHostCPUFeatures();
    snprintf(host_name, sizeof host_name, "%s %s", cpu, feat);
    LLVMDisposeMessage(cpu);
    LLVMDisposeMessage(feat);
}

const char *kf_cpu_host_name(void) {
    pthread_once(&llvm_once, llvm_init);
    return host_name;
}

static kf_status llvm_error(LLVMErrorRef e, const char *what, char *err) {
    char *msg = LLVMGetErrorMessage(e);
    snprintf(err, KF_MSG_MAX, "%s: %s", what, msg);
    LLVMDisposeErrorMessage(msg);
    return KF_ERR_INTERNAL;
}

void kf_cpu_options_init(kf_cpu_options *o) {
    memset(o, 0, sizeof *o);
    o->opt_level = 3;
}

/* The LLVM code generation level of an -O level: 3 aggressive (the default),
 * 0 none, else less. Lower levels compile several times faster and are for
 * tests that run thousands of tiny graphs; the semantics are the same. */
static LLVMCodeGenOptLevel codegen_level(int opt_level) {
    return opt_level == 3   ? LLVMCodeGenLevelAggressive
           : opt_level == 0 ? LLVMCodeGenLevelNone
                            : LLVMCodeGenLevelLess;
}

static LLVMTargetMachineRef host_tm(int opt_level, char *err) {
    char *triple = LLVMGetDefaultTargetTriple();
    LLVMTargetRef target;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
        snprintf(err, KF_MSG_MAX, "LLVM has no target for %s: %s", triple, msg ? msg : "");
        LLVMDisposeMessage(msg);
        LLVMDisposeMessage(triple);
        return NULL;
    }
    char *cpu = LLVMGetHostCPUName();
    char *feat = LLVMGetHostCPUFeatures();
    LLVMTargetMachineRef tm =
        LLVMCreateTargetMachine(target, triple, cpu, feat, codegen_level(opt_level),
                                LLVMRelocDefault, LLVMCodeModelJITDefault);
    LLVMDisposeMessage(cpu);
    LLVMDisposeMessage(feat);
    LLVMDisposeMessage(triple);
    if (!tm)
        snprintf(err, KF_MSG_MAX, "LLVM could not create a target machine for the host");
    return tm;
}

/* ------------------------------------------------------------------------ */
/* Arena planning                                                             */
/* ------------------------------------------------------------------------ */

static size_t tensor_bytes(const kf_tensor *t) {
    return (size_t)kf_ir_numel(t) * kf_dtype_size(t->dtype);
}

static void note_use(const kf_plan *plan, int64_t *last, uint32_t t, uint32_t gi) {
    (void)plan;
    if (t != KF_NONE && (int64_t)gi > last[t])
        last[t] = gi;
}

static kf_status plan_arena(kf_cpu_exec *x) {
    const kf_plan *plan = x->plan;
    const kf_graph *g = plan->graph;
    uint32_t n = g->n_nodes;
    int64_t *first = kf_mem_alloc(&x->mem, sizeof(int64_t) * n);
    int64_t *last = kf_mem_alloc(&x->mem, sizeof(int64_t) * n);
    bool *is_out = kf_mem_calloc(&x->mem, n, sizeof(bool));
    kf_arena_item *items = kf_mem_alloc(&x->mem, sizeof *items * n);
    if (!first || !last || !is_out || !items) {
        kf_mem_free(&x->mem, first, sizeof(int64_t) * n);
        kf_mem_free(&x->mem, last, sizeof(int64_t) * n);
        kf_mem_free(&x->mem, is_out, n * sizeof(bool));
        kf_mem_free(&x->mem, items, sizeof *items * n);
        return KF_ERR_OUT_OF_MEMORY;
    }
    for (uint32_t i = 0; i < n; i++) {
        first[i] = -1;
        last[i] = -1;
        x->slot[i] = -1;
    }
    for (uint32_t i = 0; i < g->n_outputs; i++) {
        uint32_t t = g->outputs[i].tensor->id, vg = plan->group_of[t];
        is_out[t] = true;
        /* An output that is a view aliases its base: the base lives to the end. */
        if (vg != KF_NONE && plan->groups[vg].kind == KF_GROUP_VIEW &&
            plan->groups[vg].view_base != KF_NONE)
            is_out[plan->groups[vg].view_base] = true;
    }
    for (uint32_t gi = 0; gi < plan->n_groups; gi++) {
        const kf_group *gr = &plan->groups[gi];
        if (!gr->is_kernel)
            continue;
        for (uint32_t w = 0; w < gr->n_writes; w++)
            if (first[gr->writes[w]] < 0)
                first[gr->writes[w]] = gi;
        for (uint32_t r = 0; r < gr->n_reads; r++)
            note_use(plan, last, gr->reads[r], gi);
        for (uint32_t e = 0; e < gr->n_expr; e++)
            if (gr->expr[e].kind == KF_EXPR_LOAD)
                note_use(plan, last, gr->expr[e].base, gi);
        /* operands read through views: their base buffers */
        uint32_t ops[6] = {KF_NONE, KF_NONE, KF_NONE, KF_NONE, KF_NONE, KF_NONE};
        if (gr->kind == KF_GROUP_GEMM) {
            ops[0] = gr->gemm.a[0], ops[1] = gr->gemm.b[0];
            if (gr->gemm.n_anchors > 1)
                ops[2] = gr->gemm.a[1], ops[3] = gr->gemm.b[1];
        } else if (gr->kind == KF_GROUP_ATTENTION) {
            ops[0] = gr->attn.q, ops[1] = gr->attn.k, ops[2] = gr->attn.v;
        }
        for (int k = 0; k < 6; k++) {
            if (ops[k] == KF_NONE)
                continue;
            uint32_t vg = plan->group_of[ops[k]];
            note_use(plan, last, ops[k], gi);
            if (vg != KF_NONE && plan->groups[vg].kind == KF_GROUP_VIEW)
                note_use(plan, last, plan->groups[vg].view_base, gi);
        }
    }
    /* Every tensor a kernel writes gets a slot, in id order (the order breaks
     * ties between equal sizes); an output's range runs past every group, so
     * nothing placed after it overwrites it. */
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (first[i] < 0)
            continue;
        items[m].bytes = tensor_bytes(g->nodes[i]);
        items[m].first = first[i];
        items[m].last = is_out[i] ? INT64_MAX : (last[i] > first[i] ? last[i] : first[i]);
        m++;
    }
    /* opts.no_reuse (a debugging switch): every tensor keeps its own slot,
     * so all intermediates can be inspected after a run. */
    x->arena_size = kf_arena_layout(&x->mem, items, m, 64, x->opts.no_reuse, NULL);
    for (uint32_t i = 0, k = 0; i < n; i++)
        if (first[i] >= 0)
            x->slot[i] = (int64_t)items[k++].offset;
    kf_mem_free(&x->mem, first, sizeof(int64_t) * n);
    kf_mem_free(&x->mem, last, sizeof(int64_t) * n);
    kf_mem_free(&x->mem, is_out, n * sizeof(bool));
    kf_mem_free(&x->mem, items, sizeof *items * n);
    return KF_OK;
}

/* ------------------------------------------------------------------------ */
/* Compile                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct obj_job {
    LLVMModuleRef mod;
    LLVMTargetMachineRef tm;
    const kf_cpu_options *opts;
    double t_o3;
} obj_job;

/* Optimizes the module (default<On>, n = opts->opt_level) and emits the host
 * object file into *data (allocated with `mem`): the cache's payload. */
static kf_status compute_object(void *user, const kf_mem *mem, void **data, size_t *len,
                                char *error) {
    obj_job *j = user;
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(po, 1);
    LLVMPassBuilderOptionsSetSLPVectorization(po, 1);
    LLVMPassBuilderOptionsSetLoopUnrolling(po, 1);
    char pipeline[32];
    snprintf(pipeline, sizeof pipeline, "default<O%d>", j->opts->opt_level);
    LLVMErrorRef e = LLVMRunPasses(j->mod, pipeline, j->tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (e)
        return llvm_error(e, "LLVM optimization pipeline", error);
    j->t_o3 = now_s();
    if (j->opts->dump_ir) {
        char *s = LLVMPrintModuleToString(j->mod);
        fprintf(stderr, "; ---- kfuse CPU module (after %s) ----\n%s", pipeline, s);
        LLVMDisposeMessage(s);
    }
    char *msg = NULL;
    LLVMMemoryBufferRef buf = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(j->tm, j->mod, LLVMObjectFile, &msg, &buf)) {
        snprintf(error, KF_MSG_MAX, "LLVM code generation: %s", msg ? msg : "");
        LLVMDisposeMessage(msg);
        return KF_ERR_INTERNAL;
    }
    size_t n = LLVMGetBufferSize(buf);
    *data = kf_mem_alloc(mem, n ? n : 1);
    if (!*data) {
        LLVMDisposeMemoryBuffer(buf);
        snprintf(error, KF_MSG_MAX, "out of memory for a %zu-byte object file", n);
        return KF_ERR_OUT_OF_MEMORY;
    }
    memcpy(*data, LLVMGetBufferStart(buf), n);
    *len = n;
    LLVMDisposeMemoryBuffer(buf);
    return KF_OK;
}

/* The cache key of a module: its IR text before optimization, the pipeline,
 * the host CPU and features, LLVM's version and kfuse's codegen version. */
static void module_key(LLVMModuleRef mod, int opt_level, kf_cache_key *key) {
    char *ir = LLVMPrintModuleToString(mod);
    unsigned maj, min, pat;
    LLVMGetVersion(&maj, &min, &pat);
    char compiler[64], options[32];
    snprintf(compiler, sizeof compiler, "LLVM %u.%u.%u", maj, min, pat);
    snprintf(options, sizeof options, "default<O%d>", opt_level);
    kf_cache_key_parts parts = {
        ir, strlen(ir), options, kf_cpu_host_name(), compiler, KF_LLVM_CODEGEN_VERSION};
    kf_cache_key_build(&parts, key);
    LLVMDisposeMessage(ir);
}

static kf_status jit_module(kf_cpu_exec *x, struct kf_cache *cache, char *err) {
    const kf_plan *plan = x->plan;
    kf_status st = KF_OK;
    double t0 = now_s(), t_emit = 0;
    LLVMTargetMachineRef tm = host_tm(x->opts.opt_level, err);
    if (!tm)
        return KF_ERR_INTERNAL;
    LLVMContextRef C = LLVMContextCreate();
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("kfuse", C);
    char *triple = LLVMGetTargetMachineTriple(tm);
    LLVMSetTarget(mod, triple);
    LLVMDisposeMessage(triple);
    LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(mod, td);
    LLVMDisposeTargetData(td);

    st = kf_llvm_emit_plan(plan, mod, x->kernels, err);
    t_emit = now_s();
    if (st == KF_OK) {
        char *msg = NULL;
        if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
            snprintf(err, KF_MSG_MAX, "codegen/llvm produced an invalid module: %.400s",
                     msg ? msg : "");
            st = KF_ERR_INTERNAL;
        }
        LLVMDisposeMessage(msg);
    }
    if (st == KF_OK && x->opts.dump_ir) {
        char *s = LLVMPrintModuleToString(mod);
        fprintf(stderr, "; ---- kfuse CPU module (before optimization) ----\n%s", s);
        LLVMDisposeMessage(s);
    }
    void *obj = NULL;
    size_t obj_len = 0;
    bool from_cache = false, computed = true;
    obj_job job = {mod, tm, &x->opts, 0};
    if (st == KF_OK && cache) {
        kf_cache_key key;
        module_key(mod, x->opts.opt_level, &key);
        kf_cache_msg cmsg;
        memset(&cmsg, 0, sizeof cmsg);
        st = kf_cache_get_or_compute(cache, &key, compute_object, &job, &obj, &obj_len, &computed,
                                     &cmsg);
        if (st != KF_OK)
            snprintf(err, KF_MSG_MAX, "CPU kernel cache: %.400s", cmsg.error);
        from_cache = st == KF_OK;
    } else if (st == KF_OK) {
        st = compute_object(&job, &x->mem, &obj, &obj_len, err);
    }
    double t_obj = now_s();
    LLVMDisposeModule(mod);
    LLVMContextDispose(C);
    LLVMDisposeTargetMachine(tm);
    if (st != KF_OK)
        return st;
    x->cache_hit = from_cache && !computed;

    /* The JIT links the object; libm and friends resolve from the process. */
    LLVMTargetMachineRef jtm = host_tm(x->opts.opt_level, err);
    LLVMOrcLLJITBuilderRef jb = jtm ? LLVMOrcCreateLLJITBuilder() : NULL;
    LLVMErrorRef e = NULL;
    if (jb) {
        LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
            jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(jtm));
        e = LLVMOrcCreateLLJIT(&x->jit, jb);
        if (e) {
            x->jit = NULL;
            st = llvm_error(e, "ORC LLJIT", err);
        }
    } else {
        st = KF_ERR_INTERNAL;
    }
    LLVMOrcJITDylibRef jd = NULL;
    if (st == KF_OK) {
        LLVMOrcDefinitionGeneratorRef gen = NULL;
        e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
            &gen, LLVMOrcLLJITGetGlobalPrefix(x->jit), NULL, NULL);
        if (e) {
            st = llvm_error(e, "ORC process symbols", err);
        } else {
            jd = LLVMOrcLLJITGetMainJITDylib(x->jit);
            LLVMOrcJITDylibAddGenerator(jd, gen);
            LLVMMemoryBufferRef mb =
                LLVMCreateMemoryBufferWithMemoryRangeCopy(obj, obj_len, "kfuse-cpu.o");
            e = LLVMOrcLLJITAddObjectFile(x->jit, jd, mb);
            if (e)
                st = llvm_error(e, "ORC add object", err);
        }
    }
    if (from_cache)
        kf_cache_blob_free(cache, obj, obj_len);
    else
        kf_mem_free(&x->mem, obj, obj_len);
    if (st != KF_OK)
        return st;
    for (uint32_t i = 0; i < plan->n_groups; i++) {
        if (!x->kernels[i].present)
            continue;
        LLVMOrcExecutorAddress addr = 0;
        e = LLVMOrcLLJITLookup(x->jit, &addr, x->kernels[i].symbol);
        if (e)
            return llvm_error(e, "ORC lookup", err);
        x->fns[i] = (kf_pool_fn)(uintptr_t)addr;
        if (x->kernels[i].scratch > x->scratch)
            x->scratch = x->kernels[i].scratch;
    }
    if (x->opts.timing)
        fprintf(stderr,
                "kfuse cpu: %u kernels: emit %.2f ms, optimize %.2f ms, object %.2f ms%s, "
                "link %.2f ms\n",
                kf_plan_kernel_count(plan), 1e3 * (t_emit - t0),
                computed ? 1e3 * (job.t_o3 - t_emit) : 0.0,
                computed ? 1e3 * (t_obj - job.t_o3) : 1e3 * (t_obj - t_emit),
                computed ? "" : " (cache hit)", 1e3 * (now_s() - t_obj));
    return KF_OK;
}

kf_status kf_cpu_exec_create(const kf_mem *mem, const kf_plan *plan, const kf_cpu_options *opts,
                             struct kf_cache *cache, kf_cpu_exec **out, char *err) {
    *out = NULL;
    err[0] = '\0';
    pthread_once(&llvm_once, llvm_init);
    kf_cpu_exec *x = kf_mem_calloc(mem, 1, sizeof *x);
    if (!x)
        goto oom;
    x->mem = *mem;
    x->plan = plan;
    if (opts)
        x->opts = *opts;
    else
        kf_cpu_options_init(&x->opts);
    uint32_t ng = plan->n_groups ? plan->n_groups : 1,
             nn = plan->graph->n_nodes ? plan->graph->n_nodes : 1;
    x->kernels = kf_mem_calloc(mem, ng, sizeof *x->kernels);
    x->fns = kf_mem_calloc(mem, ng, sizeof *x->fns);
    x->slot = kf_mem_calloc(mem, nn, sizeof *x->slot);
    x->bufs = kf_mem_calloc(mem, nn, sizeof *x->bufs);
    if (!x->kernels || !x->fns || !x->slot || !x->bufs)
        goto oom;
    kf_status st = plan_arena(x);
    if (st != KF_OK)
        goto oom;
    st = jit_module(x, cache, err);
    if (st != KF_OK) {
        kf_cpu_exec_destroy(x);
        return st;
    }
    x->n_threads = kf_pool_default_threads(x->opts.threads);
    *out = x;
    return KF_OK;
oom:
    kf_cpu_exec_destroy(x);
    snprintf(err, KF_MSG_MAX, "out of memory while compiling for the CPU");
    return KF_ERR_OUT_OF_MEMORY;
}

/* ------------------------------------------------------------------------ */
/* Run                                                                        */
/* ------------------------------------------------------------------------ */

/* Below this many element-operations a kernel runs on the calling thread. */
#define KF_CPU_PARALLEL_MIN 65536.0

/* The CPU target's gather contract: before a group runs, every index of each
 * gather it computes lies in [0, dim) of the table's axis, else the run fails
 * naming it (the kernel itself clamps, so it never reads out of bounds). The
 * indices are in memory (the planner keeps a gather's idx there: GATHER_INDEX)
 * or an inline iota or one-element constant. */
static kf_status check_gathers(const kf_cpu_exec *x, const kf_group *grp, char *err) {
    const kf_graph *g = x->plan->graph;
    for (uint32_t k = 0; k < grp->n_computed; k++) {
        const kf_tensor *c = g->nodes[grp->computed[k]];
        if (c->op != KF_OP_GATHER)
            continue;
        const kf_tensor *ix = c->src[1], *tb = c->src[0];
        int64_t len = tb->dims[c->attr.axis], n = kf_ir_numel(ix);
        const void *data = x->bufs[ix->id];
        char ts[160], is[160];
        for (int64_t i = 0; i < n; i++) {
            double v = data                   ? kf_ir_load(data, ix->dtype, i)
                       : ix->op == KF_OP_IOTA ? (double)(ix->dims[ix->attr.axis] - 1)
                                              : 0.0;
            if (v >= 0 && v < (double)len)
                continue;
            snprintf(err, KF_MSG_MAX,
                     "gather %%%u: index %.0f at element %lld of idx %s is out of range for "
                     "axis %d of table %s (0 to %lld)",
                     c->id, v, (long long)i, kf_ir_type_str(ix, is, sizeof is), c->attr.axis,
                     kf_ir_type_str(tb, ts, sizeof ts), (long long)len - 1);
            return KF_ERR_INVALID_ARGUMENT;
        }
    }
    return KF_OK;
}

kf_status kf_cpu_exec_run(kf_cpu_exec *x, void *const *bound, char *err) {
    const kf_plan *plan = x->plan;
    const kf_graph *g = plan->graph;
    if (x->arena_size && !x->arena) {
        x->arena = kf_mem_alloc(&x->mem, x->arena_size + 64);
        if (!x->arena) {
            snprintf(err, KF_MSG_MAX, "out of memory: the CPU arena needs %zu bytes",
                     x->arena_size);
            return KF_ERR_OUT_OF_MEMORY;
        }
    }
    char *arena = x->arena ? (char *)(((uintptr_t)x->arena + 63) & ~(uintptr_t)63) : NULL;
    for (uint32_t t = 0; t < g->n_nodes; t++) {
        const kf_tensor *tt = g->nodes[t];
        if (bound[t])
            x->bufs[t] = bound[t];
        else if (tt->op == KF_OP_CONST)
            x->bufs[t] = tt->data;
        else if (x->slot[t] >= 0)
            x->bufs[t] = arena + x->slot[t];
        else
            x->bufs[t] = NULL;
    }
    bool want_pool = false;
    for (uint32_t i = 0; i < plan->n_groups; i++)
        if (x->fns[i] && x->kernels[i].outer > 1 &&
            x->kernels[i].cost * (double)x->kernels[i].outer >= KF_CPU_PARALLEL_MIN)
            want_pool = true;
    if (!x->pool) {
        x->pool = kf_pool_create(&x->mem, want_pool ? x->n_threads : 1, x->scratch);
        if (!x->pool) {
            snprintf(err, KF_MSG_MAX, "out of memory: CPU thread pool");
            return KF_ERR_OUT_OF_MEMORY;
        }
    }
    int nt = kf_pool_threads(x->pool);
    for (uint32_t i = 0; i < plan->n_groups; i++) {
        if (!x->fns[i])
            continue;
        kf_status gs = check_gathers(x, &plan->groups[i], err);
        if (gs != KF_OK)
            return gs;
        const kf_cpu_kernel *k = &x->kernels[i];
        int64_t n = k->outer;
        if (n <= 0)
            continue;
        double work = k->cost * (double)n;
        int64_t grain = n;
        if (nt > 1 && work >= KF_CPU_PARALLEL_MIN) {
            grain = n / ((int64_t)nt * 8);
            if (grain < 1)
                grain = 1;
        }
        kf_pool_run(x->pool, x->fns[i], x->bufs, n, grain);
    }
    return KF_OK;
}

void *kf_cpu_exec_buffer(kf_cpu_exec *x, uint32_t t) { return x->bufs[t]; }

bool kf_cpu_exec_cache_hit(const kf_cpu_exec *x) { return x->cache_hit; }

void kf_cpu_exec_destroy(kf_cpu_exec *x) {
    if (!x)
        return;
    const kf_mem *mem = &x->mem;
    uint32_t ng = x->plan->n_groups ? x->plan->n_groups : 1,
             nn = x->plan->graph->n_nodes ? x->plan->graph->n_nodes : 1;
    kf_pool_destroy(x->pool);
    if (x->jit) {
        LLVMErrorRef e = LLVMOrcDisposeLLJIT(x->jit);
        if (e)
            LLVMConsumeError(e);
    }
    if (x->arena)
        kf_mem_free(mem, x->arena, x->arena_size + 64);
    kf_mem_free(mem, x->kernels, ng * sizeof *x->kernels);
    kf_mem_free(mem, x->fns, ng * sizeof *x->fns);
    kf_mem_free(mem, x->slot, nn * sizeof *x->slot);
    kf_mem_free(mem, x->bufs, nn * sizeof *x->bufs);
    kf_mem m = *mem;
    kf_mem_free(&m, x, sizeof *x);
}
