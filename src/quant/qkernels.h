/* src/quant/qkernels.h: the row kernels of reduced-precision tables (docs/quantization.md).
 *
 * Plain functions over raw rows; the module (qtable.c) validates everything and owns the
 * threading and the scratch. Rows are `rb` bytes apart from `base`; indices are int64, or
 * int32 when i32. The two variants (qkernels_ref.c, qkernels_avx2.c) are compiled from one
 * body (qkernels_body.h) and give the same bits: the only operations are exact conversions,
 * float adds/multiplies/divides and double adds of exact double products (where a fused
 * multiply-add would give the same result), elementwise over the row. */
#ifndef EMB_QKERNELS_H
#define EMB_QKERNELS_H

#include <emb/quant.h>

#include <stdbool.h>
#include <stdint.h>

/* Scale and bias of an int8 / int4 row (float32 values; int4 stores them in float16). */
void emb__q_scale_bias(emb_qtype qt, const uint8_t *row, int64_t dim, float *scale,
                       float *bias);

/* emb_quantize_rows, naming rows in messages from row0 on (a batch of a larger table). */
emb_status emb__quantize_rows_from(emb_qtype qtype, const float *src, int64_t rows, int64_t dim,
                                   void *dst, size_t dst_bytes, int64_t row0);

typedef struct emb__qkernel_table {
    const char *name;
    /* For p in [p0, p1): out + p * dim = the dequantized row idx[p]. The lookups take
     * `touch`: load rows ahead for real, not only prefetch them (tables of gigabytes,
     * emb__qtable_touch). */
    void (*lookup)(emb_qtype qt, float *out, const uint8_t *base, int64_t rb, int64_t dim,
                   const void *idx, bool i32, int64_t p0, int64_t p1, bool touch);
    /* Sum / mean of bags [b0, b1) into out rows b (docs/quantization.md has the recipe);
     * tmp: dim floats of scratch. */
    void (*pool)(emb_qtype qt, float *out, const uint8_t *base, int64_t rb, int64_t dim,
                 const void *idx, bool i32, const int64_t *starts, int64_t b0, int64_t b1,
                 const float *psw, int64_t pad, bool mean, float *tmp, bool touch);
    /* Max of bags [b0, b1) (emb__bag_max_ref's rules on the dequantized rows). */
    void (*max)(emb_qtype qt, float *out, int64_t *max_idx, const uint8_t *base, int64_t rb,
                int64_t dim, const void *idx, bool i32, const int64_t *starts, int64_t b0,
                int64_t b1, int64_t pad, float *tmp, bool touch);
    /* Rows [r0, r1) dequantized to out [(r1 - r0), dim]. */
    void (*rows)(emb_qtype qt, float *out, const uint8_t *base, int64_t rb, int64_t dim,
                 int64_t r0, int64_t r1);
} emb__qkernel_table;

extern const emb__qkernel_table emb__qkernels_ref;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define EMB__QKERNELS_AVX2 1
extern const emb__qkernel_table emb__qkernels_avx2;
#else
#define EMB__QKERNELS_AVX2 0
#endif

/* The table's rows for writing, or NULL when its storage is read-only (qtable.c). */
uint8_t *emb__qtable_rows_mut(emb_qtable *q);
/* Marks a table whose rows emb allocated and read in (emb_qtable_load): emb_qtable_prefetch
 * has nothing to do for it. */
void emb__qtable_set_in_memory(emb_qtable *q);

/* The table to use now: the reference one when the reference kernels are forced
 * (emb_set_kernel_mode), else the best this CPU runs. */
const emb__qkernel_table *emb__qkernels(void);

#endif /* EMB_QKERNELS_H */
