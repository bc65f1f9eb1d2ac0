/*
 * kf_sass.h -- for the suites that check generated sm_90a and sm_80 kernels
 * (test_gemmgen, test_attngen): recipes for a named device or arch, and the
 * check that a kernel compiles with NVRTC into SASS that holds HGMMA and
 * UTMALDG (sm_90a) or HMMA, LDGSTS and LDSM (sm_80), with no ptxas warning
 * about setmaxnreg or serialized wgmma and no local memory. cuobjdump's path comes in as KF_CUOBJDUMP (set by CMake);
 * a missing one fails the check. Failures end the running cmocka test.
 */
#ifndef KF_TESTS_SASS_H
#define KF_TESTS_SASS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/cuda/cuda_recipe.h"
#include "runtime/cuda_kernel.h"

#ifndef KF_CUOBJDUMP
#define KF_CUOBJDUMP ""
#endif

/* The recipes of `plan` for the device named `device` (e.g. "h100"), or when
 * it is NULL for `arch` (e.g. "sm_80"), with recipe flags `flags`. */
static inline kf_cuda_recipes *kf_sass_recipes(kf_mem *mem, const kf_plan *plan,
                                               const char *device, const char *arch,
                                               uint64_t flags) {
    kf_cuda_target t;
    if (device)
        assert_int_equal(kf_cuda_target_for_device(device, &t), KF_OK);
    else
        kf_cuda_target_for_arch(arch, &t);
    t.flags = flags;
    kf_cuda_recipes *rec = NULL;
    char err[KF_MSG_MAX] = "";
    if (kf_cuda_recipes_create(plan, &t, mem, &rec, err) != KF_OK)
        fail_msg("recipes: %s", err);
    return rec;
}

/* Runs `cmd`, its output into out[size]; a non-zero exit fails the test. */
static inline void kf_sass_run(const char *cmd, char *out, size_t size) {
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, size - 1, f);
    out[n] = 0;
    int rc = pclose(f);
    if (rc != 0)
        fail_msg("`%s` exited %d:\n%.2000s", cmd, rc, out);
}

/* Compiles kernel `k` with NVRTC for its arch into a new file whose name
 * replaces path's XXXXXX (the caller unlinks it); fails the test when
 * cuobjdump is missing, NVRTC fails, or ptxas warns that it ignores
 * setmaxnreg (C7508) or serializes wgmma (C7510, C7515, ...): either costs
 * the speed the kernel exists for. */
static inline void kf_sass_cubin(kf_mem *mem, const kf_cuda_kernel *k, char *path) {
    if (!KF_CUOBJDUMP[0])
        fail_msg("cuobjdump was not found at configure time (pip install nvidia-cuda-cuobjdump; "
                 "scripts/install-deps.sh does): the SASS of %s cannot be checked",
                 k->name);
    int ma, mi;
    if (kf_nvrtc_version(&ma, &mi) != KF_OK)
        fail_msg("no NVRTC: %s cannot be compiled", k->name);
    kf_nvrtc_result res;
    char err[KF_MSG_MAX] = "";
    if (kf_cuda_kernel_compile(mem, k, &res, err) != KF_OK)
        fail_msg("%s: %s\n%s", k->name, err, res.log ? res.log : "");
    if (res.log && (strstr(res.log, "C7508") || strstr(res.log, "C751")))
        fail_msg("%s: ptxas warns:\n%s", k->name, res.log);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, res.cubin, res.cubin_size), (ssize_t)res.cubin_size);
    close(fd);
    kf_nvrtc_result_release(mem, &res);
}

/* Kernel `k` compiled (kf_sass_cubin) into a temporary cubin (mkstemp's
 * template below), what cuobjdump `option` prints of it into out[size]. */
static inline void kf_sass_dump(kf_mem *mem, const kf_cuda_kernel *k, const char *option,
                                char *out, size_t size) {
    char path[] = "/tmp/kf_sass_XXXXXX";
    kf_sass_cubin(mem, k, path);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s' %s '%s' 2>&1", KF_CUOBJDUMP, option, path);
    kf_sass_run(cmd, out, size);
    unlink(path);
}

/* Kernel `k` compiled (kf_sass_cubin), its SASS (cuobjdump -sass) into
 * out[size]. */
static inline void kf_sass_text(kf_mem *mem, const kf_cuda_kernel *k, char *out, size_t size) {
    kf_sass_dump(mem, k, "-sass", out, size);
}

/* Compiles kernel `k` with NVRTC for its arch and checks its SASS and
 * resources: every opcode of the NULL-ended `want` is there (each with the
 * reason it must be, `why`), `absent` (NULL: none) is not, and there is no
 * local memory. */
static inline void kf_sass_check_ops(kf_mem *mem, const kf_cuda_kernel *k,
                                     const char *const *want, const char *const *why,
                                     const char *absent) {
    char path[] = "/tmp/kf_sass_XXXXXX";
    kf_sass_cubin(mem, k, path);
    static char out[1 << 22];
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s' -sass '%s' 2>&1", KF_CUOBJDUMP, path);
    kf_sass_run(cmd, out, sizeof out);
    for (int i = 0; want[i]; i++)
        if (!strstr(out, want[i]))
            fail_msg("%s: no %s in the SASS (%s)", k->name, want[i], why[i]);
    const char *bad = absent ? strstr(out, absent) : NULL;
    if (bad)
        fail_msg("%s: %s in the SASS: %.120s", k->name, absent, bad);
    snprintf(cmd, sizeof cmd, "'%s' -res-usage '%s' 2>&1", KF_CUOBJDUMP, path);
    kf_sass_run(cmd, out, sizeof out);
    unlink(path);
    const char *r = strstr(out, "REG:");
    if (!r)
        fail_msg("%s: no resource line in:\n%s", k->name, out);
    if (!strstr(r, "LOCAL:0") || !strstr(r, "STACK:0"))
        fail_msg("%s: local memory (spills or a stack frame): %.200s", k->name, r);
}

/* The sm_90a kernel `k`: HGMMA (not a fallback to HMMA) and UTMALDG (TMA
 * loads), and not `absent` (NULL: none). */
static inline void kf_sass_check_hopper_without(kf_mem *mem, const kf_cuda_kernel *k,
                                                const char *absent) {
    static const char *const want[] = {"HGMMA", "UTMALDG", NULL};
    static const char *const why[] = {"wgmma fell back?", "no TMA loads"};
    kf_sass_check_ops(mem, k, want, why, absent);
}

static inline void kf_sass_check_hopper(kf_mem *mem, const kf_cuda_kernel *k) {
    kf_sass_check_hopper_without(mem, k, NULL);
}

/* The sm_80 GEMM kernel `k`: HMMA (mma.sync), LDGSTS (cp.async) and LDSM
 * (ldmatrix), no HGMMA. */
static inline void kf_sass_check_ampere(kf_mem *mem, const kf_cuda_kernel *k) {
    static const char *const want[] = {"HMMA", "LDGSTS", "LDSM", NULL};
    static const char *const why[] = {"no mma.sync", "no cp.async loads", "no ldmatrix"};
    kf_sass_check_ops(mem, k, want, why, "HGMMA");
}

#endif
