/* src/nn/loss_internal.h: the checks and helpers the loss families share (src/nn/loss.c),
 * private to nn. */
#ifndef EMB_LOSS_INTERNAL_H
#define EMB_LOSS_INTERNAL_H

#include "internal.h"

#include <emb/loss.h>

/* *o = *opts, or the defaults for NULL; checks the reduction and, for the losses that use
 * it (uses_ce_fields), label_smoothing. */
emb_status emb__loss_read_opts(const emb_loss_options *opts, bool uses_ce_fields,
                               emb_loss_options *o);

/* t is a valid float32 tensor (NULL: "<what> must not be NULL"). */
emb_status emb__loss_check_f32(const emb_tensor *t, const char *what);

/* An output must not share memory with any input (NULL inputs are skipped; core's
 * emb__tensors_overlap decides): "<out_name> must not overlap <name>". */
emb_status emb__loss_check_no_overlap(const emb_tensor *out, const char *out_name,
                                      const emb_tensor *in0, const char *name0,
                                      const emb_tensor *in1, const char *name1,
                                      const emb_tensor *in2, const char *name2,
                                      const emb_tensor *in3, const char *name3);

/* The loss shape: 0-d for mean/sum, `none_shape` for none. */
emb_status emb__loss_check_shape(const emb_tensor *loss, const char *what, emb_reduction red,
                                 int none_ndim, const int64_t *none_shape);

/* The gradients of an elementwise loss's backward: grad_loss given, of the loss's shape
 * (0-d, or input's for reduction none), and grad_input given, float32 of input's shape. */
emb_status emb__loss_check_grads(const emb_tensor *input, emb_reduction red,
                                 const emb_tensor *grad_loss, const emb_tensor *grad_input);

/* The 0-d loss of a mean or sum reduction: the n per-element losses `values` summed in
 * torch's order (emb__torch_sum_f32), divided by (float)n for the mean. */
void emb__loss_reduce(const float *values, int64_t n, emb_reduction red, emb_tensor *loss);

/* Allocates a float buffer of n * c values (NULL with EMB_OK when empty). */
emb_status emb__loss_alloc_rows(int64_t n, int64_t c, float **out);

/* Checks that `t` broadcasts to input's shape without growing it (torch's message when
 * the shapes are incompatible); `what` names t, `op` the loss. */
emb_status emb__loss_check_broadcast_to(const emb_tensor *input, const emb_tensor *t,
                                        const char *what, const char *op);

/* *out = t broadcast to input's shape (t already checked broadcastable: numpy rules, no
 * growth of the input), a fresh buffer the caller frees. */
emb_status emb__loss_expand_like(const emb_tensor *input, const emb_tensor *t, float **out);

#endif /* EMB_LOSS_INTERNAL_H */
