/* Private to linattn-bench: the pieces shared between its source files. */
#ifndef LINATTN_BENCH_H
#define LINATTN_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include <linattn.h>

/* peak.c: the per-ISA measuring loops. Both return a value derived from
 * every result so the compiler cannot drop the work. */

/* Floating-point operations one iteration of fma_loop(isa, ...) performs:
 * PEAK_ACC independent accumulators x lanes x 2 (an FMA is a multiply and
 * an add). */
double bench_fma_flops_per_iter(linattn_isa isa);
/* Runs `iters` iterations of the register-blocked FMA loop of isa. */
float bench_fma_loop(linattn_isa isa, int64_t iters);
/* One read-modify-write pass s[i] = s[i] * a + b over n floats with the
 * vector width of isa. */
void bench_rmw_pass(linattn_isa isa, float *s, size_t n);
/* What the loops of isa are, for the report ("12 x zmm fmadd", ...). */
const char *bench_peak_desc(linattn_isa isa);

/* quadratic.c: the O(T^2) masked-attention reference of one (b, h), gate
 * NONE, causal, contiguous [T][d] rows: o_t = sum_{j<=t} (qh_t . kh_j) v_j,
 * divided by (sum_{j<=t} qh_t . kh_j + eps) when normalising. `work` holds
 * T*dk + dk + T floats. */
void bench_quadratic_head(int64_t T, int64_t dk, int64_t dv, linattn_phi phi, float scale,
                          int normalize, float eps, const float *q, const float *k,
                          const float *v, float *o, float *work);

#endif /* LINATTN_BENCH_H */
