/*
 * dtype.c -- dtype names and sizes, and every conversion between a double and
 * a dtype's storage format.
 *
 * The reference evaluator computes in double and rounds each result to its
 * tensor's dtype as it is stored, so the rounding here is the definition the
 * backends are checked against:
 *
 *   f64   the double itself.
 *   f32   round to nearest even; past the largest float, +-inf.
 *   f16   round to nearest even, with subnormals (quantum 2^-24); |v| >= 65520
 *   bf16  (halfway past the largest finite) rounds to +-inf. NaN stays NaN
 *         (quiet, sign and the top payload bits kept). +-0 keep their sign.
 *   i32   truncate toward zero, saturate to [INT32_MIN, INT32_MAX], NaN -> 0.
 *   bool  v != 0 (so NaN -> 1, as C's conversion to _Bool does).
 *   i64   (indices only) truncate toward zero, saturate to +-2^63 (as the
 *         nearest doubles), NaN -> 0. Values above 2^53 are not exact in a
 *         double; no index that large addresses a tensor kfuse accepts.
 *
 * Rounding a double to f16 or bf16 is ONE rounding of the double. Going
 * through float first would round twice, and double rounding can differ
 * (a double just above an f16 halfway point can round down onto the halfway
 * float, which then ties to even). kf_round_to_format rounds the double
 * directly; the result is exactly representable in float, so the final
 * float -> 16-bit step below is exact.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ir/ir.h"

static const char *const dtype_names[KF_DTYPE_COUNT] = {
    [KF_DTYPE_F32] = "f32", [KF_DTYPE_F16] = "f16", [KF_DTYPE_BF16] = "bf16",
    [KF_DTYPE_F64] = "f64", [KF_DTYPE_I32] = "i32", [KF_DTYPE_BOOL] = "bool",
    [KF_DTYPE_I64] = "i64",
};
static const size_t dtype_sizes[KF_DTYPE_COUNT] = {
    [KF_DTYPE_F32] = 4, [KF_DTYPE_F16] = 2,  [KF_DTYPE_BF16] = 2, [KF_DTYPE_F64] = 8,
    [KF_DTYPE_I32] = 4, [KF_DTYPE_BOOL] = 1, [KF_DTYPE_I64] = 8,
};
_Static_assert(KF_DTYPE_COUNT == 7, "dtype tables above list every dtype");

const char *kf_dtype_name(kf_dtype dtype) {
    if ((unsigned)dtype >= KF_DTYPE_COUNT)
        return "?";
    return dtype_names[dtype];
}

size_t kf_dtype_size(kf_dtype dtype) {
    if ((unsigned)dtype >= KF_DTYPE_COUNT)
        return 0;
    return dtype_sizes[dtype];
}

/* ------------------------------------------------------------------------ */
/* Bit-level float <-> f16 / bf16                                             */
/* ------------------------------------------------------------------------ */

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* float -> binary16, round to nearest even, from the bits (no FPU rounding
 * mode involved, so the result does not depend on fesetround). */
uint16_t kf_f32_to_f16(float value) {
    uint32_t x = float_bits(value);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t exp = (x >> 23) & 0xFFu;
    uint32_t man = x & 0x7FFFFFu;

    if (exp == 0xFFu) {
        if (man == 0)
            return (uint16_t)(sign | 0x7C00u); /* inf */
        /* NaN: keep the top payload bits, force quiet. */
        return (uint16_t)(sign | 0x7E00u | (man >> 13));
    }
    /* Unbiased exponent; f16 normals have e in [-14, 15]. */
    int e = (int)exp - 127;
    if (e > 15)
        return (uint16_t)(sign | 0x7C00u); /* >= 2^16: overflows */
    if (e >= -14) {
        /* Normal range: 10 of 23 mantissa bits survive; round the other 13. */
        uint32_t h = ((uint32_t)(e + 15) << 10) | (man >> 13);
        uint32_t rest = man & 0x1FFFu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
            h++; /* a carry into the exponent is right, up to inf (0x7C00) */
        return (uint16_t)(sign | h);
    }
    /* Subnormal f16 (or zero): value = m * 2^-24 with m < 1024. Below
     * 2^-25 (half the smallest subnormal) everything rounds to zero, and a
     * float zero or subnormal is far below it. */
    if (e < -25)
        return sign;
    uint32_t full = man | 0x800000u; /* value = full * 2^(e-23) = (full >> shift) * 2^-24 */
    int shift = -e - 1;              /* 14..24 */
    uint32_t h = full >> shift;
    uint32_t rest = full & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u)))
        h++; /* may become 0x400, the smallest normal: right */
    return (uint16_t)(sign | h);
}

float kf_f16_to_f32(uint16_t bits) {
    uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
    uint32_t exp = (bits >> 10) & 0x1Fu;
    uint32_t man = bits & 0x3FFu;
    if (exp == 0x1Fu) /* inf or NaN; the payload moves up, quiet bit included */
        return bits_float(sign | 0x7F800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return bits_float(sign);
        /* Subnormal: man * 2^-24, exact in float. */
        float f = (float)man * 0x1p-24f;
        return sign ? -f : f;
    }
    return bits_float(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

uint16_t kf_f32_to_bf16(float value) {
    uint32_t x = float_bits(value);
    if ((x & 0x7F800000u) == 0x7F800000u && (x & 0x7FFFFFu) != 0)
        return (uint16_t)((x >> 16) | 0x0040u); /* NaN: quiet, never rounds to inf */
    /* bf16 is float's top half: round the low 16 bits to nearest even. A
     * carry runs into the exponent, and past the largest finite to inf. */
    uint32_t lsb = (x >> 16) & 1u;
    return (uint16_t)((x + 0x7FFFu + lsb) >> 16);
}

float kf_bf16_to_f32(uint16_t bits) { return bits_float((uint32_t)bits << 16); }

/* ------------------------------------------------------------------------ */
/* Rounding a double to a narrower binary format                              */
/* ------------------------------------------------------------------------ */

/* Round-half-even of x to an integer; |x| < 2^53 so every step is exact. */
static double rne_int(double x) {
    double r = floor(x);
    double d = x - r;
    if (d > 0.5 || (d == 0.5 && fmod(r, 2.0) != 0.0))
        r += 1.0;
    return r;
}

/* Rounds a finite double v to the binary format with `p` significand bits
 * (the implicit one included), smallest normal exponent `emin`, and largest
 * finite value `max`: one round to nearest even with unbounded exponent, then
 * overflow to inf when the rounded magnitude exceeds `max` (IEEE 754). */
static double round_to_format(double v, int p, int emin, double max) {
    if (v == 0.0 || !isfinite(v))
        return v; /* +-0, +-inf and NaN are their own rounding */
    int e;
    (void)frexp(v, &e); /* |v| in [2^(e-1), 2^e) */
    int exp = e - 1;
    if (exp < emin)
        exp = emin;        /* subnormal range: fixed quantum */
    int q = exp - (p - 1); /* the quantum is 2^q */
    /* |v| / 2^q < 2^p, so the scaled value and its rounding are exact. */
    double r = ldexp(rne_int(ldexp(v, -q)), q);
    if (fabs(r) > max)
        return copysign(INFINITY, v);
    if (r == 0.0)
        return copysign(0.0, v);
    return r;
}

#define F16_MAX 65504.0
#define BF16_MAX 0x1.fep127

static double round_f32(double v) {
    /* (float)v is round to nearest even on IEEE hardware, but C leaves an
     * out-of-range conversion undefined, so take the overflow side by hand:
     * halfway between FLT_MAX and 2^128 ties to the even 2^128, i.e. inf. */
    if (fabs(v) > FLT_MAX) {
        if (isnan(v))
            return v;
        return fabs(v) >= 0x1.ffffffp127 ? copysign(INFINITY, v) : copysign(FLT_MAX, v);
    }
    return (double)(float)v;
}

static double round_i32(double v) {
    if (isnan(v))
        return 0.0;
    v = trunc(v);
    if (v > 2147483647.0)
        return 2147483647.0;
    if (v < -2147483648.0)
        return -2147483648.0;
    return v;
}

static double round_i64(double v) {
    if (isnan(v))
        return 0.0;
    v = trunc(v);
    if (v >= 9223372036854775808.0)
        return 9223372036854774784.0; /* the largest double below 2^63 */
    if (v < -9223372036854775808.0)
        return -9223372036854775808.0;
    return v;
}

double kf_ir_round(kf_dtype d, double v) {
    switch (d) {
    case KF_DTYPE_F64:
        return v;
    case KF_DTYPE_F32:
        return round_f32(v);
    case KF_DTYPE_F16:
        return round_to_format(v, 11, -14, F16_MAX);
    case KF_DTYPE_BF16:
        return round_to_format(v, 8, -126, BF16_MAX);
    case KF_DTYPE_I32:
        return round_i32(v);
    case KF_DTYPE_BOOL:
        return v != 0.0 ? 1.0 : 0.0;
    case KF_DTYPE_I64:
        return round_i64(v);
    default:
        KF_ASSERT(!"kf_ir_round: bad dtype");
        return v;
    }
}

double kf_ir_load(const void *data, kf_dtype d, int64_t i) {
    switch (d) {
    case KF_DTYPE_F32:
        return (double)((const float *)data)[i];
    case KF_DTYPE_F16:
        return (double)kf_f16_to_f32(((const uint16_t *)data)[i]);
    case KF_DTYPE_BF16:
        return (double)kf_bf16_to_f32(((const uint16_t *)data)[i]);
    case KF_DTYPE_F64:
        return ((const double *)data)[i];
    case KF_DTYPE_I32:
        return (double)((const int32_t *)data)[i];
    case KF_DTYPE_BOOL:
        return ((const uint8_t *)data)[i] != 0 ? 1.0 : 0.0;
    case KF_DTYPE_I64:
        return (double)((const int64_t *)data)[i];
    default:
        KF_ASSERT(!"kf_ir_load: bad dtype");
        return 0.0;
    }
}

void kf_ir_store(void *data, kf_dtype d, int64_t i, double v) {
    /* Every rounded value is exact in the storage type, so after kf_ir_round
     * each conversion below is exact (f16/bf16 go through float losslessly). */
    double r = kf_ir_round(d, v);
    switch (d) {
    case KF_DTYPE_F32:
        ((float *)data)[i] = (float)r;
        break;
    case KF_DTYPE_F16:
        ((uint16_t *)data)[i] = kf_f32_to_f16((float)r);
        break;
    case KF_DTYPE_BF16:
        ((uint16_t *)data)[i] = kf_f32_to_bf16((float)r);
        break;
    case KF_DTYPE_F64:
        ((double *)data)[i] = r;
        break;
    case KF_DTYPE_I32:
        ((int32_t *)data)[i] = (int32_t)r;
        break;
    case KF_DTYPE_BOOL:
        ((uint8_t *)data)[i] = r != 0.0 ? 1u : 0u;
        break;
    case KF_DTYPE_I64:
        ((int64_t *)data)[i] = (int64_t)r;
        break;
    default:
        KF_ASSERT(!"kf_ir_store: bad dtype");
        break;
    }
}
