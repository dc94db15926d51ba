/* The recurrences of the additive family and of the delta rule, token by
 * token, in double, with the error bound described in reference.h. */
#include "reference.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#include <linattn.h>

/* max without fmax: aarch64 GCC 12's vectoriser crashes on fmax reductions
 * (the inputs here are finite) */
static double max_of(double a, double b) { return a > b ? a : b; }

/* Per operation: what flush-to-zero or a subnormal result can lose. */
#define SLACK ((double)FLT_MIN)
/* Decays below this may be flushed to 0 (e^-80 with room). */
#define FLUSH 1e-34
/* Past this, an fp32 intermediate may overflow. */
#define HUGE_MAG 1e30

static int overflowed;

static ref_num num(double x)
{
    const double ax = fabs(x);
    return (ref_num){x, ax, ax < FLT_MIN ? ax : 0.0};
}

static ref_num mul(ref_num x, ref_num y)
{
    const ref_num r = {x.v * y.v, x.a * y.a, x.m * y.a + y.m * x.a + x.m * y.m + SLACK};
    if (r.a > HUGE_MAG)
        overflowed = 1;
    return r;
}

static ref_num add(ref_num x, ref_num y)
{
    const ref_num r = {x.v + y.v, x.a + y.a, x.m + y.m + SLACK};
    if (r.a > HUGE_MAG)
        overflowed = 1;
    return r;
}

static ref_num neg(ref_num x) { return (ref_num){-x.v, x.a, x.m}; }

static ref_num phi(int kind, float x)
{
    const ref_num n = num(x);
    switch (kind) {
    case LINATTN_PHI_ELU1: return x > 0 ? add(n, num(1.0)) : (ref_num){exp(x), exp(x), SLACK};
    case LINATTN_PHI_RELU: return x > 0 ? n : num(0.0);
    default: return n;
    }
}

/* x / sqrt(sum x^2 + 1e-6): a relative error of a few ulps, kept in gamma. */
static void l2norm(ref_num *x, int64_t d)
{
    double ss = 1e-6, sa = 0;
    for (int64_t i = 0; i < d; i++) {
        ss += x[i].v * x[i].v;
        sa += x[i].a * x[i].a;
    }
    if (sa > HUGE_MAG)
        overflowed = 1;
    const double n = sqrt(ss);
    for (int64_t i = 0; i < d; i++)
        x[i] = (ref_num){x[i].v / n, x[i].a / n, x[i].m / n + SLACK};
}

/* qh = scale * nrm(phi(q)), kh = nrm(phi(k)) for token t. */
static void features(const ref_cfg *c, const ref_in *in, int64_t t, ref_num *qh, ref_num *kh)
{
    for (int64_t i = 0; i < c->dk; i++) {
        qh[i] = phi(c->phi, in->q[t * c->dk + i]);
        kh[i] = phi(c->phi, in->k[t * c->dk + i]);
    }
    if (c->qk_l2norm) {
        l2norm(qh, c->dk);
        l2norm(kh, c->dk);
    }
    const ref_num sc = num(c->scale);
    for (int64_t i = 0; i < c->dk; i++)
        qh[i] = mul(sc, qh[i]);
}

static void decay(const ref_cfg *c, const ref_in *in, int64_t t, ref_out *out)
{
    if (!c->gated)
        return;
    for (int64_t i = 0; i < c->dk; i++) {
        const double e = exp((double)in->g[t * c->dk + i]);
        const ref_num a = {e, e, SLACK};
        for (int64_t j = 0; j < c->dv; j++)
            out->s[i * c->dv + j] = mul(a, out->s[i * c->dv + j]);
        if (out->z)
            out->z[i] = mul(a, out->z[i]);
    }
}

/* o_t (numerator) and the normaliser from the current state. */
static void readout(const ref_cfg *c, const ref_num *qh, int64_t t, ref_out *out)
{
    for (int64_t j = 0; j < c->dv; j++) {
        ref_num acc = num(0.0);
        for (int64_t i = 0; i < c->dk; i++)
            acc = add(acc, mul(qh[i], out->s[i * c->dv + j]));
        out->o[t * c->dv + j] = acc;
    }
    if (out->den) {
        ref_num acc = num(c->eps);
        for (int64_t i = 0; i < c->dk; i++)
            acc = add(acc, mul(qh[i], out->z[i]));
        out->den[t] = acc;
    }
}

static void additive_update(const ref_cfg *c, const ref_in *in, const ref_num *kh, int64_t t,
                            ref_out *out)
{
    for (int64_t i = 0; i < c->dk; i++) {
        for (int64_t j = 0; j < c->dv; j++)
            out->s[i * c->dv + j] =
                add(out->s[i * c->dv + j], mul(kh[i], num(in->v[t * c->dv + j])));
        if (out->z)
            out->z[i] = add(out->z[i], kh[i]);
    }
}

/* S += kh u^T with u = beta (v - S^T kh), on the decayed S. */
static void delta_update(const ref_cfg *c, const ref_in *in, const ref_num *kh, int64_t t,
                         ref_num *u, ref_out *out)
{
    const ref_num beta = num(in->beta[t]);
    for (int64_t j = 0; j < c->dv; j++) {
        ref_num pred = num(0.0);
        for (int64_t i = 0; i < c->dk; i++)
            pred = add(pred, mul(out->s[i * c->dv + j], kh[i]));
        u[j] = mul(beta, add(num(in->v[t * c->dv + j]), neg(pred)));
    }
    for (int64_t i = 0; i < c->dk; i++)
        for (int64_t j = 0; j < c->dv; j++)
            out->s[i * c->dv + j] = add(out->s[i * c->dv + j], mul(kh[i], u[j]));
}

void ref_head(const ref_cfg *c, const ref_in *in, ref_out *out)
{
    overflowed = 0;
    const int64_t dk = c->dk, dv = c->dv;
    for (int64_t i = 0; i < dk; i++) {
        for (int64_t j = 0; j < dv; j++)
            out->s[i * dv + j] = num(in->s0 ? in->s0[i * dv + j] : 0.0);
        if (out->z)
            out->z[i] = num(in->z0 ? in->z0[i] : 0.0);
    }
    out->gate_sum = 0;
    if (c->gated)
        for (int64_t i = 0; i < dk; i++) {
            double sum = 0;
            for (int64_t t = 0; t < c->T; t++)
                sum += fmin(fabs((double)in->g[t * dk + i]), 200.0);
            out->gate_sum = max_of(out->gate_sum, sum);
        }

    /* Kernels may form products before applying decays (q . S_prev, then
     * e^b): the bound must hold for the undecayed products too. */
    double mq = 0, mk = 0, mv = 0, ms = 0, mz = 0;
    for (int64_t t = 0; t < c->T; t++) {
        for (int64_t i = 0; i < dk; i++) {
            mq = max_of(mq, phi(c->phi, in->q[t * dk + i]).a);
            mk = max_of(mk, phi(c->phi, in->k[t * dk + i]).a);
        }
        for (int64_t j = 0; j < dv; j++)
            mv = max_of(mv, fabs((double)in->v[t * dv + j]));
    }
    if (c->qk_l2norm)
        mq = mk = 1;
    mq *= fabs(c->scale);
    for (int64_t i = 0; i < dk * dv && in->s0; i++)
        ms = max_of(ms, fabs((double)in->s0[i]));
    for (int64_t i = 0; i < dk && in->z0; i++)
        mz = max_of(mz, fabs((double)in->z0[i]));
    const double n = (double)(dk + dv + c->T);
    /* The chunked forms also form the scores qh . kh (and kh . kh in the
     * delta rule's WY form) before they meet v: with v = 0 an infinite
     * score gives inf * 0 = NaN where the recurrence gives 0. */
    const int undecayed = mq * ms * n > HUGE_MAG || mq * mz * n > HUGE_MAG ||
                          mk * mv * n > HUGE_MAG || mq * mk * mv * n * n > HUGE_MAG ||
                          mk * mk * mv * n * n > HUGE_MAG || mk * ms * n > HUGE_MAG ||
                          mq * mk * n > HUGE_MAG || mk * mk * n > HUGE_MAG;

    ref_num *qh = malloc(sizeof(ref_num) * (size_t)dk * (size_t)(c->T + 1));
    ref_num *kh = malloc(sizeof(ref_num) * (size_t)dk);
    ref_num *u = malloc(sizeof(ref_num) * (size_t)dv);
    for (int64_t t = 0; t < c->T; t++) {
        features(c, in, t, qh + t * dk, kh);
        decay(c, in, t, out);
        if (c->delta)
            delta_update(c, in, kh, t, u, out);
        else
            additive_update(c, in, kh, t, out);
        if (c->delta || c->causal)
            readout(c, qh + t * dk, t, out);
    }
    if (!c->delta && !c->causal) /* every query sees the final state */
        for (int64_t t = 0; t < c->T; t++)
            readout(c, qh + t * dk, t, out);
    free(qh);
    free(kh);
    free(u);
    out->overflow = overflowed || undecayed;
    /* A decay factor, or a product of them, below about e^-80 may be exactly
     * 0 in a kernel (no subnormal arithmetic): what that drops is at most
     * this much of an undecayed output or normaliser. */
    out->flush_o = FLUSH * (mq * ms * n + mq * mk * mv * n * n + mk * mv * n + mk * ms * n);
    out->flush_den = FLUSH * (mq * mz * n + mq * mk * n * n);
    /* the final z is decayed z and keys, not met by q (which may be tiny) */
    out->flush_z = FLUSH * (mz + mk * n);
    /* A product of small factors (a decayed key, a scaled query, q . k),
     * formed in whatever order a kernel chooses, keeps only an absolute
     * precision of FLT_TRUE_MIN once it is subnormal or underflows (FLT_MIN
     * under flush-to-zero), and then meets the values or the state, which
     * may be near 1e38. */
    const double tiny = c->ftz ? (double)FLT_MIN : (double)FLT_TRUE_MIN;
    out->flush_o += tiny * (mq * mv * n * n + mv * n + ms * n + mq * ms * n);
    out->flush_den += tiny * (mq * n * n + mz * n + n);
    out->flush_z += tiny * n;
}
