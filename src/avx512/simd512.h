/* The few operations kernels_avx512.c needs beyond plain AVX-512F, and the
 * table's name. The same kernel source is compiled three times:
 *   native: -mavx512f/vl/bw/dq -mfma, exp from SLEEF (Sleef_exp2f16_u10avx512f);
 *   LA_AVX512_BF16: native plus -mavx512bf16, the table "avx512bf16", whose
 *     one difference is rounding to bfloat16 (a bfloat16 state, outputs and
 *     pools) with AVX512-BF16's conversion; the registry prefers it to
 *     "avx512" where the CPU has the extension (Zen 4, Sapphire Rapids);
 *   LA_AVX512_SIMDE: -mavx2 -mfma through SIMDe, a test-only table that runs
 *     the AVX-512 code paths on any AVX2 machine.
 * SIMDe 0.7.4 lacks _mm512_maskz_loadu_ps, _mm512_mask_storeu_ps,
 * _mm512_reduce_add_ps and _mm512_cvtss_f32, so those
 * and exp (its own Cody-Waite version there) live behind the helpers below.
 * Every mask given to la_load/la_store is a prefix mask (la_tail). */
#ifndef LINATTN_SIMD512_H
#define LINATTN_SIMD512_H

#include <stdint.h>
#include <string.h>

#include "../gate.h"
#include "../half.h"
#include "linattn.h"

/* Vector helpers are always inlined: in the SIMDe build a 64-byte vector
 * passed to or returned from a real call would change the ABI (-Wpsabi). */
#define LA_INLINE static inline __attribute__((always_inline))

#ifdef LA_AVX512_SIMDE

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#include <sleef.h>

/* Runs wherever AVX2 + FMA do; never chosen outside the tests. */
#define LA_TABLE la_table_avx512_simde
#define LA_DELTA_OPS la_delta_avx512_simde
#define LA_STAGE_OPS la_stage_avx512_simde
#define LA_TABLE_NAME "avx512-simde"
#define LA_TABLE_REQUIRES (LA_FEAT_AVX2 | LA_FEAT_FMA | LA_FEAT_F16C)
#define LA_TABLE_TEST_ONLY 1

LA_INLINE __m512 la_load(__mmask16 m, const float *p)
{
    if (m == 0xFFFF)
        return _mm512_loadu_ps(p);
    /* Prefix mask: copy only the lanes that exist, never past the end. */
    float t[16] = {0};
    if (m)
        memcpy(t, p, (size_t)__builtin_popcount(m) * sizeof(float));
    return _mm512_loadu_ps(t);
}

LA_INLINE void la_store(float *p, __mmask16 m, __m512 v)
{
    _mm512_mask_compressstoreu_ps(p, m, v); /* = masked store for a prefix mask */
}

LA_INLINE float la_hsum(__m512 v)
{
    float t[16];
    _mm512_storeu_ps(t, v);
    float s = 0.0f;
    for (int i = 0; i < 16; i++)
        s += t[i];
    return s;
}

/* Lanes of m take consecutive floats from p (lane order), the others keep src. */
LA_INLINE __m512 la_expand(__m512 src, __mmask16 m, const float *p)
{
    float t[16];
    _mm512_storeu_ps(t, src);
    for (int l = 0, i = 0; l < 16; l++)
        if (m & (1u << l))
            t[l] = p[i++];
    return _mm512_loadu_ps(t);
}

/* e^x for x <= 88 (larger x saturates at e^88: callers only pass x <= 0 or
 * mask such lanes out). Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2,
 * degree-7 Taylor polynomial (error < 1e-8 relative), 2^n through the
 * exponent bits. Results below FLT_MIN flush to 0; NaN propagates. */
LA_INLINE __m512 la_exp_raw(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.33654f), hi = _mm512_set1_ps(88.0f);
    const __m512 magic = _mm512_set1_ps(12582912.0f); /* 1.5 * 2^23: round to integer */
    const __mmask16 tiny = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(hi, _mm512_max_ps(lo, x)); /* x second: NaN passes through */
    const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(LA_LOG2E), magic);
    const __m512 n = _mm512_sub_ps(t, magic);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i ni = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(magic));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(ni, _mm512_set1_epi32(127)), 23);
    p = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
    return _mm512_mask_mov_ps(p, tiny, _mm512_setzero_ps());
}

#else

#include <immintrin.h>
#include <sleef.h>

#ifdef LA_AVX512_BF16
#define LA_TABLE la_table_avx512bf16
#define LA_DELTA_OPS la_delta_avx512bf16
#define LA_STAGE_OPS la_stage_avx512bf16
#define LA_TABLE_NAME "avx512bf16"
#define LA_TABLE_REQUIRES (LA_FEAT_AVX512 | LA_FEAT_AVX512BF16 | LA_FEAT_FMA | LA_FEAT_F16C)
#else
#define LA_TABLE la_table_avx512
#define LA_DELTA_OPS la_delta_avx512
#define LA_STAGE_OPS la_stage_avx512
#define LA_TABLE_NAME "avx512"
#define LA_TABLE_REQUIRES (LA_FEAT_AVX512 | LA_FEAT_FMA | LA_FEAT_F16C)
#endif
#define LA_TABLE_TEST_ONLY 0

LA_INLINE __m512 la_load(__mmask16 m, const float *p) { return _mm512_maskz_loadu_ps(m, p); }
LA_INLINE void la_store(float *p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }
LA_INLINE float la_hsum(__m512 v) { return _mm512_reduce_add_ps(v); }
LA_INLINE __m512 la_expand(__m512 src, __mmask16 m, const float *p)
{
    return _mm512_mask_expand_ps(src, m, _mm512_loadu_ps(p));
}
/* e^x from SLEEF, the project's one vector exp, as 2^(x log2 e): 25
 * instructions instead of expf16's 29 (2-3% of a forward at dk = 64; an
 * inline polynomial was measured ~10% faster, not enough to keep two exps).
 * The rounded product adds at most |x| 2^-24 relative error (see exp8 in
 * simd256.h). */
LA_INLINE __m512 la_exp_raw(__m512 x)
{
    return Sleef_exp2f16_u10avx512f(_mm512_mul_ps(x, _mm512_set1_ps(LA_LOG2E)));
}

#endif

/* e^x, exactly 0 below LA_EXP_ZERO_BELOW so that decay factors never
 * bring subnormals into the kernels; NaN stays NaN. */
LA_INLINE __m512 la_exp(__m512 x)
{
    const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(LA_EXP_ZERO_BELOW), _CMP_LT_OQ);
    return _mm512_mask_mov_ps(la_exp_raw(x), tiny, _mm512_setzero_ps());
}

/* Lanes 0..n-1 (n may be <= 0 or >= 16). */
LA_INLINE __mmask16 la_tail(int64_t n)
{
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

LA_INLINE __m512 phi_v(linattn_phi phi, __m512 x)
{
    const __m512 zero = _mm512_setzero_ps();
    switch (phi) {
    case LINATTN_PHI_ELU1: { /* x + 1 where x > 0, else e^x (NaN takes the exp path); e^x
                              * in full below LA_EXP_ZERO_BELOW too, as every table's
                              * features: that cut is for decays */
        const __mmask16 pos = _mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ);
        return _mm512_mask_add_ps(la_exp_raw(_mm512_min_ps(zero, x)), pos, x,
                                  _mm512_set1_ps(1.0f));
    }
    case LINATTN_PHI_RELU: return _mm512_max_ps(zero, x); /* x second: NaN propagates */
    default: return x;
    }
}

/* ---- the generic vocabulary (see delta_kernels.h) ------------------------ */

typedef __m512 la_vf;
#define LA_VW 16
LA_INLINE la_vf vf_zero(void) { return _mm512_setzero_ps(); }
LA_INLINE la_vf vf_set1(float x) { return _mm512_set1_ps(x); }
LA_INLINE la_vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
LA_INLINE void vf_store(float *p, la_vf x) { _mm512_storeu_ps(p, x); }
LA_INLINE la_vf vf_loadn(const float *p, int64_t n) { return la_load(la_tail(n), p); }
LA_INLINE void vf_storen(float *p, la_vf x, int64_t n) { la_store(p, la_tail(n), x); }
LA_INLINE la_vf vf_fma(la_vf a, la_vf b, la_vf c) { return _mm512_fmadd_ps(a, b, c); }
LA_INLINE la_vf vf_mul(la_vf a, la_vf b) { return _mm512_mul_ps(a, b); }
LA_INLINE la_vf vf_sub(la_vf a, la_vf b) { return _mm512_sub_ps(a, b); }
LA_INLINE la_vf vf_add(la_vf a, la_vf b) { return _mm512_add_ps(a, b); }
LA_INLINE la_vf vf_div(la_vf a, la_vf b) { return _mm512_div_ps(a, b); }
/* a < b ? a : b and a > b ? a : b per lane (so a NaN a gives b) */
LA_INLINE la_vf vf_min(la_vf a, la_vf b) { return _mm512_min_ps(a, b); }
LA_INLINE la_vf vf_max(la_vf a, la_vf b) { return _mm512_max_ps(a, b); }
LA_INLINE float vf_hsum(la_vf x) { return la_hsum(x); }
/* Four sums at once: each vector's halves added, then a transpose by
 * pairwise adds, the same tree for every vector. */
LA_INLINE void vf_hsum4(la_vf a, la_vf b, la_vf c, la_vf d, float *s)
{
#define LA_HALVES(x)                                                                              \
    _mm256_add_ps(_mm512_castps512_ps256(x),                                                      \
                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))
    const __m256 x = _mm256_hadd_ps(_mm256_hadd_ps(LA_HALVES(a), LA_HALVES(b)),
                                    _mm256_hadd_ps(LA_HALVES(c), LA_HALVES(d)));
#undef LA_HALVES
    _mm_storeu_ps(s, _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1)));
}
LA_INLINE la_vf vf_decay(la_vf x) { return la_exp(_mm512_min_ps(x, _mm512_setzero_ps())); }
LA_INLINE la_vf vf_phi(linattn_phi phi, la_vf x) { return phi_v(phi, x); }
LA_INLINE la_vf vf_keep(la_vf x, int64_t n) { return _mm512_maskz_mov_ps(la_tail(n), x); }

/* ---- the input stage's words (stage_kernels.h) -------------------------- */

#ifdef LA_AVX512_SIMDE
/* SIMDe 0.7.4 has no 512-bit 16-bit conversions: two AVX2 halves through
 * memory (a test-only table; the same values as the native words). */
LA_INLINE la_vf vf_widen_bf16(const uint16_t *p)
{
    float t[16];
    for (int i = 0; i < 16; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + i)));
        _mm256_storeu_ps(t + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    return _mm512_loadu_ps(t);
}
LA_INLINE void vf_narrow_bf16(uint16_t *p, la_vf x)
{
    float t[16];
    _mm512_storeu_ps(t, x);
    for (int i = 0; i < 16; i++)
        p[i] = la_f32_to_bf16(t[i]);
}
LA_INLINE void vf_narrow2_bf16(uint16_t *p, la_vf lo, la_vf hi)
{
    vf_narrow_bf16(p, lo);
    vf_narrow_bf16(p + 16, hi);
}
LA_INLINE la_vf vf_widen_f16(const uint16_t *p)
{
    float t[16];
    _mm256_storeu_ps(t, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)));
    _mm256_storeu_ps(t + 8, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8))));
    return _mm512_loadu_ps(t);
}
LA_INLINE void vf_narrow_f16(uint16_t *p, la_vf x)
{
    float t[16];
    _mm512_storeu_ps(t, x);
    for (int i = 0; i < 16; i += 8)
        _mm_storeu_si128((__m128i *)(p + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(t + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#else
/* Each 16-bit word to the top half of its lane with one zero-masked word
 * permute, not a zero extension and a shift: the bfloat16 step on Zen 4
 * (B = 32 states beyond L3, with the next state's fetch and avx512bf16's
 * rounding in place) went from 0.74-0.76 to 0.60-0.72 of the float32
 * step's time. (llvm-mca's Sapphire Rapids model puts the permute's two
 * micro-ops on port 5, where the pair takes ports 5 and 0: the same count on
 * the FMA ports.) */
LA_INLINE la_vf vf_widen_bf16(const uint16_t *p)
{
    const __m512i to_top = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0,
                                            7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
    const __m512i w = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, to_top, w));
}
/* Round to nearest even (la_f32_to_bf16 in half.h) a lane that is not
 * NaN: its bfloat16 in its high 16 bits (the low ones are left over). */
LA_INLINE __m512i la_round_bf16_numbers_high(la_vf x)
{
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
}
/* The same for any lane, NaN staying a quiet NaN: each lane's bfloat16 in
 * its low 16 bits. */
LA_INLINE __m512i la_round_bf16_lanes(la_vf x)
{
    const __m512i u = _mm512_castps_si512(x);
    const __m512i r = _mm512_srli_epi32(la_round_bf16_numbers_high(x), 16);
    const __m512i qnan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_mov_epi32(r, nan, qnan);
}
/* The NaN blend only for a vector (or pair) that holds a NaN, as avx2
 * does: a state holds none unless its input did. Both paths round alike. */
LA_INLINE __m256i la_round_bf16(la_vf x)
{
    if (__builtin_expect(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) == 0, 1))
        return _mm512_cvtepi32_epi16(_mm512_srli_epi32(la_round_bf16_numbers_high(x), 16));
    return _mm512_cvtepi32_epi16(la_round_bf16_lanes(x));
}
/* lo then hi rounded, one 64-byte store */
LA_INLINE __m512i la_round2_bf16(la_vf lo, la_vf hi)
{
    if (__builtin_expect(_mm512_cmp_ps_mask(lo, hi, _CMP_UNORD_Q) == 0, 1)) {
        const __m512i odd_words = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41,
                                                   39, 37, 35, 33, 31, 29, 27, 25, 23, 21, 19, 17,
                                                   15, 13, 11, 9, 7, 5, 3, 1);
        return _mm512_permutex2var_epi16(la_round_bf16_numbers_high(lo), odd_words,
                                         la_round_bf16_numbers_high(hi));
    }
    const __m512i even_words = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38,
                                                36, 34, 32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12,
                                                10, 8, 6, 4, 2, 0);
    return _mm512_permutex2var_epi16(la_round_bf16_lanes(lo), even_words, la_round_bf16_lanes(hi));
}
#ifdef LA_AVX512_BF16
/* vcvtneps2bf16 rounds as la_round_bf16 in one instruction (every float
 * pattern checked on Zen 4, NaNs included), but reads a subnormal input
 * as zero: a vector holding one is rounded as above instead (rare: a
 * state decays into them only under strong gates). On Zen 4 this alone
 * took the bfloat16 step (B = 8) from 1.49-1.57 to 1.07-1.26 times the
 * float32 step's time. Which vectors to look at is read off the result:
 * a subnormal comes out as +-0 and a normal input never does, so one word
 * test picks them, and only then are the inputs' classes asked (two class
 * tests per pair before: Zen 5's step 2.5-3.4% slower in L2 and L3). */
LA_INLINE void vf_narrow_bf16(uint16_t *p, la_vf x)
{
    const __m256i y = (__m256i)_mm512_cvtneps_pbh(x);
    if (__builtin_expect(_mm256_testn_epi16_mask(y, _mm256_set1_epi16(0x7fff)) != 0, 0) &&
        _mm512_fpclass_ps_mask(x, 0x20 /* subnormal */) != 0)
        _mm256_storeu_si256((__m256i *)p, la_round_bf16(x));
    else
        _mm256_storeu_si256((__m256i *)p, y);
}
/* Two vectors in one conversion and one 64-byte store. */
LA_INLINE void vf_narrow2_bf16(uint16_t *p, la_vf lo, la_vf hi)
{
    const __m512i y = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    if (__builtin_expect(_mm512_testn_epi16_mask(y, _mm512_set1_epi16(0x7fff)) != 0, 0) &&
        !_kortestz_mask16_u8(_mm512_fpclass_ps_mask(lo, 0x20), _mm512_fpclass_ps_mask(hi, 0x20)))
        _mm512_storeu_si512((void *)p, la_round2_bf16(lo, hi));
    else
        _mm512_storeu_si512((void *)p, y);
}
#else
LA_INLINE void vf_narrow_bf16(uint16_t *p, la_vf x)
{
    _mm256_storeu_si256((__m256i *)p, la_round_bf16(x));
}
LA_INLINE void vf_narrow2_bf16(uint16_t *p, la_vf lo, la_vf hi)
{
    _mm512_storeu_si512((void *)p, la_round2_bf16(lo, hi));
}
#endif
LA_INLINE la_vf vf_widen_f16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
LA_INLINE void vf_narrow_f16(uint16_t *p, la_vf x)
{
    _mm256_storeu_si256((__m256i *)p,
                        _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#endif
/* 1 / (1 + e^-x) from e^-|x| (never overflows); x finite. */
LA_INLINE la_vf vf_sigmoid(la_vf x)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 e = la_exp_raw(_mm512_min_ps(x, _mm512_sub_ps(_mm512_setzero_ps(), x)));
    const __m512 r = _mm512_div_ps(one, _mm512_add_ps(one, e));
    return _mm512_mask_mov_ps(_mm512_mul_ps(e, r),
                              _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ), r);
}

/* flags with the lanes set (to 1) where x is NaN or outside [lo, hi]. */
LA_INLINE la_vf vf_flag_outside(la_vf flags, la_vf x, la_vf lo, la_vf hi)
{
    const __mmask16 below = _mm512_cmp_ps_mask(x, lo, _CMP_NGE_UQ);
    const __mmask16 above = _mm512_cmp_ps_mask(x, hi, _CMP_NLE_UQ);
    return _mm512_mask_mov_ps(flags, below | above, _mm512_set1_ps(1.0f));
}
LA_INLINE int vf_any_flag(la_vf flags)
{
    return _mm512_cmp_ps_mask(flags, _mm512_setzero_ps(), _CMP_NEQ_UQ) != 0;
}

#ifdef LA_AVX512_SIMDE
#define la_shuffle_f32x4 simde_mm512_shuffle_f32x4 /* SIMDe 0.7.4: no native alias */
#else
#define la_shuffle_f32x4 _mm512_shuffle_f32x4
#endif

/* r[i] lane j becomes r[j] lane i (16 x 16): pairs interleaved and 4 x 4
 * blocks within 128-bit lanes (as on AVX2), then two rounds of 128-bit lane
 * shuffles (64 shuffles a tile). */
LA_INLINE void vf_transpose(la_vf r[16])
{
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    /* u[4b + m] lane L: rows 4b..4b+3 of column 4L + m */
    for (int b = 0; b < 16; b += 8)
        for (int m = 0; m < 4; m++) {
            t[b + m] = la_shuffle_f32x4(u[b + m], u[b + m + 4], 0x88);
            t[b + m + 4] = la_shuffle_f32x4(u[b + m], u[b + m + 4], 0xDD);
        }
    for (int m = 0; m < 8; m++) {
        r[m] = la_shuffle_f32x4(t[m], t[m + 8], 0x88);
        r[m + 8] = la_shuffle_f32x4(t[m], t[m + 8], 0xDD);
    }
}

#endif /* LINATTN_SIMD512_H */
