/* src/kernels/score_body.h: the SIMD score kernel (contract in score.h), written once for
 * any vector width. The including file defines the vector type and operations and the
 * register block, then includes this header once:
 *
 *   SCORE_NAME        the function to define; SCORE_ATTR its target attribute
 *   SCORE_V, SCORE_W  the vector type and its number of float lanes
 *   SCORE_ZERO(), SCORE_LOAD(p), SCORE_BCAST(p), SCORE_FMA(a, b, c) (a * b + c, one
 *   rounding), SCORE_STORE(p, v)
 *   SCORE_MR          queries per register block (<= EMB__SCORE_MR_MAX)
 *   SCORE_NV          vectors of rows per register block (NR = NV * W <= EMB__SCORE_NR_MAX)
 *
 * The queries are packed in groups of MR, element-major (qp[p][MR]); the rows of a panel of
 * NR rows and up to KC elements are packed element-major too (rp[p][NR]), zero-padded past
 * the last row. The register block holds MR x NV accumulator vectors: for each element p it
 * loads the NV row vectors once and, per query, broadcasts q[i][p] and does NV fused
 * multiply-adds. Lane j of accumulator (i, v) is therefore the chain
 * acc = fma(q[i][p], r[j][p], acc) over p ascending, the order of score.h; a panel deeper
 * than KC stores its partial sums and reloads them (exact float copies), so the chain is the
 * same. Private to score_avx2.c and score_avx512.c. */
#include "score.h"

#include <stdint.h>

enum { SCORE_NR = SCORE_NV * SCORE_W };
_Static_assert(SCORE_MR <= EMB__SCORE_MR_MAX && SCORE_NR <= EMB__SCORE_NR_MAX,
               "register block larger than the scratch allows");

/* cb [MR][NR] (+)= qp [kc][MR] x rp [kc][NR], lane by lane; first: start from +0.0. */
static inline __attribute__((always_inline)) SCORE_ATTR void score_micro(float *restrict cb,
                                                                         const float *restrict qp,
                                                                         const float *restrict rp,
                                                                         int64_t kc, int first) {
    SCORE_V acc[SCORE_MR][SCORE_NV];
#pragma GCC unroll 8
    for (int i = 0; i < SCORE_MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < SCORE_NV; v++)
            acc[i][v] = first ? SCORE_ZERO() : SCORE_LOAD(cb + (i * SCORE_NV + v) * SCORE_W);
    for (int64_t p = 0; p < kc; p++) {
        SCORE_V b[SCORE_NV];
#pragma GCC unroll 4
        for (int v = 0; v < SCORE_NV; v++) b[v] = SCORE_LOAD(rp + p * SCORE_NR + v * SCORE_W);
#pragma GCC unroll 8
        for (int i = 0; i < SCORE_MR; i++) {
            const SCORE_V a = SCORE_BCAST(qp + p * SCORE_MR + i);
#pragma GCC unroll 4
            for (int v = 0; v < SCORE_NV; v++) acc[i][v] = SCORE_FMA(a, b[v], acc[i][v]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < SCORE_MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < SCORE_NV; v++)
            SCORE_STORE(cb + (i * SCORE_NV + v) * SCORE_W, acc[i][v]);
}

SCORE_ATTR void SCORE_NAME(float *c, int64_t ldc, const float *q, int64_t nq, const float *r,
                           int64_t nr, int64_t d, float *scratch) {
    if (nq <= 0 || nr <= 0) return;
    if (d <= 0) { /* empty sums */
        for (int64_t i = 0; i < nq; i++)
            for (int64_t j = 0; j < nr; j++) c[i * ldc + j] = 0.0f;
        return;
    }
    const int64_t ng = (nq + SCORE_MR - 1) / SCORE_MR;
    float *restrict qp = scratch;                                /* [ng][d][MR] */
    float *restrict rp = qp + ng * SCORE_MR * d;                 /* [KC][NR] */
    float *restrict cb = rp + (int64_t)EMB__SCORE_KC * SCORE_NR; /* [ng][MR][NR] */
    for (int64_t g = 0; g < ng; g++)
        for (int i = 0; i < SCORE_MR; i++) {
            const int64_t qi = g * SCORE_MR + i;
            float *dst = qp + g * SCORE_MR * d + i;
            if (qi < nq)
                for (int64_t p = 0; p < d; p++) dst[p * SCORE_MR] = q[qi * d + p];
            else
                for (int64_t p = 0; p < d; p++) dst[p * SCORE_MR] = 0.0f;
        }
    for (int64_t j0 = 0; j0 < nr; j0 += SCORE_NR) {
        const int64_t nj = nr - j0 < SCORE_NR ? nr - j0 : SCORE_NR;
        for (int64_t k0 = 0; k0 < d; k0 += EMB__SCORE_KC) {
            const int64_t kc = d - k0 < EMB__SCORE_KC ? d - k0 : EMB__SCORE_KC;
            for (int64_t jj = 0; jj < SCORE_NR; jj++) {
                float *dst = rp + jj;
                if (jj < nj) {
                    const float *src = r + (j0 + jj) * d + k0;
                    for (int64_t p = 0; p < kc; p++) dst[p * SCORE_NR] = src[p];
                } else {
                    for (int64_t p = 0; p < kc; p++) dst[p * SCORE_NR] = 0.0f;
                }
            }
            for (int64_t g = 0; g < ng; g++)
                score_micro(cb + g * SCORE_MR * SCORE_NR, qp + g * SCORE_MR * d + k0 * SCORE_MR, rp,
                            kc, k0 == 0);
        }
        for (int64_t i = 0; i < nq; i++) {
            const float *src =
                cb + (i / SCORE_MR) * SCORE_MR * SCORE_NR + (i % SCORE_MR) * SCORE_NR;
            float *dst = c + i * ldc + j0;
            for (int64_t jj = 0; jj < nj; jj++) dst[jj] = src[jj];
        }
    }
}
