/*
 * cuda_kernel.c -- compile options, cache key and cached compile of a
 * generated kernel (runtime/cuda_kernel.h). The key is built from exactly the
 * inputs kf_nvrtc_compile sees, so a hit is the binary a compile would give.
 */
#include "runtime/cuda_kernel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
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
    size_t body = k->body < k->source_len ? k->body : 0; /* the header comment is not keyed */
    kf_cache_key_parts parts = {
        .source = k->source + body,
        .source_len = k->source_len - body,
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
    uint32_t *leader; /* per job: the first job with its cache key (itself if none); NULL:
                         every job on its own */
    uint32_t *order;  /* the jobs that run, longest source first; NULL: 0..n-1 */
    uint32_t n_run;   /* how many of them */
    atomic_uint next; /* the next entry of order nobody has taken */
    const atomic_bool *cancel; /* set: take no further job (NULL: never) */
} batch;

typedef struct keyed_job {
    kf_cache_key key;
    uint32_t index;
} keyed_job;

static int keyed_job_cmp(const void *a, const void *b) {
    const keyed_job *x = a, *y = b;
    int c = memcmp(x->key.bytes, y->key.bytes, sizeof x->key.bytes);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* b->leader: jobs whose kernels have one cache key (two groups that generate
 * the same code) compile once; the others copy or re-read the result. Left
 * NULL when the keys cannot be made (each job then reports its own error). */
static void find_leaders(batch *b) {
    if (b->n < 2)
        return;
    char comp[64], err[KF_MSG_MAX];
    if (kf_nvrtc_compiler_id(comp, sizeof comp) != KF_OK)
        return;
    keyed_job *kj = kf_mem_alloc(b->mem, b->n * sizeof *kj);
    uint32_t *leader = kf_mem_alloc(b->mem, b->n * sizeof *leader);
    bool ok = kj && leader;
    for (uint32_t i = 0; ok && i < b->n; i++) {
        kj[i].index = i;
        ok = kf_cuda_kernel_cache_key(b->jobs[i].kernel, comp, &kj[i].key, err) == KF_OK;
    }
    if (ok) {
        qsort(kj, b->n, sizeof *kj, keyed_job_cmp);
        for (uint32_t i = 0; i < b->n; i++) {
            bool same =
                i > 0 && memcmp(kj[i].key.bytes, kj[i - 1].key.bytes, sizeof kj[i].key.bytes) == 0;
            leader[kj[i].index] = same ? leader[kj[i - 1].index] : kj[i].index;
        }
        b->leader = leader;
        leader = NULL;
    }
    if (kj)
        kf_mem_free(b->mem, kj, b->n * sizeof *kj);
    if (leader)
        kf_mem_free(b->mem, leader, b->n * sizeof *leader);
}

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
        j->status =
            kf_cuda_kernel_cubin(b->cache, j->kernel, &j->data, &j->size, &j->hit, &msg, j->err);
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
    for (uint32_t i; (i = atomic_fetch_add(&b->next, 1u)) < b->n_run;) {
        if (b->cancel && atomic_load(b->cancel))
            break;
        uint32_t j = b->order ? b->order[i] : i;
        if (b->order || !b->leader || b->leader[j] == j)
            run_job(b, &b->jobs[j]);
    }
    return NULL;
}

/* The jobs that compile (leaders), the biggest source first: a big template
 * takes seconds where a small kernel takes a tenth, so starting the big ones
 * first keeps the last thread from starting one at the end (an insertion
 * sort: a batch is a program's kernels, tens at most). Without memory for
 * the order, every job in index order. */
static void order_jobs(batch *b) {
    b->n_run = 0;
    b->order = kf_mem_alloc(b->mem, (b->n ? b->n : 1) * sizeof *b->order);
    if (!b->order) {
        b->n_run = b->n; /* the worker skips the followers */
        return;
    }
    for (uint32_t i = 0; i < b->n; i++) {
        if (b->leader && b->leader[i] != i)
            continue;
        size_t len = b->jobs[i].kernel->source_len;
        uint32_t k = b->n_run++;
        while (k > 0 && b->jobs[b->order[k - 1]].kernel->source_len < len) {
            b->order[k] = b->order[k - 1];
            k--;
        }
        b->order[k] = i;
    }
}

/* A job whose kernel has the key of an earlier one, after that one ran:
 * through the cache, the entry it stored (a hit; a failed store: compiled
 * again); without a cache, a copy of its CUBIN. */
static void follow_job(const batch *b, kf_cuda_cubin *j, const kf_cuda_cubin *l) {
    if (b->cache || l->status != KF_OK) {
        if (b->cache && l->status == KF_OK) {
            run_job(b, j);
            return;
        }
        j->status = l->status;
        snprintf(j->err, sizeof j->err, "%s", l->err);
        return;
    }
    j->data = kf_mem_alloc(b->mem, l->size ? l->size : 1);
    if (!j->data) {
        j->status = KF_ERR_OUT_OF_MEMORY;
        snprintf(j->err, sizeof j->err, "kernel '%s': out of memory copying its CUBIN",
                 j->kernel->name);
        return;
    }
    memcpy(j->data, l->data, l->size);
    j->size = l->size;
    j->from_cache = false;
    j->hit = true; /* nothing compiled for it */
    j->store = KF_CACHE_STORE_NONE;
    j->err[0] = j->note[0] = '\0';
    j->status = KF_OK;
}

/* Threads for a batch when the caller names none: one a CPU, as many as
 * the memory holds at 256 MiB each (an NVRTC compile of a big template
 * peaks at about 120 MiB, measured on the GEMM and attention templates),
 * at most 32. Big templates take 1-2 s each, so a LLaMA layer's ten
 * distinct kernels in one round instead of two is most of a cold compile. */
static long compile_threads(void) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    long want = cpus > 0 ? cpus : 1;
    if (pages > 0 && page > 0) {
        long by_mem = (long)((double)pages * (double)page / (256.0 * 1024 * 1024));
        if (want > by_mem)
            want = by_mem > 0 ? by_mem : 1;
    }
    return want > 32 ? 32 : want;
}

kf_status kf_cuda_kernels_cubins(kf_cache *cache, const kf_mem *mem, kf_cuda_cubin *jobs,
                                 uint32_t n, int threads, char *err) {
    return kf_cuda_kernels_cubins_cancel(cache, mem, jobs, n, threads, NULL, err);
}

kf_status kf_cuda_kernels_cubins_cancel(kf_cache *cache, const kf_mem *mem, kf_cuda_cubin *jobs,
                                        uint32_t n, int threads, const atomic_bool *cancel,
                                        char *err) {
    batch b = {.cache = cache, .mem = mem, .jobs = jobs, .n = n, .cancel = cancel};
    atomic_init(&b.next, 0u);
    for (uint32_t i = 0; i < n; i++) {
        jobs[i].data = NULL;
        jobs[i].size = 0;
        jobs[i].status = cancel ? KF_ERR_BUSY : KF_ERR_INTERNAL;
        snprintf(jobs[i].err, sizeof jobs[i].err, "kernel %u of the batch never ran%s", i,
                 cancel ? " (the batch was cancelled)" : "");
    }
    find_leaders(&b);
    order_jobs(&b);
    long want = threads > 0 ? threads : compile_threads();
    if (want > (long)b.n_run)
        want = (long)b.n_run;
    pthread_t th[64];
    int started = 0;
    for (long t = 1; t < want && started < 64; t++)
        if (pthread_create(&th[started], NULL, worker, &b) == 0)
            started++;
    worker(&b);
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    for (uint32_t i = 0; b.leader && i < n; i++)
        if (b.leader[i] != i && !(cancel && atomic_load(cancel)))
            follow_job(&b, &jobs[i], &jobs[b.leader[i]]);
    if (b.leader)
        kf_mem_free(mem, b.leader, n * sizeof *b.leader);
    if (b.order)
        kf_mem_free(mem, b.order, (n ? n : 1) * sizeof *b.order);
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

kf_status kf_cuda_cubins_dump(const char *dir, const kf_cuda_cubin *jobs, uint32_t n, char *err) {
    kf_status st = KF_OK;
    for (uint32_t i = 0; i < n && dir && st == KF_OK; i++) {
        const kf_cuda_kernel *k = jobs[i].kernel;
        st = kf_nvrtc_dump_source(dir, k->name, k->arch, k->source, k->source_len, err);
    }
    return st;
}
