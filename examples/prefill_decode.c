/* Prefill a sequence with linattn_forward, then decode tokens one at a time
 * with linattn_step, carrying the state; checks that decoding token t gives
 * the same output as one prefill of every token. The decode loop is the
 * README's: per-token [B][H][D] buffers and a config from
 * linattn_config_init_step. Built against the installed library through
 * pkg-config by the test suite. */
#include <linattn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 1, H = 4, T = 96, DK = 32, DV = 32, DECODE = 8 };

static float uniform(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / 8388608.0f - 1.0f; /* [-1, 1) */
}

static int fail(const char *what, linattn_status st)
{
    fprintf(stderr, "%s: %s (%s)\n", what, linattn_strerror(st), linattn_last_error());
    return 1;
}

int main(void)
{
    enum { TOTAL = T + DECODE };
    static float q[B * H * TOTAL * DK], k[B * H * TOTAL * DK], v[B * H * TOTAL * DV];
    static float g[B * H * TOTAL], o[B * H * TOTAL * DV], pre_o[B * H * TOTAL * DV];
    static float s[B * H * DK * DV], z[B * H * DK];
    unsigned seed = 42;
    for (int i = 0; i < B * H * TOTAL * DK; i++) {
        q[i] = uniform(&seed);
        k[i] = uniform(&seed);
    }
    for (int i = 0; i < B * H * TOTAL * DV; i++)
        v[i] = uniform(&seed);
    for (int i = 0; i < B * H * TOTAL; i++)
        g[i] = -0.05f * (uniform(&seed) + 1.0f); /* log-decays in (-0.1, 0] */

    /* Reference: one prefill over all tokens, [B][H][TOTAL][D] layout. */
    linattn_config all;
    linattn_config_init(&all, B, H, TOTAL, DK, DV);
    linattn_config_set_gate(&all, LINATTN_GATE_TOKEN);
    linattn_status st = linattn_forward(&all, q, k, v, g, o, NULL, NULL);
    if (st != LINATTN_OK)
        return fail("forward", st);

    /* Prefill the first T tokens of the same buffers (strides of TOTAL). */
    linattn_config pre = all;
    pre.seq_len = T;
    st = linattn_forward(&pre, q, k, v, g, pre_o, s, z);
    if (st != LINATTN_OK)
        return fail("prefill", st);

    /* Decode: one token per (b, h) in per-token [B][H][D] buffers. */
    linattn_config dec;
    linattn_config_init_step(&dec, B, H, DK, DV);
    linattn_config_set_gate(&dec, LINATTN_GATE_TOKEN); /* g1: [B][H] */
    float q1[B * H * DK], k1[B * H * DK], v1[B * H * DV], g1[B * H], o1[B * H * DV];
    float worst = 0.0f;
    for (int t = T; t < TOTAL; t++) {
        for (int h = 0; h < B * H; h++) { /* the model would produce these */
            memcpy(q1 + h * DK, q + (h * TOTAL + t) * DK, sizeof(float) * DK);
            memcpy(k1 + h * DK, k + (h * TOTAL + t) * DK, sizeof(float) * DK);
            memcpy(v1 + h * DV, v + (h * TOTAL + t) * DV, sizeof(float) * DV);
            g1[h] = g[h * TOTAL + t];
        }
        st = linattn_step(&dec, q1, k1, v1, g1, o1, s, z);
        if (st != LINATTN_OK)
            return fail("step", st);
        for (int h = 0; h < B * H; h++)
            for (int d = 0; d < DV; d++) {
                const float diff = fabsf(o1[h * DV + d] - o[(h * TOTAL + t) * DV + d]);
                worst = diff > worst ? diff : worst;
            }
    }
    printf("linattn %s on %s: prefilled %d tokens, decoded %d, max |step - forward| = %.3g\n",
           linattn_version(), linattn_isa_name(linattn_get_isa()), T, DECODE, (double)worst);
    return worst <= 2e-4f ? 0 : 1;
}
