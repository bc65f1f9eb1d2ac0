/*
 * kf_gen.h -- a generator of random, valid kfuse graphs for the tests.
 *
 * kf_gen_graph() builds one graph from a 64-bit seed through the public
 * builder API only (so it exercises exactly what a framework can send), and
 * verifies it before it returns. The same seed always gives the same graph,
 * so a failing seed printed by a test reproduces the failure.
 *
 * A graph is a few "motifs" strung together through a pool of live values,
 * so later motifs read the results and intermediates of earlier ones (that
 * gives values several consumers) and some intermediates become graph
 * outputs in the middle of chains (so the planner's negative paths run):
 *
 *   chain      elementwise unary/binary ops, broadcasts of row [N], column
 *              [.., 1], scalar and size-1 operands, casts among f32/f16/bf16,
 *              where(compare(..)), occasionally an operand that broadcasts the
 *              chain up to a larger shape
 *   gemm       [batched] matmul with random transposes, then an epilogue of
 *              bias, activation, residual, scale and cast steps, sometimes a
 *              layer/rms norm after it; sometimes a norm before it (prologue),
 *              sometimes SwiGLU (silu(x.Wg) * (x.Wu))
 *   rowwise    softmax, layer_norm, rms_norm, reduce_sum/max/mean, logsumexp over the
 *              last or a non-last axis, with elementwise prologue and epilogue
 *              (including x - reduce(x, keepdim) style broadcasts back)
 *   attention  q.k^T, scale, softcap c*tanh(s/c), ALiBi slope[h]*(kv - q),
 *              causal and sliding-window masks from iota + compare + where,
 *              softmax, .v, then sometimes permute + reshape to [B, S, H*D]
 *   layout     permute and reshape (merge, split, flatten) inside chains
 *
 * Dims are small (1..max_dim, rarely up to 40) so thousands of graphs run per
 * second under ASan with the reference evaluator.
 */
#ifndef KF_GEN_H
#define KF_GEN_H

#include <stdint.h>

#include "kfuse.h"

typedef struct kf_gen_options {
    int max_dim;     /* ordinary dims are drawn from 1..max_dim (default 12) */
    int big_dim_pct; /* percent of dims drawn from 17..40 instead (default 2) */
    int max_motifs;  /* each graph has 1..max_motifs motifs (default 4) */
    /* Also make sources (an iota, a one-element constant, an input) graph
     * outputs now and then (default on). */
    int source_outputs;
} kf_gen_options;

/* Fills *o with the defaults above. */
void kf_gen_options_init(kf_gen_options *o);

/* Builds a random valid graph from `seed` in `ctx` (options may be NULL for
 * the defaults). On KF_OK, *out holds a graph that kf_graph_verify() accepts
 * and that has at least one output; the caller destroys it. Any other status
 * is a generator bug (or out of memory): *out then still holds the graph, so
 * kf_graph_error() can say what went wrong; destroy it either way. */
kf_status kf_gen_graph(kf_ctx *ctx, uint64_t seed, const kf_gen_options *o, kf_graph **out);

/* The generator's PRNG (splitmix64), exported so tests derive sub-seeds the
 * same way everywhere. */
uint64_t kf_gen_next(uint64_t *state);

#endif /* KF_GEN_H */
