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
#include <time.h>

#include "frontend/cli.h"
#include "frontend/cmd_cache.h"
#include "runtime/cache.h"

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

typedef struct totals {
    size_t entries, corrupt;
    unsigned long long bytes;
    bool print_ok; /* ls prints every entry; verify only the corrupt ones */
} totals;

static void print_entry(void *user, const kf_cache_entry_info *e) {
    totals *t = user;
    t->entries++;
    t->bytes += e->file_bytes;
    if (e->state == KF_CACHE_ENTRY_CORRUPT) {
        t->corrupt++;
        printf("corrupt  %s  %s\n", e->key_hex, e->problem);
        return;
    }
    if (!t->print_ok)
        return;
    time_t secs = (time_t)(e->mtime_ns / 1000000000);
    struct tm tm;
    char when[32] = "?";
    if (gmtime_r(&secs, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    printf("%s  %10llu  %10llu  %s\n", e->key_hex, (unsigned long long)e->payload_bytes,
           (unsigned long long)e->file_bytes, when);
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
    kf_mem mem;
    kf_mem_resolve(&mem, NULL);
    /* Only looking never creates the directory. */
    kf_cache_options o = {.dir = dir, .flags = ls ? KF_CACHE_READ_ONLY : 0};
    kf_cache *cache = NULL;
    kf_cache_msg msg;
    kf_status st = kf_cache_open(&mem, &o, &cache, &msg);
    if (st == KF_ERR_NOT_FOUND && ls) {
        printf("0 entries, 0 bytes (%s)\n", msg.error);
        return EXIT_OK_;
    }
    if (st != KF_OK) {
        fprintf(stderr, "kfuse cache: %s\n", msg.error);
        return st == KF_ERR_INVALID_ARGUMENT ? EXIT_USAGE_ : EXIT_RUNTIME_;
    }
    int rc = EXIT_OK_;
    totals t = {.print_ok = ls};
    if (ls) {
        /* The columns print_entry writes, named once. */
        printf("%-*s  %10s  %10s  %s\n", KF_CACHE_KEY_HEX - 1, "key", "payload", "bytes",
               "modified (UTC)");
        st = kf_cache_list(cache, print_entry, &t, &msg);
        if (st == KF_OK)
            printf("%zu entries, %llu bytes in %s\n", t.entries, t.bytes, kf_cache_dir(cache));
    } else if (verify) {
        size_t bad = 0;
        st = kf_cache_verify(cache, print_entry, &t, &bad, &msg);
        if (st == KF_OK) {
            printf("%zu entries verified in %s: %zu corrupt%s\n", t.entries, kf_cache_dir(cache),
                   bad, bad ? " (removed)" : "");
            if (bad)
                rc = EXIT_RUNTIME_;
        }
    } else {
        size_t removed = 0;
        st = kf_cache_clear(cache, &removed, &msg);
        if (st == KF_OK)
            printf("removed %zu entries from %s\n", removed, kf_cache_dir(cache));
    }
    if (st != KF_OK) {
        fprintf(stderr, "kfuse cache %s: %s\n", sub, msg.error);
        rc = EXIT_RUNTIME_;
    }
    kf_cache_close(cache);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "kfuse cache: cannot write the output\n");
        rc = EXIT_RUNTIME_;
    }
    return rc;
}
