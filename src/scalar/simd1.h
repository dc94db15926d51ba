/* The one-lane vocabulary: the generic kernels (additive_kernels.h,
 * delta_kernels.h) compiled as plain C for the scalar table. */
#ifndef LINATTN_SIMD1_H
#define LINATTN_SIMD1_H

#include <math.h>
#include <stdint.h>

#include "../gate.h"
#include "../half.h"
#include "linattn.h"

#define LA_INLINE static inline __attribute__((always_inline))

typedef float la_vf;
#define LA_VW 1
LA_INLINE la_vf vf_zero(void) { return 0.0f; }
LA_INLINE la_vf vf_set1(float x) { return x; }
LA_INLINE la_vf vf_load(const float *p) { return *p; }
LA_INLINE void vf_store(float *p, la_vf x) { *p = x; }
LA_INLINE la_vf vf_loadn(const float *p, int64_t n) { return n >= 1 ? *p : 0.0f; }
LA_INLINE void vf_storen(float *p, la_vf x, int64_t n)
{
    if (n >= 1)
        *p = x;
}
/* One rounding where the target has an FMA instruction (aarch64); on the
 * x86-64 baseline fmaf is a library call per element, so two roundings. */
#ifdef FP_FAST_FMAF
LA_INLINE la_vf vf_fma(la_vf a, la_vf b, la_vf c) { return fmaf(a, b, c); }
#else
LA_INLINE la_vf vf_fma(la_vf a, la_vf b, la_vf c) { return a * b + c; }
#endif
LA_INLINE la_vf vf_mul(la_vf a, la_vf b) { return a * b; }
LA_INLINE la_vf vf_sub(la_vf a, la_vf b) { return a - b; }
LA_INLINE la_vf vf_add(la_vf a, la_vf b) { return a + b; }
LA_INLINE la_vf vf_div(la_vf a, la_vf b) { return a / b; }
/* (a NaN a gives b, as on every table) */
LA_INLINE la_vf vf_min(la_vf a, la_vf b) { return a < b ? a : b; }
LA_INLINE la_vf vf_max(la_vf a, la_vf b) { return a > b ? a : b; }
LA_INLINE float vf_hsum(la_vf x) { return x; }
LA_INLINE void vf_hsum4(la_vf a, la_vf b, la_vf c, la_vf d, float *s)
{
    s[0] = a, s[1] = b, s[2] = c, s[3] = d;
}
LA_INLINE la_vf vf_decay(la_vf x)
{
    return x < LA_EXP_ZERO_BELOW ? 0.0f : expf(x < 0.0f ? x : 0.0f);
}
LA_INLINE la_vf vf_phi(linattn_phi phi, la_vf x)
{
    switch (phi) {
    case LINATTN_PHI_ELU1: return x > 0.0f ? x + 1.0f : expf(x);
    case LINATTN_PHI_RELU: return x > 0.0f || isnan(x) ? x : 0.0f;
    default: return x;
    }
}
LA_INLINE la_vf vf_keep(la_vf x, int64_t n) { return n >= 1 ? x : 0.0f; }

/* ---- the input stage's words (stage_kernels.h) -------------------------- */

LA_INLINE la_vf vf_widen_bf16(const uint16_t *p) { return la_bf16_to_f32(*p); }
LA_INLINE la_vf vf_widen_f16(const uint16_t *p) { return la_f16_to_f32(*p); }
LA_INLINE void vf_narrow_bf16(uint16_t *p, la_vf x) { *p = la_f32_to_bf16(x); }
LA_INLINE void vf_narrow2_bf16(uint16_t *p, la_vf lo, la_vf hi)
{
    p[0] = la_f32_to_bf16(lo);
    p[1] = la_f32_to_bf16(hi);
}
LA_INLINE void vf_narrow_f16(uint16_t *p, la_vf x) { *p = la_f32_to_f16(x); }
LA_INLINE la_vf vf_sigmoid(la_vf x)
{
    const float e = expf(-fabsf(x)), r = 1.0f / (1.0f + e);
    return x >= 0.0f ? r : e * r;
}

/* flags, or 1 where x is NaN or outside [lo, hi]. */
LA_INLINE la_vf vf_flag_outside(la_vf flags, la_vf x, la_vf lo, la_vf hi)
{
    return x >= lo && x <= hi ? flags : 1.0f;
}
LA_INLINE int vf_any_flag(la_vf flags) { return flags != 0.0f; }

/* A 1 x 1 tile is its own transpose. */
LA_INLINE void vf_transpose(la_vf r[1]) { (void)r; }

#endif
