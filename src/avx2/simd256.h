/* The AVX2 + FMA vocabulary: the table's tail-safe loads and stores, exp of
 * decays, feature maps and reductions, and the generic names (vf_*) the
 * kernels written once for every ISA use (delta_kernels.h). Only files
 * compiled with -mavx2 -mfma include it. */
#ifndef LINATTN_SIMD256_H
#define LINATTN_SIMD256_H

#include <immintrin.h>
#include <sleef.h>
#include <stdint.h>

#include "../gate.h"
#include "linattn.h"

#define LA_INLINE static inline __attribute__((always_inline))

/* Lanes l < w (w clamped to 0..8). */
LA_INLINE __m256i lane_mask(int64_t w)
{
    const int n = w < 0 ? 0 : w > 8 ? 8 : (int)w;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

LA_INLINE __m256i lane_mask64(int64_t w)
{
    const int64_t n = w < 0 ? 0 : w > 4 ? 4 : w;
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
}

/* w >= 8: a plain unaligned access; else only the first w lanes are touched. */
LA_INLINE __m256 load8(const float *p, int64_t w)
{
    return w >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lane_mask(w));
}

LA_INLINE void store8(float *p, __m256 x, int64_t w)
{
    if (w >= 8)
        _mm256_storeu_ps(p, x);
    else
        _mm256_maskstore_ps(p, lane_mask(w), x);
}

/* 8 doubles (w valid, the rest read as 0) minus 8 doubles, as floats. */
LA_INLINE __m256 ddiff8(const double *x, const double *y, int64_t w)
{
    __m256d x0, x1, y0, y1;
    if (w >= 8) {
        x0 = _mm256_loadu_pd(x), x1 = _mm256_loadu_pd(x + 4);
        y0 = _mm256_loadu_pd(y), y1 = _mm256_loadu_pd(y + 4);
    } else {
        const __m256i m0 = lane_mask64(w), m1 = lane_mask64(w - 4);
        x0 = _mm256_maskload_pd(x, m0), x1 = _mm256_maskload_pd(x + 4, m1);
        y0 = _mm256_maskload_pd(y, m0), y1 = _mm256_maskload_pd(y + 4, m1);
    }
    return _mm256_set_m128(_mm256_cvtpd_ps(_mm256_sub_pd(x1, y1)),
                           _mm256_cvtpd_ps(_mm256_sub_pd(x0, y0)));
}

/* e^x as SLEEF's 2^(x log2 e): 34 instructions instead of its expf8's 40,
 * 4-7% of a forward where exps bind (elu+1, channel gates at dk = 64). The
 * rounded product adds at most |x| 2^-24 relative error: 6e-8 for |x| <= 1,
 * 5e-6 at LA_EXP_ZERO_BELOW, below anything the results can resolve. */
LA_INLINE __m256 exp8(__m256 x)
{
    return Sleef_exp2f8_u10avx2(_mm256_mul_ps(x, _mm256_set1_ps(LA_LOG2E)));
}

/* e^x for a decay exponent. x <= 0 up to rounding; the clamp keeps a
 * masked-out or rounded lane from overflowing. Exactly 0 below
 * LA_EXP_ZERO_BELOW (no subnormals); NaN stays NaN. */
LA_INLINE __m256 decay8(__m256 x)
{
    const __m256 e = exp8(_mm256_min_ps(x, _mm256_setzero_ps()));
    return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(LA_EXP_ZERO_BELOW), _CMP_LT_OQ), e);
}

LA_INLINE float hsum8(__m256 x)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* phi, then lanes >= w zeroed (phi(0) = 1 for ELU1). NaN propagates: min and
 * max return their second operand, x, when it is NaN. */
LA_INLINE __m256 phi8(linattn_phi phi, __m256 x, int64_t w)
{
    const __m256 zero = _mm256_setzero_ps();
    __m256 y = x;
    if (phi == LINATTN_PHI_ELU1) {
        /* exp of min(0, x): large positive x must not overflow the unused branch. */
        const __m256 e = exp8(_mm256_min_ps(zero, x));
        y = _mm256_blendv_ps(e, _mm256_add_ps(x, _mm256_set1_ps(1.0f)),
                             _mm256_cmp_ps(x, zero, _CMP_GT_OQ));
    } else if (phi == LINATTN_PHI_RELU) {
        y = _mm256_max_ps(zero, x);
    }
    return w >= 8 ? y : _mm256_and_ps(y, _mm256_castsi256_ps(lane_mask(w)));
}

/* ---- the generic vocabulary (see delta_kernels.h) ------------------------ */

typedef __m256 la_vf;
#define LA_VW 8
LA_INLINE la_vf vf_zero(void) { return _mm256_setzero_ps(); }
LA_INLINE la_vf vf_set1(float x) { return _mm256_set1_ps(x); }
LA_INLINE la_vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
LA_INLINE void vf_store(float *p, la_vf x) { _mm256_storeu_ps(p, x); }
LA_INLINE la_vf vf_loadn(const float *p, int64_t n) { return load8(p, n); }
LA_INLINE void vf_storen(float *p, la_vf x, int64_t n) { store8(p, x, n); }
LA_INLINE la_vf vf_fma(la_vf a, la_vf b, la_vf c) { return _mm256_fmadd_ps(a, b, c); }
LA_INLINE la_vf vf_mul(la_vf a, la_vf b) { return _mm256_mul_ps(a, b); }
LA_INLINE la_vf vf_sub(la_vf a, la_vf b) { return _mm256_sub_ps(a, b); }
LA_INLINE la_vf vf_add(la_vf a, la_vf b) { return _mm256_add_ps(a, b); }
LA_INLINE la_vf vf_div(la_vf a, la_vf b) { return _mm256_div_ps(a, b); }
/* a < b ? a : b and a > b ? a : b per lane (so a NaN a gives b) */
LA_INLINE la_vf vf_min(la_vf a, la_vf b) { return _mm256_min_ps(a, b); }
LA_INLINE la_vf vf_max(la_vf a, la_vf b) { return _mm256_max_ps(a, b); }
LA_INLINE float vf_hsum(la_vf x) { return hsum8(x); }
/* Four sums at once (a transpose by pairwise adds): lane i of the result
 * is ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)) of the i-th vector. */
LA_INLINE void vf_hsum4(la_vf a, la_vf b, la_vf c, la_vf d, float *s)
{
    const __m256 x = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(s, _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1)));
}
LA_INLINE la_vf vf_decay(la_vf x) { return decay8(x); }
LA_INLINE la_vf vf_phi(linattn_phi phi, la_vf x) { return phi8(phi, x, 8); }
LA_INLINE la_vf vf_keep(la_vf x, int64_t n)
{
    return _mm256_and_ps(x, _mm256_castsi256_ps(lane_mask(n)));
}

/* ---- the input stage's words (stage_kernels.h) -------------------------- */

/* LA_VW 16-bit values widened to float: bfloat16 is the float's top half;
 * float16 through F16C (every AVX2 CPU has it; the table requires it). */
LA_INLINE la_vf vf_widen_bf16(const uint16_t *p)
{
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
LA_INLINE la_vf vf_widen_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
/* Round to nearest even, for lanes that hold no NaN (a NaN's payload may
 * carry into its exponent): the bfloat16 in each lane's high word, the low
 * word left over... */
LA_INLINE __m256i la_round_bf16_high(__m256i u)
{
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
}
/* ...or in its low 16 bits. */
LA_INLINE __m256i la_round_bf16_numbers(__m256i u)
{
    return _mm256_srli_epi32(la_round_bf16_high(u), 16);
}
/* The same for any lane: a NaN stays a quiet NaN (la_f32_to_bf16 in
 * half.h). */
LA_INLINE __m256i la_round_bf16_lanes(la_vf x)
{
    const __m256i u = _mm256_castps_si256(x);
    const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(la_round_bf16_numbers(u), qnan,
                              _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
}
/* Vectors with no NaN (one compare covers two) skip the NaN lanes' blend:
 * three of the rounding's nine operations a vector, in a sweep bound by
 * them (a bfloat16 state's decode step on avx2). */
LA_INLINE int la_no_nan2(la_vf a, la_vf b)
{
    const __m256 nan = _mm256_cmp_ps(a, b, _CMP_UNORD_Q);
    return __builtin_expect(_mm256_testz_ps(nan, nan), 1);
}
/* 32 -> 16 bits: packus saturates nothing here (values < 2^16) */
LA_INLINE void vf_narrow_bf16(uint16_t *p, la_vf x)
{
    const __m256i r = la_no_nan2(x, x) ? la_round_bf16_numbers(_mm256_castps_si256(x))
                                       : la_round_bf16_lanes(x);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(packed));
}
/* Two vectors in one pack and one 32-byte store. */
LA_INLINE void vf_narrow2_bf16(uint16_t *p, la_vf lo, la_vf hi)
{
    const __m256i packed =
        la_no_nan2(lo, hi)
            ? _mm256_packus_epi32(la_round_bf16_numbers(_mm256_castps_si256(lo)),
                                  la_round_bf16_numbers(_mm256_castps_si256(hi)))
            : _mm256_packus_epi32(la_round_bf16_lanes(lo), la_round_bf16_lanes(hi));
    _mm256_storeu_si256((__m256i *)p, _mm256_permute4x64_epi64(packed, 0xd8));
}
/* A bfloat16 state's rows in pair order (state_rows.h): 16 values at p as
 * two vectors, their even elements then their odd ones. Each is the low or
 * the high word of its 32-bit lane, so a pair is one load and one
 * operation a vector to widen, and a shift and a word blend to round back,
 * where natural order takes a zero extension and a shift a vector, and a
 * pack and a permute a pair (Zen 3, a bfloat16 step of 4 heads in L2:
 * 15.1-15.5 us against 18.3-18.5). */
#define LA_BF16_PAIR_ORDER 1
LA_INLINE la_vf vf_widen_bf16_half(const uint16_t *p, int half)
{
    const __m256i w = _mm256_loadu_si256((const __m256i *)p);
    return _mm256_castsi256_ps(half ? _mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u))
                                    : _mm256_slli_epi32(w, 16));
}
LA_INLINE void vf_narrow_bf16_halves(uint16_t *p, la_vf even, la_vf odd)
{
    __m256i lo, hi; /* each bfloat16 in its lane's low word; hi's in its high word */
    if (la_no_nan2(even, odd)) {
        lo = la_round_bf16_numbers(_mm256_castps_si256(even));
        hi = la_round_bf16_high(_mm256_castps_si256(odd));
    } else {
        lo = la_round_bf16_lanes(even);
        hi = _mm256_slli_epi32(la_round_bf16_lanes(odd), 16);
    }
    _mm256_storeu_si256((__m256i *)p, _mm256_blend_epi16(lo, hi, 0xaa));
}
/* 16 floats at p as the half of pair order a bfloat16 row's would be (the
 * 64-bit pieces of a shuffle of both vectors put in order), and back. */
LA_INLINE la_vf vf_load_half(const float *p, int half)
{
    const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
    const __m256 e = half ? _mm256_shuffle_ps(a, b, 0xdd) : _mm256_shuffle_ps(a, b, 0x88);
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xd8));
}
LA_INLINE void vf_store_halves(float *p, la_vf even, la_vf odd)
{
    const __m256 e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), 0xd8));
    const __m256 o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), 0xd8));
    _mm256_storeu_ps(p, _mm256_unpacklo_ps(e, o));
    _mm256_storeu_ps(p + 8, _mm256_unpackhi_ps(e, o));
}
LA_INLINE void vf_narrow_f16(uint16_t *p, la_vf x)
{
    _mm_storeu_si128((__m128i *)p,
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* 1 / (1 + e^-x) from e^-|x| (never overflows); x finite. */
LA_INLINE la_vf vf_sigmoid(la_vf x)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = exp8(_mm256_or_ps(x, _mm256_set1_ps(-0.0f))); /* e^-|x| */
    const __m256 r = _mm256_div_ps(one, _mm256_add_ps(one, e));
    return _mm256_blendv_ps(_mm256_mul_ps(e, r), r,
                            _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ));
}

/* flags with the lanes set (all bits) where x is NaN or outside [lo, hi]. */
LA_INLINE la_vf vf_flag_outside(la_vf flags, la_vf x, la_vf lo, la_vf hi)
{
    const __m256 below = _mm256_cmp_ps(x, lo, _CMP_NGE_UQ);
    const __m256 above = _mm256_cmp_ps(x, hi, _CMP_NLE_UQ);
    return _mm256_or_ps(flags, _mm256_or_ps(below, above));
}
LA_INLINE int vf_any_flag(la_vf flags) { return _mm256_movemask_ps(flags) != 0; }

/* r[i] lane j becomes r[j] lane i (8 x 8): pairs interleaved, then 4 x 4
 * blocks within 128-bit lanes, then the 128-bit halves exchanged (24
 * shuffles a tile). */
LA_INLINE void vf_transpose(la_vf r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int m = 0; m < 4; m++) {
        r[m] = _mm256_permute2f128_ps(u[m], u[m + 4], 0x20);
        r[m + 4] = _mm256_permute2f128_ps(u[m], u[m + 4], 0x31);
    }
}

#endif
