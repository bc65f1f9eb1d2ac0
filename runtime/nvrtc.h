/*
 * nvrtc.h -- CUDA C to CUBIN through NVRTC, linked from the toolkit.
 *
 * One call compiles one translation unit for one exact architecture and
 * returns the CUBIN (SASS for that arch, loadable by cuModuleLoadData with no
 * JIT step). The options are canonical: kf_nvrtc_options_string() writes the
 * exact flags passed to NVRTC, which is what the disk cache key hashes, so two
 * compiles with the same source and options string give the same binary.
 *
 * A failed compile returns KF_ERR_INVALID_ARGUMENT with a message naming the
 * kernel and the arch and holding the head of NVRTC's log; the whole log comes
 * back in the result. With opts->dump_dir (kf_options.dump_dir), the source is
 * written to DIR/KERNEL.ARCH.cu before compiling, and the log, on failure, to
 * DIR/KERNEL.ARCH.log, so a failing kernel can be read and compiled by hand.
 *
 * Thread-safe: NVRTC programs are independent, and nothing here is global.
 */
#ifndef KF_RUNTIME_NVRTC_H
#define KF_RUNTIME_NVRTC_H

#include <stdbool.h>
#include <stddef.h>

#include "ir/ir.h"

/* Longest arch string accepted ("sm_100a" and room to spare), with the NUL. */
#define KF_ARCH_MAX 16

typedef struct kf_nvrtc_options {
    const char *arch;        /* "sm_80", "sm_90a", ... (required; see kf_nvrtc_arch_check) */
    const char *kernel_name; /* an identifier: names the kernel in messages and dumps */
    bool fast_math;          /* --use_fast_math (default off: results match the reference) */
    bool line_info;          /* -lineinfo, for profilers */
    bool ptxas_verbose;      /* --ptxas-options=-v: ptxas's resource report (registers, stack,
                                spills) in the log, for tests that hold kernels to no spills */
    const char *dump_dir;    /* write the source (and a failed compile's log) here; NULL: no */
    const char *const *extra; /* n_extra more NVRTC flags, after the ones above, verbatim (the
                                 options string and so the cache key include them) */
    int n_extra;
} kf_nvrtc_options;

typedef struct kf_nvrtc_result {
    void *cubin; /* allocated with the kf_mem passed in; NULL on failure */
    size_t cubin_size;
    char *log;       /* NVRTC's log, NUL-terminated (may be ""), or NULL */
    size_t log_size; /* bytes allocated for log */
} kf_nvrtc_result;

/* NVRTC's version. KF_ERR_UNSUPPORTED when built without NVRTC. */
kf_status kf_nvrtc_version(int *major, int *minor);

/* "nvrtc MAJOR.MINOR" (the compiler part of a cache key) into buf. */
kf_status kf_nvrtc_compiler_id(char *buf, size_t size);

/* Checks an arch string: "sm_" then a compute capability of two or three
 * digits (major >= 5), optionally followed by 'a' (arch-specific features,
 * e.g. sm_90a's wgmma) or 'f' (family). On failure `err` (KF_MSG_MAX) says what
 * a valid one looks like. */
kf_status kf_nvrtc_arch_check(const char *arch, char *err);

/* The exact option list for `opts`, space-separated, into buf (KF_MSG_MAX is
 * plenty). KF_ERR_INVALID_ARGUMENT on a bad arch. */
kf_status kf_nvrtc_options_string(const kf_nvrtc_options *opts, char *buf, size_t size, char *err);

/* Compiles `source` (`len` bytes) to a CUBIN for opts->arch. On failure `err`
 * (KF_MSG_MAX) explains it: KF_ERR_INVALID_ARGUMENT (bad options, or the
 * source did not compile: the message names the kernel and holds the log's
 * first lines), KF_ERR_IO (the dump could not be written),
 * KF_ERR_OUT_OF_MEMORY, KF_ERR_UNSUPPORTED (built without NVRTC, or an arch
 * this NVRTC does not know). Release `out` with kf_nvrtc_result_release
 * whatever the status. */
kf_status kf_nvrtc_compile(const kf_mem *mem, const char *source, size_t len,
                           const kf_nvrtc_options *opts, kf_nvrtc_result *out, char *err);
void kf_nvrtc_result_release(const kf_mem *mem, kf_nvrtc_result *res);

/* Writes `source` to DIR/KERNEL.ARCH.cu (creating DIR), as a compile with
 * dump_dir does: for sources the cache serves without compiling. */
kf_status kf_nvrtc_dump_source(const char *dir, const char *kernel, const char *arch,
                               const char *source, size_t len, char *err);

#endif /* KF_RUNTIME_NVRTC_H */
