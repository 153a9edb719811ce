/* The AVX2+FMA twin of the word2vec step (sgns.h): the same body, with the dot product's
 * eight lanes in one register. Bit-identical to sgns_ref.c. */
#include "sgns.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#include <math.h>

__attribute__((target("avx2,fma"))) static inline float sgns_dot(const float *a,
                                                                 const float *b, int64_t n) {
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

#define EMB__SGNS_NAME emb__sgns_step_avx2
#define EMB__SGNS_ATTR __attribute__((target("avx2,fma")))
#include "sgns_body.h"
#endif
