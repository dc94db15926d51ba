/* Private: the packed working copy of a state's columns that the recurrent
 * forwards of both families may run on (tuning.h says when). Columns
 * [j0, j0 + nj) of a K-first state [dk][dv] are copied tile by tile: tile r
 * holds columns j0 + r * tile onwards as dk rows of `tile` floats (the last
 * tile's rows padded), so each register tile of a sweep is contiguous.
 * Why: with rows dv floats apart, a tile narrower than the row puts its
 * lines in a fraction of L1's sets (dv = 128, 64 columns: half of them), so
 * a tile that would fit L1 streams from L2 at every token instead. */
#ifndef LINATTN_PACK_H
#define LINATTN_PACK_H

#include <stdint.h>
#include <string.h>

#include "sizes.h"

/* Rows of a packed tile are ld >= tile floats apart: a family may pad them
 * (rows a multiple of 4 KiB apart can make a load wait for an older store
 * to an unrelated address with the same low 12 bits). */

/* Register tile r (columns j0 + r * tile onwards) of a packed copy. */
static inline float *la_packed_tile(float *copy, int64_t dk, int64_t ld, int64_t r)
{
    return copy + r * dk * ld;
}

static inline size_t la_packed_bytes(int64_t dk, int64_t nj, int64_t tile, int64_t ld)
{
    const int64_t tiles = (nj + tile - 1) / tile;
    return la_size_floats(la_size_mul(la_size_of_dim(dk), la_size_of_dim(tiles * ld)));
}

static inline void la_pack_tiles(const float *s, int64_t dk, int64_t dv, int64_t j0, int64_t nj,
                                 int64_t tile, int64_t ld, float *copy)
{
    for (int64_t jb = 0; jb < nj; jb += tile) {
        const int64_t w = nj - jb < tile ? nj - jb : tile;
        float *t = la_packed_tile(copy, dk, ld, jb / tile);
        for (int64_t c = 0; c < dk; c++)
            memcpy(t + c * ld, s + c * dv + j0 + jb, (size_t)w * sizeof(float));
    }
}

static inline void la_unpack_tiles(float *s, int64_t dk, int64_t dv, int64_t j0, int64_t nj,
                                   int64_t tile, int64_t ld, const float *copy)
{
    for (int64_t jb = 0; jb < nj; jb += tile) {
        const int64_t w = nj - jb < tile ? nj - jb : tile;
        const float *t = la_packed_tile((float *)copy, dk, ld, jb / tile);
        for (int64_t c = 0; c < dk; c++)
            memcpy(s + c * dv + j0 + jb, t + c * ld, (size_t)w * sizeof(float));
    }
}

#endif
