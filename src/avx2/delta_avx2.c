/* The delta rule on AVX2 + FMA: delta_kernels.h over this folder's
 * vocabulary, tiles of 4 ymm (32 value columns: 8 accumulators and 4 update
 * vectors stay in the 16 registers). */
#include "../table.h"
#include "simd256.h"

#define LA_DELTA_OPS la_delta_avx2
#define LA_DELTA_NV 4
#include "../delta_kernels.h"
