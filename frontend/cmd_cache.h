/*
 * cmd_cache.h -- `kfuse cache ls|verify|clear [--dir DIR]`, the CLI's view of
 * the on-disk kernel cache (runtime/cache.h). The CLI's command table holds one
 * row pointing here.
 */
#ifndef KF_FRONTEND_CMD_CACHE_H
#define KF_FRONTEND_CMD_CACHE_H

extern const char kf_cmd_cache_summary[];
extern const char kf_cmd_cache_help[]; /* starts with the usage line */

/* Runs `kfuse cache ...`: argv[0] is "cache", argv[1] the subcommand. Returns
 * the exit status: 0 success, 1 a runtime failure (or corrupt entries found by
 * verify), 2 a usage error. Output on stdout, messages on stderr. */
int kf_cmd_cache(int argc, char **argv);

#endif /* KF_FRONTEND_CMD_CACHE_H */
