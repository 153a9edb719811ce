/* src/core/parallel.c: threads (see parallel.h). The only file of emb that speaks OpenMP. */
#include "parallel.h"
#include "internal.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static int num_threads = 0; /* 0: the OpenMP default; read and written atomically */

void emb_set_num_threads(int n) {
    __atomic_store_n(&num_threads, n > 0 ? n : 0, __ATOMIC_RELAXED);
}

int emb_get_num_threads(void) {
    const int n = __atomic_load_n(&num_threads, __ATOMIC_RELAXED);
    if (n > 0) return n;
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

int emb__threads_for(int64_t work, int64_t grain) {
    int t = emb_get_num_threads();
    if (grain < 1) grain = 1;
    int64_t max_useful = work / grain;
    if (max_useful < 1) return 1;
    if ((int64_t)t > max_useful) t = (int)max_useful;
    return t < 1 ? 1 : t;
}

void emb__parallel(int nth, emb__share_fn fn, void *ctx) {
    if (nth <= 1) {
        fn(ctx, 0, 1);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nth)
    {
        /* fewer threads than asked (nested in another team, a thread limit): the team
         * takes the shares in turns; the shares themselves stay those of nth */
        const int team = omp_get_num_threads();
        for (int ith = omp_get_thread_num(); ith < nth; ith += team) fn(ctx, ith, nth);
    }
#else
    for (int ith = 0; ith < nth; ith++) fn(ctx, ith, nth);
#endif
}

typedef struct range_ctx {
    int64_t n;
    emb__range_fn fn;
    void *ctx;
} range_ctx;

static void range_share(void *p, int ith, int nth) {
    const range_ctx *r = p;
    int64_t lo, hi;
    emb__split(r->n, ith, nth, &lo, &hi);
    r->fn(r->ctx, lo, hi, ith);
}

void emb__parallel_for(int nth, int64_t n, emb__range_fn fn, void *ctx) {
    range_ctx r = {n, fn, ctx};
    emb__parallel(nth, range_share, &r);
}

/* First unit u in [0, units) with prefix[u] >= target, else units. */
static int64_t first_reaching(const int64_t *prefix, int64_t units, int64_t target) {
    int64_t lo = 0, hi = units;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (prefix[mid] < target)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void emb__split_by(const int64_t *prefix, int64_t units, int ith, int nth, int64_t *lo,
                   int64_t *hi) {
    int64_t a, b;
    emb__split(prefix[units], ith, nth, &a, &b);
    *lo = ith == 0 ? 0 : first_reaching(prefix, units, a);
    *hi = ith == nth - 1 ? units : first_reaching(prefix, units, b);
}

/* ---- tasks ---------------------------------------------------------------------------- */

#ifdef _OPENMP
/* Set on every thread of an emb__tasks team while it runs: emb__spawn makes a task only
 * there (elsewhere there is no team bound to wait for it). */
static _Thread_local int in_tasks;

typedef struct tasks_ctx {
    emb__task_fn fn;
    const emb__task_arg *arg;
} tasks_ctx;
#endif

void emb__tasks(int nth, emb__task_fn fn, const emb__task_arg *arg) {
#ifdef _OPENMP
    if (nth > 1) {
        tasks_ctx t = {fn, arg};
#pragma omp parallel num_threads(nth) shared(t)
        {
            in_tasks = 1;
#pragma omp single
            t.fn(t.arg);
            /* the barrier at the end of the single construct waits for every task */
            in_tasks = 0;
        }
        return;
    }
#else
    (void)nth;
#endif
    fn(arg);
}

void emb__spawn(emb__task_fn fn, const emb__task_arg *arg) {
#ifdef _OPENMP
    if (in_tasks) {
        emb__task_arg a = *arg;
#pragma omp task firstprivate(a, fn)
        fn(&a);
        return;
    }
#endif
    fn(arg);
}

/* ---- OpenBLAS ------------------------------------------------------------------------- */

int emb__blas_threads_begin(void) {
#ifdef _OPENMP
    const int old = omp_get_max_threads(), want = emb_get_num_threads();
    if (want != old) omp_set_num_threads(want);
    return old;
#else
    return 0;
#endif
}

void emb__blas_threads_end(int saved) {
#ifdef _OPENMP
    if (saved != omp_get_max_threads()) omp_set_num_threads(saved);
#else
    (void)saved;
#endif
}

/* ---- helpers -------------------------------------------------------------------------- */

static void zero_range(void *ctx, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    if (hi > lo) memset((float *)ctx + lo, 0, (size_t)(hi - lo) * sizeof(float));
}

void emb__zero_floats(float *p, int64_t n) {
    emb__parallel_for(emb__threads_for(n, (int64_t)1 << 20), n, zero_range, p);
}

typedef struct copy_ctx {
    float *dst;
    const float *src;
} copy_ctx;

static void copy_range(void *ctx, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    const copy_ctx *c = ctx;
    if (hi > lo) memcpy(c->dst + lo, c->src + lo, (size_t)(hi - lo) * sizeof(float));
}

void emb__copy_floats(float *dst, const float *src, int64_t n) {
    copy_ctx c = {dst, src};
    emb__parallel_for(emb__threads_for(n, (int64_t)1 << 20), n, copy_range, &c);
}
