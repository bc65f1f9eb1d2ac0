/*
 * kf_gen.c -- the random-graph generator (see kf_gen.h for what it builds).
 *
 * Everything goes through the public builder API, and every builder call is
 * made with operands the generator knows are valid, so a graph with a sticky
 * error or one that fails kf_graph_verify() is a generator bug (or a builder
 * bug) and kf_gen_graph() reports it instead of hiding it.
 *
 * Values stay mostly finite: log/sqrt/rsqrt/pow usually see abs(x) + c, and
 * inputs are drawn small by the checker, so a wrong plan shows up as a wrong
 * number rather than as NaN compared with NaN.
 */
#include "kf_gen.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define POOL_MAX 48
#define NUMEL_CAP 4096 /* fresh tensors stay below this many elements */

typedef struct gen {
    kf_graph *g;
    uint64_t s;
    kf_gen_options o;
    kf_tensor *pool[POOL_MAX]; /* float values later motifs may read again */
    int npool;
    int n_in, n_out;
} gen;

uint64_t kf_gen_next(uint64_t *state) {
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

void kf_gen_options_init(kf_gen_options *o) {
    o->max_dim = 12;
    o->big_dim_pct = 2;
    o->max_motifs = 4;
    o->source_outputs = 1;
}

/* ------------------------------------------------------------------------ */
/* Randomness and shapes                                                     */
/* ------------------------------------------------------------------------ */

static int below(gen *G, int n) { return n > 0 ? (int)(kf_gen_next(&G->s) % (uint64_t)n) : 0; }
static bool chance(gen *G, int pct) { return below(G, 100) < pct; }
static double uniform(gen *G, double lo, double hi) {
    return lo + (hi - lo) * (double)(kf_gen_next(&G->s) >> 11) * 0x1.0p-53;
}

static int64_t rdim(gen *G) {
    if (chance(G, G->o.big_dim_pct))
        return 17 + below(G, 24);
    if (chance(G, 12))
        return 1;
    return 1 + below(G, G->o.max_dim);
}

/* Mostly f32; the 16-bit formats often enough that casts and rounding run. */
static kf_dtype fdtype(gen *G) {
    int r = below(G, 20);
    return r < 11 ? KF_DTYPE_F32 : r < 15 ? KF_DTYPE_F16 : r < 19 ? KF_DTYPE_BF16 : KF_DTYPE_F64;
}

static kf_dtype other_fdtype(gen *G, kf_dtype d) {
    static const kf_dtype c[3] = {KF_DTYPE_F32, KF_DTYPE_F16, KF_DTYPE_BF16};
    kf_dtype r = c[below(G, 3)];
    return r == d ? c[(below(G, 2) + 1 + (d == KF_DTYPE_F16) + 2 * (d == KF_DTYPE_BF16)) % 3] : r;
}

typedef struct shape {
    int rank;
    int64_t d[KF_MAX_RANK];
} shape;

static shape shape_of(const kf_tensor *t) {
    shape s = {.rank = kf_tensor_rank(t)};
    for (int i = 0; i < s.rank; i++)
        s.d[i] = kf_tensor_dim(t, i);
    return s;
}

static int64_t shape_numel(const shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->d[i];
    return n;
}

/* A fresh random shape of the given rank, shrunk below NUMEL_CAP. */
static shape rshape(gen *G, int rank) {
    shape s = {.rank = rank};
    for (int i = 0; i < rank; i++)
        s.d[i] = rdim(G);
    for (int i = 0; shape_numel(&s) > NUMEL_CAP; i = (i + 1) % rank)
        s.d[i] = s.d[i] > 2 ? s.d[i] / 2 : s.d[i];
    return s;
}

static bool is_float(const kf_tensor *t) {
    kf_dtype d = kf_tensor_dtype(t);
    return d == KF_DTYPE_F32 || d == KF_DTYPE_F16 || d == KF_DTYPE_BF16 || d == KF_DTYPE_F64;
}

/* Does `y` broadcast into `x`'s shape without changing it? */
static bool fits_into(const kf_tensor *y, const kf_tensor *x) {
    int ry = kf_tensor_rank(y), rx = kf_tensor_rank(x);
    if (ry > rx)
        return false;
    for (int i = 1; i <= ry; i++) {
        int64_t a = kf_tensor_dim(y, -i), b = kf_tensor_dim(x, -i);
        if (a != b && a != 1)
            return false;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Sources and the pool                                                      */
/* ------------------------------------------------------------------------ */

static kf_tensor *input(gen *G, kf_dtype dt, const shape *s) {
    char name[32];
    snprintf(name, sizeof name, "in%d", G->n_in++);
    return kf_input(G->g, name, dt, s->rank, s->d);
}

/* A constant with random values in [lo, hi] (small shapes), else an input. */
static kf_tensor *constant(gen *G, kf_dtype dt, const shape *s, double lo, double hi) {
    int64_t n = shape_numel(s);
    if (n > 64)
        return input(G, dt, s);
    union {
        float f[64];
        double d[64];
        uint16_t h[64];
    } buf;
    for (int64_t i = 0; i < n; i++) {
        double v = uniform(G, lo, hi);
        switch (dt) {
        case KF_DTYPE_F32:
            buf.f[i] = (float)v;
            break;
        case KF_DTYPE_F64:
            buf.d[i] = v;
            break;
        case KF_DTYPE_F16:
            buf.h[i] = kf_f32_to_f16((float)v);
            break;
        default:
            buf.h[i] = kf_f32_to_bf16((float)v);
            break;
        }
    }
    return kf_constant(G->g, dt, s->rank, s->d, &buf);
}

/* A tensor of shape s: an input most of the time, else a constant. */
static kf_tensor *leaf(gen *G, kf_dtype dt, const shape *s) {
    return chance(G, 75) ? input(G, dt, s) : constant(G, dt, s, -1.5, 1.5);
}

static void pool_add(gen *G, kf_tensor *t) {
    if (!t || !is_float(t))
        return;
    if (G->npool < POOL_MAX)
        G->pool[G->npool++] = t;
    else
        G->pool[below(G, POOL_MAX)] = t;
}

static kf_tensor *pool_pick(gen *G) { return G->npool ? G->pool[below(G, G->npool)] : NULL; }

static void output(gen *G, kf_tensor *t) {
    if (!t)
        return;
    char name[32];
    snprintf(name, sizeof name, "out%d", G->n_out++);
    kf_output(G->g, name, t);
}

/* A value to start a motif from: an earlier value (another consumer for it)
 * or a fresh input of rank 1..4. */
static kf_tensor *start_value(gen *G, int min_rank) {
    if (chance(G, 45)) {
        for (int tries = 0; tries < 4; tries++) {
            kf_tensor *t = pool_pick(G);
            if (t && kf_tensor_rank(t) >= min_rank)
                return t;
        }
    }
    int rank = min_rank + below(G, 5 - min_rank);
    shape s = rshape(G, rank);
    return input(G, fdtype(G), &s);
}

/* ------------------------------------------------------------------------ */
/* Elementwise chains                                                        */
/* ------------------------------------------------------------------------ */

/* A second operand for x of x's dtype that broadcasts into x's shape:
 * the full shape, a row, a column, a scalar, size-1 dims, an earlier value. */
static kf_tensor *operand_for(gen *G, kf_tensor *x) {
    kf_graph *g = G->g;
    kf_dtype dt = kf_tensor_dtype(x);
    shape s = shape_of(x);
    switch (below(G, 9)) {
    case 0:
        return leaf(G, dt, &s);
    case 1: /* row: [N] */
        if (s.rank >= 1) {
            shape r = {.rank = 1, .d = {s.d[s.rank - 1]}};
            return leaf(G, dt, &r);
        }
        return kf_scalar(g, dt, uniform(G, 0.5, 2.0));
    case 2: /* column: [..., M, 1] */
        if (s.rank >= 1)
            s.d[s.rank - 1] = 1;
        return leaf(G, dt, &s);
    case 3: /* scalar */
        if (chance(G, 70))
            return kf_scalar(g, dt, uniform(G, -2.0, 2.0));
        s.rank = 0;
        return input(G, dt, &s);
    case 4: { /* size-1 dims, sometimes fewer leading dims */
        int drop = s.rank ? below(G, s.rank + 1) : 0;
        shape r = {.rank = s.rank - drop};
        for (int i = 0; i < r.rank; i++)
            r.d[i] = chance(G, 50) ? 1 : s.d[drop + i];
        return leaf(G, dt, &r);
    }
    case 5:
    case 6: /* an earlier value: a second consumer for it */
        for (int tries = 0; tries < 6; tries++) {
            kf_tensor *y = pool_pick(G);
            if (y && y != x && fits_into(y, x)) {
                if (kf_tensor_dtype(y) != dt)
                    y = kf_cast(g, y, dt);
                return y;
            }
        }
        return leaf(G, dt, &s);
    case 7: { /* computed in another dtype, cast in */
        kf_tensor *y = leaf(G, other_fdtype(G, dt), &s);
        return kf_cast(g, y, dt);
    }
    default: { /* a row vector through its own small chain */
        shape r = {.rank = s.rank ? 1 : 0, .d = {s.rank ? s.d[s.rank - 1] : 1}};
        kf_tensor *y = leaf(G, dt, &r);
        return chance(G, 50) ? kf_sigmoid(g, y) : kf_neg(g, y);
    }
    }
}

/* abs(x) + c: a safe argument for log, sqrt, rsqrt and pow. */
static kf_tensor *positive(gen *G, kf_tensor *x) {
    kf_tensor *a = kf_abs(G->g, x);
    return kf_add(G->g, a, kf_scalar(G->g, kf_tensor_dtype(x), uniform(G, 0.25, 1.0)));
}

static kf_tensor *unary(gen *G, kf_tensor *x) {
    kf_graph *g = G->g;
    switch (below(G, 16)) {
    case 0:
        return kf_neg(g, x);
    case 15: { /* one side or both, sometimes a bound the values never reach */
        double lo = uniform(G, -1.5, 0.5), hi = lo + uniform(G, 0.0, 2.0);
        int side = (int)below(G, 3);
        return kf_clamp(g, x, side == 1 ? -INFINITY : lo, side == 2 ? INFINITY : hi);
    }
    case 12:
        return kf_erf(g, x);
    case 13:
        return kf_sin(g, x);
    case 14:
        return kf_cos(g, x);
    case 1:
        return kf_abs(g, x);
    case 2:
        return kf_exp(g, chance(G, 70) ? kf_tanh(g, x) : x);
    case 3:
        return kf_log(g, chance(G, 85) ? positive(G, x) : x);
    case 4:
        return kf_sqrt(g, chance(G, 85) ? positive(G, x) : x);
    case 5:
        return kf_rsqrt(g, chance(G, 85) ? positive(G, x) : x);
    case 6:
        return kf_tanh(g, x);
    case 7:
        return kf_sigmoid(g, x);
    case 8:
        return kf_relu(g, x);
    case 9:
        return kf_gelu(g, x);
    case 10:
        return kf_gelu_tanh(g, x);
    default:
        return kf_silu(g, x);
    }
}

static kf_tensor *activation(gen *G, kf_tensor *x) {
    kf_graph *g = G->g;
    switch (below(G, 6)) {
    case 0:
        return kf_relu(g, x);
    case 1:
        return kf_gelu(g, x);
    case 2:
        return kf_gelu_tanh(g, x);
    case 3:
        return kf_silu(g, x);
    case 4:
        return kf_sigmoid(g, x);
    default:
        return kf_tanh(g, x);
    }
}

static kf_tensor *binary(gen *G, kf_tensor *x) {
    kf_graph *g = G->g;
    kf_tensor *y =
        chance(G, 5) ? x : operand_for(G, x); /* sometimes x op x: one producer, two slots */
    if (y != x && chance(G, 12)) {            /* the broadcast spelled out: expand y to x's shape */
        shape s = shape_of(x);
        y = kf_expand(g, y, s.rank, s.d);
    }
    bool swap = chance(G, 30);
    kf_tensor *a = swap ? y : x, *b = swap ? x : y;
    switch (below(G, 8)) {
    case 0:
    case 1:
        return kf_add(g, a, b);
    case 2:
        return kf_sub(g, a, b);
    case 3:
        return kf_mul(g, a, b);
    case 4:
        return kf_div(g, a, chance(G, 80) ? positive(G, b) : b);
    case 5:
        return kf_max(g, a, b);
    case 6:
        return kf_min(g, a, b);
    default:
        if (chance(G, 60)) /* x to a small integer power */
            return kf_pow(g, chance(G, 85) ? positive(G, x) : x,
                          kf_scalar(g, kf_tensor_dtype(x), (double)(1 + below(G, 3))));
        return kf_pow(g, chance(G, 85) ? positive(G, a) : a, b);
    }
}

static kf_tensor *compare(gen *G, kf_tensor *a, kf_tensor *b) {
    kf_graph *g = G->g;
    switch (below(G, 6)) {
    case 0:
        return kf_lt(g, a, b);
    case 1:
        return kf_le(g, a, b);
    case 2:
        return kf_gt(g, a, b);
    case 3:
        return kf_ge(g, a, b);
    case 4:
        return kf_eq(g, a, b);
    default:
        return kf_ne(g, a, b);
    }
}

/* One elementwise step; the result usually has x's shape. */
static kf_tensor *ew_step(gen *G, kf_tensor *x) {
    kf_graph *g = G->g;
    int r = below(G, 20);
    if (r < 6)
        return unary(G, x);
    if (r < 14)
        return binary(G, x);
    if (r < 16) { /* cast, often straight back */
        kf_dtype dt = kf_tensor_dtype(x);
        kf_tensor *c = kf_cast(g, x, other_fdtype(G, dt));
        return chance(G, 50) ? kf_cast(g, c, dt) : c;
    }
    if (r < 18) { /* where(compare(x, y), x, z) */
        kf_tensor *c = compare(G, x, operand_for(G, x));
        bool swap = chance(G, 40);
        kf_tensor *z = operand_for(G, x);
        return kf_where(g, c, swap ? z : x, swap ? x : z);
    }
    if (r < 19 && kf_tensor_rank(x) < 4) {
        /* broadcast up: an operand with one more leading dim */
        shape s = shape_of(x);
        memmove(s.d + 1, s.d, sizeof(int64_t) * (size_t)s.rank);
        s.rank++;
        s.d[0] = 2 + below(G, 2);
        if (shape_numel(&s) <= 2 * NUMEL_CAP) {
            if (chance(G, 35)) /* or x expanded to it first */
                return kf_mul(g, kf_expand(g, x, s.rank, s.d), leaf(G, kf_tensor_dtype(x), &s));
            return kf_add(g, x, leaf(G, kf_tensor_dtype(x), &s));
        }
    }
    return unary(G, x);
}

/* n elementwise steps; intermediates join the pool and now and then become
 * graph outputs in the middle of the chain. */
static kf_tensor *chain(gen *G, kf_tensor *x, int n) {
    for (int i = 0; i < n && x; i++) {
        x = ew_step(G, x);
        if (i + 1 < n && chance(G, 20))
            pool_add(G, x);
        if (i + 1 < n && chance(G, 6))
            output(G, x);
    }
    return x;
}

static kf_tensor *motif_chain(gen *G) {
    kf_tensor *x = start_value(G, 0);
    return chain(G, x, 1 + below(G, 6));
}

/* ------------------------------------------------------------------------ */
/* Layout                                                                    */
/* ------------------------------------------------------------------------ */

static kf_tensor *relayout(gen *G, kf_tensor *x) {
    kf_graph *g = G->g;
    shape s = shape_of(x);
    if (s.rank >= 2 && chance(G, 50)) {
        int perm[KF_MAX_RANK];
        for (int i = 0; i < s.rank; i++)
            perm[i] = i;
        for (int i = s.rank - 1; i > 0; i--) {
            int j = below(G, i + 1), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        return kf_permute(g, x, perm);
    }
    shape r = s;
    int k = below(G, 4);
    if (k == 0 && s.rank >= 2) { /* merge two adjacent dims */
        int i = below(G, s.rank - 1);
        r.d[i] = s.d[i] * s.d[i + 1];
        memmove(r.d + i + 1, s.d + i + 2, sizeof(int64_t) * (size_t)(s.rank - i - 2));
        r.rank--;
    } else if (k == 1 && s.rank >= 1 && s.rank < KF_MAX_RANK) { /* split a dim */
        int i = below(G, s.rank);
        int64_t f = s.d[i] % 2 == 0 ? 2 : s.d[i] % 3 == 0 ? 3 : 1;
        memmove(r.d + i + 1, s.d + i, sizeof(int64_t) * (size_t)(s.rank - i));
        r.d[i] = f;
        r.d[i + 1] = s.d[i] / f;
        r.rank++;
    } else if (k == 2) { /* flatten, the size inferred */
        r.rank = 1;
        r.d[0] = -1;
    } else if (s.rank < KF_MAX_RANK) { /* insert a size-1 dim */
        int i = below(G, s.rank + 1);
        memmove(r.d + i + 1, s.d + i, sizeof(int64_t) * (size_t)(s.rank - i));
        r.d[i] = 1;
        r.rank++;
    }
    return kf_reshape(g, x, r.rank, r.d);
}

static kf_tensor *motif_layout(gen *G) {
    kf_tensor *x = start_value(G, 1);
    if (chance(G, 50))
        x = chain(G, x, 1 + below(G, 2));
    x = relayout(G, x);
    if (chance(G, 30))
        x = relayout(G, x);
    return chain(G, x, below(G, 3));
}

/* ------------------------------------------------------------------------ */
/* Indexed reads: slice, concat, gather                                      */
/* ------------------------------------------------------------------------ */

/* x sliced, concatenated (with a leaf, a function of x, or rotate_half),
 * repeated or gathered along a random axis; x itself when the shape does not
 * allow it. */
static kf_tensor *remap(gen *G, kf_tensor *x) {
    kf_graph *g = G->g;
    shape s = shape_of(x);
    if (s.rank == 0)
        return x;
    int ax = below(G, s.rank);
    int neg_ax = chance(G, 30) ? ax - s.rank : ax; /* negative spellings too */
    int64_t d = s.d[ax];
    int k = below(G, 5);
    if (k == 4) { /* repeat: every element 2 or 3 times along the axis */
        int64_t times = 2 + below(G, 2);
        if (shape_numel(&s) * times > 2 * NUMEL_CAP)
            return x;
        return kf_repeat(g, x, neg_ax, times);
    }
    if (k == 0 && d >= 2) { /* slice, Python's rules (negative bounds now and then) */
        int64_t start = below(G, (int)d - 1), stop = start + 1 + below(G, (int)(d - start));
        int64_t step = 1 + below(G, 2);
        if (chance(G, 25))
            start -= d;
        if (chance(G, 20))
            stop = INT64_MAX;
        return kf_slice(g, x, neg_ax, start, stop, step);
    }
    if (k == 1 && d >= 2 && d % 2 == 0) { /* rotate_half: concat(-x2, x1) */
        kf_tensor *x1 = kf_slice(g, x, ax, 0, d / 2, 1), *x2 = kf_slice(g, x, ax, d / 2, d, 1);
        kf_tensor *parts[2] = {kf_neg(g, x2), x1};
        return kf_concat(g, 2, parts, neg_ax);
    }
    if (k <= 2) { /* concat with a leaf and, now and then, a function of x */
        shape t = s;
        t.d[ax] = 1 + below(G, 4);
        if (2 * shape_numel(&s) + shape_numel(&t) > 2 * NUMEL_CAP)
            return x;
        kf_tensor *parts[3] = {x, leaf(G, kf_tensor_dtype(x), &t), NULL};
        int n = 2;
        if (chance(G, 40))
            parts[n++] = unary(G, x);
        if (chance(G, 50)) {
            kf_tensor *tmp = parts[0];
            parts[0] = parts[1];
            parts[1] = tmp;
        }
        return kf_concat(g, n, parts, neg_ax);
    }
    /* gather with i32 or i64 indices of rank 1 or 2 */
    shape is = {.rank = 1 + below(G, 2)};
    for (int i = 0; i < is.rank; i++)
        is.d[i] = 1 + below(G, 4);
    if (s.rank - 1 + is.rank > KF_MAX_RANK ||
        shape_numel(&s) / d * shape_numel(&is) > 2 * NUMEL_CAP)
        return x;
    return kf_gather(g, x, input(G, chance(G, 50) ? KF_DTYPE_I32 : KF_DTYPE_I64, &is), neg_ax);
}

static kf_tensor *motif_remap(gen *G) {
    kf_tensor *x = start_value(G, 1);
    if (chance(G, 50))
        x = chain(G, x, 1 + below(G, 2));
    x = remap(G, x);
    if (chance(G, 40))
        x = remap(G, x);
    if (chance(G, 25) && kf_tensor_rank(x) > 0)
        x = chance(G, 50) ? kf_softmax(G->g, x, -1)
                          : kf_reduce_sum(G->g, x, below(G, kf_tensor_rank(x)), chance(G, 50));
    return chain(G, x, below(G, 3));
}

/* ------------------------------------------------------------------------ */
/* Row-wise: norms, softmax, reductions                                      */
/* ------------------------------------------------------------------------ */

static kf_tensor *norm(gen *G, kf_tensor *x, int axis) {
    kf_graph *g = G->g;
    kf_dtype dt = kf_tensor_dtype(x);
    shape w = {.rank = 1, .d = {kf_tensor_dim(x, axis)}};
    kf_tensor *weight = chance(G, 70) ? input(G, dt, &w) : constant(G, dt, &w, 0.5, 1.5);
    double eps = chance(G, 50) ? 1e-5 : 1e-6;
    if (chance(G, 50)) {
        kf_tensor *bias = leaf(G, dt, &w);
        return kf_layer_norm(g, x, weight, bias, axis, eps);
    }
    return kf_rms_norm(g, x, weight, axis, eps);
}

static kf_tensor *motif_rowwise(gen *G) {
    kf_graph *g = G->g;
    kf_tensor *x = start_value(G, 1);
    if (chance(G, 60))
        x = chain(G, x, 1 + below(G, 3)); /* prologue */
    if (!x)
        return NULL;
    int rank = kf_tensor_rank(x);
    if (rank == 0)
        x = kf_reshape(g, x, 1, (int64_t[]){1}), rank = 1;
    int axis = chance(G, 65) ? rank - 1 : below(G, rank);
    if (chance(G, 30))
        axis -= rank; /* the negative spelling */
    kf_tensor *y;
    int kind = below(G, 7);
    if (kind == 0) {
        y = chance(G, 25) ? kf_log_softmax(g, x, axis) : kf_softmax(g, x, axis);
    } else if (kind <= 2) {
        y = norm(G, x, axis);
    } else if (kind == 3 && rank >= 2 && chance(G, 50)) {
        /* the bias gradient: a column sum over the rows */
        y = kf_reduce_sum(g, x, 0, 0);
    } else {
        bool keep = chance(G, 50);
        int which = below(G, 6);
        if (which == 5 && kf_tensor_dtype(x) == KF_DTYPE_I32)
            which = 0; /* logsumexp takes float dtypes */
        y = which == 0   ? kf_reduce_sum(g, x, axis, keep)
            : which == 1 ? kf_reduce_max(g, x, axis, keep)
            : which == 2 ? kf_reduce_min(g, x, axis, keep)
            : which == 3 ? kf_reduce_mean(g, x, axis, keep)
            : which == 5 ? kf_logsumexp(g, x, axis, keep)
                         : kf_argmax(g, x, axis, keep);
        if (which == 4 && kf_tensor_dtype(x) != KF_DTYPE_I32)
            y = kf_cast(g, y, kf_tensor_dtype(x)); /* the index as a number the pool can use */
        if (!keep && chance(G, 20)) {
            /* the reduced value broadcast up into a larger tensor */
            shape big = shape_of(y);
            if (big.rank < 4) {
                memmove(big.d + 1, big.d, sizeof(int64_t) * (size_t)big.rank);
                big.rank++;
                big.d[0] = 1 + below(G, 4);
                y = kf_mul(g, leaf(G, kf_tensor_dtype(y), &big), y);
            }
        } else if (keep && chance(G, 50)) {
            /* broadcast back into the row: x - max(x), x / sum(x), ... */
            if (chance(G, 20))
                output(G, y);
            y = chance(G, 60) ? kf_sub(g, x, y) : kf_mul(g, x, y);
        }
    }
    if (chance(G, 60))
        y = chain(G, y, 1 + below(G, 3)); /* epilogue */
    return y;
}

/* ------------------------------------------------------------------------ */
/* GEMM with prologue and epilogue                                           */
/* ------------------------------------------------------------------------ */

static kf_tensor *motif_gemm(gen *G) {
    kf_graph *g = G->g;
    kf_tensor *a = NULL;
    bool ta = false;
    if (chance(G, 35)) {
        kf_tensor *p = pool_pick(G);
        if (p && kf_tensor_rank(p) >= 2 && kf_tensor_rank(p) <= 4)
            a = p, ta = chance(G, 20);
    }
    if (!a) {
        int64_t batch = chance(G, 25) ? 1 + below(G, 3) : 0;
        shape s = {.rank = batch ? 3 : 2, .d = {batch, rdim(G), rdim(G)}};
        if (!batch)
            s.d[0] = s.d[1], s.d[1] = s.d[2];
        if (chance(G, 10)) { /* A is a transposed view of a tensor in memory */
            int64_t t = s.d[s.rank - 1];
            s.d[s.rank - 1] = s.d[s.rank - 2];
            s.d[s.rank - 2] = t;
            a = kf_transpose(g, input(G, fdtype(G), &s), -1, -2);
        } else {
            a = input(G, fdtype(G), &s);
        }
        if (chance(G, 25)) /* a norm as the GEMM's prologue (sometimes not over K) */
            a = norm(G, a, chance(G, 85) ? -1 : -2);
        ta = chance(G, 12);
        if (chance(G, 15))
            a = kf_cast(g, a, other_fdtype(G, kf_tensor_dtype(a)));
    }
    kf_dtype dt = kf_tensor_dtype(a);
    int64_t k = kf_tensor_dim(a, ta ? -2 : -1), n = rdim(G);
    bool tb = chance(G, 30);
    shape ws = {.rank = 2, .d = {tb ? n : k, tb ? k : n}};
    if (kf_tensor_rank(a) == 3 && chance(G, 30)) { /* a batched weight */
        ws.rank = 3;
        memmove(ws.d + 1, ws.d, 2 * sizeof(int64_t));
        ws.d[0] = kf_tensor_dim(a, 0);
    }
    if (kf_tensor_rank(a) == 2 && chance(G, 8)) { /* unbatched A, batched weight */
        memmove(ws.d + 1, ws.d, 2 * sizeof(int64_t));
        ws.rank = 3;
        ws.d[0] = 2;
    }
    kf_tensor *w = input(G, dt, &ws);
    if (chance(G, 8)) /* a computed weight: a norm or an activation feeds operand B */
        w = chance(G, 50) ? norm(G, w, -1) : unary(G, w);
    kf_tensor *y = kf_matmul(g, a, w, ta, tb);
    if (chance(G, 12)) { /* SwiGLU: silu(a.Wg) * (a.Wu) */
        kf_tensor *u = kf_matmul(g, a, input(G, dt, &ws), ta, tb);
        y = kf_mul(g, kf_silu(g, y), u);
    }
    if (!y)
        return NULL;
    int steps = below(G, 5);
    for (int i = 0; i < steps && y; i++) {
        dt = kf_tensor_dtype(y);
        shape ys = shape_of(y);
        switch (below(G, 7)) {
        case 0: { /* bias */
            shape b = {.rank = 1, .d = {ys.d[ys.rank - 1]}};
            y = kf_add(g, y, leaf(G, dt, &b));
            break;
        }
        case 1:
            y = activation(G, y);
            break;
        case 2: { /* residual: a fresh tensor or an earlier value */
            kf_tensor *r = NULL;
            for (int t = 0; t < 4 && !r; t++) {
                kf_tensor *p = pool_pick(G);
                if (p && p != y && fits_into(p, y) && kf_tensor_rank(p) == ys.rank)
                    r = kf_tensor_dtype(p) == dt ? p : kf_cast(g, p, dt);
            }
            y = kf_add(g, r ? r : input(G, dt, &ys), y);
            break;
        }
        case 3: { /* scale: scalar, per column or per row */
            kf_tensor *s;
            int which = below(G, 3);
            if (which == 0) {
                s = kf_scalar(g, dt, uniform(G, 0.25, 2.0));
            } else if (which == 1) {
                shape c = {.rank = 1, .d = {ys.d[ys.rank - 1]}};
                s = leaf(G, dt, &c);
            } else {
                shape c = {.rank = 2, .d = {ys.d[ys.rank - 2], 1}};
                s = leaf(G, dt, &c);
            }
            y = kf_mul(g, y, s);
            break;
        }
        case 4: /* cast */
            y = kf_cast(g, y, other_fdtype(G, dt));
            break;
        default:
            y = ew_step(G, y);
            break;
        }
        if (i + 1 < steps && chance(G, 12))
            output(G, y); /* an output in the middle of the epilogue */
        if (chance(G, 10))
            pool_add(G, y);
    }
    if (y && chance(G, 25)) { /* a norm after the epilogue */
        y = norm(G, y, -1);
        if (chance(G, 40))
            y = chain(G, y, 1);
    }
    return y;
}

/* ------------------------------------------------------------------------ */
/* Attention from primitives                                                 */
/* ------------------------------------------------------------------------ */

static kf_tensor *motif_attention(gen *G) {
    kf_graph *g = G->g;
    kf_dtype dt = chance(G, 90) ? fdtype(G) : KF_DTYPE_F64;
    int64_t B = 1 + below(G, 2), H = 1 + below(G, 3);
    int64_t S = 1 + below(G, G->o.max_dim), T = chance(G, 65) ? S : 1 + below(G, G->o.max_dim);
    int64_t D = 1 + below(G, 16);
    int layout = below(G, 20); /* rank 4 [B,H,S,D], rank 3 [H,S,D], rank 2 [S,D] */
    int rank = layout < 12 ? 4 : layout < 17 ? 3 : 2;
    shape qs = {.rank = rank}, ks, vs;
    int64_t lead[2] = {B, H};
    for (int i = 0; i < rank - 2; i++)
        qs.d[i] = lead[i + 4 - rank];
    ks = vs = qs;
    qs.d[rank - 2] = S, qs.d[rank - 1] = D;
    vs.d[rank - 2] = T, vs.d[rank - 1] = D;
    bool kt = chance(G, 20); /* K stored as [.., D, T] */
    ks.d[rank - 2] = kt ? D : T, ks.d[rank - 1] = kt ? T : D;

    bool vt = chance(G, 15); /* V stored as [.., D, T] */
    if (vt)
        vs.d[rank - 2] = D, vs.d[rank - 1] = T;
    kf_tensor *q, *k, *v;
    if (rank == 4 && chance(G, 30)) {
        /* heads split from [B, S, H, D] inputs by a permute, as models do */
        int perm[4] = {0, 2, 1, 3};
        kf_tensor *src[3];
        shape *want[3] = {&qs, &ks, &vs};
        for (int i = 0; i < 3; i++) {
            shape in = {.rank = 4, .d = {B, want[i]->d[2], H, want[i]->d[3]}};
            src[i] = kf_permute(g, input(G, dt, &in), perm);
        }
        q = src[0], k = src[1], v = src[2];
    } else {
        q = input(G, dt, &qs), k = input(G, dt, &ks), v = input(G, dt, &vs);
    }
    if (chance(G, 10)) /* q scaled before the product */
        q = kf_mul(g, q, kf_scalar(g, dt, uniform(G, 0.1, 1.0)));
    kf_tensor *s = kf_matmul(g, q, k, 0, !kt);
    if (chance(G, 5))
        output(G, s); /* the raw scores are wanted too */
    if (chance(G, 85)) {
        double sc = 1.0 / sqrt((double)D);
        s = chance(G, 70) ? kf_mul(g, s, kf_scalar(g, dt, sc))
                          : kf_div(g, s, kf_scalar(g, dt, 1.0 / sc));
    }
    if (chance(G, 25)) { /* softcap: c * tanh(s / c) */
        kf_tensor *c = kf_scalar(g, dt, uniform(G, 2.0, 30.0));
        s = kf_mul(g, kf_tanh(g, kf_div(g, s, c)), c);
    }
    int64_t st[2] = {S, T};
    kf_tensor *qi = kf_iota(g, KF_DTYPE_I32, 2, st, 0);
    kf_tensor *ki = kf_iota(g, KF_DTYPE_I32, 2, st, 1);
    if (T > S) /* queries are the last S of T positions */
        qi = kf_add(g, qi, kf_scalar(g, KF_DTYPE_I32, (double)(T - S)));
    if (rank >= 3 && chance(G, 25)) { /* ALiBi: s + slope[h] * (kv - q) */
        shape sl = {.rank = 3, .d = {H, 1, 1}};
        kf_tensor *slope = leaf(G, dt, &sl);
        kf_tensor *rel = chance(G, 70) ? kf_cast(g, kf_sub(g, ki, qi), dt)
                                       : kf_sub(g, kf_iota(g, dt, 2, st, 1), kf_cast(g, qi, dt));
        s = kf_add(g, s, kf_mul(g, slope, rel));
    }
    int mask = below(G, 10);
    if (mask >= 3) {
        double ninf = chance(G, 70) ? -INFINITY : -1e4;
        kf_tensor *neg = kf_scalar(g, dt, ninf);
        kf_tensor *causal = chance(G, 80) ? kf_le(g, ki, qi) : kf_ge(g, qi, ki);
        int64_t w = 1 + below(G, (int)S + 1);
        if (mask >= 7 && chance(G, 50)) {
            /* a sliding window as one where over the whole condition
             * 0 <= q - kv < w, spelled without a logical and:
             * min(d, w-1-d) >= 0, or |2d - (w-1)| <= w-1 */
            kf_tensor *d = kf_sub(g, qi, ki), *c;
            kf_tensor *wm1 = kf_scalar(g, KF_DTYPE_I32, (double)(w - 1));
            if (chance(G, 50)) {
                c = kf_ge(g, kf_min(g, d, kf_sub(g, wm1, d)), kf_scalar(g, KF_DTYPE_I32, 0.0));
            } else {
                kf_tensor *e = kf_sub(g, kf_mul(g, d, kf_scalar(g, KF_DTYPE_I32, 2.0)), wm1);
                c = kf_le(g, kf_abs(g, e), wm1);
            }
            if (chance(G, 80))
                s = kf_where(g, c, s, neg);
            else /* the branches the other way round */
                s = kf_where(g, kf_eq(g, c, kf_scalar(g, KF_DTYPE_BOOL, 0.0)), neg, s);
        } else if (mask == 9) {
            /* an additive mask: s + where(causal, 0, -inf) */
            s = kf_add(g, s, kf_where(g, causal, kf_scalar(g, dt, 0.0), neg));
        } else {
            s = kf_where(g, causal, s, neg);
            if (mask >= 7) { /* a sliding window as a second where: q - kv < w */
                kf_tensor *near =
                    kf_lt(g, kf_sub(g, qi, ki), kf_scalar(g, KF_DTYPE_I32, (double)w));
                s = kf_where(g, near, s, neg);
            }
        }
    } else if (mask == 2) { /* a general mask from an input: bool, or a float compared */
        shape ms = {.rank = 2, .d = {S, T}};
        kf_tensor *m = chance(G, 50) ? input(G, KF_DTYPE_BOOL, &ms)
                                     : kf_gt(g, input(G, dt, &ms), kf_scalar(g, dt, -1.0));
        s = kf_where(g, m, s, kf_scalar(g, dt, -1e4));
    } else if (mask == 1 && rank >= 3) { /* per-(q, kv) positions from an i32 input */
        shape ps = {.rank = 2, .d = {S, T}};
        kf_tensor *pos = kf_cast(g, input(G, KF_DTYPE_I32, &ps), dt);
        s = kf_add(g, s, kf_mul(g, pos, kf_scalar(g, dt, uniform(G, -0.5, 0.5))));
    }
    if (chance(G, 8)) { /* a softcap after the mask: -inf becomes -c */
        kf_tensor *c = kf_scalar(g, dt, uniform(G, 2.0, 30.0));
        s = kf_mul(g, kf_tanh(g, kf_div(g, s, c)), c);
    }
    /* rarely over the query axis: no attention */
    kf_tensor *p = kf_softmax(g, s, chance(G, 4) ? -2 : -1);
    if (chance(G, 8))
        output(G, p); /* the probabilities are wanted too: no flash kernel */
    if (chance(G, 10))
        p = kf_cast(g, kf_cast(g, p, other_fdtype(G, dt)), dt);
    kf_tensor *o = kf_matmul(g, p, v, 0, vt);
    if (o && rank == 4 && chance(G, 50)) { /* [B,H,S,D] -> [B,S,H*D] */
        o = kf_permute(g, o, (int[]){0, 2, 1, 3});
        o = kf_reshape(g, o, 3, (int64_t[]){B, S, H * D});
    }
    if (o)
        pool_add(G, o);
    return o;
}

/* ------------------------------------------------------------------------ */
/* The graph                                                                 */
/* ------------------------------------------------------------------------ */

kf_status kf_gen_graph(kf_ctx *ctx, uint64_t seed, const kf_gen_options *o, kf_graph **out) {
    gen G;
    memset(&G, 0, sizeof G);
    if (o)
        G.o = *o;
    else
        kf_gen_options_init(&G.o);
    if (G.o.max_dim < 1)
        G.o.max_dim = 1;
    if (G.o.max_motifs < 1)
        G.o.max_motifs = 1;
    G.s = seed;
    kf_status st = kf_graph_create(ctx, out);
    if (st != KF_OK)
        return st;
    G.g = *out;
    int motifs = 1 + below(&G, G.o.max_motifs);
    for (int i = 0; i < motifs; i++) {
        kf_tensor *y;
        int r = below(&G, 100);
        if (r < 25)
            y = motif_chain(&G);
        else if (r < 50)
            y = motif_gemm(&G);
        else if (r < 72)
            y = motif_rowwise(&G);
        else if (r < 88)
            y = motif_attention(&G);
        else if (r < 94)
            y = motif_layout(&G);
        else
            y = motif_remap(&G);
        if (!y)
            break;
        if (chance(&G, 4)) {
            /* left dangling: no output needs it */
            pool_add(&G, y);
            continue;
        }
        output(&G, y);
        if (chance(&G, 3))
            output(&G, y); /* the same value under a second name */
        pool_add(&G, y);
    }
    if (G.o.source_outputs && chance(&G, 3) && kf_graph_input_count(G.g))
        output(&G, kf_graph_input(G.g, 0));    /* an input passed straight through */
    if (G.o.source_outputs && chance(&G, 4)) { /* an iota or a scalar as an output */
        if (chance(&G, 50))
            output(&G,
                   kf_iota(G.g, KF_DTYPE_F32, 2, (int64_t[]){1 + below(&G, 4), 3}, below(&G, 2)));
        else
            output(&G, kf_scalar(G.g, fdtype(&G), uniform(&G, -1.0, 1.0)));
    }
    if (kf_graph_output_count(G.g) == 0) /* every motif dangled: keep the last value */
        output(&G, G.npool ? G.pool[G.npool - 1] : kf_scalar(G.g, KF_DTYPE_F32, 1.0));
    st = kf_graph_status(G.g);
    if (st != KF_OK)
        return st;
    return kf_graph_verify(G.g);
}
