/* src/kernels/lookup_ref.c: reference (scalar) embedding lookup, norm and renorm kernels;
 * see lookup.h. The bodies (lookup_body.h) have AVX2+FMA and AVX-512 twins in lookup_avx2.c
 * and lookup_avx512.c; dispatch.c chooses. */
#include "lookup.h"
#include "lookup_body.h"

#include <string.h>

void emb__lookup_rows_i64(float *out, const float *weight, int64_t dim, const int64_t *idx,
                          int64_t begin, int64_t end, int prefetch) {
    lookup_rows_i64_body(out, weight, dim, idx, begin, end, prefetch);
}

void emb__lookup_rows_i32(float *out, const float *weight, int64_t dim, const int32_t *idx,
                          int64_t begin, int64_t end, int prefetch) {
    lookup_rows_i32_body(out, weight, dim, idx, begin, end, prefetch);
}

float emb__row_norm2_f32_ref(const float *x, int64_t n) {
    return row_norm2_body(x, n);
}

float emb__row_norm_f32_ref(const float *x, int64_t n, double p) {
    return row_norm_body(x, n, p);
}

void emb__renorm_rows_f32_ref(float *weight, int64_t dim, const int64_t *rows, int64_t begin,
                              int64_t end, double max_norm, double p) {
    renorm_rows_body(weight, dim, rows, begin, end, max_norm, p);
}
