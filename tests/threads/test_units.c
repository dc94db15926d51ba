/* The work-unit loop (LA_FOR_EACH_UNIT, src/threads.h) on its own. A unit
 * fetches the next unit's state only when its own thread runs that unit
 * (unit + 1 < end); a wrong `end` cannot change a result, so the drivers'
 * tests cannot see it. Checked for teams of 1-5 threads over 0-40 units,
 * and with a team that the runtime cuts to one thread (nested inside a
 * region, nesting off), where one thread runs every range:
 *  - every unit runs once;
 *  - units form nt contiguous ranges (one without OpenMP) whose sizes
 *    differ by at most one, each run in ascending order by one thread;
 *  - `end` is the end of the unit's own range, and a thread's units
 *    ascend across its ranges too (check.c's first bad head relies on it).
 * Also run under ThreadSanitizer (scripts/tsan.sh). Exits non-zero on the
 * first failure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "threads.h"

#include "check.h"

enum { MAX_UNITS = 40, MAX_TEAM = 5 };

typedef struct {
    int runs, tid;
    int64_t end, seq; /* seq: the unit's place in its thread's order */
} unit_log;

static unit_log logged[MAX_UNITS];
static int64_t counter[LA_MAX_THREADS];

static void record(int64_t unit, int64_t end, int tid)
{
    __atomic_fetch_add(&logged[unit].runs, 1, __ATOMIC_RELAXED);
    logged[unit].tid = tid;
    logged[unit].end = end;
    logged[unit].seq = counter[tid]++; /* each thread its own counter */
}

static void check_ranges(int nt, int64_t units, const char *how)
{
#ifdef _OPENMP
    const int64_t ranges = nt <= 1 ? 1 : nt;
#else
    const int64_t ranges = 1;
#endif
    int64_t start = 0, seen = 0, shortest = units, longest = 0;
    while (start < units) {
        const int64_t end = logged[start].end;
        CHECK(end > start && end <= units, "%s, %d threads, %lld units: unit %lld's end %lld",
              how, nt, (long long)units, (long long)start, (long long)end);
        for (int64_t u = start; u < end; u++) {
            CHECK(logged[u].runs == 1, "%s, %d threads: unit %lld ran %d times", how, nt,
                  (long long)u, logged[u].runs);
            CHECK(logged[u].end == end && logged[u].tid == logged[start].tid &&
                      logged[u].seq == logged[start].seq + (u - start),
                  "%s, %d threads, %lld units: unit %lld is not in the range [%lld, %lld) "
                  "of thread %d, in order (end %lld, thread %d)",
                  how, nt, (long long)units, (long long)u, (long long)start, (long long)end,
                  logged[start].tid, (long long)logged[u].end, logged[u].tid);
        }
        shortest = end - start < shortest ? end - start : shortest;
        longest = end - start > longest ? end - start : longest;
        seen++;
        start = end;
    }
    CHECK(seen <= ranges && (units < ranges || seen == ranges),
          "%s, %d threads, %lld units: %lld ranges", how, nt, (long long)units,
          (long long)seen);
    /* empty ranges hold nothing to log: with fewer units than ranges each
     * range holds at most one */
    CHECK(units == 0 || (units < ranges ? longest == 1 : longest - shortest <= 1),
          "%s, %d threads, %lld units: ranges of %lld to %lld units", how, nt,
          (long long)units, (long long)shortest, (long long)longest);
    for (int64_t a = 0; a < units; a++) /* a thread's units ascend over its ranges */
        for (int64_t b = a + 1; b < units; b++)
            CHECK(logged[a].tid != logged[b].tid || logged[a].seq < logged[b].seq,
                  "%s, %d threads: thread %d ran unit %lld after unit %lld", how, nt,
                  logged[a].tid, (long long)b, (long long)a);
}

static void run_loop(int nt, int64_t units)
{
    for (int64_t u = 0; u < MAX_UNITS; u++)
        logged[u] = (unit_log){.runs = 0, .tid = -1, .end = -1, .seq = -1};
    for (int t = 0; t < LA_MAX_THREADS; t++)
        counter[t] = 0;
    LA_FOR_EACH_UNIT(nt, units, unit, end, tid, record(unit, end, tid));
}

int main(void)
{
    int cases = 0;
    for (int nt = 1; nt <= MAX_TEAM; nt++) {
        for (int64_t units = 0; units <= MAX_UNITS; units++) {
            run_loop(nt, units);
            check_ranges(nt, units, "a team of its own");
            cases++;
        }
    }
#ifdef _OPENMP
    /* a parallel region inside another, nesting off: the inner team has
     * one thread, which runs all nt ranges */
    omp_set_max_active_levels(1);
    for (int nt = 2; nt <= MAX_TEAM; nt++) {
        for (int64_t units = 0; units <= MAX_UNITS; units += 7) {
#pragma omp parallel num_threads(2)
            {
#pragma omp single
                {
                    run_loop(nt, units);
                    check_ranges(nt, units, "nested, one thread");
                    for (int64_t u = 0; u < units; u++)
                        CHECK(logged[u].seq == u, "nested: unit %lld ran %lldth",
                              (long long)u, (long long)logged[u].seq);
                }
            }
            cases++;
        }
    }
#endif
    printf("test_units: %d cases passed\n", cases);
    return 0;
}
