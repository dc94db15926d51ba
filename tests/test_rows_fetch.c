/* rows_fetch (src/state_rows.h), the prefetch stream beside the V-first
 * sweeps, on its own: what it fetches cannot change a result, so the
 * kernels' tests cannot see it. Each group's stream must fetch every line
 * of the rows it names, once and in address order, and nothing outside
 * them: not past the state's rows [lo, hi), not into a next state that
 * is absent. The prefetches are recorded instead of issued. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

enum { MAX_LINES = 4096 };
static uintptr_t fetched[MAX_LINES];
static int n_fetched;

static void record(const void *p)
{
    ck_assert_int_lt(n_fetched, MAX_LINES);
    fetched[n_fetched++] = (uintptr_t)p;
}

#define __builtin_prefetch(p, rw, locality) record(p)
#include "scalar/simd1.h"
#include "state_rows.h"
#undef __builtin_prefetch

/* The group's steps as a sweep makes them: `per` vectors a step (1 for a
 * float row's vector, 2 for a bfloat16 pair), the R rows' together. */
static void run_group(rows_fetch f, int R, int64_t n, int per)
{
    n_fetched = 0;
    for (int64_t c = 0; c < n; c += per)
        rows_fetch_step(&f, R * (int)(n - c < per ? n - c : per));
}

/* The lines fetched are exactly those of [first, last) in order. */
static void expect_lines(uintptr_t first, uintptr_t last)
{
    uintptr_t line = first & ~(uintptr_t)63;
    for (int i = 0; i < n_fetched; i++, line += 64)
        ck_assert_msg(fetched[i] == line, "fetch %d at %#lx, expected %#lx", i,
                      (unsigned long)fetched[i], (unsigned long)line);
    ck_assert_msg(line >= last, "the stream stopped at %#lx before %#lx", (unsigned long)line,
                  (unsigned long)last);
    ck_assert_msg(n_fetched == 0 || line - 64 < last, "a line past the rows");
}

START_TEST(stream_covers_its_rows_in_order)
{
    enum { ROWS = 64 };
    const int64_t lds[] = {128, 130, 33}, ns[] = {128, 128, 33};
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int k = 0; k < 3; k++)
            for (int R = 1; R <= 4; R += 3) {
                const int64_t ld = lds[k], n = ns[k], es = bf16 ? 2 : 4;
                char *s = aligned_alloc(64, (size_t)(ROWS * ld * es + 64));
                char *next = aligned_alloc(64, (size_t)(ROWS * ld * es + 64));
                /* inside the state, then in the next one, with and
                 * without it, and a group cut short by the last row */
                const int64_t rows[] = {8, ROWS - 2, ROWS + 8, 2 * ROWS + 1};
                for (int i = 0; i < 4; i++)
                    for (int has_next = 0; has_next < 2; has_next++) {
                        const int64_t row = rows[i];
                        const rows_fetch f = rows_fetch_for(s + 1 * es, has_next ? next : NULL, ld,
                                                            es, 0, ROWS, row, R, 0, n);
                        run_group(f, R, n, bf16 ? 2 : 1);
                        if (row >= 2 * ROWS || (row >= ROWS && !has_next)) {
                            ck_assert_int_eq(n_fetched, 0);
                            continue;
                        }
                        const char *base = row < ROWS ? s + es : next;
                        const int64_t r0 = row < ROWS ? row : row - ROWS;
                        const int64_t last = r0 + R > ROWS ? ROWS - 1 : r0 + R - 1;
                        expect_lines((uintptr_t)(base + r0 * ld * es),
                                     (uintptr_t)(base + (last * ld + n) * es));
                    }
                free(s);
                free(next);
            }
}
END_TEST

/* A unit's columns [lo, hi) of a split head: the stream runs on into the
 * next state's rows from lo, not from 0. */
START_TEST(stream_runs_on_from_the_units_first_row)
{
    const int64_t ld = 64, es = 4, lo = 16, hi = 32;
    float *s = aligned_alloc(64, 64 * 64 * sizeof(float));
    float *next = aligned_alloc(64, 64 * 64 * sizeof(float));
    run_group(rows_fetch_for(s, next, ld, es, lo, hi, hi + 4, 4, 0, ld), 4, ld, 1);
    expect_lines((uintptr_t)(next + (lo + 4) * ld), (uintptr_t)(next + (lo + 8) * ld));
    run_group(rows_fetch_for(s, next, ld, es, lo, hi, hi + (hi - lo), 4, 0, ld), 4, ld, 1);
    ck_assert_int_eq(n_fetched, 0);
    free(s);
    free(next);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("rows_fetch");
    TCase *tc = tcase_create("stream");
    tcase_add_test(tc, stream_covers_its_rows_in_order);
    tcase_add_test(tc, stream_runs_on_from_the_units_first_row);
    suite_add_tcase(suite, tc);
    SRunner *runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
