/*
 * report.c -- `kfuse report`: the plan as a readable table and as JSON
 * (schema "kfuse.report/2", documented in docs/report-schema.md).
 *
 * Text: a summary table (group, kind, kernel name, ops absorbed, bytes saved,
 * estimated time), then per group its reads and writes with their types (the
 * IR printer's type strings, kf_ir_type_str) and expressions, then every edge
 * the planner did not fuse with its reason code and explanation. Cost columns
 * read the group's cost fields, which kf_plan_estimate fills; before that they
 * show "-" (text) or null (JSON).
 */
#include <math.h>
#include <string.h>

#include "fusion/fusion.h"

static const char *tname(const kf_plan *plan, uint32_t id, char *buf, size_t size) {
    const kf_tensor *t = plan->graph->nodes[id];
    if (t->name)
        return t->name;
    snprintf(buf, size, "%%%u", id);
    return buf;
}

/* The bytes an ATTENTION group keeps on chip against the unfused path, which
 * writes the [Sq x Skv] scores of every head and reads them back (softmax),
 * then writes P and reads it back (P.V): 4 x Sq x Skv x the scores' element
 * size per head; *per_head gets one head's share. */
static double attn_bytes_saved(const kf_plan *plan, const kf_group *g, double *per_head) {
    const kf_attn_info *at = &g->attn;
    double heads = 1.0;
    for (int d = 0; d < g->rank - 2; d++)
        heads *= (double)g->dims[d];
    *per_head = 4.0 * (double)at->sq * (double)at->skv *
                (double)kf_dtype_size(plan->graph->nodes[at->qk]->dtype);
    return *per_head * heads;
}

static void put_bytes(FILE *out, double b) {
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (fabs(b) >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    fprintf(out, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

static void put_time(FILE *out, double s) {
    if (s >= 1e-3)
        fprintf(out, "%.3g ms", s * 1e3);
    else
        fprintf(out, "%.3g us", s * 1e6);
}

/* The ops a group absorbed, as "op(name), ...". */
/* The bound fuse_siblings applied, as "16 outputs" or "32 arguments". */
static void sibling_bound_text(const kf_plan *plan, const kf_group *g, char *buf, size_t size) {
    bool outs = strcmp(g->sibling_bound, "outputs") == 0;
    uint32_t v = outs ? plan->options.sibling_max_outputs : plan->options.sibling_max_args;
    if (v == 0)
        v = outs ? KF_SIBLING_MAX_OUTPUTS : KF_SIBLING_MAX_ARGS;
    snprintf(buf, size, "%u %s", v, outs ? "outputs" : "arguments");
}

/* A GEMM sibling set's saving (fusion/fuse_gemm_siblings.c): every member
 * but one no longer reads the norm's input for the row statistics (or for
 * the normalized A): (count - 1) x that input's bytes. */
static double gemm_sib_bytes_saved(const kf_plan *plan, const kf_group *g) {
    const kf_tensor *a = plan->graph->nodes[g->gemm.a[0]];
    const kf_tensor *x = a->nsrc > 0 ? a->src[0] : a;
    return (double)(g->gemm.sib_count - 1) * (double)kf_ir_numel(x) *
           (double)kf_dtype_size(x->dtype);
}

/* The set's members (their matmuls), as "%23, %29, %35". */
static void put_gemm_sibs(const kf_plan *plan, const kf_group *g, FILE *out, bool json) {
    char nb[24];
    for (uint32_t i = 0; i < g->gemm.sib_count; i++) {
        const kf_group *m = &plan->groups[g->gemm.sib_first + i];
        fputs(i ? ", " : "", out);
        if (json)
            kf_ir_json_string(out, tname(plan, m->gemm.anchor[0], nb, sizeof nb));
        else
            fputs(tname(plan, m->gemm.anchor[0], nb, sizeof nb), out);
    }
}

static void put_ops(const kf_plan *plan, const kf_group *g, FILE *out, size_t max) {
    size_t shown = 0;
    for (uint32_t i = 0; i < g->n_computed; i++) {
        const kf_tensor *t = plan->graph->nodes[g->computed[i]];
        if (kf_op_has(t->op, KF_TRAIT_SOURCE) && t->id != g->anchor)
            continue;
        if (shown == max) {
            fputs(", ...", out);
            break;
        }
        fprintf(out, "%s%s", shown ? ", " : "", kf_op_get(t->op)->name);
        shown++;
    }
}

static void put_tensor_list(const kf_plan *plan, const uint32_t *ids, uint32_t n, FILE *out) {
    char nb[24], ts[160];
    for (uint32_t i = 0; i < n; i++) {
        const kf_tensor *t = plan->graph->nodes[ids[i]];
        fprintf(out, "%s%s %s", i ? ", " : "", tname(plan, ids[i], nb, sizeof nb),
                kf_ir_type_str(t, ts, sizeof ts));
    }
}

static void report_text(const kf_plan *plan, FILE *out) {
    bool cost = plan->device[0] != '\0';
    uint32_t views = plan->n_groups - kf_plan_kernel_count(plan);
    fprintf(out, "%u kernels", kf_plan_kernel_count(plan));
    if (views)
        fprintf(out, " (+%u view%s, no kernel)", views, views == 1 ? "" : "s");
    fprintf(out, " for %u tensors", plan->graph->n_nodes);
    if (cost)
        fprintf(out, "; device %s", plan->device);
    fputc('\n', out);
    if (plan->idioms.rms_norm || plan->idioms.gelu_tanh) {
        fputs("recognized in primitives:", out);
        const char *sep = " ";
        if (plan->idioms.rms_norm) {
            fprintf(out, "%s%u rms_norm", sep, plan->idioms.rms_norm);
            sep = ", ";
        }
        if (plan->idioms.gelu_tanh)
            fprintf(out, "%s%u gelu_tanh", sep, plan->idioms.gelu_tanh);
        fputc('\n', out);
    }
    fputc('\n', out);
    fprintf(out, "%-3s %-11s %-44s %-12s %-11s %s\n", "#", "kind", "kernel", "saved", "est. time",
            "ops absorbed");
    for (uint32_t i = 0; i < plan->n_groups; i++) {
        const kf_group *g = &plan->groups[i];
        fprintf(out, "%-3u %-11s %-44s ", i, kf_group_kind_name(g->kind), g->name);
        char buf[32] = "-";
        if (cost) {
            /* Saved bytes in a fixed column. */
            double saved = g->unfused_bytes - (g->bytes_read + g->bytes_written);
            double b = saved < 0 ? 0 : saved;
            static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
            int u = 0;
            while (b >= 1024 && u < 4) {
                b /= 1024;
                u++;
            }
            snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
        }
        fprintf(out, "%-12s ", buf);
        if (cost) {
            double s = g->est_time_s;
            snprintf(buf, sizeof buf, s >= 1e-3 ? "%.3g ms" : "%.3g us",
                     s >= 1e-3 ? s * 1e3 : s * 1e6);
        }
        fprintf(out, "%-11s ", buf);
        put_ops(plan, g, out, 8);
        fputc('\n', out);
    }
    fputs("\n", out);
    char nb[24];
    for (uint32_t i = 0; i < plan->n_groups; i++) {
        const kf_group *g = &plan->groups[i];
        fprintf(out, "group %u: %s %s\n", i, kf_group_kind_name(g->kind), g->name);
        fputs("  reads:  ", out);
        put_tensor_list(plan, g->reads, g->n_reads, out);
        fputs("\n  writes: ", out);
        put_tensor_list(plan, g->writes, g->n_writes, out);
        fputc('\n', out);
        for (uint32_t k = 0; k < g->n_writes; k++) {
            if (g->roots[k] == KF_NONE || g->kind == KF_GROUP_VIEW)
                continue;
            fprintf(out, "  %s = ", tname(plan, g->writes[k], nb, sizeof nb));
            kf_expr_print(plan, g, g->roots[k], out);
            fputc('\n', out);
        }
        if (g->siblings > 0) {
            fprintf(out, "  siblings: %u elementwise groups reading %s, one kernel writing %u tensors",
                    g->siblings, tname(plan, g->sibling_of, nb, sizeof nb), g->n_writes);
            if (g->sibling_parts > 1 && g->sibling_bound && *g->sibling_bound) {
                char b[48];
                sibling_bound_text(plan, g, b, sizeof b);
                fprintf(out, "; part %u of %u: the siblings were split at %s per kernel",
                        g->sibling_part, g->sibling_parts, b);
            }
            fputc('\n', out);
        }
        if (g->kind == KF_GROUP_GEMM) {
            fprintf(out, "  gemm: M=%lld N=%lld K=%lld batch=%lld%s%s%s\n", (long long)g->gemm.m,
                    (long long)g->gemm.n, (long long)g->gemm.k, (long long)g->gemm.batch,
                    g->gemm.n_anchors == 2 ? ", two GEMMs sharing A (gated)" : "",
                    g->gemm.a_prologue ? ", norm prologue on A (row stats pre-pass)" : "",
                    g->gemm.row_split      ? ", norm epilogue split from the output tiles (the "
                                             "norm's input rows, then a row pass)"
                    : g->gemm.row_epilogue ? ", norm epilogue on whole output rows"
                                           : "");
            if (g->gemm.head_dim)
                fprintf(out,
                        "  head-split epilogue: over the product's head view [%s, head %lld]\n",
                        g->gemm.heads_first ? "heads, M" : "M, heads", (long long)g->gemm.head_dim);
            if (g->gemm.a_prologue) {
                fputs("  A = ", out);
                kf_expr_print(plan, g, g->gemm.a_root, out);
                fputc('\n', out);
            }
            if (kf_group_in_gemm_sib_set(g)) {
                fputs("  siblings: ", out);
                put_gemm_sibs(plan, g, out, false);
                fprintf(out, " (member %u of %u, groups %u..%u): one A through one norm",
                        g->gemm.sib_index + 1, g->gemm.sib_count, g->gemm.sib_first,
                        g->gemm.sib_first + g->gemm.sib_count - 1);
                if (g->gemm.sib_index == 0) {
                    fputs("; computed once, it saves ", out);
                    put_bytes(out, gemm_sib_bytes_saved(plan, g));
                    fputs(" of reads of the norm's input", out);
                }
                fputc('\n', out);
            }
            if (g->gemm.sib_apart[0])
                fprintf(out, "  kept apart from its GEMM siblings: %s\n", g->gemm.sib_apart);
        }
        if (g->kind == KF_GROUP_ATTENTION) {
            fputs("  score = ", out);
            kf_expr_print(plan, g, g->attn.score, out);
            fprintf(out, "\n  mask: %s", kf_mask_kind_name(g->attn.mask));
            if (g->attn.mask == KF_MASK_SLIDING_WINDOW)
                fprintf(out, " (window %lld)", (long long)g->attn.window);
            if (g->attn.mask == KF_MASK_BLOCK_SPARSE)
                fprintf(out, " (keep map tiles %lldx%lld)", (long long)g->attn.keep_bq,
                        (long long)g->attn.keep_bk);
            fprintf(out, "; batch=%lld heads=%lld q=%lld kv=%lld d=%lld\n",
                    (long long)g->attn.batch, (long long)g->attn.heads, (long long)g->attn.sq,
                    (long long)g->attn.skv, (long long)g->attn.d);
            if (g->attn.lse != KF_NONE)
                fprintf(out, "  log-sum-exp of the scores written too: %%%u (m + log l a row)\n",
                        g->attn.lse);
            double per_head, saved = attn_bytes_saved(plan, g, &per_head);
            fputs("  scores on chip: ", out);
            put_bytes(out, saved);
            fputs(" saved against the unfused path (the scores and P written and read: ", out);
            put_bytes(out, per_head);
            fputs(" a head; tiles skipped: see the recipe)\n", out);
        }
        if (cost) {
            fputs("  cost: ", out);
            fprintf(out, "%.3g flop, read ", g->flops);
            put_bytes(out, g->bytes_read);
            fputs(", write ", out);
            put_bytes(out, g->bytes_written);
            fputs(", unfused ", out);
            put_bytes(out, g->unfused_bytes);
            fputs(", est. ", out);
            put_time(out, g->est_time_s);
            fputc('\n', out);
        }
    }
    fprintf(out, "\nunfused edges (%u):\n", plan->n_edges);
    for (uint32_t i = 0; i < plan->n_edges; i++) {
        const kf_plan_edge *e = &plan->edges[i];
        char nb2[24];
        fprintf(out, "  %s -> %s  (group %u -> %u)  %s: %s%s%s\n",
                tname(plan, e->producer, nb, sizeof nb), tname(plan, e->consumer, nb2, sizeof nb2),
                e->from_group, e->to_group, kf_reason_code(e->reason), kf_reason_text(e->reason),
                e->detail[0] ? "; " : "", e->detail);
    }
    if (cost) {
        fputs("\ntotal: ", out);
        put_bytes(out, plan->total_bytes);
        fputs(" moved (unfused ", out);
        put_bytes(out, plan->total_unfused_bytes);
        fputs("), est. ", out);
        put_time(out, plan->total_time_s);
        fputc('\n', out);
    }
}

/* JSON: every string written here is an identifier, a %N name, a type string,
 * an op name, a code or one of the fixed sentences, none with a character
 * that needs escaping; details and expressions are escaped anyway. */

static void json_num(FILE *out, double v) {
    if (isfinite(v))
        fprintf(out, "%.6g", v);
    else
        fputs("null", out);
}

static void json_tensors(const kf_plan *plan, const uint32_t *ids, uint32_t n, FILE *out) {
    char nb[24], ts[160];
    fputc('[', out);
    for (uint32_t i = 0; i < n; i++) {
        const kf_tensor *t = plan->graph->nodes[ids[i]];
        fputs(i ? ", {\"tensor\": " : "{\"tensor\": ", out);
        kf_ir_json_string(out, tname(plan, ids[i], nb, sizeof nb));
        fputs(", \"op\": ", out);
        kf_ir_json_string(out, kf_op_get(t->op)->name);
        fputs(", \"type\": ", out);
        kf_ir_json_string(out, kf_ir_type_str(t, ts, sizeof ts));
        fputc('}', out);
    }
    fputc(']', out);
}

static void report_json(const kf_plan *plan, const kf_report_extra *extra, FILE *out) {
    bool cost = plan->device[0] != '\0';
    char nb[24];
    fputs("{\n  \"schema\": \"kfuse.report/2\",\n  \"device\": ", out);
    if (cost)
        kf_ir_json_string(out, plan->device);
    else
        fputs("null", out);
    fprintf(out,
            ",\n  \"tensors\": %u,\n  \"kernels\": %u,\n  \"idioms\": {\"rms_norm\": %u, "
            "\"gelu_tanh\": %u},\n  \"groups\": [",
            plan->graph->n_nodes, kf_plan_kernel_count(plan), plan->idioms.rms_norm,
            plan->idioms.gelu_tanh);
    for (uint32_t i = 0; i < plan->n_groups; i++) {
        const kf_group *g = &plan->groups[i];
        fprintf(out, "%s\n    {\"id\": %u, \"kind\": ", i ? "," : "", i);
        kf_ir_json_string(out, kf_group_kind_name(g->kind));
        fputs(", \"kernel\": ", out);
        kf_ir_json_string(out, g->name);
        fprintf(out, ", \"is_kernel\": %s, \"dtype\": ", g->is_kernel ? "true" : "false");
        kf_ir_json_string(out, kf_dtype_name(g->dtype));
        fputs(", \"anchor\": ", out);
        kf_ir_json_string(out, tname(plan, g->anchor, nb, sizeof nb));
        fputs(",\n     \"ops\": ", out);
        json_tensors(plan, g->computed, g->n_computed, out);
        fputs(",\n     \"reads\": ", out);
        json_tensors(plan, g->reads, g->n_reads, out);
        fputs(",\n     \"writes\": ", out);
        json_tensors(plan, g->writes, g->n_writes, out);
        fputs(",\n     \"expressions\": {", out);
        bool first = true;
        for (uint32_t k = 0; k < g->n_writes; k++) {
            if (g->roots[k] == KF_NONE || g->kind == KF_GROUP_VIEW)
                continue;
            fputs(first ? "" : ", ", out);
            first = false;
            kf_ir_json_string(out, tname(plan, g->writes[k], nb, sizeof nb));
            fputs(": \"", out);
            kf_expr_print(plan, g, g->roots[k], out);
            fputc('"', out);
        }
        fputc('}', out);
        if (g->siblings > 0) {
            fputs(",\n     \"siblings\": {\"of\": ", out);
            kf_ir_json_string(out, tname(plan, g->sibling_of, nb, sizeof nb));
            fprintf(out, ", \"groups\": %u, \"part\": %u, \"parts\": %u, \"bound\": ",
                    g->siblings, g->sibling_parts > 1 ? g->sibling_part : 1,
                    g->sibling_parts > 1 ? g->sibling_parts : 1);
            if (g->sibling_parts > 1 && g->sibling_bound && *g->sibling_bound) {
                char b[48];
                sibling_bound_text(plan, g, b, sizeof b);
                kf_ir_json_string(out, b);
            } else {
                fputs("null", out);
            }
            fputc('}', out);
        }
        if (g->kind == KF_GROUP_GEMM) {
            fprintf(out,
                    ",\n     \"gemm\": {\"m\": %lld, \"n\": %lld, \"k\": %lld, \"batch\": %lld, "
                    "\"gemms\": %d, \"norm_prologue\": %s, \"norm_epilogue\": %s, "
                    "\"norm_epilogue_split\": %s, \"head_dim\": %lld, \"heads_first\": %s}",
                    (long long)g->gemm.m, (long long)g->gemm.n, (long long)g->gemm.k,
                    (long long)g->gemm.batch, g->gemm.n_anchors,
                    g->gemm.a_prologue ? "true" : "false", g->gemm.row_epilogue ? "true" : "false",
                    g->gemm.row_split ? "true" : "false", (long long)g->gemm.head_dim,
                    g->gemm.heads_first ? "true" : "false");
            if (kf_group_in_gemm_sib_set(g)) {
                fprintf(out,
                        ",\n     \"gemm_siblings\": {\"first\": %u, \"index\": %u, \"count\": %u, "
                        "\"bytes_saved\": %.0f, \"members\": [",
                        g->gemm.sib_first, g->gemm.sib_index, g->gemm.sib_count,
                        g->gemm.sib_index == 0 ? gemm_sib_bytes_saved(plan, g) : 0.0);
                put_gemm_sibs(plan, g, out, true);
                fputs("]}", out);
            }
            if (g->gemm.sib_apart[0]) {
                fputs(",\n     \"gemm_siblings_apart\": ", out);
                kf_ir_json_string(out, g->gemm.sib_apart);
            }
        }
        if (g->kind == KF_GROUP_ATTENTION) {
            fputs(",\n     \"attention\": {\"mask\": ", out);
            kf_ir_json_string(out, kf_mask_kind_name(g->attn.mask));
            fprintf(out, ", \"window\": %lld, \"score\": \"", (long long)g->attn.window);
            kf_expr_print(plan, g, g->attn.score, out);
            fprintf(out,
                    "\", \"batch\": %lld, \"heads\": %lld, \"q_len\": %lld, \"kv_len\": %lld, "
                    "\"head_dim\": %lld, \"keep_tile\": [%lld, %lld], \"bytes_saved\": ",
                    (long long)g->attn.batch, (long long)g->attn.heads, (long long)g->attn.sq,
                    (long long)g->attn.skv, (long long)g->attn.d, (long long)g->attn.keep_bq,
                    (long long)g->attn.keep_bk);
            double per_head, saved = attn_bytes_saved(plan, g, &per_head);
            json_num(out, saved);
            fputs(", \"bytes_saved_per_head\": ", out);
            json_num(out, per_head);
            if (g->attn.lse != KF_NONE)
                fprintf(out, ", \"lse\": %u", g->attn.lse);
            else
                fputs(", \"lse\": null", out);
            fputc('}', out);
        }
        if (g->row.present) {
            fputs(",\n     \"row_stage\": {\"op\": ", out);
            kf_ir_json_string(out, kf_op_get(g->row.op)->name);
            fprintf(out, ", \"axis\": %d, \"length\": %lld}", g->row.axis,
                    (long long)g->row.length);
        }
        fputs(",\n     \"cost\": ", out);
        if (cost) {
            fputs("{\"flops\": ", out);
            json_num(out, g->flops);
            fputs(", \"bytes_read\": ", out);
            json_num(out, g->bytes_read);
            fputs(", \"bytes_written\": ", out);
            json_num(out, g->bytes_written);
            fputs(", \"unfused_bytes\": ", out);
            json_num(out, g->unfused_bytes);
            fputs(", \"bytes_saved\": ", out);
            double saved = g->unfused_bytes - g->bytes_read - g->bytes_written;
            json_num(out, saved < 0 ? 0 : saved);
            fputs(", \"est_time_s\": ", out);
            json_num(out, g->est_time_s);
            fputc('}', out);
        } else {
            fputs("null", out);
        }
        fputc('}', out);
    }
    fputs("\n  ],\n  \"unfused_edges\": [", out);
    for (uint32_t i = 0; i < plan->n_edges; i++) {
        const kf_plan_edge *e = &plan->edges[i];
        fputs(i ? ",\n    {\"producer\": " : "\n    {\"producer\": ", out);
        kf_ir_json_string(out, tname(plan, e->producer, nb, sizeof nb));
        fputs(", \"consumer\": ", out);
        kf_ir_json_string(out, tname(plan, e->consumer, nb, sizeof nb));
        fprintf(out, ", \"slot\": %d, \"from_group\": %u, \"to_group\": %u, \"reason\": ", e->slot,
                e->from_group, e->to_group);
        kf_ir_json_string(out, kf_reason_code(e->reason));
        fputs(", \"text\": ", out);
        kf_ir_json_string(out, kf_reason_text(e->reason));
        fputs(", \"detail\": ", out);
        kf_ir_json_string(out, e->detail);
        fputc('}', out);
    }
    fputs(plan->n_edges ? "\n  ],\n  \"totals\": " : "],\n  \"totals\": ", out);
    if (cost) {
        fputs("{\"bytes\": ", out);
        json_num(out, plan->total_bytes);
        fputs(", \"unfused_bytes\": ", out);
        json_num(out, plan->total_unfused_bytes);
        fputs(", \"est_time_s\": ", out);
        json_num(out, plan->total_time_s);
        fputc('}', out);
    } else {
        fputs("null", out);
    }
    if (extra && extra->write)
        extra->write(extra->user, KF_REPORT_JSON, out);
    else
        fputs(",\n  \"cuda\": null", out);
    fputs("\n}\n", out);
}

kf_status kf_plan_report_with(const kf_plan *plan, kf_report_format format,
                              const kf_report_extra *extra, FILE *out) {
    if (!plan || !out || (format != KF_REPORT_TEXT && format != KF_REPORT_JSON))
        return KF_ERR_INVALID_ARGUMENT;
    if (format == KF_REPORT_JSON) {
        report_json(plan, extra, out);
    } else {
        report_text(plan, out);
        if (extra && extra->write)
            extra->write(extra->user, KF_REPORT_TEXT, out);
    }
    return ferror(out) ? KF_ERR_IO : KF_OK;
}

kf_status kf_plan_report(const kf_plan *plan, kf_report_format format, FILE *out) {
    return kf_plan_report_with(plan, format, NULL, out);
}
