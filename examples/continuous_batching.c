/* Continuous batching with a state pool, as a serving engine runs Gated
 * DeltaNet: 8 sequences of different prompt lengths share one V-first pool
 * ([slot][head][dv][dk], vLLM's and ggml's order). Sequences arrive in
 * waves; each wave's prompts are prefilled in one packed call (cu_seqlens,
 * each prompt starting from a zero state: read slot -1), then every step
 * decodes one token of every live sequence in one batched step call whose
 * batch has fixed width with padding entries (slot -1, vLLM's PAD_SLOT_ID).
 * Sequences leave when done and their slots are reused by newcomers.
 * Every output is compared with separate per-sequence calls:
 * linattn_delta_forward over the prompt, then linattn_delta_step per token,
 * on a contiguous K-first state. Short calls on a V-first pool run the
 * kernels' V-first form in place, whose dot products sum along the key
 * axis: the outputs agree to rounding (relative 1e-5), not bit for bit. */
#include <linattn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NSEQ = 8, H = 4, DK = 16, DV = 16, SLOTS = 6, WIDTH = 6 };

static const int prompt[NSEQ] = {37, 5, 120, 1, 64, 9, 200, 16};
static const int decode[NSEQ] = {6, 9, 3, 12, 5, 7, 4, 8};
static const int arrive[NSEQ] = {0, 0, 0, 0, 3, 3, 6, 8}; /* decode step of arrival */

/* Inputs of token t of sequence n: q, k [H][DK], v [H][DV], g, beta [H]. */
static float hashf(unsigned n, unsigned t, unsigned what, unsigned i)
{
    uint32_t x = n * 2654435761u ^ t * 40503u ^ what * 97u ^ i * 2246822519u;
    x ^= x >> 15, x *= 2246822519u, x ^= x >> 13, x *= 3266489917u, x ^= x >> 16;
    return (float)x / 4294967296.0f; /* [0, 1) */
}

static void token(int n, int t, float *q, float *k, float *v, float *g, float *beta,
                  int64_t qs, int64_t vs)
{
    for (int h = 0; h < H; h++) {
        for (int i = 0; i < DK; i++)
            q[h * qs + i] = hashf(n, t, 0, h * DK + i) - 0.5f,
                       k[h * qs + i] = hashf(n, t, 1, h * DK + i) - 0.5f;
        for (int j = 0; j < DV; j++)
            v[h * vs + j] = hashf(n, t, 2, h * DV + j) - 0.5f;
        g[h] = -0.5f * hashf(n, t, 3, h);
        beta[h] = hashf(n, t, 4, h);
    }
}

static float *outputs[NSEQ]; /* [prompt + decode][H][DV] per sequence, as served */

static int check(linattn_status st, const char *what)
{
    if (st != LINATTN_OK)
        fprintf(stderr, "%s: %s\n", what, linattn_last_error());
    return st != LINATTN_OK;
}

/* One packed prefill of the sequences in ids (slots given), tokens [B=1][T][H][D]. */
static int prefill(float *states, const linattn_state_pool *shape, const int *ids, int m,
                   const int *slot_of)
{
    int64_t cu[NSEQ + 1] = {0};
    int32_t rd[NSEQ], wr[NSEQ];
    for (int i = 0; i < m; i++) {
        cu[i + 1] = cu[i] + prompt[ids[i]];
        rd[i] = -1; /* a new sequence starts from zeros */
        wr[i] = slot_of[ids[i]];
    }
    const int64_t T = cu[m];
    float *q = malloc(sizeof(float) * T * H * DK), *k = malloc(sizeof(float) * T * H * DK),
          *v = malloc(sizeof(float) * T * H * DV), *o = malloc(sizeof(float) * T * H * DV),
          *g = malloc(sizeof(float) * T * H), *beta = malloc(sizeof(float) * T * H);
    for (int i = 0; i < m; i++)
        for (int t = 0; t < prompt[ids[i]]; t++) {
            const int64_t x = cu[i] + t;
            token(ids[i], t, q + x * H * DK, k + x * H * DK, v + x * H * DV, g + x * H,
                  beta + x * H, DK, DV);
        }
    linattn_config cfg;
    linattn_config_init(&cfg, 1, H, T, DK, DV);
    linattn_config_set_gate(&cfg, LINATTN_GATE_TOKEN);
    cfg.normalize = 0, cfg.qk_l2norm = 1;
    /* token-major [1][T][H][D], as engines pack tokens */
    cfg.q = cfg.k = (linattn_strides){T * H * DK, DK, H * DK};
    cfg.v = cfg.o = (linattn_strides){T * H * DV, DV, H * DV};
    cfg.g = cfg.beta = (linattn_strides){T * H, 1, H};
    linattn_state_pool pool = *shape;
    pool.read_slots = rd, pool.write_slots = wr;
    linattn_operands ops;
    linattn_operands_init(&ops);
    ops.q = q, ops.k = k, ops.v = v, ops.g = g, ops.beta = beta, ops.o = o;
    ops.s = states, ops.pool = &pool, ops.cu_seqlens = cu, ops.num_seqs = m;
    const int bad = check(linattn_run(LINATTN_OP_DELTA_FORWARD, &cfg, &ops), "prefill");
    for (int i = 0; i < m && !bad; i++)
        memcpy(outputs[ids[i]], o + cu[i] * H * DV, sizeof(float) * prompt[ids[i]] * H * DV);
    free(q), free(k), free(v), free(o), free(g), free(beta);
    return bad;
}

/* One decode step: batch entry b is sequence live[b] (or padding, -1). */
static int decode_step(float *states, const linattn_state_pool *shape, const int *live,
                       const int *slot_of, const int *pos)
{
    static float q[WIDTH][H][DK], k[WIDTH][H][DK], v[WIDTH][H][DV], o[WIDTH][H][DV],
        g[WIDTH][H], beta[WIDTH][H];
    int32_t slot[WIDTH];
    for (int b = 0; b < WIDTH; b++) {
        const int n = live[b];
        slot[b] = n < 0 ? -1 : slot_of[n];
        if (n >= 0)
            token(n, pos[n], &q[b][0][0], &k[b][0][0], &v[b][0][0], g[b], beta[b], DK, DV);
        else /* padding rows: any finite values, never read for output */
            memset(q[b], 0, sizeof q[b]), memset(k[b], 0, sizeof k[b]),
                memset(v[b], 0, sizeof v[b]), memset(g[b], 0, sizeof g[b]),
                memset(beta[b], 0, sizeof beta[b]);
    }
    linattn_config cfg;
    linattn_config_init_step(&cfg, WIDTH, H, DK, DV);
    linattn_config_set_gate(&cfg, LINATTN_GATE_TOKEN);
    cfg.normalize = 0, cfg.qk_l2norm = 1;
    linattn_state_pool pool = *shape;
    pool.read_slots = slot; /* write slot = read slot: in place */
    linattn_operands ops;
    linattn_operands_init(&ops);
    ops.q = &q[0][0][0], ops.k = &k[0][0][0], ops.v = &v[0][0][0], ops.g = &g[0][0];
    ops.beta = &beta[0][0], ops.o = &o[0][0][0];
    ops.s = states, ops.pool = &pool;
    if (check(linattn_run(LINATTN_OP_DELTA_STEP, &cfg, &ops), "decode"))
        return 1;
    for (int b = 0; b < WIDTH; b++)
        if (live[b] >= 0)
            memcpy(outputs[live[b]] + (size_t)pos[live[b]] * H * DV, o[b], sizeof o[b]);
    return 0;
}

/* Sequence n alone: linattn_delta_forward over its prompt, then a step per token. */
static int reference(int n, float *want)
{
    const int T = prompt[n];
    float *q = malloc(sizeof(float) * T * H * DK), *k = malloc(sizeof(float) * T * H * DK),
          *v = malloc(sizeof(float) * T * H * DV), *g = malloc(sizeof(float) * T * H),
          *beta = malloc(sizeof(float) * T * H);
    static float s[H][DK][DV];
    memset(s, 0, sizeof s);
    for (int t = 0; t < T; t++)
        token(n, t, q + t * H * DK, k + t * H * DK, v + t * H * DV, g + t * H, beta + t * H, DK,
              DV);
    linattn_config cfg;
    linattn_config_init(&cfg, 1, H, T, DK, DV);
    linattn_config_set_gate(&cfg, LINATTN_GATE_TOKEN);
    cfg.normalize = 0, cfg.qk_l2norm = 1;
    cfg.q = cfg.k = (linattn_strides){T * H * DK, DK, H * DK};
    cfg.v = cfg.o = (linattn_strides){T * H * DV, DV, H * DV};
    cfg.g = cfg.beta = (linattn_strides){T * H, 1, H};
    int bad = check(linattn_delta_forward(&cfg, q, k, v, g, beta, want, &s[0][0][0]), "ref");
    linattn_config_init_step(&cfg, 1, H, DK, DV);
    linattn_config_set_gate(&cfg, LINATTN_GATE_TOKEN);
    cfg.normalize = 0, cfg.qk_l2norm = 1;
    for (int t = T; t < T + decode[n] && !bad; t++) {
        token(n, t, q, k, v, g, beta, DK, DV);
        bad = check(linattn_delta_step(&cfg, q, k, v, g, beta, want + (size_t)t * H * DV,
                                       &s[0][0][0]),
                    "ref step");
    }
    free(q), free(k), free(v), free(g), free(beta);
    return bad;
}

int main(void)
{
    static float states[SLOTS][H][DV][DK]; /* V-first */
    const linattn_state_pool shape = {.slots = SLOTS, .slot = H * DV * DK, .head = DV * DK,
                                      .row = 1, .col = DK};
    int slot_of[NSEQ], pos[NSEQ], done[NSEQ] = {0}, started[NSEQ] = {0};
    int free_slots[SLOTS], nfree = SLOTS;
    for (int i = 0; i < SLOTS; i++)
        free_slots[i] = SLOTS - 1 - i;
    for (int n = 0; n < NSEQ; n++)
        outputs[n] = calloc((size_t)(prompt[n] + decode[n]) * H * DV, sizeof(float));
    int finished = 0, calls = 0;
    for (int step = 0; finished < NSEQ; step++) {
        /* arrivals: the ones due that find a free slot, prefilled in one call */
        int ids[NSEQ], m = 0;
        for (int n = 0; n < NSEQ; n++)
            if (!started[n] && arrive[n] <= step && nfree > 0) {
                slot_of[n] = free_slots[--nfree];
                pos[n] = prompt[n];
                started[n] = 1;
                ids[m++] = n;
            }
        if (m > 0 && prefill(&states[0][0][0][0], &shape, ids, m, slot_of))
            return 1;
        calls += m > 0;
        /* one decode token for every live sequence, padded to WIDTH */
        int live[WIDTH], b = 0;
        for (int n = 0; n < NSEQ && b < WIDTH; n++)
            if (started[n] && !done[n])
                live[b++] = n;
        if (b == 0)
            continue;
        for (; b < WIDTH; b++)
            live[b] = -1;
        if (decode_step(&states[0][0][0][0], &shape, live, slot_of, pos))
            return 1;
        calls++;
        for (b = 0; b < WIDTH; b++) {
            const int n = live[b];
            if (n >= 0 && ++pos[n] == prompt[n] + decode[n]) {
                done[n] = 1, finished++;
                free_slots[nfree++] = slot_of[n]; /* leaves: its slot is reused */
            }
        }
    }
    int same = 1;
    for (int n = 0; n < NSEQ; n++) {
        const size_t len = (size_t)(prompt[n] + decode[n]) * H * DV;
        float *want = calloc(len, sizeof(float));
        if (reference(n, want))
            return 1;
        double worst = 0;
        for (size_t i = 0; i < len; i++) {
            const double d = fabs((double)outputs[n][i] - want[i]) / fmax(1.0, fabs(want[i]));
            worst = d > worst || d != d ? d : worst;
        }
        if (!(worst < 1e-5)) {
            fprintf(stderr, "sequence %d differs from its separate calls by %g\n", n, worst);
            same = 0;
        }
        free(want);
        free(outputs[n]);
    }
    printf("%d sequences, %d slots, %d batched calls: %s\n", NSEQ, SLOTS, calls,
           same ? "the same as separate per-sequence calls (to 1e-5)" : "DIFFERENT");
    return same ? 0 : 1;
}
