/* src/kernels/backward_body.h: the body of the dense backward row kernel, written once and
 * instantiated by backward_ref.c (baseline ISA: the _ref kernel), backward_avx2.c
 * (AVX2+FMA) and backward_avx512.c (AVX-512). Private to those files. */
#ifndef EMB_BACKWARD_BODY_H
#define EMB_BACKWARD_BODY_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "nan_rules.h"
#include "row_store.h"

/* The body of the dense row kernel, instantiated for the baseline target (the _ref
 * kernel) and, on x86-64, for AVX2+FMA, where fmaf becomes one instruction instead of a
 * libm call. fmaf is correctly rounded and the adds are plain IEEE adds on either target, so
 * both instantiations produce the same bits. */
/* Output-gradient rows are read in the order of their table rows, scattered over
 * grad_output: ask for the row EMB__BWD_PF entries ahead (no effect on the results). */
#define EMB__BWD_PF 16
static inline __attribute__((always_inline)) void backward_prefetch(const float *grad_output,
                                                                    int64_t dim,
                                                                    const int64_t *order, int64_t j,
                                                                    int64_t lim) {
    if (j + EMB__BWD_PF < lim) {
        const char *p = (const char *)(grad_output + order[j + EMB__BWD_PF] * dim);
        for (int64_t b = 0; b < dim * (int64_t)sizeof(float); b += 64) __builtin_prefetch(p + b);
    }
}

/* The NaN of a row sum, as PyTorch's dense backward makes it: it adds each contribution into
 * the row in position order with add_ (a fused g * alpha + acc in which the new term's NaN
 * wins over the accumulator's), so a column that ends NaN holds the last NaN contribution,
 * quieted, or the default NaN when only an invalid sum (inf - inf) made it one. Fixes the
 * NaN columns of a[0..n), the columns [c0, c0 + n) of the row whose contributions are the
 * grad_output rows order[begin..end). */
static inline void backward_fix_nan(float *a, int64_t n, const float *grad_output, int64_t dim,
                                    const int64_t *order, int64_t begin, int64_t end, int64_t c0) {
    for (int64_t d = 0; d < n; d++) {
        if (a[d] == a[d]) continue;
        a[d] = emb__u2f(EMB__DEFAULT_NAN);
        for (int64_t j = end - 1; j >= begin; j--) {
            const float g = grad_output[order[j] * dim + c0 + d];
            if (g != g) {
                a[d] = emb__nan_of2(g, g);
                break;
            }
        }
    }
}

/* One row's sum without scale_grad_by_freq, CB columns at a time (CB a compile-time 16, 32
 * or 64 dividing dim), the accumulators in registers rather than stored and reloaded at
 * every position: the same adds in the same order as the loop in backward_rows_body, and
 * faster in and out of the cache (docs/PERFORMANCE.md, "Tuning constants"). */
static inline __attribute__((always_inline)) void
backward_row_cols(float *restrict w, const float *grad_output, int64_t dim, const int64_t *order,
                  int64_t begin, int64_t end, int64_t lim, const int CB, int how) {
    for (int64_t c0 = 0; c0 < dim; c0 += CB) {
        float a[64];
        const float *restrict g = grad_output + order[begin] * dim + c0;
        for (int d = 0; d < CB; d++) a[d] = 0.0f + g[d];
        for (int64_t j = begin + 1; j < end; j++) {
            if (c0 == 0) backward_prefetch(grad_output, dim, order, j, lim);
            g = grad_output + order[j] * dim + c0;
            for (int d = 0; d < CB; d++) a[d] = a[d] + g[d];
        }
        if (emb__any_nan(a, CB)) {
            backward_fix_nan(a, CB, grad_output, dim, order, begin, end, c0);
            store_row_nan(w + c0, a, CB, how);
        } else {
            store_row(w + c0, a, CB, how);
        }
    }
}

static inline __attribute__((always_inline)) void
backward_rows_body(float *grad_weight, const float *grad_output, int64_t dim,
                   const int64_t *offsets, const int64_t *order, int64_t row_begin, int64_t row_end,
                   bool scale_by_freq, bool overwrite, float *acc) {
    const int64_t lim = offsets[row_end];
    const int how = row_store_mode(grad_weight, dim, row_end - row_begin, overwrite);
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
        if (emb__any_nan(a, dim)) {
            backward_fix_nan(a, dim, grad_output, dim, order, begin, end, 0);
            store_row_nan(w, a, dim, how);
        } else {
            store_row(w, a, dim, how);
        }
    }
    if (overwrite) zero_rows(grad_weight, dim, empty_from, row_end, how);
    row_store_fence(how);
}

/* The twin for one target (backward_avx2.c, backward_avx512.c). */
#define EMB__BACKWARD_INSTANTIATE(SUFFIX, ATTR)                                                    \
    ATTR void emb__embedding_backward_rows_##SUFFIX(                                               \
        float *grad_weight, const float *grad_output, int64_t dim, const int64_t *offsets,         \
        const int64_t *order, int64_t row_begin, int64_t row_end, bool scale_by_freq,              \
        bool overwrite, float *acc) {                                                              \
        backward_rows_body(grad_weight, grad_output, dim, offsets, order, row_begin, row_end,      \
                           scale_by_freq, overwrite, acc);                                         \
    }

#endif /* EMB_BACKWARD_BODY_H */
