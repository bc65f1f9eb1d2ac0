/*
 * cmd_run.h -- `kfuse run FILE [--target cpu|auto] [--check] [--seed N]`:
 * compile a graph, run it on random inputs, and with --check compare every
 * output with the reference evaluator (frontend/cmd_run.c). The CLI's command
 * table holds one row pointing here.
 */
#ifndef KF_FRONTEND_CMD_RUN_H
#define KF_FRONTEND_CMD_RUN_H

extern const char kf_cmd_run_summary[];
extern const char kf_cmd_run_help[]; /* starts with the usage line */

/* Runs `kfuse run ...`: argv[0] is "run". Returns the exit status: 0 success,
 * 1 a compile/run failure or a --check mismatch, 2 a usage error or a file
 * that cannot be read or parsed. */
int kf_cmd_run(int argc, char **argv);

#endif /* KF_FRONTEND_CMD_RUN_H */
