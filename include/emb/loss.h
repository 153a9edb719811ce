/* emb/loss.h: loss functions with forward and backward, as PyTorch defines them. */
#ifndef EMB_LOSS_H
#define EMB_LOSS_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum emb_reduction {
    EMB_REDUCTION_MEAN = 0, /* PyTorch's default */
    EMB_REDUCTION_SUM = 1,
    EMB_REDUCTION_NONE = 2,
} emb_reduction;

typedef struct emb_loss_options {
    emb_reduction reduction;  /* default EMB_REDUCTION_MEAN */
    int64_t ignore_index;     /* cross-entropy only; default -100 */
    double label_smoothing;   /* cross-entropy only; default 0, must be in [0, 1] (PyTorch
                                 silently treats a negative or NaN value as 0; emb rejects
                                 it) */
    const emb_tensor *weight; /* NULL (default) or float32, PyTorch's `weight`, borrowed
                                 for the call only. cross-entropy / nll_loss: [C], the
                                 rescaling weight of each class; BCE with logits: the
                                 elementwise weight, broadcastable to the input's shape */
} emb_loss_options;

EMB_API emb_loss_options emb_loss_options_default(void);

/* Every loss below has the same calling pattern:
 *   forward:  loss = f(input, target). `loss` is a float32 0-d tensor for mean/sum, or of
 *             the per-element shape for none.
 *   backward: grad_input = d(loss)/d(input) * grad_loss, overwriting grad_input (shape of
 *             input). grad_loss has the shape of loss (0-d: usually 1.0).
 * opts NULL: the defaults. Errors: EMB_ERR_NULL, EMB_ERR_DTYPE, EMB_ERR_SHAPE,
 * EMB_ERR_INVALID (bad reduction or label_smoothing; an output overlapping an input),
 * EMB_ERR_INDEX (a class target out of range, PyTorch: "Target 5 is out of bounds."),
 * EMB_ERR_NOMEM, EMB_ERR_OVERFLOW. Outputs are unchanged on error. Reductions mean over
 * zero elements (or, for cross-entropy, over zero non-ignored targets) give NaN, as in
 * PyTorch. Results do not depend on the thread count. Thread safety: calls only read their
 * inputs; concurrent calls with distinct outputs are safe.
 *
 * Numerics (docs/semantics.md, "Losses"): cross_entropy, nll_loss and log_softmax
 * reproduce PyTorch 1.13's CPU arithmetic step by step — log_softmax's 8-lane reductions
 * with SLEEF's exp/log (the functions torch's AVX2 kernels call), nll_loss's cascade sum,
 * torch's sum order for the label-smoothing terms, and autograd's chain for the backward —
 * and are bit-identical to torch on a CPU where torch dispatches to AVX2 (torch's
 * "CPU capability usage: AVX2") when emb was built with SLEEF; the reference kernels
 * (EMB_KERNELS_REF, or no SLEEF/AVX2) reproduce torch's DEFAULT capability (libm
 * expf/logf) and differ from torch's AVX2 results by a few ulp. mse and BCE: see below. */

/* F.cross_entropy(logits, target, weight=opts->weight, ignore_index, label_smoothing):
 * logits float32 [N, C, d1, ...] (rank >= 3, the K-dimensional loss), [N, C], or [C] with
 * a 0-d target; target int64 class indices [N, d1, ...] (resp. [N], 0-d); the unreduced
 * loss has the target's shape. Positions whose target is ignore_index contribute nothing
 * and are not counted by the mean; with a weight, the mean divides by the sum of the kept
 * targets' weights. Shape errors carry torch's messages ("Expected target size [2, 4],
 * got [2]", "Expected input batch_size (2) to match target batch_size (3).", ...). */
EMB_API emb_status emb_cross_entropy_forward(const emb_tensor *logits, const emb_tensor *target,
                                             const emb_loss_options *opts, emb_tensor *loss);
EMB_API emb_status emb_cross_entropy_backward(const emb_tensor *logits, const emb_tensor *target,
                                              const emb_loss_options *opts,
                                              const emb_tensor *grad_loss, emb_tensor *grad_logits);

/* F.nll_loss(input, target, weight=opts->weight, ignore_index): input float32
 * log-probabilities, shapes and rules as cross-entropy;
 * opts->label_smoothing must be 0 (F.nll_loss has none). */
EMB_API emb_status emb_nll_loss_forward(const emb_tensor *input, const emb_tensor *target,
                                        const emb_loss_options *opts, emb_tensor *loss);
EMB_API emb_status emb_nll_loss_backward(const emb_tensor *input, const emb_tensor *target,
                                         const emb_loss_options *opts, const emb_tensor *grad_loss,
                                         emb_tensor *grad_input);

/* F.log_softmax(x, dim=-1): x float32 of rank >= 1, y of the same shape. Backward takes
 * the forward's output y (as PyTorch does) and grad_y, and overwrites grad_x = grad_y -
 * exp(y) * sum(grad_y) per row. Errors: EMB_ERR_NULL, EMB_ERR_DTYPE, EMB_ERR_SHAPE,
 * EMB_ERR_INVALID (an output overlapping an input); outputs unchanged on error.
 * Bit-identical to torch as described above. */
EMB_API emb_status emb_log_softmax_forward(const emb_tensor *x, emb_tensor *y);
EMB_API emb_status emb_log_softmax_backward(const emb_tensor *y, const emb_tensor *grad_y,
                                            emb_tensor *grad_x);

/* F.mse_loss(input, target): input float32 of any shape; target float32 of the input's
 * shape or broadcastable to it (numpy rules: [C] or [1, C] against [N, C], ...); the
 * unreduced loss and grad_input have the input's shape. torch also broadcasts the input
 * against a larger target (with a warning); emb refuses that (EMB_ERR_SHAPE, "emb
 * broadcasts only the target to the input's shape"). Non-broadcastable shapes give
 * torch's message. Bit-identical to torch (elementwise (x - t)^2, torch's float sum order,
 * mean = sum / numel; grad = norm * (x - t) * g), with one torch thread for sums of more
 * than 32768 values (torch splits those between its threads). */
EMB_API emb_status emb_mse_loss_forward(const emb_tensor *input, const emb_tensor *target,
                                        const emb_loss_options *opts, emb_tensor *loss);
EMB_API emb_status emb_mse_loss_backward(const emb_tensor *input, const emb_tensor *target,
                                         const emb_loss_options *opts, const emb_tensor *grad_loss,
                                         emb_tensor *grad_input);

/* F.binary_cross_entropy_with_logits(input, target, weight=opts->weight,
 * pos_weight=pos_weight): input and target float32 of the same shape; pos_weight NULL or
 * float32 [C] broadcast over the last dimension; the weight broadcastable to the input's
 * shape (one that would make the input grow is refused, as for mse). Bit-identical to
 * torch (its max_val formulation op by op, exp/log/sigmoid as its AVX2 kernels compute
 * them, torch's sum order) for up to 32768 elements at any torch thread count, and for
 * any size against torch on one intra-op thread (torch splits longer loops and sums
 * between its threads); with the reference kernels (EMB_KERNELS_REF, or no SLEEF/AVX2),
 * bit-identical to torch's DEFAULT capability instead, as cross_entropy. */
EMB_API emb_status emb_bce_with_logits_forward(const emb_tensor *input, const emb_tensor *target,
                                               const emb_tensor *pos_weight,
                                               const emb_loss_options *opts, emb_tensor *loss);
EMB_API emb_status emb_bce_with_logits_backward(const emb_tensor *input, const emb_tensor *target,
                                                const emb_tensor *pos_weight,
                                                const emb_loss_options *opts,
                                                const emb_tensor *grad_loss,
                                                emb_tensor *grad_input);

#ifdef __cplusplus
}
#endif

#endif /* EMB_LOSS_H */
