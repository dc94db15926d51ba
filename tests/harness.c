#define _DEFAULT_SOURCE
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "oracle.h"
#include "tolerance.h"

static uint64_t rng_state;

uint64_t test_seed(void)
{
    static uint64_t seed;
    static int done;
    if (!done) {
        const char *env = getenv("LINATTN_TEST_SEED");
        seed = env && *env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
        printf("random seed: LINATTN_TEST_SEED=%llu\n", (unsigned long long)seed);
        fflush(stdout);
        rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
        done = 1;
    }
    return seed;
}

static uint64_t next_u64(void) /* splitmix64 */
{
    uint64_t x = (rng_state += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

float rand_uniform(float lo, float hi)
{
    const double u = (double)(next_u64() >> 11) / 9007199254740992.0;
    return (float)(lo + (hi - lo) * u);
}

spec spec_default(int64_t B, int64_t H, int64_t T, int64_t dk, int64_t dv)
{
    spec sp = {0};
    sp.B = B, sp.H = H, sp.T = T, sp.dk = dk, sp.dv = dv;
    sp.causal = 1, sp.normalize = 1, sp.threads = 1;
    sp.g_lo = -1.0f, sp.g_hi = 0.0f, sp.qk_lo = -1.0f, sp.qk_hi = 1.0f;
    return sp;
}

float *copy_floats(const float *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof(float));
    if (y == NULL)
        abort();
    memcpy(y, x, n * sizeof(float));
    return y;
}

void scale_value_rows(const linattn_config *c, float *v, int64_t t0, int64_t t1, float factor)
{
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < c->heads; h++)
            for (int64_t t = t0; t < t1; t++)
                for (int64_t j = 0; j < c->dv; j++) {
                    float *x = v + b * c->v.batch + h * c->v.head + t * c->v.token + j;
                    *x *= factor;
                }
}

/* Mappings given back, kept for reuse: the suites map hundreds of
 * thousands of buffers a run, and in a process with threads each munmap
 * flushes every CPU's TLB (test_ops: 7.8 s of system time a run on a
 * 2-vCPU VM, 1.1 s with reuse). At most SPARE_MAPS of them and
 * SPARE_BYTES in all; the rest are unmapped. */
enum { SPARE_MAPS = 256 };
#define SPARE_BYTES ((size_t)64 << 20)
static mapping spare[SPARE_MAPS];
static int spares;
static size_t spare_bytes;

unsigned char *guard_pages_get(size_t len)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (int i = spares - 1; i >= 0; i--) {
        if (spare[i].len == len) {
            unsigned char *base = spare[i].base;
            spare[i] = spare[--spares];
            spare_bytes -= len;
            memset(base, 0, len - page); /* as a new mapping is */
            return base;
        }
    }
    unsigned char *base =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED || mprotect(base + len - page, page, PROT_NONE) != 0)
        abort();
    return base;
}

void guard_pages_put(unsigned char *base, size_t len)
{
    if (spares < SPARE_MAPS && spare_bytes + len <= SPARE_BYTES) {
        spare[spares++] = (mapping){base, len};
        spare_bytes += len;
    } else {
        munmap(base, len);
    }
}

float *guarded_floats(problem *p, size_t n, int unaligned)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t bytes = (n ? n : 1) * sizeof(float);
    const size_t data = (bytes + 64 + page - 1) / page * page;
    const size_t len = data + page;
    unsigned char *base = guard_pages_get(len);
    p->maps[p->nmaps++] = (mapping){base, len};
    /* The data ends exactly at the guard page. Unaligned: moved down to an
     * address 4 bytes past a 64-byte boundary, leaving < 64 spare bytes. */
    uintptr_t start = (uintptr_t)(base + data - bytes);
    if (unaligned)
        start = (start - 4) / 64 * 64 + 4;
    return (float *)start;
}

void problem_free(problem *p)
{
    for (int i = 0; i < p->nmaps; i++)
        guard_pages_put(p->maps[i].base, p->maps[i].len);
    free(p->s_init);
    free(p->z_init);
    memset(p, 0, sizeof *p);
}

static float *random_floats(problem *p, size_t n, float lo, float hi)
{
    float *f = guarded_floats(p, n, p->sp.unaligned);
    for (size_t i = 0; i < n; i++)
        f[i] = rand_uniform(lo, hi);
    return f;
}

void problem_make(problem *p, const spec *sp)
{
    test_seed();
    memset(p, 0, sizeof *p);
    p->sp = *sp;
    const int64_t B = sp->B, H = sp->H, T = sp->T, dk = sp->dk, dv = sp->dv;
    linattn_config *c = &p->cfg;
    linattn_config_init(c, B, H, T, dk, dv);
    c->phi = sp->phi;
    c->algo = sp->algo;
    c->causal = sp->causal;
    c->normalize = sp->normalize;
    c->z_compensated = sp->z_compensated;
    c->qk_l2norm = sp->l2norm;
    c->chunk = sp->chunk;
    c->num_threads = sp->threads;
    linattn_config_set_gate(c, sp->gate);

    const size_t nq = (size_t)(B * H * T * dk), nv = (size_t)(B * H * T * dv);
    switch (sp->layout) {
    case LAYOUT_BHTD:
        p->q = random_floats(p, nq, sp->qk_lo, sp->qk_hi);
        p->k = random_floats(p, nq, sp->qk_lo, sp->qk_hi);
        p->v = random_floats(p, nv, -1, 1);
        break;
    case LAYOUT_BTHD:
        p->q = random_floats(p, nq, sp->qk_lo, sp->qk_hi);
        p->k = random_floats(p, nq, sp->qk_lo, sp->qk_hi);
        p->v = random_floats(p, nv, -1, 1);
        c->q = c->k = (linattn_strides){T * H * dk, dk, H * dk};
        c->v = c->o = (linattn_strides){T * H * dv, dv, H * dv};
        break;
    case LAYOUT_PACKED_QKV: {
        const int64_t row = H * (2 * dk + dv);
        float *buf = random_floats(p, (size_t)(B * T * row), sp->qk_lo, sp->qk_hi);
        p->q = buf, p->k = buf + H * dk, p->v = buf + 2 * H * dk;
        c->q = c->k = (linattn_strides){T * row, dk, row};
        c->v = (linattn_strides){T * row, dv, row};
        break;
    }
    case LAYOUT_MQA:
        p->q = random_floats(p, nq, sp->qk_lo, sp->qk_hi);
        p->k = random_floats(p, (size_t)(B * T * dk), sp->qk_lo, sp->qk_hi);
        p->v = random_floats(p, (size_t)(B * T * dv), -1, 1);
        c->k = (linattn_strides){T * dk, 0, dk};
        c->v = (linattn_strides){T * dv, 0, dv};
        break;
    }
    p->o = guarded_floats(p, nv, sp->unaligned);
    for (size_t i = 0; i < nv; i++)
        p->o[i] = NAN; /* every element must be written */

    if (sp->gate != LINATTN_GATE_NONE) {
        size_t ng = sp->gate == LINATTN_GATE_HEAD    ? (size_t)H
                    : sp->gate == LINATTN_GATE_TOKEN ? (size_t)(B * H * T)
                                                     : (size_t)(B * H * T * dk);
        p->g = random_floats(p, ng, sp->g_lo, sp->g_hi);
        if (sp->layout == LAYOUT_BTHD && sp->gate == LINATTN_GATE_TOKEN)
            c->g = (linattn_strides){T * H, 1, H}; /* [B][T][H] */
        else if (sp->layout == LAYOUT_BTHD && sp->gate == LINATTN_GATE_CHANNEL)
            c->g = (linattn_strides){T * H * dk, dk, H * dk}; /* [B][T][H][dk] */
    }
    if (sp->with_state) {
        const size_t ns = (size_t)(B * H * dk * dv), nz = (size_t)(B * H * dk);
        const int zd = 1 + sp->z_compensated; /* z's rows a head */
        p->s = random_floats(p, ns, -1, 1);
        p->z = random_floats(p, nz * (size_t)zd, 0, 2); /* a plausible sum of positive features */
        p->s_init = malloc(ns * sizeof(float));
        p->z_init = malloc(nz * sizeof(float));
        memcpy(p->s_init, p->s, ns * sizeof(float));
        for (size_t i = 0; i < nz; i++) {
            /* compensations far above rounding size, so that a kernel that
             * dropped or misplaced them fails */
            float *zh = p->z + i / (size_t)dk * (size_t)(zd * dk) + i % (size_t)dk;
            if (sp->z_compensated)
                zh[dk] = zh[0] * rand_uniform(-0.25f, 0.25f);
            p->z_init[i] = sp->z_compensated ? zh[0] + zh[dk] : zh[0];
        }
    }
}

linattn_status problem_forward(problem *p)
{
    return linattn_forward(&p->cfg, p->q, p->k, p->v, p->g, p->o, p->s, p->z);
}

const char *spec_name(const spec *sp)
{
    static char buf[256];
    static const char *gates[] = {"none", "head", "token", "channel"};
    static const char *phis[] = {"elu1", "relu", "identity"};
    static const char *algos[] = {"auto", "chunked", "recurrent"};
    snprintf(buf, sizeof buf,
             "B=%lld H=%lld T=%lld dk=%lld dv=%lld phi=%s gate=%s algo=%s causal=%d "
             "normalize=%d z_compensated=%d l2norm=%d state=%d unaligned=%d threads=%d chunk=%lld "
             "layout=%d g=[%g,%g]",
             (long long)sp->B, (long long)sp->H, (long long)sp->T, (long long)sp->dk,
             (long long)sp->dv, phis[sp->phi], gates[sp->gate], algos[sp->algo], sp->causal,
             sp->normalize, sp->z_compensated, sp->l2norm, sp->with_state, sp->unaligned,
             sp->threads, (long long)sp->chunk, (int)sp->layout, sp->g_lo, sp->g_hi);
    return buf;
}

/* max |x - ref| / max(1, max |ref|) of n values; NaN when x is not finite */
static double rel_err(const float *x, int64_t x_stride, const double *ref, int64_t rows, int64_t n)
{
    double worst = 0, scale = 1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n; i++) {
            const double a = fabs(ref[r * n + i]);
            scale = a > scale ? a : scale;
        }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n; i++) {
            const double d = fabs((double)x[r * x_stride + i] - ref[r * n + i]);
            if (!(d <= worst) && !isnan(worst))
                worst = d; /* NaN sticks */
        }
    return worst / scale;
}

double problem_error(const problem *p)
{
    const linattn_config *c = &p->cfg;
    const int64_t B = c->batch, H = c->heads, T = c->seq_len, dk = c->dk, dv = c->dv;
    double *o = malloc(sizeof(double) * (size_t)(B * H * T * dv));
    double *s = malloc(sizeof(double) * (size_t)(B * H * dk * dv));
    double *z = malloc(sizeof(double) * (size_t)(B * H * dk));
    oracle_forward(c, 0, p->q, p->k, p->v, p->g, p->s_init, p->z_init, o, s, z);
    double worst = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t bh = b * H + h;
            const float *ob = p->o + b * c->o.batch + h * c->o.head;
            double e = rel_err(ob, c->o.token, o + bh * T * dv, T, dv);
            if (p->s) {
                const double es = rel_err(p->s + bh * dk * dv, dv, s + bh * dk * dv, dk, dv);
                e = isnan(es) || es > e ? es : e;
                if (c->normalize) {
                    const int64_t zd = 1 + c->z_compensated;
                    float *zsum = malloc(sizeof(float) * (size_t)dk);
                    for (int64_t i = 0; i < dk; i++) /* float: the tolerance dwarfs the rounding */
                        zsum[i] = p->z[bh * zd * dk + i] +
                                  (c->z_compensated ? p->z[bh * zd * dk + dk + i] : 0.0f);
                    const double ez = rel_err(zsum, dk, z + bh * dk, 1, dk);
                    free(zsum);
                    e = isnan(ez) || ez > e ? ez : e;
                }
            }
            worst = isnan(e) || e > worst ? e : worst;
        }
    free(o);
    free(s);
    free(z);
    const double ratio = isnan(worst) ? INFINITY : worst / LA_TOL_REL;
    if (!(ratio <= 1.0))
        printf("FAIL %s: error %.3g of the bound\n", spec_name(&p->sp), ratio);
    return ratio;
}

double problem_distance(const problem *a, const problem *b)
{
    const linattn_config *c = &a->cfg;
    double worst = 0;
    for (int64_t bb = 0; bb < c->batch; bb++)
        for (int64_t h = 0; h < c->heads; h++) {
            const float *oa = a->o + bb * c->o.batch + h * c->o.head;
            const float *ob = b->o + bb * c->o.batch + h * c->o.head;
            double scale = 1, d = 0;
            for (int64_t t = 0; t < c->seq_len; t++)
                for (int64_t i = 0; i < c->dv; i++) {
                    const double x = fabs((double)ob[t * c->o.token + i]);
                    scale = x > scale ? x : scale;
                }
            for (int64_t t = 0; t < c->seq_len; t++)
                for (int64_t i = 0; i < c->dv; i++) {
                    const double x = fabs((double)oa[t * c->o.token + i] - ob[t * c->o.token + i]);
                    d = isnan(x) || x > d ? x : d;
                }
            d /= scale;
            worst = isnan(d) || d > worst ? d : worst;
        }
    return isnan(worst) ? INFINITY : worst;
}
