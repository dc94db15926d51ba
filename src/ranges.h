/* Private: address ranges of strided arrays, for the argument checks
 * (check.c, check_pool.c): the bytes an array reaches, and whether two of
 * its index tuples may reach one element. */
#ifndef LINATTN_RANGES_H
#define LINATTN_RANGES_H

#include <stddef.h>
#include <stdint.h>

/* An array addressed as base + sum_i idx_i * stride_i (elements), idx_i < n_i. */
typedef struct {
    int rank;
    int64_t n[4], stride[4];
} layout;

typedef struct {
    uintptr_t lo, hi; /* byte range [lo, hi); hi == 0: absent */
} range;

static inline int mul_add(int64_t a, int64_t b, int64_t *acc)
{
    int64_t p;
    return __builtin_mul_overflow(a, b, &p) || __builtin_add_overflow(*acc, p, acc);
}

/* Index of the last element + 1; 0 on overflow. */
static inline int64_t layout_extent(const layout *l)
{
    int64_t e = 1;
    for (int i = 0; i < l->rank; i++)
        if (mul_add(l->n[i] - 1, l->stride[i], &e))
            return 0;
    return e;
}

static inline int range_of(const void *p, const layout *l, size_t elem, range *r)
{
    const int64_t e = layout_extent(l);
    int64_t bytes;
    if (e == 0 || __builtin_mul_overflow(e, (int64_t)elem, &bytes) ||
        (uintptr_t)p > UINTPTR_MAX - (uintptr_t)bytes)
        return 0;
    r->lo = (uintptr_t)p;
    r->hi = r->lo + (uintptr_t)bytes;
    return 1;
}

static inline int ranges_overlap(range a, range b) { return a.lo < b.hi && b.lo < a.hi; }

/* 1 when two index tuples of l may reach the same element. The rule is
 * conservative: the dimensions with more than one index, sorted by stride,
 * must each step past everything the smaller ones span. A layout that
 * interleaves (strides 3 and 2 over 2 x 3 elements) is rejected even when
 * its tuples happen not to collide. */
static inline int self_overlaps(const layout *l)
{
    int64_t n[4], st[4];
    int m = 0;
    for (int i = 0; i < l->rank; i++)
        if (l->n[i] > 1) {
            int j = m++;
            for (; j > 0 && st[j - 1] > l->stride[i]; j--) {
                st[j] = st[j - 1];
                n[j] = n[j - 1];
            }
            st[j] = l->stride[i];
            n[j] = l->n[i];
        }
    int64_t inner = 1;
    for (int i = 0; i < m; i++) {
        if (st[i] < inner)
            return 1;
        inner = (n[i] - 1) * st[i] + inner; /* no overflow: the extent fit */
    }
    return 0;
}

#endif
