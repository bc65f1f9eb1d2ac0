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
#include <stdlib.h>
#include <unistd.h>

struct kf_pool {
    int n; /* threads including the caller */
    pthread_t *th;
    void **scratch; /* n entries; [n-1] is the caller's */
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
    free(arg);
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

int kf_pool_default_threads(void) {
    const char *e = getenv("KF_NUM_THREADS");
    long n = e ? strtol(e, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > 64)
        n = 64;
    return (int)n;
}

kf_pool *kf_pool_create(int n_threads, size_t scratch) {
    kf_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = n_threads < 1 ? 1 : n_threads;
    p->th = calloc((size_t)p->n, sizeof *p->th);
    p->scratch = calloc((size_t)p->n, sizeof *p->scratch);
    if (!p->th || !p->scratch)
        goto fail;
    for (int i = 0; i < p->n; i++) {
        if (scratch && posix_memalign(&p->scratch[i], 64, scratch) != 0) {
            p->scratch[i] = NULL;
            goto fail;
        }
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int i = 0; i < p->n - 1; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (a) {
            a->p = p;
            a->i = i;
        }
        if (!a || pthread_create(&p->th[i], NULL, worker, a) != 0) {
            free(a);
            p->n = i + 1; /* the workers started so far, plus the caller */
            kf_pool_destroy(p);
            return NULL;
        }
    }
    return p;
fail:
    if (p->scratch)
        for (int i = 0; i < p->n; i++)
            free(p->scratch[i]);
    free(p->scratch);
    free(p->th);
    free(p);
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

void kf_pool_destroy(kf_pool *p) {
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n - 1; i++)
        pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    for (int i = 0; i < p->n; i++)
        free(p->scratch[i]);
    free(p->scratch);
    free(p->th);
    free(p);
}
