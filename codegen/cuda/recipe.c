/*
 * recipe.c -- the recipe set of a plan (cuda_recipe.h): targets, steps, and
 * the groups that are one generated kernel each.
 *
 *   for each group, in plan order:
 *     VIEW                               no step (consumers read the base)
 *     ELEMENTWISE ROWWISE COLREDUCE LAYOUT  one KERNEL step (kf_cuda_codegen_group)
 *     GEMM                               recipe_gemm.c: cuBLASLt with what it
 *                                        applies natively, kernels around it
 *     ATTENTION                          recipe_gemm.c: the unfused fallback
 *
 * Every lowering decision the CUDA target makes is taken here or in
 * recipe_gemm.c; runtime/cuda_exec.c only executes the result.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cuda/recipe_internal.h"

/* ------------------------------------------------------------------------ */
/* Targets                                                                    */
/* ------------------------------------------------------------------------ */

kf_status kf_cuda_target_for_device(const char *device, kf_cuda_target *out) {
    static const struct {
        const char *name, *arch;
        int sms;
    } known[] = {{"h100", "sm_90a", 132}, {"h200", "sm_90a", 132}, {"a100", "sm_80", 108}};
    if (!device || !out)
        return KF_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (strcmp(device, known[i].name) == 0) {
            memset(out, 0, sizeof *out);
            snprintf(out->arch, sizeof out->arch, "%s", known[i].arch);
            out->sm_count = known[i].sms;
            return KF_OK;
        }
    }
    return KF_ERR_NOT_FOUND;
}

void kf_cuda_target_for_arch(const char *arch, kf_cuda_target *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->arch, sizeof out->arch, "%s", arch ? arch : "");
    if (strncmp(out->arch, "sm_90", 5) == 0)
        out->sm_count = 132;
    else if (strcmp(out->arch, "sm_80") == 0)
        out->sm_count = 108;
    else
        out->sm_count = 80;
}

const char *kf_cuda_lt_epilogue_name(kf_cuda_lt_epilogue e) {
    static const char *const names[] = {"none", "relu", "gelu", "bias", "relu_bias", "gelu_bias"};
    _Static_assert(sizeof names / sizeof names[0] == KF_CUDA_LT_EPI_COUNT, "one name per epilogue");
    return (unsigned)e < KF_CUDA_LT_EPI_COUNT ? names[e] : "?";
}

/* ------------------------------------------------------------------------ */
/* Steps                                                                      */
/* ------------------------------------------------------------------------ */

uint64_t kf_cuda_recipe_flags(unsigned kf_flags, int gemm_mode, int attention_mode) {
    unsigned f = (kf_flags & KF_FLAG_NO_CUBLASLT) ? KF_CUDA_RECIPE_NO_LT_EPILOGUE : 0u;
    if ((kf_flags & KF_FLAG_UNFUSED_ATTENTION) || attention_mode == KF_ATTENTION_UNFUSED)
        f |= KF_CUDA_RECIPE_UNFUSED_ATTENTION;
    else if (attention_mode == KF_ATTENTION_FA2)
        f |= KF_CUDA_RECIPE_ATTENTION_FA2;
    else if (attention_mode == KF_ATTENTION_DECODE)
        f |= KF_CUDA_RECIPE_ATTENTION_DECODE;
    if (gemm_mode == KF_GEMM_GENERATED)
        f |= KF_CUDA_RECIPE_GEMM_GENERATED;
    else if (gemm_mode == KF_GEMM_SM80)
        f |= KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SM80;
    else if (gemm_mode == KF_GEMM_MEASURED || gemm_mode == KF_GEMM_AUTO)
        f |= KF_CUDA_RECIPE_GEMM_MEASURED;
    return f;
}

kf_status kf_cuda_recipe_add_step(kf_cuda_recipe *rc, const kf_mem *mem, kf_cuda_step_kind kind,
                                  kf_cuda_step **out) {
    if (!kf_mem_grow(mem, (void **)&rc->steps, &rc->cap_steps, rc->n_steps + 1, sizeof *rc->steps))
        return KF_ERR_OUT_OF_MEMORY;
    kf_cuda_step *s = &rc->steps[rc->n_steps];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    if (kind == KF_CUDA_STEP_KERNEL) {
        s->kernel = kf_mem_calloc(mem, 1, sizeof *s->kernel);
        if (!s->kernel)
            return KF_ERR_OUT_OF_MEMORY;
    }
    rc->n_steps++;
    if (rc->n_variants > 0)
        rc->variants[rc->n_variants - 1].n_steps++;
    *out = s;
    return KF_OK;
}

static uint64_t fnv1a64(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

kf_status kf_cuda_kstep_from_kernel(kf_cuda_kstep *ks, kf_cuda_role role, kf_cuda_kernel *k,
                                    int sm_count, kf_cuda_param_resolver resolve, void *user,
                                    char *err) {
    ks->kernel = *k;
    memset(k, 0, sizeof *k);
    k = &ks->kernel;
    ks->role = role;
    size_t body = k->body < k->source_len ? k->body : 0;
    ks->digest = fnv1a64(k->source + body, k->source_len - body); /* what the key covers */
    ks->grid[0] = kf_cuda_kernel_grid(k, sm_count);
    ks->grid[1] = ks->grid[2] = 1;
    ks->block[0] = k->launch.block;
    ks->block[1] = ks->block[2] = 1;
    ks->cluster[0] = ks->cluster[1] = ks->cluster[2] = 1;
    ks->shared_bytes = k->launch.shared_bytes;
    ks->n_args = k->n_params;
    for (uint32_t i = 0; i < k->n_params; i++) {
        const kf_cuda_param *p = &k->params[i];
        kf_cuda_arg *a = &ks->args[i];
        a->kind = KF_CUDA_ARG_PTR;
        a->written = p->kind == KF_CUDA_PARAM_OUT || p->kind == KF_CUDA_PARAM_SCRATCH ||
                     p->kind == KF_CUDA_PARAM_FLAGS || p->kind == KF_CUDA_PARAM_COUNTERS ||
                     p->kind == KF_CUDA_PARAM_PARTIALS;
        kf_status st = resolve(user, p, &a->buf, err);
        if (st != KF_OK)
            return st;
    }
    return KF_OK;
}

/* ------------------------------------------------------------------------ */
/* The builder's buffers                                                      */
/* ------------------------------------------------------------------------ */

kf_cuda_buf kf_rb_tensor(const rb *b, uint32_t t) {
    kf_cuda_buf r = {KF_CUDA_BUF_TENSOR, kf_plan_buffer_of(b->plan, t), 0};
    return r;
}

kf_cuda_buf kf_rb_find(const rb *b, kf_cuda_param_kind role, uint32_t tensor) {
    for (int i = 0; i < b->n_map; i++)
        if (b->map[i].role == role && b->map[i].tensor == tensor)
            return b->map[i].buf;
    kf_cuda_buf none = {KF_CUDA_BUF_NONE, 0, 0};
    return none;
}

kf_status kf_rb_set(rb *b, kf_cuda_param_kind role, uint32_t tensor, kf_cuda_buf buf) {
    if (b->n_map == KF_CUDA_MAX_SCRATCH)
        return kf_msg_set(b->err, KF_ERR_INTERNAL, "group %u needs more than %d scratch buffers",
                          b->gi, KF_CUDA_MAX_SCRATCH);
    b->map[b->n_map].role = role;
    b->map[b->n_map].tensor = tensor;
    b->map[b->n_map++].buf = buf;
    return KF_OK;
}

kf_status kf_rb_get(rb *b, kf_cuda_param_kind role, uint32_t tensor, uint64_t bytes,
                    kf_cuda_buf *out) {
    kf_cuda_buf f = kf_rb_find(b, role, tensor);
    if (f.kind != KF_CUDA_BUF_NONE) {
        if (f.kind == KF_CUDA_BUF_SCRATCH && b->rc->scratch[f.id].bytes < bytes)
            b->rc->scratch[f.id].bytes = bytes;
        *out = f;
        return KF_OK;
    }
    kf_cuda_recipe *rc = b->rc;
    if (rc->n_scratch == KF_CUDA_MAX_SCRATCH)
        return kf_msg_set(b->err, KF_ERR_INTERNAL, "group %u needs more than %d scratch buffers",
                          b->gi, KF_CUDA_MAX_SCRATCH);
    kf_cuda_scratch *s = &rc->scratch[rc->n_scratch];
    s->role = role;
    s->tensor = tensor;
    s->bytes = bytes;
    kf_cuda_buf nb = {KF_CUDA_BUF_SCRATCH, rc->n_scratch++, 0};
    *out = nb;
    return kf_rb_set(b, role, tensor, nb);
}

/* Parameters to buffers: IN/OUT are tensors (their bases); ACC, SCORES and
 * SCRATCH are the group's own, keyed by (kind, tensor). */
static kf_status resolve_param(void *user, const kf_cuda_param *p, kf_cuda_buf *out, char *err) {
    rb *b = user;
    switch (p->kind) {
    case KF_CUDA_PARAM_IN:
    case KF_CUDA_PARAM_OUT:
        *out = kf_rb_tensor(b, p->tensor);
        return KF_OK;
    case KF_CUDA_PARAM_ACC:
    case KF_CUDA_PARAM_SCORES:
    case KF_CUDA_PARAM_SCRATCH:
    case KF_CUDA_PARAM_PARTIALS:
    case KF_CUDA_PARAM_COUNTERS: /* a scratch the executor keeps, zeroed once */
        return kf_rb_get(b, p->kind, p->tensor, p->bytes, out);
    case KF_CUDA_PARAM_FLAGS: {
        kf_cuda_buf f = {KF_CUDA_BUF_FLAGS, 0, 0};
        *out = f;
        return KF_OK;
    }
    default:
        return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                          "group %u: a kernel parameter of kind %d has no buffer", b->gi,
                          (int)p->kind);
    }
}

kf_status kf_rb_add_kernel(rb *b, const kf_plan *plan, kf_cuda_role role, char *name_out,
                           size_t name_size, kf_cuda_template *tmpl_out) {
    kf_cuda_kernel k;
    memset(&k, 0, sizeof k);
    kf_status st = role == KF_CUDA_ROLE_GROUP
                       ? kf_cuda_codegen_group_flags(plan, b->gi, b->target->arch, b->target->flags,
                                                     b->mem, &k)
                       : kf_cuda_codegen(plan, b->gi, role, b->target->arch, b->mem, &k);
    if (st == KF_ERR_NOT_FOUND) {
        kf_cuda_kernel_release(b->mem, &k);
        return st;
    }
    if (st != KF_OK) {
        kf_msg_set(b->err, st, "group %u (%s): %s", b->gi, b->plan->groups[b->gi].name,
                   k.error[0] ? k.error : kf_status_str(st));
        kf_cuda_kernel_release(b->mem, &k);
        return st;
    }
    if (name_out)
        snprintf(name_out, name_size, "%s", k.name);
    if (tmpl_out)
        *tmpl_out = k.tmpl;
    kf_cuda_step *s = NULL;
    st = kf_cuda_recipe_add_step(b->rc, b->mem, KF_CUDA_STEP_KERNEL, &s);
    if (st != KF_OK) {
        kf_cuda_kernel_release(b->mem, &k);
        return kf_msg_set(b->err, st, "out of memory for the steps of group %u", b->gi);
    }
    return kf_cuda_kstep_from_kernel(s->kernel, role, &k, b->target->sm_count, resolve_param, b,
                                     b->err);
}

kf_status kf_rb_add_made_kernel(rb *b, kf_cuda_kernel *k, kf_cuda_role role, kf_cuda_kstep **out) {
    kf_cuda_step *s = NULL;
    kf_status st = kf_cuda_recipe_add_step(b->rc, b->mem, KF_CUDA_STEP_KERNEL, &s);
    if (st != KF_OK) {
        kf_cuda_kernel_release(b->mem, k);
        return kf_msg_set(b->err, st, "out of memory for the steps of group %u", b->gi);
    }
    *out = s->kernel;
    return kf_cuda_kstep_from_kernel(s->kernel, role, k, b->target->sm_count, resolve_param, b,
                                     b->err);
}

void kf_rb_how(rb *b, uint32_t v, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->rc->variants[v].how, sizeof b->rc->variants[v].how, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------------ */
/* The recipe set                                                             */
/* ------------------------------------------------------------------------ */

static kf_status build_group(rb *b) {
    const kf_group *grp = &b->plan->groups[b->gi];
    kf_cuda_recipe *rc = b->rc;
    rc->group = b->gi;
    rc->choice = KF_CUDA_CHOICE_ONLY;
    rc->n_variants = 1;
    rc->n_members = 1;
    kf_cuda_variant *v = &rc->variants[0];
    snprintf(v->label, sizeof v->label, "%s",
             grp->kind == KF_GROUP_GEMM || grp->kind == KF_GROUP_ATTENTION ? "cublaslt"
                                                                           : "generated");
    /* over the last axis the row kernel (the softmax's statistics) runs it,
     * checked on a GPU (test_cuda_exec); the column kernel has not run it */
    if (grp->row.present && grp->row.op == KF_OP_LOGSUMEXP && grp->kind != KF_GROUP_ROWWISE)
        return kf_msg_set(b->err, KF_ERR_UNSUPPORTED,
                          "group %u (%s): logsumexp over an axis that is not the last has no "
                          "GPU-checked CUDA kernel yet (the column kernel has not run it); "
                          "take it over the last axis (permute first), or compile this graph "
                          "for the CPU target (kf_options.target = KF_TARGET_CPU)",
                          b->gi, grp->name);
    switch (grp->kind) {
    case KF_GROUP_VIEW:
        snprintf(v->label, sizeof v->label, "view");
        kf_rb_how(b, 0, "no kernel: a view of %%%u's buffer", grp->view_base);
        return KF_OK;
    case KF_GROUP_ELEMENTWISE:
    case KF_GROUP_ROWWISE:
    case KF_GROUP_COLREDUCE:
    case KF_GROUP_LAYOUT: {
        char name[KF_CUDA_NAME_MAX] = "";
        kf_cuda_template tmpl = KF_CUDA_TEMPLATE_COUNT;
        kf_status st = kf_rb_add_kernel(b, b->plan, KF_CUDA_ROLE_GROUP, name, sizeof name, &tmpl);
        if (st == KF_ERR_NOT_FOUND)
            return kf_msg_set(b->err, KF_ERR_INTERNAL, "group %u (%s): the codegen made no kernel",
                              b->gi, grp->name);
        if (st == KF_OK)
            kf_rb_how(b, 0, "kernel %s (%s %s template)", name, b->target->arch,
                      kf_cuda_template_name(tmpl));
        return st;
    }
    case KF_GROUP_GEMM:
        /* a GEMM sibling set's later member that its first member's recipe runs */
        if (kf_group_in_gemm_sib_set(grp) && grp->gemm.sib_index > 0 && b->all &&
            b->all[grp->gemm.sib_first].n_members > grp->gemm.sib_index) {
            rc->n_members = 0;
            snprintf(v->label, sizeof v->label, "sibling");
            kf_rb_how(b, 0, "no step of its own: group %u's recipe runs this GEMM (GEMM siblings)",
                      grp->gemm.sib_first);
            return KF_OK;
        }
        return kf_rb_gemm(b);
    case KF_GROUP_ATTENTION:
        return kf_rb_attention(b);
    default:
        return kf_msg_set(b->err, KF_ERR_INTERNAL, "group %u has kind %d", b->gi, (int)grp->kind);
    }
}

kf_status kf_cuda_recipes_create(const kf_plan *plan, const kf_cuda_target *target,
                                 const kf_mem *mem, kf_cuda_recipes **out, char *err) {
    if (out)
        *out = NULL;
    if (!plan || !target || !mem || !out)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_recipes_create: NULL argument");
    if (target->sm_count < 1 || target->sm_count > 65536)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "kf_cuda_recipes_create: SM count %d (expected 1..65536)",
                          target->sm_count);
    kf_cuda_recipes *r = kf_mem_calloc(mem, 1, sizeof *r);
    if (!r)
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory for the recipes");
    r->mem = *mem;
    r->plan = plan;
    r->target = *target;
    r->recipes = kf_mem_calloc(mem, plan->n_groups + 1, sizeof *r->recipes);
    if (!r->recipes) {
        kf_cuda_recipes_destroy(r);
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory for the recipes");
    }
    r->n = plan->n_groups;
    kf_status st = KF_OK;
    for (uint32_t gi = 0; gi < plan->n_groups && st == KF_OK; gi++) {
        rb b;
        memset(&b, 0, sizeof b);
        b.plan = plan;
        b.target = &r->target;
        b.mem = &r->mem;
        b.rc = &r->recipes[gi];
        b.all = r->recipes;
        b.gi = gi;
        b.err = err;
        st = build_group(&b);
    }
    if (st != KF_OK) {
        kf_cuda_recipes_destroy(r);
        return st;
    }
    *out = r;
    return KF_OK;
}

void kf_cuda_recipes_destroy(kf_cuda_recipes *r) {
    if (!r)
        return;
    for (uint32_t i = 0; r->recipes && i < r->n; i++) {
        kf_cuda_recipe *rc = &r->recipes[i];
        for (uint32_t s = 0; s < rc->n_steps; s++) {
            if (rc->steps[s].kernel) {
                kf_cuda_kernel_release(&r->mem, &rc->steps[s].kernel->kernel);
                kf_mem_free(&r->mem, rc->steps[s].kernel, sizeof *rc->steps[s].kernel);
            }
        }
        kf_mem_free(&r->mem, rc->steps, rc->cap_steps * sizeof *rc->steps);
    }
    kf_mem m = r->mem;
    if (r->recipes)
        kf_mem_free(&m, r->recipes, (r->n + 1) * sizeof *r->recipes);
    kf_mem_free(&m, r, sizeof *r);
}

uint32_t kf_cuda_recipes_kernel_count(const kf_cuda_recipes *r) {
    uint32_t n = 0;
    for (uint32_t i = 0; r && i < r->n; i++)
        for (uint32_t s = 0; s < r->recipes[i].n_steps; s++)
            n += r->recipes[i].steps[s].kind == KF_CUDA_STEP_KERNEL;
    return n;
}
