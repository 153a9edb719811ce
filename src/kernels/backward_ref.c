/* src/kernels/backward_ref.c: scalar reference kernels of the embedding backward and of
 * sparse row gradients. See backward.h for the contracts. Loops over the embedding dimension
 * are elementwise (every lane keeps its own sequential order), so the compiler may vectorise
 * them without changing a bit; -ffp-contract=off keeps the adds unfused. The dense row
 * kernel's AVX2+FMA and AVX-512 twins are backward_avx2.c and backward_avx512.c (the same
 * body, backward_body.h); dispatch.c chooses between them. */
#include "backward.h"
#include "backward_body.h"

#include <string.h>

void emb__embedding_backward_rows_ref(float *grad_weight, const float *grad_output, int64_t dim,
                                      const int64_t *offsets, const int64_t *order,
                                      int64_t row_begin, int64_t row_end, bool scale_by_freq,
                                      bool overwrite, float *acc) {
    backward_rows_body(grad_weight, grad_output, dim, offsets, order, row_begin, row_end,
                       scale_by_freq, overwrite, acc);
}

int64_t emb__sparse_gather_ref(int64_t *out_idx, float *out_val, const void *idx, bool idx_is_i32,
                               const float *grad_output, int64_t n, int64_t dim, int64_t skip) {
    int64_t m = 0;
    const size_t row_bytes = (size_t)dim * sizeof(float);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = idx_is_i32 ? (int64_t)((const int32_t *)idx)[i] : ((const int64_t *)idx)[i];
        if (k == skip) continue;
        out_idx[m] = k;
        if (row_bytes) memcpy(out_val + m * dim, grad_output + i * dim, row_bytes);
        m++;
    }
    return m;
}

int64_t emb__sparse_merge_ref(int64_t *r_idx, float *r_val, const int64_t *t_idx,
                              const float *t_val, int64_t t_n, const int64_t *s_idx,
                              const float *s_val, int64_t s_n, int64_t dim) {
    int64_t r = 0, ti = 0, si = 0;
    while (ti < t_n || si < s_n) {
        int cmp; /* > 0: take t; < 0: take s; 0: both */
        if (ti >= t_n)
            cmp = -1;
        else if (si >= s_n)
            cmp = 1;
        else
            cmp = t_idx[ti] < s_idx[si] ? 1 : (t_idx[ti] > s_idx[si] ? -1 : 0);
        float *restrict out = r_val + r * dim;
        if (cmp >= 0) {
            const float *restrict a = t_val + ti * dim;
            r_idx[r] = t_idx[ti++];
            for (int64_t d = 0; d < dim; d++) out[d] = 0.0f + a[d];
            if (cmp == 0) {
                const float *restrict b = s_val + si * dim;
                si++;
                for (int64_t d = 0; d < dim; d++) /* the new gradient's NaN first */
                    out[d] = emb__pick2(out[d] + b[d], b[d], out[d]);
            }
        } else {
            const float *restrict b = s_val + si * dim;
            r_idx[r] = s_idx[si++];
            for (int64_t d = 0; d < dim; d++) out[d] = 0.0f + b[d];
        }
        r++;
    }
    return r;
}

int64_t emb__sparse_coalesce_ref(int64_t *out_idx, float *out_val, const int64_t *idx,
                                 const float *val, const int64_t *perm, int64_t n, int64_t dim) {
    int64_t u = -1;
    const size_t row_bytes = (size_t)dim * sizeof(float);
    for (int64_t j = 0; j < n; j++) {
        const int64_t p = perm[j];
        const float *restrict v = val + p * dim;
        if (u >= 0 && idx[p] == out_idx[u]) {
            float *restrict o = out_val + u * dim;
            for (int64_t d = 0; d < dim; d++) o[d] = emb__pick2(o[d] + v[d], v[d], o[d]);
        } else {
            u++;
            out_idx[u] = idx[p];
            if (row_bytes) memcpy(out_val + u * dim, v, row_bytes);
        }
    }
    return u + 1;
}

void emb__sparse_add_to_dense_ref(float *dense, const int64_t *idx, const float *val, int64_t n,
                                  int64_t dim, int64_t col_begin, int64_t col_end) {
    for (int64_t k = 0; k < n; k++) {
        float *restrict w = dense + idx[k] * dim;
        const float *restrict v = val + k * dim;
        for (int64_t c = col_begin; c < col_end; c++) /* the entry's NaN first, as saxpy */
            w[c] = emb__pick2(w[c] + v[c], v[c], w[c]);
    }
}
