/*
 * cmd_aot.c -- `kfuse aot --arch sm_80,sm_90a FILE.kfg... -o DIR`: fills a
 * kernel cache ahead of time, with no GPU. For each graph it plans, makes the
 * CUDA recipes for each arch (codegen/cuda/cuda_recipe.h: the same recipes
 * the executor runs), compiles exactly their KERNEL steps with NVRTC and
 * stores the CUBINs in the disk cache at DIR under kf_cuda_kernel_cache_key --
 * the key a context pointed at DIR computes, so with fail-on-miss it compiles
 * nothing.
 *
 * Progress goes to stderr when it is a terminal; the coverage table (kernels
 * per graph per arch, how many were already cached) to stdout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/cuda/cuda_recipe.h"
#include "frontend/cli.h"
#include "frontend/cmd_aot.h"
#include "frontend/compile.h"
#include "fusion/fusion.h"
#include "runtime/cuda_kernel.h"

#define AOT_MAX_ARCHS 8

const char kf_cmd_aot_summary[] = "compile every CUDA kernel of some graphs into a cache directory";
const char kf_cmd_aot_help[] =
    "usage: kfuse aot [--arch ARCH[,ARCH...]] [--no-cublaslt] [--gemm MODE] [--attention MODE] "
    "[--unfused-attention] [--split-row-norms] FILE.kfg... -o DIR\n"
    "\n"
    "Plans each graph, makes its CUDA recipes for each ARCH (what `kfuse report`\n"
    "prints and a program runs), compiles every generated kernel they name with\n"
    "NVRTC and stores the CUBINs in the kernel cache at DIR\n"
    "(created 0700). No GPU is needed. A program whose context uses DIR as its\n"
    "cache (with the fail-on-miss flag, to be sure) then compiles nothing.\n"
    "Prints the coverage: kernels per graph per arch, and how many were cached.\n"
    "These are generated kernels, the recipes' kernel steps: a graph's count is\n"
    "not `kfuse report`'s count of kernel groups, since a group may run as\n"
    "several steps (a norm prologue kernel, then a cuBLASLt GEMM) or as cuBLASLt\n"
    "calls alone, which need no kernel; each line says both.\n"
    "\n"
    "options:\n"
    "  --arch LIST   comma-separated archs (default sm_80,sm_90a)\n"
    "  --no-cublaslt the recipes of contexts with KF_FLAG_NO_CUBLASLT (generated\n"
    "                kernels apply every GEMM epilogue)\n"
    "  --gemm MODE   the recipes of contexts with this GEMM mode: auto (the\n"
    "                default, as measured), generated, cublaslt, measured (both\n"
    "                sides compiled; the choice is timed on first use), or sm80 (the\n"
    "                sm_80 mma.sync kernel on every arch, also sm_90a)\n"
    "  --attention MODE the recipes of contexts with this attention mode: auto\n"
    "                (decode kernels for 16 query rows or fewer, else the sm_90a kernel\n"
    "                on sm_90a), sm90 (the same), fa2, unfused or decode (the split-KV\n"
    "                decode kernels at any query length)\n"
    "  --unfused-attention the recipes of contexts with KF_FLAG_UNFUSED_ATTENTION\n"
    "  --split-row-norms the plans and recipes of contexts with KF_FLAG_SPLIT_ROW_NORMS\n"
    "  --gemm-head-epilogue the plans and recipes of contexts with\n"
    "                KF_FLAG_GEMM_HEAD_EPILOGUE\n"
    "  -o DIR        the cache directory (required)\n"
    "  -h, --help    show this help\n"
    "\n"
    "exit status: 0 every kernel is in DIR, 1 a graph did not plan or a kernel\n"
    "did not generate, compile or store (the rest are still done; the count of\n"
    "kernels not stored is printed), 2 usage error or a\n"
    "file that does not read or parse.\n";

static int usage(const char *fmt, const char *arg) {
    fputs("kfuse aot: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\nusage: kfuse aot [--arch ARCH[,ARCH...]] [--no-cublaslt] [--gemm MODE] "
          "[--unfused-attention] [--split-row-norms] FILE.kfg... -o DIR\n"
          "Run 'kfuse help aot' for details.\n",
          stderr);
    return 2;
}

typedef struct aot_state {
    kf_mem mem;
    kf_cache *cache;
    const char *archs[AOT_MAX_ARCHS];
    int n_archs;
    unsigned flags; /* KF_CUDA_RECIPE_* */
    bool tty;
    unsigned long done, total;
    unsigned long not_stored; /* compiled but not written to DIR (a full disk, ...) */
    int rc;
} aot_state;

/* The recipes of `plan` for arch `ai` (NULL, with a message, on failure). */
static kf_cuda_recipes *recipes_for(aot_state *a, const char *path, const kf_plan *plan, int ai) {
    kf_cuda_target target;
    kf_cuda_target_for_arch(a->archs[ai], &target);
    target.flags = a->flags;
    kf_cuda_recipes *r = NULL;
    char err[KF_MSG_MAX] = "";
    kf_status st = kf_cuda_recipes_create(plan, &target, &a->mem, &r, err);
    if (st != KF_OK)
        fprintf(stderr, "%skfuse aot: %s: %s: %s: %s\n", a->tty ? "\r\033[K" : "", path,
                a->archs[ai], kf_status_str(st), err);
    return r;
}

/* One graph: every KERNEL step of its recipes, for every arch. */
static void aot_graph(aot_state *a, const char *path, kf_cuda_recipes *const *recipes) {
    unsigned long kernels[AOT_MAX_ARCHS] = {0}, cached[AOT_MAX_ARCHS] = {0},
                  failed[AOT_MAX_ARCHS] = {0}, lt_steps[AOT_MAX_ARCHS] = {0},
                  groups[AOT_MAX_ARCHS] = {0};
    for (int ai = 0; ai < a->n_archs; ai++) {
        const kf_cuda_recipes *r = recipes[ai];
        if (!r) {
            failed[ai]++;
            a->rc = 1;
        }
        uint32_t n = 0;
        for (uint32_t gi = 0; r && gi < r->n; gi++) {
            const kf_cuda_recipe *rc = &r->recipes[gi];
            groups[ai] += rc->n_steps > 0;
            for (uint32_t s = 0; s < rc->n_steps; s++) {
                n += rc->steps[s].kind == KF_CUDA_STEP_KERNEL;
                lt_steps[ai] += rc->steps[s].kind != KF_CUDA_STEP_KERNEL;
            }
        }
        if (n == 0)
            continue;
        kf_cuda_cubin *jobs = kf_mem_calloc(&a->mem, n, sizeof *jobs);
        if (!jobs) {
            fprintf(stderr, "%skfuse aot: %s: out of memory\n", a->tty ? "\r\033[K" : "", path);
            failed[ai] += n;
            a->rc = 1;
            continue;
        }
        uint32_t j = 0;
        for (uint32_t gi = 0; gi < r->n; gi++)
            for (uint32_t s = 0; s < r->recipes[gi].n_steps; s++)
                if (r->recipes[gi].steps[s].kind == KF_CUDA_STEP_KERNEL)
                    jobs[j++].kernel = &r->recipes[gi].steps[s].kernel->kernel;
        if (a->tty) {
            fprintf(stderr, "\r\033[K[%lu/%lu] %s: %u kernels", a->done, a->total, a->archs[ai],
                    n);
            fflush(stderr);
        }
        /* Concurrently (NVRTC compiles in parallel); each job's outcome below. */
        char err[KF_MSG_MAX] = "";
        (void)kf_cuda_kernels_cubins(a->cache, &a->mem, jobs, n, 0, err);
        for (uint32_t i = 0; i < n; i++) {
            const kf_cuda_cubin *c = &jobs[i];
            a->done++;
            kernels[ai]++;
            if (c->status != KF_OK) {
                fprintf(stderr, "%skfuse aot: %s: %s\n", a->tty ? "\r\033[K" : "", path, c->err);
                failed[ai]++;
                a->rc = 1;
            } else if (c->store == KF_CACHE_STORE_FAILED) {
                /* Compiled, but not in DIR: the product is incomplete. */
                fprintf(stderr, "%skfuse aot: %s: kernel '%s' (%s) was not stored: %s\n",
                        a->tty ? "\r\033[K" : "", path, c->kernel->name, a->archs[ai], c->err);
                failed[ai]++;
                a->not_stored++;
                a->rc = 1;
            } else {
                cached[ai] += c->hit;
                if (c->note[0])
                    fprintf(stderr, "%skfuse aot: note: %s\n", a->tty ? "\r\033[K" : "",
                            c->note);
            }
            kf_cuda_cubin_release(a->cache, &a->mem, &jobs[i]);
        }
        kf_mem_free(&a->mem, jobs, n * sizeof *jobs);
    }
    if (a->tty)
        fputs("\r\033[K", stderr);
    for (int ai = 0; ai < a->n_archs; ai++) {
        printf("%-40s %-8s %4lu kernels  %4lu cached  %4lu compiled", path, a->archs[ai],
               kernels[ai], cached[ai], kernels[ai] - cached[ai] - failed[ai]);
        if (failed[ai])
            printf("  %lu FAILED", failed[ai]);
        printf("  (%lu groups; %lu cuBLASLt steps need no kernel)\n", groups[ai], lt_steps[ai]);
    }
}

int kf_cmd_aot(int argc, char **argv) {
    aot_state a;
    memset(&a, 0, sizeof a);
    kf_mem_resolve(&a.mem, NULL);
    const char *dir = NULL;
    char archbuf[256] = "sm_80,sm_90a";
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    if (!files) {
        fputs("kfuse aot: out of memory\n", stderr);
        return 1;
    }
    int n_files = 0;
    kf_gemm_mode gemm = KF_GEMM_AUTO;
    bool split_rows = false, head_epi = false;
    kf_attention_mode attention = KF_ATTENTION_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            fputs(kf_cmd_aot_help, stdout);
            free(files);
            return 0;
        } else if (strcmp(s, "-o") == 0 || strcmp(s, "--arch") == 0) {
            if (i + 1 >= argc) {
                free(files);
                return usage("option '%s' needs a value", s);
            }
            if (s[1] == 'o')
                dir = argv[++i];
            else
                snprintf(archbuf, sizeof archbuf, "%s", argv[++i]);
        } else if (strcmp(s, "--no-cublaslt") == 0) {
            a.flags |= KF_CUDA_RECIPE_NO_LT_EPILOGUE;
        } else if (strcmp(s, "--gemm") == 0) {
            if (i + 1 >= argc || !kf_cli_gemm_mode(argv[i + 1], &gemm)) {
                free(files);
                return usage("%s", "--gemm takes auto, generated, cublaslt, measured or sm80");
            }
            i++;
        } else if (strcmp(s, "--attention") == 0) {
            if (i + 1 >= argc || !kf_cli_attention_mode(argv[i + 1], &attention)) {
                free(files);
                return usage("%s", "--attention takes auto, sm90, fa2, unfused or decode");
            }
            i++;
        } else if (strcmp(s, "--unfused-attention") == 0) {
            a.flags |= KF_CUDA_RECIPE_UNFUSED_ATTENTION;
        } else if (strcmp(s, "--split-row-norms") == 0) {
            split_rows = true;
        } else if (strcmp(s, "--gemm-head-epilogue") == 0) {
            head_epi = true;
        } else if (strncmp(s, "--arch=", 7) == 0) {
            snprintf(archbuf, sizeof archbuf, "%s", s + 7);
        } else if (s[0] == '-' && s[1] != '\0') {
            free(files);
            return usage("unknown option '%s'", s);
        } else {
            files[n_files++] = s;
        }
    }
    a.flags |= kf_cuda_recipe_flags(0u, gemm, attention);
    if (!dir || n_files == 0) {
        free(files);
        return usage("%s", !dir ? "missing -o DIR" : "missing FILE.kfg");
    }
    for (char *tok = strtok(archbuf, ","); tok; tok = strtok(NULL, ",")) {
        char err[KF_MSG_MAX];
        if (kf_nvrtc_arch_check(tok, err) != KF_OK) {
            free(files);
            return usage("%s", err);
        }
        if (a.n_archs == AOT_MAX_ARCHS) {
            free(files);
            return usage("at most %s archs", "8");
        }
        a.archs[a.n_archs++] = tok;
    }
    if (a.n_archs == 0) {
        free(files);
        return usage("%s", "--arch names no arch");
    }
    a.tty = isatty(fileno(stderr)) != 0;

    kf_cache_options co = {.dir = dir};
    kf_cache_msg msg;
    kf_status st = kf_cache_open(&a.mem, &co, &a.cache, &msg);
    if (st != KF_OK) {
        fprintf(stderr, "kfuse aot: cache %s: %s: %s\n", dir, kf_status_str(st), msg.error);
        free(files);
        return 1;
    }
    kf_ctx *ctx = NULL;
    kf_options o;
    kf_cli_options(&o); /* the environment's switches */
    st = kf_ctx_create(&o, &ctx);
    if (st != KF_OK) {
        fprintf(stderr, "kfuse aot: %s\n", kf_status_str(st));
        kf_cache_close(a.cache);
        free(files);
        return 1;
    }
    /* Parse and plan everything first: the progress line knows the total. */
    kf_graph **graphs = calloc((size_t)n_files, sizeof *graphs);
    kf_plan **plans = calloc((size_t)n_files, sizeof *plans);
    /* recipes[f * AOT_MAX_ARCHS + ai]: graph f's for arch ai (NULL: failed) */
    kf_cuda_recipes **recipes = calloc((size_t)n_files * AOT_MAX_ARCHS, sizeof *recipes);
    int rc = 0;
    if (!graphs || !plans || !recipes) {
        fputs("kfuse aot: out of memory\n", stderr);
        rc = 1;
    }
    for (int f = 0; f < n_files && rc != 2 && graphs && plans && recipes; f++) {
        int loaded = kf_cli_load_graph(ctx, files[f], &graphs[f]); /* else why not is printed */
        if (loaded >= 0) {
            rc = loaded;
            break;
        }
        kf_plan_options popt;
        kf_plan_options_for_flags(o.flags | (split_rows ? KF_FLAG_SPLIT_ROW_NORMS : 0u) |
                                      (head_epi ? KF_FLAG_GEMM_HEAD_EPILOGUE : 0u),
                                  &popt);
        st = kf_plan_create(graphs[f], &popt, &plans[f]);
        if (st != KF_OK) {
            fprintf(stderr, "kfuse aot: %s: planning failed: %s: %s\n", files[f], kf_status_str(st),
                    kf_graph_error(graphs[f]));
            rc = 1;
            continue;
        }
        for (int ai = 0; ai < a.n_archs; ai++) {
            recipes[f * AOT_MAX_ARCHS + ai] = recipes_for(&a, files[f], plans[f], ai);
            a.total += kf_cuda_recipes_kernel_count(recipes[f * AOT_MAX_ARCHS + ai]);
        }
    }
    if (rc != 2 && graphs && plans && recipes) {
        printf("%-40s %-8s %s\n", "graph", "arch", "coverage");
        for (int f = 0; f < n_files; f++) {
            if (plans[f])
                aot_graph(&a, files[f], &recipes[f * AOT_MAX_ARCHS]);
        }
        if (a.rc)
            rc = 1;
        printf("%lu generated kernels for %d graph%s and %d arch%s in %s\n", a.total, n_files,
               n_files == 1 ? "" : "s", a.n_archs, a.n_archs == 1 ? "" : "s",
               kf_cache_dir(a.cache));
        if (a.not_stored)
            fprintf(stderr,
                    "kfuse aot: %lu of %lu kernels were not stored in %s: the cache is "
                    "incomplete\n",
                    a.not_stored, a.total, kf_cache_dir(a.cache));
    }
    for (int f = 0; f < n_files && graphs && plans; f++) {
        for (int ai = 0; recipes && ai < a.n_archs; ai++)
            kf_cuda_recipes_destroy(recipes[f * AOT_MAX_ARCHS + ai]);
        kf_plan_destroy(plans[f]);
        kf_graph_destroy(graphs[f]);
    }
    free(graphs);
    free(plans);
    free(recipes);
    kf_ctx_destroy(ctx);
    kf_cache_close(a.cache);
    free(files);
    if (fflush(stdout) != 0)
        rc = 1;
    return rc;
}
