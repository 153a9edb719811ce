/* src/kernels/bag_kernels.h: EmbeddingBag kernels (docs/semantics.md §14).
 *
 * Plain functions over raw arrays. They never validate and never allocate: the module
 * (src/nn/embedding_bag.c) checks every index, offset and shape once, resolves the bags
 * into `starts` (bag b covers positions [starts[b], starts[b+1])), owns the scratch memory
 * and calls these on bag, position, group or column ranges (it owns the threading).
 * Indices are int64, or int32 when idx_i32. `pad` is the padding row, or EMB_PADDING_NONE
 * (INT64_MIN, which matches no index). Loops over the embedding dimension are elementwise,
 * so vectorising them changes no bit; -ffp-contract=off keeps every add unfused and every
 * fused multiply-add is an explicit fmaf. */
#ifndef EMB_BAG_KERNELS_H
#define EMB_BAG_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

/* Sum or mean pooling of bags [b0, b1) into out [*, dim] (rows overwritten):
 *   acc = +0.0; for each non-padding position p of the bag, ascending:
 *     no psw:                  acc = acc + w[idx[p]]
 *     psw, pad == NONE:        acc = fmaf(psw[p], w[idx[p]], acc)      (PyTorch fast path)
 *     psw, padding given:      acc = acc + (float)(w[idx[p]] * psw[p]) (PyTorch slow path)
 *   mean: out = acc / (float)max(count, 1), count = non-padding positions. */
void emb__bag_pool_ref(float *out, const float *weight, int64_t dim, const void *idx, bool idx_i32,
                       const int64_t *starts, int64_t b0, int64_t b1, const float *psw, int64_t pad,
                       bool mean);

/* Max pooling of bags [b0, b1): per column, the first non-padding position's value and
 * index; a later position replaces them when its value is strictly greater, or is NaN
 * while the current value is not (NaN propagates, the first NaN wins). Empty and
 * all-padding bags give 0 and index 0. max_idx [*, dim] may be NULL. */
void emb__bag_max_ref(float *out, int64_t *max_idx, const float *weight, int64_t dim,
                      const void *idx, bool idx_i32, const int64_t *starts, int64_t b0, int64_t b1,
                      int64_t pad);

/* Dense backward of sum/mean for the groups in perm[i0, i1) (perm: positions sorted by
 * index in PyTorch's unstable-sort order; [i0, i1) starts and ends on group boundaries).
 * For each group of equal index k != pad: acc = +0.0, then for each position p in perm
 * order: scale = psw ? psw[p] : 1.0 (double); scale_by_freq: scale /= group size; mean
 * (bag_count non-NULL) and bag_count[bag] != 0: scale /= bag_count[bag];
 * acc = fmaf(grad_output[bag], (float)scale, acc) with bag = o2b[p]. Then
 * grad_weight[k] += acc. keys[p] is the index of position p. acc: dim floats.
 * overwrite: every row of [r0, r1) (which must hold the groups' keys) is written instead,
 * without reading grad_weight: 0.0f + acc for the groups' rows, +0.0 for the others and
 * the padding row (the bits of the above on a zeroed gradient; streaming stores as in
 * row_store.h). Without overwrite, r0 and r1 are unused. */
void emb__bag_backward_groups_ref(float *grad_weight, const float *grad_output, int64_t dim,
                                  const int64_t *keys, const int64_t *perm, const int64_t *o2b,
                                  const int64_t *bag_count, const float *psw, int64_t i0,
                                  int64_t i1, int64_t pad, bool scale_by_freq, bool overwrite,
                                  int64_t r0, int64_t r1, float *acc);

/* Dense backward of max for the columns [c0, c1): per column d, over bags b ascending with
 * bag_count[b] != 0, fresh[max_idx[b][d]] += grad_output[b][d] (each touched row's fresh
 * value starts at +0.0), then grad_weight[r][d] += fresh[r] for the touched rows.
 * Scratch: acc [num_rows] floats, mark [num_rows] bytes all zero on entry (left zero),
 * touched [num_bags]. */
void emb__bag_max_backward_ref(float *grad_weight, const float *grad_output, const int64_t *max_idx,
                               const int64_t *bag_count, int64_t num_bags, int64_t dim, int64_t c0,
                               int64_t c1, float *acc, unsigned char *mark, int64_t *touched);

/* Gradient of the per-sample weights for positions [p0, p1): out[p] = sum over d, in
 * order from +0.0, of (grad_output[o2b[p]][d] * w[idx[p]][d]) (each product rounded), or
 * 0 when o2b[p] < 0 (no bag) or idx[p] == pad. */
void emb__bag_psw_grad_ref(float *out, const float *grad_output, const float *weight, int64_t dim,
                           const void *idx, bool idx_i32, const int64_t *o2b, int64_t p0,
                           int64_t p1, int64_t pad);

/* The entries of the sparse backward, bags [0, num_bags) in input order, padding skipped:
 * out_idx[m] = idx[p], out_val[m] = grad_output[bag] (sum), * psw[p] (weighted sum), or
 * * (1.0f / (float)count) (mean, count = the bag's non-padding positions). Returns m. Where
 * the gradient and the weight are both NaN, the NaN is the one PyTorch returns (which
 * depends on the column, dim, and, when dim is 1, on the position p among the n positions
 * of the input; bag_ref.c). */
int64_t emb__bag_sparse_gather_ref(int64_t *out_idx, float *out_val, const void *idx, bool idx_i32,
                                   const int64_t *starts, int64_t num_bags,
                                   const float *grad_output, int64_t dim, const float *psw,
                                   bool mean, int64_t pad, int64_t n);

/* The kernels that have AVX2+FMA and AVX-512 twins (bag_avx2.c, bag_avx512.c), as a table;
 * the module takes it from emb__kernels()->bag (kernels/dispatch.h). All variants give the
 * same bits. */
typedef struct emb__bag_kernel_table {
    void (*pool)(float *out, const float *weight, int64_t dim, const void *idx, bool idx_i32,
                 const int64_t *starts, int64_t b0, int64_t b1, const float *psw, int64_t pad,
                 bool mean);
    void (*max)(float *out, int64_t *max_idx, const float *weight, int64_t dim, const void *idx,
                bool idx_i32, const int64_t *starts, int64_t b0, int64_t b1, int64_t pad);
    void (*backward_groups)(float *grad_weight, const float *grad_output, int64_t dim,
                            const int64_t *keys, const int64_t *perm, const int64_t *o2b,
                            const int64_t *bag_count, const float *psw, int64_t i0, int64_t i1,
                            int64_t pad, bool scale_by_freq, bool overwrite, int64_t r0, int64_t r1,
                            float *acc);
    void (*psw_grad)(float *out, const float *grad_output, const float *weight, int64_t dim,
                     const void *idx, bool idx_i32, const int64_t *o2b, int64_t p0, int64_t p1,
                     int64_t pad);
} emb__bag_kernel_table;

/* The scalar reference table (always built). */
extern const emb__bag_kernel_table emb__bag_kernels_ref;

#endif /* EMB_BAG_KERNELS_H */
