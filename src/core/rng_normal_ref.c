/* src/core/rng_normal_ref.c: the scalar reference of normal_'s float32 block transform (see
 * rng_normal.h); every fused multiply-add is an explicit fmaf(), every other operation
 * rounds on its own (-ffp-contract=off), as in PyTorch's AVX2 kernel. */
#include "rng_normal.h"
#include "half.h" /* emb__f32_bits, emb__bits_f32 */

#include <math.h>

/* Natural log for x in (0, 1]. */
static inline float log_cephes(float x) {
    uint32_t b = emb__f32_bits(x);
    float e = (float)((int32_t)(b >> 23) - 127) + 1.0f;
    float m = emb__bits_f32((b & 0x807FFFFFu) | 0x3F000000u);
    if (m < SQRT_HALF) {
        e = e - 1.0f;
        m = (m - 1.0f) + m;
    } else {
        m = m - 1.0f;
    }
    float z = m * m;
    float y = LOG_P0;
    y = fmaf(y, m, LOG_P1);
    y = fmaf(y, m, LOG_P2);
    y = fmaf(y, m, LOG_P3);
    y = fmaf(y, m, LOG_P4);
    y = fmaf(y, m, LOG_P5);
    y = fmaf(y, m, LOG_P6);
    y = fmaf(y, m, LOG_P7);
    y = fmaf(y, m, LOG_P8);
    y = y * m;
    y = fmaf(y, z, e * LOG_Q1);
    y = fmaf(-z, 0.5f, y);
    float r = m + y;
    return fmaf(e, LOG_Q2, r);
}

/* sin and cos of x >= 0. */
static inline void sincos_cephes(float x, float *s_out, float *c_out) {
    int32_t j = ((int32_t)(x * SC_FOPI) + 1) & ~1;
    float y = (float)j;
    x = fmaf(y, SC_DP1, x);
    x = fmaf(y, SC_DP2, x);
    x = fmaf(y, SC_DP3, x);
    float z = x * x;
    float c = fmaf(fmaf(COS_P0, z, COS_P1), z, COS_P2);
    c = c * z;
    c = fmaf(c, z, -(z * 0.5f));
    c = c + 1.0f;
    float s = fmaf(fmaf(SIN_P0, z, SIN_P1), z, SIN_P2);
    s = s * z;
    s = fmaf(s, x, x);
    /* The kernel blends with masks and adds; the same arithmetic here keeps signed zeros. */
    int swap = (j & 2) != 0;
    float ys1 = swap ? c : 0.0f, ys2 = swap ? 0.0f : s;
    float sin_v = ys1 + ys2;
    float cos_v = (c - ys1) + (s - ys2);
    uint32_t sin_sign = ((uint32_t)j & 4u) << 29;
    uint32_t cos_sign = ((~(uint32_t)(j - 2)) & 4u) << 29;
    *s_out = emb__bits_f32(emb__f32_bits(sin_v) ^ sin_sign);
    *c_out = emb__bits_f32(emb__f32_bits(cos_v) ^ cos_sign);
}

/* The reference block transform, on `nb` consecutive blocks of 16. */
void emb__normal16_ref(float *d, int64_t nb, float mean, float std) {
    for (int64_t b = 0; b < nb; b++, d += 16) {
        for (int j = 0; j < 8; j++) {
            float u1 = 1.0f - d[j];
            float u2 = d[j + 8];
            float radius = sqrtf(-2.0f * log_cephes(u1));
            float theta = TWO_PI_F * u2;
            float s, c;
            sincos_cephes(theta, &s, &c);
            d[j] = fmaf(radius * c, std, mean);
            d[j + 8] = fmaf(radius * s, std, mean);
        }
    }
}
