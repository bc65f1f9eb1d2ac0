/*
 * cg_gemm_set.c -- the parts of a GEMM sibling set's ONE kernel that do not
 * depend on the arch (cg_gemm_set.h): the members' generators side by side
 * (each group's params go to the set's one kernel, keyed by tensor, so the
 * norm's statistics scratch is one param), each member's fold and epilogue
 * emitted into the set's text in its own namespace kf_s<j> under its own
 * KF_N, the members' column tiles as one N range (kf_sib_split), and the
 * dispatch (KF_SIB_AL, KF_SIB_DO). cg_gemm_sm90_set.c and
 * cg_gemm_sm80_set.c put their templates' parts around these.
 */
#include "codegen/cuda/cg_gemm_set.h"

#include "codegen/cuda/cg.h"

/* Emits through member m's generator into the set's text `text` (member
 * 0's own). */
#define WITH_SET_TEXT(m, text, stmt)                                                               \
    do {                                                                                           \
        if (&(m)->c.s == (text)) {                                                                 \
            stmt;                                                                                  \
            break;                                                                                 \
        }                                                                                          \
        sbuf save_ = (m)->c.s;                                                                     \
        (m)->c.s = *(text);                                                                        \
        stmt;                                                                                      \
        *(text) = (m)->c.s;                                                                        \
        (m)->c.s = save_;                                                                          \
    } while (0)

bool cg_set_split_template(const char *t, uint32_t n_marks, const char *const *marks,
                           const char **part, size_t *len) {
    const char *from = t;
    part[0] = t;
    for (uint32_t i = 0; i < n_marks; i++) {
        const char *at = strstr(from, marks[i]);
        if (!at)
            return false;
        part[i + 1] = at;
        len[i] = (size_t)(at - part[i]);
        from = at;
    }
    len[n_marks] = strlen(part[n_marks]);
    return true;
}

void cg_set_put(sbuf *s, const char *p, size_t n) {
    char buf[4096];
    while (n > 0) {
        size_t k = n < sizeof buf - 1 ? n : sizeof buf - 1;
        memcpy(buf, p, k);
        buf[k] = 0;
        cg_puts(s, buf);
        p += k;
        n -= k;
    }
}

kf_status cg_set_end(cg_set *s, kf_status st) {
    cg_set_member *mb = s->mb;
    if (!mb)
        return st;
    const kf_mem *mem = s->mem;
    for (uint32_t j = s->n; j-- > 1;) {
        if (!mb[j].begun)
            continue;
        if (mb[j].epi_ready)
            kf_mem_free(mem, mb[j].epi.vl.p, mb[j].epi.vl.cap);
        /* its text went into the set's; its own kernel holds nothing */
        mb[j].c.k = &mb[j].tmp;
        kf_status sj = cg_end(&mb[j].c, KF_OK);
        kf_cuda_kernel_release(mem, &mb[j].tmp);
        if (st == KF_OK && sj != KF_OK)
            st = sj;
    }
    if (mb[0].epi_ready)
        kf_mem_free(mem, mb[0].epi.vl.p, mb[0].epi.vl.cap);
    st = cg_end(&mb[0].c, st);
    kf_mem_free(mem, mb, KF_CUDA_SIB_MAX * sizeof *mb);
    s->mb = NULL;
    return st;
}

kf_status cg_set_begin(cg_set *s, const kf_plan *plan, const uint32_t *groups, uint32_t n,
                       const char *arch, const kf_mem *mem, kf_cuda_kernel *out, const char *fn) {
    memset(s, 0, sizeof *s);
    s->tab = -1;
    if (!out)
        return KF_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    if (!plan || !groups || !mem || !arch || n < 2 || n > KF_CUDA_SIB_MAX) {
        snprintf(out->error, sizeof out->error, "%s: NULL argument or %u members (2 to %d)", fn, n,
                 KF_CUDA_SIB_MAX);
        return KF_ERR_INVALID_ARGUMENT;
    }
    s->mb = kf_mem_calloc(mem, KF_CUDA_SIB_MAX, sizeof *s->mb);
    if (!s->mb) {
        snprintf(out->error, sizeof out->error, "kf_cuda_codegen: out of memory");
        return KF_ERR_OUT_OF_MEMORY;
    }
    s->n = n;
    s->mem = mem;
    cg_set_member *mb = s->mb;
    kf_status st = cg_begin(&mb[0].c, plan, groups[0], arch, mem, out);
    mb[0].begun = true;
    for (uint32_t j = 1; j < n && st == KF_OK; j++) {
        st = cg_begin(&mb[j].c, plan, groups[j], arch, mem, &mb[j].tmp);
        mb[j].begun = true;
        if (st != KF_OK)
            snprintf(out->error, sizeof out->error, "%s", mb[j].tmp.error);
        mb[j].c.k = out; /* one kernel: its params and its first error */
    }
    if (st != KF_OK)
        return cg_set_end(s, st);
    return KF_OK;
}

const char *cg_set_member_why(cg_set *s, uint32_t j, const kf_cuda_gemm_shape *sj) {
    cg *c0 = &s->mb[0].c, *c = &s->mb[j].c;
    const kf_gemm_info *gj = &c->g->gemm, *g0 = &c0->g->gemm;
    if (gj->head_dim != g0->head_dim || gj->heads_first != g0->heads_first ||
        (gj->head_dim && gj->m != g0->m))
        return "the members' head views differ";
    if (cg_tensor(c, gj->anchor[0])->dtype != cg_tensor(c0, g0->anchor[0])->dtype)
        return "the members' dtypes differ";
    if (cg_has_gelu_table(c)) {
        if (s->tab >= 0)
            return "a second member with a gelu table (the kernel holds one)";
        s->tab = (int)j;
    }
    if (sj->n < 1 || sj->n > INT32_MAX)
        return "a member's N out of range";
    return NULL;
}

kf_status cg_set_members_check(cg_set *s, const kf_cuda_gemm_shape *shapes, cg_set_why_fn why) {
    cg *c0 = &s->mb[0].c;
    for (uint32_t j = 0; j < s->n; j++) {
        cg *c = &s->mb[j].c;
        const kf_group *g = c->g;
        if (g->kind != KF_GROUP_GEMM)
            return cg_fail(c0, KF_ERR_UNSUPPORTED,
                           "GEMM sibling set: member %u (group %u) is not a GEMM group", j + 1,
                           g->id);
        const char *w = why(c, &shapes[0], &shapes[j]);
        if (!w)
            w = cg_set_member_why(s, j, &shapes[j]);
        if (w)
            return cg_fail(c0, KF_ERR_UNSUPPORTED, "member %u (group %u): %s", j + 1, g->id, w);
        kf_status st = cg_set_member_prepare(s, j, &shapes[j], shapes[0].bn);
        if (st != KF_OK)
            return st;
    }
    return KF_OK;
}

kf_status cg_gemm_epi_alloc(cg *c, const kf_cuda_gemm_shape *sh, cg_gemm_fold *fold, chunk_ctx **x,
                            cg_gemm_epi *epi) {
    *x = kf_mem_calloc(c->mem, 1, sizeof **x);
    if (!*x)
        return cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    kf_status st = KF_OK;
    if (fold && sh->a_fold)
        st = cg_gemm_fold_prepare(c, sh, fold);
    if (st == KF_OK)
        st = cg_gemm_epi_prepare(c, sh, *x, epi);
    if (st != KF_OK) {
        kf_mem_free(c->mem, *x, sizeof **x);
        *x = NULL;
    }
    return st;
}

kf_status cg_set_member_prepare(cg_set *s, uint32_t j, const kf_cuda_gemm_shape *sj, uint32_t tw) {
    cg_set_member *m = &s->mb[j];
    s->t0[j] = s->tiles_n;
    s->tiles_n += (sj->n + tw - 1) / tw;
    s->n_all += sj->n;
    kf_status st;
    if (sj->a_fold && (st = cg_gemm_fold_prepare(&m->c, sj, &m->fold)) != KF_OK)
        return st;
    if ((st = cg_gemm_epi_prepare(&m->c, sj, &m->x, &m->epi)) != KF_OK)
        return st;
    m->epi_ready = true;
    return KF_OK;
}

void cg_set_emit_head(cg_set *s, const char *what) {
    cg *c0 = &s->mb[0].c;
    cg_emit_head(c0, what);
    if (s->tab > 0) { /* the table of a later member's gelu, in place of member 0's none */
        cg_puts(&c0->s, "#undef KF_SETUP\n");
        WITH_SET_TEXT(&s->mb[s->tab], &c0->s, cg_emit_gelu_table(&s->mb[s->tab].c));
    }
}

void cg_set_emit_members(cg_set *s, const kf_cuda_gemm_shape *shapes, const char *part,
                         size_t len) {
    cg *c0 = &s->mb[0].c;
    for (uint32_t j = 0; j < s->n; j++) {
        cg_set_member *m = &s->mb[j];
        cg_printf(&c0->s,
                  "\n/* ---- member %u: group %u (%s), N %" PRId64 ", set tile columns %" PRId64
                  ".. ---- */\n#undef KF_N\n#define KF_N %" PRId64 "LL\n#undef KF_FOLD_CD\n"
                  "namespace kf_s%u {\n",
                  j, m->c.g->id, m->c.g->name, shapes[j].n, s->t0[j], shapes[j].n, j);
        if (shapes[j].a_fold)
            WITH_SET_TEXT(m, &c0->s, cg_gemm_fold_emit(&m->c, &m->fold));
        WITH_SET_TEXT(m, &c0->s, cg_gemm_epi_emit(&m->c, &shapes[j], &m->x, &m->epi));
        m->epi_ready = false; /* cg_gemm_epi_emit freed its buffer */
        cg_set_put(&c0->s, part, len);
        cg_printf(&c0->s, "} /* namespace kf_s%u */\n", j);
    }
}

void cg_set_emit_split(cg_set *s) {
    cg *c0 = &s->mb[0].c;
    cg_printf(&c0->s, "#undef KF_N\n#define KF_N %" PRId64 "LL /* the members' columns */\n\n",
              s->n_all);
    cg_puts(&c0->s, "/* Tile column nb of the set: its member, nb then the member's own. */\n"
                    "__device__ __forceinline__ int kf_sib_split(int &nb) {\n");
    for (uint32_t j = s->n; j-- > 1;)
        cg_printf(&c0->s,
                  "    if (nb >= %" PRId64 ") {\n        nb -= %" PRId64
                  ";\n        return %u;\n    }\n",
                  s->t0[j], s->t0[j], j);
    cg_puts(&c0->s, "    return 0;\n}\n");
}

void cg_set_emit_dispatch(cg_set *s) {
    cg *c0 = &s->mb[0].c;
    cg_puts(&c0->s, "#define KF_SIB_AL (true");
    for (uint32_t j = 0; j < s->n; j++)
        cg_printf(&c0->s, " && kf_s%u::kf_epi_al(KF_ARGS)", j);
    cg_puts(&c0->s, ")\n#define KF_SIB_DO(j, call) do { switch (j) {");
    for (uint32_t j = 1; j < s->n; j++)
        cg_printf(&c0->s, " case %u: kf_s%u::call; break;", j, j);
    cg_puts(&c0->s, " default: kf_s0::call; break; } } while (0)\n\n");
}
