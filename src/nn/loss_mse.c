/* src/nn/loss_mse.c: F.mse_loss, forward and backward.
 *
 * MSE: torch's F.mse_loss broadcasts input and target (with a UserWarning when their shapes
 * differ); emb broadcasts the target to the input's shape (numpy rules), and refuses a
 * target that would make the input grow (then torch's gradient needs a sum over the
 * broadcast dimensions; see docs/differences.md). Arithmetic (bit-identical to torch):
 *   loss_i = (x_i - t_i) * (x_i - t_i); sum: torch's float sum order over the loss tensor
 *   (emb__torch_sum_f32); mean: that sum / (float)numel;
 *   grad_i = norm * (x_i - t_i) * g (norm = (float)(2 / numel) for mean, else 2).
 * torch splits sums of more than 32768 values between its threads; emb's order is torch's
 * with one intra-op thread, whatever emb's thread count. */
#include "loss_internal.h"
#include "kernels/softmax.h"

/* Checks input/target (float32, target broadcastable to input) and, when their shapes
 * differ, materialises the broadcast target into *expanded (caller frees). */
static emb_status mse_check(const emb_tensor *input, const emb_tensor *target,
                            const emb_loss_options *opts, emb_loss_options *o, float **expanded) {
    *expanded = NULL;
    emb_status st = emb__loss_check_f32(input, "input");
    if (st) return st;
    if ((st = emb__loss_check_f32(target, "target"))) return st;
    if ((st = emb__loss_read_opts(opts, false, o))) return st;
    if (emb__tensor_same_shape(input, target)) return EMB_OK;
    if ((st = emb__loss_check_broadcast_to(input, target, "target", "mse_loss"))) return st;
    return emb__loss_expand_like(input, target, expanded);
}

/* Elements [lo, hi): out = (x - t)^2 (g NULL), or the gradient norm * (x - t) * g (g per
 * element, or g[0] for a reduced loss). */
typedef struct mse_ctx {
    const float *x, *t, *g;
    float *out;
    float norm;
    bool per_elem;
} mse_ctx;

static void mse_range(void *p, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    const mse_ctx *c = p;
    const float *x = c->x, *t = c->t, *g = c->g;
    float *out = c->out;
    if (!g) {
        for (int64_t i = lo; i < hi; i++) {
            float d = x[i] - t[i];
            out[i] = d * d;
        }
        return;
    }
    for (int64_t i = lo; i < hi; i++) out[i] = c->norm * (x[i] - t[i]) * g[c->per_elem ? i : 0];
}

emb_status emb_mse_loss_forward(const emb_tensor *input, const emb_tensor *target,
                                const emb_loss_options *opts, emb_tensor *loss) {
    emb_loss_options o;
    float *tb = NULL;
    emb_status st = mse_check(input, target, opts, &o, &tb);
    if (st) return st;
    if (!loss) st = emb__null("loss");
    if (!st) st = emb__loss_check_shape(loss, "loss", o.reduction, input->ndim, input->shape);
    if (!st)
        st = emb__loss_check_no_overlap(loss, "loss", input, "input", target, "target", NULL, NULL,
                                        NULL, NULL);
    const int64_t n = emb_tensor_numel(input);
    float *buf = NULL;
    if (!st && o.reduction != EMB_REDUCTION_NONE) st = emb__loss_alloc_rows(n, 1, &buf);
    if (st) {
        emb__free(tb);
        return st;
    }
    const float *x = input->data, *t = tb ? tb : target->data;
    float *out = o.reduction == EMB_REDUCTION_NONE ? loss->data : buf;
    mse_ctx c = {x, t, NULL, out, 0.0f, false};
    emb__parallel_for(emb__threads_for(n, 1 << 16), n, mse_range, &c);
    if (o.reduction != EMB_REDUCTION_NONE) emb__loss_reduce(buf, n, o.reduction, loss);
    emb__free(buf);
    emb__free(tb);
    return EMB_OK;
}

emb_status emb_mse_loss_backward(const emb_tensor *input, const emb_tensor *target,
                                 const emb_loss_options *opts, const emb_tensor *grad_loss,
                                 emb_tensor *grad_input) {
    emb_loss_options o;
    float *tb = NULL;
    emb_status st = mse_check(input, target, opts, &o, &tb);
    if (st) return st;
    st = emb__loss_check_grads(input, o.reduction, grad_loss, grad_input);
    if (!st)
        st = emb__loss_check_no_overlap(grad_input, "grad_input", input, "input", target, "target",
                                        grad_loss, "grad_loss", NULL, NULL);
    if (st) {
        emb__free(tb);
        return st;
    }
    const int64_t n = emb_tensor_numel(input);
    /* PyTorch: norm = 2/numel (mean) or 2, as a double rounded to float; grad =
     * norm * (x - t) * g, left to right. */
    const float norm = (float)(o.reduction == EMB_REDUCTION_MEAN ? 2.0 / (double)n : 2.0);
    const float *x = input->data, *t = tb ? tb : target->data, *g = grad_loss->data;
    float *gx = grad_input->data;
    const bool per_elem = o.reduction == EMB_REDUCTION_NONE;
    mse_ctx c = {x, t, g, gx, norm, per_elem};
    emb__parallel_for(emb__threads_for(n, 1 << 16), n, mse_range, &c);
    emb__free(tb);
    return EMB_OK;
}
