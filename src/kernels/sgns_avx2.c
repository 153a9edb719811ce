/* The AVX2+FMA twin of the word2vec step (sgns.h): the same body, with the dot product's
 * eight lanes in one register. Bit-identical to sgns_ref.c. */
#include "sgns.h"

#if EMB__X86
#include <immintrin.h>
#include <math.h>

EMB__TARGET_AVX2 static inline float sgns_dot(const float *a, const float *b, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), acc1);
    }
    if (k + 8 <= n) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc0);
        k += 8;
    }
    float l[8];
    _mm256_storeu_ps(l, _mm256_add_ps(acc0, acc1));
    float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (; k < n; k++) s = fmaf(a[k], b[k], s);
    return s;
}

/* The pairwise sum ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) of the eight lanes of a, b and c at
 * once (hadd adds neighbours; the two halves are added last): out[0..3) = a, b, c. */
EMB__TARGET_AVX2 static inline void sgns_hsum3(__m256 a, __m256 b, __m256 c, float *out) {
    __m256 q = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, c));
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1));
    float o[4];
    _mm_storeu_ps(o, r);
    out[0] = o[0], out[1] = o[1], out[2] = o[2];
}

/* x . y0, x . y1, x . y2 side by side, each in sgns_dot's order (the same bits): the three
 * rows' loads and fmadd chains overlap instead of waiting one dot product after another. */
EMB__TARGET_AVX2 static inline void sgns_dot3(const float *x, const float *y0, const float *y1,
                                              const float *y2, int64_t n, float *out) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
    __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m256 x0 = _mm256_loadu_ps(x + k), x1 = _mm256_loadu_ps(x + k + 8);
        a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y0 + k), a0);
        a1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y0 + k + 8), a1);
        b0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y1 + k), b0);
        b1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y1 + k + 8), b1);
        c0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y2 + k), c0);
        c1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y2 + k + 8), c1);
    }
    if (k + 8 <= n) {
        __m256 x0 = _mm256_loadu_ps(x + k);
        a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y0 + k), a0);
        b0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y1 + k), b0);
        c0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y2 + k), c0);
        k += 8;
    }
    sgns_hsum3(_mm256_add_ps(a0, a1), _mm256_add_ps(b0, b1), _mm256_add_ps(c0, c1), out);
    for (; k < n; k++) {
        out[0] = fmaf(x[k], y0[k], out[0]);
        out[1] = fmaf(x[k], y1[k], out[1]);
        out[2] = fmaf(x[k], y2[k], out[2]);
    }
}

/* x . rows[j] for j in [0, t), three at a time (a last group of one or two repeats its last
 * row): out[0..t) (out has room for t + 2). */
EMB__TARGET_AVX2 static inline void sgns_dots(const float *x, const float *const *rows, int t,
                                              int64_t dim, float *out) {
    for (int j = 0; j < t; j += 3) {
        const float *y1 = rows[j + 1 < t ? j + 1 : t - 1], *y2 = rows[j + 2 < t ? j + 2 : t - 1];
        sgns_dot3(x, rows[j], y1, y2, dim, out + j);
    }
}

#define EMB__SGNS_PAIR_BATCHED 1
#define EMB__SGNS_PAIR_MAX     16
static bool sgns_pair_batched(float *x, float *const *rows, int t, int64_t dim, float alpha,
                              const float *sigmoid, float *e_out);

#define EMB__SGNS_NAME emb__sgns_step_avx2
#define EMB__SGNS_ATTR EMB__TARGET_AVX2
#include "sgns_body.h"

/* One input x (a skip-gram context row, or CBOW's combined context h) against t trained
 * targets that are distinct rows (rows[0] the true word): the scores first, then one pass
 * that, for each block of 8 elements, accumulates e = sum_j g_j y_j (j in order, from zero,
 * with fmaf), updates every y_j += g_j x, and finally x += e (e_out NULL) or stores e to
 * e_out (CBOW, which adds it to every context row): per element, the operations of the
 * in-place loop in the same order, so the same bits, with the targets' rows fetched and
 * scored side by side (sgns_dot3) instead of one after another. */
EMB__TARGET_AVX2 static bool sgns_pair_batched(float *x, float *const *rows, int t, int64_t dim,
                                               float alpha, const float *sigmoid, float *e_out) {
    float g[EMB__SGNS_PAIR_MAX + 2];
    __m256 gv[EMB__SGNS_PAIR_MAX];
    bool finite = true;
    sgns_dots(x, (const float *const *)rows, t, dim, g);
    for (int j = 0; j < t; j++) {
        g[j] = sgns_grad(g[j], j == 0 ? 1.0f : 0.0f, alpha, sigmoid, &finite);
        gv[j] = _mm256_set1_ps(g[j]);
    }
    int64_t k = 0;
    for (; k + 8 <= dim; k += 8) {
        __m256 xv = _mm256_loadu_ps(x + k), ev = _mm256_setzero_ps();
        for (int j = 0; j < t; j++) {
            __m256 yv = _mm256_loadu_ps(rows[j] + k);
            ev = _mm256_fmadd_ps(gv[j], yv, ev);
            _mm256_storeu_ps(rows[j] + k, _mm256_fmadd_ps(gv[j], xv, yv));
        }
        if (e_out)
            _mm256_storeu_ps(e_out + k, ev);
        else
            _mm256_storeu_ps(x + k, _mm256_add_ps(xv, ev));
    }
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
    return finite;
}
#endif
