/* The AVX2+FMA twin of the word2vec step (sgns.h): the same body, with each of the dot
 * product's two sets of eight lanes in one register. Bit-identical to sgns_ref.c. */
#include "sgns.h"
#include "sgns_x86.h"

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
    sgns_tail3(x, y0, y1, y2, k, n, out);
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
    sgns_tail3(x0, y0, y1, y2, k, n, out0);
    sgns_tail3(x1, y0, y1, y2, k, n, out1);
}

#define EMB__SGNS_PAIR_MAX   16
#define EMB__SGNS_WINDOW_MAX 32

/* The update pass of sgns_pair_batched (sgns_body.h): blocks of 8 elements, then half a
 * register (dim 100: the tail), then element by element. */
EMB__TARGET_AVX2 static inline void sgns_update_pass(float *x, float *const *rows, int t,
                                                     const float *g, int64_t dim, float *e_out) {
    int64_t k = 0;
    for (; k + 8 <= dim; k += 8)
        EMB__SGNS_UPDATE_BLOCK(__m256, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_fmadd_ps,
                               _mm256_set1_ps, _mm256_setzero_ps, _mm256_add_ps);
    if (k + 4 <= dim) {
        EMB__SGNS_UPDATE_BLOCK(__m128, _mm_loadu_ps, _mm_storeu_ps, _mm_fmadd_ps, _mm_set1_ps,
                               _mm_setzero_ps, _mm_add_ps);
        k += 4;
    }
    sgns_update_tail(x, rows, t, g, k, dim, e_out);
}

/* row[0..dim) = fmaf(g[q], src[q][k], row[k]) for q in [0, c) in order, element by element,
 * eight elements a register, eight registers at once (eight independent chains of fmadd
 * cover the fmadd's latency; fewer would wait on it), then four, one and half a register,
 * then single elements.
 * save, when not NULL, receives the row's values on entry (the same loads). */
EMB__TARGET_AVX2 static inline void sgns_fma_rows(float *row, float *save, const float *g,
                                                  const float *const *src, int c, int64_t dim) {
    int64_t k = 0;
    EMB__SGNS_FMA_BLOCK(8, 8, __m256, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_fmadd_ps,
                        _mm256_set1_ps)
    EMB__SGNS_FMA_BLOCK(4, 8, __m256, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_fmadd_ps,
                        _mm256_set1_ps)
    EMB__SGNS_FMA_BLOCK(1, 8, __m256, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_fmadd_ps,
                        _mm256_set1_ps)
    EMB__SGNS_FMA_BLOCK(1, 4, __m128, _mm_loadu_ps, _mm_storeu_ps, _mm_fmadd_ps, _mm_set1_ps)
    sgns_fma_tail(row, save, g, src, c, k, dim);
}

#define EMB__SGNS_PAIR_BATCHED 1
#define EMB__SGNS_NAME         emb__sgns_step_avx2
#define EMB__SGNS_ATTR         EMB__TARGET_AVX2
#include "sgns_body.h"
#endif
