/* src/kernels/qkernels_ref.c: the reference (plain C) reduced-precision row kernels. */
#include "qkernels.h"

#include <math.h>

#define QK(name) emb__qk_ref_##name
#define QK_NAME  "ref"
#define QK_ATTR
#define emb__qk_ref_table emb__qkernels_ref

static inline void qk_f16_ref(float *dst, const uint8_t *src, int64_t n) {
    for (int64_t j = 0; j < n; j++)
        dst[j] = emb__f16_to_f32((uint16_t)(src[2 * j] | (uint16_t)src[2 * j + 1] << 8));
}
#define QK_F16(dst, src, n) qk_f16_ref(dst, src, n)

#include "qkernels_body.h"
