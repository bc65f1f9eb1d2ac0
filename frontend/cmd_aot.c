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

#include "frontend/aot.h"
#include "frontend/cli.h"
#include "frontend/cmd_aot.h"
#include "runtime/cache.h"
#include "runtime/ctx.h"
#include "runtime/nvrtc.h"

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

/* What the hooks print and count, for one run of the command. */
typedef struct aot_state {
    const char *path; /* the graph being done */
    bool tty;         /* progress on stderr */
    int graph, n_graphs;
    kf_aot_arch_event arch[AOT_MAX_ARCHS]; /* the graph's, by arch (error not kept) */
    int n_done;
    unsigned long total;      /* generated kernels, every graph and arch */
    unsigned long not_stored; /* compiled but not written to DIR (a full disk, ...) */
} aot_state;

static const char *clear_line(const aot_state *a) { return a->tty ? "\r\033[K" : ""; }

static void on_arch_begin(void *user, const char *arch, size_t n_kernels) {
    aot_state *a = user;
    if (a->tty) {
        fprintf(stderr, "\r\033[K[%d/%d] %s %s: %zu kernels", a->graph + 1, a->n_graphs, a->path,
                arch, n_kernels);
        fflush(stderr);
    }
}

static void on_kernel(void *user, const kf_aot_kernel_event *e) {
    aot_state *a = user;
    if (e->not_stored) /* compiled, but not in DIR: the product is incomplete */
        fprintf(stderr, "%skfuse aot: %s: kernel '%s' (%s) was not stored: %s\n", clear_line(a),
                a->path, e->name, e->arch, e->error);
    else if (e->status != KF_OK)
        fprintf(stderr, "%skfuse aot: %s: %s\n", clear_line(a), a->path, e->error);
    else if (e->note[0])
        fprintf(stderr, "%skfuse aot: note: %s\n", clear_line(a), e->note);
}

static void on_arch_end(void *user, const kf_aot_arch_event *e) {
    aot_state *a = user;
    if (e->no_recipes)
        fprintf(stderr, "%skfuse aot: %s: %s: %s: %s\n", clear_line(a), a->path, e->arch,
                kf_status_str(e->status), e->error);
    else if (e->status == KF_ERR_OUT_OF_MEMORY && e->summary.kernels == 0)
        fprintf(stderr, "%skfuse aot: %s: out of memory\n", clear_line(a), a->path);
    if (a->n_done < AOT_MAX_ARCHS) {
        a->arch[a->n_done] = *e;
        a->arch[a->n_done].error = NULL; /* the loop's buffer, gone after this call */
        a->n_done++;
    }
    a->total += e->summary.kernels + (e->summary.kernels ? 0 : e->summary.failed);
    a->not_stored += e->not_stored;
}

/* The coverage lines of the graph just done, one per arch. */
static void print_coverage(const aot_state *a) {
    for (int ai = 0; ai < a->n_done; ai++) {
        const kf_aot_arch_event *e = &a->arch[ai];
        const kf_aot_summary *s = &e->summary;
        /* a recipe that could not be made counts as one failure */
        unsigned long failed = (unsigned long)s->failed + (e->no_recipes ? 1u : 0u);
        printf("%-40s %-8s %4zu kernels  %4zu cached  %4zu compiled", a->path, e->arch, s->kernels,
               s->cached, s->compiled);
        if (failed)
            printf("  %lu FAILED", failed);
        printf("  (%zu groups; %zu cuBLASLt steps need no kernel)\n", s->groups, s->library_steps);
    }
}

int kf_cmd_aot(int argc, char **argv) {
    const char *dir = NULL;
    char archbuf[256] = "sm_80,sm_90a";
    const char *archs[AOT_MAX_ARCHS];
    int n_archs = 0;
    kf_options o;
    kf_cli_options(&o); /* the environment's switches */
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    if (!files) {
        fputs("kfuse aot: out of memory\n", stderr);
        return 1;
    }
    int n_files = 0;
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
            o.flags |= KF_FLAG_NO_CUBLASLT;
        } else if (strcmp(s, "--gemm") == 0) {
            if (i + 1 >= argc || !kf_cli_gemm_mode(argv[i + 1], &o.gemm)) {
                free(files);
                return usage("%s", "--gemm takes auto, generated, cublaslt, measured or sm80");
            }
            i++;
        } else if (strcmp(s, "--attention") == 0) {
            if (i + 1 >= argc || !kf_cli_attention_mode(argv[i + 1], &o.attention)) {
                free(files);
                return usage("%s", "--attention takes auto, sm90, fa2, unfused or decode");
            }
            i++;
        } else if (strcmp(s, "--unfused-attention") == 0) {
            o.flags |= KF_FLAG_UNFUSED_ATTENTION;
        } else if (strcmp(s, "--split-row-norms") == 0) {
            o.flags |= KF_FLAG_SPLIT_ROW_NORMS;
        } else if (strcmp(s, "--gemm-head-epilogue") == 0) {
            o.flags |= KF_FLAG_GEMM_HEAD_EPILOGUE;
        } else if (strncmp(s, "--arch=", 7) == 0) {
            snprintf(archbuf, sizeof archbuf, "%s", s + 7);
        } else if (s[0] == '-' && s[1] != '\0') {
            free(files);
            return usage("unknown option '%s'", s);
        } else {
            files[n_files++] = s;
        }
    }
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
        if (n_archs == AOT_MAX_ARCHS) {
            free(files);
            return usage("at most %s archs", "8");
        }
        archs[n_archs++] = tok;
    }
    if (n_archs == 0) {
        free(files);
        return usage("%s", "--arch names no arch");
    }

    /* The context whose cache DIR is filled: kf_aot stores under the keys a
     * program compiled with these options computes. */
    o.cache_dir = dir;
    kf_ctx *ctx = NULL;
    kf_status st = kf_ctx_create(&o, &ctx);
    if (st != KF_OK) {
        fprintf(stderr, "kfuse aot: %s\n", kf_status_str(st));
        free(files);
        return 1;
    }
    kf_cache *cache = NULL; /* opened (DIR created 0700) before any graph is read */
    char err[KF_MSG_MAX] = "";
    st = kf_ctx_cache(ctx, &cache, err);
    if (st != KF_OK || !cache) {
        fprintf(stderr,
                "kfuse aot: cache %s: %s: %s\n  (name a directory of your own with -o DIR)\n",
                dir, kf_status_str(st ? st : KF_ERR_IO), err);
        kf_ctx_destroy(ctx);
        free(files);
        return 1;
    }
    /* Every graph read first: a file that does not parse stops the run before
     * anything is compiled. */
    kf_graph **graphs = calloc((size_t)n_files, sizeof *graphs);
    int rc = graphs ? 0 : 1;
    if (!graphs)
        fputs("kfuse aot: out of memory\n", stderr);
    for (int f = 0; f < n_files && graphs; f++) {
        int loaded = kf_cli_load_graph(ctx, files[f], &graphs[f]); /* else why not is printed */
        if (loaded >= 0) {
            rc = loaded;
            break;
        }
    }
    if (rc == 0) {
        aot_state a = {.tty = isatty(fileno(stderr)) != 0, .n_graphs = n_files};
        kf_aot_hooks hooks = {.user = &a,
                              .arch_begin = on_arch_begin,
                              .kernel = on_kernel,
                              .arch_end = on_arch_end};
        printf("%-40s %-8s %s\n", "graph", "arch", "coverage");
        for (int f = 0; f < n_files; f++) {
            a.path = files[f];
            a.graph = f;
            a.n_done = 0;
            st = kf_aot_with(ctx, graphs[f], archs, (size_t)n_archs, &hooks, NULL);
            if (a.tty)
                fputs("\r\033[K", stderr);
            if (st != KF_OK && a.n_done == 0) /* stopped before its recipes: the planner */
                fprintf(stderr, "kfuse aot: %s: planning failed: %s: %s\n", files[f],
                        kf_status_str(st), kf_graph_error(graphs[f]));
            if (st != KF_OK)
                rc = 1;
            print_coverage(&a);
        }
        printf("%lu generated kernels for %d graph%s and %d arch%s in %s\n", a.total, n_files,
               n_files == 1 ? "" : "s", n_archs, n_archs == 1 ? "" : "s", kf_cache_dir(cache));
        if (a.not_stored)
            fprintf(stderr,
                    "kfuse aot: %lu of %lu kernels were not stored in %s: the cache is "
                    "incomplete\n",
                    a.not_stored, a.total, kf_cache_dir(cache));
    }
    for (int f = 0; f < n_files && graphs; f++)
        kf_graph_destroy(graphs[f]);
    free(graphs);
    kf_ctx_destroy(ctx);
    free(files);
    if (fflush(stdout) != 0)
        rc = 1;
    return rc;
}
