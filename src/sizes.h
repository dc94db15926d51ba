/* Size arithmetic that cannot wrap: every byte count the library forms from
 * user dimensions goes through these. SIZE_MAX stands for "too big" and
 * stays SIZE_MAX through further arithmetic, so one test at the end (an
 * allocation of SIZE_MAX fails) catches an overflow anywhere in a formula. */
#ifndef LINATTN_SIZES_H
#define LINATTN_SIZES_H

#include <stddef.h>
#include <stdint.h>

static inline size_t la_size_mul(size_t a, size_t b)
{
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

static inline size_t la_size_add(size_t a, size_t b)
{
    size_t r;
    return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}

/* Up to a multiple of 64 (cache line, widest vector). */
static inline size_t la_size_up64(size_t n)
{
    return n > SIZE_MAX - 63 ? SIZE_MAX : (n + 63) & ~(size_t)63;
}

/* A non-negative int64 dimension as a size (SIZE_MAX if it does not fit). */
static inline size_t la_size_of_dim(int64_t n)
{
    return n < 0 || (uint64_t)n > SIZE_MAX ? SIZE_MAX : (size_t)n;
}

/* n floats, rounded up to 64 bytes. */
static inline size_t la_size_floats(size_t n)
{
    return la_size_up64(la_size_mul(n, sizeof(float)));
}

#endif
