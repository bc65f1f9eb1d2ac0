/*
 * recipe_print.c -- the recipes as the report shows them: text (one block
 * per group) and the JSON value of the report's "cuda" member (schema in
 * docs/report-schema.md). Both are deterministic: what `kfuse report` prints
 * with no GPU is byte for byte what a program compiled on the GPU prints for
 * the same target, which tests compare.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cuda/cuda_recipe.h"

static const char *choice_name(kf_cuda_choice c) {
    return c == KF_CUDA_CHOICE_MEASURED ? "measured" : "only";
}

static const char *arg_kind_name(kf_cuda_arg_kind k) {
    static const char *const names[] = {"ptr", "i64", "tmap"};
    _Static_assert(sizeof names / sizeof names[0] == KF_CUDA_ARG_COUNT, "one name per kind");
    return (unsigned)k < KF_CUDA_ARG_COUNT ? names[k] : "?";
}

static const char *scratch_role_name(kf_cuda_param_kind k) {
    switch (k) {
    case KF_CUDA_PARAM_ACC:
        return "acc";
    case KF_CUDA_PARAM_SCORES:
        return "scores";
    case KF_CUDA_PARAM_SCRATCH:
        return "scratch";
    case KF_CUDA_PARAM_COUNTERS:
        return "counters";
    case KF_CUDA_PARAM_PARTIALS:
        return "partials";
    default:
        return "?";
    }
}

/* "%12", "%12+4096", "s0", "-"; with `names` (the text form), a named tensor
 * prints as its name ("wq", "wq+4096"). The JSON keeps %ID: stable, and never
 * confused with a scratch buffer's "s0". */
static void buf_str(kf_cuda_buf b, const kf_plan *names, char *out, size_t size) {
    switch (b.kind) {
    case KF_CUDA_BUF_TENSOR:
        if (names && b.id < names->graph->n_nodes && names->graph->nodes[b.id]->name)
            snprintf(out, size, "%s", names->graph->nodes[b.id]->name);
        else
            snprintf(out, size, "%%%" PRIu32, b.id);
        break;
    case KF_CUDA_BUF_SCRATCH:
        snprintf(out, size, "s%" PRIu32, b.id);
        break;
    case KF_CUDA_BUF_FLAGS:
        snprintf(out, size, "flags");
        break;
    default:
        snprintf(out, size, "-");
        return;
    }
    if (b.offset) {
        size_t n = strlen(out);
        snprintf(out + n, size - n, "+%" PRId64, b.offset);
    }
}

static void json_operand(FILE *out, const char *key, const kf_cuda_operand *o) {
    char bs[48];
    buf_str(o->buf, NULL, bs, sizeof bs);
    fprintf(out, "\"%s\": {\"buf\": ", key);
    kf_ir_json_string(out, bs);
    fprintf(out,
            ", \"row_stride\": %" PRId64 ", \"col_stride\": %" PRId64 ", \"batch_stride\": %" PRId64
            "}",
            o->row_stride, o->col_stride, o->batch_stride);
}

static void json_kernel(FILE *out, const kf_cuda_kstep *k) {
    char bs[48];
    fputs("{\"kind\": \"kernel\", \"name\": ", out);
    kf_ir_json_string(out, k->kernel.name);
    fputs(", \"role\": ", out);
    kf_ir_json_string(out, kf_cuda_role_name(k->role));
    fputs(", \"template\": ", out);
    kf_ir_json_string(out, kf_cuda_template_name(k->kernel.tmpl));
    fprintf(out, ", \"source\": \"fnv1a64:%016" PRIx64 "\"", k->digest);
    fprintf(out, ", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], \"cluster\": [%u, %u, %u]",
            k->grid[0], k->grid[1], k->grid[2], k->block[0], k->block[1], k->block[2],
            k->cluster[0], k->cluster[1], k->cluster[2]);
    fprintf(out, ", \"shared_bytes\": %u, \"args\": [", k->shared_bytes);
    for (uint32_t i = 0; i < k->n_args; i++) {
        const kf_cuda_arg *a = &k->args[i];
        fprintf(out, "%s{\"kind\": \"%s\"", i ? ", " : "", arg_kind_name(a->kind));
        if (a->kind == KF_CUDA_ARG_I64) {
            fprintf(out, ", \"value\": %" PRId64 "}", a->value);
            continue;
        }
        buf_str(a->buf, NULL, bs, sizeof bs);
        fputs(", \"buf\": ", out);
        kf_ir_json_string(out, bs);
        fprintf(out, ", \"access\": \"%s\"", a->written ? "w" : "r");
        if (a->kind == KF_CUDA_ARG_TMAP && a->value >= 0 && a->value < (int64_t)k->n_tmaps) {
            const kf_cuda_tmap *t = &k->tmaps[a->value];
            fprintf(out, ", \"tmap\": {\"dtype\": \"%s\", \"dims\": [", kf_dtype_name(t->dtype));
            for (int d = 0; d < t->rank; d++)
                fprintf(out, "%s%" PRIu64, d ? ", " : "", t->dims[d]);
            fputs("], \"box\": [", out);
            for (int d = 0; d < t->rank; d++)
                fprintf(out, "%s%u", d ? ", " : "", t->box[d]);
            fprintf(out, "], \"swizzle\": %u}", t->swizzle);
        }
        fputc('}', out);
    }
    fputs("]}", out);
}

static void json_gemm(FILE *out, const kf_cuda_gstep *g) {
    char bs[48];
    fprintf(out,
            "{\"kind\": \"gemm\", \"library\": \"cublaslt\", \"dtype\": \"%s\", \"m\": %" PRId64
            ", \"n\": %" PRId64 ", \"k\": %" PRId64 ", \"batch\": %" PRId64
            ", \"epilogue\": \"%s\", \"beta\": %g, ",
            kf_dtype_name(g->dtype), g->m, g->n, g->k, g->batch,
            kf_cuda_lt_epilogue_name(g->epilogue), g->beta);
    json_operand(out, "a", &g->a);
    fputs(", ", out);
    json_operand(out, "b", &g->b);
    fputs(", ", out);
    json_operand(out, "c", &g->c);
    fputs(", ", out);
    json_operand(out, "d", &g->d);
    buf_str(g->bias, NULL, bs, sizeof bs);
    fputs(", \"bias\": ", out);
    kf_ir_json_string(out, bs);
    fputc('}', out);
}

static void print_json(const kf_cuda_recipes *r, FILE *out) {
    fputs("{\"arch\": ", out);
    kf_ir_json_string(out, r->target.arch);
    uint64_t f = r->target.flags;
    const char *names[6];
    int n = 0;
    if (f & KF_CUDA_RECIPE_NO_LT_EPILOGUE)
        names[n++] = "no_lt_epilogue";
    if (f & KF_CUDA_RECIPE_GEMM_GENERATED)
        names[n++] = "gemm_generated";
    else if (f & KF_CUDA_RECIPE_GEMM_MEASURED)
        names[n++] = "gemm_measured";
    if (f & KF_CUDA_RECIPE_UNFUSED_ATTENTION)
        names[n++] = "unfused_attention";
    if (f & KF_CUDA_RECIPE_ATTENTION_FA2)
        names[n++] = "attention_fa2";
    if (f & KF_CUDA_RECIPE_ATTENTION_DECODE)
        names[n++] = "attention_decode";
    fprintf(out, ", \"sm_count\": %d, \"flags\": [", r->target.sm_count);
    for (int i = 0; i < n; i++)
        fprintf(out, "%s\"%s\"", i ? ", " : "", names[i]);
    fputs("], \"recipes\": [", out);
    for (uint32_t i = 0; i < r->n; i++) {
        const kf_cuda_recipe *rc = &r->recipes[i];
        fprintf(out, "%s\n    {\"group\": %u, \"choice\": \"%s\", \"scratch\": [", i ? "," : "",
                rc->group, choice_name(rc->choice));
        for (uint32_t s = 0; s < rc->n_scratch; s++)
            fprintf(out, "%s{\"role\": \"%s\", \"tensor\": \"%%%u\", \"bytes\": %" PRIu64 "}",
                    s ? ", " : "", scratch_role_name(rc->scratch[s].role), rc->scratch[s].tensor,
                    rc->scratch[s].bytes);
        fputs("], \"variants\": [", out);
        for (uint32_t v = 0; v < rc->n_variants; v++) {
            const kf_cuda_variant *va = &rc->variants[v];
            fputs(v ? ", {\"label\": " : "{\"label\": ", out);
            kf_ir_json_string(out, va->label);
            fputs(", \"how\": ", out);
            kf_ir_json_string(out, va->how);
            fputs(", \"steps\": [", out);
            for (uint32_t s = 0; s < va->n_steps; s++) {
                const kf_cuda_step *st = &rc->steps[va->first_step + s];
                fputs(s ? ",\n        " : "\n        ", out);
                if (st->kind == KF_CUDA_STEP_KERNEL)
                    json_kernel(out, st->kernel);
                else
                    json_gemm(out, &st->gemm);
            }
            fputs("]}", out);
        }
        fputs("]}", out);
    }
    fputs("]}", out);
}

static void text_operand(FILE *out, const kf_plan *plan, const char *key,
                         const kf_cuda_operand *o) {
    char bs[96];
    buf_str(o->buf, plan, bs, sizeof bs);
    fprintf(out, " %s=%s[%" PRId64 ",%" PRId64 ",%" PRId64 "]", key, bs, o->row_stride,
            o->col_stride, o->batch_stride);
}

static void print_text(const kf_cuda_recipes *r, FILE *out) {
    char bs[96];
    fprintf(out, "cuda recipes: arch %s, %d SMs%s%s%s\n", r->target.arch, r->target.sm_count,
            (r->target.flags & KF_CUDA_RECIPE_NO_LT_EPILOGUE) ? ", no cuBLASLt epilogues" : "",
            (r->target.flags & KF_CUDA_RECIPE_GEMM_GENERATED)  ? ", generated GEMMs"
            : (r->target.flags & KF_CUDA_RECIPE_GEMM_MEASURED) ? ", GEMMs measured"
                                                               : "",
            (r->target.flags & KF_CUDA_RECIPE_UNFUSED_ATTENTION) ? ", attention unfused" : "");
    for (uint32_t i = 0; i < r->n; i++) {
        const kf_cuda_recipe *rc = &r->recipes[i];
        const kf_group *grp = &r->plan->groups[rc->group];
        fprintf(out, "  group %u %-11s %s%s\n", rc->group, kf_group_kind_name(grp->kind), grp->name,
                rc->choice == KF_CUDA_CHOICE_MEASURED ? " (measured choice)" : "");
        for (uint32_t s = 0; s < rc->n_scratch; s++) {
            buf_str((kf_cuda_buf){KF_CUDA_BUF_TENSOR, rc->scratch[s].tensor, 0}, r->plan, bs,
                    sizeof bs);
            fprintf(out, "    scratch s%u: %s of %s, %" PRIu64 " bytes\n", s,
                    scratch_role_name(rc->scratch[s].role), bs, rc->scratch[s].bytes);
        }
        for (uint32_t v = 0; v < rc->n_variants; v++) {
            const kf_cuda_variant *va = &rc->variants[v];
            fprintf(out, "    [%s] %s\n", va->label, va->how);
            for (uint32_t s = 0; s < va->n_steps; s++) {
                const kf_cuda_step *st = &rc->steps[va->first_step + s];
                if (st->kind == KF_CUDA_STEP_KERNEL) {
                    const kf_cuda_kstep *k = st->kernel;
                    fprintf(out, "      kernel %s (%s, %s) grid %ux%ux%u block %ux%ux%u",
                            k->kernel.name, kf_cuda_role_name(k->role),
                            kf_cuda_template_name(k->kernel.tmpl), k->grid[0], k->grid[1],
                            k->grid[2], k->block[0], k->block[1], k->block[2]);
                    if (k->cluster[0] * k->cluster[1] * k->cluster[2] > 1)
                        fprintf(out, " cluster %ux%ux%u", k->cluster[0], k->cluster[1],
                                k->cluster[2]);
                    fprintf(out, " smem %u source %016" PRIx64 "\n        args", k->shared_bytes,
                            k->digest);
                    for (uint32_t a = 0; a < k->n_args; a++) {
                        const kf_cuda_arg *ar = &k->args[a];
                        if (ar->kind == KF_CUDA_ARG_I64) {
                            fprintf(out, " %" PRId64, ar->value);
                            continue;
                        }
                        buf_str(ar->buf, r->plan, bs, sizeof bs);
                        fprintf(out, " %s%s%s", ar->kind == KF_CUDA_ARG_TMAP ? "tmap:" : "", bs,
                                ar->written ? "(w)" : "");
                    }
                    fputc('\n', out);
                } else {
                    const kf_cuda_gstep *g = &st->gemm;
                    fprintf(out,
                            "      gemm cublaslt %s m=%" PRId64 " n=%" PRId64 " k=%" PRId64
                            " batch=%" PRId64 " epilogue=%s",
                            kf_dtype_name(g->dtype), g->m, g->n, g->k, g->batch,
                            kf_cuda_lt_epilogue_name(g->epilogue));
                    text_operand(out, r->plan, "a", &g->a);
                    text_operand(out, r->plan, "b", &g->b);
                    if (g->c.buf.kind != KF_CUDA_BUF_NONE)
                        text_operand(out, r->plan, "c", &g->c);
                    text_operand(out, r->plan, "d", &g->d);
                    if (g->bias.kind != KF_CUDA_BUF_NONE) {
                        buf_str(g->bias, r->plan, bs, sizeof bs);
                        fprintf(out, " bias=%s", bs);
                    }
                    fputc('\n', out);
                }
            }
        }
    }
}

kf_status kf_cuda_recipes_print(const kf_cuda_recipes *r, bool json, FILE *out) {
    if (!r || !out)
        return KF_ERR_INVALID_ARGUMENT;
    if (json)
        print_json(r, out);
    else
        print_text(r, out);
    return ferror(out) ? KF_ERR_IO : KF_OK;
}
