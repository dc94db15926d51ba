/* Stands in for cases_delta.c while the library does not yet provide the
 * delta-rule entry points (tools/meson.build: bench_delta = false). The
 * options reject --family delta first, so these are never called. */
#include "bench.h"

const int bench_delta_built = 0;

linattn_status bench_delta_forward(const linattn_config *cfg, const bench_data *d,
                                   const float *g, float *o)
{
    (void)cfg, (void)d, (void)g, (void)o;
    bench_die("this linattn-bench was built without the delta-rule cases");
}

linattn_status bench_delta_step(const linattn_config *cfg, const bench_data *d, const float *g,
                                float *o)
{
    (void)cfg, (void)d, (void)g, (void)o;
    bench_die("this linattn-bench was built without the delta-rule cases");
}
