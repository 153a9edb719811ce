/* Losses with forward and backward: F.cross_entropy, F.mse_loss,
 * F.binary_cross_entropy_with_logits, following PyTorch 1.13's CPU formulas.
 *
 * Numerics: every elementwise step is done in float32 in PyTorch's order (log_softmax with
 * max subtraction, x - max - log(sum), BCE's max_val formulation, mse's norm*(x-t)*g).
 * Sums (the softmax denominator, row sums, reductions) accumulate in double and are rounded
 * to float once, so they are at least as accurate as PyTorch's vectorised float sums; the
 * results agree with PyTorch within float32 tolerance, not bit for bit (exp/log also come
 * from libm here and from SLEEF in PyTorch). Reductions are split into fixed-size chunks
 * whose partial sums are added in chunk order, so results never depend on the number of
 * threads. */
#include "internal.h"
#include <emb/loss.h>

#include <inttypes.h>
#include <math.h>

emb_loss_options emb_loss_options_default(void) {
    emb_loss_options o;
    o.reduction = EMB_REDUCTION_MEAN;
    o.ignore_index = -100;
    o.label_smoothing = 0.0;
    return o;
}

/* ---------------------------------------------------------------------------------------
 * Shared checks
 * ------------------------------------------------------------------------------------- */

static emb_status read_opts(const emb_loss_options *opts, bool uses_ce_fields,
                            emb_loss_options *o) {
    *o = opts ? *opts : emb_loss_options_default();
    if (o->reduction != EMB_REDUCTION_MEAN && o->reduction != EMB_REDUCTION_SUM &&
        o->reduction != EMB_REDUCTION_NONE)
        return emb__error(EMB_ERR_INVALID,
                          "reduction must be EMB_REDUCTION_MEAN (0), EMB_REDUCTION_SUM (1) or "
                          "EMB_REDUCTION_NONE (2), got %d",
                          (int)o->reduction);
    if (uses_ce_fields && !(o->label_smoothing >= 0.0 && o->label_smoothing <= 1.0))
        return emb__error(EMB_ERR_INVALID, "label_smoothing must be between 0.0 and 1.0. Got: %g",
                          o->label_smoothing);
    return EMB_OK;
}

static emb_status check_f32(const emb_tensor *t, const char *what) {
    if (!t) return emb__null(what);
    emb_status st = emb_tensor_check(t, what);
    if (st) return st;
    if (t->dtype != EMB_FLOAT32)
        return emb__error(EMB_ERR_DTYPE, "%s must be float32, got %s", what,
                          emb_dtype_name(t->dtype));
    return EMB_OK;
}

static bool overlap(const emb_tensor *a, const emb_tensor *b) {
    if (!a || !b || !a->data || !b->data) return false;
    size_t na = emb_tensor_nbytes(a), nb = emb_tensor_nbytes(b);
    if (na == 0 || nb == 0) return false;
    uintptr_t pa = (uintptr_t)a->data, pb = (uintptr_t)b->data;
    return pa < pb + nb && pb < pa + na;
}

/* An output must not share memory with any input (NULL inputs are skipped). */
static emb_status check_no_overlap(const emb_tensor *out, const char *out_name,
                                   const emb_tensor *in0, const char *name0,
                                   const emb_tensor *in1, const char *name1,
                                   const emb_tensor *in2, const char *name2,
                                   const emb_tensor *in3, const char *name3) {
    const emb_tensor *ins[4] = {in0, in1, in2, in3};
    const char *names[4] = {name0, name1, name2, name3};
    for (int i = 0; i < 4; i++)
        if (ins[i] && overlap(out, ins[i]))
            return emb__error(EMB_ERR_INVALID, "%s must not overlap %s", out_name, names[i]);
    return EMB_OK;
}

/* The loss shape: 0-d for mean/sum, `none_shape` for none. */
static emb_status check_loss_shape(const emb_tensor *loss, const char *what, emb_reduction red,
                                   int none_ndim, const int64_t *none_shape) {
    if (red == EMB_REDUCTION_NONE) return emb__check_f32_shape(loss, what, none_ndim, none_shape);
    return emb__check_f32_shape(loss, what, 0, NULL);
}

/* Deterministic chunked reduction: sums f over [0, n) in chunks of `chunk` items, each
 * chunk into its own double pair, then adds the pairs in chunk order. */
typedef void (*chunk_fn)(const void *ctx, int64_t i0, int64_t i1, double acc[2]);

static emb_status chunked_sum(int64_t n, int64_t chunk, int64_t cost_per_item, chunk_fn f,
                              const void *ctx, double total[2]) {
    total[0] = total[1] = 0.0;
    if (n <= 0) return EMB_OK;
    int64_t nchunks = (n + chunk - 1) / chunk;
    if (nchunks == 1) {
        f(ctx, 0, n, total);
        return EMB_OK;
    }
    double *part = emb_malloc((size_t)nchunks * 2 * sizeof(double));
    if (!part)
        return emb__error(EMB_ERR_NOMEM, "cannot allocate %" PRId64 " partial sums", nchunks);
    int nt = emb__threads_for(n * cost_per_item, 1 << 15);
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
    for (int64_t k = 0; k < nchunks; k++) {
        int64_t i0 = k * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        double acc[2] = {0.0, 0.0};
        f(ctx, i0, i1, acc);
        part[2 * k] = acc[0];
        part[2 * k + 1] = acc[1];
    }
    for (int64_t k = 0; k < nchunks; k++) {
        total[0] += part[2 * k];
        total[1] += part[2 * k + 1];
    }
    emb_free(part);
    return EMB_OK;
}

/* ---------------------------------------------------------------------------------------
 * Cross-entropy
 * ------------------------------------------------------------------------------------- */

typedef struct ce_shape {
    int64_t n, c;
    bool batched; /* logits [N, C] (else [C] with a 0-d target) */
    int none_ndim;
    int64_t none_shape[1];
} ce_shape;

static const char *torch_scalar_name(emb_dtype d) {
    switch (d) {
    case EMB_INT32: return "Int";
    case EMB_INT16: return "Short";
    case EMB_INT8: return "Char";
    case EMB_UINT8: return "Byte";
    case EMB_BOOL: return "Bool";
    default: return emb_dtype_name(d);
    }
}

static emb_status ce_check(const emb_tensor *logits, const emb_tensor *target,
                           const emb_loss_options *opts, emb_loss_options *o, ce_shape *s) {
    emb_status st = check_f32(logits, "logits");
    if (st) return st;
    if (!target) return emb__null("target");
    if ((st = emb_tensor_check(target, "target"))) return st;
    if ((st = read_opts(opts, true, o))) return st;
    char buf[300], buf2[300];
    if (logits->ndim != 1 && logits->ndim != 2)
        return emb__error(EMB_ERR_SHAPE,
                          "cross_entropy: logits must be [N, C] or [C], got shape %s",
                          emb__shape_fmt(buf, sizeof buf, logits->ndim, logits->shape));
    if (target->dtype != EMB_INT64) {
        if (target->dtype == EMB_FLOAT32 || target->dtype == EMB_FLOAT64 ||
            target->dtype == EMB_FLOAT16 || target->dtype == EMB_BFLOAT16)
            return emb__error(EMB_ERR_DTYPE,
                              "cross_entropy: target must hold int64 class indices, got %s "
                              "(class-probability targets are not supported)",
                              emb_dtype_name(target->dtype));
        return emb__error(EMB_ERR_DTYPE,
                          "expected scalar type Long but found %s (cross_entropy: target must "
                          "be int64)",
                          torch_scalar_name(target->dtype));
    }
    s->batched = logits->ndim == 2;
    if (s->batched) {
        s->n = logits->shape[0];
        s->c = logits->shape[1];
        if (target->ndim == 1 && target->shape[0] != s->n)
            return emb__error(EMB_ERR_SHAPE,
                              "Expected input batch_size (%" PRId64
                              ") to match target batch_size (%" PRId64 ").",
                              s->n, target->shape[0]);
        if (target->ndim != 1)
            return emb__error(EMB_ERR_SHAPE,
                              "cross_entropy: logits of shape %s need a 1-D target [%" PRId64
                              "], got shape %s",
                              emb__shape_fmt(buf, sizeof buf, logits->ndim, logits->shape),
                              s->n, emb__shape_fmt(buf2, sizeof buf2, target->ndim,
                                                   target->shape));
        s->none_ndim = 1;
        s->none_shape[0] = s->n;
    } else {
        s->n = 1;
        s->c = logits->shape[0];
        if (target->ndim != 0)
            return emb__error(EMB_ERR_SHAPE, "size mismatch (got input: %s, target: %s)",
                              emb__shape_fmt(buf, sizeof buf, logits->ndim, logits->shape),
                              emb__shape_fmt(buf2, sizeof buf2, target->ndim, target->shape));
        s->none_ndim = 0;
    }
    const int64_t *t = target->data;
    for (int64_t i = 0; i < s->n; i++) {
        if (t[i] == o->ignore_index) continue;
        if (t[i] < 0 || t[i] >= s->c)
            return emb__error(EMB_ERR_INDEX,
                              "Target %" PRId64 " is out of bounds. (position %" PRId64
                              "; classes are [0, %" PRId64 "), ignore_index is %" PRId64 ")",
                              t[i], i, s->c, o->ignore_index);
    }
    return EMB_OK;
}

/* max and log(sum(exp(x - max))) of one row, PyTorch's log_softmax pieces: logp[c] is
 * then (x[c] - max) - lse in float. */
static void row_lse(const float *x, int64_t c, float *max_out, float *lse_out) {
    float m = x[0]; /* NaN propagates, as with PyTorch's vectorised maximum */
    for (int64_t j = 1; j < c && !isnan(m); j++)
        if (x[j] > m || isnan(x[j])) m = x[j];
    double s = 0.0;
    for (int64_t j = 0; j < c; j++) s += (double)expf(x[j] - m);
    *max_out = m;
    *lse_out = logf((float)s);
}

typedef struct ce_ctx {
    const float *x;
    const int64_t *t;
    int64_t c, ignore;
    bool smoothing;
} ce_ctx;

/* acc[0] += nll of each kept row; acc[1] += -sum_c logp (the smoothing term). */
static void ce_forward_rows(const void *vctx, int64_t i0, int64_t i1, double acc[2]) {
    const ce_ctx *k = vctx;
    for (int64_t i = i0; i < i1; i++) {
        if (k->t[i] == k->ignore) continue;
        const float *x = k->x + i * k->c;
        float m, lse;
        row_lse(x, k->c, &m, &lse);
        acc[0] += (double)(-((x[k->t[i]] - m) - lse));
        if (k->smoothing) {
            double s = 0.0;
            for (int64_t j = 0; j < k->c; j++) s += (double)((x[j] - m) - lse);
            acc[1] += (double)(-(float)s);
        }
    }
}

static void ce_count_rows(const void *vctx, int64_t i0, int64_t i1, double acc[2]) {
    const ce_ctx *k = vctx;
    for (int64_t i = i0; i < i1; i++) acc[0] += k->t[i] != k->ignore;
}

emb_status emb_cross_entropy_forward(const emb_tensor *logits, const emb_tensor *target,
                                     const emb_loss_options *opts, emb_tensor *loss) {
    emb_loss_options o;
    ce_shape s;
    emb_status st = ce_check(logits, target, opts, &o, &s);
    if (st) return st;
    if (!loss) return emb__null("loss");
    if ((st = check_loss_shape(loss, "loss", o.reduction, s.none_ndim, s.none_shape))) return st;
    if ((st = check_no_overlap(loss, "loss", logits, "logits", target, "target", NULL, NULL,
                               NULL, NULL)))
        return st;

    const bool smoothing = o.label_smoothing > 0.0;
    const float a = (float)(1.0 - o.label_smoothing);
    const float b = (float)(o.label_smoothing / (double)s.c);
    ce_ctx k = {logits->data, target->data, s.c, o.ignore_index, smoothing};
    float *out = loss->data;

    if (o.reduction == EMB_REDUCTION_NONE) {
        int nt = emb__threads_for(s.n * (s.c + 1), 1 << 15);
        (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
        for (int64_t i = 0; i < s.n; i++) {
            double acc[2] = {0.0, 0.0};
            ce_forward_rows(&k, i, i + 1, acc);
            float nll = (float)acc[0];
            out[i] = smoothing ? a * nll + (float)acc[1] * b : nll;
        }
        return EMB_OK;
    }
    double sums[2], cnt[2];
    if ((st = chunked_sum(s.n, 256, s.c + 1, ce_forward_rows, &k, sums))) return st;
    if ((st = chunked_sum(s.n, 1 << 16, 1, ce_count_rows, &k, cnt))) return st;
    float nll = (float)sums[0], smooth = (float)sums[1];
    if (o.reduction == EMB_REDUCTION_MEAN) {
        float count = (float)cnt[0];
        nll = nll / count;
        smooth = smooth / count;
    }
    *out = smoothing ? a * nll + smooth * b : nll;
    return EMB_OK;
}

emb_status emb_cross_entropy_backward(const emb_tensor *logits, const emb_tensor *target,
                                      const emb_loss_options *opts,
                                      const emb_tensor *grad_loss, emb_tensor *grad_logits) {
    emb_loss_options o;
    ce_shape s;
    emb_status st = ce_check(logits, target, opts, &o, &s);
    if (st) return st;
    if (!grad_loss) return emb__null("grad_loss");
    if ((st = check_loss_shape(grad_loss, "grad_loss", o.reduction, s.none_ndim, s.none_shape)))
        return st;
    if (!grad_logits) return emb__null("grad_logits");
    if ((st = emb__check_f32_shape(grad_logits, "grad_logits", logits->ndim, logits->shape)))
        return st;
    if ((st = check_no_overlap(grad_logits, "grad_logits", logits, "logits", target, "target",
                               grad_loss, "grad_loss", NULL, NULL)))
        return st;

    const bool smoothing = o.label_smoothing > 0.0;
    const float a = (float)(1.0 - o.label_smoothing);
    const float b = (float)(o.label_smoothing / (double)s.c);
    ce_ctx k = {logits->data, target->data, s.c, o.ignore_index, smoothing};
    float count = 0.0f;
    if (o.reduction == EMB_REDUCTION_MEAN) {
        double cnt[2];
        if ((st = chunked_sum(s.n, 1 << 16, 1, ce_count_rows, &k, cnt))) return st;
        count = (float)cnt[0];
    }
    const float *x_all = logits->data, *g = grad_loss->data;
    const int64_t *t = target->data;
    float *gx_all = grad_logits->data;
    const int64_t n = s.n, c = s.c, ignore = o.ignore_index;
    const emb_reduction red = o.reduction;
    int nt = emb__threads_for(n * (c + 1), 1 << 14);
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
    for (int64_t i = 0; i < n; i++) {
        const float *x = x_all + i * c;
        float *gx = gx_all + i * c;
        if (c == 0) continue;
        /* d loss / d logp: dn at the target (nll term), ds everywhere (smoothing term). */
        float dn = 0.0f, ds = 0.0f;
        bool kept = t[i] != ignore;
        if (kept) {
            float gi = red == EMB_REDUCTION_NONE ? g[i] : g[0];
            float gn = smoothing ? gi * a : gi;
            dn = red == EMB_REDUCTION_MEAN ? -(gn / count) : -gn;
            if (smoothing) {
                float gs = gi * b;
                ds = red == EMB_REDUCTION_MEAN ? -(gs / count) : -gs;
            }
        }
        float m, lse;
        row_lse(x, c, &m, &lse);
        /* log_softmax backward: gx = gl - exp(logp) * sum(gl). */
        float gt = kept ? (smoothing ? dn + ds : dn) : 0.0f;
        double sum = 0.0;
        if (kept) sum = smoothing ? (double)ds * (double)(c - 1) + (double)gt : (double)gt;
        float sg = (float)sum;
        for (int64_t j = 0; j < c; j++) {
            float gl = (kept && j == t[i]) ? gt : ds;
            gx[j] = gl - expf((x[j] - m) - lse) * sg;
        }
    }
    return EMB_OK;
}

/* ---------------------------------------------------------------------------------------
 * MSE
 * ------------------------------------------------------------------------------------- */

static emb_status pair_check(const emb_tensor *input, const emb_tensor *target,
                             const emb_loss_options *opts, emb_loss_options *o,
                             const char *op) {
    emb_status st = check_f32(input, "input");
    if (st) return st;
    if ((st = check_f32(target, "target"))) return st;
    if ((st = read_opts(opts, false, o))) return st;
    if (!emb_tensor_same_shape(input, target)) {
        char ts[320], is[320];
        emb_shape_str(ts, sizeof ts, target->ndim, target->shape);
        emb_shape_str(is, sizeof is, input->ndim, input->shape);
        return emb__error(EMB_ERR_SHAPE, "%s: Target size (%s) must be the same as input size (%s)",
                          op, ts, is);
    }
    return EMB_OK;
}

typedef struct elem_ctx {
    const float *x, *t, *pw;
    int64_t c; /* pos_weight length (last dimension) */
} elem_ctx;

static inline float mse_elem(float x, float t) {
    float d = x - t;
    return d * d;
}

static void mse_rows(const void *vctx, int64_t i0, int64_t i1, double acc[2]) {
    const elem_ctx *k = vctx;
    double s = 0.0;
    for (int64_t i = i0; i < i1; i++) s += (double)mse_elem(k->x[i], k->t[i]);
    acc[0] += s;
}

emb_status emb_mse_loss_forward(const emb_tensor *input, const emb_tensor *target,
                                const emb_loss_options *opts, emb_tensor *loss) {
    emb_loss_options o;
    emb_status st = pair_check(input, target, opts, &o, "mse_loss");
    if (st) return st;
    if (!loss) return emb__null("loss");
    if ((st = check_loss_shape(loss, "loss", o.reduction, input->ndim, input->shape))) return st;
    if ((st = check_no_overlap(loss, "loss", input, "input", target, "target", NULL, NULL, NULL,
                               NULL)))
        return st;
    const int64_t n = emb_tensor_numel(input);
    elem_ctx k = {input->data, target->data, NULL, 0};
    float *out = loss->data;
    if (o.reduction == EMB_REDUCTION_NONE) {
        int nt = emb__threads_for(n, 1 << 16);
        (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
        for (int64_t i = 0; i < n; i++) out[i] = mse_elem(k.x[i], k.t[i]);
        return EMB_OK;
    }
    double sums[2];
    if ((st = chunked_sum(n, 1 << 14, 1, mse_rows, &k, sums))) return st;
    float total = (float)sums[0];
    *out = o.reduction == EMB_REDUCTION_MEAN ? total / (float)n : total;
    return EMB_OK;
}

emb_status emb_mse_loss_backward(const emb_tensor *input, const emb_tensor *target,
                                 const emb_loss_options *opts, const emb_tensor *grad_loss,
                                 emb_tensor *grad_input) {
    emb_loss_options o;
    emb_status st = pair_check(input, target, opts, &o, "mse_loss");
    if (st) return st;
    if (!grad_loss) return emb__null("grad_loss");
    if ((st = check_loss_shape(grad_loss, "grad_loss", o.reduction, input->ndim, input->shape)))
        return st;
    if (!grad_input) return emb__null("grad_input");
    if ((st = emb__check_f32_shape(grad_input, "grad_input", input->ndim, input->shape)))
        return st;
    if ((st = check_no_overlap(grad_input, "grad_input", input, "input", target, "target",
                               grad_loss, "grad_loss", NULL, NULL)))
        return st;
    const int64_t n = emb_tensor_numel(input);
    /* PyTorch: norm = 2/numel (mean) or 2, as a double rounded to float; grad =
     * norm * (x - t) * g, left to right. */
    const float norm = (float)(o.reduction == EMB_REDUCTION_MEAN ? 2.0 / (double)n : 2.0);
    const float *x = input->data, *t = target->data, *g = grad_loss->data;
    float *gx = grad_input->data;
    const bool per_elem = o.reduction == EMB_REDUCTION_NONE;
    int nt = emb__threads_for(n, 1 << 16);
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
    for (int64_t i = 0; i < n; i++) gx[i] = norm * (x[i] - t[i]) * g[per_elem ? i : 0];
    return EMB_OK;
}

/* ---------------------------------------------------------------------------------------
 * Binary cross-entropy with logits
 * ------------------------------------------------------------------------------------- */

static emb_status bce_check(const emb_tensor *input, const emb_tensor *target,
                            const emb_tensor *pos_weight, const emb_loss_options *opts,
                            emb_loss_options *o) {
    emb_status st = pair_check(input, target, opts, o, "binary_cross_entropy_with_logits");
    if (st) return st;
    if (!pos_weight) return EMB_OK;
    if ((st = check_f32(pos_weight, "pos_weight"))) return st;
    char buf[300], buf2[300];
    if (input->ndim == 0)
        return emb__error(EMB_ERR_SHAPE,
                          "pos_weight is broadcast over the last dimension of input, but input "
                          "is 0-d");
    int64_t c = input->shape[input->ndim - 1];
    if (pos_weight->ndim != 1 || pos_weight->shape[0] != c)
        return emb__error(EMB_ERR_SHAPE,
                          "pos_weight has shape %s, expected [%" PRId64
                          "] (the last dimension of input %s)",
                          emb__shape_fmt(buf, sizeof buf, pos_weight->ndim, pos_weight->shape),
                          c, emb__shape_fmt(buf2, sizeof buf2, input->ndim, input->shape));
    return EMB_OK;
}

/* PyTorch's stable form: m = max(-x, 0);
 *   no pos_weight: (1-t)*x + m + log(exp(-m) + exp(-x-m))
 *   pos_weight p:  (1-t)*x + (1 + (p-1)*t) * (log(exp(-m) + exp(-x-m)) + m) */
static inline float bce_elem(float x, float t, const float *pw) {
    float m = -x;
    if (!(m > 0.0f)) m = isnan(m) ? m : 0.0f;
    float e = logf(expf(-m) + expf(-x - m));
    float lin = (1.0f - t) * x;
    if (!pw) return lin + m + e;
    float lw = (*pw - 1.0f) * t + 1.0f;
    return lin + lw * (e + m);
}

static void bce_rows(const void *vctx, int64_t i0, int64_t i1, double acc[2]) {
    const elem_ctx *k = vctx;
    double s = 0.0;
    for (int64_t i = i0; i < i1; i++)
        s += (double)bce_elem(k->x[i], k->t[i], k->pw ? &k->pw[i % k->c] : NULL);
    acc[0] += s;
}

emb_status emb_bce_with_logits_forward(const emb_tensor *input, const emb_tensor *target,
                                       const emb_tensor *pos_weight,
                                       const emb_loss_options *opts, emb_tensor *loss) {
    emb_loss_options o;
    emb_status st = bce_check(input, target, pos_weight, opts, &o);
    if (st) return st;
    if (!loss) return emb__null("loss");
    if ((st = check_loss_shape(loss, "loss", o.reduction, input->ndim, input->shape))) return st;
    if ((st = check_no_overlap(loss, "loss", input, "input", target, "target", pos_weight,
                               "pos_weight", NULL, NULL)))
        return st;
    const int64_t n = emb_tensor_numel(input);
    elem_ctx k = {input->data, target->data, pos_weight ? pos_weight->data : NULL,
                  pos_weight ? pos_weight->shape[0] : 0};
    float *out = loss->data;
    if (o.reduction == EMB_REDUCTION_NONE) {
        int nt = emb__threads_for(n, 1 << 14);
        (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
        for (int64_t i = 0; i < n; i++)
            out[i] = bce_elem(k.x[i], k.t[i], k.pw ? &k.pw[i % k.c] : NULL);
        return EMB_OK;
    }
    double sums[2];
    if ((st = chunked_sum(n, 1 << 12, 4, bce_rows, &k, sums))) return st;
    float total = (float)sums[0];
    *out = o.reduction == EMB_REDUCTION_MEAN ? total / (float)n : total;
    return EMB_OK;
}

emb_status emb_bce_with_logits_backward(const emb_tensor *input, const emb_tensor *target,
                                        const emb_tensor *pos_weight,
                                        const emb_loss_options *opts,
                                        const emb_tensor *grad_loss, emb_tensor *grad_input) {
    emb_loss_options o;
    emb_status st = bce_check(input, target, pos_weight, opts, &o);
    if (st) return st;
    if (!grad_loss) return emb__null("grad_loss");
    if ((st = check_loss_shape(grad_loss, "grad_loss", o.reduction, input->ndim, input->shape)))
        return st;
    if (!grad_input) return emb__null("grad_input");
    if ((st = emb__check_f32_shape(grad_input, "grad_input", input->ndim, input->shape)))
        return st;
    if ((st = check_no_overlap(grad_input, "grad_input", input, "input", target, "target",
                               pos_weight, "pos_weight", grad_loss, "grad_loss")))
        return st;
    const int64_t n = emb_tensor_numel(input);
    const float *x = input->data, *t = target->data, *g = grad_loss->data;
    const float *pw = pos_weight ? pos_weight->data : NULL;
    const int64_t c = pos_weight ? pos_weight->shape[0] : 0;
    float *gx = grad_input->data;
    const bool per_elem = o.reduction == EMB_REDUCTION_NONE;
    const bool mean = o.reduction == EMB_REDUCTION_MEAN;
    const float numel = (float)n;
    int nt = emb__threads_for(n, 1 << 14);
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
    for (int64_t i = 0; i < n; i++) {
        float sig = 1.0f / (1.0f + expf(-x[i]));
        float gi = g[per_elem ? i : 0], v;
        if (pw) {
            /* PyTorch: pt = p*t; ((pt + 1 - t) * sigmoid(x) - pt) * g */
            float pt = pw[i % c] * t[i];
            v = (((pt + 1.0f) - t[i]) * sig - pt) * gi;
        } else {
            v = (sig - t[i]) * gi;
        }
        gx[i] = mean ? v / numel : v;
    }
    return EMB_OK;
}
