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

    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    printf("consumer: kfuse %s, z = [%g, %g, %g, %g]\n", kf_version(), zs[0], zs[1], zs[2], zs[3]);
    return 0;
}
