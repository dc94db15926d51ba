/* How a ggml-style op would run linattn on the graph's own threads.
 *
 * ggml calls an op's compute function on every thread of its pool with
 * (ith, nth) and a shared work buffer sized at graph-plan time; the op may
 * not start threads or allocate. With linattn:
 *   - graph plan: linattn_plan_create validates the call once, and the work
 *     buffer gets nth * linattn_plan_workspace_size() bytes;
 *   - compute(ith, nth): thread ith runs its share of the plan's units with
 *     its slice of the work buffer (static split below; a shared atomic
 *     counter handing out the next unit balances better, since units come
 *     longest first);
 *   - after the barrier the plan is freed (cheap: it owns no buffers).
 * The states are V-first like ggml's ([slot][head][dv][dk]); src and dst
 * states are two halves of one pool (read slot b, write slot B + b). The
 * result is checked bitwise against linattn_run on the library's threads. */
#include <linattn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 4, H = 8, T = 24, DK = 32, DV = 32, NTH = 3 };

typedef struct {
    const linattn_plan *plan;
    unsigned char *wdata; /* nth * per-thread workspace */
    size_t wsize;
    int ith, nth;
    linattn_status st;
} op_params;

/* The op's compute function: thread ith of nth. */
static void *compute_forward_gated_delta(void *arg)
{
    op_params *p = arg;
    const int64_t units = linattn_plan_units(p->plan);
    const int64_t first = units * p->ith / p->nth, last = units * (p->ith + 1) / p->nth;
    p->st = linattn_plan_run(p->plan, first, last - first, p->wdata + p->wsize * (size_t)p->ith);
    return NULL;
}

static float uniform(unsigned *state, float lo, float hi)
{
    *state = *state * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(*state >> 8) / 16777216.0f;
}

int main(void)
{
    static float q[B * H * T * DK], k[B * H * T * DK], v[B * H * T * DV], g[B * H * T],
        beta[B * H * T], o1[B * H * T * DV], o2[B * H * T * DV];
    static float pool1[2 * B * H * DV * DK], pool2[2 * B * H * DV * DK];
    unsigned seed = 7;
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        q[i] = uniform(&seed, -1, 1), k[i] = uniform(&seed, -1, 1);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        v[i] = uniform(&seed, -1, 1);
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        g[i] = uniform(&seed, -0.5f, 0), beta[i] = uniform(&seed, 0, 1);
    for (size_t i = 0; i < sizeof pool1 / sizeof pool1[0]; i++)
        pool1[i] = pool2[i] = uniform(&seed, -0.1f, 0.1f);

    linattn_config cfg;
    linattn_config_init(&cfg, B, H, T, DK, DV);
    linattn_config_set_gate(&cfg, LINATTN_GATE_TOKEN);
    cfg.normalize = 0;
    cfg.qk_l2norm = 1;
    int32_t src[B], dst[B];
    for (int b = 0; b < B; b++)
        src[b] = b, dst[b] = B + b;
    const linattn_state_pool pool = {.slots = 2 * B, .slot = H * DV * DK, .head = DV * DK,
                                     .row = 1, .col = DK, /* V-first: element (i, j) at j*DK + i */
                                     .read_slots = src, .write_slots = dst};
    linattn_operands ops;
    linattn_operands_init(&ops);
    ops.q = q, ops.k = k, ops.v = v, ops.g = g, ops.beta = beta, ops.o = o1, ops.s = pool1;
    ops.pool = &pool;

    /* graph plan */
    linattn_plan *plan;
    linattn_status st = linattn_plan_create(&plan, LINATTN_OP_DELTA_FORWARD, &cfg, &ops);
    if (st != LINATTN_OK) {
        fprintf(stderr, "plan: %s\n", linattn_last_error());
        return 1;
    }
    const int64_t units = linattn_plan_units(plan);
    const size_t wsize = linattn_plan_workspace_size(plan);
    unsigned char *wdata = aligned_alloc(64, wsize * NTH);
    /* graph compute: every thread runs the op */
    pthread_t th[NTH];
    op_params params[NTH];
    for (int i = 0; i < NTH; i++) {
        params[i] = (op_params){plan, wdata, wsize, i, NTH, LINATTN_OK};
        pthread_create(&th[i], NULL, compute_forward_gated_delta, &params[i]);
    }
    for (int i = 0; i < NTH; i++) {
        pthread_join(th[i], NULL);
        if (params[i].st != LINATTN_OK)
            return fprintf(stderr, "thread %d: %s\n", i, linattn_strerror(params[i].st)), 1;
    }
    linattn_plan_destroy(plan);
    free(wdata);

    /* the same call on the library's threads */
    ops.o = o2, ops.s = pool2;
    if ((st = linattn_run(LINATTN_OP_DELTA_FORWARD, &cfg, &ops)) != LINATTN_OK)
        return fprintf(stderr, "run: %s\n", linattn_last_error()), 1;
    const int same = memcmp(o1, o2, sizeof o1) == 0 && memcmp(pool1, pool2, sizeof pool1) == 0;
    printf("%lld units on %d threads: %s\n", (long long)units, NTH,
           same ? "bitwise the same as linattn_run" : "DIFFERENT");
    return same ? 0 : 1;
}
