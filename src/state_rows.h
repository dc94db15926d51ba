/* Private: n lanes of a state row that is float32 or bfloat16, written once
 * against an ISA vocabulary (include the vocabulary first). The delta
 * kernels and the additive token ops read and write a bfloat16 state in
 * place through these, and the input stage's transposes move a V-first
 * pool of either type. */
#ifndef LINATTN_STATE_ROWS_H
#define LINATTN_STATE_ROWS_H

#include <stdint.h>
#include <string.h>

/* Into L2: the n elements of es bytes at element `at` of a state (the
 * state a kernel works on next, fetched while it works on this one). */
LA_INLINE void state_fetch(const void *state, int64_t at, int64_t n, int64_t es)
{
    const char *p = (const char *)state + at * es;
    for (int64_t b = 0; b < n * es; b += 64)
        __builtin_prefetch(p + b, 0, 2);
}

/* A prefetch stream in address order beside a sweep whose loads visit a
 * group of rows chunk by chunk (a V-first state's rows: four of them,
 * a line of each in turn), an order the hardware prefetchers do not
 * follow (Zen 5: a bare read-modify-write loop in that order over 512-byte
 * rows ran at 0.35 of the same loop in address order from memory). Each
 * step of the group fetches the next line of the rows ROWS_FETCH_AHEAD
 * bytes on, in address order, into L1: that loop then ran at 0.9 of the
 * sequential one, the same fetches in the loads' order at 0.6, and into
 * L2 alone (prefetcht1) at 0.8 (docs/kernels.md). */
#ifndef ROWS_FETCH_AHEAD /* a variant build may set it, to measure */
#define ROWS_FETCH_AHEAD 8192
#endif

typedef struct {
    uintptr_t line, end; /* the next line to fetch; the end of the rows */
    uintptr_t at;        /* as far as the group's steps have come */
    uintptr_t step;      /* bytes a vector of the group moves it on */
} rows_fetch;

/* How many rows of row_bytes the streams run ahead: whole groups of R,
 * so that the streams of successive groups run on in address order. */
LA_INLINE int64_t rows_fetch_ahead(int64_t row_bytes, int R)
{
    return (ROWS_FETCH_AHEAD + R * row_bytes - 1) / (R * row_bytes) * R;
}

/* The stream of a group of R rows (row stride ld, es bytes an element)
 * that fetches elements [c0, c0 + n) of the rows from `row` on: rows of s
 * in [lo, hi), and past hi those of next (laid out as s, or NULL) as many
 * rows on from lo. Spread evenly over the group's steps, a vector of a
 * row each; nothing past the rows. */
LA_INLINE rows_fetch rows_fetch_for(const void *s, const void *next, int64_t ld, int64_t es,
                                    int64_t lo, int64_t hi, int64_t row, int R, int64_t c0,
                                    int64_t n)
{
    rows_fetch f = {0, 0, 0, 0};
    const char *base = (const char *)s;
    if (row >= hi) {
        row = lo + row - hi;
        base = (const char *)next;
    }
    if (!base || row >= hi)
        return f;
    const int64_t rows = hi - row < R ? hi - row : R;
    const int64_t bytes = ((rows - 1) * ld + n) * es, steps = R * ((n + LA_VW - 1) / LA_VW);
    f.at = (uintptr_t)(base + (row * ld + c0) * es);
    f.line = f.at & ~(uintptr_t)63;
    f.end = f.at + (uintptr_t)bytes;
    f.step = (uintptr_t)((bytes + steps - 1) / steps);
    return f;
}

/* A step of the group over `vectors` vectors (of its rows together): the
 * lines the stream has come to. Called once a step, outside the loop over
 * the rows, so that loop still unrolls with its sums in registers. */
LA_INLINE void rows_fetch_step(rows_fetch *f, int vectors)
{
    f->at += f->step * (uintptr_t)vectors;
    for (; f->line < f->at && f->line < f->end; f->line += 64)
        __builtin_prefetch((const void *)f->line, 0, 3);
}

/* n lanes (LA_VW or fewer, the rest 0) at element off of x: float, or
 * bfloat16 widened (exact). bf16 is a constant at every call site. */
LA_INLINE la_vf vf_load_row(const void *x, int64_t off, int64_t n, int bf16)
{
    if (!bf16)
        return n >= LA_VW ? vf_load((const float *)x + off) : vf_loadn((const float *)x + off, n);
    const uint16_t *p = (const uint16_t *)x + off;
    if (n >= LA_VW)
        return vf_widen_bf16(p);
    uint16_t t[LA_VW] = {0};
    memcpy(t, p, (size_t)n * sizeof *p);
    return vf_widen_bf16(t);
}

/* The first n lanes of v at element off of y (bfloat16: rounded to nearest
 * even, as la_f32_to_bf16). */
LA_INLINE void vf_store_row(void *y, int64_t off, la_vf v, int64_t n, int bf16)
{
    if (!bf16) {
        if (n >= LA_VW)
            vf_store((float *)y + off, v);
        else
            vf_storen((float *)y + off, v, n);
        return;
    }
    uint16_t *p = (uint16_t *)y + off, t[LA_VW];
    if (n >= LA_VW) {
        vf_narrow_bf16(p, v);
        return;
    }
    vf_narrow_bf16(t, v);
    memcpy(p, t, (size_t)n * sizeof *p);
}

/* Two whole vectors, lo then hi, at element off of y: a bfloat16 row
 * through vf_narrow2_bf16, one store of both (the same bits as two
 * vf_store_row). */
LA_INLINE void vf_store_row2(void *y, int64_t off, la_vf lo, la_vf hi, int bf16)
{
    if (bf16) {
        vf_narrow2_bf16((uint16_t *)y + off, lo, hi);
        return;
    }
    vf_store((float *)y + off, lo);
    vf_store((float *)y + off + LA_VW, hi);
}

/* Pair order. Two whole vectors of a row (2 LA_VW elements from off) may
 * be held in an order of the ISA's choosing where that makes a bfloat16
 * row cheaper to widen and round (LA_BF16_PAIR_ORDER in a vocabulary:
 * avx2's holds the even elements, then the odd ones); everywhere else,
 * and for float rows, in order. A K-first sweep's columns are
 * independent, so a kernel that reads the columns' other operands (v) and
 * writes their results (o) in the same order gives every column the same
 * operations, and the same bits, as in natural order; a sum along a row
 * (the V-first step's) adds in another order. half: 0 or 1, the vector of
 * the pair. */
#ifndef LA_BF16_PAIR_ORDER
#define LA_BF16_PAIR_ORDER 0
#endif
LA_INLINE la_vf vf_load_row_paired(const void *x, int64_t off, int half, int bf16)
{
#if LA_BF16_PAIR_ORDER
    if (bf16)
        return vf_widen_bf16_half((const uint16_t *)x + off, half);
#endif
    return vf_load_row(x, off + half * LA_VW, LA_VW, bf16);
}
LA_INLINE void vf_store_row_paired(void *y, int64_t off, la_vf lo, la_vf hi, int bf16)
{
#if LA_BF16_PAIR_ORDER
    if (bf16) {
        vf_narrow_bf16_halves((uint16_t *)y + off, lo, hi);
        return;
    }
#endif
    vf_store_row2(y, off, lo, hi, bf16);
}
/* 2 LA_VW floats at p in the pair order of a row of that type, and back */
LA_INLINE la_vf vf_load_paired(const float *p, int half, int bf16)
{
#if LA_BF16_PAIR_ORDER
    if (bf16)
        return vf_load_half(p, half);
#endif
    (void)bf16;
    return vf_load(p + half * LA_VW);
}
LA_INLINE void vf_store_paired(float *p, la_vf lo, la_vf hi, int bf16)
{
#if LA_BF16_PAIR_ORDER
    if (bf16) {
        vf_store_halves(p, lo, hi);
        return;
    }
#endif
    (void)bf16;
    vf_store(p, lo);
    vf_store(p + LA_VW, hi);
}

#endif
