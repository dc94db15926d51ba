/* The input stage on the portable table: stage_kernels.h over the one-lane
 * vocabulary (half.h's conversions, libm's exp). */
#include "../table.h"
#include "simd1.h"

#define LA_STAGE_OPS la_stage_scalar
#include "../stage_kernels.h"
