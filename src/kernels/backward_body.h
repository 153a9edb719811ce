/* src/kernels/backward_body.h: the body of the dense backward row kernel, written once and
 * instantiated by backward_ref.c (baseline ISA: the _ref kernel) and backward_avx2.c
 * (AVX2+FMA). Private to those two files. */
#ifndef EMB_BACKWARD_BODY_H
#define EMB_BACKWARD_BODY_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define EMB__HAVE_STREAM 1
#else
#define EMB__HAVE_STREAM 0
#endif

/* The body of the dense row kernel, instantiated for the baseline target (the _ref
 * kernel) and, on x86-64, for AVX2+FMA, where fmaf becomes one instruction instead of a
 * libm call. fmaf is correctly rounded and the adds are plain IEEE adds on either target, so
 * both instantiations produce the same bits. */
/* Output-gradient rows are read in the order of their table rows, scattered over
 * grad_output: ask for the row EMB__BWD_PF entries ahead (no effect on the results). */
#define EMB__BWD_PF 16
static inline __attribute__((always_inline)) void
backward_prefetch(const float *grad_output, int64_t dim, const int64_t *order, int64_t j,
                  int64_t lim) {
    if (j + EMB__BWD_PF < lim) {
        const char *p = (const char *)(grad_output + order[j + EMB__BWD_PF] * dim);
        for (int64_t b = 0; b < dim * (int64_t)sizeof(float); b += 64) __builtin_prefetch(p + b);
    }
}

/* How a finished row sum `a` reaches grad_weight's row `w`:
 *   ROW_ADD     w = w + a (accumulate into the caller's gradient);
 *   ROW_SET     w = 0.0f + a, plain stores: what ROW_ADD gives on a zeroed row, bit for bit
 *               (+0.0 + -0.0 is +0.0), without reading w;
 *   ROW_STREAM  the same values with non-temporal stores (SSE2, every x86-64), for rows of a
 *               multiple of 16 floats in a 64-byte aligned gradient: whole cache lines go to
 *               memory without being read first, and do not push the table out of cache. */
enum { ROW_ADD = 0, ROW_SET = 1, ROW_STREAM = 2 };
/* Rows written by one call from which ROW_STREAM is used: a smaller gradient is better left
 * in cache for whoever reads it next (ms, overwriting, 1 thread, plain against streaming
 * stores: 1000 x 64 with 4,096 positions 0.027 against 0.031; 250k x 64 with 100k 6.9
 * against 6.1; 1M x 64 with 262,144 at 2 threads 15.8 against 12.2). */
#define EMB__STREAM_MIN_FLOATS ((int64_t)1 << 20)

static inline __attribute__((always_inline)) void store_row(float *restrict w,
                                                            const float *restrict a,
                                                            int64_t n, int how) {
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

/* One row's sum without scale_grad_by_freq, CB columns at a time (CB a compile-time 16, 32
 * or 64 dividing dim), the accumulators in registers rather than stored and reloaded at
 * every position: the same adds in the same order as the loop in backward_rows_body. 1000 x
 * 64 with 4,096 positions (in cache) 0.0345 -> 0.028 ms, 10k x 64 with 200k 7.3 -> 6.5 ms. */
static inline __attribute__((always_inline)) void
backward_row_cols(float *restrict w, const float *grad_output, int64_t dim,
                  const int64_t *order, int64_t begin, int64_t end, int64_t lim, const int CB,
                  int how) {
    for (int64_t c0 = 0; c0 < dim; c0 += CB) {
        float a[64];
        const float *restrict g = grad_output + order[begin] * dim + c0;
        for (int d = 0; d < CB; d++) a[d] = 0.0f + g[d];
        for (int64_t j = begin + 1; j < end; j++) {
            if (c0 == 0) backward_prefetch(grad_output, dim, order, j, lim);
            g = grad_output + order[j] * dim + c0;
            for (int d = 0; d < CB; d++) a[d] = a[d] + g[d];
        }
        store_row(w + c0, a, CB, how);
    }
}

static inline __attribute__((always_inline)) void
backward_rows_body(float *grad_weight, const float *grad_output, int64_t dim,
                   const int64_t *offsets, const int64_t *order, int64_t row_begin,
                   int64_t row_end, bool scale_by_freq, bool overwrite, float *acc) {
    const int64_t lim = offsets[row_end];
    int how = ROW_ADD;
    if (overwrite) {
        how = ROW_SET;
#if EMB__HAVE_STREAM
        if (dim % 16 == 0 && (uintptr_t)grad_weight % 64 == 0 &&
            (row_end - row_begin) * dim >= EMB__STREAM_MIN_FLOATS)
            how = ROW_STREAM;
#endif
    }
    int64_t empty_from = row_begin; /* overwrite: the rows [empty_from, r) are still to zero */
    for (int64_t r = row_begin; r < row_end; r++) {
        const int64_t begin = offsets[r], end = offsets[r + 1];
        if (begin == end) continue;
        if (overwrite) zero_rows(grad_weight, dim, empty_from, r, how);
        empty_from = r + 1;
        backward_prefetch(grad_output, dim, order, begin, lim);
        float *restrict w = grad_weight + r * dim;
        float *restrict a = acc;
        if (!scale_by_freq && end - begin > 1 && dim % 16 == 0) {
            if (dim % 64 == 0)
                backward_row_cols(w, grad_output, dim, order, begin, end, lim, 64, how);
            else if (dim % 32 == 0)
                backward_row_cols(w, grad_output, dim, order, begin, end, lim, 32, how);
            else
                backward_row_cols(w, grad_output, dim, order, begin, end, lim, 16, how);
            continue;
        }
        if (!scale_by_freq) {
            const float *restrict g = grad_output + order[begin] * dim;
            for (int64_t d = 0; d < dim; d++) a[d] = 0.0f + g[d];
            for (int64_t j = begin + 1; j < end; j++) {
                backward_prefetch(grad_output, dim, order, j, lim);
                g = grad_output + order[j] * dim;
                for (int64_t d = 0; d < dim; d++) a[d] = a[d] + g[d];
            }
        } else {
            const float alpha = (float)(1.0 / (double)(end - begin));
            const float *restrict g = grad_output + order[begin] * dim;
            for (int64_t d = 0; d < dim; d++) a[d] = fmaf(g[d], alpha, 0.0f);
            for (int64_t j = begin + 1; j < end; j++) {
                backward_prefetch(grad_output, dim, order, j, lim);
                g = grad_output + order[j] * dim;
                for (int64_t d = 0; d < dim; d++) a[d] = fmaf(g[d], alpha, a[d]);
            }
        }
        store_row(w, a, dim, how);
    }
    if (overwrite) zero_rows(grad_weight, dim, empty_from, row_end, how);
#if EMB__HAVE_STREAM
    if (how == ROW_STREAM) _mm_sfence(); /* the streamed lines are visible before we return */
#endif
}

/* The twin for one target (backward_avx2.c, backward_avx512.c). */
#define EMB__BACKWARD_INSTANTIATE(SUFFIX, ATTR)                                             \
    ATTR void emb__embedding_backward_rows_##SUFFIX(                                        \
        float *grad_weight, const float *grad_output, int64_t dim, const int64_t *offsets,  \
        const int64_t *order, int64_t row_begin, int64_t row_end, bool scale_by_freq,       \
        bool overwrite, float *acc) {                                                       \
        backward_rows_body(grad_weight, grad_output, dim, offsets, order, row_begin,        \
                           row_end, scale_by_freq, overwrite, acc);                         \
    }

#endif /* EMB_BACKWARD_BODY_H */
