/* Reference (scalar) embedding lookup and renorm kernels; see lookup.h. These are also the
 * production kernels: the lookup is memory-bound row copying, and the renorm must follow
 * PyTorch's accumulation order exactly, so there is nothing for SIMD variants to win. */
#include "lookup.h"

#include <math.h>
#include <string.h>

/* Prefetches the first cache lines of the weight row `row` (at most 512 bytes) into all
 * cache levels. */
static inline void prefetch_row(const float *weight, int64_t dim, int64_t row) {
#if defined(__GNUC__)
    const char *p = (const char *)(weight + row * dim);
    int64_t bytes = dim * (int64_t)sizeof(float);
    if (bytes > 512) bytes = 512;
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 3);
#else
    (void)weight; (void)dim; (void)row;
#endif
}

/* Copies one row. Rows whose size is a multiple of 16 bytes and at most 256 bytes are
 * copied in fixed 16-byte pieces the compiler inlines as vector moves: a libc memcpy call
 * per short row costs more than the copy itself. */
static inline void copy_row(float *dst, const float *src, size_t row_bytes, int small) {
    if (small) {
        char *d = (char *)dst;
        const char *s = (const char *)src;
        for (size_t k = 0; k < row_bytes; k += 16) memcpy(d + k, s + k, 16);
    } else {
        memcpy(dst, src, row_bytes);
    }
}

/* The same loop for both index types; `small` is hoisted so each loop is specialised. */
#define EMB__LOOKUP_LOOP(small)                                                            \
    do {                                                                                   \
        int64_t i = begin;                                                                 \
        if (prefetch > 0) {                                                                \
            for (int64_t pf_end = end - prefetch; i < pf_end; i++) {                       \
                prefetch_row(weight, dim, (int64_t)idx[i + prefetch]);                     \
                copy_row(out + i * dim, weight + (int64_t)idx[i] * dim, row_bytes, small); \
            }                                                                              \
        }                                                                                  \
        for (; i < end; i++)                                                               \
            copy_row(out + i * dim, weight + (int64_t)idx[i] * dim, row_bytes, small);     \
    } while (0)

#define EMB__LOOKUP_BODY                                                                   \
    const size_t row_bytes = (size_t)dim * sizeof(float);                                  \
    if (row_bytes % 16 == 0 && row_bytes <= 256)                                           \
        EMB__LOOKUP_LOOP(1);                                                               \
    else                                                                                   \
        EMB__LOOKUP_LOOP(0);

void emb__lookup_rows_i64(float *out, const float *weight, int64_t dim, const int64_t *idx,
                          int64_t begin, int64_t end, int prefetch) {
    EMB__LOOKUP_BODY
}

void emb__lookup_rows_i32(float *out, const float *weight, int64_t dim, const int32_t *idx,
                          int64_t begin, int64_t end, int prefetch) {
    EMB__LOOKUP_BODY
}

#undef EMB__LOOKUP_LOOP
#undef EMB__LOOKUP_BODY

/* The 2-norm's fmaf() is a libm call on baseline x86-64; compiling a second copy of the same
 * code for CPUs with FMA (chosen once at load time by GCC's target_clones) turns it into
 * vfmadd instructions. fmaf is exactly rounded either way, so both copies give the same
 * bits. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define EMB__FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define EMB__FMA_CLONES
#endif

/* Appendix C: eight fmaf lanes over the full groups of 8, lanes folded left to right, then
 * the tail: its first 4*floor(t/4) elements as s + (x*x) with the square rounded, the rest
 * as fmaf(x, x, s). */
EMB__FMA_CLONES
float emb__row_norm2_f32(const float *x, int64_t n) {
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t full = n - n % 8;
    for (int64_t d = 0; d < full; d += 8)
        for (int j = 0; j < 8; j++) lane[j] = fmaf(x[d + j], x[d + j], lane[j]);
    float s = lane[0];
    for (int j = 1; j < 8; j++) s = s + lane[j];
    int64_t t = n - full;
    int64_t split = full + 4 * (t / 4);
    for (int64_t d = full; d < split; d++) {
        float sq = x[d] * x[d];
        s = s + sq;
    }
    for (int64_t d = split; d < n; d++) s = fmaf(x[d], x[d], s);
    return sqrtf(s);
}

float emb__row_norm_f32(const float *x, int64_t n, double p) {
    if (n <= 0) return p < 0 ? INFINITY : 0.0f;
    if (p == 2.0) return emb__row_norm2_f32(x, n);
    if (p == 1.0) {
        float s = 0.0f;
        for (int64_t i = 0; i < n; i++) s = s + fabsf(x[i]);
        return s;
    }
    if (p == 0.0) {
        float s = 0.0f;
        for (int64_t i = 0; i < n; i++) s = s + (x[i] == 0.0f ? 0.0f : 1.0f);
        return s;
    }
    if (p == INFINITY) {
        float m = 0.0f;
        for (int64_t i = 0; i < n; i++) {
            float a = fabsf(x[i]);
            if (isnan(m)) break;
            m = m > a ? m : a; /* a NaN `a` is taken, then kept */
        }
        return m;
    }
    if (p == -INFINITY) {
        float m = INFINITY;
        for (int64_t i = 0; i < n; i++) {
            float a = fabsf(x[i]);
            if (isnan(m)) break;
            m = m < a ? m : a;
        }
        return m;
    }
    const float pf = (float)p;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s = s + powf(fabsf(x[i]), pf);
    return powf(s, 1.0f / pf);
}

void emb__renorm_rows_f32(float *weight, int64_t dim, const int64_t *rows, int64_t begin,
                          int64_t end, double max_norm, double p) {
    for (int64_t k = begin; k < end; k++) {
        float *row = weight + rows[k] * dim;
        double norm = (double)emb__row_norm_f32(row, dim, p);
        if (norm > max_norm) {
            const float scale = (float)(max_norm / (norm + 1e-7));
            for (int64_t i = 0; i < dim; i++) row[i] = row[i] * scale;
        }
    }
}
