/* The NEON vocabulary: tail-safe loads and stores, lane masks, exp of
 * decays, feature maps, and the generic names (vf_*) of the kernels written
 * once for every ISA (delta_kernels.h). Advanced SIMD is baseline on
 * AArch64: no -m flags. */
#ifndef LINATTN_SIMD128_H
#define LINATTN_SIMD128_H

#include <arm_neon.h>
#include <sleef.h>
#include <stdint.h>

#include "../gate.h"
#include "linattn.h"

#define INLINE static inline __attribute__((always_inline))
#define LA_INLINE INLINE

/* The first m floats at p (m may be <= 0 or >= 4); missing lanes are 0. */
INLINE float32x4_t ldn(const float *p, int64_t m)
{
    if (m >= 4)
        return vld1q_f32(p);
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t l = 0; l < m; l++)
        t[l] = p[l];
    return vld1q_f32(t);
}

/* Stores the first m lanes of x at p. */
INLINE void stn(float *p, float32x4_t x, int64_t m)
{
    if (m >= 4) {
        vst1q_f32(p, x);
        return;
    }
    float t[4];
    vst1q_f32(t, x);
    for (int64_t l = 0; l < m; l++)
        p[l] = t[l];
}

/* Lanes l >= d of x, the others 0: the causal mask of a query vector
 * starting at row i against key j is lanes_from(x, j - i). */
INLINE float32x4_t lanes_from(float32x4_t x, int64_t d)
{
    if (d <= 0)
        return x;
    if (d >= 4)
        return vdupq_n_f32(0.0f);
    const uint32x4_t iota = {0, 1, 2, 3};
    return vreinterpretq_f32_u32(
        vandq_u32(vcgeq_u32(iota, vdupq_n_u32((uint32_t)d)), vreinterpretq_u32_f32(x)));
}

/* Lanes l < m of x, the others 0 (tail lanes whose phi(0) is not 0). */
INLINE float32x4_t lanes_below(float32x4_t x, int64_t m)
{
    if (m >= 4)
        return x;
    const uint32x4_t iota = {0, 1, 2, 3};
    return vreinterpretq_f32_u32(
        vandq_u32(vcltq_u32(iota, vdupq_n_u32((uint32_t)(m > 0 ? m : 0))),
                  vreinterpretq_u32_f32(x)));
}

/* e^x as SLEEF's 2^(x log2 e), as on x86 (exp8 in simd256.h says why):
 * 47 instructions instead of expf4's 62. */
INLINE float32x4_t exp4(float32x4_t x)
{
    return Sleef_exp2f4_u10advsimd(vmulq_f32(x, vdupq_n_f32(LA_LOG2E)));
}

/* A decay: exp of a value that is <= 0 in exact arithmetic; the clamp makes
 * lanes masked out later (j > i) harmless instead of overflowing. */
INLINE float32x4_t exp_nonpos(float32x4_t x)
{
    const float32x4_t e = exp4(vminq_f32(x, vdupq_n_f32(0.0f)));
    /* exactly 0 below LA_EXP_ZERO_BELOW (no subnormals); NaN stays NaN */
    const uint32x4_t tiny = vcltq_f32(x, vdupq_n_f32(LA_EXP_ZERO_BELOW));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(e), tiny));
}

/* e^(x[l] - y) and e^(x - y[l]) for prefix sums kept in double: the
 * difference is taken in double, like the scalar table, so nearby rows keep
 * the precision of the g they sum, then rounded once to float. */
INLINE float32x4_t decay_vs(const double *x, double y)
{
    const float64x2_t yy = vdupq_n_f64(y);
    const float64x2_t lo = vsubq_f64(vld1q_f64(x), yy), hi = vsubq_f64(vld1q_f64(x + 2), yy);
    return exp_nonpos(vcvt_high_f32_f64(vcvt_f32_f64(lo), hi));
}
INLINE float32x4_t decay_sv(double x, const double *y)
{
    const float64x2_t xx = vdupq_n_f64(x);
    const float64x2_t lo = vsubq_f64(xx, vld1q_f64(y)), hi = vsubq_f64(xx, vld1q_f64(y + 2));
    return exp_nonpos(vcvt_high_f32_f64(vcvt_f32_f64(lo), hi));
}

INLINE float32x4_t phi4(linattn_phi phi, float32x4_t x)
{
    const float32x4_t zero = vdupq_n_f32(0.0f);
    switch (phi) {
    case LINATTN_PHI_ELU1: {
        /* exp only of min(x, 0); NaN stays NaN through min, compare and exp */
        const float32x4_t e = exp4(vminq_f32(x, zero));
        return vbslq_f32(vcgtq_f32(x, zero), vaddq_f32(x, vdupq_n_f32(1.0f)), e);
    }
    case LINATTN_PHI_RELU: return vmaxq_f32(x, zero); /* FMAX: NaN propagates */
    default: return x;
    }
}

/* ---- the generic vocabulary (see delta_kernels.h) ------------------------ */

typedef float32x4_t la_vf;
#define LA_VW 4
LA_INLINE la_vf vf_zero(void) { return vdupq_n_f32(0.0f); }
LA_INLINE la_vf vf_set1(float x) { return vdupq_n_f32(x); }
LA_INLINE la_vf vf_load(const float *p) { return vld1q_f32(p); }
LA_INLINE void vf_store(float *p, la_vf x) { vst1q_f32(p, x); }
LA_INLINE la_vf vf_loadn(const float *p, int64_t n) { return ldn(p, n); }
LA_INLINE void vf_storen(float *p, la_vf x, int64_t n) { stn(p, x, n); }
LA_INLINE la_vf vf_fma(la_vf a, la_vf b, la_vf c) { return vfmaq_f32(c, a, b); }
LA_INLINE la_vf vf_mul(la_vf a, la_vf b) { return vmulq_f32(a, b); }
LA_INLINE la_vf vf_sub(la_vf a, la_vf b) { return vsubq_f32(a, b); }
LA_INLINE la_vf vf_add(la_vf a, la_vf b) { return vaddq_f32(a, b); }
LA_INLINE la_vf vf_div(la_vf a, la_vf b) { return vdivq_f32(a, b); }
/* a < b ? a : b and a > b ? a : b per lane, as x86 orders them (a NaN a
 * gives b; FMIN and FMAX would return the NaN) */
LA_INLINE la_vf vf_min(la_vf a, la_vf b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
LA_INLINE la_vf vf_max(la_vf a, la_vf b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
LA_INLINE float vf_hsum(la_vf x) { return vaddvq_f32(x); }
/* Four sums at once by pairwise adds: (x0 + x1) + (x2 + x3) of each. */
LA_INLINE void vf_hsum4(la_vf a, la_vf b, la_vf c, la_vf d, float *s)
{
    vst1q_f32(s, vpaddq_f32(vpaddq_f32(a, b), vpaddq_f32(c, d)));
}
LA_INLINE la_vf vf_decay(la_vf x) { return exp_nonpos(x); }
LA_INLINE la_vf vf_phi(linattn_phi phi, la_vf x) { return phi4(phi, x); }
LA_INLINE la_vf vf_keep(la_vf x, int64_t n) { return lanes_below(x, n); }

/* ---- the input stage's words (stage_kernels.h) -------------------------- */

LA_INLINE la_vf vf_widen_bf16(const uint16_t *p)
{
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}
LA_INLINE la_vf vf_widen_f16(const uint16_t *p)
{
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}
/* Round to nearest even; NaN stays a quiet NaN (la_f32_to_bf16 in half.h). */
LA_INLINE void vf_narrow_bf16(uint16_t *p, la_vf x)
{
    const uint32x4_t u = vreinterpretq_u32_f32(x);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t r = vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7fff)), lsb);
    const uint32x4_t qnan = vorrq_u32(u, vdupq_n_u32(0x400000));
    vst1_u16(p, vshrn_n_u32(vbslq_u32(vceqq_f32(x, x), r, qnan), 16));
}
LA_INLINE void vf_narrow2_bf16(uint16_t *p, la_vf lo, la_vf hi)
{
    vf_narrow_bf16(p, lo);
    vf_narrow_bf16(p + 4, hi);
}
/* FCVTN rounds by FPCR: to nearest even, as every process starts. */
LA_INLINE void vf_narrow_f16(uint16_t *p, la_vf x)
{
    vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(x)));
}
/* 1 / (1 + e^-x) from e^-|x| (never overflows); x finite. */
LA_INLINE la_vf vf_sigmoid(la_vf x)
{
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t e = exp4(vnegq_f32(vabsq_f32(x)));
    const float32x4_t r = vdivq_f32(one, vaddq_f32(one, e));
    return vbslq_f32(vcgeq_f32(x, vdupq_n_f32(0.0f)), r, vmulq_f32(e, r));
}

/* flags with the lanes set (all bits) where x is NaN or outside [lo, hi]. */
LA_INLINE la_vf vf_flag_outside(la_vf flags, la_vf x, la_vf lo, la_vf hi)
{
    const uint32x4_t within = vandq_u32(vcgeq_f32(x, lo), vcleq_f32(x, hi)); /* NaN: 0 */
    return vreinterpretq_f32_u32(vornq_u32(vreinterpretq_u32_f32(flags), within));
}
LA_INLINE int vf_any_flag(la_vf flags) { return vmaxvq_u32(vreinterpretq_u32_f32(flags)) != 0; }

/* r[i] lane j becomes r[j] lane i (4 x 4): TRN1/TRN2 on pairs, then the
 * 64-bit halves recombined. */
LA_INLINE void vf_transpose(la_vf r[4])
{
    const float32x4x2_t a = vtrnq_f32(r[0], r[1]), b = vtrnq_f32(r[2], r[3]);
    r[0] = vcombine_f32(vget_low_f32(a.val[0]), vget_low_f32(b.val[0]));
    r[1] = vcombine_f32(vget_low_f32(a.val[1]), vget_low_f32(b.val[1]));
    r[2] = vcombine_f32(vget_high_f32(a.val[0]), vget_high_f32(b.val[0]));
    r[3] = vcombine_f32(vget_high_f32(a.val[1]), vget_high_f32(b.val[1]));
}

#endif
