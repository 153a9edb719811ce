/* src/kernels/bag_body.h: the bodies of the EmbeddingBag kernels that gain from AVX2+FMA
 * (fmaf as one instruction, wider vectors), written once and instantiated by bag_ref.c
 * (baseline ISA: the _ref kernels), bag_avx2.c and bag_avx512.c. Contracts in
 * bag_kernels.h. fmaf is
 * correctly rounded and every other operation is a plain IEEE operation on either target
 * (-ffp-contract=off), so the instantiations give the same bits. Private to those files. */
#ifndef EMB_BAG_BODY_H
#define EMB_BAG_BODY_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "nan_rules.h"
#include "row_store.h"

#define IDX(p) (idx_i32 ? (int64_t)((const int32_t *)idx)[p] : ((const int64_t *)idx)[p])

/* Prefetches the first lines (up to 512 bytes) of the row of position p when p < limit:
 * random rows of a large table are the cost of a bag, and the max loop has too little
 * independent work per row for the CPU to overlap the misses on its own. 16 positions
 * ahead: faster than 8, and 24 gained nothing more (docs/PERFORMANCE.md, "Tuning constants"). */
#define EMB__BAG_PF_DIST 16
#define BAG_PREFETCH(p, limit)                                                                     \
    do {                                                                                           \
        if ((p) < (limit)) {                                                                       \
            const char *r_ = (const char *)(weight + IDX(p) * dim);                                \
            const int64_t nb_ = dim * 4 < 512 ? dim * 4 : 512;                                     \
            for (int64_t o_ = 0; o_ < nb_; o_ += 64) __builtin_prefetch(r_ + o_, 0, 3);            \
        }                                                                                          \
    } while (0)

/* The NaN columns of bag [p0, p1)'s output o [dim], recomputed with PyTorch's operand
 * priorities (measured against torch 1.13: its caffe2 kernels and OpenBLAS's saxpy add the
 * new row into the accumulator with the row's NaN winning, and the weight's NaN before the
 * row's in a weighted sum): sum acc = row + acc, the row first; weighted sum without padding
 * acc = psw * row + acc (a fused multiply-add, psw, then the row, then acc); with padding
 * acc = (row * psw) + acc, the row before psw and the product before acc; mean divides the
 * NaN, which stays. The plain loops leave the choice between two NaNs to the compiler, which
 * makes it differently in the scalar and the vector code (nan_rules.h). */
static void bag_pool_fix_nan(float *o, const float *weight, int64_t dim, const void *idx,
                             bool idx_i32, int64_t p0, int64_t p1, const float *psw, int64_t pad) {
    for (int64_t d = 0; d < dim; d++) {
        if (o[d] == o[d]) continue;
        float acc = 0.0f;
        for (int64_t p = p0; p < p1; p++) {
            const int64_t k = IDX(p);
            if (k == pad) continue;
            const float x = weight[k * dim + d];
            if (!psw) {
                acc = emb__pick2(x + acc, x, acc);
            } else if (pad == INT64_MIN) {
                const float r = fmaf(psw[p], x, acc);
                acc = r == r ? r : emb__nan_of3(psw[p], x, acc);
            } else {
                const float m = emb__pick2(x * psw[p], x, psw[p]);
                acc = emb__pick2(m + acc, m, acc);
            }
        }
        o[d] = acc; /* a NaN: mean's division keeps it */
    }
}

/* The pool of one bag over the columns [c0, c0 + CB) of its rows, CB a compile-time
 * constant: the accumulators are a local array that the compiler keeps in vector registers
 * across the bag's positions (through memory, every position paid a store and a reload of
 * each accumulator, which took twice as long; docs/PERFORMANCE.md, "Tuning constants"). The
 * additions per column are the ones of the plain loop, in the same order. The first block of
 * a bag (c0 == 0) prefetches the rows further on; later blocks find the bag's rows in the
 * cache. */
static inline __attribute__((always_inline)) void
bag_pool_cols(float *restrict o, const float *weight, int64_t dim, const void *idx, bool idx_i32,
              int64_t p0, int64_t p1, int64_t all_end, int64_t c0, const int CB, const float *psw,
              int64_t pad, float mean_div) {
    const bool fast = pad == INT64_MIN;
    float a[64];
    for (int d = 0; d < CB; d++) a[d] = 0.0f;
    for (int64_t p = p0; p < p1; p++) {
        if (c0 == 0) BAG_PREFETCH(p + EMB__BAG_PF_DIST, all_end);
        const int64_t k = IDX(p);
        if (k == pad) continue;
        const float *restrict w = weight + k * dim + c0;
        if (!psw) {
            for (int d = 0; d < CB; d++) a[d] = a[d] + w[d];
        } else if (fast) {
            const float sc = psw[p];
            for (int d = 0; d < CB; d++) a[d] = fmaf(sc, w[d], a[d]);
        } else {
            const float sc = psw[p];
            for (int d = 0; d < CB; d++) a[d] = a[d] + w[d] * sc;
        }
    }
    if (mean_div != 0.0f)
        for (int d = 0; d < CB; d++) a[d] = a[d] / mean_div;
    for (int d = 0; d < CB; d++) o[c0 + d] = a[d];
}

/* Sum or mean without padding over rows whose width is a multiple of CB (64 or 128, a
 * compile-time constant, as is I32, the index type), and sum with per_sample_weights
 * (fmaf(w, row, acc), as bag_pool_cols without padding): the common cases, as a loop without
 * any per-position condition but the prefetch bound. Same operations as bag_pool_cols.
 * 128 columns at once (16 accumulators) on 128-wide rows, faster than two blocks of 64
 * (docs/PERFORMANCE.md, "Tuning constants"). */
static inline __attribute__((always_inline)) void
bag_pool_plain(float *out, const float *weight, int64_t dim, const void *idx, const bool I32,
               const int CB, const int64_t *starts, int64_t b0, int64_t b1, const float *psw,
               bool mean) {
    const int64_t *i64 = idx;
    const int32_t *i32 = idx;
#define PIDX(p) (I32 ? (int64_t)i32[p] : i64[p])
    const int64_t all_end = starts[b1];
    const int64_t pf_bytes = dim * 4 < 512 ? dim * 4 : 512;
    for (int64_t b = b0; b < b1; b++) {
        const int64_t p0 = starts[b], p1 = starts[b + 1];
        const float div = (float)(p1 - p0 > 1 ? p1 - p0 : 1);
        for (int64_t c0 = 0; c0 < dim; c0 += CB) {
            float a[128];
            for (int d = 0; d < CB; d++) a[d] = 0.0f;
            for (int64_t p = p0; p < p1; p++) {
                if (c0 == 0 && p + EMB__BAG_PF_DIST < all_end) {
                    const char *r = (const char *)(weight + PIDX(p + EMB__BAG_PF_DIST) * dim);
                    for (int64_t o = 0; o < pf_bytes; o += 64) __builtin_prefetch(r + o, 0, 3);
                }
                const float *restrict w = weight + PIDX(p) * dim + c0;
                if (psw) {
                    const float sc = psw[p];
                    for (int d = 0; d < CB; d++) a[d] = fmaf(sc, w[d], a[d]);
                } else {
                    for (int d = 0; d < CB; d++) a[d] = a[d] + w[d];
                }
            }
            float *restrict o = out + b * dim + c0;
            if (mean)
                for (int d = 0; d < CB; d++) o[d] = a[d] / div;
            else
                for (int d = 0; d < CB; d++) o[d] = a[d];
        }
        if (emb__any_nan(out + b * dim, dim))
            bag_pool_fix_nan(out + b * dim, weight, dim, idx, I32, p0, p1, psw, INT64_MIN);
    }
#undef PIDX
}

static inline __attribute__((always_inline)) void
bag_pool_body(float *out, const float *weight, int64_t dim, const void *idx, bool idx_i32,
              const int64_t *starts, int64_t b0, int64_t b1, const float *psw, int64_t pad,
              bool mean) {
    const bool fast = pad == INT64_MIN;
    const int64_t all_end = starts[b1];
    if (fast && dim % 64 == 0) {
#define PLAIN(I32, CB, W) bag_pool_plain(out, weight, dim, idx, I32, CB, starts, b0, b1, W, mean)
        const bool wide = dim % 128 == 0;
        if (psw) { /* sum only */
            if (wide)
                idx_i32 ? PLAIN(true, 128, psw) : PLAIN(false, 128, psw);
            else
                idx_i32 ? PLAIN(true, 64, psw) : PLAIN(false, 64, psw);
        } else {
            if (wide)
                idx_i32 ? PLAIN(true, 128, NULL) : PLAIN(false, 128, NULL);
            else
                idx_i32 ? PLAIN(true, 64, NULL) : PLAIN(false, 64, NULL);
        }
#undef PLAIN
        return;
    }
    for (int64_t b = b0; b < b1; b++) {
        float *restrict acc = out + b * dim;
        const int64_t p0 = starts[b], p1 = starts[b + 1];
        float mean_div = 0.0f; /* 0: no division */
        if (mean) {
            int64_t count = p1 - p0;
            if (!fast)
                for (int64_t p = p0; p < p1; p++) count -= IDX(p) == pad;
            mean_div = (float)(count > 1 ? count : 1);
        }
        /* register blocks of 64, then 16 columns; the rest through memory */
        int64_t c0 = 0;
        for (; c0 + 64 <= dim; c0 += 64)
            bag_pool_cols(acc, weight, dim, idx, idx_i32, p0, p1, all_end, c0, 64, psw, pad,
                          mean_div);
        for (; c0 + 16 <= dim; c0 += 16)
            bag_pool_cols(acc, weight, dim, idx, idx_i32, p0, p1, all_end, c0, 16, psw, pad,
                          mean_div);
        if (c0 == dim) continue;
        for (int64_t d = c0; d < dim; d++) acc[d] = 0.0f;
        for (int64_t p = p0; p < p1; p++) {
            if (c0 == 0) BAG_PREFETCH(p + EMB__BAG_PF_DIST, all_end);
            const int64_t k = IDX(p);
            if (k == pad) continue;
            const float *restrict w = weight + k * dim;
            if (!psw) {
                for (int64_t d = c0; d < dim; d++) acc[d] = acc[d] + w[d];
            } else if (fast) {
                const float sc = psw[p];
                for (int64_t d = c0; d < dim; d++) acc[d] = fmaf(sc, w[d], acc[d]);
            } else {
                const float sc = psw[p];
                for (int64_t d = c0; d < dim; d++) acc[d] = acc[d] + w[d] * sc;
            }
        }
        if (mean)
            for (int64_t d = c0; d < dim; d++) acc[d] = acc[d] / mean_div;
    }
    for (int64_t b = b0; b < b1; b++)
        if (emb__any_nan(out + b * dim, dim))
            bag_pool_fix_nan(out + b * dim, weight, dim, idx, idx_i32, starts[b], starts[b + 1],
                             psw, pad);
}

static inline __attribute__((always_inline)) void
bag_max_body(float *out, int64_t *max_idx, const float *weight, int64_t dim, const void *idx,
             bool idx_i32, const int64_t *starts, int64_t b0, int64_t b1, int64_t pad) {
    /* Columns in chunks; per chunk the winners' offsets from the bag's first position are
     * kept as int32 next to the float maxima, so that the select loop has lanes of one
     * width and vectorises (the comparisons' outcomes are data-dependent: as branches they
     * mispredicted and made this loop an order of magnitude slower). */
    enum { CHUNK = 256 };
    const int64_t all_end = starts[b1];
    for (int64_t b = b0; b < b1; b++) {
        float *restrict o = out + b * dim;
        int64_t *restrict mi = max_idx ? max_idx + b * dim : NULL;
        const int64_t end = starts[b + 1];
        int64_t first = starts[b];
        while (first < end && IDX(first) == pad) first++;
        if (first == end) { /* empty or padding only */
            for (int64_t d = 0; d < dim; d++) o[d] = 0.0f;
            if (mi)
                for (int64_t d = 0; d < dim; d++) mi[d] = 0;
            continue;
        }
        const int64_t k0 = IDX(first);
        if (end - first > INT32_MAX) { /* a bag this long: the plain loop */
            memcpy(o, weight + k0 * dim, (size_t)dim * sizeof(float));
            if (mi)
                for (int64_t d = 0; d < dim; d++) mi[d] = k0;
            for (int64_t p = first + 1; p < end; p++) {
                const int64_t k = IDX(p);
                if (k == pad) continue;
                const float *restrict w = weight + k * dim;
                for (int64_t d = 0; d < dim; d++) {
                    const float v = w[d], c = o[d];
                    if ((v > c) | ((v != v) & (c == c))) {
                        o[d] = v;
                        if (mi) mi[d] = k;
                    }
                }
            }
            continue;
        }
        for (int64_t c0 = 0; c0 < dim; c0 += CHUNK) {
            const int64_t cn = dim - c0 < CHUNK ? dim - c0 : CHUNK;
            int32_t wp[CHUNK];
            float *restrict oc = o + c0;
            memcpy(oc, weight + k0 * dim + c0, (size_t)cn * sizeof(float));
            for (int64_t d = 0; d < cn; d++) wp[d] = 0;
            for (int64_t p = first + 1; p < end; p++) {
                if (c0 == 0) BAG_PREFETCH(p + EMB__BAG_PF_DIST, all_end);
                const int64_t k = IDX(p);
                if (k == pad) continue;
                const float *restrict w = weight + k * dim + c0;
                const int32_t q = (int32_t)(p - first);
                for (int64_t d = 0; d < cn; d++) {
                    const float v = w[d], c = oc[d];
                    const int take = (v > c) | ((v != v) & (c == c));
                    oc[d] = take ? v : c;
                    wp[d] = take ? q : wp[d];
                }
            }
            if (mi)
                for (int64_t d = 0; d < cn; d++) mi[c0 + d] = IDX(first + wp[d]);
        }
    }
}

/* The NaN columns of a group's sum a [dim] (positions perm[i..j)), as PyTorch makes them:
 * an axpy per position, acc = scale * g + acc with OpenBLAS's priorities (the scale, then
 * the bag's gradient, then acc). */
static void bag_groups_fix_nan(float *a, const float *grad_output, int64_t dim, const int64_t *perm,
                               const int64_t *o2b, const int64_t *bag_count, const float *psw,
                               int64_t i, int64_t j, bool scale_by_freq) {
    for (int64_t d = 0; d < dim; d++) {
        if (a[d] == a[d]) continue;
        float acc = 0.0f;
        for (int64_t q = i; q < j; q++) {
            const int64_t p = perm[q], bag = o2b[p];
            double scale = psw ? (double)psw[p] : 1.0;
            if (scale_by_freq) scale /= (double)(j - i);
            if (bag_count && bag_count[bag] != 0) scale /= (double)bag_count[bag];
            const float s = (float)scale, g = grad_output[bag * dim + d];
            const float r = fmaf(g, s, acc);
            acc = r == r ? r : emb__nan_of3(s, g, acc);
        }
        a[d] = acc;
    }
}

static inline __attribute__((always_inline)) void
bag_backward_groups_body(float *grad_weight, const float *grad_output, int64_t dim,
                         const int64_t *keys, const int64_t *perm, const int64_t *o2b,
                         const int64_t *bag_count, const float *psw, int64_t i0, int64_t i1,
                         int64_t pad, bool scale_by_freq, bool overwrite, int64_t r0, int64_t r1,
                         float *acc) {
    int64_t i = i0;
    const int64_t pf_bytes = dim * 4 < 512 ? dim * 4 : 512;
    const int how = row_store_mode(grad_weight + r0 * dim, dim, r1 - r0, overwrite);
    int64_t empty_from = r0; /* overwrite: the rows [empty_from, k) are still to zero */
    while (i < i1) {
        const int64_t k = keys[perm[i]];
        if (!overwrite && i + EMB__BAG_PF_DIST < i1) {
            /* the gradient row of a group further on: random rows of a large table */
            const char *r = (const char *)(grad_weight + keys[perm[i + EMB__BAG_PF_DIST]] * dim);
            for (int64_t o = 0; o < pf_bytes; o += 64) __builtin_prefetch(r + o, 1, 3);
        }
        int64_t j = i + 1;
        while (j < i1 && keys[perm[j]] == k) j++;
        if (overwrite) {
            zero_rows(grad_weight, dim, empty_from, k == pad ? k + 1 : k, how);
            empty_from = k + 1;
        }
        if (k != pad) {
            float *restrict a = acc;
            for (int64_t d = 0; d < dim; d++) a[d] = 0.0f;
            for (int64_t q = i; q < j; q++) {
                const int64_t p = perm[q], bag = o2b[p];
                double scale = psw ? (double)psw[p] : 1.0;
                if (scale_by_freq) scale /= (double)(j - i);
                if (bag_count && bag_count[bag] != 0) scale /= (double)bag_count[bag];
                const float s = (float)scale;
                const float *restrict g = grad_output + bag * dim;
                for (int64_t d = 0; d < dim; d++) a[d] = fmaf(g[d], s, a[d]);
            }
            if (emb__any_nan(a, dim)) {
                bag_groups_fix_nan(a, grad_output, dim, perm, o2b, bag_count, psw, i, j,
                                   scale_by_freq);
                store_row_nan(grad_weight + k * dim, a, dim, how);
            } else {
                store_row(grad_weight + k * dim, a, dim, how);
            }
        }
        i = j;
    }
    if (overwrite) zero_rows(grad_weight, dim, empty_from, r1, how);
    row_store_fence(how);
}

static inline __attribute__((always_inline)) void
bag_psw_grad_body(float *out, const float *grad_output, const float *weight, int64_t dim,
                  const void *idx, bool idx_i32, const int64_t *o2b, int64_t p0, int64_t p1,
                  int64_t pad) {
    for (int64_t p = p0; p < p1; p++) {
        const int64_t k = IDX(p), bag = o2b[p];
        if (bag < 0 || k == pad) {
            out[p] = 0.0f;
            continue;
        }
        const float *restrict g = grad_output + bag * dim, *restrict w = weight + k * dim;
        float s = 0.0f;
        for (int64_t d = 0; d < dim; d++) s = s + g[d] * w[d];
        out[p] = s;
    }
}

/* The twin table for one target (bag_avx2.c, bag_avx512.c). */
#define EMB__BAG_INSTANTIATE(SUFFIX, ATTR)                                                         \
    ATTR static void pool_##SUFFIX(float *out, const float *weight, int64_t dim, const void *idx,  \
                                   bool idx_i32, const int64_t *starts, int64_t b0, int64_t b1,    \
                                   const float *psw, int64_t pad, bool mean) {                     \
        bag_pool_body(out, weight, dim, idx, idx_i32, starts, b0, b1, psw, pad, mean);             \
    }                                                                                              \
    ATTR static void max_##SUFFIX(float *out, int64_t *max_idx, const float *weight, int64_t dim,  \
                                  const void *idx, bool idx_i32, const int64_t *starts,            \
                                  int64_t b0, int64_t b1, int64_t pad) {                           \
        bag_max_body(out, max_idx, weight, dim, idx, idx_i32, starts, b0, b1, pad);                \
    }                                                                                              \
    ATTR static void groups_##SUFFIX(float *grad_weight, const float *grad_output, int64_t dim,    \
                                     const int64_t *keys, const int64_t *perm, const int64_t *o2b, \
                                     const int64_t *bag_count, const float *psw, int64_t i0,       \
                                     int64_t i1, int64_t pad, bool scale_by_freq, bool overwrite,  \
                                     int64_t r0, int64_t r1, float *acc) {                         \
        bag_backward_groups_body(grad_weight, grad_output, dim, keys, perm, o2b, bag_count, psw,   \
                                 i0, i1, pad, scale_by_freq, overwrite, r0, r1, acc);              \
    }                                                                                              \
    ATTR static void psw_grad_##SUFFIX(float *out, const float *grad_output, const float *weight,  \
                                       int64_t dim, const void *idx, bool idx_i32,                 \
                                       const int64_t *o2b, int64_t p0, int64_t p1, int64_t pad) {  \
        bag_psw_grad_body(out, grad_output, weight, dim, idx, idx_i32, o2b, p0, p1, pad);          \
    }                                                                                              \
    const emb__bag_kernel_table emb__bag_kernels_##SUFFIX = {pool_##SUFFIX, max_##SUFFIX,          \
                                                             groups_##SUFFIX, psw_grad_##SUFFIX};

#undef IDX
#undef BAG_PREFETCH

#endif /* EMB_BAG_BODY_H */
