/* The delta rule on AVX-512: delta_kernels.h over this folder's vocabulary
 * (built twice like kernels_avx512.c: native and over SIMDe). Register
 * tiles of 8 zmm (128 value columns): the update, readout and next-token
 * accumulators take 24 of the 32 registers. Measured on Zen 4 (B=1, H=32,
 * dk=dv=128, T=4096, one thread): 8 vectors 0.56 of the FMA peak, 4
 * vectors 0.34. */
#include "../table.h"
#include "simd512.h"

#ifndef LA_DELTA_NV /* -DLA_DELTA_NV=4: a variant build, to measure */
#define LA_DELTA_NV 8
#endif
#ifndef LA_DELTA_PACK_NV
#define LA_DELTA_PACK_NV 4
#endif
#ifndef LA_DELTA_NARROW_NV
#define LA_DELTA_NARROW_NV 2 /* Zen 4's packed tiles (tuning: 32 columns) */
#endif
#ifndef LA_DELTA_PAIR_NV
#define LA_DELTA_PAIR_NV 4 /* pair sweeps: 24 accumulators */
#endif
#ifndef LA_DELTA_ROW_NV
#define LA_DELTA_ROW_NV 16 /* a step on whole rows (delta_step_rows) */
#endif
#include "../delta_kernels.h"
