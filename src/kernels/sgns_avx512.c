/* The AVX-512 twin of the word2vec step (sgns.h): the same body, with the dot product's two
 * sets of eight lanes in one 16-lane register (lanes 0-7 the first set, 8-15 the second; a
 * last block of 8 updates lanes 0-7 only), the sets added lane by lane as the two halves of
 * that register, and the element-wise updates 16 elements a register with a masked last
 * block. Bit-identical to sgns_ref.c and sgns_avx2.c. */
#include "sgns.h"
#include "sgns_x86.h"

#if EMB__X86
#include <immintrin.h>
#include <math.h>

#define SGNS_LOW8 ((__mmask16)0x00FF)

/* The two sets of a 16-lane accumulator added lane by lane. */
EMB__TARGET_AVX512 static inline __m256 sgns_fold(__m512 acc) {
    return _mm256_add_ps(_mm512_castps512_ps256(acc),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
}

/* acc + a[k..k+8) * b[k..k+8) in lanes 0-7 (the first set), lanes 8-15 unchanged. */
EMB__TARGET_AVX512 static inline __m512 sgns_fma8(const float *a, const float *b, __m512 acc) {
    return _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(SGNS_LOW8, a),
                                 _mm512_maskz_loadu_ps(SGNS_LOW8, b), acc, SGNS_LOW8);
}

EMB__TARGET_AVX512 static inline float sgns_dot(const float *a, const float *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), acc);
    if (k + 8 <= n) acc = sgns_fma8(a + k, b + k, acc), k += 8;
    float l[8];
    _mm256_storeu_ps(l, sgns_fold(acc));
    float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (; k < n; k++) s = fmaf(a[k], b[k], s);
    return s;
}

/* x . y0, x . y1, x . y2 side by side, each in sgns_dot's order (the same bits). */
EMB__TARGET_AVX512 static inline void sgns_dot3(const float *x, const float *y0, const float *y1,
                                                const float *y2, int64_t n, float *out) {
    __m512 a = _mm512_setzero_ps(), b = a, c = a;
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m512 xv = _mm512_loadu_ps(x + k);
        a = _mm512_fmadd_ps(xv, _mm512_loadu_ps(y0 + k), a);
        b = _mm512_fmadd_ps(xv, _mm512_loadu_ps(y1 + k), b);
        c = _mm512_fmadd_ps(xv, _mm512_loadu_ps(y2 + k), c);
    }
    if (k + 8 <= n) {
        a = sgns_fma8(x + k, y0 + k, a), b = sgns_fma8(x + k, y1 + k, b);
        c = sgns_fma8(x + k, y2 + k, c), k += 8;
    }
    sgns_hsum3(sgns_fold(a), sgns_fold(b), sgns_fold(c), out);
    sgns_tail3(x, y0, y1, y2, k, n, out);
}

/* x0 . y_j and x1 . y_j for the three rows y_j side by side (six accumulators), each in
 * sgns_dot's order: out0[0..3) and out1[0..3). */
EMB__TARGET_AVX512 static inline void sgns_dot2x3(const float *x0, const float *x1,
                                                  const float *const *y, int64_t n, float *out0,
                                                  float *out1) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, b0 = a0, b1 = a0, b2 = a0;
    const float *y0 = y[0], *y1 = y[1], *y2 = y[2];
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m512 p = _mm512_loadu_ps(x0 + k), q = _mm512_loadu_ps(x1 + k), v;
        v = _mm512_loadu_ps(y0 + k), a0 = _mm512_fmadd_ps(p, v, a0), b0 = _mm512_fmadd_ps(q, v, b0);
        v = _mm512_loadu_ps(y1 + k), a1 = _mm512_fmadd_ps(p, v, a1), b1 = _mm512_fmadd_ps(q, v, b1);
        v = _mm512_loadu_ps(y2 + k), a2 = _mm512_fmadd_ps(p, v, a2), b2 = _mm512_fmadd_ps(q, v, b2);
    }
    if (k + 8 <= n) {
        a0 = sgns_fma8(x0 + k, y0 + k, a0), b0 = sgns_fma8(x1 + k, y0 + k, b0);
        a1 = sgns_fma8(x0 + k, y1 + k, a1), b1 = sgns_fma8(x1 + k, y1 + k, b1);
        a2 = sgns_fma8(x0 + k, y2 + k, a2), b2 = sgns_fma8(x1 + k, y2 + k, b2);
        k += 8;
    }
    sgns_hsum3(sgns_fold(a0), sgns_fold(a1), sgns_fold(a2), out0);
    sgns_hsum3(sgns_fold(b0), sgns_fold(b1), sgns_fold(b2), out1);
    sgns_tail3(x0, y0, y1, y2, k, n, out0);
    sgns_tail3(x1, y0, y1, y2, k, n, out1);
}

#define EMB__SGNS_PAIR_MAX   16
#define EMB__SGNS_WINDOW_MAX 32

/* The fused update pass (sgns_avx2.c's, element for element): 16 elements a register, then
 * 8, then 4 (dim 100: 96 + 4), then element by element. Not masked blocks: a row written by a
 * masked store and read again soon after (the next window's rows) cannot be forwarded from
 * the store, and CBOW ran 1-3% slower with them than with the AVX2 twin. */
EMB__TARGET_AVX512 static inline void sgns_update_pass(float *x, float *const *rows, int t,
                                                       const float *g, int64_t dim, float *e_out) {
    int64_t k = 0;
    for (; k + 16 <= dim; k += 16)
        EMB__SGNS_UPDATE_BLOCK(__m512, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_fmadd_ps,
                               _mm512_set1_ps, _mm512_setzero_ps, _mm512_add_ps);
    if (k + 8 <= dim) {
        EMB__SGNS_UPDATE_BLOCK(__m256, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_fmadd_ps,
                               _mm256_set1_ps, _mm256_setzero_ps, _mm256_add_ps);
        k += 8;
    }
    if (k + 4 <= dim) {
        EMB__SGNS_UPDATE_BLOCK(__m128, _mm_loadu_ps, _mm_storeu_ps, _mm_fmadd_ps, _mm_set1_ps,
                               _mm_setzero_ps, _mm_add_ps);
        k += 4;
    }
    sgns_update_tail(x, rows, t, g, k, dim, e_out);
}

/* row[0..dim) = fmaf(g[q], src[q][k], row[k]) for q in [0, c) in order, element by element:
 * six registers of 16 elements at once (96 elements: dim 100 in one pass), then one, then 8,
 * 4 and single elements (unmasked, as above). save, when not NULL, receives the row's values
 * on entry. */
EMB__TARGET_AVX512 static inline void sgns_fma_rows(float *row, float *save, const float *g,
                                                    const float *const *src, int c, int64_t dim) {
    int64_t k = 0;
    EMB__SGNS_FMA_BLOCK(6, 16, __m512, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_fmadd_ps,
                        _mm512_set1_ps)
    EMB__SGNS_FMA_BLOCK(1, 16, __m512, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_fmadd_ps,
                        _mm512_set1_ps)
    EMB__SGNS_FMA_BLOCK(1, 8, __m256, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_fmadd_ps,
                        _mm256_set1_ps)
    EMB__SGNS_FMA_BLOCK(1, 4, __m128, _mm_loadu_ps, _mm_storeu_ps, _mm_fmadd_ps, _mm_set1_ps)
    sgns_fma_tail(row, save, g, src, c, k, dim);
}

#define EMB__SGNS_PAIR_BATCHED 1
#define EMB__SGNS_NAME         emb__sgns_step_avx512
#define EMB__SGNS_ATTR         EMB__TARGET_AVX512
#include "sgns_body.h"
#endif
