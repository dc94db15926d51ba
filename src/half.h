/* bfloat16 and float16 one value at a time: the portable path every table
 * uses for the elements past its last whole vector, and the reference the
 * vector conversions are tested against. Widening is exact; narrowing
 * rounds to nearest, ties to even, keeps NaN a (quiet) NaN and overflows
 * to infinity, as the hardware instructions do. */
#ifndef LINATTN_HALF_H
#define LINATTN_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t la_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float la_bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline float la_bf16_to_f32(uint16_t h) { return la_bits_f32((uint32_t)h << 16); }

static inline uint16_t la_f32_to_bf16(float x)
{
    const uint32_t u = la_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign, set the quiet bit */
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float la_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) /* inf, NaN */
        return la_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) /* zero and subnormals: m 2^-24, exact in float */
        return la_bits_f32(sign) + (sign ? -1.0f : 1.0f) * (float)m * 0x1p-24f;
    return la_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

static inline uint16_t la_f32_to_f16(float x)
{
    const uint32_t u = la_f32_bits(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* rounds to 65520 or more: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a subnormal half, m = round(|x| 2^24) */
        /* |x| 2^24 < 2^10 is exact in float; adding 2^23 rounds it to an
         * integer with the FPU's round-to-nearest-even */
        const float scaled = la_bits_f32(a) * 0x1p24f;
        const float r = (scaled + 0x1p23f) - 0x1p23f;
        return (uint16_t)(sign | (uint32_t)r);
    }
    /* normal: rebias the exponent, round the 13 dropped bits to even */
    const uint32_t n = a - 0x38000000u;
    return (uint16_t)(sign | ((n + 0xfffu + ((n >> 13) & 1u)) >> 13));
}

#endif
