/* src/kernels/sgns_x86.h: what the AVX2 and AVX-512 twins of the word2vec step share
 * (sgns_avx2.c, sgns_avx512.c): the pairwise sum of eight lanes, three at a time, and the
 * element-by-element tail of the fused update pass. */
#ifndef EMB_KERNELS_SGNS_X86_H
#define EMB_KERNELS_SGNS_X86_H

#include "sgns.h"

#if EMB__X86
#include <immintrin.h>
#include <math.h>

/* The pairwise sum ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) of the eight lanes of a, b and c at
 * once (hadd adds neighbours; the two halves are added last): out[0..3) = a, b, c. */
EMB__TARGET_AVX2 static inline void sgns_hsum3(__m256 a, __m256 b, __m256 c, float *out) {
    __m256 q = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, c));
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1));
    float o[4];
    _mm_storeu_ps(o, r);
    out[0] = o[0], out[1] = o[1], out[2] = o[2];
}

/* The tail of three dot products side by side: out[j] += x[k] * y_j[k] (fmaf) for the
 * elements [k, n), each an fmaf chain in element order. */
static inline void sgns_tail3(const float *x, const float *y0, const float *y1, const float *y2,
                              int64_t k, int64_t n, float *out) {
    for (; k < n; k++) {
        out[0] = fmaf(x[k], y0[k], out[0]);
        out[1] = fmaf(x[k], y1[k], out[1]);
        out[2] = fmaf(x[k], y2[k], out[2]);
    }
}

/* One step of sgns_fma_rows (row[0..dim) = fmaf(g[q], src[q][k], row[k]) for q in [0, c) in
 * order, element by element): R registers of W elements at once, so that R independent
 * chains of fmadd cover its latency, while R * W elements remain; save, when not NULL,
 * receives the row's values on entry (the same loads). V is the register type, LD, ST, FMA
 * and SET1 its load, store, fmadd and broadcast. */
#define EMB__SGNS_FMA_BLOCK(R, W, V, LD, ST, FMA, SET1)                                            \
    for (; k + (W) * (R) <= dim; k += (W) * (R)) {                                                 \
        V v[R];                                                                                    \
        for (int b = 0; b < (R); b++) v[b] = LD(row + k + (W)*b);                                  \
        if (save)                                                                                  \
            for (int b = 0; b < (R); b++) ST(save + k + (W)*b, v[b]);                              \
        for (int q = 0; q < c; q++) {                                                              \
            const V gq = SET1(g[q]);                                                               \
            const float *sq = src[q] + k;                                                          \
            for (int b = 0; b < (R); b++) v[b] = FMA(gq, LD(sq + (W)*b), v[b]);                    \
        }                                                                                          \
        for (int b = 0; b < (R); b++) ST(row + k + (W)*b, v[b]);                                   \
    }

/* One block of the fused update pass (sgns_body.h's sgns_pair_batched) at element k, one
 * register wide: e = sum_j g_j y_j (j in order, from zero, with fmaf), every y_j += g_j x,
 * then x += e (e_out NULL) or e stored to e_out. V is the register type, LD and ST its load
 * and store (a masked pair for a partial block), FMA, SET1, ZERO and ADD its operations. */
#define EMB__SGNS_UPDATE_BLOCK(V, LD, ST, FMA, SET1, ZERO, ADD)                                    \
    do {                                                                                           \
        V xv_ = LD(x + k), ev_ = ZERO();                                                           \
        for (int j = 0; j < t; j++) {                                                              \
            const V gv_ = SET1(g[j]), yv_ = LD(rows[j] + k);                                       \
            ev_ = FMA(gv_, yv_, ev_);                                                              \
            ST(rows[j] + k, FMA(gv_, xv_, yv_));                                                   \
        }                                                                                          \
        if (e_out)                                                                                 \
            ST(e_out + k, ev_);                                                                    \
        else                                                                                       \
            ST(x + k, ADD(xv_, ev_));                                                              \
    } while (0)

/* Elements [k, dim) of sgns_fma_rows, one at a time. */
static inline void sgns_fma_tail(float *row, float *save, const float *g, const float *const *src,
                                 int c, int64_t k, int64_t dim) {
    for (; k < dim; k++) {
        float v = row[k];
        if (save) save[k] = v;
        for (int q = 0; q < c; q++) v = fmaf(g[q], src[q][k], v);
        row[k] = v;
    }
}

/* Elements [k, dim) of the fused update pass (sgns_body.h's sgns_pair_batched), one at a
 * time: e = sum_j g_j y_j, y_j += g_j x, then x += e or e to e_out. */
static inline void sgns_update_tail(float *x, float *const *rows, int t, const float *g, int64_t k,
                                    int64_t dim, float *e_out) {
    for (; k < dim; k++) {
        float xk = x[k], e = 0.0f;
        for (int j = 0; j < t; j++) {
            float y = rows[j][k];
            e = fmaf(g[j], y, e);
            rows[j][k] = fmaf(g[j], xk, y);
        }
        if (e_out)
            e_out[k] = e;
        else
            x[k] = xk + e;
    }
}
#endif

#endif /* EMB_KERNELS_SGNS_X86_H */
