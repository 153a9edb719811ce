/* src/core/rng_normal_avx2.c: the AVX2+FMA twin of emb__normal16_ref (see rng_normal.h).
 * Only emb__normal16_pick (generator.c) hands it out. */
#include "rng_normal.h"

#if EMB__X86
#include <immintrin.h>

/* The block transform with AVX2/FMA intrinsics: the same operations as emb__normal16_ref,
 * eight lanes at a time (lane j handles d[j] and d[j+8]). Must match it bit for bit. */
EMB__TARGET_AVX2 static inline __m256 log_cephes_avx2(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256i b = _mm256_castps_si256(x);
    __m256i ex = _mm256_sub_epi32(_mm256_srli_epi32(b, 23), _mm256_set1_epi32(127));
    __m256 e = _mm256_add_ps(_mm256_cvtepi32_ps(ex), one);
    __m256 m = _mm256_castsi256_ps(_mm256_or_si256(
        _mm256_and_si256(b, _mm256_set1_epi32((int)0x807FFFFF)), _mm256_set1_epi32(0x3F000000)));
    __m256 small = _mm256_cmp_ps(m, _mm256_set1_ps(SQRT_HALF), _CMP_LT_OS);
    __m256 keep = _mm256_and_ps(m, small);
    m = _mm256_sub_ps(m, one);
    e = _mm256_sub_ps(e, _mm256_and_ps(one, small));
    m = _mm256_add_ps(m, keep);
    __m256 z = _mm256_mul_ps(m, m);
    __m256 y = _mm256_set1_ps(LOG_P0);
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(LOG_P1));
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(LOG_P2));
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(LOG_P3));
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(LOG_P4));
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(LOG_P5));
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(LOG_P6));
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(LOG_P7));
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(LOG_P8));
    y = _mm256_mul_ps(y, m);
    y = _mm256_fmadd_ps(y, z, _mm256_mul_ps(e, _mm256_set1_ps(LOG_Q1)));
    y = _mm256_fnmadd_ps(z, _mm256_set1_ps(0.5f), y);
    __m256 r = _mm256_add_ps(m, y);
    return _mm256_fmadd_ps(e, _mm256_set1_ps(LOG_Q2), r);
}

EMB__TARGET_AVX2 static inline void sincos_cephes_avx2(__m256 x, __m256 *s_out, __m256 *c_out) {
    __m256i j = _mm256_cvttps_epi32(_mm256_mul_ps(x, _mm256_set1_ps(SC_FOPI)));
    j = _mm256_and_si256(_mm256_add_epi32(j, _mm256_set1_epi32(1)), _mm256_set1_epi32(~1));
    __m256 y = _mm256_cvtepi32_ps(j);
    __m256i four = _mm256_set1_epi32(4);
    __m256 sin_sign = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(j, four), 29));
    __m256 cos_sign = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_andnot_si256(_mm256_sub_epi32(j, _mm256_set1_epi32(2)), four), 29));
    __m256 swap = _mm256_castsi256_ps(
        _mm256_cmpeq_epi32(_mm256_and_si256(j, _mm256_set1_epi32(2)), _mm256_set1_epi32(2)));
    x = _mm256_fmadd_ps(y, _mm256_set1_ps(SC_DP1), x);
    x = _mm256_fmadd_ps(y, _mm256_set1_ps(SC_DP2), x);
    x = _mm256_fmadd_ps(y, _mm256_set1_ps(SC_DP3), x);
    __m256 z = _mm256_mul_ps(x, x);
    __m256 c = _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(COS_P0), z, _mm256_set1_ps(COS_P1)),
                               z, _mm256_set1_ps(COS_P2));
    c = _mm256_mul_ps(c, z);
    c = _mm256_fmsub_ps(c, z, _mm256_mul_ps(z, _mm256_set1_ps(0.5f)));
    c = _mm256_add_ps(c, _mm256_set1_ps(1.0f));
    __m256 s = _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(SIN_P0), z, _mm256_set1_ps(SIN_P1)),
                               z, _mm256_set1_ps(SIN_P2));
    s = _mm256_mul_ps(s, z);
    s = _mm256_fmadd_ps(s, x, x);
    __m256 ys1 = _mm256_and_ps(swap, c);
    __m256 ys2 = _mm256_andnot_ps(swap, s);
    __m256 sin_v = _mm256_add_ps(ys1, ys2);
    __m256 cos_v = _mm256_add_ps(_mm256_sub_ps(c, ys1), _mm256_sub_ps(s, ys2));
    *s_out = _mm256_xor_ps(sin_v, sin_sign);
    *c_out = _mm256_xor_ps(cos_v, cos_sign);
}

EMB__TARGET_AVX2 void emb__normal16_avx2(float *d, int64_t nb, float mean, float std) {
    __m256 vm = _mm256_set1_ps(mean), vs = _mm256_set1_ps(std);
    for (int64_t b = 0; b < nb; b++, d += 16) {
        __m256 u1 = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_loadu_ps(d));
        __m256 u2 = _mm256_loadu_ps(d + 8);
        __m256 radius = _mm256_sqrt_ps(_mm256_mul_ps(_mm256_set1_ps(-2.0f), log_cephes_avx2(u1)));
        __m256 theta = _mm256_mul_ps(_mm256_set1_ps(TWO_PI_F), u2);
        __m256 s, c;
        sincos_cephes_avx2(theta, &s, &c);
        _mm256_storeu_ps(d, _mm256_fmadd_ps(_mm256_mul_ps(radius, c), vs, vm));
        _mm256_storeu_ps(d + 8, _mm256_fmadd_ps(_mm256_mul_ps(radius, s), vs, vm));
    }
}
#endif
