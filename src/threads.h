/* Private: how many threads a call may use, and the loop that spreads
 * independent work units over them. A single thread never enters OpenMP:
 * a parallel region costs more than a small call. */
#ifndef LINATTN_THREADS_H
#define LINATTN_THREADS_H

#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* No call starts more threads than this, whatever num_threads says: the
 * OpenMP runtime fails (or exits the process) on absurd team sizes. */
enum { LA_MAX_THREADS = 256 };

/* Threads asked for: num_threads, or the OpenMP default for 0, capped by the
 * runtime's thread limit and LA_MAX_THREADS (1 without OpenMP). */
static inline int la_threads_wanted(int num_threads)
{
    if (num_threads == 1)
        return 1; /* the common small call: no runtime queries */
#ifdef _OPENMP
    int64_t n = num_threads ? num_threads : omp_get_max_threads();
    const int64_t limit = omp_get_thread_limit();
    if (n > limit)
        n = limit;
#else
    int64_t n = 1;
    (void)num_threads;
#endif
    if (n > LA_MAX_THREADS)
        n = LA_MAX_THREADS;
    return n < 1 ? 1 : (int)n;
}

/* With num_threads = 0 (the library chooses), a call that sweeps `bytes`
 * of state in all (tokens x heads x dk x dv floats) starts no more threads
 * than give each LA_MIN_BYTES_PER_THREAD of them: below that a team's start
 * and join, and threads of another runtime (PyTorch's) spinning on the
 * same cores, cost more than the share of the work a thread takes over.
 * On the Xeon a 2 MiB decode step still gained from 8 to 16 threads
 * (20.6-21.6 to 12.4-13.5 us), 128 KiB each; a 128 KiB step (a small
 * model's layer) runs on one. The thread count never changes a result. */
enum { LA_MIN_BYTES_PER_THREAD = 128 << 10 };

static inline int la_threads_for_call(int num_threads, int64_t B, int64_t T, int64_t H,
                                      int64_t dk, int64_t dv)
{
    const int wanted = la_threads_wanted(num_threads);
    if (num_threads != 0)
        return wanted; /* asked for: honoured (up to the units) */
    const double bytes = (double)B * (double)T * (double)H * (double)dk * (double)dv * 4.0;
    const double most = bytes / (double)LA_MIN_BYTES_PER_THREAD;
    return most < (double)wanted ? (most < 1.0 ? 1 : (int)most) : wanted;
}

/* The calling thread's index in its team (0 outside a parallel region). */
static inline int la_thread_num(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* Eighths (rounded down) of the thread time that idles when units of equal
 * cost are shared statically over `threads`: 0 when they divide evenly. */
static inline int64_t la_idle_eighths(int64_t units, int threads)
{
    if (threads <= 1 || units < 1)
        return 0;
    const int64_t slots = (units + threads - 1) / threads * threads;
    return (slots - units) * 8 / slots;
}

/* The team for `units` independent units: never more threads than units. */
static inline int la_team_size(int wanted, int64_t units)
{
    return units < wanted ? (int)(units < 1 ? 1 : units) : wanted;
}

/* Runs BODY for unit = 0..units-1 on nt threads: each thread takes a
 * contiguous range of units, in order, ending before `end`, so that a unit
 * knows the one its thread runs next (unit + 1 < end) and may fetch its
 * data; fetching the first unit of another thread's range pulled lines that
 * thread was writing (a 2-thread B = 1 delta step of 2 heads on Zen 5: 10.4
 * us against 5.8-7.2). tid is the thread's index, for its slice of a
 * workspace. Ranges, not threads: a team that starts with fewer than nt
 * threads runs several. */
#ifdef _OPENMP
#define LA_FOR_EACH_UNIT(nt, units, unit, end, tid, BODY)                                         \
    do {                                                                                          \
        if ((nt) <= 1) {                                                                          \
            const int64_t end = (units);                                                          \
            for (int64_t unit = 0; unit < end; unit++) {                                          \
                const int tid = 0;                                                                \
                BODY;                                                                             \
            }                                                                                     \
        } else {                                                                                  \
            _Pragma("omp parallel for schedule(static) num_threads(nt)")                        \
            for (int64_t range_ = 0; range_ < (nt); range_++) {                                   \
                const int tid = omp_get_thread_num();                                             \
                const int64_t end = (units) * (range_ + 1) / (nt);                               \
                for (int64_t unit = (units) * range_ / (nt); unit < end; unit++) {                \
                    BODY;                                                                         \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
    } while (0)
#else
#define LA_FOR_EACH_UNIT(nt, units, unit, end, tid, BODY)                                         \
    do {                                                                                          \
        (void)(nt);                                                                               \
        const int64_t end = (units);                                                              \
        for (int64_t unit = 0; unit < end; unit++) {                                              \
            const int tid = 0;                                                                    \
            BODY;                                                                                 \
        }                                                                                         \
    } while (0)
#endif

#endif
