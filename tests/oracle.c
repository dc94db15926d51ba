#include "oracle.h"

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

/* log-decay of channel c at token t of head (b, h); 0 when ungated */
static double log_decay(const linattn_config *cfg, const float *g, int64_t b, int64_t h,
                        int64_t t, int64_t c)
{
    const float *base = g + b * cfg->g.batch + h * cfg->g.head;
    switch (cfg->gate) {
    case LINATTN_GATE_HEAD: return base[0];
    case LINATTN_GATE_TOKEN: return base[t * cfg->g.token];
    case LINATTN_GATE_CHANNEL: return base[t * cfg->g.token + c];
    default: return 0;
    }
}

/* x's features over dk channels into f: phi, then unit L2 norm (+1e-6 under
 * the root) when asked, times mult. */
static void features(const linattn_config *cfg, const float *x, double mult, double *f)
{
    double ss = 0;
    for (int64_t c = 0; c < cfg->dk; c++) {
        f[c] = phi(cfg->phi, x[c]);
        ss += f[c] * f[c];
    }
    const double n = cfg->qk_l2norm ? 1 / sqrt(ss + 1e-6) : 1;
    for (int64_t c = 0; c < cfg->dk; c++)
        f[c] *= n * mult;
}

/* The q/k head value head h reads. */
static int64_t qk_head(const linattn_config *cfg, int64_t h)
{
    const int64_t n = cfg->qk_heads ? cfg->qk_heads : cfg->heads;
    return cfg->head_map == LINATTN_HEADS_TILED ? h % n : h / (cfg->heads / n);
}

void oracle_forward(const linattn_config *cfg, int step, const float *q, const float *k,
                    const float *v, const float *g, const float *s_in, const float *z_in,
                    double *o_ref, double *s_ref, double *z_ref)
{
    const int64_t B = cfg->batch, H = cfg->heads, T = step ? 1 : cfg->seq_len, dk = cfg->dk,
                  dv = cfg->dv;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t bh = b * H + h;
            double *S = s_ref + bh * dk * dv, *z = z_ref + bh * dk;
            for (int64_t i = 0; i < dk * dv; i++)
                S[i] = s_in ? s_in[bh * dk * dv + i] : 0.0;
            for (int64_t c = 0; c < dk; c++)
                z[c] = z_in ? z_in[bh * dk + c] : 0.0;
            const float *qb = q + b * cfg->q.batch + qk_head(cfg, h) * cfg->q.head;
            const float *kb = k + b * cfg->k.batch + qk_head(cfg, h) * cfg->k.head;
            double *fq = malloc(sizeof(double) * (size_t)dk),
                   *fk = malloc(sizeof(double) * (size_t)dk);
            const float *vb = v + b * cfg->v.batch + h * cfg->v.head;

            if (!cfg->causal && !step) { /* every query reads the full sums */
                for (int64_t t = 0; t < T; t++)
                    for (int64_t c = 0; c < dk; c++) {
                        features(cfg, kb + t * cfg->k.token, 1, fk);
                        const double kh = fk[c];
                        for (int64_t d = 0; d < dv; d++)
                            S[c * dv + d] += kh * vb[t * cfg->v.token + d];
                        z[c] += kh;
                    }
            }
            for (int64_t t = 0; t < T; t++) {
                const float *qt = qb + t * cfg->q.token, *kt = kb + t * cfg->k.token,
                            *vt = vb + t * cfg->v.token;
                features(cfg, kt, 1, fk);
                features(cfg, qt, cfg->scale, fq);
                if (cfg->causal || step)
                    for (int64_t c = 0; c < dk; c++) {
                        const double a = exp(log_decay(cfg, g, b, h, t, c));
                        const double kh = fk[c];
                        for (int64_t d = 0; d < dv; d++)
                            S[c * dv + d] = a * S[c * dv + d] + kh * vt[d];
                        z[c] = a * z[c] + kh;
                    }
                double *o = o_ref + (bh * T + t) * dv, den = 0;
                memset(o, 0, (size_t)dv * sizeof *o);
                for (int64_t c = 0; c < dk; c++) {
                    const double qh = fq[c];
                    for (int64_t d = 0; d < dv; d++)
                        o[d] += qh * S[c * dv + d];
                    den += qh * z[c];
                }
                if (cfg->normalize)
                    for (int64_t d = 0; d < dv; d++)
                        o[d] /= den + cfg->eps;
            }
            free(fq);
            free(fk);
        }
}
