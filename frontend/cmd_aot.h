/*
 * cmd_aot.h -- `kfuse aot --arch sm_80,sm_90a FILE.kfg... -o DIR`: fills a
 * kernel cache ahead of time with no GPU (frontend/cmd_aot.c). The CLI's
 * command table holds one row pointing here.
 */
#ifndef KF_FRONTEND_CMD_AOT_H
#define KF_FRONTEND_CMD_AOT_H

extern const char kf_cmd_aot_summary[];
extern const char kf_cmd_aot_help[]; /* starts with the usage line */

/* Runs `kfuse aot ...` (argv[0] is "aot"). Returns the exit status: 0 every
 * kernel is cached, 1 a planning / generation / compile failure, 2 usage. */
int kf_cmd_aot(int argc, char **argv);

#endif /* KF_FRONTEND_CMD_AOT_H */
