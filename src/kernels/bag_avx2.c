/* src/kernels/bag_avx2.c: the AVX2+FMA twins of the EmbeddingBag kernels (same bodies as
 * the _ref kernels, see bag_body.h; same bits). Only dispatch.c hands them out, and only on
 * CPUs that support AVX2 and FMA. */
#include "dispatch.h"

#if EMB__KERNELS_AVX2
#include "bag_body.h"

EMB__TARGET_AVX2 static void pool_avx2(float *out, const float *weight, int64_t dim,
                                       const void *idx, bool idx_i32, const int64_t *starts,
                                       int64_t b0, int64_t b1, const float *psw, int64_t pad,
                                       bool mean) {
    bag_pool_body(out, weight, dim, idx, idx_i32, starts, b0, b1, psw, pad, mean);
}

EMB__TARGET_AVX2 static void max_avx2(float *out, int64_t *max_idx, const float *weight,
                                      int64_t dim, const void *idx, bool idx_i32,
                                      const int64_t *starts, int64_t b0, int64_t b1,
                                      int64_t pad) {
    bag_max_body(out, max_idx, weight, dim, idx, idx_i32, starts, b0, b1, pad);
}

EMB__TARGET_AVX2 static void groups_avx2(float *grad_weight, const float *grad_output,
                                         int64_t dim, const int64_t *keys, const int64_t *perm,
                                         const int64_t *o2b, const int64_t *bag_count,
                                         const float *psw, int64_t i0, int64_t i1, int64_t pad,
                                         bool scale_by_freq, float *acc) {
    bag_backward_groups_body(grad_weight, grad_output, dim, keys, perm, o2b, bag_count, psw,
                             i0, i1, pad, scale_by_freq, acc);
}

EMB__TARGET_AVX2 static void psw_grad_avx2(float *out, const float *grad_output,
                                           const float *weight, int64_t dim, const void *idx,
                                           bool idx_i32, const int64_t *o2b, int64_t p0,
                                           int64_t p1, int64_t pad) {
    bag_psw_grad_body(out, grad_output, weight, dim, idx, idx_i32, o2b, p0, p1, pad);
}

const emb__bag_kernel_table emb__bag_kernels_avx2 = {
    pool_avx2,
    max_avx2,
    groups_avx2,
    psw_grad_avx2,
};
#endif
