/*
 * main.c -- a tiny program outside the kfuse tree, built against an installed
 * kfuse (find_package and pkg-config): builds z = x + y, evaluates it with the
 * reference evaluator and checks the values.
 */
#include <kfuse.h>

#include <stdio.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)

static int fail(const char *what, const kf_graph *g) {
    fprintf(stderr, "consumer: %s: %s\n", what, g ? kf_graph_error(g) : "");
    return 1;
}

int main(void) {
    const char *want = STR(KF_VERSION_MAJOR) "." STR(KF_VERSION_MINOR) "." STR(KF_VERSION_PATCH);
    if (strcmp(kf_version(), want) != 0) {
        fprintf(stderr, "consumer: library %s, header %s\n", kf_version(), want);
        return 1;
    }

    kf_ctx *ctx = NULL;
    kf_graph *g = NULL;
    if (kf_ctx_create(NULL, &ctx) != KF_OK)
        return fail("kf_ctx_create", NULL);
    if (kf_graph_create(ctx, &g) != KF_OK)
        return fail("kf_graph_create", NULL);

    const int64_t dims[1] = {4};
    kf_tensor *x = kf_input(g, "x", KF_DTYPE_F32, 1, dims);
    kf_tensor *y = kf_input(g, "y", KF_DTYPE_F32, 1, dims);
    kf_tensor *z = kf_add(g, x, y);
    if (kf_output(g, "z", z) != KF_OK || kf_graph_status(g) != KF_OK)
        return fail("building add(x, y)", g);

    float xs[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    float ys[4] = {0.5f, -2.0f, 10.0f, 0.25f};
    float zs[4] = {0};
    const kf_binding in[2] = {{"x", xs, sizeof xs}, {"y", ys, sizeof ys}};
    const kf_binding out[1] = {{"z", zs, sizeof zs}};
    if (kf_graph_eval(g, in, 2, out, 1) != KF_OK)
        return fail("kf_graph_eval", g);
    for (int i = 0; i < 4; i++) {
        if (zs[i] != xs[i] + ys[i]) {
            fprintf(stderr, "consumer: z[%d] = %g, expected %g\n", i, zs[i], xs[i] + ys[i]);
            return 1;
        }
    }

    /* Compile and run it on the CPU too, as a framework would: this pulls the
     * LLVM backend into a static link (a build without LLVM says so). */
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CPU;
    o.flags = KF_FLAG_NO_CACHE;
    kf_ctx *cpu = NULL;
    kf_graph *g2 = NULL;
    kf_program *prog = NULL;
    if (kf_ctx_create(&o, &cpu) != KF_OK || kf_graph_create(cpu, &g2) != KF_OK)
        return fail("a CPU context", NULL);
    kf_tensor *x2 = kf_input(g2, "x", KF_DTYPE_F32, 1, dims);
    kf_tensor *y2 = kf_input(g2, "y", KF_DTYPE_F32, 1, dims);
    if (kf_output(g2, "z", kf_add(g2, x2, y2)) != KF_OK)
        return fail("building add(x, y) for the CPU", g2);
    kf_status st = kf_compile(cpu, g2, &prog);
    if (st == KF_OK) {
        float zc[4] = {0};
        const kf_binding outc[1] = {{"z", zc, sizeof zc}};
        if (kf_program_run(prog, in, 2, outc, 1, NULL) != KF_OK) {
            fprintf(stderr, "consumer: kf_program_run: %s\n", kf_program_error(prog));
            return 1;
        }
        if (memcmp(zc, zs, sizeof zc) != 0) {
            fprintf(stderr, "consumer: the CPU backend's z differs from the evaluator's\n");
            return 1;
        }
    } else if (st != KF_ERR_UNSUPPORTED) {
        return fail("kf_compile for the CPU", g2);
    }
    kf_program_destroy(prog);
    kf_graph_destroy(g2);
    kf_ctx_destroy(cpu);

    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    printf("consumer: kfuse %s, z = [%g, %g, %g, %g]\n", kf_version(), zs[0], zs[1], zs[2], zs[3]);
    return 0;
}
