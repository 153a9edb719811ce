/* src/kernels/optim_body.h: the optimizer kernel bodies (see optim_kernels.h for the exact
 * float formulas), each written once as an always-inline function, and the macros that
 * instantiate them as a kernel table. Private to optim_ref.c (baseline ISA), optim_avx2.c
 * and optim_avx512.c (AVX2+FMA and AVX-512, where fmaf() is one instruction and the loops
 * vectorise); -ffp-contract=off keeps every other multiply and add separately rounded in
 * all of them, so the tables agree bit for bit. */
#ifndef EMB_OPTIM_BODY_H
#define EMB_OPTIM_BODY_H

#include "nan_rules.h"
#include "optim_kernels.h"

#include <math.h>

#if defined(__GNUC__)
#define EMB__INLINE static inline __attribute__((always_inline))
#else
#define EMB__INLINE static inline
#endif

/* ---- bodies ------------------------------------------------------------------------- */

EMB__INLINE void sgd_dense_body(float *restrict p, const float *restrict g, float *restrict buf,
                                int64_t n, const emb__sgd_args *a) {
    const float neg_lr = a->neg_lr, wd = a->weight_decay, mom = a->momentum,
                omd = a->one_minus_dampening;
    const bool has_wd = a->has_weight_decay, maximize = a->maximize;
    if (!a->has_momentum) {
        for (int64_t i = 0; i < n; i++) {
            float d = maximize ? -g[i] : g[i];
            if (has_wd) d = fmaf(p[i], wd, d);
            p[i] = fmaf(d, neg_lr, p[i]);
        }
        return;
    }
    const bool first = a->first, nesterov = a->nesterov;
    for (int64_t i = 0; i < n; i++) {
        float d = maximize ? -g[i] : g[i];
        if (has_wd) d = fmaf(p[i], wd, d);
        float b = first ? d : fmaf(d, omd, buf[i] * mom);
        buf[i] = b;
        d = nesterov ? fmaf(b, mom, d) : b;
        p[i] = fmaf(d, neg_lr, p[i]);
    }
}

EMB__INLINE void adagrad_dense_body(float *restrict p, const float *restrict g, float *restrict sum,
                                    int64_t n, const emb__adagrad_args *a) {
    const float neg_clr = a->neg_clr, eps = a->eps, wd = a->weight_decay;
    const bool has_wd = a->has_weight_decay, maximize = a->maximize;
    for (int64_t i = 0; i < n; i++) {
        float d = maximize ? -g[i] : g[i];
        if (has_wd) d = fmaf(p[i], wd, d);
        float s = fmaf(d, d, sum[i]);
        sum[i] = s;
        float std = sqrtf(s) + eps;
        p[i] = p[i] + (neg_clr * d) / std;
    }
}

EMB__INLINE void adam_dense_body(float *restrict p, const float *restrict g, float *restrict m,
                                 float *restrict v, float *restrict vmax, int64_t n,
                                 const emb__adam_args *a) {
    const float b1 = a->beta1, omb1 = a->one_minus_beta1, b2 = a->beta2, omb2 = a->one_minus_beta2,
                wd = a->weight_decay, decay = a->decay_factor, neg_step = a->neg_step_size,
                bc2s = a->bias_correction2_sqrt, eps = a->eps;
    const bool has_wd = a->has_weight_decay, decoupled = a->decoupled, amsgrad = a->amsgrad,
               maximize = a->maximize;
    for (int64_t i = 0; i < n; i++) {
        float d = maximize ? -g[i] : g[i];
        float pi = p[i];
        if (decoupled)
            pi = pi * decay;
        else if (has_wd)
            d = fmaf(pi, wd, d);
        float mi = fmaf(d, omb1, m[i] * b1);
        float vi = fmaf(omb2 * d, d, v[i] * b2);
        m[i] = mi;
        v[i] = vi;
        if (amsgrad) {
            float old = vmax[i];
            /* torch.maximum: NaN in either argument wins. */
            float mx = isnan(old) ? old : isnan(vi) ? vi : (old < vi ? vi : old);
            vmax[i] = mx;
            vi = mx;
        }
        float denom = sqrtf(vi) / bc2s + eps;
        p[i] = pi + (neg_step * mi) / denom;
    }
}

EMB__INLINE void adagrad_row_body(float *restrict p, float *restrict sum, const float *restrict d,
                                  int64_t dim, const emb__adagrad_args *a) {
    const float neg_clr = a->neg_clr, eps = a->eps;
    for (int64_t i = 0; i < dim; i++) {
        float s = sum[i] + d[i] * d[i];
        sum[i] = s;
        float std = sqrtf(s) + eps;
        p[i] = fmaf(d[i] / std, neg_clr, p[i]);
    }
}

EMB__INLINE void sparse_adam_row_body(float *restrict p, float *restrict m, float *restrict v,
                                      const float *restrict d, int64_t dim,
                                      const emb__sparse_adam_args *a) {
    const float omb1 = a->one_minus_beta1, omb2 = a->one_minus_beta2, eps = a->eps,
                neg_step = a->neg_step_size;
    for (int64_t i = 0; i < dim; i++) {
        float om = m[i];
        float mu = (d[i] - om) * omb1;
        m[i] = om + mu;
        float ov = v[i];
        float vu = (d[i] * d[i] - ov) * omb2;
        v[i] = ov + vu;
        float numer = mu + om;
        float denom = sqrtf(vu + ov) + eps;
        p[i] = p[i] + (numer / denom) * neg_step;
    }
}

/* NaN: alpha's, then x's, then y's, as PyTorch's axpy (OpenBLAS saxpy) returns them. */
EMB__INLINE void axpy_body(float *restrict y, const float *restrict x, float alpha, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float r = fmaf(x[i], alpha, y[i]);
        y[i] = r == r ? r : emb__nan_of3(alpha, x[i], y[i]);
    }
}

EMB__INLINE void scale_body(float *restrict x, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = x[i] * s;
}

EMB__INLINE void scale_to_body(float *restrict y, const float *restrict x, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
}

EMB__INLINE void coalesce_first_body(float *restrict acc, const float *restrict x, float sign,
                                     int64_t n) {
    if (sign < 0)
        for (int64_t i = 0; i < n; i++) acc[i] = -x[i];
    else
        for (int64_t i = 0; i < n; i++) acc[i] = x[i];
}

/* NaN: the later entry's first, as PyTorch's coalesce (an axpy per entry) returns it. */
EMB__INLINE void coalesce_add_body(float *restrict acc, const float *restrict x, float sign,
                                   int64_t n) {
    if (sign < 0)
        for (int64_t i = 0; i < n; i++) acc[i] = emb__pick2(acc[i] + -x[i], -x[i], acc[i]);
    else
        for (int64_t i = 0; i < n; i++) acc[i] = emb__pick2(acc[i] + x[i], x[i], acc[i]);
}

EMB__INLINE void merge_entry_body(float *restrict r, const float *restrict t, float t_sign,
                                  const float *restrict s, float s_alpha, int64_t n) {
    if (t) {
        if (t_sign < 0)
            for (int64_t i = 0; i < n; i++) r[i] = 0.0f + -t[i];
        else
            for (int64_t i = 0; i < n; i++) r[i] = 0.0f + t[i];
    } else {
        for (int64_t i = 0; i < n; i++) r[i] = 0.0f;
    }
    if (s) /* NaN: alpha's, then s's, then r's (an axpy) */
        for (int64_t i = 0; i < n; i++) {
            const float v = fmaf(s[i], s_alpha, r[i]);
            r[i] = v == v ? v : emb__nan_of3(s_alpha, s[i], r[i]);
        }
}

/* ---- instantiation ------------------------------------------------------------------ */

#define EMB__OPTIM_INSTANTIATE(SUFFIX, ATTR)                                                       \
    ATTR static void sgd_dense_##SUFFIX(float *p, const float *g, float *buf, int64_t n,           \
                                        const emb__sgd_args *a) {                                  \
        sgd_dense_body(p, g, buf, n, a);                                                           \
    }                                                                                              \
    ATTR static void adagrad_dense_##SUFFIX(float *p, const float *g, float *sum, int64_t n,       \
                                            const emb__adagrad_args *a) {                          \
        adagrad_dense_body(p, g, sum, n, a);                                                       \
    }                                                                                              \
    ATTR static void adam_dense_##SUFFIX(float *p, const float *g, float *m, float *v,             \
                                         float *vmax, int64_t n, const emb__adam_args *a) {        \
        adam_dense_body(p, g, m, v, vmax, n, a);                                                   \
    }                                                                                              \
    ATTR static void adagrad_row_##SUFFIX(float *p, float *sum, const float *d, int64_t dim,       \
                                          const emb__adagrad_args *a) {                            \
        adagrad_row_body(p, sum, d, dim, a);                                                       \
    }                                                                                              \
    ATTR static void sparse_adam_row_##SUFFIX(float *p, float *m, float *v, const float *d,        \
                                              int64_t dim, const emb__sparse_adam_args *a) {       \
        sparse_adam_row_body(p, m, v, d, dim, a);                                                  \
    }                                                                                              \
    ATTR static void axpy_##SUFFIX(float *y, const float *x, float alpha, int64_t n) {             \
        axpy_body(y, x, alpha, n);                                                                 \
    }                                                                                              \
    ATTR static void scale_##SUFFIX(float *x, float s, int64_t n) {                                \
        scale_body(x, s, n);                                                                       \
    }                                                                                              \
    ATTR static void scale_to_##SUFFIX(float *y, const float *x, float s, int64_t n) {             \
        scale_to_body(y, x, s, n);                                                                 \
    }                                                                                              \
    ATTR static void coalesce_first_##SUFFIX(float *acc, const float *x, float sign, int64_t n) {  \
        coalesce_first_body(acc, x, sign, n);                                                      \
    }                                                                                              \
    ATTR static void coalesce_add_##SUFFIX(float *acc, const float *x, float sign, int64_t n) {    \
        coalesce_add_body(acc, x, sign, n);                                                        \
    }                                                                                              \
    ATTR static void merge_entry_##SUFFIX(float *r, const float *t, float t_sign, const float *s,  \
                                          float s_alpha, int64_t n) {                              \
        merge_entry_body(r, t, t_sign, s, s_alpha, n);                                             \
    }

#define EMB__OPTIM_TABLE(SUFFIX)                                                                   \
    {                                                                                              \
        sgd_dense_##SUFFIX, adagrad_dense_##SUFFIX, adam_dense_##SUFFIX, adagrad_row_##SUFFIX,     \
            sparse_adam_row_##SUFFIX, axpy_##SUFFIX, scale_##SUFFIX, scale_to_##SUFFIX,            \
            coalesce_first_##SUFFIX, coalesce_add_##SUFFIX, merge_entry_##SUFFIX,                  \
    }

#endif /* EMB_OPTIM_BODY_H */
