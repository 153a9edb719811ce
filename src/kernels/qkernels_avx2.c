/* src/kernels/qkernels_avx2.c: the reduced-precision row kernels compiled for AVX2, FMA and
 * F16C (chosen at run time by emb__qkernels, dispatch.c); same body and bits as
 * qkernels_ref.c. */
#include "qkernels.h"

#if EMB__X86
#include <immintrin.h>
#include <math.h>

#define QK(name)           emb__qk_avx2_##name
#define QK_NAME            "avx2"
#define QK_ATTR            __attribute__((target("avx2,fma,f16c"))) /* EMB__TARGET_AVX2 and F16C */
#define emb__qk_avx2_table emb__qkernels_avx2

static inline QK_ATTR void qk_f16_avx2(float *dst, const uint8_t *src, int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 2 * j))));
    for (; j < n; j++)
        dst[j] = emb__f16_to_f32((uint16_t)(src[2 * j] | (uint16_t)src[2 * j + 1] << 8));
}
#define QK_F16(dst, src, n) qk_f16_avx2(dst, src, n)

#include "qkernels_body.h"
#endif
