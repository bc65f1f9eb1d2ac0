/*
 * cmd_cache.c -- `kfuse cache ls|verify|clear [--dir DIR]`.
 *
 *   ls      one line per entry, least recently used first: key, payload and
 *           file bytes, last use (UTC); then a total. Reads headers only and
 *           never creates or changes anything.
 *   verify  reads every entry in full; corrupt ones are reported and removed.
 *           Exit 1 when any was found, so a script notices.
 *   clear   removes every entry (and abandoned temporaries and locks).
 *
 * DIR defaults to the cache a context would use ($KF_CACHE_DIR, else
 * $XDG_CACHE_HOME/kfuse, else ~/.cache/kfuse).
 */
#include <stdio.h>
#include <string.h>

#include "frontend/cli.h"
#include "frontend/cmd_cache.h"
#include "kfuse.h"

enum { EXIT_OK_ = 0, EXIT_RUNTIME_ = 1, EXIT_USAGE_ = 2 };

const char kf_cmd_cache_summary[] = "list, verify or clear the on-disk kernel cache";
const char kf_cmd_cache_help[] =
    "usage: kfuse cache ls|verify|clear [--dir DIR]\n"
    "\n"
    "Works on the on-disk kernel cache: DIR, else $KF_CACHE_DIR, else\n"
    "$XDG_CACHE_HOME/kfuse, else ~/.cache/kfuse.\n"
    "\n"
    "  ls       list the entries, least recently used first: key, payload bytes,\n"
    "           file bytes, last use (UTC); then the total\n"
    "  verify   read every entry in full; report and remove corrupt ones\n"
    "           (exit status 1 when any was found)\n"
    "  clear    remove every entry\n"
    "\n"
    "options:\n"
    "  --dir DIR    the cache directory\n"
    "  -h, --help   show this help\n";

static int usage(const char *fmt, const char *arg) {
    fprintf(stderr, "kfuse cache: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nusage: kfuse cache ls|verify|clear [--dir DIR]\n"
                    "Run 'kfuse help cache' for details.\n");
    return EXIT_USAGE_;
}

int kf_cmd_cache(int argc, char **argv) {
    const char *sub = NULL, *dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(kf_cmd_cache_help, stdout);
            return EXIT_OK_;
        } else if (strcmp(a, "--dir") == 0) {
            if (i + 1 >= argc)
                return usage("option '%s' needs a value", a);
            dir = argv[++i];
        } else if (strncmp(a, "--dir=", 6) == 0) {
            dir = a + 6;
        } else if (a[0] == '-') {
            return usage("unknown option '%s'", a);
        } else if (sub) {
            return usage("unexpected argument '%s'", a);
        } else {
            sub = a;
        }
    }
    if (!sub)
        return usage("%s", "missing subcommand: ls, verify or clear");
    bool ls = strcmp(sub, "ls") == 0, verify = strcmp(sub, "verify") == 0,
         clear = strcmp(sub, "clear") == 0;
    if (!ls && !verify && !clear)
        return usage("unknown subcommand '%s' (ls, verify or clear)", sub);
    if (dir && !*dir)
        return usage("%s", "--dir needs a non-empty directory");

    if (!dir)
        dir = kf_cli_env("KF_CACHE_DIR"); /* the CLI's; the library reads none */
    /* The public API's calls (frontend/aot_api.c) print what this command does. */
    kf_options o;
    kf_options_init(&o);
    o.cache_dir = dir;
    kf_ctx *ctx = NULL;
    kf_status st = kf_ctx_create(&o, &ctx);
    if (st != KF_OK) {
        fprintf(stderr, "kfuse cache: %s\n", kf_status_str(st));
        return EXIT_RUNTIME_;
    }
    kf_cache_summary sum;
    int rc = EXIT_OK_;
    if (ls) {
        st = kf_cache_list_entries(ctx, stdout, &sum);
    } else if (verify) {
        st = kf_cache_verify_entries(ctx, stdout, &sum);
        if (st == KF_OK && sum.corrupt)
            rc = EXIT_RUNTIME_;
    } else {
        st = kf_cache_clear_entries(ctx, &sum);
        if (st == KF_OK)
            printf("removed %zu entries from %s\n", sum.removed, sum.dir);
    }
    if (st != KF_OK) {
        fprintf(stderr, "kfuse cache %s: %s\n", sub, sum.error);
        rc = st == KF_ERR_INVALID_ARGUMENT ? EXIT_USAGE_ : EXIT_RUNTIME_;
    }
    kf_ctx_destroy(ctx);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "kfuse cache: cannot write the output\n");
        rc = EXIT_RUNTIME_;
    }
    return rc;
}
