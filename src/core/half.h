/* src/core/half.h: float16 (IEEE binary16) and bfloat16 to and from float32, as torch
 * converts them (round to nearest even; NaN to torch's quiet NaN). Inline, for the row
 * kernels of reduced-precision tables (src/kernels/qkernels_*.c) and the public
 * emb_f16_to_f32 and friends (<emb/util.h>, core/half.c), which call these. */
#ifndef EMB_HALF_H
#define EMB_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t emb__f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float emb__bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t emb__f32_to_f16(float f) {
    uint32_t x = emb__f32_bits(f), ax = x & 0x7fffffffu;
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    if (ax > 0x7f800000u) return sign | 0x7e00u;  /* NaN: the quiet NaN torch produces */
    if (ax >= 0x477ff000u) return sign | 0x7c00u; /* >= 65520 rounds to infinity */
    if (ax < 0x38800000u) {                       /* below 2^-14: subnormal or zero */
        if (ax <= 0x33000000u) return sign;       /* <= 2^-25 rounds to zero (ties to even) */
        uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(ax >> 23);
        uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = (ax >> 13) - (112u << 10), rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

static inline float emb__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return emb__bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    return emb__bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

static inline uint16_t emb__f32_to_bf16(float f) {
    if (isnan(f)) return 0x7fc0u; /* torch's round_to_nearest_even */
    uint32_t x = emb__f32_bits(f);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

static inline float emb__bf16_to_f32(uint16_t h) {
    return emb__bits_f32((uint32_t)h << 16);
}

#endif /* EMB_HALF_H */
