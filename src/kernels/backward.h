/* src/kernels/backward.h: kernels of the embedding backward and of sparse row gradients
 * (docs/semantics.md §6.1, §6.3, §6.5). Plain arrays and scalar types
 * only: nothing here knows the public API's types.
 *
 * Kernels never validate and never allocate: the modules (src/nn/embedding_backward.c,
 * src/nn/sparse_grad.c) check everything once, own the scratch memory and split the work
 * into row or column ranges for threads. All arithmetic is plain float32 adds, or fmaf where
 * PyTorch fuses, so that results are PyTorch's bit for bit. */
#ifndef EMB_KERNELS_BACKWARD_H
#define EMB_KERNELS_BACKWARD_H

#include <stdbool.h>
#include <stdint.h>

/* Dense backward for the rows [row_begin, row_end) of grad_weight [*, dim].
 *
 * The contributions of row r are the grad_output rows order[offsets[r] .. offsets[r+1]),
 * in increasing position order (a stable CSR bucketing of the positions by row). For each
 * row with at least one contribution:
 *   acc = +0.0; for each position p in order: acc = acc + g[p]
 *     (with scale_by_freq: acc = fmaf(g[p], (float)(1.0 / count), acc),
 *      count = offsets[r+1] - offsets[r]);
 *   grad_weight[r] = grad_weight[r] + acc.
 * That is exactly PyTorch's fresh gradient (summed from +0.0 in position order) followed by
 * AccumulateGrad's `grad += new`. Rows without contributions are not touched.
 * overwrite: every row of the range is written instead, without reading grad_weight:
 * grad_weight[r] = 0.0f + acc, and +0.0 for rows without contributions (the bits of the
 * above on a zeroed grad_weight). Rows of a multiple of 16 floats in a 64-byte aligned
 * grad_weight are written with non-temporal stores when the range holds 4 MiB or more
 * (fenced before returning).
 * acc: scratch of `dim` floats owned by the calling thread. */
void emb__embedding_backward_rows_ref(float *grad_weight, const float *grad_output, int64_t dim,
                                      const int64_t *offsets, const int64_t *order,
                                      int64_t row_begin, int64_t row_end, bool scale_by_freq,
                                      bool overwrite, float *acc);

typedef void (*emb__backward_rows_fn)(float *grad_weight, const float *grad_output, int64_t dim,
                                      const int64_t *offsets, const int64_t *order,
                                      int64_t row_begin, int64_t row_end, bool scale_by_freq,
                                      bool overwrite, float *acc);

/* Sparse backward gather: for positions i in [0, n) in order whose index is not `skip`
 * (EMB_PADDING_NONE skips nothing), appends the index to out_idx and the grad_output row
 * [dim] to out_val (bitwise copy). idx is int32 when idx_is_i32, int64 otherwise. Returns
 * the number of entries written. */
int64_t emb__sparse_gather_ref(int64_t *out_idx, float *out_val, const void *idx, bool idx_is_i32,
                               const float *grad_output, int64_t n, int64_t dim, int64_t skip);

/* PyTorch's sparse `t + s` for two sparse gradients whose values are contiguous (CPU
 * add_out_sparse_contiguous): a single merge pass over both entry lists in their stored
 * order. At each step the two head rows are compared: the smaller one is emitted and its
 * list advances; equal rows are emitted once with both values summed and both advance.
 * Every emitted value starts from +0.0: r = 0 + t, r = r + s. Returns the number of entries written
 * to r_idx/r_val (at most t_n + s_n). */
int64_t emb__sparse_merge_ref(int64_t *r_idx, float *r_val, const int64_t *t_idx,
                              const float *t_val, int64_t t_n, const int64_t *s_idx,
                              const float *s_val, int64_t s_n, int64_t dim);

/* coalesce(): with perm the unstable argsort of idx[0..n), walks the entries in perm order;
 * the first entry of each row is copied bitwise, later ones are added with plain float adds.
 * Writes the unique rows ascending to out_idx/out_val and returns their number. */
int64_t emb__sparse_coalesce_ref(int64_t *out_idx, float *out_val, const int64_t *idx,
                                 const float *val, const int64_t *perm, int64_t n, int64_t dim);

/* dense[idx[k]][c] += val[k][c] for k in [0, n) in order, for columns c in
 * [col_begin, col_end) only (threads own disjoint column ranges). dense has `dim` columns. */
void emb__sparse_add_to_dense_ref(float *dense, const int64_t *idx, const float *val, int64_t n,
                                  int64_t dim, int64_t col_begin, int64_t col_end);

#endif /* EMB_KERNELS_BACKWARD_H */
