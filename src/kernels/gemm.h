/* src/kernels/gemm.h: single-precision matrix products for the dense layer (nn.Linear).
 *
 *   C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C[m, n]
 *
 * all row-major, op(X) = X or X^T. When beta == 0, C is not read (it may hold NaN), as in
 * BLAS. Kernels never validate and never allocate; the caller checks the shapes and owns
 * threading (it may call a kernel on disjoint row ranges of C from several threads: see
 * emb__sgemm_rows). */
#ifndef EMB_GEMM_H
#define EMB_GEMM_H

#include <stdbool.h>
#include <stdint.h>

/* The plain-C reference: C is computed in tiles; every element is
 *   acc = 0; for p in 0..k: acc = acc + opA[i][p] * opB[p][j]   (two roundings per step)
 *   C[i][j] = alpha == 1 ? acc : alpha * acc;  then  beta == 0 ? that : that + beta*C[i][j]
 * (beta == 1: C + acc, one add), so the summation order is always p ascending and the
 * result never depends on tiling or on how rows are split between threads. */
void emb__sgemm_ref(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                    int64_t ldc);

/* The same product on rows [r0, r1) of C only (op(A) rows r0..r1). */
void emb__sgemm_rows(bool trans_a, bool trans_b, int64_t r0, int64_t r1, int64_t n, int64_t k,
                     float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                     float beta, float *c, int64_t ldc);

/* cblas_sgemm when the library was built with CBLAS (EMB_HAVE_CBLAS) and every size and
 * leading dimension fits the BLAS integer type; returns false, without touching C, when
 * it cannot serve the call (no CBLAS in this build, or sizes too large). m, n, k may be 0. */
bool emb__sgemm_cblas(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      float *c, int64_t ldc);

/* The same through cblas_sgemm(CblasColMajor, ...), i.e. exactly the Fortran sgemm_ call
 * with these arguments (column-major A [lda x ...], B, C; trans_* as BLAS's 'T'/'N').
 * Returns false, without touching C, when the build has no CBLAS or a size does not fit
 * the BLAS integer type. No special cases: the caller passes what it wants BLAS to see. */
bool emb__sgemm_cblas_colmajor(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                               float alpha, const float *a, int64_t lda, const float *b,
                               int64_t ldb, float beta, float *c, int64_t ldc);

/* *dot = cblas_sdot(n, x, 1, y, 1): the call PyTorch's dot_impl makes for contiguous float
 * vectors (x first), which the BLAS sums in its own order (OpenBLAS 0.3.21's Haswell/Zen
 * kernel: four 8-lane FMA accumulators over the first 32*floor(n/32) elements, reduced as
 * sdot_microk_haswell-2.c does, the rest added in double). Returns false, without touching
 * *dot, when the build has no CBLAS or n does not fit the BLAS integer type. */
bool emb__sdot_cblas(int64_t n, const float *x, const float *y, float *dot);

/* True when this build has CBLAS. */
bool emb__gemm_have_cblas(void);

#endif /* EMB_GEMM_H */
