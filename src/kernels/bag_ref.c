/* src/kernels/bag_ref.c: scalar EmbeddingBag kernels (the reference), contracts in
 * bag_kernels.h; the bodies shared with the AVX2 and AVX-512 twins are in bag_body.h. */
#include "bag_kernels.h"
#include "bag_body.h"
#include "nan_rules.h"

#include <math.h>
#include <string.h>

void emb__bag_pool_ref(float *out, const float *weight, int64_t dim, const void *idx, bool idx_i32,
                       const int64_t *starts, int64_t b0, int64_t b1, const float *psw, int64_t pad,
                       bool mean) {
    bag_pool_body(out, weight, dim, idx, idx_i32, starts, b0, b1, psw, pad, mean);
}

void emb__bag_max_ref(float *out, int64_t *max_idx, const float *weight, int64_t dim,
                      const void *idx, bool idx_i32, const int64_t *starts, int64_t b0, int64_t b1,
                      int64_t pad) {
    bag_max_body(out, max_idx, weight, dim, idx, idx_i32, starts, b0, b1, pad);
}

void emb__bag_backward_groups_ref(float *grad_weight, const float *grad_output, int64_t dim,
                                  const int64_t *keys, const int64_t *perm, const int64_t *o2b,
                                  const int64_t *bag_count, const float *psw, int64_t i0,
                                  int64_t i1, int64_t pad, bool scale_by_freq, bool overwrite,
                                  int64_t r0, int64_t r1, float *acc) {
    bag_backward_groups_body(grad_weight, grad_output, dim, keys, perm, o2b, bag_count, psw, i0, i1,
                             pad, scale_by_freq, overwrite, r0, r1, acc);
}

void emb__bag_psw_grad_ref(float *out, const float *grad_output, const float *weight, int64_t dim,
                           const void *idx, bool idx_i32, const int64_t *o2b, int64_t p0,
                           int64_t p1, int64_t pad) {
    bag_psw_grad_body(out, grad_output, weight, dim, idx, idx_i32, o2b, p0, p1, pad);
}

const emb__bag_kernel_table emb__bag_kernels_ref = {
    emb__bag_pool_ref,
    emb__bag_max_ref,
    emb__bag_backward_groups_ref,
    emb__bag_psw_grad_ref,
};

#define IDX(p) (idx_i32 ? (int64_t)((const int32_t *)idx)[p] : ((const int64_t *)idx)[p])

void emb__bag_max_backward_ref(float *grad_weight, const float *grad_output, const int64_t *max_idx,
                               const int64_t *bag_count, int64_t num_bags, int64_t dim, int64_t c0,
                               int64_t c1, float *acc, unsigned char *mark, int64_t *touched) {
    for (int64_t d = c0; d < c1; d++) {
        int64_t nt = 0;
        for (int64_t b = 0; b < num_bags; b++) {
            if (bag_count[b] == 0) continue;
            const int64_t r = max_idx[b * dim + d];
            const float g = grad_output[b * dim + d];
            if (!mark[r]) {
                mark[r] = 1;
                touched[nt++] = r;
                acc[r] = 0.0f + g;
            } else {
                acc[r] = acc[r] + g;
            }
        }
        for (int64_t t = 0; t < nt; t++) {
            const int64_t r = touched[t];
            grad_weight[r * dim + d] = grad_weight[r * dim + d] + acc[r];
            mark[r] = 0;
        }
    }
}

/* Whether PyTorch 1.13's CPU multiply index_grad * per_sample_weights.unsqueeze(1) (the sparse
 * backward's [n, dim] times [n, 1]) returns the weight's NaN, rather than the gradient's, for
 * element d of position p when both are NaN. Which one comes out depends on the element's
 * place in its compiled loop, as measured against torch 1.13 (x86-64, AVX2): with dim >= 2,
 * per row, the 16-wide vector part and, of the rest R = dim % 16, the first element and the
 * next 4 * floor((R - 1) / 4) give the weight's NaN, the last (R - 1) % 4 the gradient's. With
 * dim == 1 the product is one contiguous loop over the n positions: the vector part (16 per
 * block) gives the weight's; of the rest, a block of 8 gives the weight's, then a block of 4
 * the gradient's, then the first one or two elements the weight's and a third the gradient's,
 * except that a remainder of 2 or 3 alone gives the weight's and then the gradient's. */
static bool psw_nan_wins(int64_t p, int64_t d, int64_t dim, int64_t n) {
    const int64_t len = dim >= 2 ? dim : n, i = dim >= 2 ? d : p;
    const int64_t vec = len - len % 16, r = len % 16;
    if (i < vec) return true;
    int64_t j = i - vec;
    if (dim >= 2) return j == 0 || j - 1 < 4 * ((r - 1) / 4);
    if (r >= 8) {
        if (j < 8) return true;
        j -= 8;
    }
    const int64_t rest = r >= 8 ? r - 8 : r;
    if (rest >= 4) {
        if (j < 4) return false;
        j -= 4;
    }
    return r >= 4 ? j < 2 : j < 1;
}

int64_t emb__bag_sparse_gather_ref(int64_t *out_idx, float *out_val, const void *idx, bool idx_i32,
                                   const int64_t *starts, int64_t num_bags,
                                   const float *grad_output, int64_t dim, const float *psw,
                                   bool mean, int64_t pad, int64_t n) {
    int64_t m = 0;
    for (int64_t b = 0; b < num_bags; b++) {
        /* dim 0: grad_output has no elements and may be NULL */
        const float *restrict g = dim ? grad_output + b * dim : grad_output;
        float f = 1.0f;
        if (mean) {
            int64_t count = 0;
            for (int64_t p = starts[b]; p < starts[b + 1]; p++) count += IDX(p) != pad;
            if (count == 0) continue;
            f = 1.0f / (float)count;
        }
        for (int64_t p = starts[b]; p < starts[b + 1]; p++) {
            const int64_t k = IDX(p);
            if (k == pad) continue;
            out_idx[m++] = k;
            if (dim == 0) continue; /* no values: out_val and grad_output may be NULL */
            float *restrict v = out_val + (m - 1) * dim;
            if (psw) {
                const float s = psw[p];
                for (int64_t d = 0; d < dim; d++) v[d] = g[d] * s;
                if (emb__any_nan(v, dim))
                    for (int64_t d = 0; d < dim; d++)
                        if (v[d] != v[d])
                            v[d] = psw_nan_wins(p, d, dim, n) ? emb__nan_of2(s, g[d])
                                                              : emb__nan_of2(g[d], s);
            } else if (mean) {
                for (int64_t d = 0; d < dim; d++) v[d] = g[d] * f;
            } else {
                memcpy(v, g, (size_t)dim * sizeof(float));
            }
        }
    }
    return m;
}
