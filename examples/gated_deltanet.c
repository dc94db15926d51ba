/* One Gated DeltaNet layer's attention core (as in Qwen3-Next: 16 q/k heads
 * shared by 32 value heads, dk = dv = 128, q and k L2-normalised in the
 * kernel, per-token decay g and write strength beta), laid out as PyTorch
 * and flash-linear-attention keep it: [B][T][H][D]. Prefill a prompt with
 * linattn_delta_forward, then decode tokens with linattn_delta_step, and
 * check that decoding matches a prefill of the whole sequence. */
#include <linattn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 1, HQK = 16, H = 32, D = 128, T = 64, DECODE = 4 };

static float uniform(unsigned *state, float lo, float hi)
{
    *state = *state * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(*state >> 8) / 16777216.0f;
}

/* A config for [B][T][heads][D] tensors of `len` tokens (fla's layout). */
static void config_bthd(linattn_config *c, int64_t len)
{
    linattn_config_init(c, B, H, len, D, D);
    linattn_config_set_gate(c, LINATTN_GATE_TOKEN);
    c->qk_heads = HQK; /* value head h reads q/k head h / (H / HQK) */
    c->head_map = LINATTN_HEADS_GROUPED;
    c->phi = LINATTN_PHI_IDENTITY; /* q, k come out of the model's conv + silu */
    c->normalize = 0;
    c->qk_l2norm = 1;
    c->scale = 1.0f / sqrtf((float)D);
    c->q = c->k = (linattn_strides){len * HQK * D, D, HQK * D};
    c->v = c->o = (linattn_strides){len * H * D, D, H * D};
    c->g = c->beta = (linattn_strides){len * H, 1, H}; /* g, beta: [B][T][H] */
}

int main(void)
{
    enum { TOTAL = T + DECODE };
    const size_t nqk = (size_t)B * TOTAL * HQK * D, nv = (size_t)B * TOTAL * H * D;
    float *q = malloc(nqk * 4), *k = malloc(nqk * 4), *v = malloc(nv * 4), *o = malloc(nv * 4);
    float *g = malloc((size_t)B * TOTAL * H * 4), *beta = malloc((size_t)B * TOTAL * H * 4);
    float *s = calloc((size_t)B * H * D * D, 4);
    unsigned seed = 7;
    for (size_t i = 0; i < nqk; i++) {
        q[i] = uniform(&seed, -1, 1);
        k[i] = uniform(&seed, -1, 1);
    }
    for (size_t i = 0; i < nv; i++)
        v[i] = uniform(&seed, -1, 1);
    for (int i = 0; i < B * TOTAL * H; i++) {
        g[i] = uniform(&seed, -2.0f, -0.01f); /* log-decays: A * softplus(dt) */
        beta[i] = uniform(&seed, 0.0f, 1.0f); /* sigmoid(b) */
    }

    /* Reference: the whole sequence in one call, no state kept. */
    linattn_config all;
    config_bthd(&all, TOTAL);
    linattn_status st = linattn_delta_forward(&all, q, k, v, g, beta, o, NULL);
    if (st != LINATTN_OK) {
        fprintf(stderr, "forward: %s\n", linattn_last_error());
        return 1;
    }

    /* Prefill the prompt (the first T tokens of the same buffers), keeping
     * the state s [B][H][D][D]. */
    linattn_config pre;
    config_bthd(&pre, TOTAL); /* strides of the TOTAL-token tensors */
    pre.seq_len = T;
    float *pre_o = malloc(nv * 4);
    st = linattn_delta_forward(&pre, q, k, v, g, beta, pre_o, s);
    if (st != LINATTN_OK) {
        fprintf(stderr, "prefill: %s\n", linattn_last_error());
        return 1;
    }

    /* Decode: token t of the same tensors; a step reads one token per
     * (b, h) through the batch and head strides (token strides unused). */
    float worst = 0.0f, o1[B * H * D];
    linattn_config dec = pre;
    dec.o = (linattn_strides){H * D, D, 0}; /* o1: [B][H][D] */
    for (int t = T; t < TOTAL; t++) {
        st = linattn_delta_step(&dec, q + (size_t)t * HQK * D, k + (size_t)t * HQK * D,
                                v + (size_t)t * H * D, g + t * H, beta + t * H, o1, s);
        if (st != LINATTN_OK) {
            fprintf(stderr, "step: %s\n", linattn_last_error());
            return 1;
        }
        for (int i = 0; i < H * D; i++) {
            const float d = fabsf(o1[i] - o[(size_t)t * H * D + i]);
            worst = d > worst ? d : worst;
        }
    }
    printf("gated deltanet on %s: prefilled %d tokens, decoded %d, max |step - forward| = %.3g\n",
           linattn_isa_name(linattn_get_isa()), T, DECODE, (double)worst);
    free(q), free(k), free(v), free(o), free(g), free(beta), free(s), free(pre_o);
    return worst <= 1e-3f ? 0 : 1;
}
