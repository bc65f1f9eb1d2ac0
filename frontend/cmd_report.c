/*
 * cmd_report.c -- `kfuse report FILE.kfg [--json] [--device h100|h200|a100|cpu]
 * [--arch ARCH] [--sm-count N] [--no-cublaslt]`: parses the graph, plans it
 * (fusion/), estimates each group's cost for the device, makes the CUDA
 * recipes for the device's target (codegen/cuda: the same recipes a program
 * compiled on such a GPU runs) and writes the report to standard output.
 *
 * Exit status as for every kfuse command: 0 success; 1 a runtime failure
 * (planning failed, out of memory, output not writable); 2 a usage error or a
 * file that cannot be read or does not parse (FILE:LINE:COL: message).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda_recipe.h"
#include "frontend/cli.h"
#include "frontend/cmd_report.h"
#include "frontend/compile.h"
#include "fusion/fusion.h"
#include "kfuse.h"
#include "runtime/cuda.h"
#include "runtime/nvrtc.h"

const char kf_cmd_report_help[] =
    "usage: kfuse report FILE [--json] [--device h100|h200|a100|cpu] [--arch ARCH]\n"
    "                         [--sm-count N] [--no-cublaslt] [--gemm MODE] [--attention MODE]\n"
    "                         [--unfused-attention] [--split-row-norms]\n"
    "                         [--gemm-head-epilogue]\n"
    "\n"
    "Plans FILE (a .kfg graph; `-` reads standard input) into fused kernels and\n"
    "prints the plan: one row per kernel group (kind, generated kernel name, ops\n"
    "absorbed, bytes saved against the unfused graph, estimated time), each\n"
    "group's inputs and outputs with their types and its scalar expressions, and\n"
    "every edge that was not fused with its reason code. Then each group's CUDA\n"
    "recipe: the generated kernels (grid, block, source digest, buffers) and\n"
    "library GEMMs that run it on the device's arch, exactly as a program\n"
    "compiled on that GPU runs them (none for --device cpu).\n"
    "\n"
    "options:\n"
    "  --json          write JSON (schema \"kfuse.report/2\", docs/report-schema.md)\n"
    "  --device NAME   the roofline the cost columns assume and the recipes' target:\n"
    "                  h100 (sm_90a, 132 SMs), h200 (sm_90a, 132 SMs),\n"
    "                  a100 (sm_80, 108 SMs) or cpu (no recipes). Default: the GPU\n"
    "                  here when the driver sees one (its arch and SM count; the\n"
    "                  roofline of the model it is, else h100's), else h100; a note\n"
    "                  on stderr says which\n"
    "  --arch ARCH     make the recipes for ARCH (sm_80, sm_90a, ...) instead\n"
    "  --sm-count N    size the recipes' grids for N SMs instead\n"
    "  --no-cublaslt   the recipes of a context with KF_FLAG_NO_CUBLASLT\n"
    "  --gemm MODE     the recipes of a context with this GEMM mode (kf_options.gemm):\n"
    "                  auto (the default, as measured), generated (kfuse's GEMM\n"
    "                  kernel where it takes the group: wgmma on sm_90a, mma.sync on\n"
    "                  sm_80 to sm_89), cublaslt, measured (both, timed once on the\n"
    "                  device, the faster runs), or sm80 (the mma.sync kernel on\n"
    "                  every arch from sm_80, also sm_90a)\n"
    "  --attention MODE  the recipes of a context with this attention mode\n"
    "                  (kf_options.attention): auto (the decode kernels for 16 query\n"
    "                  rows or fewer, else the sm_90a kernel on sm_90a, where it takes\n"
    "                  the group), sm90 (the same), fa2, unfused, decode (the split-KV\n"
    "                  decode kernels and their combine at any query length)\n"
    "  --unfused-attention  the recipes of a context with KF_FLAG_UNFUSED_ATTENTION\n"
    "                  (every attention group unfused, also those the fused\n"
    "                  kernel takes)\n"
    "  --split-row-norms  the plan and recipes of a context with\n"
    "                  KF_FLAG_SPLIT_ROW_NORMS (a norm after a GEMM whose row is\n"
    "                  longer than one tile row in the GEMM's group, split)\n"
    "  --gemm-head-epilogue  the plan and recipes of a context with\n"
    "                  KF_FLAG_GEMM_HEAD_EPILOGUE (the rotary embedding of a GEMM's\n"
    "                  head view in the GEMM's group)\n"
    "  -h, --help      show this help\n"
    "\n"
    "environment: KF_DEBUG=1 dumps the plan after each fusion pass to stderr\n"
    "(`kfuse --help` lists every variable).\n"
    "exit status: 0 success, 1 planning failed, 2 usage error or a file that does\n"
    "not parse (printed as FILE:LINE:COL: message).\n";

static int usage(const char *fmt, const char *arg) {
    fputs("kfuse report: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs(
        "\nusage: kfuse report FILE [--json] [--device h100|h200|a100|cpu] [--arch ARCH]\n"
        "                         [--sm-count N] [--no-cublaslt] [--gemm MODE] [--attention MODE]\n"
        "                         [--unfused-attention] [--split-row-norms]\n"
        "Run 'kfuse help report' for details.\n",
        stderr);
    return 2;
}

/* The report's CUDA part: the recipes, or why there are none. */
typedef struct cuda_part {
    const kf_cuda_recipes *recipes;
    const kf_cuda_target *target;
    const char *error;
} cuda_part;

static void write_cuda(void *user, kf_report_format format, FILE *out) {
    const cuda_part *c = user;
    if (format == KF_REPORT_JSON) {
        fputs(",\n  \"cuda\": ", out);
        if (c->recipes) {
            kf_cuda_recipes_print(c->recipes, true, out);
        } else if (c->target) {
            fprintf(out, "{\"arch\": \"%s\", \"sm_count\": %d, \"error\": \"", c->target->arch,
                    c->target->sm_count);
            for (const char *e = c->error; *e; e++)
                if (*e != '"' && *e != '\\' && (unsigned char)*e >= 0x20)
                    fputc(*e, out);
            fputs("\"}", out);
        } else {
            fputs("null", out);
        }
        return;
    }
    if (c->recipes)
        kf_cuda_recipes_print(c->recipes, false, out);
    else if (c->target)
        fprintf(out, "cuda recipes: none for %s: %s\n", c->target->arch, c->error);
}

/* --device left out: the GPU the driver sees (device 0), its roofline when kfuse
 * models it (h100, h200, a100; else h100's) and its own arch and SM count for
 * the recipes; with no GPU, h100. Says which on stderr (stdout may be JSON). */
static const char *default_device(char *gpu_arch, size_t arch_size, int *gpu_sms) {
    char err[KF_MSG_MAX] = "";
    kf_mem mem;
    kf_mem_resolve(&mem, NULL);
    kf_cuda_driver *drv = NULL;
    kf_cuda_device dev;
    memset(&dev, 0, sizeof dev);
    const char *device = "h100";
    gpu_arch[0] = '\0';
    *gpu_sms = 0;
    if (kf_cuda_driver_load(&mem, NULL, &drv, err) == KF_OK &&
        kf_cuda_device_open(drv, 0, &dev, err) == KF_OK) {
        device = kf_plan_device_for_gpu(dev.name);
        snprintf(gpu_arch, arch_size, "%s", dev.arch);
        *gpu_sms = dev.sm_count;
        fprintf(stderr,
                "kfuse report: no --device: the GPU here, %s (%s, %d SMs; the %s roofline)\n",
                dev.name, dev.arch, dev.sm_count, device);
    } else {
        fprintf(stderr, "kfuse report: no --device and no GPU here: assuming h100 (sm_90a, 132 "
                        "SMs)\n");
    }
    kf_cuda_device_close(&dev);
    if (drv)
        kf_cuda_driver_release(&mem, drv);
    return device;
}

int kf_cmd_report(int argc, char **argv) {
    const char *file = NULL, *device = NULL, *arch = NULL;
    long sm_count = 0;
    bool json = false, no_lt = false, unfused_attn = false, split_rows = false, head_epi = false;
    kf_gemm_mode gemm = KF_GEMM_AUTO;
    kf_attention_mode attention = KF_ATTENTION_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(kf_cmd_report_help, stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--device") == 0) {
            if (i + 1 >= argc)
                return usage("option '%s' needs a value", a);
            device = argv[++i];
        } else if (strncmp(a, "--device=", 9) == 0) {
            device = a + 9;
        } else if (strcmp(a, "--arch") == 0 || strcmp(a, "--sm-count") == 0) {
            if (i + 1 >= argc)
                return usage("option '%s' needs a value", a);
            if (a[2] == 'a') {
                arch = argv[++i];
            } else {
                char *end = NULL;
                sm_count = strtol(argv[++i], &end, 10);
                if (!end || *end || sm_count < 1 || sm_count > 65536)
                    return usage("--sm-count takes 1..65536, not '%s'", argv[i]);
            }
        } else if (strcmp(a, "--no-cublaslt") == 0) {
            no_lt = true;
        } else if (strcmp(a, "--gemm") == 0) {
            if (i + 1 >= argc)
                return usage("option '%s' needs a value", a);
            if (!kf_cli_gemm_mode(argv[++i], &gemm))
                return usage("--gemm takes auto, generated, cublaslt, measured or sm80, not '%s'",
                             argv[i]);
        } else if (strcmp(a, "--attention") == 0) {
            if (i + 1 >= argc)
                return usage("option '%s' needs a value", a);
            if (!kf_cli_attention_mode(argv[++i], &attention))
                return usage("--attention takes auto, sm90, fa2, unfused or decode, not '%s'", argv[i]);
        } else if (strcmp(a, "--unfused-attention") == 0) {
            unfused_attn = true;
        } else if (strcmp(a, "--split-row-norms") == 0) {
            split_rows = true;
        } else if (strcmp(a, "--gemm-head-epilogue") == 0) {
            head_epi = true;
        } else if (a[0] == '-' && a[1] != '\0') {
            return usage("unknown option '%s'", a);
        } else if (file) {
            return usage("unexpected argument '%s' (one FILE only)", a);
        } else {
            file = a;
        }
    }
    if (!file)
        return usage("%s", "missing FILE (use `-` for standard input)");
    char gpu_arch[KF_ARCH_MAX] = "";
    int gpu_sms = 0;
    if (!device)
        device = default_device(gpu_arch, sizeof gpu_arch, &gpu_sms);
    if (strcmp(device, "h100") && strcmp(device, "h200") && strcmp(device, "a100") &&
        strcmp(device, "cpu"))
        return usage("unknown device '%s' (h100, h200, a100 or cpu)", device);
    char arch_err[KF_MSG_MAX];
    if (arch && kf_nvrtc_arch_check(arch, arch_err) != KF_OK)
        return usage("%s", arch_err);
    /* The recipes' target: the device's, then the overrides. */
    kf_cuda_target target;
    bool cuda = strcmp(device, "cpu") != 0 || arch;
    if (strcmp(device, "cpu") == 0 || kf_cuda_target_for_device(device, &target) != KF_OK)
        kf_cuda_target_for_arch(arch ? arch : "sm_90a", &target);
    if (!arch && gpu_arch[0]) { /* the GPU here: its own arch and SM count */
        kf_cuda_target_for_arch(gpu_arch, &target);
        target.sm_count = gpu_sms;
    }
    if (arch && strcmp(arch, target.arch) != 0)
        kf_cuda_target_for_arch(arch, &target);
    if (sm_count)
        target.sm_count = (int)sm_count;
    target.flags |= kf_cuda_recipe_flags(
        (no_lt ? KF_FLAG_NO_CUBLASLT : 0u) | (unfused_attn ? KF_FLAG_UNFUSED_ATTENTION : 0u), gemm,
        attention);
    kf_ctx *ctx = NULL;
    kf_graph *g = NULL;
    kf_plan *plan = NULL;
    int rc = 0;
    kf_options o;
    kf_cli_options(&o); /* the environment's switches */
    kf_plan_options popt;
    kf_plan_options_for_flags((o.flags & KF_FLAG_DEBUG_PASSES) |
                                  (split_rows ? KF_FLAG_SPLIT_ROW_NORMS : 0u) |
                                  (head_epi ? KF_FLAG_GEMM_HEAD_EPILOGUE : 0u),
                              &popt);
    kf_status st = kf_ctx_create(&o, &ctx);
    if (st == KF_OK) {
        int loaded = kf_cli_load_graph(ctx, file, &g); /* -1: loaded; else why not is printed */
        if (loaded >= 0)
            rc = loaded;
    }
    if (rc == 0 && st == KF_OK)
        st = kf_plan_create(g, &popt, &plan);
    if (rc == 0 && st == KF_OK)
        st = kf_plan_estimate(plan, device);
    kf_cuda_recipes *recipes = NULL;
    char cuda_err[KF_MSG_MAX] = "";
    if (rc == 0 && st == KF_OK && cuda)
        kf_cuda_recipes_create(plan, &target, &g->mem, &recipes, cuda_err);
    cuda_part part = {recipes, cuda ? &target : NULL, cuda_err};
    kf_report_extra extra = {write_cuda, &part};
    if (rc == 0 && st == KF_OK) {
        st = kf_plan_report_with(plan, json ? KF_REPORT_JSON : KF_REPORT_TEXT, &extra, stdout);
        if (st == KF_OK && fflush(stdout) != 0)
            st = KF_ERR_IO;
    }
    if (rc == 0 && st != KF_OK) {
        const char *msg = g ? kf_graph_error(g) : "";
        fprintf(stderr, "kfuse: report %s: %s%s%s\n", kf_cli_display_name(file), kf_status_str(st),
                msg[0] ? ": " : "", msg);
        rc = 1;
    }
    kf_cuda_recipes_destroy(recipes);
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    return rc;
}
