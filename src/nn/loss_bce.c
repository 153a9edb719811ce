/* src/nn/loss_bce.c: F.binary_cross_entropy_with_logits, forward and backward.
 *
 * Binary cross-entropy with logits, PyTorch 1.13's composite (Loss.cpp), op by op in
 * float, exp and log through torch's vml (every element via SLEEF on AVX2):
 *   m = max(-x, 0)
 *   no pos_weight: loss = ((1 - t) * x + m) + log(exp(-m) + exp(-x - m))
 *   pos_weight p:  loss = (1 - t) * x + ((p - 1) * t + 1) * (log(exp(-m) + exp(-x - m)) + m)
 *   weight w:      loss = loss * w;  then sum (torch's order) or sum / numel.
 * Backward (binary_cross_entropy_with_logits_backward), sigmoid as torch's vectorised
 * kernel runs it (vectors of 16, a scalar tail of n % 16 elements):
 *   no pos_weight: (sigmoid(x) - t) * g;  p: (((p*t + 1) - t) * sigmoid(x) - p*t) * g;
 *   then * w; mean: / numel.
 * pos_weight is [C] over the last dimension; the weight (opts->weight) broadcasts to the
 * input's shape. Bit-identical to torch for up to 32768 elements at any torch thread
 * count and for any size with one torch thread (torch splits longer elementwise loops and
 * sums between its threads, which moves the sigmoid's scalar tail and the sum order).
 * NaN: torch composes the loss with add_ (a fused b * 1 + a), in which the added term's NaN
 * wins (kernels/nan_rules.h, docs/semantics.md §1.1): a NaN logit gives SLEEF's log NaN. */
#include "loss_internal.h"

#include <emb/print.h>
#include "kernels/nan_rules.h"
#include "kernels/dispatch.h"
#include "kernels/softmax.h"

#include <inttypes.h>
#include <math.h>

static emb_status pair_check(const emb_tensor *input, const emb_tensor *target,
                             const emb_loss_options *opts, emb_loss_options *o, const char *op) {
    emb_status st = emb__loss_check_f32(input, "input");
    if (st) return st;
    if ((st = emb__loss_check_f32(target, "target"))) return st;
    if ((st = emb__loss_read_opts(opts, false, o))) return st;
    if (!emb__tensor_same_shape(input, target)) {
        char ts[320], is[320];
        emb_shape_repr(target->ndim, target->shape, ts, sizeof ts);
        emb_shape_repr(input->ndim, input->shape, is, sizeof is);
        return emb__error(EMB_ERR_SHAPE, "%s: Target size (%s) must be the same as input size (%s)",
                          op, ts, is);
    }
    return EMB_OK;
}

static emb_status bce_check(const emb_tensor *input, const emb_tensor *target,
                            const emb_tensor *pos_weight, const emb_loss_options *opts,
                            emb_loss_options *o, float **wexp) {
    *wexp = NULL;
    emb_status st = pair_check(input, target, opts, o, "binary_cross_entropy_with_logits");
    if (st) return st;
    if (pos_weight) {
        if ((st = emb__loss_check_f32(pos_weight, "pos_weight"))) return st;
        char buf[300], buf2[300];
        if (input->ndim == 0)
            return emb__error(EMB_ERR_SHAPE,
                              "pos_weight is broadcast over the last dimension of input, but "
                              "input is 0-d");
        int64_t c = input->shape[input->ndim - 1];
        if (pos_weight->ndim != 1 || pos_weight->shape[0] != c)
            return emb__error(EMB_ERR_SHAPE,
                              "pos_weight has shape %s, expected [%" PRId64
                              "] (the last dimension of input %s)",
                              emb__shape_fmt(buf, sizeof buf, pos_weight->ndim, pos_weight->shape),
                              c, emb__shape_fmt(buf2, sizeof buf2, input->ndim, input->shape));
    }
    if (o->weight) {
        if ((st = emb__loss_check_f32(o->weight, "weight"))) return st;
        if ((st = emb__loss_check_broadcast_to(input, o->weight, "weight",
                                               "binary_cross_entropy_with_logits")))
            return st;
        if ((st = emb__loss_expand_like(input, o->weight, wexp))) return st;
    }
    return EMB_OK;
}

/* The unreduced loss into out[n] (scratch: 2n floats). */
static void bce_loss(const float *x, const float *t, const float *pw, int64_t c, const float *w,
                     int64_t n, float *out, float *scratch) {
    emb__log_softmax_kernels k = emb__log_softmax_pick();
    float *e1 = scratch, *e2 = scratch + n;
    for (int64_t i = 0; i < n; i++) {
        float m = -x[i];
        if (!(m > 0.0f)) m = isnan(m) ? m : 0.0f; /* clamp_min(-x, 0), NaN kept */
        out[i] = m;
        e1[i] = -m;
        e2[i] = -x[i] - m;
    }
    k.vexp(e1, e1, n);
    k.vexp(e2, e2, n);
    for (int64_t i = 0; i < n; i++) e1[i] = emb__pick2(e1[i] + e2[i], e2[i], e1[i]);
    k.vlog(e1, e1, n);
    for (int64_t i = 0; i < n; i++) {
        float m = out[i], lin = (1.0f - t[i]) * x[i], v;
        if (pw) {
            float lw = (pw[i % c] - 1.0f) * t[i] + 1.0f;
            const float p = lw * emb__pick2(e1[i] + m, m, e1[i]);
            v = emb__pick2(lin + p, p, lin);
        } else {
            const float a = emb__pick2(lin + m, m, lin);
            v = emb__pick2(a + e1[i], e1[i], a);
        }
        out[i] = w ? v * w[i] : v;
    }
}

emb_status emb_bce_with_logits_forward(const emb_tensor *input, const emb_tensor *target,
                                       const emb_tensor *pos_weight, const emb_loss_options *opts,
                                       emb_tensor *loss) {
    emb_loss_options o;
    float *w = NULL, *buf = NULL;
    emb_status st = bce_check(input, target, pos_weight, opts, &o, &w);
    if (!st && !loss) st = emb__null("loss");
    if (!st) st = emb__loss_check_shape(loss, "loss", o.reduction, input->ndim, input->shape);
    if (!st)
        st = emb__loss_check_no_overlap(loss, "loss", input, "input", target, "target", pos_weight,
                                        "pos_weight", o.weight, "weight");
    const int64_t n = st ? 0 : emb_tensor_numel(input);
    const bool none = o.reduction == EMB_REDUCTION_NONE;
    if (!st) st = emb__loss_alloc_rows(n, none ? 2 : 3, &buf);
    if (st) {
        emb__free(w);
        return st;
    }
    float *out = none ? loss->data : (n > 0 ? buf + 2 * n : NULL);
    if (n > 0)
        bce_loss(input->data, target->data, pos_weight ? pos_weight->data : NULL,
                 pos_weight ? pos_weight->shape[0] : 1, w, n, out, buf);
    if (!none) emb__loss_reduce(out, n, o.reduction, loss);
    emb__free(buf);
    emb__free(w);
    return EMB_OK;
}

emb_status emb_bce_with_logits_backward(const emb_tensor *input, const emb_tensor *target,
                                        const emb_tensor *pos_weight, const emb_loss_options *opts,
                                        const emb_tensor *grad_loss, emb_tensor *grad_input) {
    emb_loss_options o;
    float *w = NULL;
    emb_status st = bce_check(input, target, pos_weight, opts, &o, &w);
    if (!st) st = emb__loss_check_grads(input, o.reduction, grad_loss, grad_input);
    if (!st)
        st = emb__loss_check_no_overlap(grad_input, "grad_input", input, "input", target, "target",
                                        pos_weight, "pos_weight", grad_loss, "grad_loss");
    if (!st && o.weight && emb__tensors_overlap(grad_input, o.weight))
        st = emb__error(EMB_ERR_INVALID, "grad_input must not overlap weight");
    if (st) {
        emb__free(w);
        return st;
    }
    const int64_t n = emb_tensor_numel(input);
    const float *x = input->data, *t = target->data, *g = grad_loss->data;
    const float *pw = pos_weight ? pos_weight->data : NULL;
    const int64_t c = pos_weight ? pos_weight->shape[0] : 1;
    float *gx = grad_input->data;
    const bool per_elem = o.reduction == EMB_REDUCTION_NONE;
    const bool mean = o.reduction == EMB_REDUCTION_MEAN;
    const float numel = (float)n;
    if (n > 0) emb__log_softmax_pick().sigmoid(x, gx, n); /* gx = sigmoid(x) */
    for (int64_t i = 0; i < n; i++) {
        float sig = gx[i], gi = g[per_elem ? i : 0], v;
        if (pw) {
            float pt = pw[i % c] * t[i];
            v = (((pt + 1.0f) - t[i]) * sig - pt) * gi;
        } else {
            v = (sig - t[i]) * gi;
        }
        if (w) v = v * w[i];
        gx[i] = mean ? v / numel : v;
    }
    emb__free(w);
    return EMB_OK;
}
