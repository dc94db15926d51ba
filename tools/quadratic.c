/* The quadratic baseline of linattn-bench: causal softmax-free attention in
 * its masked O(T^2) form, the way one would write it without the linear
 * attention trick. Plain single-threaded C; the inner loops are axpys over
 * contiguous rows so the compiler can vectorise them for the baseline
 * target without -ffast-math. */
#include <math.h>
#include <string.h>

#include "bench.h"

static float phi_of(linattn_phi phi, float x)
{
    switch (phi) {
    case LINATTN_PHI_RELU: return x > 0.0f ? x : 0.0f;
    case LINATTN_PHI_IDENTITY: return x;
    default: return x > 0.0f ? x + 1.0f : expf(x);
    }
}

void bench_quadratic_head(int64_t T, int64_t dk, int64_t dv, linattn_phi phi, float scale,
                          int normalize, float eps, const float *q, const float *k,
                          const float *v, float *o, float *work)
{
    float *kht = work;         /* [dk][T]: transposed so a score row is an axpy */
    float *qh = kht + T * dk;  /* [dk] */
    float *score = qh + dk;    /* [T] */
    for (int64_t j = 0; j < T; j++)
        for (int64_t d = 0; d < dk; d++)
            kht[d * T + j] = phi_of(phi, k[j * dk + d]);

    for (int64_t t = 0; t < T; t++) {
        const int64_t n = t + 1; /* keys j <= t: the causal mask */
        for (int64_t d = 0; d < dk; d++)
            qh[d] = scale * phi_of(phi, q[t * dk + d]);
        memset(score, 0, (size_t)n * sizeof *score);
        for (int64_t d = 0; d < dk; d++) {
            const float a = qh[d];
            const float *row = kht + d * T;
            for (int64_t j = 0; j < n; j++)
                score[j] += a * row[j];
        }
        float *orow = o + t * dv;
        memset(orow, 0, (size_t)dv * sizeof *orow);
        float den = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            const float w = score[j];
            const float *vrow = v + j * dv;
            den += w;
            for (int64_t e = 0; e < dv; e++)
                orow[e] += w * vrow[e];
        }
        if (normalize) {
            const float div = den + eps;
            for (int64_t e = 0; e < dv; e++)
                orow[e] /= div;
        }
    }
}
