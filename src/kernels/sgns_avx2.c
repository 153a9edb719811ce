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

/* x0 . y_j and x1 . y_j for the three rows y_j side by side, each in sgns_dot's order (the
 * same bits): a block of 2 x 3 scores in registers (12 accumulators: each 16-element block
 * runs its first set, then its second), every row loaded once per block. out0[0..3) and
 * out1[0..3). */
EMB__TARGET_AVX2 static inline void sgns_dot2x3(const float *x0, const float *x1,
                                                const float *const *y, int64_t n, float *out0,
                                                float *out1) {
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00;
    __m256 b00 = a00, b01 = a00, b02 = a00, b10 = a00, b11 = a00, b12 = a00;
    const float *y0 = y[0], *y1 = y[1], *y2 = y[2];
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m256 p = _mm256_loadu_ps(x0 + k), q = _mm256_loadu_ps(x1 + k), v;
        v = _mm256_loadu_ps(y0 + k), a00 = _mm256_fmadd_ps(p, v, a00),
        a10 = _mm256_fmadd_ps(q, v, a10);
        v = _mm256_loadu_ps(y1 + k), a01 = _mm256_fmadd_ps(p, v, a01),
        a11 = _mm256_fmadd_ps(q, v, a11);
        v = _mm256_loadu_ps(y2 + k), a02 = _mm256_fmadd_ps(p, v, a02),
        a12 = _mm256_fmadd_ps(q, v, a12);
        p = _mm256_loadu_ps(x0 + k + 8), q = _mm256_loadu_ps(x1 + k + 8);
        v = _mm256_loadu_ps(y0 + k + 8), b00 = _mm256_fmadd_ps(p, v, b00),
        b10 = _mm256_fmadd_ps(q, v, b10);
        v = _mm256_loadu_ps(y1 + k + 8), b01 = _mm256_fmadd_ps(p, v, b01),
        b11 = _mm256_fmadd_ps(q, v, b11);
        v = _mm256_loadu_ps(y2 + k + 8), b02 = _mm256_fmadd_ps(p, v, b02),
        b12 = _mm256_fmadd_ps(q, v, b12);
    }
    if (k + 8 <= n) {
        __m256 p = _mm256_loadu_ps(x0 + k), q = _mm256_loadu_ps(x1 + k), v;
        v = _mm256_loadu_ps(y0 + k), a00 = _mm256_fmadd_ps(p, v, a00),
        a10 = _mm256_fmadd_ps(q, v, a10);
        v = _mm256_loadu_ps(y1 + k), a01 = _mm256_fmadd_ps(p, v, a01),
        a11 = _mm256_fmadd_ps(q, v, a11);
        v = _mm256_loadu_ps(y2 + k), a02 = _mm256_fmadd_ps(p, v, a02),
        a12 = _mm256_fmadd_ps(q, v, a12);
        k += 8;
    }
    sgns_hsum3(_mm256_add_ps(a00, b00), _mm256_add_ps(a01, b01), _mm256_add_ps(a02, b02), out0);
    sgns_hsum3(_mm256_add_ps(a10, b10), _mm256_add_ps(a11, b11), _mm256_add_ps(a12, b12), out1);
    for (; k < n; k++)
        for (int j = 0; j < 3; j++) {
            out0[j] = fmaf(x0[k], y[j][k], out0[j]);
            out1[j] = fmaf(x1[k], y[j][k], out1[j]);
        }
}

#define EMB__SGNS_PAIR_BATCHED 1
#define EMB__SGNS_PAIR_MAX     16
#define EMB__SGNS_WINDOW_MAX   32
static bool sgns_pair_batched(float *x, float *const *rows, int t, int64_t dim, float alpha,
                              const float *sigmoid, float *e_out);
static bool sgns_window_blocked(float *syn0, const emb__sgns_out *out, int64_t dim,
                                const int32_t *ctx, int m, const int32_t *tgt, int n, float alpha,
                                const float *sigmoid, float *scratch);

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
    if (k + 4 <= dim) { /* four more elements in half a register (dim 100: the tail) */
        __m128 xv = _mm_loadu_ps(x + k), ev = _mm_setzero_ps();
        for (int j = 0; j < t; j++) {
            __m128 gq = _mm256_castps256_ps128(gv[j]), yv = _mm_loadu_ps(rows[j] + k);
            ev = _mm_fmadd_ps(gq, yv, ev);
            _mm_storeu_ps(rows[j] + k, _mm_fmadd_ps(gq, xv, yv));
        }
        if (e_out)
            _mm_storeu_ps(e_out + k, ev);
        else
            _mm_storeu_ps(x + k, _mm_add_ps(xv, ev));
        k += 4;
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

/* row[0..dim) = fmaf(g[q], src[q][k], row[k]) for q in [0, c) in order, element by element,
 * eight elements a register, eight registers at once (eight independent chains of fmadd
 * cover the fmadd's latency; fewer would wait on it), then four, one and half a register.
 * save, when not NULL, receives the row's values on entry (the same loads). */
#define EMB__FMA_BLOCK(R)                                                                          \
    for (; k + 8 * (R) <= dim; k += 8 * (R)) {                                                     \
        __m256 v[R];                                                                               \
        for (int b = 0; b < (R); b++) v[b] = _mm256_loadu_ps(row + k + 8 * b);                     \
        if (save)                                                                                  \
            for (int b = 0; b < (R); b++) _mm256_storeu_ps(save + k + 8 * b, v[b]);                \
        for (int q = 0; q < c; q++) {                                                              \
            const __m256 gq = _mm256_set1_ps(g[q]);                                                \
            const float *sq = src[q] + k;                                                          \
            for (int b = 0; b < (R); b++)                                                          \
                v[b] = _mm256_fmadd_ps(gq, _mm256_loadu_ps(sq + 8 * b), v[b]);                     \
        }                                                                                          \
        for (int b = 0; b < (R); b++) _mm256_storeu_ps(row + k + 8 * b, v[b]);                     \
    }
EMB__TARGET_AVX2 static inline void sgns_fma_rows(float *row, float *save, const float *g,
                                                  const float *const *src, int c, int64_t dim) {
    int64_t k = 0;
    EMB__FMA_BLOCK(8)
    EMB__FMA_BLOCK(4)
    EMB__FMA_BLOCK(1)
    if (k + 4 <= dim) {
        __m128 v = _mm_loadu_ps(row + k);
        if (save) _mm_storeu_ps(save + k, v);
        for (int q = 0; q < c; q++)
            v = _mm_fmadd_ps(_mm_set1_ps(g[q]), _mm_loadu_ps(src[q] + k), v);
        _mm_storeu_ps(row + k, v);
        k += 4;
    }
    for (; k < dim; k++) {
        float v = row[k];
        if (save) save[k] = v;
        for (int q = 0; q < c; q++) v = fmaf(g[q], src[q][k], v);
        row[k] = v;
    }
}
#undef EMB__FMA_BLOCK

/* The skip-gram step with shared negatives (m > 1 context rows against n targets, sgns.h)
 * without copying the rows: the m x n scores in blocks of 2 x 3 in registers (sgns_dot2x3,
 * the dot product's order), then the output rows, each read once and updated with every
 * nonzero G[i][j] in i order while the input rows are still as on entry (each target row's
 * value on entry saved in scratch as it is first read; a repeated negative uses its first
 * occurrence's), then the input rows, each read once and updated in j order from the saved
 * targets. Per element, the operations of the reference in the same order: the same bits. */
EMB__TARGET_AVX2 static bool sgns_window_blocked(float *syn0, const emb__sgns_out *out, int64_t dim,
                                                 const int32_t *ctx, int m, const int32_t *tgt,
                                                 int n, float alpha, const float *sigmoid,
                                                 float *scratch) {
    float *G = scratch, *Ysave = scratch + (int64_t)m * n;
    const float *x[EMB__SGNS_WINDOW_MAX], *y[EMB__SGNS_PAIR_MAX + 2], *src[EMB__SGNS_WINDOW_MAX];
    int first[EMB__SGNS_PAIR_MAX];
    float g[EMB__SGNS_WINDOW_MAX], d0[EMB__SGNS_PAIR_MAX + 2], d1[EMB__SGNS_PAIR_MAX + 2];
    bool finite = true;
    for (int i = 0; i < m; i++) x[i] = syn0 + (int64_t)ctx[i] * dim;
    for (int j = 0; j < n; j++) {
        y[j] = emb__sgns_out_row(out, tgt[j], dim);
        first[j] = j;
        for (int q = 0; q < j; q++)
            if (tgt[q] == tgt[j]) {
                first[j] = q;
                break;
            }
    }
    y[n] = y[n + 1] = y[n - 1]; /* a last group of one or two repeats the last row */
    for (int i = 0; i < m; i += 2) {
        for (int j = 0; j < n; j += 3) {
            if (i + 1 < m)
                sgns_dot2x3(x[i], x[i + 1], y + j, dim, d0 + j, d1 + j);
            else
                sgns_dot3(x[i], y[j], y[j + 1], y[j + 2], dim, d0 + j);
        }
        for (int r = i; r < m && r < i + 2; r++)
            for (int j = 0; j < n; j++)
                G[r * n + j] = j > 0 && tgt[j] == tgt[0]
                                   ? 0.0f
                                   : sgns_grad(r == i ? d0[j] : d1[j], j == 0 ? 1.0f : 0.0f, alpha,
                                               sigmoid, &finite);
    }
    for (int j = 0; j < n; j++) {
        if (j > 0 && tgt[j] == tgt[0]) continue;
        float *row = emb__sgns_out_row(out, tgt[j], dim);
        int c = 0;
        for (int i = 0; i < m; i++)
            if (G[i * n + j] != 0.0f) g[c] = G[i * n + j], src[c++] = x[i];
        /* the row's value on entry saved as it is read (a repeat's is its first's) */
        sgns_fma_rows(row, first[j] == j ? Ysave + (int64_t)j * dim : NULL, g, src, c, dim);
    }
    for (int i = 0; i < m; i++) {
        int c = 0;
        for (int j = 0; j < n; j++)
            if (G[i * n + j] != 0.0f)
                g[c] = G[i * n + j], src[c++] = Ysave + (int64_t)first[j] * dim;
        sgns_fma_rows(syn0 + (int64_t)ctx[i] * dim, NULL, g, src, c, dim);
    }
    return finite;
}
#endif
