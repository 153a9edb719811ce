/* src/kernels/qkernels_body.h: the body of the reduced-precision row kernels, included by
 * qkernels_ref.c and qkernels_avx2.c. The includer defines
 *   QK(name)            the variant's name for a function
 *   QK_F16(dst, src, n) n float16 values to float32 (exact)
 *   QK_ATTR             the attribute of every function (the target ISA)
 * Every loop over a row is elementwise (no reordering of a sum), so vectorising it changes
 * no bit; -ffp-contract=off keeps the float adds unfused. */

#include "qkernels.h"

#include <string.h>

static inline QK_ATTR int64_t QK(index_at)(const void *idx, bool i32, int64_t p) {
    return i32 ? (int64_t)((const int32_t *)idx)[p] : ((const int64_t *)idx)[p];
}

/* Rows this many positions ahead are prefetched: a row's first touch is a cache miss on
 * tables larger than the cache, and a bag's dependent adds leave no other overlap. 16, not
 * 8: the same or faster everywhere measured (docs/PERFORMANCE.md, "Tuning constants"). */
#define QK_PF_DIST 16
/* On tables of gigabytes (touch), the rows of the next block of this many positions are
 * also loaded for real, in one burst at the start of each block (QK_AHEAD): their
 * page-table entries miss the caches too, and the burst's independent loads keep those
 * misses in flight together, which the prefetch alone did not (src/quant/qtable.c,
 * EMB__Q_TOUCH_BYTES). */
#define QK_TOUCH_DIST 64

/* A macro, not a function: GCC deems a function that only prefetches free of effects and
 * deletes its calls. The first 512 bytes of the row and its last byte (int8/int4 keep the
 * scale and bias there). */
#define QK_PREFETCH(base, rb, idx, i32, p)                                                         \
    do {                                                                                           \
        const uint8_t *row_ = (base) + QK(index_at)((idx), (i32), (p)) * (rb);                     \
        const int64_t span_ = (rb) < 512 ? (rb) : 512;                                             \
        for (int64_t o_ = 0; o_ < span_; o_ += 64) __builtin_prefetch(row_ + o_);                  \
        __builtin_prefetch(row_ + (rb)-1);                                                         \
    } while (0)

/* One load of the row's first and last byte, kept by the volatile access. */
#define QK_TOUCH(base, rb, idx, i32, p)                                                            \
    do {                                                                                           \
        const volatile uint8_t *row_ =                                                             \
            (const volatile uint8_t *)((base) + QK(index_at)((idx), (i32), (p)) * (rb));           \
        (void)row_[0];                                                                             \
        (void)row_[(rb)-1];                                                                        \
    } while (0)

/* What runs ahead of position p of a range ending at pend. With touch, every
 * QK_TOUCH_DIST positions the rows of the next block are loaded in one burst: the loads are
 * independent, so their misses are in flight together (one load per row ahead, spread
 * out, would hold up the decoding of each row behind it, one miss at a time). */
#define QK_AHEAD(base, rb, idx, i32, p, pend, touch)                                               \
    do {                                                                                           \
        if ((p) + QK_PF_DIST < (pend)) QK_PREFETCH(base, rb, idx, i32, (p) + QK_PF_DIST);          \
        if ((touch) && (p) % QK_TOUCH_DIST == 0)                                                   \
            for (int64_t t_ = (p) + QK_TOUCH_DIST; t_ < (p) + 2 * QK_TOUCH_DIST && t_ < (pend);    \
                 t_++)                                                                             \
                QK_TOUCH(base, rb, idx, i32, t_);                                                  \
    } while (0)

static inline QK_ATTR void QK(bf16)(float *dst, const uint8_t *src, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        uint32_t u = (uint32_t)src[2 * j] << 16 | (uint32_t)src[2 * j + 1] << 24;
        memcpy(&dst[j], &u, 4);
    }
}

/* acc = (float)((double)s * code + (double)(acc + b)): PyTorch's quantized accumulation.
 * The product of a float and a code below 256 is exact in double, so this is also
 * fma((double)s, code, (double)(acc + b)) rounded to float, what PyTorch computes. */
static inline QK_ATTR void QK(acc_int8)(float *acc, const uint8_t *row, int64_t dim, float s,
                                        float b) {
    const double sd = (double)s;
    for (int64_t j = 0; j < dim; j++) acc[j] = (float)(sd * (double)row[j] + (double)(acc[j] + b));
}

static inline QK_ATTR void QK(acc_int4)(float *acc, const uint8_t *row, int64_t dim, float s,
                                        float b) {
    const double sd = (double)s;
    const int64_t pairs = dim / 2;
    for (int64_t k = 0; k < pairs; k++) {
        const uint8_t c = row[k];
        acc[2 * k] = (float)(sd * (double)(c & 15) + (double)(acc[2 * k] + b));
        acc[2 * k + 1] = (float)(sd * (double)(c >> 4) + (double)(acc[2 * k + 1] + b));
    }
    if (dim & 1)
        acc[dim - 1] = (float)(sd * (double)(row[pairs] & 15) + (double)(acc[dim - 1] + b));
}

/* The dequantized row: float values for f32/f16/bf16; the accumulation above from +0.0
 * for int8/int4. */
static QK_ATTR void QK(decode)(int qt, float *out, const uint8_t *row, int64_t dim) {
    switch (qt) {
    case EMB__QT_F32:
        memcpy(out, row, (size_t)dim * 4);
        return;
    case EMB__QT_F16:
        QK_F16(out, row, dim);
        return;
    case EMB__QT_BF16:
        QK(bf16)(out, row, dim);
        return;
    case EMB__QT_INT8:
    case EMB__QT_INT4: {
        float s, b;
        emb__q_scale_bias(qt, row, dim, &s, &b);
        memset(out, 0, (size_t)dim * 4);
        if (qt == EMB__QT_INT8)
            QK(acc_int8)(out, row, dim, s, b);
        else
            QK(acc_int4)(out, row, dim, s, b);
        return;
    }
    }
}

static QK_ATTR void QK(lookup)(int qt, float *out, const uint8_t *base, int64_t rb, int64_t dim,
                               const void *idx, bool i32, int64_t p0, int64_t p1, bool touch) {
    for (int64_t p = p0; p < p1; p++) {
        QK_AHEAD(base, rb, idx, i32, p, p1, touch);
        QK(decode)(qt, out + p * dim, base + QK(index_at)(idx, i32, p) * rb, dim);
    }
}

static QK_ATTR void QK(rows)(int qt, float *out, const uint8_t *base, int64_t rb, int64_t dim,
                             int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) QK(decode)(qt, out + (r - r0) * dim, base + r * rb, dim);
}

/* Sum / mean. f32/f16/bf16 follow emb__bag_pool_ref on the decoded row w:
 *   no psw: acc + w; psw without padding: fmaf(p, w, acc); psw with padding: acc + w * p.
 * int8/int4: the quantized accumulation with s = p * scale, b = p * bias. */
static QK_ATTR void QK(pool)(int qt, float *out, const uint8_t *base, int64_t rb, int64_t dim,
                             const void *idx, bool i32, const int64_t *starts, int64_t b0,
                             int64_t b1, const float *psw, int64_t pad, bool mean, float *tmp,
                             bool touch) {
    const bool quant = qt == EMB__QT_INT8 || qt == EMB__QT_INT4;
    const int64_t pend = starts[b1];
    for (int64_t bag = b0; bag < b1; bag++) {
        float *acc = out + bag * dim;
        memset(acc, 0, (size_t)dim * 4);
        int64_t count = 0;
        for (int64_t p = starts[bag]; p < starts[bag + 1]; p++) {
            QK_AHEAD(base, rb, idx, i32, p, pend, touch);
            const int64_t r = QK(index_at)(idx, i32, p);
            if (r == pad) continue;
            count++;
            const uint8_t *row = base + r * rb;
            if (quant) {
                float s, b;
                emb__q_scale_bias(qt, row, dim, &s, &b);
                if (psw) {
                    s = psw[p] * s;
                    b = psw[p] * b;
                }
                if (qt == EMB__QT_INT8)
                    QK(acc_int8)(acc, row, dim, s, b);
                else
                    QK(acc_int4)(acc, row, dim, s, b);
                continue;
            }
            const float *w = (const float *)(const void *)row;
            if (qt != EMB__QT_F32) {
                QK(decode)(qt, tmp, row, dim);
                w = tmp;
            }
            if (!psw) {
                for (int64_t d = 0; d < dim; d++) acc[d] = acc[d] + w[d];
            } else if (pad == INT64_MIN) {
                const float pw = psw[p];
                for (int64_t d = 0; d < dim; d++) acc[d] = fmaf(pw, w[d], acc[d]);
            } else {
                const float pw = psw[p];
                for (int64_t d = 0; d < dim; d++) acc[d] = acc[d] + w[d] * pw;
            }
        }
        if (mean) {
            const float c = (float)(count > 1 ? count : 1);
            for (int64_t d = 0; d < dim; d++) acc[d] = acc[d] / c;
        }
    }
}

static QK_ATTR void QK(max)(int qt, float *out, int64_t *max_idx, const uint8_t *base, int64_t rb,
                            int64_t dim, const void *idx, bool i32, const int64_t *starts,
                            int64_t b0, int64_t b1, int64_t pad, float *tmp, bool touch) {
    const int64_t pend = starts[b1];
    for (int64_t bag = b0; bag < b1; bag++) {
        float *o = out + bag * dim;
        int64_t *mi = max_idx ? max_idx + bag * dim : NULL;
        bool first = true;
        for (int64_t p = starts[bag]; p < starts[bag + 1]; p++) {
            QK_AHEAD(base, rb, idx, i32, p, pend, touch);
            const int64_t r = QK(index_at)(idx, i32, p);
            if (r == pad) continue;
            QK(decode)(qt, tmp, base + r * rb, dim);
            if (first) {
                memcpy(o, tmp, (size_t)dim * 4);
                if (mi)
                    for (int64_t d = 0; d < dim; d++) mi[d] = r;
                first = false;
                continue;
            }
            for (int64_t d = 0; d < dim; d++) {
                const float v = tmp[d];
                if (v > o[d] || (v != v && o[d] == o[d])) {
                    o[d] = v;
                    if (mi) mi[d] = r;
                }
            }
        }
        if (first) {
            memset(o, 0, (size_t)dim * 4);
            if (mi) memset(mi, 0, (size_t)dim * 8);
        }
    }
}

const emb__qkernel_table QK(table) = {
    QK_NAME, QK(lookup), QK(pool), QK(max), QK(rows),
};
