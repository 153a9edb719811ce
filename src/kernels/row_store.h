/* src/kernels/row_store.h: how the backward kernels (backward_body.h, bag_body.h) write a
 * finished gradient row, accumulating into the caller's gradient or overwriting it. Private
 * to the kernel bodies; instantiated with each of them. */
#ifndef EMB_ROW_STORE_H
#define EMB_ROW_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "nan_rules.h"
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define EMB__HAVE_STREAM 1
#else
#define EMB__HAVE_STREAM 0
#endif

/* How a finished row sum `a` reaches grad_weight's row `w`:
 *   ROW_ADD     w = w + a (accumulate into the caller's gradient);
 *   ROW_SET     w = 0.0f + a, plain stores: what ROW_ADD gives on a zeroed row, bit for bit
 *               (+0.0 + -0.0 is +0.0), without reading w;
 *   ROW_STREAM  the same values with non-temporal stores (SSE2, every x86-64), for rows of a
 *               multiple of 16 floats in a 64-byte aligned gradient: whole cache lines go to
 *               memory without being read first, and do not push the table out of cache. */
enum { ROW_ADD = 0, ROW_SET = 1, ROW_STREAM = 2 };
/* Rows written by one call from which ROW_STREAM is used: a smaller gradient is better left
 * in cache for whoever reads it next (docs/PERFORMANCE.md, "Tuning constants"). */
#define EMB__STREAM_MIN_FLOATS ((int64_t)1 << 20)

static inline __attribute__((always_inline)) void
store_row(float *restrict w, const float *restrict a, int64_t n, int how) {
    if (how == ROW_ADD) {
        for (int64_t d = 0; d < n; d++) w[d] = w[d] + a[d];
        return;
    }
#if EMB__HAVE_STREAM
    if (how == ROW_STREAM) {
        for (int64_t d = 0; d < n; d += 4) {
            const __m128 v = _mm_add_ps(_mm_setzero_ps(), _mm_loadu_ps(a + d));
            _mm_stream_ps(w + d, v);
        }
        return;
    }
#endif
    for (int64_t d = 0; d < n; d++) w[d] = 0.0f + a[d];
}

/* store_row for a row sum a holding NaNs: PyTorch's `grad += new` (an add_) returns the new
 * sum's NaN where both are NaN; where only one is, any order of the add gives that one, and
 * where neither is, the default NaN of an invalid add. So after store_row, only the columns
 * where a is NaN need a's NaN (a is quiet: a computed NaN). */
static inline void store_row_nan(float *restrict w, const float *restrict a, int64_t n, int how) {
    store_row(w, a, n, how);
    for (int64_t d = 0; d < n; d++)
        if (a[d] != a[d]) w[d] = emb__nan_of2(a[d], a[d]);
}

/* Zeroes the rows [r0, r1) of width dim (ROW_SET or ROW_STREAM, as store_row). */
static inline __attribute__((always_inline)) void zero_rows(float *grad_weight, int64_t dim,
                                                            int64_t r0, int64_t r1, int how) {
    if (r0 >= r1) return;
    float *restrict w = grad_weight + r0 * dim;
    const int64_t n = (r1 - r0) * dim;
#if EMB__HAVE_STREAM
    if (how == ROW_STREAM) {
        const __m128 z = _mm_setzero_ps();
        for (int64_t d = 0; d < n; d += 4) _mm_stream_ps(w + d, z);
        return;
    }
#endif
    (void)how;
    for (int64_t d = 0; d < n; d++) w[d] = 0.0f;
}

/* The store mode for `rows` rows of width dim starting at grad_weight: ROW_ADD unless
 * overwriting; then ROW_STREAM for whole cache lines of a large enough range, else ROW_SET. */
static inline __attribute__((always_inline)) int
row_store_mode(const float *grad_weight, int64_t dim, int64_t rows, bool overwrite) {
    if (!overwrite) return ROW_ADD;
#if EMB__HAVE_STREAM
    if (dim % 16 == 0 && (uintptr_t)grad_weight % 64 == 0 && rows * dim >= EMB__STREAM_MIN_FLOATS)
        return ROW_STREAM;
#endif
    (void)grad_weight, (void)dim, (void)rows;
    return ROW_SET;
}

/* After the last streaming store of a call: the lines are visible before it returns. */
static inline __attribute__((always_inline)) void row_store_fence(int how) {
#if EMB__HAVE_STREAM
    if (how == ROW_STREAM) _mm_sfence();
#else
    (void)how;
#endif
}

#endif /* EMB_ROW_STORE_H */
