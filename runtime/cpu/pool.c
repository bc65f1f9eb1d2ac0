/*
 * pool.c -- the CPU kernels' thread pool (see pool.h for why it is not
 * OpenMP). Workers sleep on a condition variable between jobs; a job is one
 * kernel launch, handed out in chunks through an atomic counter, so uneven
 * rows (causal attention) balance themselves.
 */
#include "runtime/cpu/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

struct kf_pool {
    kf_mem mem; /* the context's allocator: everything below comes from it */
    int n;      /* threads including the caller */
    pthread_t *th;
    void **scratch;     /* n entries, 64-byte aligned; [n-1] is the caller's */
    void **scratch_raw; /* what the allocator returned for each */
    size_t scratch_bytes;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    uint64_t gen;
    int pending;
    bool stop;
    /* the job */
    kf_pool_fn fn;
    void **bufs;
    int64_t total, grain;
    atomic_int_fast64_t next;
};

typedef struct worker_arg {
    kf_pool *p;
    int i;
} worker_arg;

static void run_chunks(kf_pool *p, void *scratch) {
    for (;;) {
        int64_t b = atomic_fetch_add(&p->next, p->grain);
        if (b >= p->total)
            return;
        int64_t e = b + p->grain < p->total ? b + p->grain : p->total;
        p->fn(p->bufs, b, e, scratch);
    }
}

static void *worker(void *arg) {
    kf_pool *p = ((worker_arg *)arg)->p;
    int i = ((worker_arg *)arg)->i;
    kf_mem_free(&p->mem, arg, sizeof(worker_arg));
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && p->gen == seen)
            pthread_cond_wait(&p->work, &p->mu);
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        run_chunks(p, p->scratch[i]);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

int kf_pool_default_threads(int requested) {
    long n = requested > 0 ? requested : sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > 64)
        n = 64;
    return (int)n;
}

static void kf_pool_stop(kf_pool *p, int started);

/* Frees the scratch blocks, the tables and the pool (no threads running). */
static void pool_free(kf_pool *p) {
    kf_mem mem = p->mem;
    size_t n = (size_t)p->n;
    for (size_t i = 0; p->scratch_raw && i < n; i++)
        kf_mem_free(&mem, p->scratch_raw[i], p->scratch_bytes);
    kf_mem_free(&mem, p->scratch_raw, n * sizeof *p->scratch_raw);
    kf_mem_free(&mem, p->scratch, n * sizeof *p->scratch);
    kf_mem_free(&mem, p->th, n * sizeof *p->th);
    kf_mem_free(&mem, p, sizeof *p);
}

kf_pool *kf_pool_create(const kf_mem *mem, int n_threads, size_t scratch) {
    kf_pool *p = kf_mem_calloc(mem, 1, sizeof *p);
    if (!p)
        return NULL;
    p->mem = *mem;
    p->n = n_threads < 1 ? 1 : n_threads;
    p->th = kf_mem_calloc(mem, (size_t)p->n, sizeof *p->th);
    p->scratch = kf_mem_calloc(mem, (size_t)p->n, sizeof *p->scratch);
    p->scratch_raw = kf_mem_calloc(mem, (size_t)p->n, sizeof *p->scratch_raw);
    p->scratch_bytes = scratch ? scratch + 64 : 0;
    if (!p->th || !p->scratch || !p->scratch_raw)
        goto fail;
    for (int i = 0; i < p->n && scratch; i++) {
        p->scratch_raw[i] = kf_mem_alloc(mem, p->scratch_bytes);
        if (!p->scratch_raw[i])
            goto fail;
        p->scratch[i] = (void *)(((uintptr_t)p->scratch_raw[i] + 63) & ~(uintptr_t)63);
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int i = 0; i < p->n - 1; i++) {
        worker_arg *a = kf_mem_alloc(mem, sizeof *a);
        if (a) {
            a->p = p;
            a->i = i;
        }
        if (!a || pthread_create(&p->th[i], NULL, worker, a) != 0) {
            kf_mem_free(mem, a, sizeof *a);
            kf_pool_stop(p, i); /* the workers started so far */
            return NULL;
        }
    }
    return p;
fail:
    pool_free(p);
    return NULL;
}

int kf_pool_threads(const kf_pool *p) { return p->n; }

void kf_pool_run(kf_pool *p, kf_pool_fn fn, void **bufs, int64_t n, int64_t grain) {
    if (grain < 1)
        grain = 1;
    if (p->n == 1 || n <= grain) {
        fn(bufs, 0, n, p->scratch[p->n - 1]);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->bufs = bufs;
    p->total = n;
    p->grain = grain;
    atomic_store(&p->next, 0);
    p->pending = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, p->scratch[p->n - 1]);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* Stops and joins the first `started` workers, then frees the pool. */
static void kf_pool_stop(kf_pool *p, int started) {
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < started; i++)
        pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    pool_free(p);
}

void kf_pool_destroy(kf_pool *p) {
    if (p)
        kf_pool_stop(p, p->n - 1);
}
