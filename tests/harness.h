/* Test problems: random inputs in guarded buffers, a call, and a comparison
 * with the double oracle. Every buffer ends at a PROT_NONE page, so reading
 * or writing one element past an array faults. */
#ifndef LA_TEST_HARNESS_H
#define LA_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "linattn.h"

/* ck_assert_msg for checks made per element in a loop: Check logs every
 * passing assertion (a write(2) each), and such loops made 12 million of
 * them in test_dtypes, most of its run time. This one reaches Check only
 * when expr is false, with Check's message, file and line. expr is
 * evaluated again then, so it must have no side effects. */
#define expect_msg(expr, ...)                                                                     \
    do {                                                                                          \
        if (!(expr))                                                                              \
            ck_assert_msg(expr, __VA_ARGS__);                                                     \
    } while (0)

typedef enum {
    LAYOUT_BHTD,       /* [B][H][T][D] everywhere (config_init's) */
    LAYOUT_BTHD,       /* [B][T][H][D] for q, k, v, o, and g of TOKEN/CHANNEL gates */
    LAYOUT_PACKED_QKV, /* one buffer, rows [q heads | k heads | v heads] per token */
    LAYOUT_MQA         /* k, v [B][T][D] shared by every head (head stride 0) */
} layout_kind;

typedef struct {
    int64_t B, H, T, dk, dv;
    linattn_phi phi;
    linattn_gate gate;
    linattn_algo algo;
    int causal, normalize;
    int l2norm;     /* qk_l2norm */
    int with_state; /* random initial state (else s, z NULL: zero, not returned) */
    /* cfg.z_compensated: z is [B][H][2][dk], the sum and its compensation
     * (at the start random, up to a quarter of z); the oracle starts from
     * their sum and the final z + zc is compared with its z */
    int z_compensated;
    int unaligned;  /* every pointer 4 bytes past a 64-byte boundary */
    int threads;
    int64_t chunk;
    layout_kind layout;
    float g_lo, g_hi;   /* gate values uniform in [g_lo, g_hi] (default [-1, 0]) */
    float qk_lo, qk_hi; /* q, k uniform in [qk_lo, qk_hi] (default [-1, 1]) */
} spec;

typedef struct {
    void *base;
    size_t len;
} mapping;

typedef struct {
    spec sp;
    linattn_config cfg;
    float *q, *k, *v, *g, *o, *s, *z;
    float *s_init, *z_init; /* copies of the initial state */
    mapping maps[16];
    int nmaps;
} problem;

/* A spec with the defaults above for that shape. */
spec spec_default(int64_t B, int64_t H, int64_t T, int64_t dk, int64_t dv);

uint64_t test_seed(void); /* from LINATTN_TEST_SEED, else time; printed once */
float rand_uniform(float lo, float hi);

float *guarded_floats(problem *p, size_t n, int unaligned);
/* len bytes (whole pages, zeroed) whose last page is PROT_NONE: a mapping
 * given back earlier when one of that length is kept, else a new one; and
 * the way to give one back. From one thread at a time (the suites
 * allocate on their main thread). */
unsigned char *guard_pages_get(size_t len);
void guard_pages_put(unsigned char *base, size_t len);
/* A malloc'd copy of n floats (aborts when out of memory); free it. */
float *copy_floats(const float *x, size_t n);
/* v of tokens [t0, t1) of every batch and head, as c's strides place it,
 * times factor (values near float's range). */
void scale_value_rows(const linattn_config *c, float *v, int64_t t0, int64_t t1, float factor);
void problem_make(problem *p, const spec *sp);
void problem_free(problem *p);
linattn_status problem_forward(problem *p);

/* Max error of o and the final state against the oracle, as a fraction of
 * tolerance.h bound (<= 1 passes). Prints the case when it fails. */
double problem_error(const problem *p);
/* Max |a - b| / max(1, max |b|) over o of two problems of the same spec. */
double problem_distance(const problem *a, const problem *b);
/* A short description of the case for messages. */
const char *spec_name(const spec *sp);

/* harness_table.c: a per-table suite's main. Sets *table to the table
 * LINATTN_TEST_TABLE names (before the suite runs: its fixtures read it),
 * prints "table under test: NAME" + family, runs make_suite's tests and
 * returns main's status: 0, 1 on a failure or a name this build lacks,
 * 2 with LINATTN_TEST_TABLE unset, 77 (skipped) when this CPU cannot run
 * the table. */
struct la_table;
struct Suite;
int table_suite_main(struct Suite *(*make_suite)(const struct la_table *t),
                     const struct la_table **table, const char *family);

#endif
