/* src/kernels/lookup_ref.c: reference (scalar) embedding lookup, norm and renorm kernels;
 * see lookup.h. The lookup is also the production kernel: it is memory-bound row copying,
 * so there is nothing for a SIMD variant to win. The norm and renorm bodies
 * (lookup_body.h) have an AVX2+FMA twin in lookup_avx2.c; dispatch.c chooses. */
#include "lookup.h"
#include "lookup_body.h"

#include <string.h>

/* Prefetches the first cache lines of the weight row `row` (at most 2048 bytes) into all
 * cache levels. */
static inline void prefetch_row(const float *weight, int64_t dim, int64_t row) {
#if defined(__GNUC__)
    const char *p = (const char *)(weight + row * dim);
    int64_t bytes = dim * (int64_t)sizeof(float);
    if (bytes > 2048) bytes = 2048;
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 3);
#else
    (void)weight; (void)dim; (void)row;
#endif
}

/* Copies one row. Rows whose size is a multiple of 16 bytes and at most 256 bytes are
 * copied in fixed 16-byte pieces the compiler inlines as vector moves: a libc memcpy call
 * per short row costs more than the copy itself. */
static inline void copy_row(float *dst, const float *src, size_t row_bytes, int small) {
    if (small) {
        char *d = (char *)dst;
        const char *s = (const char *)src;
        for (size_t k = 0; k < row_bytes; k += 16) memcpy(d + k, s + k, 16);
    } else {
        memcpy(dst, src, row_bytes);
    }
}

/* The same loop for both index types; `small` is hoisted so each loop is specialised. */
#define EMB__LOOKUP_LOOP(small)                                                            \
    do {                                                                                   \
        int64_t i = begin;                                                                 \
        if (prefetch > 0) {                                                                \
            for (int64_t pf_end = end - prefetch; i < pf_end; i++) {                       \
                prefetch_row(weight, dim, (int64_t)idx[i + prefetch]);                     \
                copy_row(out + i * dim, weight + (int64_t)idx[i] * dim, row_bytes, small); \
            }                                                                              \
        }                                                                                  \
        for (; i < end; i++)                                                               \
            copy_row(out + i * dim, weight + (int64_t)idx[i] * dim, row_bytes, small);     \
    } while (0)

#define EMB__LOOKUP_BODY                                                                   \
    const size_t row_bytes = (size_t)dim * sizeof(float);                                  \
    if (row_bytes % 16 == 0 && row_bytes <= 256)                                           \
        EMB__LOOKUP_LOOP(1);                                                               \
    else                                                                                   \
        EMB__LOOKUP_LOOP(0);

void emb__lookup_rows_i64(float *out, const float *weight, int64_t dim, const int64_t *idx,
                          int64_t begin, int64_t end, int prefetch) {
    EMB__LOOKUP_BODY
}

void emb__lookup_rows_i32(float *out, const float *weight, int64_t dim, const int32_t *idx,
                          int64_t begin, int64_t end, int prefetch) {
    EMB__LOOKUP_BODY
}

#undef EMB__LOOKUP_LOOP
#undef EMB__LOOKUP_BODY

float emb__row_norm2_f32_ref(const float *x, int64_t n) { return row_norm2_body(x, n); }

float emb__row_norm_f32_ref(const float *x, int64_t n, double p) {
    return row_norm_body(x, n, p);
}

void emb__renorm_rows_f32_ref(float *weight, int64_t dim, const int64_t *rows, int64_t begin,
                              int64_t end, double max_norm, double p) {
    renorm_rows_body(weight, dim, rows, begin, end, max_norm, p);
}
