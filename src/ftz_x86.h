/* Flush-to-zero for the duration of one x86 chunk op with a per-channel
 * gate. Decay factors from exps are exactly 0 below LA_EXP_ZERO_BELOW
 * (gate.h), but the per-channel (CHANNEL) kernels also form running
 * products of factors e^g <= 1, and a product that underflows would drag
 * every later operation on it into subnormal arithmetic (measured 7-18x
 * slower under strong decay). FTZ (not DAZ: subnormal inputs are still read
 * exactly) makes such products 0, the value they stand for to within 1e-38.
 * Other gates need no FTZ, and get none: it would also flush a product such
 * as decay x key that is subnormal but later meets a value of 1e38. MXCSR is
 * per thread; the caller's is restored exactly before the op returns. */
#ifndef LINATTN_FTZ_X86_H
#define LINATTN_FTZ_X86_H

#include <immintrin.h>

#include "additive.h"

static inline unsigned la_ftz_begin(const la_head *h)
{
    if (h->gate != LA_GATE_CHANNEL)
        return 0;
    const unsigned old = _mm_getcsr();
    _mm_setcsr(old | _MM_FLUSH_ZERO_ON);
    return old;
}

static inline void la_ftz_end(const la_head *h, unsigned old)
{
    if (h->gate == LA_GATE_CHANNEL)
        _mm_setcsr(old);
}

/* The four chunk ops of table sfx (functions chunk_pack_<sfx>, ...) wrapped
 * as chunk_pack_<sfx>_ftz, ... for the ops struct. */
#define LA_FTZ_CHUNK_OPS(sfx)                                                                     \
    static void chunk_pack_##sfx##_ftz(const la_head *h, int64_t t0, int64_t n, void *pack)       \
    {                                                                                             \
        const unsigned csr = la_ftz_begin(h);                                                     \
        chunk_pack_##sfx(h, t0, n, pack);                                                         \
        la_ftz_end(h, csr);                                                                       \
    }                                                                                             \
    static void chunk_output_##sfx##_ftz(const la_head *h, const void *pack, int64_t t0,          \
                                         int64_t n, const float *s, const float *z)               \
    {                                                                                             \
        const unsigned csr = la_ftz_begin(h);                                                     \
        chunk_output_##sfx(h, pack, t0, n, s, z);                                                 \
        la_ftz_end(h, csr);                                                                       \
    }                                                                                             \
    static void chunk_state_##sfx##_ftz(const la_head *h, const void *pack, int64_t t0,           \
                                        int64_t n, float *u, float *uz)                           \
    {                                                                                             \
        const unsigned csr = la_ftz_begin(h);                                                     \
        chunk_state_##sfx(h, pack, t0, n, u, uz);                                                 \
        la_ftz_end(h, csr);                                                                       \
    }                                                                                             \
    static void state_combine_##sfx##_ftz(const la_head *h, const void *pack, int64_t n,          \
                                          float *s, float *z, const float *u, const float *uz)    \
    {                                                                                             \
        const unsigned csr = la_ftz_begin(h);                                                     \
        state_combine_##sfx(h, pack, n, s, z, u, uz);                                             \
        la_ftz_end(h, csr);                                                                       \
    }

#endif
