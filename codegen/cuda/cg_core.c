/*
 * cg_core.c -- the parts of codegen/cuda every kernel kind shares: the
 * growing source text, the storage and compute types of each dtype, the
 * generator's state (cg_begin, the kernel's name, cg_end), the kernel's
 * params, the head every source opens with, and the shared-memory limits of
 * an arch.
 */
#include "codegen/cuda/cg.h"

#include "codegen/cuda/templates.h"

/* ------------------------------------------------------------------------ */
/* Growing text                                                               */
/* ------------------------------------------------------------------------ */

void cg_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->p && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t ncap = b->cap ? b->cap : 4096;
        while (ncap < b->len + (size_t)n + 1)
            ncap *= 2;
        char *np = kf_mem_realloc(b->mem, b->p, b->cap, ncap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
}

void cg_puts(sbuf *b, const char *s) { cg_printf(b, "%s", s); }

/* ------------------------------------------------------------------------ */
/* Types                                                                      */
/* ------------------------------------------------------------------------ */

const char *cg_storage_type(kf_dtype d) {
    switch (d) {
    case KF_DTYPE_F32:
        return "float";
    case KF_DTYPE_F16:
        return "kf_f16";
    case KF_DTYPE_BF16:
        return "kf_bf16";
    case KF_DTYPE_F64:
        return "double";
    case KF_DTYPE_I32:
        return "int";
    case KF_DTYPE_BOOL:
        return "unsigned char";
    case KF_DTYPE_I64:
        return "long long";
    default:
        return "void";
    }
}

/* The type a value lives in while computed. */
const char *cg_reg_type(kf_dtype d) {
    switch (d) {
    case KF_DTYPE_F64:
        return "double";
    case KF_DTYPE_I32:
        return "int";
    case KF_DTYPE_I64:
        return "long long";
    case KF_DTYPE_BOOL:
        return "bool";
    default:
        return "float";
    }
}

const char *cg_round_fn(kf_dtype d) {
    return d == KF_DTYPE_F16 ? "kf_round_f16" : d == KF_DTYPE_BF16 ? "kf_round_bf16" : NULL;
}

/* ------------------------------------------------------------------------ */
/* The generator's state                                                      */
/* ------------------------------------------------------------------------ */

kf_status cg_fail(cg *c, kf_status st, const char *fmt, ...) {
    if (c->st == KF_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->k->error, sizeof c->k->error, fmt, ap);
        va_end(ap);
        c->st = st;
    }
    return st;
}

const kf_tensor *cg_tensor(const cg *c, uint32_t id) { return c->plan->graph->nodes[id]; }

uint64_t cg_tensor_bytes(const cg *c, uint32_t id) {
    const kf_tensor *t = cg_tensor(c, id);
    return (uint64_t)kf_ir_numel(t) * kf_dtype_size(t->dtype);
}

int cg_param_add(cg *c, kf_cuda_param_kind kind, uint32_t t, kf_dtype dt, uint64_t bytes) {
    kf_cuda_kernel *k = c->k;
    for (uint32_t i = 0; i < k->n_params; i++) {
        if (k->params[i].kind == kind && k->params[i].tensor == t)
            return (int)i;
    }
    if (k->n_params == KF_CUDA_MAX_PARAMS) {
        cg_fail(c, KF_ERR_UNSUPPORTED, "group %u (%s): more than %d kernel parameters", c->g->id,
                c->g->name, KF_CUDA_MAX_PARAMS);
        return 0;
    }
    kf_cuda_param *p = &k->params[k->n_params];
    p->kind = kind;
    p->tensor = t;
    p->dtype = dt;
    p->bytes = bytes;
    return (int)k->n_params++;
}

/* Marks what `root` needs, stopping at overridden nodes. */
void cg_mark(cg *c, uint32_t root) {
    if (root == KF_NONE || c->need[root])
        return;
    c->need[root] = true;
    if (c->ov[root][0])
        return;
    const kf_expr *e = &c->g->expr[root];
    if (e->kind == KF_EXPR_OP || e->kind == KF_EXPR_LOAD ||
        e->kind == KF_EXPR_ACC) { /* a LOAD's coordinate nodes, an in-head ACC's column */
        for (int i = 0; i < 3; i++)
            cg_mark(c, e->src[i]);
    }
}

bool cg_depends_on_stat(const cg *c, uint32_t root) {
    const kf_expr *e = &c->g->expr[root];
    if (e->kind == KF_EXPR_STAT)
        return true;
    if (e->kind != KF_EXPR_OP)
        return false;
    for (int i = 0; i < 3; i++) {
        if (e->src[i] != KF_NONE && cg_depends_on_stat(c, e->src[i]))
            return true;
    }
    return false;
}

/* ------------------------------------------------------------------------ */
/* Common pieces of every source                                              */
/* ------------------------------------------------------------------------ */

static void emit_params(cg *c, bool args) {
    const kf_cuda_kernel *k = c->k;
    for (uint32_t i = 0; i < k->n_params; i++) {
        const kf_cuda_param *p = &k->params[i];
        if (args) {
            cg_printf(&c->s, "%sp%u", i ? ", " : "", i);
            continue;
        }
        if (p->kind == KF_CUDA_PARAM_FLAGS || p->kind == KF_CUDA_PARAM_COUNTERS) {
            cg_printf(&c->s, "%sunsigned *__restrict__ p%u", i ? ", " : "", i);
            continue;
        }
        bool in = p->kind == KF_CUDA_PARAM_IN || p->kind == KF_CUDA_PARAM_ACC ||
                  p->kind == KF_CUDA_PARAM_SCORES;
        cg_printf(&c->s, "%s%s%s *__restrict__ p%u", i ? ", " : "", in ? "const " : "",
                  cg_storage_type(p->dtype), i);
    }
}

void cg_emit_head(cg *c, const char *what) {
    const kf_cuda_kernel *k = c->k;
    cg_printf(&c->s,
              "/* kfuse generated kernel %s\n"
              " * %s of plan group %u (%s), template %s, %s, codegen v%u.\n"
              " * Parameters:\n",
              k->name, what, c->g->id, c->g->name, kf_cuda_template_name(k->tmpl), k->arch,
              KF_CUDA_CODEGEN_VERSION);
    static const char *const kinds[] = {"in",  "out",   "acc",      "scores",  "scratch",
                                        "i64", "flags", "counters", "partials"};
    _Static_assert(sizeof kinds / sizeof kinds[0] == KF_CUDA_PARAM_COUNT, "one name per kind");
    for (uint32_t i = 0; i < k->n_params; i++) {
        const kf_cuda_param *p = &k->params[i];
        if (p->kind == KF_CUDA_PARAM_FLAGS) {
            cg_printf(&c->s, " *   p%u %-7s the program's clamp flag word\n", i, kinds[p->kind]);
            continue;
        }
        const kf_tensor *t = cg_tensor(c, p->tensor);
        char ty[96];
        kf_ir_type_str(t, ty, sizeof ty);
        cg_printf(&c->s, " *   p%u %-7s %s %s\n", i, kinds[p->kind], t->name ? t->name : "%", ty);
    }
    cg_puts(&c->s, " */\n");
    /* Everything from here on is a function of what the kernel computes, not
     * of which group or tensors it serves: the cache key starts here. */
    c->k->body = c->s.len;
    cg_puts(&c->s, kf_cuda_tpl_common);
    cg_printf(&c->s,
              "\n/* ---- generated ---- */\n#define KF_KERNEL %s\n#define KF_BLOCK %u\n#define "
              "KF_VEC %u\n",
              k->name, k->launch.block, k->vec);
    cg_puts(&c->s, "#define KF_PARAMS ");
    emit_params(c, false);
    cg_puts(&c->s, "\n#define KF_ARGS ");
    emit_params(c, true);
    cg_puts(&c->s, "\n");
    cg_emit_gelu_table(c);
}

void cg_emit_vec_ok(cg *c, const char *conds) {
    cg_printf(&c->s,
              "__device__ __forceinline__ bool kf_vec_ok(KF_PARAMS) {\n    return true%s;\n}\n",
              conds);
}

/* ------------------------------------------------------------------------ */
/* Kernel setup shared by the entry points                                    */
/* ------------------------------------------------------------------------ */

kf_status cg_begin(cg *c, const kf_plan *plan, uint32_t group, const char *arch, const kf_mem *mem,
                   kf_cuda_kernel *out) {
    memset(out, 0, sizeof *out);
    memset(c, 0, sizeof *c);
    c->k = out;
    c->mem = mem;
    c->s.mem = mem;
    if (!plan || !mem || !arch) {
        snprintf(out->error, sizeof out->error, "kf_cuda_codegen: NULL plan, allocator or arch");
        return KF_ERR_INVALID_ARGUMENT;
    }
    size_t al = strlen(arch);
    bool arch_ok = al >= 5 && al < KF_CUDA_ARCH_MAX && strncmp(arch, "sm_", 3) == 0;
    for (size_t i = 3; arch_ok && i < al; i++)
        arch_ok = (arch[i] >= '0' && arch[i] <= '9') ||
                  (i == al - 1 && (arch[i] == 'a' || arch[i] == 'f'));
    if (!arch_ok) {
        snprintf(out->error, sizeof out->error,
                 "kf_cuda_codegen: bad arch '%s': expected sm_XY or sm_XYa, e.g. sm_80 or sm_90a",
                 arch);
        return KF_ERR_INVALID_ARGUMENT;
    }
    if (group >= plan->n_groups) {
        snprintf(out->error, sizeof out->error,
                 "kf_cuda_codegen: group %u out of range (%u groups)", group, plan->n_groups);
        return KF_ERR_INVALID_ARGUMENT;
    }
    c->plan = plan;
    c->g = &plan->groups[group];
    c->n = c->g->n_expr;
    snprintf(out->arch, sizeof out->arch, "%s", arch);
    out->group = group;
    size_t n = c->n ? c->n : 1;
    c->ov = kf_mem_calloc(mem, n, sizeof *c->ov);
    c->need = kf_mem_calloc(mem, n, sizeof *c->need);
    c->param = kf_mem_calloc(mem, n, sizeof *c->param);
    c->soff = kf_mem_calloc(mem, n, sizeof *c->soff);
    c->stored = kf_mem_calloc(mem, n, sizeof *c->stored);
    if (!c->ov || !c->need || !c->param || !c->soff || !c->stored) {
        snprintf(out->error, sizeof out->error, "kf_cuda_codegen: out of memory");
        return KF_ERR_OUT_OF_MEMORY;
    }
    for (uint32_t i = 0; i < c->n; i++) {
        c->param[i] = -1;
        c->soff[i] = -1;
    }
    return KF_OK;
}

/* NVRTC (runtime/nvrtc.c) takes identifiers of at most 64 characters. */
#define NAME_LIMIT 64
_Static_assert(NAME_LIMIT < KF_CUDA_NAME_MAX, "a short name fits the kernel's name field");

static uint32_t fnv1a(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* PREFIX + the group's name + "_" + arch without '_': ew_gelu_mul_bf16_65536x4096_sm90a.
 * Too long, the op tags are cut and a hash of the whole name keeps it unique:
 * ew_neg_abs_exp_..._3f9a01c2_f32_8x64_sm80. */
void cg_set_name(cg *c, const char *prefix) {
    char a[KF_CUDA_ARCH_MAX];
    size_t j = 0;
    for (const char *p = c->k->arch; *p && j + 1 < sizeof a; p++) {
        if (*p != '_')
            a[j++] = *p;
    }
    a[j] = 0;
    char base[sizeof c->g->name];
    size_t n = 0;
    for (const char *p = c->g->name; *p && n + 1 < sizeof base; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        base[n++] = ok ? ch : '_';
    }
    base[n] = 0;
    char full[KF_CUDA_NAME_MAX + sizeof base];
    snprintf(full, sizeof full, "%s%s_%s", prefix, base, a);
    size_t full_len = strlen(full);
    if (full_len <= NAME_LIMIT) {
        memcpy(c->k->name, full, full_len + 1); /* NAME_LIMIT < sizeof c->k->name */
        return;
    }
    /* tail: "_DTYPE_SHAPE_ARCH" (the last two '_' of the group's name) */
    char *u1 = strrchr(base, '_');
    char *u2 = NULL;
    if (u1) {
        *u1 = 0;
        u2 = strrchr(base, '_');
        *u1 = '_';
    }
    char tail[NAME_LIMIT];
    snprintf(tail, sizeof tail, "%s_%s", u2 ? u2 : "", a);
    uint32_t h = fnv1a(full);
    size_t keep_tail = strlen(tail);
    if (keep_tail + 12 > NAME_LIMIT) {
        snprintf(c->k->name, sizeof c->k->name, "k%s_%08x_%s", prefix[0] ? "_" : "", h, a);
        return;
    }
    size_t head = NAME_LIMIT - keep_tail - 9;
    if (u2)
        *u2 = 0;
    char headbuf[NAME_LIMIT];
    snprintf(headbuf, sizeof headbuf, "%.8s%.55s", prefix, base); /* prefixes are <= 8 chars */
    headbuf[head < sizeof headbuf ? head : sizeof headbuf - 1] = 0;
    snprintf(c->k->name, sizeof c->k->name, "%.63s_%08x%.63s", headbuf, h, tail);
}

kf_status cg_end(cg *c, kf_status st) {
    if (c->st == KF_OK && c->s.oom)
        cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    if (st == KF_OK)
        st = c->st;
    if (c->ov)
        kf_mem_free(c->mem, c->ov, (c->n ? c->n : 1) * sizeof *c->ov);
    if (c->need)
        kf_mem_free(c->mem, c->need, (c->n ? c->n : 1) * sizeof *c->need);
    if (c->param)
        kf_mem_free(c->mem, c->param, (c->n ? c->n : 1) * sizeof *c->param);
    if (c->soff)
        kf_mem_free(c->mem, c->soff, (c->n ? c->n : 1) * sizeof *c->soff);
    if (c->stored)
        kf_mem_free(c->mem, c->stored, (c->n ? c->n : 1) * sizeof *c->stored);
    if (st != KF_OK) {
        if (c->s.p)
            kf_mem_free(c->mem, c->s.p, c->s.cap);
        c->k->source = NULL;
        c->k->source_len = c->k->source_cap = c->k->body = 0;
        return st;
    }
    c->k->source = c->s.p;
    c->k->source_len = c->s.len;
    c->k->source_cap = c->s.cap;
    return KF_OK;
}

/* ------------------------------------------------------------------------ */
/* Outputs                                                                    */
/* ------------------------------------------------------------------------ */

/* Marks the outputs' nodes that are stored in their own dtype (cg_raw_of). */
void cg_mark_stored(cg *c, const out_spec *outs, uint32_t n_outs) {
    for (uint32_t o = 0; o < n_outs; o++) {
        if (outs[o].node < c->n && c->g->expr[outs[o].node].dtype == outs[o].dtype)
            c->stored[outs[o].node] = true;
    }
}

/* ------------------------------------------------------------------------ */
/* Shared memory                                                              */
/* ------------------------------------------------------------------------ */

int kf_cuda_arch_cc(const char *arch) {
    return arch && strncmp(arch, "sm_", 3) == 0 ? atoi(arch + 3) : 0;
}

/* Shared memory a block may use (dynamic + static) and an SM holds, for the
 * devices a binary of `arch` runs on (runtime/cuda.c: sm_80 serves every 8.x,
 * so its per-block limit is the 99 KiB of 8.6/8.9, not A100's 163 KiB; the
 * per-SM figure only sizes the grid, and is A100's). */
bool cg_stage_smem_limits(const char *arch, uint32_t *per_block, uint32_t *per_sm) {
    int sm = atoi(arch + 3); /* cg_begin checked "sm_" + digits */
    if (sm < 80)
        return false; /* cp.async is sm_80+ */
    if (sm >= 90 && sm < 120) {
        *per_block = 227 * 1024; /* H100/H200/B200 */
        *per_sm = 228 * 1024;
    } else {
        *per_block = 99 * 1024;
        *per_sm = sm == 80 ? 164 * 1024 : 100 * 1024;
    }
    return true;
}
