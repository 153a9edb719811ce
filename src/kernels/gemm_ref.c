/* Single-precision GEMM: the plain-C reference kernel and the thin CBLAS wrapper.
 * Row-major throughout; see gemm.h for the exact arithmetic. */
#include "gemm.h"

#include <limits.h>
#include <stddef.h>

#ifdef EMB_HAVE_CBLAS
#include <cblas.h>
#endif

/* Tile sizes: the no-transposed-B path keeps MR x NB partial sums in a stack tile (the
 * inner loop over columns vectorises, each element still sums p in order); the
 * transposed-B path keeps an MR x NR register tile of independent dot products. */
enum { MR = 4, NB = 64, NR = 4 };

static inline float load_a(bool trans_a, const float *a, int64_t lda, int64_t i, int64_t p) {
    return trans_a ? a[p * lda + i] : a[i * lda + p];
}

static inline void store_c(float *c, float v, float alpha, float beta) {
    if (alpha != 1.0f) v = alpha * v;
    if (beta == 0.0f)
        *c = v;
    else if (beta == 1.0f)
        *c = *c + v;
    else
        *c = v + beta * *c;
}

/* op(B) = B: B is [k, n], row p holds op(B)[p][0..n). */
static void rows_nn(bool trans_a, int64_t r0, int64_t r1, int64_t n, int64_t k, float alpha,
                    const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                    int64_t ldc) {
    float acc[MR][NB];
    for (int64_t i0 = r0; i0 < r1; i0 += MR) {
        int64_t mr = r1 - i0 < MR ? r1 - i0 : MR;
        for (int64_t j0 = 0; j0 < n; j0 += NB) {
            int64_t nb = n - j0 < NB ? n - j0 : NB;
            for (int64_t ii = 0; ii < mr; ii++)
                for (int64_t jj = 0; jj < nb; jj++) acc[ii][jj] = 0.0f;
            for (int64_t p = 0; p < k; p++) {
                const float *brow = b + p * ldb + j0;
                for (int64_t ii = 0; ii < mr; ii++) {
                    float av = load_a(trans_a, a, lda, i0 + ii, p);
                    float *ar = acc[ii];
                    for (int64_t jj = 0; jj < nb; jj++) ar[jj] = ar[jj] + av * brow[jj];
                }
            }
            for (int64_t ii = 0; ii < mr; ii++) {
                float *crow = c + (i0 + ii) * ldc + j0;
                for (int64_t jj = 0; jj < nb; jj++) store_c(&crow[jj], acc[ii][jj], alpha, beta);
            }
        }
    }
}

/* op(B) = B^T: B is stored [n, k], so op(B)[p][j] = b[j*ldb + p]. */
static void rows_nt(bool trans_a, int64_t r0, int64_t r1, int64_t n, int64_t k, float alpha,
                    const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                    int64_t ldc) {
    for (int64_t i0 = r0; i0 < r1; i0 += MR) {
        int64_t mr = r1 - i0 < MR ? r1 - i0 : MR;
        for (int64_t j0 = 0; j0 < n; j0 += NR) {
            int64_t nr = n - j0 < NR ? n - j0 : NR;
            float acc[MR][NR] = {{0}};
            if (mr == MR && nr == NR && !trans_a) {
                const float *a0 = a + i0 * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
                const float *b0 = b + j0 * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
                for (int64_t p = 0; p < k; p++) {
                    float x0 = a0[p], x1 = a1[p], x2 = a2[p], x3 = a3[p];
                    float y0 = b0[p], y1 = b1[p], y2 = b2[p], y3 = b3[p];
                    acc[0][0] = acc[0][0] + x0 * y0;
                    acc[0][1] = acc[0][1] + x0 * y1;
                    acc[0][2] = acc[0][2] + x0 * y2;
                    acc[0][3] = acc[0][3] + x0 * y3;
                    acc[1][0] = acc[1][0] + x1 * y0;
                    acc[1][1] = acc[1][1] + x1 * y1;
                    acc[1][2] = acc[1][2] + x1 * y2;
                    acc[1][3] = acc[1][3] + x1 * y3;
                    acc[2][0] = acc[2][0] + x2 * y0;
                    acc[2][1] = acc[2][1] + x2 * y1;
                    acc[2][2] = acc[2][2] + x2 * y2;
                    acc[2][3] = acc[2][3] + x2 * y3;
                    acc[3][0] = acc[3][0] + x3 * y0;
                    acc[3][1] = acc[3][1] + x3 * y1;
                    acc[3][2] = acc[3][2] + x3 * y2;
                    acc[3][3] = acc[3][3] + x3 * y3;
                }
            } else {
                for (int64_t p = 0; p < k; p++)
                    for (int64_t ii = 0; ii < mr; ii++) {
                        float av = load_a(trans_a, a, lda, i0 + ii, p);
                        for (int64_t jj = 0; jj < nr; jj++)
                            acc[ii][jj] = acc[ii][jj] + av * b[(j0 + jj) * ldb + p];
                    }
            }
            for (int64_t ii = 0; ii < mr; ii++) {
                float *crow = c + (i0 + ii) * ldc + j0;
                for (int64_t jj = 0; jj < nr; jj++) store_c(&crow[jj], acc[ii][jj], alpha, beta);
            }
        }
    }
}

void emb__sgemm_rows(bool trans_a, bool trans_b, int64_t r0, int64_t r1, int64_t n, int64_t k,
                     float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                     float beta, float *c, int64_t ldc) {
    if (r1 <= r0 || n <= 0) return;
    if (trans_b)
        rows_nt(trans_a, r0, r1, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else
        rows_nn(trans_a, r0, r1, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void emb__sgemm_ref(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                    int64_t ldc) {
    emb__sgemm_rows(trans_a, trans_b, 0, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool emb__gemm_have_cblas(void) {
#ifdef EMB_HAVE_CBLAS
    return true;
#else
    return false;
#endif
}

/* cblas_sgemm in either storage order, once every size is known to fit BLAS's int; false
 * without BLAS or when a size does not fit. Row-major, the empty cases BLAS would reject are
 * answered here (C empty: nothing to do; k == 0: the reference kernel scales C by beta). */
static bool blas_sgemm(bool col_major, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                       float beta, float *c, int64_t ldc) {
#ifdef EMB_HAVE_CBLAS
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX)
        return false;
    if (!col_major) {
        if (m <= 0 || n <= 0) return true; /* C is empty */
        if (k <= 0) {
            /* BLAS would reject the leading dimension of an empty A; the product is zero. */
            emb__sgemm_ref(trans_a, trans_b, m, n, 0, alpha, a, lda, b, ldb, beta, c, ldc);
            return true;
        }
    }
    cblas_sgemm(col_major ? CblasColMajor : CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
                (int)ldb, beta, c, (int)ldc);
    return true;
#else
    (void)col_major;
    (void)trans_a;
    (void)trans_b;
    (void)m;
    (void)n;
    (void)k;
    (void)alpha;
    (void)a;
    (void)lda;
    (void)b;
    (void)ldb;
    (void)beta;
    (void)c;
    (void)ldc;
    return false;
#endif
}

bool emb__sgemm_cblas(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      float *c, int64_t ldc) {
    return blas_sgemm(false, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool emb__sdot_cblas(int64_t n, const float *x, const float *y, float *dot) {
#ifdef EMB_HAVE_CBLAS
    if (n > INT_MAX) return false;
    *dot = n > 0 ? cblas_sdot((int)n, x, 1, y, 1) : 0.0f;
    return true;
#else
    (void)n;
    (void)x;
    (void)y;
    (void)dot;
    return false;
#endif
}

bool emb__sgemm_cblas_colmajor(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                               float alpha, const float *a, int64_t lda, const float *b,
                               int64_t ldb, float beta, float *c, int64_t ldc) {
    return blas_sgemm(true, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
