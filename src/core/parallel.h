/* src/core/parallel.h: the one parallel-for of emb, in the manner of ggml's (ith, nth)
 * kernels. Every module splits its work through these functions; none uses OpenMP itself
 * (tests/cli/test_layers.py checks that no file outside src/core holds an OpenMP pragma or
 * includes <omp.h>).
 *
 * A parallel loop is a function fn(ctx, ith, nth) that handles share ith of nth, and the
 * shares are fixed by (ith, nth) alone: emb__parallel runs fn once for every ith in
 * [0, nth), on as many threads as it gets (the calling thread among them), and never lets
 * the number of threads it really got change a share. So a result that is the same for
 * every nth (row ownership, sums in a fixed order) is also the same however the shares land
 * on threads. Threads come from OpenMP when the build has it; a build without OpenMP
 * (EMB_WITH_OPENMP=OFF) runs the shares one after another on the calling thread, in order
 * of ith, which gives the same bits. A share never waits for another (there is no barrier):
 * phases that depend on each other are separate calls.
 *
 * nth comes from emb__threads_for (the thread count emb_set_num_threads allows, no more
 * than the work is worth); work whose shares are not known in advance uses a counter
 * (emb__claim) or, for divide and conquer, emb__tasks. */
#ifndef EMB_PARALLEL_H
#define EMB_PARALLEL_H

#include <stdbool.h>
#include <stdint.h>

/* Number of shares for a loop of `work` units where each should get at least `grain`
 * units: between 1 and emb_get_num_threads(). */
int emb__threads_for(int64_t work, int64_t grain);

/* A share of a parallel loop: ith in [0, nth). */
typedef void (*emb__share_fn)(void *ctx, int ith, int nth);

/* Runs fn(ctx, ith, nth) for every ith in [0, nth) and returns when all have returned;
 * nth <= 1 calls fn(ctx, 0, 1) on the calling thread. Share 0 always runs on the calling
 * thread (OpenMP's thread 0 of the team is the one that starts it), so it may set the
 * caller's error message (the text writer's share 0 writes to the file). */
void emb__parallel(int nth, emb__share_fn fn, void *ctx);

/* The even split of [0, n) (n >= 0) into nth contiguous ranges: share ith is
 * [n*ith/nth, n*(ith+1)/nth), computed without overflow (n = q*nth + r gives
 * n*i/nth = q*i + r*i/nth exactly). */
static inline int64_t emb__split_at(int64_t n, int i, int nth) {
    return n / nth * i + n % nth * i / nth;
}
static inline void emb__split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    *lo = emb__split_at(n, ith, nth);
    *hi = emb__split_at(n, ith + 1, nth);
}

/* A range of a parallel loop over [0, n): fn(ctx, lo, hi, ith), possibly empty. */
typedef void (*emb__range_fn)(void *ctx, int64_t lo, int64_t hi, int ith);

/* emb__parallel over the even split of [0, n) (emb__split): fn(ctx, lo, hi, ith). */
void emb__parallel_for(int nth, int64_t n, emb__range_fn fn, void *ctx);

/* The split of units [0, units) balanced by weight: prefix[u] is the total weight of the
 * units before u (ascending, prefix[units] the whole); share ith starts at the first unit
 * whose prefix reaches prefix[units] * ith / nth, share 0 at unit 0, and the last share
 * ends at `units`. (Rows by their number of contributions, bags by their positions.) */
void emb__split_by(const int64_t *prefix, int64_t units, int ith, int nth, int64_t *lo,
                   int64_t *hi);

/* Dynamic claiming, for work whose units take unequal or unknown time (the k-NN search's
 * query blocks): shares call emb__claim until it returns a unit >= their count. Which share
 * takes which unit changes from run to run, so each unit's result must not depend on it
 * (scratch belongs to the share: index it by ith). */
typedef struct emb__counter {
    int64_t next;
} emb__counter;

static inline int64_t emb__claim(emb__counter *c) {
    return __atomic_fetch_add(&c->next, 1, __ATOMIC_RELAXED);
}

/* Divide and conquer whose pieces appear only as it runs (the introsort of
 * kernels/argsort.c: each partition step makes two ranges, and the sizes are known only
 * after it). emb__tasks(nth, fn, arg) runs fn(arg) on the calling thread with nth - 1
 * others standing by; inside it, emb__spawn(fn, arg) hands fn(copy of *arg) to a free
 * thread (or runs it at once when none is needed), and emb__tasks returns when everything
 * spawned has finished. The pieces must be independent: which thread runs which must not
 * change a result. This stays an OpenMP task pool, here behind two functions, because an
 * (ith, nth) split would have to partition the top of the recursion on one thread before
 * the shares could start. Without OpenMP, or with nth <= 1, emb__spawn calls fn at once. */
typedef struct emb__task_arg {
    void *p;
    int64_t v[4];
} emb__task_arg;
typedef void (*emb__task_fn)(const emb__task_arg *arg);
void emb__tasks(int nth, emb__task_fn fn, const emb__task_arg *arg);
void emb__spawn(emb__task_fn fn, const emb__task_arg *arg);

/* OpenBLAS built for OpenMP sizes its team from the calling thread's omp_get_max_threads(),
 * which torch.set_num_threads() sets: emb__blas_threads_begin() applies
 * emb_get_num_threads() the same way and returns what to give emb__blas_threads_end()
 * afterwards (both do nothing without OpenMP). */
int emb__blas_threads_begin(void);
void emb__blas_threads_end(int saved);

/* p[0..n) = +0.0, in contiguous shares of at least 1M floats (the overwriting backward
 * passes' zeroing of a whole gradient). */
void emb__zero_floats(float *p, int64_t n);
/* dst[0..n) = src[0..n) (no overlap), in the same shares. */
void emb__copy_floats(float *dst, const float *src, int64_t n);

#endif /* EMB_PARALLEL_H */
