/* src/kernels/bag_body.h: the bodies of the EmbeddingBag kernels that gain from AVX2+FMA
 * (fmaf as one instruction, wider vectors), written once and instantiated by bag_ref.c
 * (baseline ISA: the _ref kernels) and bag_avx2.c. Contracts in bag_kernels.h. fmaf is
 * correctly rounded and every other operation is a plain IEEE operation on either target
 * (-ffp-contract=off), so the instantiations give the same bits. Private to those files. */
#ifndef EMB_BAG_BODY_H
#define EMB_BAG_BODY_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define IDX(p) (idx_i32 ? (int64_t)((const int32_t *)idx)[p] : ((const int64_t *)idx)[p])

/* Prefetches the first lines (up to 512 bytes) of the row of position p when p < limit:
 * random rows of a large table are the cost of a bag, and the max loop has too little
 * independent work per row for the CPU to overlap the misses on its own. */
#define EMB__BAG_PF_DIST 8
#define BAG_PREFETCH(p, limit)                                                               \
    do {                                                                                    \
        if ((p) < (limit)) {                                                                \
            const char *r_ = (const char *)(weight + IDX(p) * dim);                        \
            const int64_t nb_ = dim * 4 < 512 ? dim * 4 : 512;                              \
            for (int64_t o_ = 0; o_ < nb_; o_ += 64) __builtin_prefetch(r_ + o_, 0, 3);    \
        }                                                                                   \
    } while (0)

static inline __attribute__((always_inline)) void
bag_pool_body(float *out, const float *weight, int64_t dim, const void *idx,
                       bool idx_i32, const int64_t *starts, int64_t b0, int64_t b1,
                       const float *psw, int64_t pad, bool mean) {
    const bool fast = pad == INT64_MIN;
    const int64_t all_end = starts[b1];
    for (int64_t b = b0; b < b1; b++) {
        float *restrict acc = out + b * dim;
        for (int64_t d = 0; d < dim; d++) acc[d] = 0.0f;
        int64_t count = 0;
        for (int64_t p = starts[b]; p < starts[b + 1]; p++) {
            BAG_PREFETCH(p + EMB__BAG_PF_DIST, all_end);
            const int64_t k = IDX(p);
            if (k == pad) continue;
            count++;
            const float *restrict w = weight + k * dim;
            if (!psw) {
                for (int64_t d = 0; d < dim; d++) acc[d] = acc[d] + w[d];
            } else if (fast) {
                const float s = psw[p];
                for (int64_t d = 0; d < dim; d++) acc[d] = fmaf(s, w[d], acc[d]);
            } else {
                const float s = psw[p];
                for (int64_t d = 0; d < dim; d++) acc[d] = acc[d] + w[d] * s;
            }
        }
        if (mean) {
            const float c = (float)(count > 1 ? count : 1);
            for (int64_t d = 0; d < dim; d++) acc[d] = acc[d] / c;
        }
    }
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

static inline __attribute__((always_inline)) void
bag_backward_groups_body(float *grad_weight, const float *grad_output, int64_t dim,
                                  const int64_t *keys, const int64_t *perm, const int64_t *o2b,
                                  const int64_t *bag_count, const float *psw, int64_t i0,
                                  int64_t i1, int64_t pad, bool scale_by_freq, float *acc) {
    int64_t i = i0;
    while (i < i1) {
        const int64_t k = keys[perm[i]];
        int64_t j = i + 1;
        while (j < i1 && keys[perm[j]] == k) j++;
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
            float *restrict w = grad_weight + k * dim;
            for (int64_t d = 0; d < dim; d++) w[d] = w[d] + a[d];
        }
        i = j;
    }
}

static inline __attribute__((always_inline)) void
bag_psw_grad_body(float *out, const float *grad_output, const float *weight,
                           int64_t dim, const void *idx, bool idx_i32, const int64_t *o2b,
                           int64_t p0, int64_t p1, int64_t pad) {
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

#undef IDX
#undef BAG_PREFETCH

#endif /* EMB_BAG_BODY_H */
