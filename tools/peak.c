/* The per-ISA measuring loops of linattn-bench: a register-blocked FMA loop
 * for the peak and a read-modify-write pass for the bandwidth bound.
 *
 * x86_64: the SIMD loops carry GCC target attributes, so this file builds
 * with no -m flags and each loop runs only when the tool benchmarks an ISA
 * that linattn_isa_available() says this CPU can run. aarch64: NEON is
 * baseline. Built without -ffast-math (and GCC's -std=c11 keeps
 * -ffp-contract=off), so every operation written below is one instruction. */
#include <math.h>
#include <string.h>

#include "bench.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define TARGET_AVX512 __attribute__((target("avx512f")))
#define TARGET_FMA __attribute__((target("fma")))
#elif defined(__aarch64__)
#include <arm_neon.h>
#else
#error "linattn-bench supports x86_64 and aarch64"
#endif

/* Independent accumulators: an FMA has 4-5 cycles of latency and 2 pipes on
 * current cores, so at least 8-10 chains must be in flight; 12 also fits
 * the 16 registers of AVX2 with a and b. */
enum { PEAK_ACC = 12 };

#define REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

/* x = x * a + b converges to b / (1 - a) = 1: no overflow, no denormals. */
#define PEAK_A 0.5f
#define PEAK_B 0.5f
#define RMW_A 0.5f
#define RMW_B 0.25f

/* Scalar: one fmaf per accumulator. On x86_64 the FMA instruction is used
 * when the CPU has it (target("fma") lets GCC inline fmaf); without it
 * fmaf would be a library call, so a multiply and an add stand in (still
 * 2 flops, unfused because contraction is off). */
#define SCALAR_DECL(i) float x##i = (float)(i) * 0.01f;
#define SCALAR_FMA(i) x##i = fmaf(x##i, a, b);
#define SCALAR_MULADD(i) x##i = x##i * a + b;
#define SCALAR_SUM(i) sum += x##i;

#if defined(__x86_64__)
TARGET_FMA static float fma_scalar_hw(int64_t iters)
{
    const float a = PEAK_A, b = PEAK_B;
    REP12(SCALAR_DECL)
    for (int64_t i = 0; i < iters; i++) {
        REP12(SCALAR_FMA)
    }
    float sum = 0.0f;
    REP12(SCALAR_SUM)
    return sum;
}

static float fma_scalar_muladd(int64_t iters)
{
    const float a = PEAK_A, b = PEAK_B;
    REP12(SCALAR_DECL)
    for (int64_t i = 0; i < iters; i++) {
        REP12(SCALAR_MULADD)
    }
    float sum = 0.0f;
    REP12(SCALAR_SUM)
    return sum;
}

#define AVX2_DECL(i) __m256 x##i = _mm256_set1_ps((float)(i) * 0.01f);
#define AVX2_FMA(i) x##i = _mm256_fmadd_ps(x##i, a, b);
#define AVX2_SUM(i) sum = _mm256_add_ps(sum, x##i);

TARGET_AVX2 static float fma_avx2(int64_t iters)
{
    const __m256 a = _mm256_set1_ps(PEAK_A), b = _mm256_set1_ps(PEAK_B);
    REP12(AVX2_DECL)
    for (int64_t i = 0; i < iters; i++) {
        REP12(AVX2_FMA)
    }
    __m256 sum = _mm256_setzero_ps();
    REP12(AVX2_SUM)
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    return lanes[0] + lanes[7];
}

#define AVX512_DECL(i) __m512 x##i = _mm512_set1_ps((float)(i) * 0.01f);
#define AVX512_FMA(i) x##i = _mm512_fmadd_ps(x##i, a, b);
#define AVX512_SUM(i) sum = _mm512_add_ps(sum, x##i);

TARGET_AVX512 static float fma_avx512(int64_t iters)
{
    const __m512 a = _mm512_set1_ps(PEAK_A), b = _mm512_set1_ps(PEAK_B);
    REP12(AVX512_DECL)
    for (int64_t i = 0; i < iters; i++) {
        REP12(AVX512_FMA)
    }
    __m512 sum = _mm512_setzero_ps();
    REP12(AVX512_SUM)
    float lanes[16];
    _mm512_storeu_ps(lanes, sum);
    return lanes[0] + lanes[15];
}

TARGET_AVX2 static void rmw_avx2(float *s, size_t n)
{
    const __m256 a = _mm256_set1_ps(RMW_A), b = _mm256_set1_ps(RMW_B);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(s + i, _mm256_fmadd_ps(_mm256_loadu_ps(s + i), a, b));
    for (; i < n; i++)
        s[i] = s[i] * RMW_A + RMW_B;
}

TARGET_AVX512 static void rmw_avx512(float *s, size_t n)
{
    const __m512 a = _mm512_set1_ps(RMW_A), b = _mm512_set1_ps(RMW_B);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(s + i, _mm512_fmadd_ps(_mm512_loadu_ps(s + i), a, b));
    for (; i < n; i++)
        s[i] = s[i] * RMW_A + RMW_B;
}

TARGET_AVX2 static float sum_avx2(const float *s, size_t n)
{
    __m256 x0 = _mm256_setzero_ps(), x1 = x0, x2 = x0, x3 = x0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        x0 = _mm256_add_ps(x0, _mm256_loadu_ps(s + i));
        x1 = _mm256_add_ps(x1, _mm256_loadu_ps(s + i + 8));
        x2 = _mm256_add_ps(x2, _mm256_loadu_ps(s + i + 16));
        x3 = _mm256_add_ps(x3, _mm256_loadu_ps(s + i + 24));
    }
    float lanes[8], sum = 0.0f;
    _mm256_storeu_ps(lanes, _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3)));
    for (int l = 0; l < 8; l++)
        sum += lanes[l];
    for (; i < n; i++)
        sum += s[i];
    return sum;
}

TARGET_AVX512 static float sum_avx512(const float *s, size_t n)
{
    __m512 x0 = _mm512_setzero_ps(), x1 = x0, x2 = x0, x3 = x0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        x0 = _mm512_add_ps(x0, _mm512_loadu_ps(s + i));
        x1 = _mm512_add_ps(x1, _mm512_loadu_ps(s + i + 16));
        x2 = _mm512_add_ps(x2, _mm512_loadu_ps(s + i + 32));
        x3 = _mm512_add_ps(x3, _mm512_loadu_ps(s + i + 48));
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(x0, x1), _mm512_add_ps(x2, x3)));
    for (; i < n; i++)
        sum += s[i];
    return sum;
}
#endif /* __x86_64__ */

#if defined(__aarch64__)
static float fma_scalar(int64_t iters)
{
    const float a = PEAK_A, b = PEAK_B;
    REP12(SCALAR_DECL)
    for (int64_t i = 0; i < iters; i++) {
        REP12(SCALAR_FMA)
    }
    float sum = 0.0f;
    REP12(SCALAR_SUM)
    return sum;
}

#define NEON_DECL(i) float32x4_t x##i = vdupq_n_f32((float)(i) * 0.01f);
#define NEON_FMA(i) x##i = vfmaq_f32(b, x##i, a); /* b + x * a */
#define NEON_SUM(i) sum = vaddq_f32(sum, x##i);

static float fma_neon(int64_t iters)
{
    const float32x4_t a = vdupq_n_f32(PEAK_A), b = vdupq_n_f32(PEAK_B);
    REP12(NEON_DECL)
    for (int64_t i = 0; i < iters; i++) {
        REP12(NEON_FMA)
    }
    float32x4_t sum = vdupq_n_f32(0.0f);
    REP12(NEON_SUM)
    return vaddvq_f32(sum);
}

static void rmw_neon(float *s, size_t n)
{
    const float32x4_t a = vdupq_n_f32(RMW_A), b = vdupq_n_f32(RMW_B);
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(s + i, vfmaq_f32(b, vld1q_f32(s + i), a));
    for (; i < n; i++)
        s[i] = s[i] * RMW_A + RMW_B;
}

static float sum_neon(const float *s, size_t n)
{
    float32x4_t x0 = vdupq_n_f32(0.0f), x1 = x0, x2 = x0, x3 = x0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        x0 = vaddq_f32(x0, vld1q_f32(s + i));
        x1 = vaddq_f32(x1, vld1q_f32(s + i + 4));
        x2 = vaddq_f32(x2, vld1q_f32(s + i + 8));
        x3 = vaddq_f32(x3, vld1q_f32(s + i + 12));
    }
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(x0, x1), vaddq_f32(x2, x3)));
    for (; i < n; i++)
        sum += s[i];
    return sum;
}
#endif /* __aarch64__ */

/* The scalar table's bound: the plain loop, vectorised (or not) by the
 * compiler for the baseline target like the scalar table itself. */
static void rmw_plain(float *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        s[i] = s[i] * RMW_A + RMW_B;
}

/* Four sums, so that the adds' latency does not bound the read. */
static float sum_plain(const float *s, size_t n)
{
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++)
            x[j] += s[i + j];
    for (; i < n; i++)
        x[0] += s[i];
    return (x[0] + x[1]) + (x[2] + x[3]);
}

/* The loops of each ISA, found by the name the library gives the ISA. An
 * ISA without a row here (a new table) is measured with the scalar loops,
 * which understates its peak: add its row when adding the table. */
typedef struct {
    const char *isa;
    int lanes;
    float (*fma)(int64_t iters);
    void (*rmw)(float *s, size_t n);
    float (*sum)(const float *s, size_t n);
    const char *desc;
} peak_impl;

static const peak_impl impls[] = {
#if defined(__x86_64__)
    {"avx2", 8, fma_avx2, rmw_avx2, sum_avx2, "12 x ymm vfmadd"},
    {"avx512", 16, fma_avx512, rmw_avx512, sum_avx512, "12 x zmm vfmadd"},
#elif defined(__aarch64__)
    {"neon", 4, fma_neon, rmw_neon, sum_neon, "12 x q-reg fmla"},
#endif
};

static const peak_impl *impl_of(linattn_isa isa)
{
#if defined(__x86_64__)
    static const peak_impl scalar_fma = {"scalar", 1, fma_scalar_hw, rmw_plain, sum_plain,
                                         "12 x scalar fmaf"};
    static const peak_impl scalar_muladd = {"scalar", 1, fma_scalar_muladd, rmw_plain, sum_plain,
                                            "12 x scalar mul+add"};
    const peak_impl *scalar = __builtin_cpu_supports("fma") ? &scalar_fma : &scalar_muladd;
#else
    static const peak_impl scalar_impl = {"scalar", 1, fma_scalar, rmw_plain, sum_plain,
                                          "12 x scalar fmaf"};
    const peak_impl *scalar = &scalar_impl;
#endif
    const char *name = linattn_isa_name(isa);
    for (size_t i = 0; i < sizeof impls / sizeof *impls; i++)
        if (strcmp(name, impls[i].isa) == 0)
            return &impls[i];
    return scalar;
}

double bench_fma_flops_per_iter(linattn_isa isa) { return 2.0 * PEAK_ACC * impl_of(isa)->lanes; }

float bench_fma_loop(linattn_isa isa, int64_t iters) { return impl_of(isa)->fma(iters); }

void bench_rmw_pass(linattn_isa isa, float *s, size_t n) { impl_of(isa)->rmw(s, n); }

float bench_read_pass(linattn_isa isa, const float *s, size_t n) { return impl_of(isa)->sum(s, n); }

const char *bench_peak_desc(linattn_isa isa) { return impl_of(isa)->desc; }
