/* Gate kinds as kernels see them, and how every kernel keeps strong decay
 * exact and free of subnormal arithmetic. */
#ifndef LINATTN_GATE_H
#define LINATTN_GATE_H

/* The driver turns LINATTN_GATE_HEAD into LA_GATE_TOKEN with a token stride
 * of 0, so only three kinds reach a kernel. */
typedef enum { LA_GATE_NONE = 0, LA_GATE_TOKEN, LA_GATE_CHANNEL } la_gate;

/* A sweep that takes several tokens per pass under a TOKEN gate may keep
 * its tile as the state divided by d, the product of the decays since the
 * tile was last decayed, while d stays at or above this (2^-20): the
 * stored tile is then at most 2^20 times the state (delta_tile_pairs,
 * add_tile_quads). The delta rule's pairs do the same under a CHANNEL
 * gate with one d per row, each kept at or above this
 * (delta_pair_terms). */
#define LA_SCALED_TILE_MIN 0x1p-20f

/* Such a sweep divides its v (additive) or u (delta) by d: it keeps a
 * scaled tile only for tokens whose v all lie within +-2^100, so that v / d
 * stays finite wherever the state does (outside.h). */
#define LA_SCALED_V_MAX 0x1p100f

/* CALL(g, arg) with g the constant la_gate equal to gate: a kernel's sweep
 * inlined once per gate, so that the gate is a constant inside it (GCC did
 * not unswitch a sweep on a gate it reads, and kept the tests, a jump and
 * a spilled vector in the loop). */
#define LA_PER_GATE(gate, CALL, arg)                                                              \
    do {                                                                                          \
        if ((gate) == LA_GATE_NONE)                                                               \
            CALL(LA_GATE_NONE, arg);                                                              \
        else if ((gate) == LA_GATE_TOKEN)                                                         \
            CALL(LA_GATE_TOKEN, arg);                                                             \
        else                                                                                      \
            CALL(LA_GATE_CHANNEL, arg);                                                           \
    } while (0)

/* A log-decay below LA_G_RESET is a full reset of the state (e^-100 is 0 in
 * float). Kernels clamp every g they read to it before summing: prefix sums
 * of a chunk then stay within 100 * chunk, where the small decays that
 * follow a reset keep their precision (summing -1e16 and -0.3 would lose
 * the -0.3), and any decay factor spanning the reset is still 0. */
#define LA_G_RESET (-100.0f)

/* Decay factors e^x with x below this are exactly 0: e^-80 = 1.8e-35, so
 * products of a decay with operands above ~1e-3 stay normal floats instead
 * of falling into subnormal arithmetic, which is 10-100x slower on x86.
 * Dropping terms this small changes no result beyond float rounding. */
#define LA_EXP_ZERO_BELOW (-80.0f)

/* log2(e) as a float: the vector tables take e^x as SLEEF's 2^(x LA_LOG2E)
 * (exp8 in avx2/simd256.h says why). */
#define LA_LOG2E 1.44269504f

#endif
