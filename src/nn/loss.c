/* src/nn/loss.c: the losses' options and the checks and helpers the loss families share
 * (loss_internal.h). The losses themselves: loss_ce.c (F.cross_entropy, F.nll_loss,
 * F.log_softmax), loss_mse.c (F.mse_loss), loss_bce.c (F.binary_cross_entropy_with_logits),
 * following PyTorch 1.13's CPU arithmetic.
 *
 * Each family's file states its arithmetic and how far it matches torch bit for bit; no
 * result depends on the number of threads. */
#include "loss_internal.h"
#include "kernels/softmax.h"

#include <inttypes.h>
#include <string.h>

emb_loss_options emb_loss_options_default(void) {
    emb_loss_options o;
    o.reduction = EMB_REDUCTION_MEAN;
    o.ignore_index = -100;
    o.label_smoothing = 0.0;
    o.weight = NULL;
    return o;
}

/* ---------------------------------------------------------------------------------------
 * Shared checks
 * ------------------------------------------------------------------------------------- */

emb_status emb__loss_read_opts(const emb_loss_options *opts, bool uses_ce_fields,
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

emb_status emb__loss_check_f32(const emb_tensor *t, const char *what) {
    if (!t) return emb__null(what);
    emb_status st = emb_tensor_check(t, what);
    if (st) return st;
    if (t->dtype != EMB_FLOAT32)
        return emb__error(EMB_ERR_DTYPE, "%s must be float32, got %s", what,
                          emb_dtype_name(t->dtype));
    return EMB_OK;
}

emb_status emb__loss_check_no_overlap(const emb_tensor *out, const char *out_name,
                                      const emb_tensor *in0, const char *name0,
                                      const emb_tensor *in1, const char *name1,
                                      const emb_tensor *in2, const char *name2,
                                      const emb_tensor *in3, const char *name3) {
    const emb_tensor *ins[4] = {in0, in1, in2, in3};
    const char *names[4] = {name0, name1, name2, name3};
    for (int i = 0; i < 4; i++)
        if (emb__tensors_overlap(out, ins[i]))
            return emb__error(EMB_ERR_INVALID, "%s must not overlap %s", out_name, names[i]);
    return EMB_OK;
}

emb_status emb__loss_check_shape(const emb_tensor *loss, const char *what, emb_reduction red,
                                 int none_ndim, const int64_t *none_shape) {
    if (red == EMB_REDUCTION_NONE) return emb__check_f32_shape(loss, what, none_ndim, none_shape);
    return emb__check_f32_shape(loss, what, 0, NULL);
}

emb_status emb__loss_check_grads(const emb_tensor *input, emb_reduction red,
                                 const emb_tensor *grad_loss, const emb_tensor *grad_input) {
    if (!grad_loss) return emb__null("grad_loss");
    emb_status st = emb__loss_check_shape(grad_loss, "grad_loss", red, input->ndim, input->shape);
    if (st) return st;
    if (!grad_input) return emb__null("grad_input");
    return emb__check_f32_shape(grad_input, "grad_input", input->ndim, input->shape);
}

void emb__loss_reduce(const float *values, int64_t n, emb_reduction red, emb_tensor *loss) {
    float total = emb__torch_sum_f32(values, n);
    *(float *)loss->data = red == EMB_REDUCTION_MEAN ? total / (float)n : total;
}

emb_status emb__loss_alloc_rows(int64_t n, int64_t c, float **out) {
    *out = NULL;
    int64_t cnt;
    if (!emb__mul_i64(n, c, &cnt) || cnt > (int64_t)(SIZE_MAX / sizeof(float)))
        return emb__error(EMB_ERR_OVERFLOW, "%" PRId64 " x %" PRId64 " values overflow", n, c);
    if (cnt == 0) return EMB_OK;
    *out = emb__malloc((size_t)cnt * sizeof(float));
    if (!*out)
        return emb__error(EMB_ERR_NOMEM, "cannot allocate %" PRId64 " x %" PRId64 " float32 values",
                          n, c);
    return EMB_OK;
}

/* ---------------------------------------------------------------------------------------
 * Broadcasting a target (or a weight) to the input's shape (mse_loss, BCE's weight)
 * ------------------------------------------------------------------------------------- */

emb_status emb__loss_expand_like(const emb_tensor *input, const emb_tensor *t_t, float **out) {
    const int64_t n = emb_tensor_numel(input);
    emb_status st = emb__loss_alloc_rows(n, 1, out);
    if (st || n == 0) return st;
    int64_t tstr[EMB_MAX_DIMS], acc = 1;
    for (int k = input->ndim - 1; k >= 0; k--) {
        int ib = t_t->ndim - input->ndim + k;
        int64_t b = ib >= 0 ? t_t->shape[ib] : 1;
        tstr[k] = b == 1 ? 0 : acc;
        acc *= b;
    }
    const float *t = t_t->data;
    int64_t idx[EMB_MAX_DIMS] = {0}, off = 0;
    for (int64_t i = 0; i < n; i++) {
        (*out)[i] = t[off];
        for (int k = input->ndim - 1; k >= 0; k--) {
            if (++idx[k] < input->shape[k]) {
                off += tstr[k];
                break;
            }
            off -= tstr[k] * (input->shape[k] - 1);
            idx[k] = 0;
        }
    }
    return EMB_OK;
}

emb_status emb__loss_check_broadcast_to(const emb_tensor *input, const emb_tensor *t,
                                        const char *what, const char *op) {
    const int nd = input->ndim > t->ndim ? input->ndim : t->ndim;
    bool grows = t->ndim > input->ndim;
    for (int k = 0; k < nd; k++) {
        int ia = input->ndim - nd + k, ib = t->ndim - nd + k;
        int64_t a = ia >= 0 ? input->shape[ia] : 1, b = ib >= 0 ? t->shape[ib] : 1;
        if (a != b && a != 1 && b != 1)
            return emb__error(EMB_ERR_SHAPE,
                              "The size of tensor a (%" PRId64 ") must match the size of tensor "
                              "b (%" PRId64 ") at non-singleton dimension %d",
                              a, b, k);
        if (a != b && a == 1) grows = true;
    }
    if (grows) {
        char is[300], ts[300];
        return emb__error(EMB_ERR_SHAPE,
                          "%s: the %s %s would broadcast the input %s to a larger shape; emb "
                          "broadcasts only the %s to the input's shape",
                          op, what, emb__shape_fmt(ts, sizeof ts, t->ndim, t->shape),
                          emb__shape_fmt(is, sizeof is, input->ndim, input->shape), what);
    }
    return EMB_OK;
}
