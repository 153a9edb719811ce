/* src/kernels/lookup_body.h: the bodies of the row gather, norm and max_norm renorm kernels
 * (see lookup.h), written once and instantiated by lookup_ref.c (baseline ISA, where the
 * 2-norm's fmaf() is a libm call), lookup_avx2.c and lookup_avx512.c (where it is one vfmadd
 * instruction, and the gather's row pieces are wider moves).
 * fmaf is exactly rounded either way and -ffp-contract=off forbids other fusion, so all
 * give the same bits. Private to those files. */
#ifndef EMB_LOOKUP_BODY_H
#define EMB_LOOKUP_BODY_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define EMB__LOOKUP_INLINE static inline __attribute__((always_inline))
#else
#define EMB__LOOKUP_INLINE static inline
#endif

/* Prefetches the first cache lines of the weight row `row` (at most 2048 bytes) into all
 * cache levels. */
EMB__LOOKUP_INLINE void prefetch_row(const float *weight, int64_t dim, int64_t row) {
#if defined(__GNUC__)
    const char *p = (const char *)(weight + row * dim);
    int64_t bytes = dim * (int64_t)sizeof(float);
    if (bytes > 2048) bytes = 2048;
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 3);
#else
    (void)weight;
    (void)dim;
    (void)row;
#endif
}

/* Copies one row. Rows whose size is a multiple of 16 bytes and at most 256 bytes are
 * copied in fixed pieces the compiler inlines as vector moves (64 bytes, then 16): a libc
 * memcpy call per short row costs more than the copy itself, and with AVX-512 a 64-byte
 * piece is one move (faster than 16-byte pieces; docs/PERFORMANCE.md, "Tuning constants"). */
EMB__LOOKUP_INLINE void copy_row(float *dst, const float *src, size_t row_bytes, int small) {
    if (small) {
        char *d = (char *)dst;
        const char *s = (const char *)src;
        size_t k = 0;
        for (; k + 64 <= row_bytes; k += 64) memcpy(d + k, s + k, 64);
        for (; k < row_bytes; k += 16) memcpy(d + k, s + k, 16);
    } else {
        memcpy(dst, src, row_bytes);
    }
}

/* The gather out[i] = weight[idx[i]] for i in [begin, end), the same loop for both index
 * types; `small` is hoisted so each loop is specialised. */
#define EMB__LOOKUP_LOOP(small)                                                                    \
    do {                                                                                           \
        int64_t i = begin;                                                                         \
        if (prefetch > 0) {                                                                        \
            for (int64_t pf_end = end - prefetch; i < pf_end; i++) {                               \
                prefetch_row(weight, dim, (int64_t)idx[i + prefetch]);                             \
                copy_row(out + i * dim, weight + (int64_t)idx[i] * dim, row_bytes, small);         \
            }                                                                                      \
        }                                                                                          \
        for (; i < end; i++)                                                                       \
            copy_row(out + i * dim, weight + (int64_t)idx[i] * dim, row_bytes, small);             \
    } while (0)

#define EMB__LOOKUP_BODY                                                                           \
    const size_t row_bytes = (size_t)dim * sizeof(float);                                          \
    if (row_bytes % 16 == 0 && row_bytes <= 256)                                                   \
        EMB__LOOKUP_LOOP(1);                                                                       \
    else                                                                                           \
        EMB__LOOKUP_LOOP(0);

EMB__LOOKUP_INLINE void lookup_rows_i64_body(float *out, const float *weight, int64_t dim,
                                             const int64_t *idx, int64_t begin, int64_t end,
                                             int prefetch){EMB__LOOKUP_BODY}

EMB__LOOKUP_INLINE
    void lookup_rows_i32_body(float *out, const float *weight, int64_t dim, const int32_t *idx,
                              int64_t begin, int64_t end, int prefetch) {
    EMB__LOOKUP_BODY
}

#undef EMB__LOOKUP_LOOP
#undef EMB__LOOKUP_BODY

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
                                         int64_t begin, int64_t end, double max_norm, double p) {
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
#define EMB__LOOKUP_INSTANTIATE(SUFFIX, ATTR)                                                      \
    ATTR void emb__lookup_rows_i64_##SUFFIX(float *out, const float *weight, int64_t dim,          \
                                            const int64_t *idx, int64_t begin, int64_t end,        \
                                            int prefetch) {                                        \
        lookup_rows_i64_body(out, weight, dim, idx, begin, end, prefetch);                         \
    }                                                                                              \
    ATTR void emb__lookup_rows_i32_##SUFFIX(float *out, const float *weight, int64_t dim,          \
                                            const int32_t *idx, int64_t begin, int64_t end,        \
                                            int prefetch) {                                        \
        lookup_rows_i32_body(out, weight, dim, idx, begin, end, prefetch);                         \
    }                                                                                              \
    ATTR float emb__row_norm2_f32_##SUFFIX(const float *x, int64_t n) {                            \
        return row_norm2_body(x, n);                                                               \
    }                                                                                              \
    ATTR float emb__row_norm_f32_##SUFFIX(const float *x, int64_t n, double p) {                   \
        return row_norm_body(x, n, p);                                                             \
    }                                                                                              \
    ATTR void emb__renorm_rows_f32_##SUFFIX(float *weight, int64_t dim, const int64_t *rows,       \
                                            int64_t begin, int64_t end, double max_norm,           \
                                            double p) {                                            \
        renorm_rows_body(weight, dim, rows, begin, end, max_norm, p);                              \
    }

#endif /* EMB_LOOKUP_BODY_H */
