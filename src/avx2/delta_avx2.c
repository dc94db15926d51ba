/* The delta rule on AVX2 + FMA: delta_kernels.h over this folder's
 * vocabulary, register tiles of 4 ymm (32 value columns: 12 accumulators
 * and the broadcasts fit the 16 registers). Measured on Zen 4 (B=1, H=32,
 * dk=dv=128, T=4096, one thread): 4 vectors 0.52 of the FMA peak, 2
 * vectors 0.49, 3 vectors 0.27 (ragged tiles). */
#include "../table.h"
#include "simd256.h"

#define LA_DELTA_OPS la_delta_avx2
#define LA_DELTA_NV 4
#define LA_DELTA_PAIR_NV 2 /* pair sweeps: 12 accumulators */
#ifndef LA_DELTA_ROW_NV
#define LA_DELTA_ROW_NV 8 /* a step on whole rows (delta_step_rows) */
#endif
#ifndef LA_DELTA_ROW1_NV
#define LA_DELTA_ROW1_NV 12 /* its first pass: 12 sums, a row's vector and k */
#endif
/* A bfloat16 state's step is bound by the conversions here, not by memory
 * (0.22-0.24 of the bound, Qwen3-Next's 36 layers, Zen 4): whole rows,
 * which round some vectors alone, took 137 us a layer against 124. On Zen
 * 3, with pair order (state_rows.h) in both, whole rows were level from
 * memory and slower in L2 (18.3-18.6 us against 15.2-15.6, 4 heads). */
#define LA_DELTA_ROW_BF16 0
#include "../delta_kernels.h"
