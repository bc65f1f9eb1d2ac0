/*
 * nvrtc.c -- CUDA C to CUBIN (the contract is in nvrtc.h).
 *
 *   check arch -> options -> [dump source] -> nvrtcCreateProgram -> compile
 *     -> log -> CUBIN (copied into kf_mem memory) -> destroy program
 *
 * Built without a toolkit (KF_HAVE_NVRTC unset), every entry point that needs
 * NVRTC returns KF_ERR_UNSUPPORTED; the arch and option helpers still work.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/nvrtc.h"

#if KF_HAVE_NVRTC
#include <nvrtc.h>
#endif

kf_status kf_nvrtc_arch_check(const char *arch, char *err) {
    if (!arch)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                    "no CUDA arch given: pass one like sm_80 or sm_90a");
    const char *p = arch;
    bool ok = strncmp(p, "sm_", 3) == 0;
    size_t digits = 0;
    if (ok) {
        p += 3;
        while (p[digits] >= '0' && p[digits] <= '9')
            digits++;
        ok = (digits == 2 || digits == 3) && p[0] != '0';
        p += digits;
        if (ok && (*p == 'a' || *p == 'f'))
            p++;
        ok = ok && *p == 0;
    }
    if (!ok || strlen(arch) >= KF_ARCH_MAX)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                    "bad CUDA arch '%s': expected sm_ and the compute capability's digits, "
                    "optionally with an 'a' or 'f' suffix (sm_80, sm_89, sm_90a, sm_100a)",
                    arch);
    return KF_OK;
}

/* The canonical flag list, shared by the options string and the compile. */
#define MAX_FLAGS 24
static kf_status build_flags(const kf_nvrtc_options *o, char arch_flag[32],
                             const char *flags[MAX_FLAGS], int *n, char *err) {
    *n = 0;
    kf_status st = kf_nvrtc_arch_check(o->arch, err);
    if (st != KF_OK)
        return st;
    snprintf(arch_flag, 32, "--gpu-architecture=%s", o->arch);
    int k = 0;
    flags[k++] = arch_flag;
    flags[k++] = "-std=c++17";
    flags[k++] = "-default-device";
    if (o->fast_math)
        flags[k++] = "--use_fast_math";
    if (o->line_info)
        flags[k++] = "-lineinfo";
    if (o->ptxas_verbose)
        flags[k++] = "--ptxas-options=-v";
    if (o->n_extra < 0 || o->n_extra > MAX_FLAGS - k || (o->n_extra && !o->extra))
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "%d extra NVRTC flags (at most %d)",
                          o->n_extra, MAX_FLAGS - k);
    for (int i = 0; i < o->n_extra; i++)
        flags[k++] = o->extra[i];
    *n = k;
    return KF_OK;
}

kf_status kf_nvrtc_options_string(const kf_nvrtc_options *opts, char *buf, size_t size, char *err) {
    if (!opts || !buf || !size)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_nvrtc_options_string: NULL argument");
    char arch_flag[32];
    const char *flags[MAX_FLAGS];
    int n;
    kf_status st = build_flags(opts, arch_flag, flags, &n, err);
    if (st != KF_OK)
        return st;
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        int w = snprintf(buf + used, size - used, "%s%s", i ? " " : "", flags[i]);
        if (w < 0 || (size_t)w >= size - used)
            return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "options string buffer too small");
        used += (size_t)w;
    }
    return KF_OK;
}

/* Writes `len` bytes to DIR/NAME, creating DIR (one level) if needed. */
static kf_status dump_file(const char *dir, const char *name, const char *data, size_t len,
                           char *err) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return kf_msg_set(err, KF_ERR_IO, "cannot create dump directory '%s': %s", dir, strerror(errno));
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return kf_msg_set(err, KF_ERR_IO, "dump path too long in '%s'", dir);
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return kf_msg_set(err, KF_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    bool ok = fwrite(data, 1, len, fp) == len;
    ok = (fclose(fp) == 0) && ok;
    if (!ok)
        return kf_msg_set(err, KF_ERR_IO, "cannot write '%s'", path);
    return KF_OK;
}

kf_status kf_nvrtc_dump_source(const char *dir, const char *kernel, const char *arch,
                               const char *source, size_t len, char *err) {
    char fname[128];
    snprintf(fname, sizeof fname, "%s.%s.cu", kernel, arch);
    return dump_file(dir, fname, source, len, err);
}

void kf_nvrtc_result_release(const kf_mem *mem, kf_nvrtc_result *res) {
    if (!res)
        return;
    if (res->cubin)
        kf_mem_free(mem, res->cubin, res->cubin_size);
    if (res->log)
        kf_mem_free(mem, res->log, res->log_size);
    memset(res, 0, sizeof *res);
}

#if KF_HAVE_NVRTC

kf_status kf_nvrtc_version(int *major, int *minor) {
    if (!major || !minor)
        return KF_ERR_INVALID_ARGUMENT;
    return nvrtcVersion(major, minor) == NVRTC_SUCCESS ? KF_OK : KF_ERR_INTERNAL;
}

kf_status kf_nvrtc_compiler_id(char *buf, size_t size) {
    int major, minor;
    kf_status st = kf_nvrtc_version(&major, &minor);
    if (st != KF_OK)
        return st;
    snprintf(buf, size, "nvrtc %d.%d", major, minor);
    return KF_OK;
}

/* KF_OK when this NVRTC can emit code for `arch` ("sm_90a" -> 90). */
static kf_status arch_supported(const char *arch, char *err) {
    int cc = atoi(arch + 3), n = 0;
    if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0 || n > 256)
        return KF_OK; /* cannot tell: let the compile decide */
    int archs[256];
    if (nvrtcGetSupportedArchs(archs) != NVRTC_SUCCESS)
        return KF_OK;
    for (int i = 0; i < n; i++)
        if (archs[i] == cc)
            return KF_OK;
    int major = 0, minor = 0;
    nvrtcVersion(&major, &minor);
    return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                "NVRTC %d.%d cannot compile for %s: it supports sm_%d through sm_%d", major, minor,
                arch, archs[0], archs[n - 1]);
}

/* Copies the head of a log into `out` (room bytes with the NUL), cut at a
 * line end when it does not fit. */
static void log_head(const char *log, char *out, size_t room) {
    size_t n = strlen(log);
    while (n && (log[n - 1] == '\n' || log[n - 1] == ' '))
        n--;
    if (n >= room) {
        n = room - 1;
        size_t cut = n;
        while (cut > 0 && log[cut] != '\n')
            cut--;
        if (cut > 0)
            n = cut;
    }
    memcpy(out, log, n);
    out[n] = 0;
}

kf_status kf_nvrtc_compile(const kf_mem *mem, const char *source, size_t len,
                           const kf_nvrtc_options *opts, kf_nvrtc_result *out, char *err) {
    if (out)
        memset(out, 0, sizeof *out);
    if (!mem || !source || !opts || !out)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_nvrtc_compile: NULL argument");
    const char *kname = opts->kernel_name ? opts->kernel_name : "kernel";
    if (!kf_ir_is_identifier(kname, strlen(kname)))
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                    "kernel name '%s' is not an identifier ([A-Za-z_][A-Za-z0-9_]*, <= 64 chars)",
                    kname);
    char arch_flag[32];
    const char *flags[MAX_FLAGS];
    int nflags;
    kf_status st = build_flags(opts, arch_flag, flags, &nflags, err);
    if (st != KF_OK)
        return st;
    if ((st = arch_supported(opts->arch, err)) != KF_OK)
        return st;

    const char *dump = opts->dump_dir;
    char fname[128];
    if (dump) {
        snprintf(fname, sizeof fname, "%s.%s.cu", kname, opts->arch);
        if ((st = dump_file(dump, fname, source, len, err)) != KF_OK)
            return st;
    }

    /* NVRTC wants a NUL-terminated source. */
    char *src = kf_mem_alloc(mem, len + 1);
    if (!src)
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory compiling kernel '%s'", kname);
    memcpy(src, source, len);
    src[len] = 0;
    snprintf(fname, sizeof fname, "%s.cu", kname);
    nvrtcProgram prog = NULL;
    nvrtcResult r = nvrtcCreateProgram(&prog, src, fname, 0, NULL, NULL);
    kf_mem_free(mem, src, len + 1); /* NVRTC keeps its own copy */
    if (r != NVRTC_SUCCESS)
        return kf_msg_set(err, r == NVRTC_ERROR_OUT_OF_MEMORY ? KF_ERR_OUT_OF_MEMORY : KF_ERR_INTERNAL,
                    "nvrtcCreateProgram for kernel '%s': %s", kname, nvrtcGetErrorString(r));

    nvrtcResult cr = nvrtcCompileProgram(prog, nflags, flags);
    size_t log_size = 0;
    if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 0) {
        out->log = kf_mem_alloc(mem, log_size);
        if (!out->log) {
            nvrtcDestroyProgram(&prog);
            return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory reading NVRTC's log for '%s'",
                        kname);
        }
        out->log_size = log_size;
        if (nvrtcGetProgramLog(prog, out->log) != NVRTC_SUCCESS)
            out->log[0] = 0;
        out->log[log_size - 1] = 0;
    }
    if (cr != NVRTC_SUCCESS) {
        nvrtcDestroyProgram(&prog);
        const char *log = out->log ? out->log : "";
        if (dump) {
            snprintf(fname, sizeof fname, "%s.%s.log", kname, opts->arch);
            (void)dump_file(dump, fname, log, strlen(log), NULL);
        }
        char head[KF_MSG_MAX - 160];
        log_head(log, head, sizeof head);
        if (cr == NVRTC_ERROR_INVALID_OPTION)
            return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                        "NVRTC rejected the options for kernel '%s' (%s): %s", kname, opts->arch,
                        head);
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                    "kernel '%s' failed to compile for %s (%s):\n%s%s", kname, opts->arch,
                    nvrtcGetErrorString(cr), head,
                    dump ? "" : "\n(set KF_DUMP_DIR to keep the source and the full log)");
    }
    size_t cubin_size = 0;
    r = nvrtcGetCUBINSize(prog, &cubin_size);
    if (r != NVRTC_SUCCESS || cubin_size == 0) {
        nvrtcDestroyProgram(&prog);
        return kf_msg_set(err, KF_ERR_INTERNAL, "no CUBIN for kernel '%s' (%s): %s", kname, opts->arch,
                    nvrtcGetErrorString(r));
    }
    out->cubin = kf_mem_alloc(mem, cubin_size);
    if (!out->cubin) {
        nvrtcDestroyProgram(&prog);
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory for the CUBIN of '%s' (%zu bytes)",
                    kname, cubin_size);
    }
    out->cubin_size = cubin_size;
    r = nvrtcGetCUBIN(prog, out->cubin);
    nvrtcDestroyProgram(&prog);
    if (r != NVRTC_SUCCESS)
        return kf_msg_set(err, KF_ERR_INTERNAL, "nvrtcGetCUBIN for kernel '%s': %s", kname,
                    nvrtcGetErrorString(r));
    return KF_OK;
}

#else /* !KF_HAVE_NVRTC */

#define NO_NVRTC "kfuse was built without NVRTC (no CUDA toolkit found at configure time)"

kf_status kf_nvrtc_version(int *major, int *minor) {
    if (major)
        *major = 0;
    if (minor)
        *minor = 0;
    return KF_ERR_UNSUPPORTED;
}

kf_status kf_nvrtc_compiler_id(char *buf, size_t size) {
    (void)buf;
    (void)size;
    return KF_ERR_UNSUPPORTED;
}

kf_status kf_nvrtc_compile(const kf_mem *mem, const char *source, size_t len,
                           const kf_nvrtc_options *opts, kf_nvrtc_result *out, char *err) {
    (void)mem;
    (void)source;
    (void)len;
    (void)opts;
    if (out)
        memset(out, 0, sizeof *out);
    return kf_msg_set(err, KF_ERR_UNSUPPORTED, NO_NVRTC);
}

#endif
