/* src/kernels/lookup.h: embedding lookup (row gather) and max_norm renormalisation kernels.
 *
 * Plain functions over raw arrays. The _ref kernels are declared here; their AVX2+FMA and
 * AVX-512 twins, and the choice between them, are in dispatch.h. They never validate and
 * never allocate: the module in src/nn/embedding.c checks every index and shape once, then
 * calls these on position or row ranges (and owns the threading). Numerics are PyTorch 1.13's
 * (docs/semantics.md §4, §5).
 */
#ifndef EMB_LOOKUP_H
#define EMB_LOOKUP_H

#include <stdint.h>

/* out[i, :] = weight[idx[i], :] for positions i in [begin, end), as bitwise row copies.
 *   out:    [n, dim] float32 (row i at out + i*dim)
 *   weight: [V, dim] float32, every idx[i] in [0, V)
 * prefetch: how many positions ahead to prefetch weight rows (0: no prefetch); worth it
 * when the table does not fit in cache. */
void emb__lookup_rows_i64(float *out, const float *weight, int64_t dim, const int64_t *idx,
                          int64_t begin, int64_t end, int prefetch);
void emb__lookup_rows_i32(float *out, const float *weight, int64_t dim, const int32_t *idx,
                          int64_t begin, int64_t end, int prefetch);
typedef void (*emb__lookup_rows_i64_fn)(float *out, const float *weight, int64_t dim,
                                        const int64_t *idx, int64_t begin, int64_t end,
                                        int prefetch);
typedef void (*emb__lookup_rows_i32_fn)(float *out, const float *weight, int64_t dim,
                                        const int32_t *idx, int64_t begin, int64_t end,
                                        int prefetch);

/* PyTorch's float32 norm of x[0..n) for norm_type p (any real p, +-INFINITY, 0):
 *   p == 2:    the 8-lane fmaf accumulation of docs/semantics.md §5.2, then sqrtf;
 *   p == 1:    sum of |x| in order;  p == INFINITY: max |x|;  p == -INFINITY: min |x|
 *              (NaN propagates); p == 0: number of non-zeros (as a float);
 *   otherwise: powf(sum of powf(|x|, (float)p), 1.0f / (float)p), summed in order.
 * n == 0 gives 0 (INFINITY for p < 0), as PyTorch fills an empty reduction. */
float emb__row_norm_f32_ref(const float *x, int64_t n, double p);
typedef float (*emb__row_norm_fn)(const float *x, int64_t n, double p);

/* The 2-norm alone (docs/semantics.md §5.2). */
float emb__row_norm2_f32_ref(const float *x, int64_t n);
typedef float (*emb__row_norm2_fn)(const float *x, int64_t n);

/* embedding_renorm_ on the rows rows[begin..end) of weight [V, dim]: for each row r, if
 * (double)norm(weight[r]) > max_norm, weight[r] *= (float)(max_norm / (norm + 1e-7)), one
 * rounding per element. Rows must be distinct for the result to match PyTorch (it processes
 * each distinct row once); distinct rows make disjoint ranges safe to run in parallel. */
void emb__renorm_rows_f32_ref(float *weight, int64_t dim, const int64_t *rows, int64_t begin,
                              int64_t end, double max_norm, double p);
typedef void (*emb__renorm_rows_fn)(float *weight, int64_t dim, const int64_t *rows, int64_t begin,
                                    int64_t end, double max_norm, double p);

#endif /* EMB_LOOKUP_H */
