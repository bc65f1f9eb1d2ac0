/*
 * cmd_report.h -- the `kfuse report` command (frontend/cmd_report.c), called
 * from the CLI's command table in frontend/kfuse_main.c.
 */
#ifndef KF_FRONTEND_CMD_REPORT_H
#define KF_FRONTEND_CMD_REPORT_H

/* Runs `kfuse report` with argv[0] = "report"; returns the exit status. */
int kf_cmd_report(int argc, char **argv);
/* The command's --help text (starts with its usage line). */
extern const char kf_cmd_report_help[];

#endif /* KF_FRONTEND_CMD_REPORT_H */
