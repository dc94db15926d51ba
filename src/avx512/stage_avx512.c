/* The input stage on AVX-512 (native and SIMDe builds, see simd512.h). */
#include "../table.h"
#include "simd512.h"

#include "../stage_kernels.h"
