/*
 * gensrc.c -- (scripts/emu/emu.py) writes the source of every generated CUDA
 * kernel of a .kfg graph's recipes for an arch into a directory, one
 * NAME.cu each, and prints their paths: gensrc FILE.kfg ARCH DIR [FLAGS].
 */
#include "codegen/cuda/cuda_recipe.h"
#include "frontend/compile.h"
#include "fusion/fusion.h"
#include "kfuse.h"
#include "runtime/ctx.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "gensrc file.kfg arch outdir [flags]\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CPU;
    kf_ctx *ctx = NULL;
    if (kf_ctx_create(&o, &ctx) != KF_OK)
        return 1;
    kf_graph *g = NULL;
    if (kf_graph_parse(ctx, text, n, &g) != KF_OK) {
        fprintf(stderr, "parse %s\n", g ? kf_graph_error(g) : "");
        return 1;
    }
    kf_plan_options po;
    kf_plan_options_for_flags(argc > 4 ? (unsigned)atoi(argv[4]) : 0, &po);
    kf_plan *plan = NULL;
    if (kf_plan_create(g, &po, &plan) != KF_OK) {
        fprintf(stderr, "plan %s\n", kf_graph_error(g));
        return 1;
    }
    kf_cuda_target t;
    kf_cuda_target_for_arch(argv[2], &t);
    kf_cuda_recipes *rec = NULL;
    char err[KF_MSG_MAX];
    kf_mem mem;
    kf_mem_resolve(&mem, NULL);
    if (kf_cuda_recipes_create(plan, &t, &mem, &rec, err) != KF_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    for (uint32_t r = 0; r < rec->n; r++)
        for (uint32_t s = 0; s < rec->recipes[r].n_steps; s++) {
            kf_cuda_step *st = &rec->recipes[r].steps[s];
            if (st->kind != KF_CUDA_STEP_KERNEL)
                continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s.cu", argv[3], st->kernel->kernel.name);
            FILE *w = fopen(p, "w");
            if (!w) {
                perror(p);
                return 1;
            }
            fwrite(st->kernel->kernel.source, 1, st->kernel->kernel.source_len, w);
            fclose(w);
            printf("%s block %u vec %u\n", p, st->kernel->kernel.launch.block,
                   st->kernel->kernel.vec);
        }
    kf_cuda_recipes_destroy(rec);
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    return 0;
}
