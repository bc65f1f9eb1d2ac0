/*
 * emu.h -- (scripts/emu/emu.py) what a generated elementwise kernel needs to
 * compile as host C++: the CUDA keywords defined away, the thread and block
 * indices as globals the launcher sets, the bit casts, the vector types.
 */
#include <cmath>
#include <cstring>
#include <cstdint>
#include <algorithm>
using std::min; using std::max;
#define __device__
#define __host__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) alignas(n)
#define __shared__ static
#define __constant__
struct emu_dim { unsigned x, y, z; };
static emu_dim threadIdx, blockIdx, gridDim, blockDim;
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
static inline void __syncthreads() {}
static inline unsigned atomicOr(unsigned *p, unsigned v) { unsigned o = *p; *p |= v; return o; }
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
