#!/usr/bin/env python3
"""emu.py FILE.kfg [SEEDS] -- checks an elementwise kernel that codegen/cuda
generates, with no GPU: a developer's tool, not part of CI.

It writes the graph's one generated kernel (sm_90a recipes; graphs planned
into other or more kernels are skipped), compiles it as host C++ with emu.h
(the CUDA keywords defined away, threadIdx/blockIdx as globals, the packed
bf16 instructions replaced by their float definition), runs it thread by
thread on random inputs under several grids (1, 2, 3 and the hoisting
multiple; buffers aligned and shifted by one element, so both the vector and
the scalar loops run) and judges every output with kf_graph_check. The host
compile runs under ASan/UBSan, so a misaligned vector access (UBSan's
alignment check) or an out-of-bounds read fails the run. f16 (inline PTX)
and the sm_90 bulk path (cp.async.bulk) are outside what it can run.

  KF_BUILD=build-dev scripts/emu/emu.py scripts/emu/rotary_head_view.kfg 3
  for f in scripts/emu/*.kfg; do scripts/emu/emu.py $f; done
  EMU_IMAX=9 ...  # i32/i64 inputs drawn from [0, 9) (gather indices)

Needs a build of kfuse (libkfuse.a, by default in build-dev) and g++.
"""
import os, re, subprocess, sys, tempfile
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
B = os.path.abspath(os.environ.get("KF_BUILD", os.path.join(SRC, "build-dev")))
LINK = (f"-Wl,-rpath,/usr/local/cuda/lib:/usr/lib/llvm-19/lib {B}/libkfuse.a -lm "
        "/usr/local/cuda/lib/libnvrtc.so -ldl /usr/lib/llvm-19/lib/libLLVM-19.so")
kfg = sys.argv[1]
seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
d = tempfile.mkdtemp(prefix="emu_")
env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
gen = os.path.join(d, "gensrc")
c = subprocess.run(f"cc -g -fsanitize=address,undefined -I{SRC} -I{SRC}/include -I{B} "
                   f"{HERE}/gensrc.c -o {gen} {LINK}", shell=True, capture_output=True, text=True)
if c.returncode:
    print("gensrc: compile failed", c.stderr[:3000]); sys.exit(1)
out = subprocess.run([gen, kfg, "sm_90a", d], capture_output=True, text=True, env=env)
if out.returncode:
    print("gensrc failed", out.stderr); sys.exit(1)
ks = [l.split()[0] for l in out.stdout.splitlines()]
ew = [k for k in ks if os.path.basename(k).startswith(("ew_", "layout_"))]
if len(ks) != 1 or not ew:
    print(f"SKIP {kfg}: kernels {[os.path.basename(k) for k in ks]}")
    __import__("shutil").rmtree(d, ignore_errors=True)
    sys.exit(0)
k = ks[0]
src = open(k).read()
params = re.findall(r"^ \*   p(\d+) (in|out|flags) +(\S+) (\w+)\[?([^\]\n]*)\]?", src, re.M)
T = {"bf16": ("kf_bf16", "KF_DTYPE_BF16", 2), "f32": ("float", "KF_DTYPE_F32", 4),
     "f16": ("kf_f16", "KF_DTYPE_F16", 2), "i32": ("int", "KF_DTYPE_I32", 4),
     "bool": ("unsigned char", "KF_DTYPE_BOOL", 1), "f64": ("double", "KF_DTYPE_F64", 8),
     "i64": ("long long", "KF_DTYPE_I64", 8)}
rows, args = [], []
for i, (idx, io, name, dt, dims) in enumerate(params):
    assert int(idx) == i
    if io == "flags":
        rows.append('{"", 2, KF_DTYPE_I32, 1ull, 4}')
        args.append(f"(unsigned *)pp[{i}]")
        continue
    n = 1
    for x in dims.split(","):
        if x.strip():
            n *= int(x)
    if io == "flags":
        rows.append('{"", 2, KF_DTYPE_I32, 1ull, 4}')
        args.append(f"(unsigned *)pp[{i}]")
        continue
    ct, kd, z = T[dt]
    rows.append(f'{{"{name}", {1 if io == "out" else 0}, {kd}, {n}ull, {z}}}')
    args.append(f"({'' if io == 'out' else 'const '}{ct} *)pp[{i}]")
kern = r'''
#include "emu.h"
#include "k.cu"
extern "C" void emu_launch(void **pp, unsigned grid) {
    gridDim.x = grid; blockDim.x = KF_BLOCK;
    for (unsigned b = 0; b < grid; b++)
        for (unsigned t = 0; t < KF_BLOCK; t++) {
            blockIdx.x = b; threadIdx.x = t;
            KF_KERNEL(%s);
        }
}
''' % ", ".join(args)
main = r'''
#include "kfuse.h"
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cstring>
struct P { const char *name; int out; kf_dtype dt; unsigned long long n; size_t z; };
static P params[] = {%s};
static const int NP = sizeof params / sizeof params[0];
static unsigned long long rng = 1;
static double urand() { rng = rng * 6364136223846793005ull + 1442695040888963407ull; return (double)(rng >> 11) / 9007199254740992.0; }
extern "C" void emu_launch(void **pp, unsigned grid);
int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "r"); static char text[1 << 20]; size_t len = fread(text, 1, sizeof text, f); fclose(f);
    unsigned seed = atoi(argv[2]), grid = atoi(argv[3]); int shift = argc > 4 ? atoi(argv[4]) : 0;
    rng = seed * 7919ull + 17;
    kf_options o; kf_options_init(&o); o.target = KF_TARGET_CPU; kf_ctx *ctx; kf_ctx_create(&o, &ctx);
    kf_graph *g; if (kf_graph_parse(ctx, text, len, &g) != KF_OK) { printf("parse\n"); return 2; }
    void *pp[NP]; std::vector<kf_binding> in, outb;
    for (int i = 0; i < NP; i++) {
        size_t bytes = params[i].n * params[i].z;
        unsigned char *m = (unsigned char *)aligned_alloc(64, (bytes + 64 + 63) / 64 * 64 + 64);
        m += shift * params[i].z; /* shift: misaligned buffers (the scalar paths) */
        pp[i] = m;
        if (params[i].out == 2) { memset(m, 0, 4); continue; }
        if (params[i].out) { memset(m, 0xff, bytes); outb.push_back({params[i].name, m, bytes}); continue; }
        for (unsigned long long j = 0; j < params[i].n; j++) {
            double v = urand() * 4 - 2;
            switch (params[i].dt) {
            case KF_DTYPE_BF16: { float x = (float)v; unsigned u; memcpy(&u, &x, 4); u += 0x7fff + ((u >> 16) & 1); ((unsigned short *)m)[j] = u >> 16; break; }
            case KF_DTYPE_F32: ((float *)m)[j] = (float)v; break;
            case KF_DTYPE_F64: ((double *)m)[j] = v; break;
            case KF_DTYPE_I32: ((int *)m)[j] = (int)(urand() * (getenv("EMU_IMAX") ? atoi(getenv("EMU_IMAX")) : 32)); break;
            case KF_DTYPE_I64: ((long long *)m)[j] = (long long)(urand() * 32); break;
            case KF_DTYPE_BOOL: m[j] = urand() < 0.5; break;
            default: printf("dtype\n"); return 2;
            }
        }
        in.push_back({params[i].name, m, bytes});
    }
    emu_launch(pp, grid);
    std::vector<kf_check_result> r(outb.size());
    if (kf_graph_check(g, in.data(), in.size(), outb.data(), outb.size(), r.data()) != KF_OK) { printf("check: %%s\n", kf_graph_error(g)); return 2; }
    int bad = 0;
    for (size_t i = 0; i < outb.size(); i++) {
        printf("  %%s err %%.3g bound %%.3g %%s\n", outb[i].name, r[i].err, r[i].bound, r[i].pass ? "ok" : "FAIL");
        bad += !r[i].pass;
    }
    return bad ? 1 : 0;
}
''' % (", ".join(rows))
open(os.path.join(d, "main.cpp"), "w").write(main)
open(os.path.join(d, "kern.cpp"), "w").write(kern)
a = src.index("template <int OP> __device__ __forceinline__ unsigned kf_bop2")
b = src.index("    return d;\n}", a)
host = """template <int OP> __device__ __forceinline__ unsigned kf_bop2(unsigned a, unsigned b) {
    float x0 = kf_lo_bf16(a), x1 = kf_hi_bf16(a), y0 = kf_lo_bf16(b), y1 = kf_hi_bf16(b);
    float r0 = kf_round_bf16(OP == 0 ? x0 + y0 : OP == 1 ? x0 - y0 : x0 * y0);
    float r1 = kf_round_bf16(OP == 0 ? x1 + y1 : OP == 1 ? x1 - y1 : x1 * y1);
    unsigned d = kf_pk_bf16(r0, r1);
"""
open(os.path.join(d, "k.cu"), "w").write(src[:a] + host + src[b:])
inc = f"-I{HERE} -I{d} -I{SRC}/include"
cmd = (f"g++ -std=c++17 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -w {inc} {d}/main.cpp {d}/kern.cpp -o {d}/run "
       f"{LINK}")
c = subprocess.run(cmd, shell=True, capture_output=True, text=True)
if c.returncode:
    print("compile failed", c.stderr[:3000]); sys.exit(1)
m = re.search(r"#define KF_MINB.*\n#define KF_UNROLL (\d+)", src)
hp = int(re.search(r"#define KF_HOIST_P (\d+)", src).group(1))
vec = int(re.search(r"#define KF_VEC (\d+)", src).group(1))
grids = sorted({1, 2, 3} | ({hp // __import__("math").gcd(hp, 256 * vec)} if hp else set()))
fails = 0
for s in range(seeds):
    for gr in grids:
        for sh in (0, 1):
            r = subprocess.run([f"{d}/run", kfg, str(s), str(gr), str(sh)], capture_output=True, text=True, env=env)
            if r.returncode:
                fails += 1
                print(f"FAIL {kfg} seed {s} grid {gr} shift {sh}\n{r.stdout}{r.stderr[-2000:]}")
print(f"{'ok' if not fails else 'FAILED'} {kfg}: {os.path.basename(k)} vec {vec} unroll {m.group(1)} "
      f"hoist {hp} grids {grids}" + (f" (kept: {d})" if fails else ""))
if not fails:
    __import__("shutil").rmtree(d, ignore_errors=True)
sys.exit(1 if fails else 0)
