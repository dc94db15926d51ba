/* libFuzzer target: one whole public call (linattn_forward, linattn_step,
 * linattn_delta_forward, linattn_delta_step) decoded from the input, with
 * hostile values in every config field, aliased, misaligned and NULL
 * buffers, and value regimes from subnormal to FLT_MAX, NaN and Inf.
 *
 * Checked on every input:
 *  - no sanitizer report, and no byte changed in the guard zones around each
 *    buffer (poisoned for AddressSanitizer, patterned otherwise) or in the
 *    config, whose bytes past struct_size are poisoned too;
 *  - a call the contract says must fail (bad shape, stride, enum, value,
 *    NULL, overlap...) fails; a plainly valid one succeeds;
 *  - on failure not one byte of any buffer changed;
 *  - the padding between a pool's states (padded or reordered strides) is
 *    neither read (NaN, and poisoned under ASan) nor written;
 *  - on success nothing outside o and the state changed, the outputs agree
 *    with reference.c within its error bound (and so are finite, but for a
 *    16-bit value past its type's range: the infinity of its sign) whenever
 *    the inputs are finite and no fp32 overflow is possible, and a rerun with
 *    num_threads = 1 gives the same bits;
 *  - a serving-form call run as a plan's units, in ranges the input picks
 *    (in turn on one thread, or on two threads at once),
 *    gives linattn_run's bits, and the plan refuses ranges outside it.
 *
 * Allocations stay small: a decoded call whose buffers exceed BUDGET floats
 * is skipped, unless its shape or strides are invalid; then the library
 * must reject it without touching memory, and it gets small buffers.
 *
 * The table under test is the one LINATTN_ISA names (scripts/fuzz.sh runs
 * every table this CPU has). Input format: see decode() below; a byte 0
 * always means the ordinary choice, so short inputs are plain calls. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <linattn.h>

#include "half.h"
#include "reference.h"

/* The delta rule and last_error may not be in the library under test yet:
 * weak references resolve to NULL then, and those checks are skipped. */
#pragma weak linattn_delta_forward
#pragma weak linattn_delta_step
#pragma weak linattn_last_error

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_ASAN 1
#endif
#ifdef FUZZ_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) __asan_poison_memory_region((p), (n))
#define UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

enum {
    BUDGET = 1 << 18,     /* floats over all allocations: 1 MiB */
    WORK = 1 << 22,       /* B*H*T*(dk*dv + dk + dv) per call */
    REF_WORK = 1 << 17,   /* the same, for the reference comparison */
    GUARD = 64,           /* bytes on each side of an allocation */
    SMALL = 64,           /* floats of a stand-in buffer in small mode */
};
#define GUARD_BYTE 0xA5

/* Exact size arithmetic for claimed layouts. */
__extension__ typedef __int128 wide;

enum { KIND_FORWARD, KIND_STEP, KIND_DELTA_FORWARD, KIND_DELTA_STEP };
static const char *const kind_names[] = {"forward", "step", "delta_forward", "delta_step"};

/* Buffer ids; inputs first. */
enum { BQ, BK, BV, BG, BBETA, BO, BS, BZ, NBUF };
static const char *const buf_names[] = {"q", "k", "v", "g", "beta", "o", "s", "z"};

/* ---- input reader ------------------------------------------------------ */

typedef struct {
    const uint8_t *p;
    size_t n, i;
} reader;

static unsigned u8(reader *r) { return r->i < r->n ? r->p[r->i++] : 0; }

static uint64_t u64(reader *r)
{
    uint64_t x = 0;
    for (int i = 0; i < 8; i++)
        x = x << 8 | u8(r);
    return x;
}

/* b < 240: 1 + b % ordinary; else a hostile value. */
static int64_t pick_dim(reader *r, int64_t ordinary)
{
    static const int64_t hostile[] = {0,       -1,        INT64_MIN, INT64_MAX,
                                      1LL << 31, 1LL << 32, 1LL << 26, 1LL << 34,
                                      1LL << 62, INT32_MAX, 65536,     200,
                                      1000,    3,         -(1LL << 40)};
    const unsigned b = u8(r);
    if (b < 240)
        return 1 + (int64_t)(b % (unsigned)ordinary);
    if (b == 255)
        return (int64_t)u64(r);
    return hostile[b - 240];
}

/* b < 240: b % count (0 the default); else out of range. */
static int pick_enum(reader *r, int count)
{
    static const int hostile[] = {-1, INT32_MIN, INT32_MAX, 255, 1000, 65536, -2, 7};
    const unsigned b = u8(r);
    if (b < 240)
        return (int)(b % (unsigned)count);
    if (b - 240 < 8)
        return hostile[b - 240];
    return count + (int)(b - 248);
}

static float pick_float(reader *r, const float *table, unsigned count)
{
    return table[u8(r) % count];
}

/* ---- PRNG and value regimes -------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng(void)
{
    rng_state += 0x9E3779B97F4A7C15ull; /* splitmix64 */
    uint64_t z = rng_state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rng() >> 40) / 16777216.0f;
}

enum { POOL_GENERAL, POOL_GATE, POOL_BETA };

/* Element types (0.4.0, linattn_run): a buffer of a 16-bit type holds its
 * values as bfloat16 or float16 in the same allocation, two per float. */
static float read_typed(linattn_dtype t, const void *p, int64_t i)
{
    switch (t) {
    case LINATTN_BF16: return la_bf16_to_f32(((const uint16_t *)p)[i]);
    case LINATTN_F16: return la_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* unit roundoff of a rounding to t */
static double unit_roundoff(linattn_dtype t)
{
    return t == LINATTN_BF16 ? 0x1p-8 : t == LINATTN_F16 ? 0x1p-11 : 0.0;
}

/* the absolute error of a rounding to t below its normal range: half the
 * spacing of its subnormals (float16: 2^-24 apart, below 2^-14, where the
 * relative bound above does not hold; bfloat16's, at float's range, are
 * within the checks' 1e-37) */
static double subnormal_roundoff(linattn_dtype t) { return t == LINATTN_F16 ? 0x1p-25 : 0.0; }

/* the least magnitude that rounds to infinity in t (round to nearest, even):
 * the largest finite value plus half its spacing. A value the reference
 * puts at or past it may be stored as an infinity of its sign. */
static double overflow_threshold(linattn_dtype t)
{
    return t == LINATTN_F16    ? 65520.0
           : t == LINATTN_BF16 ? 0x1.fep127 + 0x1p119
                               : 0x1.fffffep127 + 0x1p103;
}

/* got agrees with ref to within tol, or is the infinity of ref's sign that
 * rounding ref to t may give */
static int agrees(double got, double ref, double tol, linattn_dtype t)
{
    if (fabs(got - ref) <= tol)
        return 1;
    return isinf(got) && (got > 0) == (ref > 0) && fabs(ref) + tol >= overflow_threshold(t);
}

static float special(void)
{
    static const float s[] = {0.0f,      -0.0f,   FLT_MIN, -FLT_MIN, FLT_TRUE_MIN, FLT_MAX,
                              -FLT_MAX,  1e30f,   -1e30f,  1e-30f,   1e-40f,       -1e-40f,
                              1.0f,      -1.0f,   88.0f,   -104.0f};
    return s[rng() % (sizeof s / sizeof s[0])];
}

/* A value of 2^e times [lo, hi), with the sign drawn first when `sign`: the
 * draws in a fixed order (the order in which a compiler evaluates the
 * operands of * or the arguments of a call is unspecified, and GCC and
 * clang differ, so an input would make other values in each build). */
static float scaled(int sign, int e0, unsigned span, float lo, float hi)
{
    const float s = !sign || rng() & 1 ? 1.0f : -1.0f;
    const int e = e0 + (int)(rng() % span);
    return s * ldexpf(uniform(lo, hi), e);
}

static float general_value(unsigned regime)
{
    switch (regime % 10) {
    case 0: return uniform(-1, 1);
    case 1: return uniform(0, 1);
    case 2: return 0.0f;
    case 3: return scaled(0, -20, 41, -1, 1);
    case 4: return scaled(1, 100, 28, 1, 2);
    case 5: return scaled(1, -150, 30, 1, 2);
    case 6: return rng() % 16 ? uniform(-1, 1) : NAN;
    case 7: return rng() % 16 ? uniform(-1, 1) : (rng() & 1 ? INFINITY : -INFINITY);
    case 8: return rng() % 4 ? uniform(-1, 1) : special();
    default: return (float)((int)(rng() % 7) - 3);
    }
}

static float gate_value(unsigned regime)
{
    static const float resets[] = {-1e16f, -FLT_MAX, -1e6f, -88.0f, -104.0f, -1e30f, -200.0f};
    switch (regime % 8) {
    case 0: return uniform(-1, 0);
    case 1: return uniform(-20, -5);
    case 2: return rng() % 5 ? uniform(-0.5f, 0) : resets[rng() % 7];
    case 3: return rng() & 1 ? 0.0f : -0.0f;
    case 4: return rng() & 1 ? -1e-40f : -FLT_MIN;
    case 5: return -scaled(0, 100, 28, 1, 2);
    case 6: { /* mostly valid, some invalid */
        static const float bad[] = {1e-7f, 0.5f, NAN, -INFINITY, INFINITY, FLT_TRUE_MIN};
        return rng() % 8 ? uniform(-1, 0) : bad[rng() % 6];
    }
    default: return rng() & 1 ? uniform(-1, 0) : (rng() & 1 ? resets[rng() % 7] : special());
    }
}

static float beta_value(unsigned regime)
{
    static const float bad[] = {2.0001f, -1e-7f, NAN, INFINITY, -1.0f, 3.0f};
    switch (regime % 4) {
    case 0: return uniform(0, 1);
    case 1: return uniform(0, 2);
    case 2: return (float)(rng() % 3);
    default: return rng() % 8 ? uniform(0, 2) : bad[rng() % 6];
    }
}

/* ---- layouts ----------------------------------------------------------- */

typedef struct {
    int64_t n[4], st[4]; /* element offset: sum idx_i * st_i, idx_i < n_i */
} layout;

typedef struct {
    int bad;     /* a dimension < 1, a negative stride on a dimension > 1, or overflow */
    int64_t ext; /* last offset + 1 */
} extent;

static int64_t elem_bytes(linattn_dtype t)
{
    return t == LINATTN_BF16 || t == LINATTN_F16 ? 2 : 4;
}

/* bad also when the last offset's byte count (elem bytes an element)
 * overflows int64, which the library refuses (docs/api.md, byte ranges) */
static extent extent_of(const layout *l, int64_t elem)
{
    extent e = {0, 0};
    wide x = 1;
    for (int i = 0; i < 4; i++) {
        if (l->n[i] < 1)
            return (extent){1, 0};
        if (l->n[i] == 1)
            continue;
        if (l->st[i] < 0)
            return (extent){1, 0};
        x += (wide)(l->n[i] - 1) * l->st[i];
        if (x > INT64_MAX / elem)
            return (extent){1, 0};
    }
    e.ext = (int64_t)x;
    return e;
}

/* a * b, saturated far above anything this file compares against */
static wide smul(wide a, wide b)
{
    const wide cap = (wide)1 << 100;
    if (a < 0 || b < 0)
        return cap;
    if (a > cap || b > cap || (a != 0 && b > cap / a))
        return cap;
    return a * b;
}

static wide count_of(const layout *l)
{
    wide c = 1;
    for (int i = 0; i < 4; i++) {
        c *= l->n[i] > 0 ? l->n[i] : 1;
        if (c > (wide)1 << 40)
            return c;
    }
    return c;
}

typedef void (*visit_fn)(void *ctx, int64_t off, const int64_t idx[4]);

static void each(const layout *l, visit_fn fn, void *ctx)
{
    int64_t i[4];
    for (i[0] = 0; i[0] < l->n[0]; i[0]++)
        for (i[1] = 0; i[1] < l->n[1]; i[1]++)
            for (i[2] = 0; i[2] < l->n[2]; i[2]++)
                for (i[3] = 0; i[3] < l->n[3]; i[3]++)
                    fn(ctx, i[0] * l->st[0] + i[1] * l->st[1] + i[2] * l->st[2] + i[3] * l->st[3],
                       i);
}

/* ---- allocations ------------------------------------------------------- */

typedef struct {
    uint8_t *block;  /* GUARD | pad floats | data floats | GUARD */
    float *data;     /* first float any buffer may use */
    int64_t n;       /* floats from data */
    int64_t pad;     /* floats between the front guard and data (misalignment) */
    uint8_t *before; /* snapshot of [data, data + n) */
    uint8_t *marks;  /* per 2 bytes: which buffers use them (real mode) */
    unsigned regime, pool;
    linattn_dtype t; /* the values are drawn as this type */
    uint64_t seed;
} alloc;

static size_t alloc_bytes(const alloc *a) { return GUARD * 2 + (size_t)(a->pad + a->n) * 4; }

static void alloc_make(alloc *a)
{
    a->block = aligned_alloc(64, (alloc_bytes(a) + 63) / 64 * 64);
    memset(a->block, GUARD_BYTE, alloc_bytes(a));
    a->data = (float *)(a->block + GUARD) + a->pad;
    rng_state = a->seed;
    const int64_t per = a->t == LINATTN_F32 ? 1 : 2;
    for (int64_t i = 0; i < a->n * per; i++) {
        const float x = a->pool == POOL_GATE   ? gate_value(a->regime)
                        : a->pool == POOL_BETA ? beta_value(a->regime)
                                               : general_value(a->regime);
        if (a->t == LINATTN_BF16)
            ((uint16_t *)a->data)[i] = la_f32_to_bf16(x);
        else if (a->t == LINATTN_F16)
            ((uint16_t *)a->data)[i] = la_f32_to_f16(x);
        else
            a->data[i] = x;
    }
    a->before = malloc((size_t)a->n * 4 + 1);
    memcpy(a->before, a->data, (size_t)a->n * 4);
    a->marks = calloc((size_t)a->n * 2 + 1, 1);
    /* Poison everything but the data: ASan granules are 8 bytes, so the
     * front zone is poisoned up to the granule holding data[0] (the pattern
     * check below covers the rest). */
    const uintptr_t lo = (uintptr_t)a->block, d = (uintptr_t)a->data & ~(uintptr_t)7;
    POISON(a->block, d - lo);
    POISON(a->data + a->n, GUARD);
}

static void alloc_unpoison(alloc *a) { UNPOISON(a->block, alloc_bytes(a)); }

static void alloc_free(alloc *a)
{
    if (!a->block)
        return;
    alloc_unpoison(a);
    free(a->block);
    free(a->before);
    free(a->marks);
    a->block = NULL;
}

/* ---- the decoded call -------------------------------------------------- */

typedef struct {
    int kind;
    linattn_config cfg; /* as passed (garbage past struct_size) */
    int cfg_null;
    /* what the library must use: appended fields default when struct_size
     * does not cover them */
    int64_t qk_heads, T; /* effective: qk_heads resolved, T = 1 for step */
    int head_map, qk_l2norm;
    linattn_strides beta;
    layout lay[NBUF];
    int used[NBUF];      /* the call reads or writes this buffer */
    int place[NBUF];     /* 0 own allocation, 1 alias, 2 NULL, 3 garbage pointer */
    int host[NBUF];      /* allocation index for own/alias */
    int64_t offset[NBUF];/* floats from the host's data */
    float *ptr[NBUF];
    int must_fail, layout_bad, ambiguous;
    /* The 0.3 serving form (byte after the regimes; 0: the 0.2 entry point):
     * 1 linattn_run as is, 2 the state as a K-first pool of B slots, 3 a
     * V-first pool, 4 hostile read/write/snapshot slots, 5 cu_seqlens. */
    int serve;
    int packed_pool; /* form 5 with a pool and slot maps (the byte after the plan's) */
    /* z_compensated in effect (the byte after the packed pool's): each
     * head's z is [2][dk], the normaliser then its compensation */
    int zc;
    linattn_state_pool pool;
    int vfirst; /* the pool's natural order: V-first (row 1, col dk), else K-first */
    /* the pool's strides (the byte after z_compensated's): see decode_pool_strides */
    unsigned pool_strides;
    int pool_byte; /* that byte was in the input */
    int32_t rd[8], wr[8], snap[8 * 4];
    int64_t cu[6], nseq;
    unsigned regime[NBUF];
    /* 0.4.0 (bytes after the serving form; 0: none): what the config says
     * and what the library must use (F32 and no activation where
     * struct_size does not cover the fields). */
    linattn_dtype dt[NBUF];
    int gate_act, beta_act, old03;
    /* Host threads (the byte after the 0.4.0 fields; 0: none): the serving
     * form run as a plan, its units in ranges this picks (see run_plan). */
    unsigned plan;
    float lower_bound;
    unsigned alog_mode, bias_mode;
    float *A_log, *dt_bias; /* malloc'd (ASan sees their bounds), or NULL */
    char why[160];
    int reasons;                /* fail_reason calls */
    linattn_status pool_want;   /* the status a refusal of the pool's strides alone gets */
} call;

static void fail_reason(call *c, const char *what)
{
    if (!c->must_fail)
        snprintf(c->why, sizeof c->why, "%s", what);
    c->must_fail = 1;
    c->reasons++;
}

/* A refusal the pool's strides make: when it is the only reason, the
 * status must be `want` and the message must name the pool. */
static void pool_refusal(call *c, const char *what, linattn_status want)
{
    fail_reason(c, what);
    c->pool_want = want;
}

/* The call's state is a pool (forms 2 to 4, packed sequences with one). */
static int uses_pool(const call *c) { return (c->serve >= 2 && c->serve <= 4) || c->packed_pool; }

static void fuzz_fail(const call *c, const char *fmt, const char *detail, double x, double y)
{
    fprintf(stderr, "\nfuzz_call: %s: ", kind_names[c->kind]);
    fprintf(stderr, fmt, detail, x, y);
    const linattn_config *f = &c->cfg;
    fprintf(stderr,
            "\n  isa %s, B %lld H %lld T %lld dk %lld dv %lld phi %d gate %d algo %d causal %d "
            "normalize %d z_compensated %d eps %g scale %g chunk %lld threads %d struct_size %zu "
            "qk_heads %lld map %d l2 %d\n",
            linattn_isa_name(linattn_get_isa()), (long long)f->batch, (long long)f->heads,
            (long long)f->seq_len, (long long)f->dk, (long long)f->dv, f->phi, f->gate, f->algo,
            f->causal, f->normalize, f->z_compensated, (double)f->eps, (double)f->scale,
            (long long)f->chunk, f->num_threads, f->struct_size, (long long)c->qk_heads,
            c->head_map, c->qk_l2norm);
    fprintf(stderr,
            "  dtypes q %d k %d v %d beta %d o %d s %d; gate_act %d lower bound %g beta_act %d "
            "A_log mode %u dt_bias mode %u; serve %d\n", c->dt[BQ], c->dt[BK], c->dt[BV],
            c->dt[BBETA], c->dt[BO], c->dt[BS], c->gate_act, (double)c->lower_bound, c->beta_act,
            c->alog_mode, c->bias_mode, c->serve);
    for (int b = 0; b < NBUF; b++)
        if (c->used[b])
            fprintf(stderr,
                    "  %-4s regime %u place %d host %d off %lld strides %lld %lld %lld %lld\n",
                    buf_names[b], c->regime[b] % (b == BG ? 8 : b == BBETA ? 4 : 10), c->place[b],
                    c->host[b], (long long)c->offset[b],
                    (long long)c->lay[b].st[0], (long long)c->lay[b].st[1],
                    (long long)c->lay[b].st[2], (long long)c->lay[b].st[3]);
    abort();
}

/* Natural strides of hostile dimensions wrap, as a caller's would. */
static int64_t wmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static int64_t wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }

/* Strides for a [B][H][T][D] buffer from a layout byte. */
static linattn_strides pick_strides(reader *r, int64_t H, int64_t T, int64_t D, int step)
{
    const int64_t rows = step ? 1 : T;
    linattn_strides s = {wmul(wmul(H, rows), D), wmul(rows, D), step ? 0 : D};
    const unsigned b = u8(r);
    switch (b % 8) {
    case 3: /* [B][T][H][D], as fla and HF store them */
        return step ? s : (linattn_strides){wmul(wmul(T, H), D), D, wmul(H, D)};
    case 4: { /* padded rows and heads */
        const int64_t row = wadd(D, 1 + u8(r) % 5);
        const int64_t head = wadd(wmul(rows, row), u8(r) % 7);
        return (linattn_strides){wadd(wmul(H, head), u8(r) % 3), head, step ? 0 : row};
    }
    case 5: { /* broadcasts: some strides 0 */
        const unsigned m = u8(r);
        return (linattn_strides){m & 1 ? 0 : s.batch, m & 2 ? 0 : s.head, m & 4 ? 0 : s.token};
    }
    case 6: /* token stride garbage: ignored by step */
        s.token = (int64_t)u64(r);
        return s;
    case 7: { /* hostile */
        int64_t *f[3] = {&s.batch, &s.head, &s.token};
        for (int i = 0; i < 3; i++) {
            const unsigned h = u8(r);
            const int64_t nat = *f[i], any = (int64_t)u64(r);
            const int64_t opts[] = {nat,       0,         -1,           wadd(wmul(nat, -1), -1),
                                    INT64_MAX, INT64_MIN, 1LL << 40, wadd(nat, 1), 1, any};
            *f[i] = opts[h % 10];
        }
        return s;
    }
    default: return s;
    }
}

/* ---- decoding ---------------------------------------------------------- */

static const size_t V01_SIZE = offsetof(linattn_config, qk_heads);

#define COVERS(c, field) \
    ((c)->struct_size >= offsetof(linattn_config, field) + sizeof(((linattn_config *)0)->field))

static void decode(reader *r, call *c)
{
    memset(c, 0, sizeof *c);
    c->kind = (int)(u8(r) % 4);
    const int step = c->kind == KIND_STEP || c->kind == KIND_DELTA_STEP;
    const int delta = c->kind >= KIND_DELTA_FORWARD;
    const int64_t B = pick_dim(r, 3), H = pick_dim(r, 4), T = pick_dim(r, 48),
                  dk = pick_dim(r, 16), dv = pick_dim(r, 16);
    linattn_config *f = &c->cfg;
    linattn_config_init(f, B, H, T, dk, dv);
    f->phi = (linattn_phi)pick_enum(r, 3);
    const int gate = pick_enum(r, 4);
    f->algo = (linattn_algo)pick_enum(r, 3);
    {
        const unsigned b = u8(r);
        f->causal = b < 240 ? (b % 4 != 3) : (int)(b & 1 ? 2 : -1);
    }
    {
        const unsigned b = u8(r);
        const int flip = b % 3 == 2;
        f->normalize = b < 240 ? (delta ? flip : !flip) : (int)(b & 1 ? 2 : -1);
    }
    static const float eps_t[] = {1e-6f, 0.0f, 1e-3f, 1.0f, 1e-30f, FLT_TRUE_MIN,
                                  -1e-6f, NAN, INFINITY, -0.0f, FLT_MAX, 1e-10f};
    static const float scale_t[] = {1.0f,  0.125f, 0.0f, -1.0f, 2.0f,      1e30f,
                                    FLT_MAX, 1e-30f, NAN,  INFINITY, -INFINITY, -0.0f};
    f->eps = pick_float(r, eps_t, 12);
    f->scale = pick_float(r, scale_t, 12);
    {
        static const int64_t hostile[] = {-1, INT64_MIN, INT64_MAX, 1LL << 34, 1LL << 31,
                                          1000, 1, 2, 3, 16, 64, 65};
        const unsigned b = u8(r);
        f->chunk = b < 200 ? (int64_t)(b % 70) : hostile[(b - 200) % 12];
    }
    {
        static const int hostile[] = {-1, INT32_MAX, INT32_MIN, 100000, 64, 7, 1 << 20, 1 << 30};
        const unsigned b = u8(r);
        f->num_threads = b < 200 ? (int)(b % 5) : hostile[(b - 200) % 8];
    }
    /* Grouped heads, head map, qk_l2norm, beta strides: appended fields. */
    {
        const unsigned b = u8(r);
        const int64_t opts[] = {0, H, H % 2 == 0 ? H / 2 : 1, 1};
        const int64_t hostile[] = {-1, wadd(H, 1), wmul(2, H), INT64_MAX, INT64_MIN, 3, 5, 7};
        f->qk_heads = b < 200 ? opts[b % 4] : hostile[(b - 200) % 8];
    }
    f->head_map = (linattn_head_map)pick_enum(r, 2);
    {
        const unsigned b = u8(r);
        const int flip = b % 4 == 3;
        f->qk_l2norm = b < 250 ? (delta ? !flip : flip) : (int)(b & 1 ? 2 : -1);
    }
    {
        const unsigned b = u8(r);
        switch (b % 16) {
        case 10: case 11: f->struct_size = V01_SIZE; break;
        case 12: f->struct_size = V01_SIZE + 8; break;
        case 13: f->struct_size = sizeof *f + 8; break;
        case 14: f->struct_size = u8(r); break;
        case 15: f->struct_size = b & 16 ? SIZE_MAX : 0; break;
        default: f->struct_size = sizeof *f;
        }
    }
    c->cfg_null = u8(r) == 255;

    /* What the library must use. */
    c->T = step ? 1 : T;
    c->qk_heads = COVERS(f, qk_heads) && f->qk_heads != 0 ? f->qk_heads : H;
    c->head_map = COVERS(f, head_map) ? (int)f->head_map : LINATTN_HEADS_GROUPED;
    c->qk_l2norm = COVERS(f, qk_l2norm) ? f->qk_l2norm : 0;
    const int qkh_ok = c->qk_heads >= 1 && H >= 1 && H % c->qk_heads == 0;
    const int64_t QH = qkh_ok ? c->qk_heads : 1;

    f->q = pick_strides(r, QH, T, dk, step);
    f->k = u8(r) % 4 == 3 ? f->q : pick_strides(r, QH, T, dk, step);
    f->v = pick_strides(r, H, T, dv, step);
    f->o = pick_strides(r, H, T, dv, step);
    f->gate = (linattn_gate)gate;
    switch (gate) {
    case LINATTN_GATE_HEAD: {
        const unsigned b = u8(r);
        f->g = b % 4 == 3 ? (linattn_strides){H, 1, (int64_t)u64(r)}
               : b % 4 == 2 ? pick_strides(r, H, T, 1, step)
                            : (linattn_strides){0, 1, 0};
        break;
    }
    case LINATTN_GATE_TOKEN: f->g = pick_strides(r, H, T, 1, step); break;
    case LINATTN_GATE_CHANNEL: f->g = pick_strides(r, H, T, dk, step); break;
    default: f->g = pick_strides(r, H, T, 1, step); /* ignored */
    }
    f->beta = pick_strides(r, H, T, 1, step);
    c->beta = COVERS(f, beta) ? f->beta
                              : (linattn_strides){wmul(H, T), T, 1}; /* the documented default */

    /* Layouts of what the call uses. */
    const int64_t Te = c->T;
    c->used[BQ] = c->used[BK] = c->used[BV] = c->used[BO] = 1;
    c->lay[BQ] = (layout){{B, QH, Te, dk}, {f->q.batch, f->q.head, f->q.token, 1}};
    c->lay[BK] = (layout){{B, QH, Te, dk}, {f->k.batch, f->k.head, f->k.token, 1}};
    c->lay[BV] = (layout){{B, H, Te, dv}, {f->v.batch, f->v.head, f->v.token, 1}};
    c->lay[BO] = (layout){{B, H, Te, dv}, {f->o.batch, f->o.head, f->o.token, 1}};
    c->used[BG] = gate >= LINATTN_GATE_HEAD && gate <= LINATTN_GATE_CHANNEL;
    if (gate == LINATTN_GATE_HEAD)
        c->lay[BG] = (layout){{B, H, 1, 1}, {f->g.batch, f->g.head, 0, 0}};
    else
        c->lay[BG] = (layout){{B, H, Te, gate == LINATTN_GATE_CHANNEL ? dk : 1},
                              {f->g.batch, f->g.head, f->g.token, 1}};
    c->used[BBETA] = delta;
    c->lay[BBETA] = (layout){{B, H, Te, 1}, {c->beta.batch, c->beta.head, c->beta.token, 0}};
    c->lay[BS] = (layout){{B, H, dk, dv}, {wmul(wmul(H, dk), dv), wmul(dk, dv), dv, 1}};
    c->lay[BZ] = (layout){{B, H, dk, 1}, {wmul(H, dk), dk, 1, 0}};

    /* State: given or NULL. */
    {
        const unsigned b = u8(r);
        const int state_null = b % 4 == 1;
        c->used[BS] = !state_null || step;
        c->used[BZ] = !delta && f->normalize == 1 && (!state_null || step);
        if (b >= 240) { /* one without the other */
            c->used[b & 1 ? BS : BZ] = 0;
        }
    }

    /* Placement of each buffer. */
    for (int i = 0; i < NBUF; i++) {
        const unsigned p = u8(r);
        const unsigned m = p % 16;
        if (m == 13)
            c->place[i] = 2;
        else if (m == 14)
            c->place[i] = 3;
        else if (m == 12 || m == 15) {
            c->place[i] = 1;
            c->host[i] = m == 15 ? BO : (int)(u8(r) % NBUF);
            c->offset[i] = u8(r);
        } else {
            c->place[i] = 0;
            c->offset[i] = p / 16; /* misalignment in floats */
        }
        /* Garbage only where the call ignores the pointer: g without a
         * gate, z without a normaliser. */
        const int ignorable = (i == BG && !c->used[BG]) ||
                              (i == BZ && (delta || f->normalize == 0));
        if (c->place[i] == 3 && !ignorable)
            c->place[i] = c->used[i] ? 0 : 2;
        /* An unused state is a NULL state. */
        if ((i == BS || i == BZ) && !c->used[i] && c->place[i] != 3)
            c->place[i] = 2;
    }
    /* A NULL state in a forward call is no state. */
    if (!step)
        for (int i = BS; i <= BZ; i++)
            if (c->used[i] && c->place[i] == 2)
                c->used[i] = 0;
    /* An alias of a buffer that is itself not allocated gets its own. */
    for (int i = 0; i < NBUF; i++)
        if (c->place[i] == 1 && (c->host[i] == i || c->place[c->host[i]] != 0))
            c->place[i] = 0;
}

/* ---- contract model ---------------------------------------------------- */

static void mark_layouts_bad(call *c)
{
    const linattn_config *f = &c->cfg;
    const int step = c->kind == KIND_STEP || c->kind == KIND_DELTA_STEP;
    if (f->batch < 1 || f->heads < 1 || f->dk < 1 || f->dv < 1 || (!step && f->seq_len < 1))
        c->layout_bad = 1;
    if (!(c->qk_heads >= 1 && f->heads >= 1 && f->heads % c->qk_heads == 0))
        c->layout_bad = 1;
    for (int b = 0; b < NBUF; b++)
        if (c->used[b] && extent_of(&c->lay[b], elem_bytes(c->dt[b])).bad)
            c->layout_bad = 1;
    /* The state's byte count, given or not. */
    if (!c->layout_bad &&
        smul(smul(smul(f->batch, f->heads), smul(f->dk, f->dv)), 4) > INT64_MAX)
        c->layout_bad = 1;
    if (c->layout_bad)
        fail_reason(c, "bad shape or stride");
}

/* The config checks that need no memory. */
static void config_rules(call *c)
{
    const linattn_config *f = &c->cfg;
    const int step = c->kind == KIND_STEP || c->kind == KIND_DELTA_STEP;
    const int delta = c->kind >= KIND_DELTA_FORWARD;
    if (c->cfg_null)
        fail_reason(c, "cfg NULL");
    if (f->struct_size < V01_SIZE)
        fail_reason(c, "struct_size");
    if (f->struct_size != sizeof *f && f->struct_size != V01_SIZE && !c->old03)
        c->ambiguous = 1;
    if (COVERS(f, z_compensated) && f->z_compensated != 0 && f->z_compensated != 1)
        fail_reason(c, "z_compensated");
    if ((unsigned)f->phi > LINATTN_PHI_IDENTITY || (unsigned)f->gate > LINATTN_GATE_CHANNEL ||
        (unsigned)f->algo > LINATTN_ALGO_RECURRENT || (unsigned)c->head_map > LINATTN_HEADS_TILED)
        fail_reason(c, "enum");
    if (!(f->eps >= 0) || !isfinite(f->eps) || !isfinite(f->scale))
        fail_reason(c, "eps/scale");
    if (f->chunk < 0) {
        if (!step)
            fail_reason(c, "chunk");
        c->ambiguous = 1;
    }
    if ((f->causal != 0 && f->causal != 1) || (f->normalize != 0 && f->normalize != 1) ||
        (c->qk_l2norm != 0 && c->qk_l2norm != 1) || f->num_threads < 0)
        c->ambiguous = 1;
    if (!step && f->gate != LINATTN_GATE_NONE && f->causal == 0)
        fail_reason(c, "gate with causal = 0");
    if (step && f->causal != 1)
        c->ambiguous = 1;
    if (delta && (f->normalize != 0 || f->causal != 1)) {
        if (!step)
            fail_reason(c, "delta needs normalize 0, causal 1");
        c->ambiguous = 1;
    }
    /* Required pointers. */
    for (int b = 0; b < NBUF; b++)
        if (c->used[b] && c->place[b] >= 2)
            fail_reason(c, "NULL pointer");
    const int state_pair = !delta && !step && f->normalize == 1;
    if (state_pair && c->used[BS] != c->used[BZ])
        fail_reason(c, "s and z not a pair");
    if (step && (!c->used[BS] || (!delta && f->normalize == 1 && !c->used[BZ])))
        fail_reason(c, "step without state");
    /* A negative stride on a dimension of extent 1 is refused or not; only
     * the strides a call ignores (step's token strides) must be accepted. */
    for (int b = 0; b < NBUF; b++)
        for (int i = 0; i < 4 && c->used[b]; i++)
            if (c->lay[b].n[i] == 1 && c->lay[b].st[i] < 0 && !(step && i == 2) &&
                !(uses_pool(c) && (b == BS || b == BZ))) /* a pool's: pool_stride_rules */
                c->ambiguous = 1;
    /* Unused pointers (g with gate NONE): NULL, or garbage that must not be
     * touched; the call ignores them whatever they hold (docs/api.md). */
}

/* ---- memory model for real mode ---------------------------------------- */

/* M_OO, M_SS, M_ZZ: o, s or z reaches the unit twice; M_PAD: the padding
 * between a pool's states, filled with PAD_UNIT and poisoned for the call */
enum { M_IN = 1, M_O = 2, M_OO = 4, M_S = 8, M_Z = 16, M_SS = 32, M_ZZ = 64, M_PAD = 128 };
#define PAD_UNIT 0x7FA5 /* a NaN as bfloat16, and two as float32: a read shows */

typedef struct {
    alloc *a;
    uint8_t bit;
    int64_t base;   /* in 2-byte units from the allocation's data */
    int64_t halves; /* 2-byte units per element: 2 float32, 1 16-bit */
} mark_ctx;

static void mark_one(void *p, int64_t off, const int64_t idx[4])
{
    (void)idx;
    mark_ctx *m = p;
    for (int64_t j = 0; j < m->halves; j++) {
        uint8_t *x = &m->a->marks[m->base + off * m->halves + j];
        if (j == 0 && (*x & m->bit) && (m->bit & (M_O | M_S | M_Z)))
            *x |= m->bit == M_O ? M_OO : m->bit == M_S ? M_SS : M_ZZ;
        *x |= m->bit;
    }
}

/* ---- what the library under test implements ---------------------------- */

/* Features declared in the 0.2 header that a library under development may
 * not honour yet; probed once so the fuzzer tests what exists and says what
 * it skipped. A library that has them all skips nothing. */
static int have_groups, have_l2norm, have_ignores, have_v01;

static void probe_features(void)
{
    linattn_config cfg;
    float o[2] = {0};
    /* Two value heads on one q/k head: head 1 must read q/k head 0. */
    const float q2[2] = {1, 100}, v2[2] = {1, 1};
    linattn_config_init(&cfg, 1, 2, 1, 1, 1);
    cfg.phi = LINATTN_PHI_IDENTITY;
    cfg.normalize = 0;
    cfg.qk_heads = 1;
    have_groups = linattn_forward(&cfg, q2, q2, v2, NULL, o, NULL, NULL) == LINATTN_OK &&
                  o[1] == 1.0f;
    /* q = k = (3, 4) normalised: o = 1, not 25. */
    const float q1[2] = {3, 4}, v1[1] = {1};
    linattn_config_init(&cfg, 1, 1, 1, 2, 1);
    cfg.phi = LINATTN_PHI_IDENTITY;
    cfg.normalize = 0;
    cfg.qk_l2norm = 1;
    have_l2norm = linattn_forward(&cfg, q1, q1, v1, NULL, o, NULL, NULL) == LINATTN_OK &&
                  fabsf(o[0] - 1.0f) < 1e-3f;
    /* Step ignores seq_len and token strides. */
    float s[2] = {0};
    linattn_config_init(&cfg, 1, 1, 0, 2, 1);
    cfg.normalize = 0;
    cfg.q.token = cfg.k.token = cfg.v.token = cfg.o.token = -1;
    have_ignores = linattn_step(&cfg, q1, q1, v1, NULL, o, s, NULL) == LINATTN_OK;
    /* A caller built against 0.1. */
    linattn_config_init(&cfg, 1, 1, 1, 2, 1);
    cfg.struct_size = offsetof(linattn_config, qk_heads);
    have_v01 = linattn_forward(&cfg, q1, q1, v1, NULL, o, NULL, NULL) == LINATTN_OK;
}

/* ---- the check --------------------------------------------------------- */

static alloc allocs[NBUF];

/* Poisons (on) or unpoisons the M_PAD units for AddressSanitizer: a read
 * of padding is reported (8-byte granules: where the padding covers one). */
static void pads_poison(int on)
{
    for (int b = 0; b < NBUF; b++) {
        const alloc *a = &allocs[b];
        for (int64_t i = 0; a->block && i < a->n * 2;) {
            if (!(a->marks[i] & M_PAD)) {
                i++;
                continue;
            }
            int64_t j = i;
            while (j < a->n * 2 && (a->marks[j] & M_PAD))
                j++;
            uint8_t *p = (uint8_t *)a->data + i * 2;
            if (on)
                POISON(p, (size_t)(j - i) * 2);
            else
                UNPOISON(p, (size_t)(j - i) * 2);
            i = j;
        }
    }
}

static _Alignas(64) uint8_t cfg_block[sizeof(linattn_config) + 64];

static const char *last_error_text(void)
{
    return linattn_last_error ? linattn_last_error() : NULL;
}

static void fuzz_fail(const call *c, const char *fmt, const char *detail, double x, double y);

/* Ranges the plan must refuse (and an empty one it must take), before any
 * unit has run: each gets its status and leaves every buffer as it was. */
static void plan_refusals(const call *c, const linattn_plan *plan, int64_t units, size_t ws_bytes)
{
    unsigned char *ws = aligned_alloc(64, (ws_bytes + 64) / 64 * 64 + 64);
    const struct {
        int64_t first, count;
        void *ws;
        linattn_status want;
    } bad[] = {{-1, 1, ws, LINATTN_E_ARG},
               {0, -1, ws, LINATTN_E_ARG},
               {0, units + 1, ws, LINATTN_E_ARG},
               {units, 1, ws, LINATTN_E_ARG},
               {INT64_MAX, INT64_MAX, ws, LINATTN_E_ARG},
               {1, INT64_MAX, ws, LINATTN_E_ARG},
               {units + 1, 0, ws, LINATTN_E_ARG},
               {units, 0, NULL, LINATTN_OK}, /* nothing to run: no workspace needed */
               {0, units, NULL, units > 0 ? LINATTN_E_NULL : LINATTN_OK},
               {0, units, ws + 4, LINATTN_E_ARG}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const linattn_status st = linattn_plan_run(plan, bad[i].first, bad[i].count, bad[i].ws);
        if (st != bad[i].want)
            fuzz_fail(c, "%s [%g, + %g) returned another status", "linattn_plan_run of units",
                      (double)bad[i].first, (double)bad[i].count);
    }
    if (linattn_plan_run(NULL, 0, 0, ws) != LINATTN_E_NULL)
        fuzz_fail(c, "%s", "linattn_plan_run(NULL) did not return LINATTN_E_NULL", 0, 0);
    free(ws);
    pads_poison(0);
    for (int b = 0; b < NBUF; b++) {
        const alloc *a = &allocs[b];
        if (a->block && memcmp(a->before, a->data, (size_t)a->n * 4) != 0)
            fuzz_fail(c, "memory of %s changed by a refused linattn_plan_run", buf_names[b], 0, 0);
    }
    pads_poison(1);
}

/* Ranges of a plan's units run in turn on one thread, each with a
 * workspace of its own (filled with NaN under ASan), as a thread has. */
typedef struct {
    const linattn_plan *plan;
    size_t ws_bytes;
    const int64_t *first, *count;
    int64_t n;          /* ranges */
    int64_t from, by;   /* this thread runs ranges from, from + by, ... */
    int64_t failed;     /* the first range that failed, or -1 */
} plan_ranges;

static void *run_ranges(void *p)
{
    plan_ranges *w = p;
    for (int64_t r = w->from; r < w->n && w->failed < 0; r += w->by) {
        void *ws = aligned_alloc(64, (w->ws_bytes + 63) / 64 * 64 + 64);
        if (ws == NULL || linattn_plan_run(w->plan, w->first[r], w->count[r], ws) != LINATTN_OK)
            w->failed = r;
        free(ws);
    }
    return NULL;
}

/* The call as a plan (what an engine's own threads do): c->plan % 4 picks
 * the ranges (1: unit by unit from the last, 2: the second half then the
 * first, 3: runs of 1 + (c->plan >> 2 & 15) % 5 units); bit 6 runs them on
 * two threads at once (even ranges on one, odd on the other), else in turn
 * on this thread; bit 7 tries refused ranges first. */
static linattn_status run_plan(const call *c, linattn_op op, const linattn_config *cfg,
                               const linattn_operands *ops)
{
    linattn_plan *plan = (linattn_plan *)(uintptr_t)8; /* must become NULL on failure */
    const linattn_status st = linattn_plan_create(&plan, op, cfg, ops);
    if (st != LINATTN_OK) {
        if (plan != NULL)
            fuzz_fail(c, "%s", "linattn_plan_create failed but left *plan set", 0, 0);
        return st;
    }
    const int64_t units = linattn_plan_units(plan);
    const size_t ws_bytes = linattn_plan_workspace_size(plan);
    if (units < 1)
        fuzz_fail(c, "%s %g units", "a plan of", (double)units, 0);
    if (c->plan & 128)
        plan_refusals(c, plan, units, ws_bytes);
    const int64_t step = c->plan % 4 == 3 ? 1 + (c->plan >> 2 & 15) % 5 : units;
    int64_t *first = malloc((size_t)units * sizeof *first);
    int64_t *count = malloc((size_t)units * sizeof *count);
    if (first == NULL || count == NULL)
        abort();
    int64_t n = 0;
    for (int64_t done = 0; done < units; n++) {
        switch (c->plan % 4) {
        case 1: first[n] = units - 1 - n, count[n] = 1; break;
        case 2:
            first[n] = n == 0 ? units / 2 : 0;
            count[n] = n == 0 ? units - units / 2 : units / 2;
            break;
        default: first[n] = done, count[n] = units - done < step ? units - done : step; break;
        }
        done += count[n];
    }
    const int two = (c->plan & 64) && n > 1;
    plan_ranges w[2];
    for (int t = 0; t < 2; t++)
        w[t] = (plan_ranges){plan, ws_bytes, first, count, n, t, two ? 2 : 1, -1};
    pthread_t other;
    if (two && pthread_create(&other, NULL, run_ranges, &w[1]) != 0)
        abort();
    run_ranges(&w[0]);
    if (two)
        pthread_join(other, NULL);
    for (int t = 0; t < 1 + two; t++)
        if (w[t].failed >= 0)
            fuzz_fail(c, "%s [%g, + %g) failed", "linattn_plan_run of units",
                      (double)first[w[t].failed], (double)count[w[t].failed]);
    free(first);
    free(count);
    linattn_plan_destroy(plan);
    return LINATTN_OK;
}

static linattn_status invoke(const call *c, const linattn_config *cfg)
{
    float *const *p = c->ptr;
    if (c->serve) {
        static const linattn_op ops_of[4] = {LINATTN_OP_FORWARD, LINATTN_OP_STEP,
                                             LINATTN_OP_DELTA_FORWARD, LINATTN_OP_DELTA_STEP};
        linattn_operands ops;
        linattn_operands_init(&ops);
        ops.q = p[BQ], ops.k = p[BK], ops.v = p[BV], ops.g = p[BG], ops.beta = p[BBETA];
        ops.o = p[BO], ops.s = p[BS], ops.z = p[BZ];
        ops.A_log = c->A_log, ops.dt_bias = c->dt_bias;
        if (uses_pool(c))
            ops.pool = &c->pool;
        if (c->serve == 5)
            ops.cu_seqlens = c->cu, ops.num_seqs = c->nseq;
        if (c->plan)
            return run_plan(c, ops_of[c->kind], cfg, &ops);
        return linattn_run(ops_of[c->kind], cfg, &ops);
    }
    switch (c->kind) {
    case KIND_FORWARD: return linattn_forward(cfg, p[BQ], p[BK], p[BV], p[BG], p[BO], p[BS], p[BZ]);
    case KIND_STEP: return linattn_step(cfg, p[BQ], p[BK], p[BV], p[BG], p[BO], p[BS], p[BZ]);
    case KIND_DELTA_FORWARD:
        return linattn_delta_forward(cfg, p[BQ], p[BK], p[BV], p[BG], p[BBETA], p[BO], p[BS]);
    default: return linattn_delta_step(cfg, p[BQ], p[BK], p[BV], p[BG], p[BBETA], p[BO], p[BS]);
    }
}

/* Gate and beta values the call reads must be finite, <= 0 and in [0, 2];
 * raw projections and logits (an activation asked) only finite. */
typedef struct {
    const void *p;
    linattn_dtype t;
    int bad, nonfinite;
    int beta, raw;
} value_ctx;

static void check_value(void *p, int64_t off, const int64_t idx[4])
{
    (void)idx;
    value_ctx *v = p;
    const float x = read_typed(v->t, v->p, off);
    if (v->raw ? !isfinite(x)
        : v->beta ? !(x >= 0.0f && x <= 2.0f)
                  : !(x <= 0.0f && x >= -FLT_MAX))
        v->bad = 1;
    if (!isfinite(x))
        v->nonfinite = 1;
}

static void finite_input(void *p, int64_t off, const int64_t idx[4])
{
    (void)idx;
    value_ctx *v = p;
    if (!isfinite(read_typed(v->t, v->p, off)))
        v->nonfinite = 1;
}

/* The same bits, except that two NaNs are the same whatever their sign and
 * payload (docs/api.md, Determinism): x86 keeps the first operand's NaN
 * where two meet, and a column's operand order may differ between the code
 * paths of a full and a partial register tile. n floats of elements of t. */
static int same_but_nans(linattn_dtype t, const void *x, const void *y, int64_t n)
{
    if (memcmp(x, y, (size_t)n * 4) == 0)
        return 1;
    const size_t size = (size_t)elem_bytes(t);
    const int64_t elems = n * 4 / (int64_t)size;
    for (int64_t i = 0; i < elems; i++)
        if (memcmp((const uint8_t *)x + i * size, (const uint8_t *)y + i * size, size) != 0 &&
            !(isnan(read_typed(t, x, i)) && isnan(read_typed(t, y, i))))
            return 0;
    return 1;
}

/* Gathers the (b, h) problem into dense token-major arrays and compares. */
typedef struct {
    const call *c;
    double gamma;
} cmp_ctx;

static double softplus_d(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

/* The log-decay the input stage makes of raw projection a at (h, channel
 * i), in double from the same float operands (a + dt_bias is added in
 * float, as the library does, and exp(A_log) is libm's expf as there),
 * clamped to [-100, 0] the same way (NaN from 0 * inf reads as 0). */
static float gate_from_raw(const call *c, float a, int64_t h, int64_t i)
{
    const linattn_config *f = &c->cfg;
    const float bias =
        c->dt_bias ? c->dt_bias[f->gate == LINATTN_GATE_CHANNEL ? h * f->dk + i : h] : 0.0f;
    const double x = (double)(a + bias), a_exp = (double)expf(c->A_log[h]);
    const double g = c->gate_act == LINATTN_GATE_ACT_SOFTPLUS
                         ? -a_exp * softplus_d(x)
                         : (double)c->lower_bound / (1.0 + exp(-a_exp * x));
    return g < -100.0 ? -100.0f : g < 0.0 ? (float)g : 0.0f;
}

/* Sequence n's inputs: entry *b, tokens [*t0, *t0 + length). */
static int64_t seq_tokens(const call *c, int64_t n, int64_t *b, int64_t *t0)
{
    if (c->serve == 5) {
        *b = 0, *t0 = c->cu[n];
        return c->cu[n + 1] - c->cu[n];
    }
    *b = n, *t0 = 0;
    return c->T;
}

/* Element i = row * dv + col of the state of (b, h): contiguous K-first, or
 * where the pool's strides put it (slot b). */
static int64_t state_index(const call *c, int64_t b, int64_t h, int64_t i)
{
    const linattn_config *f = &c->cfg;
    if (!uses_pool(c))
        return (b * f->heads + h) * f->dk * f->dv + i;
    const linattn_state_pool *p = &c->pool;
    return b * p->slot + h * p->head + i / f->dv * p->row + i % f->dv * p->col;
}

/* Element i of the z of (b, h) (with z_compensated, 2 dk of them): as
 * state_index, through the pool's z strides. */
static int64_t z_index(const call *c, int64_t b, int64_t h, int64_t i)
{
    if (!uses_pool(c))
        return (b * c->cfg.heads + h) * c->cfg.dk * (1 + c->zc) + i;
    return b * c->pool.z_slot + h * c->pool.z_head + i;
}

/* Bits of element i of buffer x: as the call left it, and as it was before. */
static int unchanged(const call *c, int x, int64_t i)
{
    const size_t size = (size_t)elem_bytes(c->dt[x]);
    const uint8_t *now = (const uint8_t *)c->ptr[x];
    const uint8_t *was = (const uint8_t *)((const float *)allocs[c->host[x]].before + c->offset[x]);
    return memcmp(now + (size_t)i * size, was + (size_t)i * size, size) == 0;
}

/* The double-precision reference for value head h of batch entry b over its
 * tokens [t0, t0 + len), from the state slot `from` held before the call
 * (-1: zeros), with the tolerance factor its length gives. */
typedef struct {
    ref_cfg rc;
    ref_num *o, *den, *s, *z;
    ref_out out;
    double gamma;
} head_ref;

static void head_ref_run(const call *c, head_ref *r, int64_t b, int64_t h, int64_t t0,
                         int64_t len, int64_t from)
{
    const linattn_config *f = &c->cfg;
    const int64_t T = len, dk = f->dk, dv = f->dv, H = f->heads, QH = c->qk_heads;
    const int delta = c->kind >= KIND_DELTA_FORWARD;
    const int64_t hq = c->head_map == LINATTN_HEADS_TILED ? h % QH : h / (H / QH);
    float *q = malloc(sizeof(float) * (size_t)(T * dk + 1)),
          *k = malloc(sizeof(float) * (size_t)(T * dk + 1));
    float *v = malloc(sizeof(float) * (size_t)(T * dv + 1)),
          *g = malloc(sizeof(float) * (size_t)(T * dk + 1));
    float *beta = malloc(sizeof(float) * (size_t)(T + 1));
    for (int64_t t = 0; t < T; t++) {
        const int64_t tc = t0 + t; /* the token in the call */
        for (int64_t i = 0; i < dk; i++) {
            q[t * dk + i] = read_typed(c->dt[BQ], c->ptr[BQ],
                                       b * f->q.batch + hq * f->q.head + tc * f->q.token + i);
            k[t * dk + i] = read_typed(c->dt[BK], c->ptr[BK],
                                       b * f->k.batch + hq * f->k.head + tc * f->k.token + i);
            if (c->used[BG]) {
                const layout *l = &c->lay[BG];
                const int64_t off = b * l->st[0] + h * l->st[1] +
                                    (f->gate == LINATTN_GATE_HEAD ? 0 : tc * l->st[2]) +
                                    (f->gate == LINATTN_GATE_CHANNEL ? i : 0);
                g[t * dk + i] = c->gate_act ? gate_from_raw(c, c->ptr[BG][off], h, i)
                                            : c->ptr[BG][off];
            }
        }
        for (int64_t j = 0; j < dv; j++)
            v[t * dv + j] = read_typed(c->dt[BV], c->ptr[BV],
                                       b * f->v.batch + h * f->v.head + tc * f->v.token + j);
        if (delta) {
            const double x = read_typed(c->dt[BBETA], c->ptr[BBETA],
                                        b * c->beta.batch + h * c->beta.head + tc * c->beta.token);
            beta[t] = !c->beta_act ? (float)x
                                   : (float)((c->beta_act == LINATTN_BETA_ACT_SIGMOID2 ? 2 : 1) /
                                             (1.0 + exp(-x)));
        }
    }
    /* The initial state is the snapshot taken before the call. */
    const float *z0 = NULL;
    float *s0 = NULL;
    if (c->used[BS] && from >= 0) {
        const void *s_before = (const float *)allocs[c->host[BS]].before + c->offset[BS];
        s0 = malloc(sizeof(float) * (size_t)(dk * dv));
        for (int64_t i = 0; i < dk * dv; i++)
            s0[i] = read_typed(c->dt[BS], s_before, state_index(c, from, h, i));
    }
    float *zsum = NULL; /* with z_compensated: z + its compensation */
    if (c->used[BZ] && from >= 0) {
        z0 = (const float *)allocs[c->host[BZ]].before + c->offset[BZ] + z_index(c, from, h, 0);
        if (c->zc) {
            zsum = malloc(sizeof(float) * (size_t)dk);
            for (int64_t i = 0; i < dk; i++)
                zsum[i] = z0[i] + z0[dk + i];
            z0 = zsum;
        }
    }

    r->rc = (ref_cfg){delta, f->causal != 0 || c->kind == KIND_STEP, !delta && f->normalize == 1,
                      f->phi, c->used[BG], f->gate == LINATTN_GATE_CHANNEL,
                      c->qk_l2norm == 1, T, dk, dv, f->scale, f->eps};
    const ref_in in = {q, k, v, c->used[BG] ? g : NULL, beta, s0, z0};
    r->o = malloc(sizeof(ref_num) * (size_t)(T * dv + 1));
    r->den = malloc(sizeof(ref_num) * (size_t)(T + 1));
    r->s = malloc(sizeof(ref_num) * (size_t)(dk * dv));
    r->z = malloc(sizeof(ref_num) * (size_t)dk);
    r->out = (ref_out){r->o, r->rc.normalize ? r->den : NULL, r->s, r->rc.normalize ? r->z : NULL,
                       0, 0, 0, 0, 0};
    ref_head(&r->rc, &in, &r->out);
    /* gates from raw projections: a few ulps of each log-decay more */
    r->gamma = (delta ? 64 : 16) * (double)(T + dk + dv + 16) * FLT_EPSILON +
               (c->gate_act ? 20 : 4) * FLT_EPSILON * r->out.gate_sum;
    free(q), free(k), free(v), free(g), free(beta), free(s0), free(zsum);
}

static void head_ref_free(head_ref *r) { free(r->o), free(r->den), free(r->s), free(r->z); }

/* The o rows of the reference's tokens, token t being t0 + t of entry b. */
static void check_o(const call *c, const head_ref *r, int64_t b, int64_t h, int64_t t0)
{
    const linattn_config *f = &c->cfg;
    if (r->out.overflow)
        return;
    /* a 16-bit o: one more rounding, relative (absolute for float16 subnormals) */
    const double uo = unit_roundoff(c->dt[BO]), ao = subnormal_roundoff(c->dt[BO]);
    for (int64_t t = 0; t < r->rc.T; t++)
        for (int64_t j = 0; j < f->dv; j++) {
            const int64_t at = b * f->o.batch + h * f->o.head + (t0 + t) * f->o.token + j;
            const float got = read_typed(c->dt[BO], c->ptr[BO], at);
            const ref_num n = r->o[t * f->dv + j];
            const double en = r->gamma * n.a + n.m + r->out.flush_o;
            double ref = n.v, tol = 2 * en;
            if (r->rc.normalize) {
                const ref_num d = r->den[t];
                const double ed = r->gamma * d.a + d.m + r->out.flush_den;
                if (!(fabs(d.v) > 4 * ed) || fabs(d.v) < 1e-30)
                    continue; /* the normaliser's sign is not determined in fp32 */
                ref = n.v / d.v;
                tol = 2 * (en + fabs(ref) * ed) / (fabs(d.v) - ed);
            }
            if (fabs(ref) > 1e30)
                continue;
            tol = tol * (1 + uo) + uo * fabs(ref) + ao;
            if (!agrees(got, ref, tol + 1e-37, c->dt[BO])) {
                char where[96];
                snprintf(where, sizeof where, "o[b=%lld,h=%lld,t=%lld,%lld]", (long long)b,
                         (long long)h, (long long)(t0 + t), (long long)j);
                fprintf(stderr, "\n(tolerance %g, gate sum %g)", tol, r->out.gate_sum);
                fuzz_fail(c, "%s = %.9g, reference %.9g", where, got, ref);
            }
        }
}

/* The reference's final state (and z) against what slot `slot` holds. */
static void check_state(const call *c, const head_ref *r, int64_t slot, int64_t h)
{
    const linattn_config *f = &c->cfg;
    if (r->out.overflow)
        return;
    const int64_t dk = f->dk, dv = f->dv;
    /* a 16-bit state: one more rounding */
    const double us = unit_roundoff(c->dt[BS]), as = subnormal_roundoff(c->dt[BS]);
    for (int64_t i = 0; i < dk * dv; i++) {
        const ref_num n = r->s[i];
        const double tol =
            2 * (r->gamma * n.a + n.m + r->out.flush_o) * (1 + us) + us * fabs(n.v) + as + 1e-37;
        const float got = read_typed(c->dt[BS], c->ptr[BS], state_index(c, slot, h, i));
        if (!agrees(got, n.v, tol, c->dt[BS])) {
            char where[96];
            snprintf(where, sizeof where, "s[slot %lld,h=%lld][%lld]", (long long)slot,
                     (long long)h, (long long)i);
            fuzz_fail(c, "%s = %.9g, reference %.9g", where, got, n.v);
        }
    }
    if (!r->rc.normalize || !c->used[BZ])
        return;
    const float *z = c->ptr[BZ] + z_index(c, slot, h, 0);
    for (int64_t i = 0; i < dk; i++) {
        const double tol = 2 * (r->gamma * r->z[i].a + r->z[i].m + r->out.flush_z) + 1e-37;
        const double got = (double)z[i] + (c->zc ? (double)z[dk + i] : 0.0);
        if (!(fabs(got - r->z[i].v) <= tol)) {
            char where[96];
            snprintf(where, sizeof where, "z[slot %lld,h=%lld][%lld]", (long long)slot,
                     (long long)h, (long long)i);
            fuzz_fail(c, "%s = %.9g, reference %.9g", where, got, r->z[i].v);
        }
    }
}

/* Entry b's head h over tokens [t0, t0 + len) from slot `from`: its o rows,
 * and its final state in slot `to` (-1: not stored). */
static void compare_sequence(const call *c, int64_t b, int64_t h, int64_t t0, int64_t len,
                             int64_t from, int64_t to)
{
    head_ref r;
    head_ref_run(c, &r, b, h, t0, len, from);
    check_o(c, &r, b, h, t0);
    if (to >= 0)
        check_state(c, &r, to, h);
    head_ref_free(&r);
}

/* The hostile slots' form: every sequence's o rows (a padding one's as they
 * were), every slot a sequence writes holding the state after the token
 * that wrote it last (its snapshots in order, then its final state), and
 * every other slot as it was, bit for bit. */
static void compare_slots(const call *c)
{
    const linattn_config *f = &c->cfg;
    const linattn_state_pool *p = &c->pool;
    const int64_t N = c->serve == 5 ? c->nseq : f->batch, H = f->heads, K = p->snapshots;
    int64_t writer[8 + 2], after[8 + 2], from[8];
    for (int64_t s = 0; s < 8 + 2; s++)
        writer[s] = -1;
    for (int64_t n = 0; n < N; n++) {
        const int64_t rd = p->read_slots ? p->read_slots[n] : n;
        const int64_t wr = p->write_slots ? p->write_slots[n] : rd;
        int64_t b, t0;
        const int64_t len = seq_tokens(c, n, &b, &t0);
        from[n] = rd < 0 ? -1 : rd;
        if (rd < 0 && wr < 0) { /* padding */
            for (int64_t h = 0; h < H; h++)
                for (int64_t t = t0; t < t0 + len; t++)
                    for (int64_t j = 0; j < f->dv; j++)
                        if (!unchanged(c, BO,
                                       b * f->o.batch + h * f->o.head + t * f->o.token + j))
                            fuzz_fail(c, "%s %g changed (token %g)", "o row of padding sequence",
                                      (double)n, (double)t);
            continue;
        }
        for (int64_t j = 0; j < K; j++) {
            const int64_t s = p->snapshot_slots[n * K + j];
            if (s >= 0 && len - K + j >= 0)
                writer[s] = n, after[s] = len - K + j;
        }
        if (wr >= 0) /* an empty sequence: its read slot's state (or zeros) */
            writer[wr] = n, after[wr] = len - 1;
        for (int64_t h = 0; h < H; h++)
            compare_sequence(c, b, h, t0, len, from[n], -1);
    }
    for (int64_t s = 0; s < p->slots; s++)
        for (int64_t h = 0; h < H; h++) {
            if (writer[s] >= 0) {
                head_ref r;
                int64_t b, t0;
                seq_tokens(c, writer[s], &b, &t0);
                head_ref_run(c, &r, b, h, t0, after[s] + 1, from[writer[s]]);
                check_state(c, &r, s, h);
                head_ref_free(&r);
                continue;
            }
            for (int64_t i = 0; i < f->dk * f->dv; i++)
                if (!unchanged(c, BS, state_index(c, s, h, i)))
                    fuzz_fail(c, "%s %g changed (element %g)", "s of a slot no sequence writes:",
                              (double)s, (double)i);
            const int64_t zd = f->dk * (1 + c->zc);
            for (int64_t i = 0; c->used[BZ] && i < zd; i++)
                if (!unchanged(c, BZ, z_index(c, s, h, i)))
                    fuzz_fail(c, "%s %g changed (element %g)", "z of a slot no sequence writes:",
                              (double)s, (double)i);
        }
}

/* Each head's compensation row set to its z row times +-2^-9 at most (far
 * above a rounding error, so that a compensation dropped shows, far below
 * z, so that the sum keeps float's precision), in the data and in the
 * copy taken before the call. */
static void small_compensations(const call *c)
{
    const layout *l = &c->lay[BZ];
    const int64_t dk = c->cfg.dk;
    float *before = (float *)allocs[c->host[BZ]].before + c->offset[BZ];
    for (int64_t s = 0; s < l->n[0]; s++)
        for (int64_t h = 0; h < l->n[1]; h++)
            for (int64_t i = 0; i < dk; i++) {
                const int64_t at = s * l->st[0] + h * l->st[1] + i;
                const float z = c->ptr[BZ][at];
                const float e = (float)((int)((at * 37 + i) % 255) - 127) * 0x1p-16f;
                c->ptr[BZ][at + dk] = before[at + dk] = isfinite(z) ? z * e : 0.0f;
            }
}

/* Every value the call produced against the reference. */
static void compare_call(const call *c)
{
    const linattn_config *f = &c->cfg;
    if (c->serve == 4 || c->packed_pool) {
        compare_slots(c);
        return;
    }
    if (c->serve == 5) { /* packed: each sequence from a zero state */
        for (int64_t n = 0; n < c->nseq; n++)
            for (int64_t h = 0; h < f->heads && c->cu[n + 1] > c->cu[n]; h++)
                compare_sequence(c, 0, h, c->cu[n], c->cu[n + 1] - c->cu[n], -1, -1);
        return;
    }
    for (int64_t b = 0; b < f->batch; b++)
        for (int64_t h = 0; h < f->heads; h++)
            compare_sequence(c, b, h, 0, c->T, b, c->used[BS] ? b : -1);
}

/* ---- the serving form (linattn_run) ------------------------------------- */

static int32_t hostile_slot(reader *r, int64_t n, int64_t B)
{
    const unsigned b = u8(r);
    const int64_t opts[] = {n, -1, (n + 1) % (B > 0 ? B : 1), B, INT32_MAX, INT32_MIN, 0,
                            B - 1 - n, -7, n};
    return (int32_t)opts[b % 10];
}

/* A pool of `slots` states of the call's shape, K-first or V-first. */
static linattn_state_pool pool_of(const call *c, int64_t slots, int vfirst)
{
    const int64_t H = c->cfg.heads, dk = c->cfg.dk, dv = c->cfg.dv;
    return (linattn_state_pool){.slots = slots, .slot = wmul(wmul(H, dk), dv),
                                .head = wmul(dk, dv), .row = vfirst ? 1 : dv,
                                .col = vfirst ? dk : 1, .z_slot = wmul(H, dk), .z_head = dk};
}

/* Slot maps of N sequences (forms 4 and 5): each one's read and write slot,
 * then its K snapshot slots, as hostile_slot() picks them; the caller says
 * which maps the call gets and K. */
static void decode_slot_maps(reader *r, call *c, int64_t N, int reads, int writes, int64_t K)
{
    for (int64_t n = 0; n < N; n++) {
        c->rd[n] = hostile_slot(r, n, N);
        c->wr[n] = hostile_slot(r, n, N);
    }
    c->pool.read_slots = reads ? c->rd : NULL;
    c->pool.write_slots = writes ? c->wr : NULL;
    c->pool.snapshots = K;
    for (int64_t i = 0; i < N * (K > 0 ? K : 0); i++)
        c->snap[i] = hostile_slot(r, i % N, N);
    c->pool.snapshot_slots = K > 0 ? c->snap : NULL;
}

/* Decodes the serving form; before the contract model runs. */
static void decode_serve(reader *r, call *c)
{
    const unsigned m = u8(r);
    c->serve = m < 128 ? 0 : (int)(m % 6);
    const linattn_config *f = &c->cfg;
    const int64_t B = f->batch;
    /* slots for B in 1..8; any other B keeps the plain pool (form 2), whose
     * reference reads the state K-first: decided before the layout (a
     * V-first pool under form 2 was compared as K-first: a false finding) */
    if (c->serve == 4 && !(B >= 1 && B <= 8))
        c->serve = 2;
    c->vfirst = c->serve == 3 || (c->serve == 4 && (m & 64));
    c->pool = pool_of(c, B, c->vfirst);
    if (c->serve == 4 && B >= 1 && B <= 8) {
        const unsigned use = u8(r);
        const int64_t Ks[8] = {0, 0, 1, 2, 4, -1, 1, 3};
        decode_slot_maps(r, c, B, use & 1, use & 2, Ks[(use >> 2) % 8]);
        if (use & 32) /* a pool slot count that is not B */
            c->pool.slots = (use & 64) ? B - 1 : INT64_MAX;
        else if (use & 128) { /* two more slots, which only a slot map reaches */
            c->pool.slots = B + 2;
            c->lay[BS].n[0] = c->lay[BZ].n[0] = B + 2;
        }
    }
    if (c->serve == 5) {
        const unsigned b = u8(r);
        c->nseq = 1 + b % 4;
        const int64_t T = f->seq_len;
        for (int64_t n = 0; n <= c->nseq; n++)
            c->cu[n] = (int64_t)(((wide)T * n) / c->nseq);
        switch ((b >> 2) % 8) {
        case 5: c->cu[c->nseq] = wadd(T, 1); break;
        case 6: c->cu[0] = 1; break;
        case 7: if (c->nseq > 1) c->cu[1] = wadd(c->cu[2], 1); break;
        default: break;
        }
        if ((b >> 5) == 7)
            c->nseq = 0;
        /* no state: a packed call's contiguous state is [num_seqs][H][dk][dv] */
        c->used[BS] = c->used[BZ] = 0;
        c->place[BS] = c->place[BZ] = 2;
    }
}

/* Packed sequences with a pool (the byte after the plan's; form 5 only):
 * bit 0 a pool of num_seqs slots (bit 1: two more), bit 2 V-first, bits 3
 * and 4 the read and the write slot maps given, m >> 5 picks K; then each
 * sequence's read and write slot and its K snapshot slots, as in form 4. */
static void decode_packed_pool(reader *r, call *c)
{
    const unsigned m = u8(r);
    if (c->serve != 5 || !(m & 1) || c->nseq < 1)
        return;
    const linattn_config *f = &c->cfg;
    c->packed_pool = 1;
    c->vfirst = (m & 4) != 0;
    c->pool = pool_of(c, c->nseq + (m & 2 ? 2 : 0), c->vfirst);
    const int64_t Ks[8] = {0, 1, 2, 3, 4, -1, 1, 2};
    decode_slot_maps(r, c, c->nseq, m & 8, m & 16, Ks[m >> 5]);
    /* the pool in an allocation of its own (z too where the call needs it) */
    c->lay[BS].n[0] = c->lay[BZ].n[0] = c->pool.slots;
    const int z = c->kind < KIND_DELTA_FORWARD && f->normalize == 1;
    for (int b = BS; b <= (z ? BZ : BS); b++)
        c->used[b] = 1, c->place[b] = 0, c->host[b] = b, c->offset[b] = 0;
}

/* z_compensated (the byte after the packed pool's; every form): 1 in a
 * quarter of the inputs, a bad value in a few. Where it is in effect (the
 * config reaches it, additive, normalising) every z layout holds two rows
 * a head. */
static void decode_zc(reader *r, call *c)
{
    const unsigned b = u8(r);
    linattn_config *f = &c->cfg;
    f->z_compensated = b < 240 ? (b % 4 == 3) : (int)(b & 1 ? 2 : -1);
    c->zc = COVERS(f, z_compensated) && f->z_compensated == 1 &&
            c->kind < KIND_DELTA_FORWARD && f->normalize == 1;
    if (!c->zc)
        return;
    const int64_t H = f->heads, zd = wmul(2, f->dk);
    c->lay[BZ] = (layout){{c->lay[BZ].n[0], H, zd, 1}, {wmul(H, zd), zd, 1, 0}};
    c->pool.z_slot = wmul(H, zd), c->pool.z_head = zd;
}

/* A pool's strides as engines keep them (the byte b after z_compensated's;
 * absent or 0: the natural ones, pool_of's). b & 7, the state's: 0
 * natural; 1 slot stride padded; 2 head stride padded; 3 rows padded (a
 * K-first row stride past dv, a V-first column stride past dk: ld); 4 all
 * three; 5 heads outer, [H][slots] (slot stride a head's size, head
 * stride slots of them, with bit 7 padded); 6 heads interleaved along the
 * columns (head stride 1: neither row nor column stride is 1; bit 7 pads
 * the slot stride); 7 strides to refuse, or not, by shape: kind
 * (b >> 3 & 3) + 4 * bit 7 is 0 heads overlapping (head stride a head's
 * size - 1), 1 slots overlapping (likewise), 2 slot stride 0, 3 rows
 * overlapping (ld - 1), 4 heads outer with the last slot of a head on the
 * next head, 5 head stride 2 and slot stride 3 heads' sizes (interleaved:
 * refused by the library's conservative rule, colliding from 4 heads and
 * 3 slots), 6 head stride -1, 7 slot stride -1. The pad is 1, 2, 3 or 5
 * elements (b >> 3 & 3). b >> 5 & 3, z's: 0 natural, 1 padded (head and
 * slot strides), 2 heads outer (bit 7: padded), 3 heads overlapping
 * (z_head one short; bit 7: -1, refused only where z is in effect). */
static void decode_pool_strides(reader *r, call *c)
{
    c->pool_byte = r->i < r->n;
    const unsigned b = u8(r);
    if (!uses_pool(c))
        return;
    c->pool_strides = b;
    const linattn_config *f = &c->cfg;
    linattn_state_pool *p = &c->pool;
    const int64_t H = f->heads, dk = f->dk, dv = f->dv, S = c->lay[BS].n[0];
    const int64_t pads[4] = {1, 2, 3, 5}, pad = pads[b >> 3 & 3];
    const int v = (int)(b >> 7);
    /* ld: the stride of a K-first row or a V-first column; nl of them a head */
    const int64_t nat_ld = c->vfirst ? dk : dv, nl = c->vfirst ? dv : dk;
    int64_t ld = nat_ld, hs = wmul(nl, nat_ld), head = hs, slot = wmul(H, hs);
    switch (b & 7) {
    case 1: slot = wadd(slot, pad); break;
    case 2: head = wadd(hs, pad), slot = wmul(H, head); break;
    case 3: case 4:
        ld = wadd(nat_ld, pad), head = hs = wmul(nl, ld);
        if ((b & 7) == 4)
            head = wadd(hs, pad);
        slot = wadd(wmul(H, head), (b & 7) == 4 ? pad : 0);
        break;
    case 5: slot = hs, head = wadd(wmul(S, hs), v ? pad : 0); break;
    case 6: slot = wadd(slot, v ? pad : 0), head = 1, ld = wmul(nat_ld, H); break;
    case 7:
        switch ((b >> 3 & 3) | v << 2) {
        case 0: head = wadd(hs, -1), slot = wmul(H, hs); break;
        case 1: slot = wadd(slot, -1); break;
        case 2: slot = 0; break;
        case 3: ld = wadd(nat_ld, -1), head = hs = wmul(nl, ld), slot = wmul(H, hs); break;
        case 4: slot = hs, head = wmul(wadd(S, -1), hs); break;
        case 5: head = wmul(2, hs), slot = wmul(3, hs); break;
        case 6: head = -1; break;
        default: slot = -1;
        }
        break;
    default: break;
    }
    /* heads interleaved: element (i, j) of head h at (i * dv + j) * H + h,
     * V-first (j * dk + i) * H + h */
    const int64_t unit = (b & 7) == 6 ? H : 1;
    p->slot = slot, p->head = head;
    p->row = c->vfirst ? unit : ld, p->col = c->vfirst ? ld : unit;
    const int64_t zd = wmul(dk, 1 + c->zc);
    int64_t z_head = zd, z_slot = wmul(H, zd);
    switch (b >> 5 & 3) {
    case 1: z_head = wadd(zd, pad), z_slot = wadd(wmul(H, z_head), pad); break;
    case 2: z_slot = zd, z_head = wadd(wmul(S, zd), v ? pad : 0); break;
    case 3: z_head = v ? -1 : wadd(zd, -1); break;
    default: break;
    }
    p->z_slot = z_slot, p->z_head = z_head;
    c->lay[BS] = (layout){{S, H, dk, dv}, {p->slot, p->head, p->row, p->col}};
    c->lay[BZ] = (layout){{S, H, zd, 1}, {z_slot, z_head, 1, 0}};
}

/* The pool's strides (check_pool.c): every one of them negative is
 * refused (z's where z is in effect), whatever the extent of its
 * dimension. Aliasing is found on the marks, in run(). */
static void pool_stride_rules(call *c)
{
    if (!uses_pool(c))
        return;
    const linattn_state_pool *p = &c->pool;
    const int z = c->kind < KIND_DELTA_FORWARD && c->cfg.normalize == 1;
    if (p->slot < 0 || p->head < 0 || p->row < 0 || p->col < 0 ||
        (z && (p->z_slot < 0 || p->z_head < 0)))
        pool_refusal(c, "a negative pool stride", LINATTN_E_STRIDE);
}

/* What linattn_run must refuse beyond the 0.2 rules. */
static void serve_rules(call *c)
{
    if (!c->serve)
        return;
    const linattn_config *f = &c->cfg;
    const int step = c->kind == KIND_STEP || c->kind == KIND_DELTA_STEP;
    const int delta = c->kind >= KIND_DELTA_FORWARD;
    if (f->struct_size != sizeof *f && !c->old03)
        fail_reason(c, "linattn_run needs the current config (or a 0.3 one)");
    if (c->serve == 5) {
        if (step)
            fail_reason(c, "cu_seqlens on a step");
        if (f->batch != 1)
            fail_reason(c, "cu_seqlens with batch != 1");
        if (c->nseq < 1)
            fail_reason(c, "num_seqs < 1");
        else if (c->cu[0] != 0 || c->cu[c->nseq] != f->seq_len)
            fail_reason(c, "cu_seqlens ends");
        for (int64_t n = 0; n < c->nseq; n++)
            if (c->cu[n + 1] < c->cu[n])
                fail_reason(c, "cu_seqlens falls");
        if (!c->packed_pool)
            return;
    } else if (c->serve < 2)
        return;
    if (!c->used[BS] || c->place[BS] >= 2)
        fail_reason(c, "a pool without s");
    if (!delta && f->normalize == 1 && (!c->used[BZ] || c->place[BZ] >= 2))
        fail_reason(c, "a normalising pool without z");
    const linattn_state_pool *p = &c->pool;
    if (p->snapshots < 0)
        fail_reason(c, "snapshots < 0");
    if (p->snapshots > 0 && !step && f->causal == 0)
        fail_reason(c, "snapshots in a non-causal call");
    if (p->slots == INT64_MAX)
        fail_reason(c, "a pool larger than memory");
    if (p->slots < 1) /* the B - 1 slots decoded for B = 1 */
        fail_reason(c, "a pool without a slot");
    const int64_t B = c->serve == 5 ? c->nseq : f->batch;
    const int64_t K = p->snapshots > 0 ? p->snapshots : 0;
    if ((c->serve != 4 && !c->packed_pool) || p->slots < 1 || B < 1 || B > 8)
        return;
    int64_t rd[8], wr[8], len[8]; /* len: tokens of each sequence */
    for (int64_t n = 0; n < B; n++) {
        int64_t b, t0;
        len[n] = step ? 1 : seq_tokens(c, n, &b, &t0);
        rd[n] = p->read_slots ? p->read_slots[n] : n;
        wr[n] = p->write_slots ? p->write_slots[n] : rd[n];
        if (rd[n] >= p->slots || wr[n] >= p->slots)
            fail_reason(c, "slot past the pool");
        for (int64_t j = 0; j < K; j++)
            if (c->snap[n * K + j] >= p->slots)
                fail_reason(c, "snapshot slot past the pool");
        rd[n] = rd[n] < 0 ? -1 : rd[n], wr[n] = wr[n] < 0 ? -1 : wr[n];
    }
    /* writes of each live sequence: its write slot and its snapshots within the sequence */
    for (int64_t n = 0; n < B; n++) {
        if (rd[n] < 0 && wr[n] < 0)
            continue;
        for (int64_t x = -1; x < K; x++) {
            const int64_t w = x < 0 ? wr[n] : (len[n] - K + x >= 0 ? c->snap[n * K + x] : -1);
            if (w < 0)
                continue;
            for (int64_t m = 0; m < B; m++) {
                if (m == n || (rd[m] < 0 && wr[m] < 0))
                    continue;
                if (rd[m] == w || wr[m] == w)
                    fail_reason(c, "slot written by one sequence and used by another");
                for (int64_t y = 0; y < K; y++)
                    if (len[m] - K + y >= 0 && c->snap[m * K + y] == w)
                        fail_reason(c, "slot written by two sequences");
            }
        }
    }
}

/* ---- 0.4.0: element types and the input stage's activations ------------- */

/* A_log and dt_bias of the current input: malloc'd to their exact size, so
 * AddressSanitizer sees a read past them; freed by the next run(). */
static float *ext_arrays[2];

/* After the serving form: one byte m (0: nothing, all float32); else the
 * six types (q, k, v, beta, o, s; pick_enum: F32, BF16, F16 or out of
 * range), gate_act, the bounded sigmoid's lower bound, beta_act, an A_log
 * mode and a dt_bias mode (below); m % 4 == 3 makes the config a 0.3
 * caller's (struct_size 260, or its padded sizeof 264 with m & 4): the
 * fields above are then past struct_size and must be ignored. */
static void decode_ext(reader *r, call *c)
{
    linattn_config *f = &c->cfg;
    const unsigned m = u8(r);
    if (m != 0) {
        linattn_dtype *t[6] = {&f->dtype.q, &f->dtype.k,    &f->dtype.v,
                               &f->dtype.beta, &f->dtype.o, &f->dtype.s};
        for (int i = 0; i < 6; i++)
            *t[i] = (linattn_dtype)pick_enum(r, 3);
        f->gate_act = (linattn_gate_act)pick_enum(r, 3);
        static const float lbs[] = {-5.0f, -1.0f, -0.0f, 0.0f, 1.0f, NAN, -INFINITY, -FLT_MAX,
                                    -1e-30f, -100.0f};
        f->gate_lower_bound = pick_float(r, lbs, 10);
        f->beta_act = (linattn_beta_act)pick_enum(r, 3);
        c->alog_mode = u8(r) % 8;
        c->bias_mode = u8(r) % 8;
        if (m % 4 == 3 && f->struct_size == sizeof *f) {
            c->old03 = 1;
            f->struct_size = m & 4 ? (offsetof(linattn_config, dtype) + 7) / 8 * 8
                                   : offsetof(linattn_config, dtype);
        }
    }
    /* What the library must use. */
    const int covered = f->struct_size == sizeof *f;
    const linattn_dtype given[NBUF] = {f->dtype.q, f->dtype.k, f->dtype.v, LINATTN_F32,
                                       f->dtype.beta, f->dtype.o, f->dtype.s, LINATTN_F32};
    for (int b = 0; b < NBUF; b++) /* an out-of-range type is refused: sized as float32 */
        c->dt[b] = covered && (unsigned)given[b] <= LINATTN_F16 ? given[b] : LINATTN_F32;
    const int delta = c->kind >= KIND_DELTA_FORWARD;
    if (!delta)
        c->dt[BBETA] = LINATTN_F32; /* no beta: its type is not used */
    c->gate_act = covered && (unsigned)f->gate_act <= LINATTN_GATE_ACT_BOUNDED_SIGMOID
                      ? (int)f->gate_act
                      : 0;
    c->beta_act = covered && (unsigned)f->beta_act <= LINATTN_BETA_ACT_SIGMOID2 ? (int)f->beta_act
                                                                                : 0;
    c->lower_bound = f->gate_lower_bound;
    if (f->gate != LINATTN_GATE_TOKEN && f->gate != LINATTN_GATE_CHANNEL)
        c->gate_act = 0; /* refused (gate_act needs them), or not asked */
    if (!delta)
        c->beta_act = 0;
    if (m == 0)
        return;
    /* A_log [H] and dt_bias [H] or [H][dk], when they fit */
    const int64_t H = f->heads, per = f->gate == LINATTN_GATE_CHANNEL ? f->dk : 1;
    if (H < 1 || H > 4096 || per < 1 || per > BUDGET || H * per > BUDGET)
        return; /* NULL: a call that would read them is refused */
    rng_state = 0x5eed0000u + m;
    if (c->alog_mode != 3) {
        c->A_log = ext_arrays[0] = malloc(sizeof(float) * (size_t)H);
        for (int64_t h = 0; h < H; h++)
            c->A_log[h] = uniform(-3, 1);
        static const float bad[] = {0, 0, 0, 0, 88.5f, NAN, 88.0f, -INFINITY};
        if (c->alog_mode >= 4)
            c->A_log[H - 1] = bad[c->alog_mode];
    }
    if (c->bias_mode != 0) {
        c->dt_bias = ext_arrays[1] = malloc(sizeof(float) * (size_t)(H * per));
        for (int64_t i = 0; i < H * per; i++)
            c->dt_bias[i] = c->bias_mode == 5   ? 1e30f
                            : c->bias_mode == 6 ? -FLT_MAX
                                                : uniform(-2, 2);
        if (c->bias_mode == 3 || c->bias_mode == 4)
            c->dt_bias[(H * per) / 2] = c->bias_mode == 3 ? NAN : INFINITY;
    }
}

/* What the 0.4.0 fields make the library refuse. */
static void ext_rules(call *c)
{
    const linattn_config *f = &c->cfg;
    const int delta = c->kind >= KIND_DELTA_FORWARD;
    if (f->struct_size != sizeof *f)
        return; /* not covered: the defaults */
    const linattn_dtype t[6] = {f->dtype.q, f->dtype.k, f->dtype.v,
                                f->dtype.beta, f->dtype.o, f->dtype.s};
    int any = f->gate_act != 0 || f->beta_act != 0;
    for (int i = 0; i < 6; i++) {
        if ((unsigned)t[i] > LINATTN_F16)
            fail_reason(c, "dtype enum");
        any |= t[i] != LINATTN_F32;
    }
    if (any && !c->serve)
        fail_reason(c, "a float32 call with 0.4.0 fields");
    if (f->dtype.s == LINATTN_F16)
        fail_reason(c, "a float16 state");
    if ((unsigned)f->gate_act > LINATTN_GATE_ACT_BOUNDED_SIGMOID ||
        (unsigned)f->beta_act > LINATTN_BETA_ACT_SIGMOID2)
        fail_reason(c, "activation enum");
    if (f->gate_act != 0 && f->gate != LINATTN_GATE_TOKEN && f->gate != LINATTN_GATE_CHANNEL)
        fail_reason(c, "gate_act without a token or channel gate");
    if (f->gate_act == LINATTN_GATE_ACT_BOUNDED_SIGMOID &&
        !(f->gate_lower_bound < 0.0f && f->gate_lower_bound >= -FLT_MAX))
        fail_reason(c, "lower bound");
    if (f->beta_act != 0 && !delta)
        fail_reason(c, "beta_act on the additive family");
    if (c->gate_act) {
        const int64_t per = f->gate == LINATTN_GATE_CHANNEL ? f->dk : 1;
        if (!c->A_log)
            fail_reason(c, "A_log NULL");
        for (int64_t h = 0; c->A_log && h < f->heads; h++)
            if (!(c->A_log[h] >= -FLT_MAX && c->A_log[h] <= 88.0f))
                fail_reason(c, "A_log value");
        for (int64_t i = 0; c->dt_bias && i < f->heads * per; i++)
            if (!isfinite(c->dt_bias[i]))
                fail_reason(c, "dt_bias value");
    }
}

/* 1 when a layout fails the library's conservative self-overlap rule
 * (ranges.h): its dimensions of more than one index, sorted by stride,
 * must each step past all the smaller ones span. */
static int interleaves(const layout *l)
{
    int64_t st[4], n[4];
    int m = 0;
    for (int i = 0; i < 4; i++)
        if (l->n[i] > 1) {
            int j = m++;
            for (; j > 0 && st[j - 1] > l->st[i]; j--)
                st[j] = st[j - 1], n[j] = n[j - 1];
            st[j] = l->st[i], n[j] = l->n[i];
        }
    wide inner = 1;
    for (int i = 0; i < m; i++) {
        if (st[i] < inner)
            return 1;
        inner += smul(n[i] - 1, st[i]);
    }
    return 0;
}

/* The units of a pool's s and z that no buffer uses, from its first
 * element to its last (to the end of its allocation where it has its
 * own: a bfloat16 pool's last half float): M_PAD, and PAD_UNIT in the
 * data and in the copy from before the call, so that a kernel reading
 * padding as state shows in the results and one writing it shows too. */
static void mark_padding(const call *c)
{
    for (int b = BS; b <= BZ; b++) {
        if (!c->used[b] || c->place[b] >= 2)
            continue;
        alloc *a = &allocs[c->host[b]];
        const int64_t halves = c->dt[b] == LINATTN_F32 ? 2 : 1;
        const int64_t from = (c->ptr[b] - a->data) * 2;
        int64_t to = from + extent_of(&c->lay[b], elem_bytes(c->dt[b])).ext * halves;
        if (c->host[b] == b || to > a->n * 2)
            to = a->n * 2;
        for (int64_t i = from; i < to; i++)
            if (a->marks[i] == 0) {
                a->marks[i] = M_PAD;
                ((uint16_t *)a->data)[i] = ((uint16_t *)a->before)[i] = PAD_UNIT;
            }
    }
}

static int run(const uint8_t *data, size_t size)
{
    reader r = {data, size, 0};
    call c;
    /* the previous input's A_log and dt_bias (kept for any way out of run) */
    free(ext_arrays[0]), free(ext_arrays[1]);
    ext_arrays[0] = ext_arrays[1] = NULL;
    decode(&r, &c);
    const uint64_t seed = u64(&r);
    unsigned regime[NBUF];
    for (int i = 0; i < NBUF; i++)
        c.regime[i] = regime[i] = u8(&r);
    decode_serve(&r, &c);
    decode_ext(&r, &c);
    c.plan = c.serve ? u8(&r) : 0;
    decode_packed_pool(&r, &c);
    decode_zc(&r, &c);
    decode_pool_strides(&r, &c);

    const int delta = c.kind >= KIND_DELTA_FORWARD;
    if (delta && !(linattn_delta_forward && linattn_delta_step))
        return 0; /* not in this library yet */
    const linattn_config *f = &c.cfg;

    mark_layouts_bad(&c);
    config_rules(&c);
    serve_rules(&c);
    pool_stride_rules(&c);
    ext_rules(&c);
    if ((!have_groups && (c.qk_heads != f->heads || c.head_map != LINATTN_HEADS_GROUPED)) ||
        (!have_l2norm && c.qk_l2norm != 0))
        return 0;
    if (!have_v01 && f->struct_size != sizeof *f)
        c.ambiguous = 1;
    /* A delta call from a config without beta strides: no 0.1 caller makes
     * one; refusing it or reading beta with any default is the library's call. */
    if (delta && !COVERS(f, beta))
        c.ambiguous = 1;
    if (!have_ignores) {
        const linattn_strides *all[] = {&f->q, &f->k, &f->v, &f->o, &f->g, &f->beta};
        for (int i = 0; i < 6; i++)
            if (all[i]->batch < 0 || all[i]->head < 0 || all[i]->token < 0)
                c.ambiguous = 1;
        if (f->seq_len < 1)
            c.ambiguous = 1;
    }

    /* Sizes: real mode when everything fits, small mode for bad layouts. */
    int64_t need[NBUF] = {0};
    int64_t total = 0;
    int fits = 1;
    wide work = 0;
    /* a layout of many elements over little memory (strides 0) would take
     * the marking loops below minutes, bad layout or not */
    for (int b = 0; b < NBUF; b++)
        if (c.used[b] && count_of(&c.lay[b]) > WORK)
            fits = 0;
    if (!c.layout_bad) {
        work = smul(smul(f->batch, f->heads), smul(c.T, smul(f->dk, f->dv) + f->dk + f->dv));
        if (work > WORK)
            fits = 0;
        /* the chunked forms' intra-chunk work grows with the chunk (a chunk
         * as long as T is quadratic in T): bound it too */
        const int64_t ce = f->chunk > 0 ? (f->chunk < c.T ? f->chunk : c.T) : 64;
        if (smul(smul(f->batch, f->heads), smul(c.T, smul(ce, f->dk + f->dv + 1))) > WORK)
            fits = 0;
    }
    for (int b = 0; b < NBUF && fits; b++) {
        if (!c.used[b] || c.place[b] >= 2)
            continue;
        const extent e = extent_of(&c.lay[b], elem_bytes(c.dt[b]));
        if (e.bad || e.ext > BUDGET) {
            fits = 0;
            break;
        }
        const int h = c.place[b] == 1 ? c.host[b] : b;
        if (c.place[b] == 0)
            c.host[b] = b;
        const int64_t floats = c.dt[b] == LINATTN_F32 ? e.ext : (e.ext + 1) / 2;
        const int64_t end = (c.place[b] == 1 ? c.offset[b] : 0) + floats;
        if (end > need[h])
            need[h] = end;
    }
    if (fits)
        for (int b = 0; b < NBUF; b++)
            total += need[b];
    if (!fits || total > BUDGET) {
        if (!c.layout_bad)
            return 0; /* valid but too big to back with memory here */
        fits = 0;
    }

    /* Allocations: each own buffer, grown to cover its aliases. */
    for (int b = 0; b < NBUF; b++) {
        alloc *a = &allocs[b];
        memset(a, 0, sizeof *a);
        const int own = c.place[b] == 0 || (c.place[b] == 1 && !fits);
        if (!own && !(fits && need[b] > 0))
            continue;
        if (!fits) {
            c.host[b] = b;
            c.offset[b] = 0;
            const extent e = extent_of(&c.lay[b], elem_bytes(c.dt[b]));
            a->n = !e.bad && e.ext <= 4096 ? (c.dt[b] == LINATTN_F32 ? e.ext : (e.ext + 1) / 2)
                                           : SMALL;
            if (a->n < 1)
                a->n = 1;
        } else {
            a->n = need[b] > 0 ? need[b] : 1;
        }
        a->pad = c.place[b] == 0 ? c.offset[b] : 0;
        /* raw gate projections and beta logits: any value */
        a->pool = b == BG && !c.gate_act      ? POOL_GATE
                  : b == BBETA && !c.beta_act ? POOL_BETA
                                              : POOL_GENERAL;
        a->t = c.dt[b];
        a->regime = regime[b];
        a->seed = seed + (uint64_t)b * 0x1000193u;
        alloc_make(a);
    }
    for (int b = 0; b < NBUF; b++) {
        if (c.place[b] == 2)
            c.ptr[b] = NULL;
        else if (c.place[b] == 3)
            c.ptr[b] = (float *)(uintptr_t)64; /* must never be touched */
        else if (!fits || c.place[b] == 0)
            c.ptr[b] = allocs[b].block ? allocs[b].data : NULL;
        else if (!allocs[c.host[b]].block) /* ignored, inside a host that has no memory */
            c.ptr[b] = NULL;
        else
            c.ptr[b] = allocs[c.host[b]].data + c.offset[b];
        if (!fits && c.place[b] < 2)
            c.host[b] = b, c.offset[b] = 0;
        if (c.place[b] == 0)
            c.host[b] = b, c.offset[b] = 0;
        /* A buffer the call ignores and that has no memory: NULL. */
        if (c.place[b] < 2 && c.ptr[b] == NULL)
            c.place[b] = 2;
    }
    /* z_compensated's second rows: small beside the first, as the library
     * leaves them, not any float (a compensation as large as z would
     * carry its own rounding into the sum, beyond what the reference
     * bounds) */
    if (fits && c.zc && c.used[BZ] && c.place[BZ] < 2 && c.ptr[BZ])
        small_compensations(&c);
    /* Unused s/z: pass NULL (the state-pair rules are about these). */
    for (int b = BS; b <= BZ; b++)
        if (!c.used[b] && c.place[b] != 3)
            c.ptr[b] = NULL;

    int finite_inputs = 1;
    if (fits) {
        /* Marks: who uses each float, and the overlap rules. */
        for (int b = 0; b < NBUF; b++) {
            if (!c.used[b] || c.place[b] >= 2)
                continue;
            mark_ctx m = {&allocs[c.host[b]], b == BO ? M_O : b == BS ? M_S : b == BZ ? M_Z : M_IN,
                          (c.ptr[b] - allocs[c.host[b]].data) * 2, c.dt[b] == LINATTN_F32 ? 2 : 1};
            each(&c.lay[b], mark_one, &m);
        }
        if (uses_pool(&c))
            mark_padding(&c);
        uint8_t twice = 0; /* M_SS, M_ZZ: one reason each */
        for (int b = 0; b < NBUF; b++) {
            const alloc *a = &allocs[b];
            if (!a->block)
                continue;
            uint8_t seen = 0;
            for (int64_t i = 0; i < a->n * 2; i++) {
                const uint8_t x = a->marks[i];
                if ((x & M_OO) || ((x & M_O) && (x & (M_IN | M_S | M_Z))) ||
                    ((x & M_S) && (x & (M_IN | M_Z))) || ((x & M_Z) && (x & M_IN)))
                    fail_reason(&c, "overlap");
                seen |= x;
                twice |= x & (M_SS | M_ZZ);
            }
            /* An output sharing an allocation: a rule on address ranges
             * may refuse it even where no element collides. */
            const int kinds = !!(seen & M_IN) + !!(seen & M_O) + !!(seen & M_S) + !!(seen & M_Z);
            if (kinds > 1 && (seen & (M_O | M_S | M_Z)))
                c.ambiguous = 1;
        }

        /* A pool whose strides let two (slot, head, row, column) reach one
         * element is refused, s's first. */
        if (twice & M_SS)
            pool_refusal(&c, "the pool's strides alias two elements of s", LINATTN_E_OVERLAP);
        if (twice & M_ZZ)
            pool_refusal(&c, "the pool's z strides alias two elements", LINATTN_E_OVERLAP);
        /* o's self-overlap, and a pool's: the library may use a conservative
         * rule (the pool's is not documented as such: docs/api.md says two
         * elements reaching one) */
        if (interleaves(&c.lay[BO]))
            c.ambiguous = 1;
        for (int b = BS; b <= BZ && uses_pool(&c); b++)
            if (c.used[b] && !(twice & (b == BS ? M_SS : M_ZZ)) && interleaves(&c.lay[b]))
                c.ambiguous = 1;
        /* Gate and beta values; finiteness of the inputs. */
        for (int b = 0; b < NBUF; b++) {
            if (!c.used[b] || c.place[b] >= 2)
                continue;
            value_ctx v = {c.ptr[b], c.dt[b], 0, 0, b == BBETA,
                           (b == BG && c.gate_act) || (b == BBETA && c.beta_act)};
            each(&c.lay[b], b == BG || b == BBETA ? check_value : finite_input, &v);
            if ((b == BG || (b == BBETA && COVERS(f, beta))) && v.bad)
                fail_reason(&c, b == BG ? "gate value" : "beta value");
            if (v.nonfinite)
                finite_inputs = 0;
        }
    }

    /* The config as the caller's memory holds it: poisoned past struct_size. */
    memset(cfg_block, 0, sizeof cfg_block);
    memcpy(cfg_block, f, sizeof *f);
    size_t covered = sizeof cfg_block;
    if (f->struct_size < sizeof *f) {
        covered = f->struct_size > V01_SIZE ? f->struct_size : V01_SIZE;
        covered = (covered + 7) / 8 * 8;
        POISON(cfg_block + covered, sizeof cfg_block - covered);
    }
    const linattn_config *cfgp = c.cfg_null ? NULL : (const linattn_config *)cfg_block;

    pads_poison(1);
    const linattn_status st = invoke(&c, cfgp);

    UNPOISON(cfg_block, sizeof cfg_block);
    if (memcmp(cfg_block, f, sizeof *f) != 0)
        fuzz_fail(&c, "%s", "the config changed", 0, 0);
    for (int b = 0; b < NBUF; b++) {
        alloc *a = &allocs[b];
        if (!a->block)
            continue;
        alloc_unpoison(a);
        const size_t front = GUARD + (size_t)a->pad * 4;
        for (size_t i = 0; i < alloc_bytes(a); i++)
            if ((i < front || i >= front + (size_t)a->n * 4) && a->block[i] != GUARD_BYTE)
                fuzz_fail(&c, "guard bytes around %s overwritten (byte %g)", buf_names[b],
                          (double)i, 0);
    }
    const char *msg = last_error_text();

    /* FUZZ_VERBOSE=1: what each input became (for checking new seeds) */
    if (getenv("FUZZ_VERBOSE"))
        fprintf(stderr,
                "fuzz_call: %s serve %d%s plan %u dtypes %d%d%d%d%d%d act %d/%d: status %d%s%s%s: "
                "%s\n",
                kind_names[c.kind], c.serve, c.packed_pool ? "+pool" : "", c.plan, c.dt[BQ],
                c.dt[BK], c.dt[BV], c.dt[BBETA], c.dt[BO], c.dt[BS], c.gate_act, c.beta_act,
                (int)st, c.must_fail ? " (must fail: " : "", c.must_fail ? c.why : "",
                c.must_fail ? ")" : "", msg ? msg : "");
    if (getenv("FUZZ_VERBOSE") && uses_pool(&c))
        fprintf(stderr,
                "fuzz_call:   pool byte %u%s: %lld slots, strides slot %lld head %lld row %lld "
                "col %lld, z_slot %lld z_head %lld; %d reasons%s\n",
                c.pool_strides, c.pool_byte ? "" : " (absent)", (long long)c.pool.slots,
                (long long)c.pool.slot, (long long)c.pool.head, (long long)c.pool.row,
                (long long)c.pool.col, (long long)c.pool.z_slot, (long long)c.pool.z_head,
                c.reasons, c.ambiguous ? ", ambiguous" : "");
    if (c.must_fail && st == LINATTN_OK)
        fuzz_fail(&c, "returned OK, expected a failure: %s", c.why, 0, 0);
    /* refused for the pool's strides alone: their status, naming the pool */
    if (c.must_fail && c.reasons == 1 && c.pool_want && !c.ambiguous &&
        (st != c.pool_want || (msg && !strstr(msg, "pool"))))
        fuzz_fail(&c, "%s: status %g, or a message not naming the pool", c.why, (double)st, 0);
    if (!c.must_fail && !c.ambiguous && fits && st != LINATTN_OK)
        fuzz_fail(&c, "a valid call failed with status %s (%g)", linattn_strerror(st),
                  (double)st, 0);
    if (linattn_last_error) {
        if (msg == NULL)
            fuzz_fail(&c, "%s", "linattn_last_error() returned NULL", 0, 0);
        if ((st == LINATTN_OK) != (strcmp(msg, "success") == 0))
            fuzz_fail(&c, "linattn_last_error() says \"%s\" after status %g", msg, (double)st, 0);
    }

    if (st != LINATTN_OK) {
        for (int b = 0; b < NBUF; b++) {
            const alloc *a = &allocs[b];
            if (a->block && memcmp(a->before, a->data, (size_t)a->n * 4) != 0)
                fuzz_fail(&c, "memory of %s changed after a failure (status %g)", buf_names[b],
                          (double)st, 0);
        }
    } else if (fits) {
        /* Nothing but the outputs changed. */
        for (int b = 0; b < NBUF; b++) {
            const alloc *a = &allocs[b];
            if (!a->block)
                continue;
            const uint16_t *was = (const uint16_t *)a->before, *now = (const uint16_t *)a->data;
            for (int64_t i = 0; i < a->n * 2; i++)
                if (!(a->marks[i] & (M_O | M_S | M_Z)) && was[i] != now[i])
                    fuzz_fail(&c, a->marks[i] & M_PAD ? "bytes %s+%g changed: padding between "
                                                        "the pool's states"
                                                      : "bytes %s+%g changed but are no output",
                              buf_names[b], (double)(2 * i), 0);
        }
        const wide ref_work =
            smul(smul(f->batch, f->heads), smul(c.T, smul(f->dk, f->dv) + f->dk + f->dv));
        if (finite_inputs && ref_work <= REF_WORK && !c.ambiguous)
            compare_call(&c);
        /* The same bits with one thread, and from linattn_run for a plan's
         * units in any ranges. */
        if ((f->num_threads != 1 || c.plan) && ref_work <= WORK / 4) {
            uint8_t *after[NBUF] = {0};
            for (int b = 0; b < NBUF; b++) {
                alloc *a = &allocs[b];
                if (!a->block)
                    continue;
                after[b] = malloc((size_t)a->n * 4 + 1);
                memcpy(after[b], a->data, (size_t)a->n * 4);
                memcpy(a->data, a->before, (size_t)a->n * 4);
            }
            linattn_config one = *f;
            one.num_threads = 1;
            memcpy(cfg_block, &one, sizeof one);
            call by_run = c;
            by_run.plan = 0;
            pads_poison(1);
            const linattn_status st1 = invoke(&by_run, (const linattn_config *)cfg_block);
            pads_poison(0);
            if (st1 != LINATTN_OK)
                fuzz_fail(&c, "num_threads = 1 gives status %s", linattn_strerror(st1), 0, 0);
            for (int b = 0; b < NBUF; b++) {
                const alloc *a = &allocs[b];
                if (after[b] && !same_but_nans(a->t, after[b], a->data, a->n))
                    fuzz_fail(&c, c.plan ? "%s differs between a plan's units and linattn_run"
                                         : "%s differs between num_threads %g and 1",
                              buf_names[b], (double)f->num_threads, 0);
                free(after[b]);
            }
        }
    }
    for (int b = 0; b < NBUF; b++)
        alloc_free(&allocs[b]);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    /* A forced table that cannot run here would make every call E_ISA:
     * skipped (77, as meson's tests count it), by name. */
    linattn_config cfg;
    linattn_config_init(&cfg, 1, 1, 1, 1, 1);
    float x[4] = {0};
    if (linattn_forward(&cfg, x, x, x, NULL, x + 1, NULL, NULL) == LINATTN_E_ISA) {
        const char *env = getenv("LINATTN_ISA");
        fprintf(stderr, "fuzz_call: LINATTN_ISA=%s cannot run here: skipped\n", env ? env : "");
        exit(77);
    }
    probe_features();
    fprintf(stderr, "fuzz_call: table %s%s%s%s%s%s%s\n", linattn_isa_name(linattn_get_isa()),
            linattn_delta_forward ? "" : "; NOT IN THIS LIBRARY, skipped: delta rule",
            linattn_last_error ? "" : "; no linattn_last_error (not checked)",
            have_groups ? "" : "; grouped heads ignored by the library: skipped",
            have_l2norm ? "" : "; qk_l2norm ignored by the library: skipped",
            have_ignores ? "" : "; step/ignored strides still checked: not asserted",
            have_v01 ? "" : "; 0.1 struct_size refused: not asserted");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return run(data, size); }
