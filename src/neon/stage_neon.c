/* The input stage on NEON: stage_kernels.h over this folder's vocabulary
 * (FCVT for float16, shifts for bfloat16, SLEEF's exp). */
#include "../table.h"
#include "simd128.h"

#define LA_STAGE_OPS la_stage_neon
#include "../stage_kernels.h"
