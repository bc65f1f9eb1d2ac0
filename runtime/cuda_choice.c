/*
 * cuda_choice.c -- measured choices in the disk cache (runtime/cuda_choice.h).
 * The key is kf_cache_key_build over a text that lists every step of every
 * variant, so two recipes that differ in anything a timing could see get
 * different keys; the entry is a fixed little record checked field by field.
 */
#include "runtime/cuda_choice.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "runtime/cuda_kernel.h"

#define CHOICE_TAG "kfchoic1"

/* What one entry holds (native byte order: an entry never leaves the machine
 * whose device it timed, and the key names that device). */
typedef struct choice_rec {
    char tag[8];
    uint32_t n_variants, chosen;
    float ms[KF_CUDA_MAX_VARIANTS];
} choice_rec;

/* One line of the key text per step (at most STEP_LINE bytes). */
#define STEP_LINE 400

static int step_line(const kf_cuda_step *s, char *out, size_t cap, char *err, kf_status *st) {
    *st = KF_OK;
    if (s->kind == KF_CUDA_STEP_KERNEL) {
        const kf_cuda_kstep *ks = s->kernel;
        kf_cache_key k;
        *st = kf_cuda_kernel_cache_key(&ks->kernel, NULL, &k, err);
        if (*st != KF_OK)
            return 0;
        char hex[KF_CACHE_KEY_HEX];
        return snprintf(out, cap,
                        "kernel %s grid %u %u %u block %u %u %u cluster %u %u %u smem %u\n",
                        kf_cache_key_hex(&k, hex), ks->grid[0], ks->grid[1], ks->grid[2],
                        ks->block[0], ks->block[1], ks->block[2], ks->cluster[0], ks->cluster[1],
                        ks->cluster[2], ks->shared_bytes);
    }
    const kf_cuda_gstep *g = &s->gemm;
    return snprintf(out, cap,
                    "gemm %d m %" PRId64 " n %" PRId64 " k %" PRId64 " batch %" PRId64 " a %" PRId64
                    " %" PRId64 " %" PRId64 " b %" PRId64 " %" PRId64 " %" PRId64 " c %d %" PRId64
                    " %" PRId64 " %" PRId64 " d %" PRId64 " %" PRId64 " %" PRId64
                    " beta %g epi %d\n",
                    (int)g->dtype, g->m, g->n, g->k, g->batch, g->a.row_stride, g->a.col_stride,
                    g->a.batch_stride, g->b.row_stride, g->b.col_stride, g->b.batch_stride,
                    (int)g->c.buf.kind, g->c.row_stride, g->c.col_stride, g->c.batch_stride,
                    g->d.row_stride, g->d.col_stride, g->d.batch_stride, g->beta, (int)g->epilogue);
}

kf_status kf_cuda_choice_key(const kf_mem *mem, const kf_cuda_recipe *rc, const kf_cuda_device *dev,
                             const char *arch, const char *blt_lib, bool replayed,
                             kf_cache_key *key, char *err) {
    size_t cap = 64 + (size_t)rc->n_steps * STEP_LINE + rc->n_variants * 64u;
    char *text = kf_mem_alloc(mem, cap);
    if (!text) {
        snprintf(err, KF_MSG_MAX, "out of memory for a measured choice's key");
        return KF_ERR_OUT_OF_MEMORY;
    }
    /* The method's words only for graph replay, so a choice timed by direct
     * launches keeps the key it had before replays existed. */
    size_t len = (size_t)snprintf(text, cap, "measured choice of %u variants%s\n", rc->n_variants,
                                  replayed ? ", timed by graph replay" : "");
    kf_status st = KF_OK;
    for (uint32_t v = 0; v < rc->n_variants && st == KF_OK; v++) {
        const kf_cuda_variant *va = &rc->variants[v];
        len += (size_t)snprintf(text + len, cap - len, "variant %u %.31s %u steps\n", v, va->label,
                                va->n_steps);
        for (uint32_t s = 0; s < va->n_steps && st == KF_OK && va->first_step + s < rc->n_steps;
             s++) {
            int n = step_line(&rc->steps[va->first_step + s], text + len, cap - len, err, &st);
            if (n > 0)
                len += (size_t)n < cap - len ? (size_t)n : cap - len - 1;
        }
    }
    if (st == KF_OK) {
        char device[256], compiler[160];
        snprintf(device, sizeof device, "%s cc %d.%d sms %d", dev->name, dev->cc_major,
                 dev->cc_minor, dev->sm_count);
        snprintf(compiler, sizeof compiler, "driver %d cublaslt %s",
                 dev->drv ? dev->drv->driver_version : 0, blt_lib ? blt_lib : "(default)");
        kf_cache_key_parts parts = {
            .source = text,
            .source_len = len,
            .options = device,
            .arch = arch,
            .compiler = compiler,
            .codegen_version = KF_CUDA_CODEGEN_VERSION,
        };
        kf_cache_key_build(&parts, key);
    }
    kf_mem_free(mem, text, cap);
    return st;
}

bool kf_cuda_choice_load(kf_cache *cache, const kf_cache_key *key, uint32_t n_variants,
                         uint32_t *chosen, float *ms) {
    if (!cache || n_variants < 2 || n_variants > KF_CUDA_MAX_VARIANTS)
        return false;
    void *data = NULL;
    size_t len = 0;
    kf_cache_msg msg;
    memset(&msg, 0, sizeof msg);
    if (kf_cache_get(cache, key, &data, &len, &msg) != KF_OK)
        return false;
    choice_rec r;
    bool ok = len == sizeof r;
    if (ok) {
        memcpy(&r, data, sizeof r);
        ok = memcmp(r.tag, CHOICE_TAG, sizeof r.tag) == 0 && r.n_variants == n_variants &&
             r.chosen < n_variants;
        for (uint32_t v = 0; ok && v < n_variants; v++)
            ok = r.ms[v] >= 0.0f && r.ms[v] < 1e9f; /* NaN fails both */
    }
    kf_cache_blob_free(cache, data, len);
    if (!ok)
        return false;
    *chosen = r.chosen;
    for (uint32_t v = 0; v < n_variants; v++)
        ms[v] = r.ms[v];
    return true;
}

kf_cache_store kf_cuda_choice_store(kf_cache *cache, const kf_cache_key *key, uint32_t n_variants,
                                    uint32_t chosen, const float *ms) {
    if (!cache || n_variants > KF_CUDA_MAX_VARIANTS || chosen >= n_variants)
        return KF_CACHE_STORE_NONE;
    choice_rec r;
    memset(&r, 0, sizeof r);
    memcpy(r.tag, CHOICE_TAG, sizeof r.tag);
    r.n_variants = n_variants;
    r.chosen = chosen;
    for (uint32_t v = 0; v < n_variants; v++)
        r.ms[v] = ms[v];
    kf_cache_msg msg;
    memset(&msg, 0, sizeof msg);
    (void)kf_cache_put(cache, key, &r, sizeof r, &msg);
    return msg.store;
}

bool kf_cuda_variant_calls_lib(const kf_cuda_recipe *rc, uint32_t v) {
    const kf_cuda_variant *va = &rc->variants[v];
    for (uint32_t s = 0; s < va->n_steps && va->first_step + s < rc->n_steps; s++)
        if (rc->steps[va->first_step + s].kind == KF_CUDA_STEP_GEMM)
            return true;
    return false;
}

uint32_t kf_cuda_choice_pick(uint32_t n, const float *ms, const bool *calls_lib, double margin,
                             double load_bias, bool *by_margin) {
    uint32_t best = 0, gen = UINT32_MAX, fastest = 0;
    if (by_margin)
        *by_margin = false;
    if (n == 0)
        return 0;
    /* the counted times: a library-free variant's (1 + load_bias) times its
     * measured one (exactly the measured one at 0) */
    double t[KF_CUDA_MAX_VARIANTS];
    n = n < KF_CUDA_MAX_VARIANTS ? n : KF_CUDA_MAX_VARIANTS;
    for (uint32_t v = 0; v < n; v++)
        t[v] = calls_lib[v] ? (double)ms[v] : (double)ms[v] * (1.0 + load_bias);
    for (uint32_t v = 0; v < n; v++) {
        if (t[v] < t[best])
            best = v;
        if (ms[v] < ms[fastest])
            fastest = v;
        if (!calls_lib[v] && (gen == UINT32_MAX || t[v] < t[gen]))
            gen = v;
    }
    uint32_t pick = best;
    if (calls_lib[best] && gen != UINT32_MAX && !(t[best] < (1.0 - margin) * t[gen]))
        pick = gen;
    if (by_margin) /* (an exact tie is no margin's doing) */
        *by_margin = ms[pick] > ms[fastest];
    return pick;
}

uint32_t kf_cuda_choice_pick_recipe(const kf_cuda_recipe *rc, const float *ms, double margin,
                                    double load_bias, bool *by_margin) {
    bool lib[KF_CUDA_MAX_VARIANTS];
    uint32_t n = rc->n_variants < KF_CUDA_MAX_VARIANTS ? rc->n_variants : KF_CUDA_MAX_VARIANTS;
    for (uint32_t v = 0; v < n; v++)
        lib[v] = kf_cuda_variant_calls_lib(rc, v);
    return kf_cuda_choice_pick(n, ms, lib, margin, load_bias, by_margin);
}
