/* The delta-rule family's calls. bench_call (cases.c) has built the config
 * (grouped q/k heads, qk_l2norm, beta strides) and picked g. */
#include "bench.h"

const int bench_delta_built = 1;

linattn_status bench_delta_forward(const linattn_config *cfg, const bench_data *d,
                                   const float *g, float *o)
{
    return linattn_delta_forward(cfg, d->q, d->k, d->v, g, d->beta, o, NULL);
}

linattn_status bench_delta_step(const linattn_config *cfg, const bench_data *d, const float *g,
                                float *o)
{
    return linattn_delta_step(cfg, d->q, d->k, d->v, g, d->beta, o, d->s);
}
