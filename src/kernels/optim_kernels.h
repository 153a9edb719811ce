/* src/kernels/optim_kernels.h: optimizer update kernels (torch.optim 1.13, foreach=False, CPU).
 *
 * Plain functions over float32 arrays: they never validate and never allocate. The module
 * (src/optim) checks everything once, rounds the hyper-parameters as PyTorch
 * does (a Python float scalar meets a float32 tensor as (float)x), and calls these on
 * element or row ranges; it owns the threading. Every rounding is spelled out, measured
 * against PyTorch 1.13.1 on this build (AVX2):
 *
 *   t.add_(x, alpha=a)          t = fmaf(x, (float)a, t)
 *   t.mul_(s)                   t = t * (float)s
 *   t.addcmul_(x, y, value=v)   t = fmaf((float)v * x, y, t)
 *   t.addcdiv_(x, y, value=v)   t = t + ((float)v * x) / y        (three roundings)
 *   t / s, t.add_(s)            t / (float)s, t + (float)s
 *   sqrt, pow(2), neg, sub      one rounding each (x*x for pow(2))
 *   dense.add_(sparse, alpha)   per entry in entry order: row = fmaf(v, (float)alpha, row)
 *   sparse + sparse (merge)     entry = fmaf(s, (float)alpha, 0.0f + t)
 *
 * Three variants are built from the same source (optim_body.h): optim_ref.c (baseline ISA;
 * fmaf may be a libm call) and, on x86, optim_avx2.c and optim_avx512.c compiled for
 * AVX2+FMA and AVX-512, where fmaf is one instruction. All give identical bits (fmaf is
 * exact by definition and -ffp-contract=off forbids any other fusion); emb__kernels()
 * (dispatch.h) picks one, honouring the kernel mode (emb_set_kernel_mode).
 */
#ifndef EMB_OPTIM_KERNELS_H
#define EMB_OPTIM_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

/* SGD, dense gradient, per element:
 *   d = maximize ? -g : g
 *   if has_weight_decay: d = fmaf(p, weight_decay, d)
 *   if has_momentum:     b = first ? d : fmaf(d, one_minus_dampening, b * momentum)
 *                        d = nesterov ? fmaf(b, momentum, d) : b
 *   p = fmaf(d, neg_lr, p)                                                           */
typedef struct emb__sgd_args {
    float neg_lr;              /* (float)(-lr) */
    float weight_decay;        /* (float)weight_decay */
    float momentum;            /* (float)momentum */
    float one_minus_dampening; /* (float)(1 - dampening), computed in double */
    bool has_weight_decay;     /* weight_decay != 0 (as a double) */
    bool has_momentum;         /* momentum != 0 (as a double) */
    bool nesterov;
    bool maximize;
    bool first; /* the momentum buffer is created from this step's d */
} emb__sgd_args;

/* Adagrad. Dense, per element:
 *   d = maximize ? -g : g;  if has_weight_decay: d = fmaf(p, weight_decay, d)
 *   sum = fmaf(d, d, sum);  std = sqrtf(sum) + eps;  p = p + (neg_clr * d) / std
 * Sparse, per coalesced row value d (already negated for maximize):
 *   sum = sum + d*d;        std = sqrtf(sum) + eps;  p = fmaf(d / std, neg_clr, p)  */
typedef struct emb__adagrad_args {
    float neg_clr;      /* (float)(-lr / (1 + (step - 1) * lr_decay)) */
    float eps;          /* (float)eps */
    float weight_decay; /* (float)weight_decay */
    bool has_weight_decay;
    bool maximize;
} emb__adagrad_args;

/* Adam / AdamW, dense, per element:
 *   d = maximize ? -g : g
 *   Adam:  if has_weight_decay: d = fmaf(p, weight_decay, d)
 *   AdamW: p = p * decay_factor                       ((float)(1 - lr*weight_decay))
 *   m = fmaf(d, one_minus_beta1, m * beta1)
 *   v = fmaf(one_minus_beta2 * d, d, v * beta2)
 *   amsgrad: vmax = maximum(vmax, v) (NaN propagates), and vmax replaces v below
 *   denom = sqrtf(v) / bias_correction2_sqrt + eps
 *   p = p + (neg_step_size * m) / denom                                               */
typedef struct emb__adam_args {
    float beta1, one_minus_beta1;
    float beta2, one_minus_beta2;
    float weight_decay;          /* Adam's L2 term, used when has_weight_decay */
    float decay_factor;          /* AdamW's (float)(1 - lr * weight_decay) */
    float neg_step_size;         /* (float)(-(lr / (1 - beta1^t))) */
    float bias_correction2_sqrt; /* (float)sqrt(1 - beta2^t) */
    float eps;
    bool has_weight_decay;
    bool decoupled; /* AdamW */
    bool amsgrad;
    bool maximize;
} emb__adam_args;

/* SparseAdam, per coalesced row value d (already negated for maximize):
 *   om = m; mu = (d - om) * one_minus_beta1; m = om + mu
 *   ov = v; vu = (d*d - ov) * one_minus_beta2; v = ov + vu
 *   p = p + ((mu + om) / (sqrtf(vu + ov) + eps)) * neg_step_size                      */
typedef struct emb__sparse_adam_args {
    float one_minus_beta1, one_minus_beta2;
    float eps;
    float neg_step_size; /* (float)(-(lr * sqrt(1 - beta2^t) / (1 - beta1^t))) */
} emb__sparse_adam_args;

/* A table of kernel entry points; all variants produce identical bits. */
typedef struct emb__optim_kernel_table {
    /* Dense steps over n elements (vmax may be NULL without amsgrad; buf NULL without
     * momentum). */
    void (*sgd_dense)(float *p, const float *g, float *buf, int64_t n, const emb__sgd_args *a);
    void (*adagrad_dense)(float *p, const float *g, float *sum, int64_t n,
                          const emb__adagrad_args *a);
    void (*adam_dense)(float *p, const float *g, float *m, float *v, float *vmax, int64_t n,
                       const emb__adam_args *a);
    /* One coalesced row of a sparse step (dim elements). */
    void (*adagrad_row)(float *p, float *sum, const float *d, int64_t dim,
                        const emb__adagrad_args *a);
    void (*sparse_adam_row)(float *p, float *m, float *v, const float *d, int64_t dim,
                            const emb__sparse_adam_args *a);
    /* y = fmaf(x, alpha, y): dense.add_(row, alpha=alpha). */
    void (*axpy)(float *y, const float *x, float alpha, int64_t n);
    /* x = x * s. */
    void (*scale)(float *x, float s, int64_t n);
    /* y = x * s (a sparse tensor's values times a scalar, into new storage). */
    void (*scale_to)(float *y, const float *x, float s, int64_t n);
    /* coalesce(): acc = sign * x for the first value of a row, then acc = acc + sign * x
     * for the others in permutation order (sign is +1 or -1: maximize negates the gradient
     * before coalescing). */
    void (*coalesce_first)(float *acc, const float *x, float sign, int64_t n);
    void (*coalesce_add)(float *acc, const float *x, float sign, int64_t n);
    /* One entry of the merge of two sparse tensors (PyTorch's add of uncoalesced COO
     * tensors): r = 0.0f + t_sign * t when t is non-NULL (else +0), then
     * r = fmaf(s, s_alpha, r) when s is non-NULL. */
    void (*merge_entry)(float *r, const float *t, float t_sign, const float *s, float s_alpha,
                        int64_t n);
} emb__optim_kernel_table;

/* The scalar reference table (always built). */
extern const emb__optim_kernel_table emb__optim_kernels_ref;

#endif /* EMB_OPTIM_KERNELS_H */
