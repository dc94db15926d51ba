/* The delta rule on AVX-512: delta_kernels.h over this folder's vocabulary
 * (built twice like kernels_avx512.c: native and over SIMDe), tiles of 4
 * zmm (64 value columns). */
#include "../table.h"
#include "simd512.h"

#define LA_DELTA_NV 4
#include "../delta_kernels.h"
