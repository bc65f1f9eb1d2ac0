/*
 * pool.h -- a small pthread pool for the CPU kernels' outer loops.
 *
 * Why not OpenMP: libkfuse is embedded by frameworks that bring their own
 * OpenMP runtime (libgomp and libomp in one process fight over threads), the
 * kernels need a private scratch area per thread that lives as long as the
 * pool, and LSan reports libgomp's thread pool at exit. A pool of ~120 lines
 * with dynamic chunking does all the kernels need.
 */
#ifndef KF_RUNTIME_CPU_POOL_H
#define KF_RUNTIME_CPU_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h" /* kf_mem */

typedef void (*kf_pool_fn)(void **bufs, int64_t begin, int64_t end, void *scratch);

typedef struct kf_pool kf_pool;

/* Starts n_threads - 1 workers (the caller is the n-th) with `scratch` bytes
 * of 64-byte-aligned scratch each, all memory from `mem` (the context's
 * allocator hooks). NULL on failure. */
kf_pool *kf_pool_create(const kf_mem *mem, int n_threads, size_t scratch);
int kf_pool_threads(const kf_pool *p);
/* Runs fn over [0, n) in chunks of `grain` iterations on every thread; returns
 * when all are done. */
void kf_pool_run(kf_pool *p, kf_pool_fn fn, void **bufs, int64_t n, int64_t grain);
void kf_pool_destroy(kf_pool *p);
/* The thread count to use: `requested` (kf_options.num_threads) when > 0,
 * else the online CPUs; at most 64. */
int kf_pool_default_threads(int requested);

#endif /* KF_RUNTIME_CPU_POOL_H */
