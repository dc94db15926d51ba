/* The delta rule on NEON: delta_kernels.h over this folder's vocabulary,
 * tiles of 8 q-registers (32 value columns: 8 accumulators, 8 update
 * vectors and the operands fit the 32 registers). */
#include "../table.h"
#include "simd128.h"

#define LA_DELTA_OPS la_delta_neon
#define LA_DELTA_NV 8
#include "../delta_kernels.h"
