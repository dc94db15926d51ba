#include "oracle_delta.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double phi(linattn_phi kind, double x)
{
    if (kind == LINATTN_PHI_ELU1)
        return x > 0 ? x + 1 : exp(x);
    if (kind == LINATTN_PHI_RELU)
        return x > 0 ? x : 0;
    return x;
}

/* out = mult * nrm(phi(x)): nrm(y) = y / sqrt(sum y^2 + 1e-6) when l2norm */
static void features(const linattn_config *cfg, const float *x, double mult, double *out)
{
    double ss = 0;
    for (int64_t c = 0; c < cfg->dk; c++) {
        out[c] = phi(cfg->phi, x[c]);
        ss += out[c] * out[c];
    }
    if (cfg->qk_l2norm)
        mult /= sqrt(ss + 1e-6);
    for (int64_t c = 0; c < cfg->dk; c++)
        out[c] *= mult;
}

/* The q/k head value head h reads. */
static int64_t qk_head_of(const linattn_config *cfg, int64_t h)
{
    const int64_t hq = cfg->qk_heads ? cfg->qk_heads : cfg->heads;
    return cfg->head_map == LINATTN_HEADS_TILED ? h % hq : h / (cfg->heads / hq);
}

/* Decay factor of channel c at token t of head (b, h): e^g, 1 when ungated. */
static double decay(const linattn_config *cfg, const float *g, int64_t b, int64_t h, int64_t t,
                    int64_t c)
{
    const float *base = g + b * cfg->g.batch + h * cfg->g.head;
    switch (cfg->gate) {
    case LINATTN_GATE_HEAD: return exp(base[0]);
    case LINATTN_GATE_TOKEN: return exp(base[t * cfg->g.token]);
    case LINATTN_GATE_CHANNEL: return exp(base[t * cfg->g.token + c]);
    default: return 1;
    }
}

void oracle_delta(const linattn_config *cfg, int step, const float *q, const float *k,
                  const float *v, const float *g, const float *beta, const float *s_in,
                  double *o_ref, double *s_ref)
{
    const int64_t B = cfg->batch, H = cfg->heads, T = step ? 1 : cfg->seq_len, dk = cfg->dk,
                  dv = cfg->dv;
    double *qh = malloc(sizeof(double) * (size_t)dk), *kh = malloc(sizeof(double) * (size_t)dk);
    double *u = malloc(sizeof(double) * (size_t)dv);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t bh = b * H + h, hq = qk_head_of(cfg, h);
            double *S = s_ref + bh * dk * dv;
            for (int64_t i = 0; i < dk * dv; i++)
                S[i] = s_in ? s_in[bh * dk * dv + i] : 0.0;
            const float *qb = q + b * cfg->q.batch + hq * cfg->q.head;
            const float *kb = k + b * cfg->k.batch + hq * cfg->k.head;
            const float *vb = v + b * cfg->v.batch + h * cfg->v.head;
            const float *betab = beta + b * cfg->beta.batch + h * cfg->beta.head;
            for (int64_t t = 0; t < T; t++) {
                const int64_t tq = step ? 0 : t * cfg->q.token, tk = step ? 0 : t * cfg->k.token;
                const int64_t tv = step ? 0 : t * cfg->v.token;
                const double bt = betab[step ? 0 : t * cfg->beta.token];
                features(cfg, qb + tq, cfg->scale, qh);
                features(cfg, kb + tk, 1.0, kh);
                /* S = L_t S */
                for (int64_t c = 0; c < dk; c++) {
                    const double a = decay(cfg, g, b, h, step ? 0 : t, c);
                    for (int64_t d = 0; d < dv; d++)
                        S[c * dv + d] *= a;
                }
                /* u = beta (v - S^T kh) */
                for (int64_t d = 0; d < dv; d++) {
                    double sk = 0;
                    for (int64_t c = 0; c < dk; c++)
                        sk += S[c * dv + d] * kh[c];
                    u[d] = bt * (vb[tv + d] - sk);
                }
                /* S += kh u^T; o = S^T qh */
                double *o = o_ref + (bh * T + t) * dv;
                memset(o, 0, sizeof(double) * (size_t)dv);
                for (int64_t c = 0; c < dk; c++)
                    for (int64_t d = 0; d < dv; d++) {
                        S[c * dv + d] += kh[c] * u[d];
                        o[d] += S[c * dv + d] * qh[c];
                    }
            }
        }
    free(qh);
    free(kh);
    free(u);
}
