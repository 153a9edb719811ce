/* src/kernels/lookup_body.h: the bodies of the norm and max_norm renorm kernels (see
 * lookup.h), written once and instantiated by lookup_ref.c (baseline ISA, where the 2-norm's
 * fmaf() is a libm call) and lookup_avx2.c (AVX2+FMA, where it is one vfmadd instruction).
 * fmaf is exactly rounded either way and -ffp-contract=off forbids other fusion, so both
 * give the same bits. Private to those two files. */
#ifndef EMB_LOOKUP_BODY_H
#define EMB_LOOKUP_BODY_H

#include <math.h>
#include <stdint.h>

#if defined(__GNUC__)
#define EMB__LOOKUP_INLINE static inline __attribute__((always_inline))
#else
#define EMB__LOOKUP_INLINE static inline
#endif

/* The 2-norm of docs/semantics.md §5.2: eight fmaf lanes over the full groups of 8, lanes
 * folded left to right, then the tail: its first 4*floor(t/4) elements as s + (x*x) with
 * the square rounded, the rest as fmaf(x, x, s). */
EMB__LOOKUP_INLINE float row_norm2_body(const float *x, int64_t n) {
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t full = n - n % 8;
    for (int64_t d = 0; d < full; d += 8)
        for (int j = 0; j < 8; j++) lane[j] = fmaf(x[d + j], x[d + j], lane[j]);
    float s = lane[0];
    for (int j = 1; j < 8; j++) s = s + lane[j];
    int64_t t = n - full;
    int64_t split = full + 4 * (t / 4);
    for (int64_t d = full; d < split; d++) {
        float sq = x[d] * x[d];
        s = s + sq;
    }
    for (int64_t d = split; d < n; d++) s = fmaf(x[d], x[d], s);
    return sqrtf(s);
}

EMB__LOOKUP_INLINE float row_norm_body(const float *x, int64_t n, double p) {
    if (n <= 0) return p < 0 ? INFINITY : 0.0f;
    if (p == 2.0) return row_norm2_body(x, n);
    if (p == 1.0) {
        float s = 0.0f;
        for (int64_t i = 0; i < n; i++) s = s + fabsf(x[i]);
        return s;
    }
    if (p == 0.0) {
        float s = 0.0f;
        for (int64_t i = 0; i < n; i++) s = s + (x[i] == 0.0f ? 0.0f : 1.0f);
        return s;
    }
    if (p == INFINITY) {
        float m = 0.0f;
        for (int64_t i = 0; i < n; i++) {
            float a = fabsf(x[i]);
            if (isnan(m)) break;
            m = m > a ? m : a; /* a NaN `a` is taken, then kept */
        }
        return m;
    }
    if (p == -INFINITY) {
        float m = INFINITY;
        for (int64_t i = 0; i < n; i++) {
            float a = fabsf(x[i]);
            if (isnan(m)) break;
            m = m < a ? m : a;
        }
        return m;
    }
    const float pf = (float)p;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s = s + powf(fabsf(x[i]), pf);
    return powf(s, 1.0f / pf);
}

EMB__LOOKUP_INLINE void renorm_rows_body(float *weight, int64_t dim, const int64_t *rows,
                                         int64_t begin, int64_t end, double max_norm,
                                         double p) {
    for (int64_t k = begin; k < end; k++) {
        float *row = weight + rows[k] * dim;
        double norm = (double)row_norm_body(row, dim, p);
        if (norm > max_norm) {
            const float scale = (float)(max_norm / (norm + 1e-7));
            for (int64_t i = 0; i < dim; i++) row[i] = row[i] * scale;
        }
    }
}

/* The twins for one target (lookup_avx2.c, lookup_avx512.c). */
#define EMB__LOOKUP_INSTANTIATE(SUFFIX, ATTR)                                               \
    ATTR float emb__row_norm2_f32_##SUFFIX(const float *x, int64_t n) {                     \
        return row_norm2_body(x, n);                                                        \
    }                                                                                       \
    ATTR float emb__row_norm_f32_##SUFFIX(const float *x, int64_t n, double p) {            \
        return row_norm_body(x, n, p);                                                      \
    }                                                                                       \
    ATTR void emb__renorm_rows_f32_##SUFFIX(float *weight, int64_t dim, const int64_t *rows, \
                                            int64_t begin, int64_t end, double max_norm,    \
                                            double p) {                                     \
        renorm_rows_body(weight, dim, rows, begin, end, max_norm, p);                       \
    }

#endif /* EMB_LOOKUP_BODY_H */
