/* Prefill a sequence with linattn_forward, then decode tokens one at a time
 * with linattn_step, carrying the state; checks that decoding token T gives
 * the same output as a prefill of T + 1 tokens. Built against the installed
 * library through pkg-config by the test suite. */
#include <linattn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { B = 1, H = 4, T = 96, DK = 32, DV = 32, DECODE = 8 };

static float uniform(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / 8388608.0f - 1.0f; /* [-1, 1) */
}

int main(void)
{
    const int total = T + DECODE;
    float *q = malloc(sizeof(float) * B * H * total * DK), *k = malloc(sizeof(float) * B * H * total * DK);
    float *v = malloc(sizeof(float) * B * H * total * DV), *o = malloc(sizeof(float) * B * H * total * DV);
    float *s = calloc((size_t)B * H * DK * DV, sizeof(float)), *z = calloc((size_t)B * H * DK, sizeof(float));
    float *step_o = malloc(sizeof(float) * B * H * DV);
    unsigned seed = 42;
    for (int i = 0; i < B * H * total * DK; i++) { q[i] = uniform(&seed); k[i] = uniform(&seed); }
    for (int i = 0; i < B * H * total * DV; i++) v[i] = uniform(&seed);

    /* Reference: one prefill over all tokens, [B][H][total][D] layout. */
    linattn_config all;
    linattn_config_init(&all, B, H, total, DK, DV);
    linattn_status st = linattn_forward(&all, q, k, v, NULL, o, NULL, NULL);
    if (st != LINATTN_OK) { fprintf(stderr, "forward: %s\n", linattn_strerror(st)); return 1; }

    /* Prefill the first T tokens of the same buffers (strides of total). */
    linattn_config pre = all;
    pre.seq_len = T;
    float *pre_o = malloc(sizeof(float) * B * H * total * DV);
    st = linattn_forward(&pre, q, k, v, NULL, pre_o, s, z);
    if (st != LINATTN_OK) { fprintf(stderr, "prefill: %s\n", linattn_strerror(st)); return 1; }

    /* Decode: token t of every head, addressed with batch and head strides. */
    float worst = 0.0f;
    linattn_config dec;
    linattn_config_init(&dec, B, H, 1, DK, DV);
    dec.q = all.q; dec.k = all.k; dec.v = all.v;
    dec.o = (linattn_strides){H * DV, DV, DV};
    for (int t = T; t < total; t++) {
        st = linattn_step(&dec, q + t * DK, k + t * DK, v + t * DV, NULL, step_o, s, z);
        if (st != LINATTN_OK) { fprintf(stderr, "step: %s\n", linattn_strerror(st)); return 1; }
        for (int h = 0; h < H; h++)
            for (int d = 0; d < DV; d++) {
                float diff = fabsf(step_o[h * DV + d] - o[(h * total + t) * DV + d]);
                worst = diff > worst ? diff : worst;
            }
    }
    printf("linattn %s on %s: prefilled %d tokens, decoded %d, max |step - forward| = %.3g\n",
           linattn_version(), linattn_isa_name(linattn_get_isa()), T, DECODE, worst);
    free(q); free(k); free(v); free(o); free(s); free(z); free(step_o); free(pre_o);
    return worst <= 2e-4f ? 0 : 1;
}
