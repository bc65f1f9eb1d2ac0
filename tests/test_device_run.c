/*
 * test_device_run.c -- device-resident runs on the GPU (kf_program_run_device,
 * kf_program_set_workspace): the caller's device buffers bound in place on
 * the caller's stream, against the reference evaluator and against the same
 * program's host-pointer run bit for bit; re-pointing between buffer sets;
 * a run captured into the caller's CUDA graph and replayed with new inputs;
 * a caller-supplied workspace; the one-stream contract; and every bad
 * pointer refused with a status and a message naming the binding.
 *
 * Inputs are fresh random values (KF_TEST_SEED replays a run); device
 * outputs are poisoned (NaN) before each run; NaN never passes.
 *
 * Without a driver or a device every test is skipped with a visible message
 * and the binary exits 77 (ctest: skipped, never passed). The tests named
 * test_in_place_* are the ones scripts/gpu_check.sh runs under
 * compute-sanitizer memcheck.
 */
#define _GNU_SOURCE /* mkdtemp, open_memstream */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/compile.h"
#include "ir/ir.h"
#include "kf_gpu.h"
#include "kf_planned.h"
#include "kf_test.h"
#include "runtime/cuda.h"

/* The suite's context (kf_gpu.h), the driver and device 0's primary
 * context the programs use too, and two streams. */
typedef struct gpu {
    kf_test_gpu t;
    const kf_cuda_driver *drv;
    kf_cuda_device dev;
    kf_cu_stream s1, s2;
} gpu;

static gpu G;
static char E[KF_MSG_MAX];

#define CK(call)                                                                                   \
    do {                                                                                           \
        kf_status st_ = (call);                                                                    \
        if (st_ != KF_OK)                                                                          \
            fail_msg("%s: %s: %s", #call, kf_status_str(st_), E);                                  \
    } while (0)

static int group_setup(void **state) {
    (void)state;
    if (kf_test_gpu_setup(&G.t, "kf_device_run", NULL) != 0)
        return -1;
    if (!G.t.have)
        return 0;
    if (kf_ctx_cuda_driver(G.t.ctx, &G.drv, G.t.why) != KF_OK ||
        kf_cuda_device_open(G.drv, 0, &G.dev, G.t.why) != KF_OK ||
        kf_cuda_stream_create(&G.dev, &G.s1, G.t.why) != KF_OK ||
        kf_cuda_stream_create(&G.dev, &G.s2, G.t.why) != KF_OK) {
        fprintf(stderr, "device setup failed: %s\n", G.t.why);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    if (G.t.have) {
        kf_cuda_stream_destroy(&G.dev, G.s1);
        kf_cuda_stream_destroy(&G.dev, G.s2);
        kf_cuda_device_close(&G.dev);
    }
    kf_test_gpu_teardown(&G.t);
    return 0;
}

#define REQUIRE_GPU() KF_REQUIRE_GPU(&G.t)

/* ------------------------------------------------------------------------ */
/* A program with host and device buffers for every binding                   */
/* ------------------------------------------------------------------------ */

#define SETS 2 /* device buffer sets, to re-point between */

typedef struct tcase {
    kf_graph *g;
    kf_program *p;
    size_t n_in, n_out;
    kf_binding *hin, *hout;             /* host inputs; host outputs (the host run's) */
    kf_binding *din[SETS], *dout[SETS]; /* device bindings (data: CUdeviceptr) */
    void **fetched;                     /* the device outputs copied back */
    const char *what;
} tcase;

static void *dptr_data(kf_cu_deviceptr p) { return (void *)(uintptr_t)p; }
static kf_cu_deviceptr data_dptr(const void *p) { return (kf_cu_deviceptr)(uintptr_t)p; }

static kf_binding *bindings(size_t n) {
    kf_binding *b = calloc(n + 1, sizeof *b);
    assert_non_null(b);
    return b;
}

/* Fresh random host inputs, uploaded to buffer set `set`. */
static void new_inputs(tcase *c, int set, uint64_t seed) {
    kf_test_rng rng = kf_test_rng_make(seed);
    for (size_t i = 0; i < c->n_in; i++) {
        const kf_tensor *t = kf_graph_input(c->g, i);
        kf_dtype d = kf_tensor_dtype(t);
        /* kf_test_fill_input draws a gather's indices within its axis (the
         * reference refuses others: embedding.kfg failed here with -1) */
        kf_test_fill_input(c->hin[i].data, t, (size_t)kf_tensor_numel(t), &rng,
                           d == KF_DTYPE_I32 ? -8 : -1, d == KF_DTYPE_I32 ? 9 : 1);
        CK(kf_cuda_copy_to_device(&G.dev, data_dptr(c->din[set][i].data), c->hin[i].data,
                                  c->hin[i].size, E));
    }
}

/* NaN into every device output of `set` (and the host outputs). */
static void poison_outputs(tcase *c, int set) {
    for (size_t i = 0; i < c->n_out; i++) {
        const kf_tensor *t = kf_graph_output(c->g, i);
        kf_test_poison(c->hout[i].data, kf_tensor_dtype(t), (size_t)kf_tensor_numel(t));
        CK(kf_cuda_copy_to_device(&G.dev, data_dptr(c->dout[set][i].data), c->hout[i].data,
                                  c->hout[i].size, E));
    }
}

static void fetch_outputs(tcase *c, int set) {
    for (size_t i = 0; i < c->n_out; i++)
        CK(kf_cuda_copy_to_host(&G.dev, c->fetched[i], data_dptr(c->dout[set][i].data),
                                c->dout[set][i].size, E));
}

static tcase *case_open(kf_ctx *ctx, kf_graph *g, const char *what) {
    tcase *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->g = g;
    c->what = what;
    if (kf_graph_verify(g) != KF_OK)
        fail_msg("%s: %s", what, kf_graph_error(g));
    kf_status st = kf_compile(ctx ? ctx : G.t.ctx, g, &c->p);
    if (st != KF_OK)
        fail_msg("%s: kf_compile: %s: %s", what, kf_status_str(st), kf_graph_error(g));
    c->n_in = kf_graph_input_count(g);
    c->n_out = kf_graph_output_count(g);
    c->hin = bindings(c->n_in);
    c->hout = bindings(c->n_out);
    c->fetched = calloc(c->n_out + 1, sizeof *c->fetched);
    for (int s = 0; s < SETS; s++) {
        c->din[s] = bindings(c->n_in);
        c->dout[s] = bindings(c->n_out);
    }
    for (size_t i = 0; i < c->n_in; i++) {
        const kf_tensor *t = kf_graph_input(g, i);
        size_t bytes = (size_t)kf_tensor_numel(t) * kf_dtype_size(kf_tensor_dtype(t));
        c->hin[i] = (kf_binding){kf_tensor_name(t), malloc(bytes + 1), bytes};
        for (int s = 0; s < SETS; s++) {
            kf_cu_deviceptr d = 0;
            CK(kf_cuda_mem_alloc(&G.dev, bytes, &d, E)); /* exactly the tensor's bytes */
            c->din[s][i] = (kf_binding){kf_tensor_name(t), dptr_data(d), bytes};
        }
    }
    for (size_t i = 0; i < c->n_out; i++) {
        const kf_tensor *t = kf_graph_output(g, i);
        size_t bytes = (size_t)kf_tensor_numel(t) * kf_dtype_size(kf_tensor_dtype(t));
        c->hout[i] = (kf_binding){kf_graph_output_name(g, i), malloc(bytes + 1), bytes};
        c->fetched[i] = malloc(bytes + 1);
        for (int s = 0; s < SETS; s++) {
            kf_cu_deviceptr d = 0;
            CK(kf_cuda_mem_alloc(&G.dev, bytes, &d, E));
            c->dout[s][i] = (kf_binding){kf_graph_output_name(g, i), dptr_data(d), bytes};
        }
    }
    return c;
}

static void case_close(tcase *c) {
    kf_program_destroy(c->p);
    for (size_t i = 0; i < c->n_in; i++) {
        free(c->hin[i].data);
        for (int s = 0; s < SETS; s++)
            kf_cuda_mem_free(&G.dev, data_dptr(c->din[s][i].data));
    }
    for (size_t i = 0; i < c->n_out; i++) {
        free(c->hout[i].data);
        free(c->fetched[i]);
        for (int s = 0; s < SETS; s++)
            kf_cuda_mem_free(&G.dev, data_dptr(c->dout[s][i].data));
    }
    for (int s = 0; s < SETS; s++) {
        free(c->din[s]);
        free(c->dout[s]);
    }
    free(c->hin);
    free(c->hout);
    free(c->fetched);
    free(c);
}

/* The fetched device outputs judged against the exact value (kf_graph_check
 * on the host inputs). */
static void judge(tcase *c, const char *when) {
    kf_binding *o = bindings(c->n_out);
    for (size_t i = 0; i < c->n_out; i++)
        o[i] = (kf_binding){c->hout[i].name, c->fetched[i], c->hout[i].size};
    kf_check_result *res = calloc(c->n_out + 1, sizeof *res);
    assert_non_null(res);
    if (kf_graph_check(c->g, c->hin, c->n_in, o, c->n_out, res) != KF_OK)
        fail_msg("%s (%s): reference: %s", c->what, when, kf_graph_error(c->g));
    for (size_t i = 0; i < c->n_out; i++)
        if (!res[i].pass)
            fail_msg("%s (%s), output %s: error %g beyond the bound %g (KF_TEST_SEED=%llu)",
                     c->what, when, o[i].name, res[i].err, res[i].bound,
                     (unsigned long long)kf_test_seed());
    free(res);
    free(o);
}

/* The fetched device outputs equal the host run's, byte for byte. */
static void same_bits_as_host(tcase *c, const char *when) {
    for (size_t i = 0; i < c->n_out; i++)
        if (memcmp(c->fetched[i], c->hout[i].data, c->hout[i].size) != 0)
            fail_msg("%s (%s): output %s differs from the host-pointer run's", c->what, when,
                     c->hout[i].name);
}

static void run_device(tcase *c, int set, kf_cu_stream s, const char *when) {
    kf_status st = kf_program_run_device(c->p, c->din[set], c->n_in, c->dout[set], c->n_out, s);
    if (st != KF_OK)
        fail_msg("%s (%s): kf_program_run_device: %s: %s", c->what, when, kf_status_str(st),
                 kf_program_error(c->p));
}

static void run_host(tcase *c, const char *when) {
    kf_status st = kf_program_run(c->p, c->hin, c->n_in, c->hout, c->n_out, NULL);
    if (st != KF_OK)
        fail_msg("%s (%s): kf_program_run: %s: %s", c->what, when, kf_status_str(st),
                 kf_program_error(c->p));
}

/* Host run and device runs on both buffer sets (the second re-points every
 * binding, the third points back), each judged, the first also compared
 * with the host run bit for bit. */
static void check_case(tcase *c, uint64_t seed) {
    new_inputs(c, 0, seed);
    poison_outputs(c, 0);
    run_host(c, "host run");
    run_device(c, 0, G.s1, "set 0");
    CK(kf_cuda_stream_sync(&G.dev, G.s1, NULL, E));
    fetch_outputs(c, 0);
    judge(c, "set 0");
    same_bits_as_host(c, "set 0");
    new_inputs(c, 1, seed + 1);
    poison_outputs(c, 1);
    run_device(c, 1, G.s1, "set 1, re-pointed");
    CK(kf_cuda_stream_sync(&G.dev, G.s1, NULL, E));
    fetch_outputs(c, 1);
    judge(c, "set 1, re-pointed");
    new_inputs(c, 0, seed + 2);
    poison_outputs(c, 0);
    run_device(c, 0, G.s1, "set 0 again");
    CK(kf_cuda_stream_sync(&G.dev, G.s1, NULL, E));
    fetch_outputs(c, 0);
    judge(c, "set 0 again");
    /* A host run after device runs binds the program's own buffers again. */
    poison_outputs(c, 0);
    run_host(c, "host run after device runs");
    same_bits_as_host(c, "host run after device runs");
}

static kf_graph *parse(const char *text) {
    kf_graph *g = NULL;
    if (kf_graph_parse(G.t.ctx, text, strlen(text), &g) != KF_OK)
        fail_msg("parse: %s\n%s", g ? kf_graph_error(g) : "no graph", text);
    return g;
}

static kf_ctx *cuda_ctx(kf_gemm_mode gemm) {
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CUDA;
    o.cache_dir = G.t.cache_dir[0] ? G.t.cache_dir : NULL;
    o.gemm = gemm;
    kf_ctx *ctx = NULL;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    return ctx;
}

/* ------------------------------------------------------------------------ */
/* In place, every example                                                    */
/* ------------------------------------------------------------------------ */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf)
        buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

static int examples_in(const char *dir, uint64_t seed) {
    DIR *dp = opendir(dir);
    if (!dp)
        return 0;
    char *names[128];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dp)) && n < 128) {
        size_t l = strlen(de->d_name);
        if (l > 4 && strcmp(de->d_name + l - 4, ".kfg") == 0)
            names[n++] = strdup(de->d_name);
    }
    closedir(dp);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t len = 0;
        char *text = read_file(path, &len);
        assert_non_null(text);
        kf_graph *g = NULL;
        if (kf_graph_parse(G.t.ctx, text, len, &g) != KF_OK)
            fail_msg("%s: %s", path, kf_graph_error(g));
        tcase *c = case_open(NULL, g, path);
        check_case(c, seed + 10 * (uint64_t)i);
        fprintf(stderr, "  %s: in place = host run, bit for bit\n", path);
        case_close(c);
        kf_graph_destroy(g);
        free(text);
        free(names[i]);
    }
    return n;
}

static void test_device_runs_of_every_example_match_the_host_run_bit_for_bit(void **state) {
    (void)state;
    REQUIRE_GPU();
    const char *src = getenv("KF_SOURCE_DIR");
    char dir[900];
    snprintf(dir, sizeof dir, "%s/examples", src ? src : ".");
    int n = examples_in(dir, 2000);
    snprintf(dir, sizeof dir, "%s/examples/patterns", src ? src : ".");
    n += examples_in(dir, 3000);
    assert_true(n >= 3);
}

/* Exact-size caller buffers (no slack past the tensor, unlike the arena's
 * 256-byte rounding) on shapes that leave every vector loop a tail, a
 * cuBLASLt GEMM and kfuse's generated GEMM with its TMA descriptors
 * re-encoded per buffer set; the suite's compute-sanitizer run. */
static void test_in_place_ragged_shapes_in_exact_buffers_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    const char *texts[] = {
        "kfg 1\nx = input(bf16[37, 1030])\ns = input(bf16[1030])\nr = input(bf16[37, 1030])\n"
        "xs = mul(x, s)\nh = add(xs, r)\ne = gelu(h)\noutput e\nl = layer_norm(h, s, s)\n"
        "output l\nm = softmax(r)\noutput m\n",
        "kfg 1\nx = input(f32[129, 517])\na = exp(x)\nb = reduce_sum(a, axis=1, keepdim=true)\n"
        "c = div(a, b)\noutput c\nv = reshape(c, [517, 129])\noutput v\noutput x\n",
        "kfg 1\nx = input(bf16[200, 96])\nw = input(bf16[96, 136])\nb = input(bf16[136])\n"
        "h = matmul(x, w)\nhb = add(h, b)\ny = gelu(hb)\noutput y\n",
    };
    kf_ctx *gen = cuda_ctx(KF_GEMM_GENERATED);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        for (int k = 0; k < 2; k++) {
            if (k == 1 && i != 2)
                continue;
            kf_graph *g = parse(texts[i]);
            char what[64];
            snprintf(what, sizeof what, "ragged case %zu%s", i, k ? " (generated GEMM)" : "");
            tcase *c = case_open(k ? gen : NULL, g, what);
            if (k == 1 && G.dev.cc_major >= 9) {
                /* The generated GEMM takes the group: its TMA descriptors are what
                 * re-pointing re-encodes. */
                char *r = kf_test_report(c->p, KF_REPORT_TEXT);
                if (!strstr(r, "generated kernel"))
                    fail_msg("%s: the report names no generated kernel:\n%s", what, r);
                free(r);
            }
            check_case(c, 500 + 10 * i + (uint64_t)k);
            case_close(c);
            kf_graph_destroy(g);
        }
    }
    kf_ctx_destroy(gen);
}

/* ------------------------------------------------------------------------ */
/* Capture into the caller's CUDA graph                                       */
/* ------------------------------------------------------------------------ */

enum { CAPTURE_GLOBAL = 0, CAPTURE_THREAD_LOCAL = 1 }; /* CUstreamCaptureMode */

static kf_cu_graph_exec capture(tcase *c, int mode) {
    const kf_cuda_driver *d = G.drv;
    if (!d->cuStreamBeginCapture || !d->cuStreamEndCapture || !d->cuGraphInstantiateWithFlags)
        fail_msg("the driver cannot capture (no cuStreamBeginCapture/EndCapture)");
    CK(kf_cuda_check(d, d->cuCtxSetCurrent(G.dev.ctx), "cuCtxSetCurrent", NULL, E));
    CK(kf_cuda_check(d, d->cuStreamBeginCapture(G.s1, mode), "cuStreamBeginCapture", NULL, E));
    kf_status st = kf_program_run_device(c->p, c->din[0], c->n_in, c->dout[0], c->n_out, G.s1);
    kf_cu_graph graph = NULL;
    kf_cu_result r = d->cuStreamEndCapture(G.s1, &graph);
    if (st != KF_OK)
        fail_msg("%s: kf_program_run_device while capturing (mode %d): %s: %s", c->what, mode,
                 kf_status_str(st), kf_program_error(c->p));
    CK(kf_cuda_check(d, r, "cuStreamEndCapture", NULL, E));
    kf_cu_graph_exec exec = NULL;
    CK(kf_cuda_check(d, d->cuGraphInstantiateWithFlags(&exec, graph, 0),
                     "cuGraphInstantiateWithFlags", NULL, E));
    d->cuGraphDestroy(graph);
    return exec;
}

static void replay(kf_cu_graph_exec exec) {
    CK(kf_cuda_check(G.drv, G.drv->cuGraphLaunch(exec, G.s1), "cuGraphLaunch", NULL, E));
}

static void test_in_place_captured_run_replays_with_new_inputs_and_the_same_bits(void **state) {
    (void)state;
    REQUIRE_GPU();
    const char *texts[] = {
        /* several kernels: the program's own CUDA graph outside capture */
        "kfg 1\nx = input(f32[64, 300])\na = exp(x)\ns = softmax(a)\nm = reduce_max(s, axis=1)\n"
        "output m\noutput s\n",
        /* a cuBLASLt GEMM with its epilogue kernel */
        "kfg 1\nx = input(bf16[128, 64])\nw = input(bf16[64, 96])\nb = input(bf16[96])\n"
        "h = matmul(x, w)\nhb = add(h, b)\ny = gelu(hb)\noutput y\nz = softmax(y)\noutput z\n",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        kf_graph *g = parse(texts[i]);
        char what[64];
        snprintf(what, sizeof what, "captured case %zu", i);
        tcase *c = case_open(NULL, g, what);
        /* One run first, so the capture re-points nothing: then one that
         * re-points (set 1 first, capture on set 0). */
        new_inputs(c, 1, 700 + i);
        run_device(c, 1, G.s1, "before capture");
        CK(kf_cuda_stream_sync(&G.dev, G.s1, NULL, E));
        kf_cu_graph_exec exec = capture(c, CAPTURE_THREAD_LOCAL);
        for (int round = 0; round < 3; round++) {
            new_inputs(c, 0, 800 + 10 * i + (uint64_t)round);
            poison_outputs(c, 0);
            replay(exec);
            CK(kf_cuda_stream_sync(&G.dev, G.s1, NULL, E));
            fetch_outputs(c, 0);
            judge(c, "replay with new inputs");
        }
        /* 100 replays of the same inputs: the same bits each time. */
        void **first = calloc(c->n_out, sizeof *first);
        for (size_t o = 0; o < c->n_out; o++) {
            first[o] = malloc(c->hout[o].size);
            memcpy(first[o], c->fetched[o], c->hout[o].size);
        }
        for (int rep = 0; rep < 100; rep++) {
            poison_outputs(c, 0);
            replay(exec);
            CK(kf_cuda_stream_sync(&G.dev, G.s1, NULL, E));
            fetch_outputs(c, 0);
            for (size_t o = 0; o < c->n_out; o++)
                if (memcmp(first[o], c->fetched[o], c->hout[o].size) != 0)
                    fail_msg("%s: replay %d of output %s differs from the first", what, rep,
                             c->hout[o].name);
        }
        /* A host run now matches the replays bit for bit. */
        run_host(c, "host run after replays");
        same_bits_as_host(c, "replays vs host run");
        G.drv->cuGraphExecDestroy(exec);
        /* Capture in the strictest mode (global) as well. */
        exec = capture(c, CAPTURE_GLOBAL);
        new_inputs(c, 0, 900 + i);
        poison_outputs(c, 0);
        replay(exec);
        CK(kf_cuda_stream_sync(&G.dev, G.s1, NULL, E));
        fetch_outputs(c, 0);
        judge(c, "global-mode capture replayed");
        G.drv->cuGraphExecDestroy(exec);
        for (size_t o = 0; o < c->n_out; o++)
            free(first[o]);
        free(first);
        case_close(c);
        kf_graph_destroy(g);
    }
}

/* ------------------------------------------------------------------------ */
/* Graphs the program captures from its own launches                          */
/* ------------------------------------------------------------------------ */

static void expect_in_report(kf_program *p, const char *want, const char *what) {
    char *r = kf_test_report(p, KF_REPORT_JSON);
    if (!strstr(r, want))
        fail_msg("%s: the report lacks '%s':\n%s", what, want, r);
    free(r);
}

/* One device run on buffer set `set`: fresh inputs, poisoned outputs,
 * judged against the exact value. */
static void judged_run(tcase *c, int set, uint64_t seed, const char *when) {
    new_inputs(c, set, seed);
    poison_outputs(c, set);
    run_device(c, set, G.s1, when);
    CK(kf_cuda_stream_sync(&G.dev, G.s1, NULL, E));
    fetch_outputs(c, set);
    judge(c, when);
}

/* A program with a cuBLASLt call (so prepare built no graph of its own)
 * replays a graph captured from its launches once the same buffers come
 * twice in a row: sets 0 0 0 1 1 0 1 0 are two captures and six replays,
 * each run judged with fresh inputs and poisoned outputs; a workspace
 * change drops the graphs (their pointers are the old workspace's); host
 * runs replay too and give the device runs' bits; KF_FLAG_NO_CUDA_GRAPH
 * captures nothing. */
static void test_repeated_runs_replay_a_graph_captured_from_their_own_launches(void **state) {
    (void)state;
    REQUIRE_GPU();
    const char *text = "kfg 1\nx = input(bf16[200, 96])\nw = input(bf16[96, 136])\n"
                       "b = input(bf16[136])\nh = matmul(x, w)\nhb = add(h, b)\ny = gelu(hb)\n"
                       "output y\nz = softmax(y)\noutput z\n";
    kf_ctx *lt = cuda_ctx(KF_GEMM_CUBLASLT);
    kf_graph *g = parse(text);
    tcase *c = case_open(lt, g, "captured by the program");
    const int sets[] = {0, 0, 0, 1, 1, 0, 1, 0};
    for (int k = 0; k < 8; k++) {
        char when[64];
        snprintf(when, sizeof when, "run %d on set %d", k, sets[k]);
        judged_run(c, sets[k], 1400 + (uint64_t)k, when);
    }
    expect_in_report(c->p, "\"captured_graphs\": 2, \"captured_replays\": 6", c->what);
    /* The caller's workspace: old graphs dropped, new ones captured. */
    size_t need = 0;
    assert_int_equal(kf_program_workspace_size(c->p, &need), KF_OK);
    kf_cu_deviceptr ws = 0;
    CK(kf_cuda_mem_alloc(&G.dev, need, &ws, E));
    assert_int_equal(kf_program_set_workspace(c->p, dptr_data(ws), need), KF_OK);
    for (int k = 0; k < 3; k++)
        judged_run(c, 0, 1500 + (uint64_t)k, "after a workspace change");
    expect_in_report(c->p, "\"captured_graphs\": 3, \"captured_replays\": 8", c->what);
    /* Host runs (the program's staging buffers) replay as well, with the
     * device runs' bits on the same inputs. */
    for (int k = 0; k < 3; k++) {
        poison_outputs(c, 0);
        run_host(c, "host run");
    }
    same_bits_as_host(c, "host runs replayed vs the device run");
    expect_in_report(c->p, "\"captured_graphs\": 4, \"captured_replays\": 10", c->what);
    case_close(c);
    kf_cuda_mem_free(&G.dev, ws);

    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CUDA;
    o.cache_dir = G.t.cache_dir[0] ? G.t.cache_dir : NULL;
    o.gemm = KF_GEMM_CUBLASLT;
    o.flags = KF_FLAG_NO_CUDA_GRAPH;
    kf_ctx *plain = NULL;
    assert_int_equal(kf_ctx_create(&o, &plain), KF_OK);
    c = case_open(plain, g, "no CUDA graph");
    for (int k = 0; k < 3; k++)
        judged_run(c, 0, 1600 + (uint64_t)k, "KF_FLAG_NO_CUDA_GRAPH");
    expect_in_report(c->p, "\"captured_graphs\": 0, \"captured_replays\": 0", c->what);
    case_close(c);
    kf_graph_destroy(g);
    kf_ctx_destroy(plain);
    kf_ctx_destroy(lt);
}

/* ------------------------------------------------------------------------ */
/* The caller's workspace                                                     */
/* ------------------------------------------------------------------------ */

static void test_a_caller_workspace_serves_host_and_device_runs(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_graph *g = parse("kfg 1\nx = input(bf16[96, 64])\nw = input(bf16[64, 80])\n"
                        "b = input(bf16[80])\nh = matmul(x, w)\nhb = add(h, b)\n"
                        "y = gelu(hb)\nz = softmax(y)\noutput z\n");
    tcase *c = case_open(NULL, g, "workspace case");
    size_t need = 0;
    assert_int_equal(kf_program_workspace_size(c->p, &need), KF_OK);
    assert_true(need > 0);
    kf_cu_deviceptr ws = 0;
    CK(kf_cuda_mem_alloc(&G.dev, need + 512, &ws, E));
    /* Garbage in the workspace: nothing may depend on zeros. */
    unsigned char *junk = malloc(need + 512);
    memset(junk, 0xFF, need + 512);
    CK(kf_cuda_copy_to_device(&G.dev, ws, junk, need + 512, E));
    free(junk);
    /* Refused: too small, misaligned, a host pointer; each says why. */
    assert_int_equal(kf_program_set_workspace(c->p, dptr_data(ws), need - 1),
                     KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kf_program_error(c->p), "kf_program_workspace_size"));
    assert_int_equal(kf_program_set_workspace(c->p, dptr_data(ws + 16), need),
                     KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kf_program_error(c->p), "aligned"));
    void *host = aligned_alloc(256, need + 256);
    assert_int_equal(kf_program_set_workspace(c->p, host, need), KF_ERR_INVALID_ARGUMENT);
    fprintf(stderr, "host workspace: %s\n", kf_program_error(c->p));
    free(host);
    /* Served from the caller's memory. */
    assert_int_equal(kf_program_set_workspace(c->p, dptr_data(ws), need + 512), KF_OK);
    check_case(c, 1200);
    /* Back to the program's own. */
    assert_int_equal(kf_program_set_workspace(c->p, NULL, 0), KF_OK);
    check_case(c, 1300);
    case_close(c);
    kf_cuda_mem_free(&G.dev, ws);
    kf_graph_destroy(g);
}

/* ------------------------------------------------------------------------ */
/* One stream at a time                                                       */
/* ------------------------------------------------------------------------ */

static void test_a_run_on_a_second_stream_is_refused_while_the_first_is_in_flight(void **state) {
    (void)state;
    REQUIRE_GPU();
    /* 128 MiB in, 128 MiB out per run: fifty runs keep the first stream
     * busy for milliseconds, far longer than enqueueing them takes. */
    kf_graph *g = parse("kfg 1\nx = input(f32[4096, 8192])\na = exp(x)\nb = mul(a, x)\n"
                        "output b\n");
    tcase *c = case_open(NULL, g, "busy case");
    new_inputs(c, 0, 1400);
    for (int i = 0; i < 50; i++)
        run_device(c, 0, G.s1, "stream 1");
    kf_status st = kf_program_run_device(c->p, c->din[0], c->n_in, c->dout[0], c->n_out, G.s2);
    assert_int_equal(st, KF_ERR_BUSY);
    assert_non_null(strstr(kf_program_error(c->p), "one stream at a time"));
    st = kf_program_run(c->p, c->hin, c->n_in, c->hout, c->n_out, NULL); /* its own stream */
    assert_int_equal(st, KF_ERR_BUSY);
    /* Once the first stream is done the second may run, and is right. */
    CK(kf_cuda_stream_sync(&G.dev, G.s1, NULL, E));
    poison_outputs(c, 0);
    run_device(c, 0, G.s2, "stream 2 after stream 1 completed");
    CK(kf_cuda_stream_sync(&G.dev, G.s2, NULL, E));
    fetch_outputs(c, 0);
    judge(c, "stream 2");
    case_close(c);
    kf_graph_destroy(g);
}

/* ------------------------------------------------------------------------ */
/* Bad pointers                                                               */
/* ------------------------------------------------------------------------ */

/* Runs with input 'x' bound to `data` and expects KF_ERR_INVALID_ARGUMENT
 * with a message naming 'x' and holding `says`. */
static void expect_refused(tcase *c, bool device, int which, void *data, const char *says) {
    kf_binding *in = bindings(c->n_in);
    memcpy(in, device ? c->din[0] : c->hin, c->n_in * sizeof *in);
    in[which].data = data;
    kf_status st = device ? kf_program_run_device(c->p, in, c->n_in, c->dout[0], c->n_out, G.s1)
                          : kf_program_run(c->p, in, c->n_in, c->hout, c->n_out, NULL);
    const char *m = kf_program_error(c->p);
    fprintf(stderr, "  refused: %s\n", m);
    if (st != KF_ERR_INVALID_ARGUMENT || !strstr(m, "'x'") || !strstr(m, says))
        fail_msg("expected KF_ERR_INVALID_ARGUMENT naming 'x' and saying '%s'; got %s: %s", says,
                 kf_status_str(st), m);
    free(in);
}

static void test_bad_pointers_are_refused_naming_the_binding(void **state) {
    (void)state;
    REQUIRE_GPU();
    const kf_cuda_driver *d = G.drv;
    /* x: 2 MiB, a multiple of any allocation granularity. */
    kf_graph *g = parse("kfg 1\nx = input(f32[512, 1024])\ny = exp(x)\noutput y\n");
    tcase *c = case_open(NULL, g, "bad pointers");
    assert_string_equal(kf_graph_input_count(g) ? c->hin[0].name : "", "x");
    new_inputs(c, 0, 1500);
    size_t bytes = c->hin[0].size;
    /* A host pointer as a device pointer. */
    expect_refused(c, true, 0, c->hin[0].data, "not CUDA memory");
    /* Page-locked host memory as a device pointer. */
    if (d->cuMemAllocHost && d->cuMemFreeHost) {
        void *pinned = NULL;
        CK(kf_cuda_check(d, d->cuMemAllocHost(&pinned, bytes), "cuMemAllocHost", NULL, E));
        expect_refused(c, true, 0, pinned, "page-locked");
        d->cuMemFreeHost(pinned);
    }
    /* A device pointer as a host pointer. */
    expect_refused(c, false, 0, c->din[0][0].data, "device memory");
    /* Misaligned by 4 bytes (inside a larger allocation). */
    kf_cu_deviceptr big = 0;
    CK(kf_cuda_mem_alloc(&G.dev, bytes + 4096, &big, E));
    expect_refused(c, true, 0, dptr_data(big + 4), "aligned");
    /* Shorter than the tensor: 64 KiB into an allocation of exactly its size. */
    expect_refused(c, true, 0, dptr_data(data_dptr(c->din[0][0].data) + 65536), "shorter");
    /* NULL. */
    expect_refused(c, true, 0, NULL, "NULL");
    /* Memory of another context on the same device. */
    if (d->cuCtxCreate && d->cuCtxDestroy) {
        kf_cu_context other = NULL;
        CK(kf_cuda_check(d, d->cuCtxCreate(&other, 0, G.dev.dev), "cuCtxCreate", NULL, E));
        kf_cu_deviceptr foreign = 0;
        CK(kf_cuda_check(d, d->cuMemAlloc(&foreign, bytes), "cuMemAlloc", NULL, E));
        expect_refused(c, true, 0, dptr_data(foreign), "another CUDA context");
        CK(kf_cuda_check(d, d->cuCtxSetCurrent(other), "cuCtxSetCurrent", NULL, E));
        d->cuMemFree(foreign);
        d->cuCtxDestroy(other);
        CK(kf_cuda_check(d, d->cuCtxSetCurrent(G.dev.ctx), "cuCtxSetCurrent", NULL, E));
    } else {
        fprintf(stderr, "  the driver has no cuCtxCreate_v2: the other-context case not run\n");
    }
    /* Output bindings are checked too. */
    {
        kf_binding *out = bindings(c->n_out);
        memcpy(out, c->dout[0], c->n_out * sizeof *out);
        out[0].data = c->hout[0].data;
        assert_int_equal(kf_program_run_device(c->p, c->din[0], c->n_in, out, c->n_out, G.s1),
                         KF_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(kf_program_error(c->p), "output 'y'"));
        free(out);
    }
    /* After all that, a good run is right (nothing was half-bound). */
    poison_outputs(c, 0);
    run_device(c, 0, G.s1, "after the refusals");
    CK(kf_cuda_stream_sync(&G.dev, G.s1, NULL, E));
    fetch_outputs(c, 0);
    judge(c, "after the refusals");
    kf_cuda_mem_free(&G.dev, big);
    case_close(c);
    kf_graph_destroy(g);
}

/* Issue 16 item 4: the CUDA target clamps a gather index outside its axis
 * into it (the nearest row is read) and reports it through
 * kf_program_index_clamps: after a host-pointer run (read at its own
 * synchronization) and after a device-resident run (the call waits for the
 * stream), once each (the call clears the flag); in-range indices report
 * nothing. */
static void test_in_place_gather_clamps_out_of_range_indices_and_reports_them(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_graph *g = parse("kfg 1\nw = input(f32[8, 16])\ni = input(i32[5])\n"
                        "e = gather(w, i, axis=0)\ntwo = const(f32[], 2)\ny = mul(e, two)\n"
                        "output y\n");
    kf_program *p = NULL;
    CK(kf_compile(G.t.ctx, g, &p));
    float w[128], y[80];
    for (int k = 0; k < 128; k++)
        w[k] = (float)(k / 16 * 100 + k % 16);
    const int32_t bad[5] = {0, 7, 9, -3, 2}, good[5] = {1, 2, 3, 4, 5};
    const int rows_bad[5] = {0, 7, 7, 0, 2};
    int clamped = -1;
    /* host-pointer runs */
    for (int pass = 0; pass < 2; pass++) {
        const int32_t *ids = pass ? good : bad;
        kf_binding in[2] = {{"w", w, sizeof w}, {"i", (void *)ids, sizeof bad}};
        kf_binding out = {"y", y, sizeof y};
        for (int k = 0; k < 80; k++)
            y[k] = NAN;
        CK(kf_program_run(p, in, 2, &out, 1, NULL));
        for (int r = 0; r < 5; r++)
            for (int k = 0; k < 16; k++) {
                int row = pass ? good[r] : rows_bad[r];
                if (!(y[r * 16 + k] == 2.0f * (float)(row * 100 + k)))
                    fail_msg("host run %d: y[%d][%d] = %g, want row %d", pass, r, k,
                             (double)y[r * 16 + k], row);
            }
        CK(kf_program_index_clamps(p, NULL, &clamped));
        assert_int_equal(clamped, pass ? 0 : 1);
        CK(kf_program_index_clamps(p, NULL, &clamped));
        assert_int_equal(clamped, 0); /* cleared by the call */
    }
    /* device-resident runs on the caller's stream */
    kf_cu_deviceptr dw = 0, di = 0, dy = 0;
    CK(kf_cuda_mem_alloc(&G.dev, sizeof w, &dw, E));
    CK(kf_cuda_mem_alloc(&G.dev, sizeof bad, &di, E));
    CK(kf_cuda_mem_alloc(&G.dev, sizeof y, &dy, E));
    CK(kf_cuda_copy_to_device(&G.dev, dw, w, sizeof w, E));
    for (int pass = 0; pass < 2; pass++) {
        CK(kf_cuda_copy_to_device(&G.dev, di, pass ? good : bad, sizeof bad, E));
        kf_binding in[2] = {{"w", dptr_data(dw), sizeof w}, {"i", dptr_data(di), sizeof bad}};
        kf_binding out = {"y", dptr_data(dy), sizeof y};
        CK(kf_program_run_device(p, in, 2, &out, 1, G.s1));
        CK(kf_program_index_clamps(p, G.s1, &clamped)); /* waits for s1 */
        assert_int_equal(clamped, pass ? 0 : 1);
        CK(kf_cuda_copy_to_host(&G.dev, y, dy, sizeof y, E));
        for (int r = 0; r < 5; r++) {
            int row = pass ? good[r] : rows_bad[r];
            if (!(y[r * 16 + 5] == 2.0f * (float)(row * 100 + 5)))
                fail_msg("device run %d: y[%d][5] = %g, want row %d", pass, r,
                         (double)y[r * 16 + 5], row);
        }
    }
    kf_cuda_mem_free(&G.dev, dw);
    kf_cuda_mem_free(&G.dev, di);
    kf_cuda_mem_free(&G.dev, dy);
    kf_program_destroy(p);
    kf_graph_destroy(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_place_ragged_shapes_in_exact_buffers_match),
        cmocka_unit_test(test_in_place_gather_clamps_out_of_range_indices_and_reports_them),
        cmocka_unit_test(test_in_place_captured_run_replays_with_new_inputs_and_the_same_bits),
        cmocka_unit_test(test_repeated_runs_replay_a_graph_captured_from_their_own_launches),
        cmocka_unit_test(test_bad_pointers_are_refused_naming_the_binding),
        cmocka_unit_test(test_a_caller_workspace_serves_host_and_device_runs),
        cmocka_unit_test(test_a_run_on_a_second_stream_is_refused_while_the_first_is_in_flight),
        cmocka_unit_test(test_device_runs_of_every_example_match_the_host_run_bit_for_bit),
    };
    kf_test_filter();
    int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
    if (!G.t.have) {
        fprintf(stderr, "test_device_run: no CUDA device (%s): every test skipped\n", G.t.why);
        return 77;
    }
    return kf_test_run_(failed);
}
