/* The input stage on AVX2: stage_kernels.h over this folder's vocabulary
 * (F16C for float16, integer shifts for bfloat16, SLEEF's exp). */
#include "../table.h"
#include "simd256.h"

#define LA_STAGE_OPS la_stage_avx2
#include "../stage_kernels.h"
