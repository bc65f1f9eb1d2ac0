/*
 * cuda_kernel.c -- compile options, cache key and cached compile of a
 * generated kernel (runtime/cuda_kernel.h). The key is built from exactly the
 * inputs kf_nvrtc_compile sees, so a hit is the binary a compile would give.
 */
#include "runtime/cuda_kernel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void kf_cuda_kernel_compile_options(const kf_cuda_kernel *k, kf_nvrtc_options *opts) {
    memset(opts, 0, sizeof *opts);
    opts->arch = k->arch;
    opts->kernel_name = k->name;
    opts->fast_math = false;
    opts->line_info = false;
    opts->dump_dir = NULL;
}

kf_status kf_cuda_kernel_cache_key(const kf_cuda_kernel *k, const char *compiler,
                                   kf_cache_key *key, char *err) {
    if (!k || !k->source || !key) {
        snprintf(err, KF_MSG_MAX, "kf_cuda_kernel_cache_key: no kernel source");
        return KF_ERR_INVALID_ARGUMENT;
    }
    char comp[64];
    if (!compiler) {
        kf_status st = kf_nvrtc_compiler_id(comp, sizeof comp);
        if (st != KF_OK) {
            snprintf(err, KF_MSG_MAX, "kf_cuda_kernel_cache_key: kernel '%s': NVRTC unavailable",
                     k->name);
            return st;
        }
        compiler = comp;
    }
    kf_nvrtc_options o;
    kf_cuda_kernel_compile_options(k, &o);
    char opts[KF_MSG_MAX];
    kf_status st = kf_nvrtc_options_string(&o, opts, sizeof opts, err);
    if (st != KF_OK)
        return st;
    kf_cache_key_parts parts = {
        .source = k->source,
        .source_len = k->source_len,
        .options = opts,
        .arch = k->arch,
        .compiler = compiler,
        .codegen_version = KF_CUDA_CODEGEN_VERSION,
    };
    kf_cache_key_build(&parts, key);
    return KF_OK;
}

kf_status kf_cuda_kernel_compile(const kf_mem *mem, const kf_cuda_kernel *k, kf_nvrtc_result *out,
                                 char *err) {
    memset(out, 0, sizeof *out);
    if (!k || !k->source) {
        snprintf(err, KF_MSG_MAX, "kf_cuda_kernel_compile: no kernel source");
        return KF_ERR_INVALID_ARGUMENT;
    }
    kf_nvrtc_options o;
    kf_cuda_kernel_compile_options(k, &o);
    return kf_nvrtc_compile(mem, k->source, k->source_len, &o, out, err);
}

typedef struct compile_job {
    const kf_cuda_kernel *k;
} compile_job;

static kf_status compute_cubin(void *user, const kf_mem *mem, void **data, size_t *len,
                               char *error) {
    compile_job *job = user;
    kf_nvrtc_result res;
    kf_status st = kf_cuda_kernel_compile(mem, job->k, &res, error);
    if (st == KF_OK) {
        *data = res.cubin;
        *len = res.cubin_size;
        res.cubin = NULL; /* handed to the cache */
        res.cubin_size = 0;
    }
    kf_nvrtc_result_release(mem, &res);
    return st;
}

kf_status kf_cuda_kernel_cubin(kf_cache *cache, const kf_cuda_kernel *k, void **cubin,
                               size_t *size, bool *hit, kf_cache_msg *msg, char *err) {
    *cubin = NULL;
    *size = 0;
    *hit = false;
    kf_cache_key key;
    kf_status st = kf_cuda_kernel_cache_key(k, NULL, &key, err);
    if (st != KF_OK)
        return st;
    compile_job job = {k};
    bool computed = false;
    st = kf_cache_get_or_compute(cache, &key, compute_cubin, &job, cubin, size, &computed, msg);
    if (st != KF_OK) {
        snprintf(err, KF_MSG_MAX, "kernel '%s' (%s): %.300s", k->name, k->arch, msg->error);
        return st;
    }
    *hit = !computed;
    return KF_OK;
}

typedef struct batch {
    kf_cache *cache;
    const kf_mem *mem;
    kf_cuda_cubin *jobs;
    uint32_t n;
    atomic_uint next; /* the next job nobody has taken */
} batch;

static void run_job(const batch *b, kf_cuda_cubin *j) {
    j->data = NULL;
    j->size = 0;
    j->hit = false;
    j->store = KF_CACHE_STORE_NONE;
    j->err[0] = '\0';
    j->note[0] = '\0';
    j->from_cache = b->cache != NULL;
    if (b->cache) {
        kf_cache_msg msg;
        memset(&msg, 0, sizeof msg);
        j->status = kf_cuda_kernel_cubin(b->cache, j->kernel, &j->data, &j->size, &j->hit, &msg,
                                         j->err);
        j->store = msg.store;
        snprintf(j->note, sizeof j->note, "%s", msg.note);
        if (j->status == KF_OK && msg.store == KF_CACHE_STORE_FAILED)
            snprintf(j->err, sizeof j->err, "%s", msg.store_error);
        return;
    }
    kf_nvrtc_result r;
    j->status = kf_cuda_kernel_compile(b->mem, j->kernel, &r, j->err);
    if (j->status == KF_OK) {
        j->data = r.cubin;
        j->size = r.cubin_size;
        r.cubin = NULL;
    }
    kf_nvrtc_result_release(b->mem, &r);
}

static void *worker(void *arg) {
    batch *b = arg;
    for (uint32_t i; (i = atomic_fetch_add(&b->next, 1u)) < b->n;)
        run_job(b, &b->jobs[i]);
    return NULL;
}

kf_status kf_cuda_kernels_cubins(kf_cache *cache, const kf_mem *mem, kf_cuda_cubin *jobs,
                                 uint32_t n, int threads, char *err) {
    batch b = {.cache = cache, .mem = mem, .jobs = jobs, .n = n};
    atomic_init(&b.next, 0u);
    for (uint32_t i = 0; i < n; i++) {
        jobs[i].data = NULL;
        jobs[i].status = KF_ERR_INTERNAL;
        snprintf(jobs[i].err, sizeof jobs[i].err, "kernel %u of the batch never ran", i);
    }
    long want = threads > 0 ? threads : sysconf(_SC_NPROCESSORS_ONLN);
    if (want > 8 && threads <= 0)
        want = 8; /* an NVRTC compile of a big template holds hundreds of MB */
    if (want > (long)n)
        want = (long)n;
    pthread_t th[64];
    int started = 0;
    for (long t = 1; t < want && started < 64; t++)
        if (pthread_create(&th[started], NULL, worker, &b) == 0)
            started++;
    worker(&b);
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    for (uint32_t i = 0; i < n; i++)
        if (jobs[i].status != KF_OK) {
            snprintf(err, KF_MSG_MAX, "%s", jobs[i].err);
            return jobs[i].status;
        }
    return KF_OK;
}

void kf_cuda_cubin_release(kf_cache *cache, const kf_mem *mem, kf_cuda_cubin *job) {
    if (!job->data)
        return;
    if (job->from_cache)
        kf_cache_blob_free(cache, job->data, job->size);
    else
        kf_mem_free(mem, job->data, job->size);
    job->data = NULL;
    job->size = 0;
}
