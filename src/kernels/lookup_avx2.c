/* src/kernels/lookup_avx2.c: the AVX2+FMA twins of the norm and renorm kernels (the bodies
 * of lookup_body.h; same bits as the _ref kernels). Only dispatch.c hands them out, and
 * only on CPUs that support AVX2 and FMA. */
#include "dispatch.h"

#if EMB__KERNELS_AVX2
#include "lookup_body.h"

EMB__TARGET_AVX2 float emb__row_norm2_f32_avx2(const float *x, int64_t n) {
    return row_norm2_body(x, n);
}

EMB__TARGET_AVX2 float emb__row_norm_f32_avx2(const float *x, int64_t n, double p) {
    return row_norm_body(x, n, p);
}

EMB__TARGET_AVX2 void emb__renorm_rows_f32_avx2(float *weight, int64_t dim,
                                                const int64_t *rows, int64_t begin,
                                                int64_t end, double max_norm, double p) {
    renorm_rows_body(weight, dim, rows, begin, end, max_norm, p);
}
#endif
