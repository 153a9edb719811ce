/* src/kernels/qkernels.h: the row kernels of reduced-precision tables
 * (docs/quantization.md), used by src/quant.
 *
 * Plain functions over raw rows; the module (src/quant/qtable.c) validates everything and
 * owns the threading and the scratch. Rows are `rb` bytes apart from `base`; indices are
 * int64, or int32 when i32. The two variants (qkernels_ref.c, qkernels_avx2.c, the latter
 * for AVX2, FMA and F16C) are compiled from one body (qkernels_body.h) and give the same
 * bits: the only operations are exact conversions, float adds/multiplies/divides and double
 * adds of exact double products (where a fused multiply-add would give the same result),
 * elementwise over the row. src/kernels/dispatch.c chooses between them. */
#ifndef EMB_QKERNELS_H
#define EMB_QKERNELS_H

#include "cpu.h"
#include "half.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* The storage types as the kernels name them (`qt` below): the values of emb_qtype, whose
 * header <emb/quant.h> belongs to a higher layer; src/quant/qtable.c checks that they
 * agree. */
enum {
    EMB__QT_F32 = 0,
    EMB__QT_F16 = 1,
    EMB__QT_BF16 = 2,
    EMB__QT_INT8 = 3,
    EMB__QT_INT4 = 4,
};

/* Scale and bias of an int8 / int4 row (float32 values after the dim codes; int4 stores
 * them in float16 after its (dim + 1) / 2 bytes of codes). */
static inline void emb__q_scale_bias(int qt, const uint8_t *row, int64_t dim, float *scale,
                                     float *bias) {
    if (qt == EMB__QT_INT8) {
        memcpy(scale, row + dim, 4);
        memcpy(bias, row + dim + 4, 4);
    } else {
        const uint8_t *p = row + (dim + 1) / 2;
        *scale = emb__f16_to_f32((uint16_t)(p[0] | p[1] << 8));
        *bias = emb__f16_to_f32((uint16_t)(p[2] | p[3] << 8));
    }
}

typedef struct emb__qkernel_table {
    const char *name;
    /* For p in [p0, p1): out + p * dim = the dequantized row idx[p]. The lookups take
     * `touch`: load rows ahead for real, not only prefetch them (tables of gigabytes;
     * src/quant/qtable.c decides). */
    void (*lookup)(int qt, float *out, const uint8_t *base, int64_t rb, int64_t dim,
                   const void *idx, bool i32, int64_t p0, int64_t p1, bool touch);
    /* Sum / mean of bags [b0, b1) into out rows b (docs/quantization.md has the recipe);
     * tmp: dim floats of scratch. */
    void (*pool)(int qt, float *out, const uint8_t *base, int64_t rb, int64_t dim, const void *idx,
                 bool i32, const int64_t *starts, int64_t b0, int64_t b1, const float *psw,
                 int64_t pad, bool mean, float *tmp, bool touch);
    /* Max of bags [b0, b1) (emb__bag_max_ref's rules on the dequantized rows). */
    void (*max)(int qt, float *out, int64_t *max_idx, const uint8_t *base, int64_t rb, int64_t dim,
                const void *idx, bool i32, const int64_t *starts, int64_t b0, int64_t b1,
                int64_t pad, float *tmp, bool touch);
    /* Rows [r0, r1) dequantized to out [(r1 - r0), dim]. */
    void (*rows)(int qt, float *out, const uint8_t *base, int64_t rb, int64_t dim, int64_t r0,
                 int64_t r1);
} emb__qkernel_table;

extern const emb__qkernel_table emb__qkernels_ref;
#if EMB__X86
extern const emb__qkernel_table emb__qkernels_avx2;
#endif

#endif /* EMB_QKERNELS_H */
