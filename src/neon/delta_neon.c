/* The delta rule on NEON: delta_kernels.h over this folder's vocabulary,
 * register tiles of 8 q-registers (32 value columns: the update, readout
 * and next-token accumulators take 24 of the 32 registers). Not yet
 * measured on hardware. */
#include "../table.h"
#include "simd128.h"

#define LA_DELTA_OPS la_delta_neon
#define LA_DELTA_NV 8
#define LA_DELTA_PAIR_NV 4 /* pair sweeps: 24 accumulators */
#include "../delta_kernels.h"
