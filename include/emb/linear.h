/* emb/linear.h: nn.Linear and F.one_hot — the dense layer an embedding lookup replaces. */
#ifndef EMB_LINEAR_H
#define EMB_LINEAR_H

#include "core.h"
#include "random.h"

#ifdef __cplusplus
extern "C" {
#endif

/* nn.Linear(in_features, out_features, bias): y = x W^T + b with a float32 weight
 * [out_features, in_features] and bias [out_features]. Opaque; single-threaded handle,
 * forward only reads it. */
typedef struct emb_linear emb_linear;

/* Creates the layer with PyTorch's default initialisation: kaiming_uniform_(a=sqrt(5)) of
 * the weight (uniform in +-1/sqrt(in_features)), then the bias uniform in
 * +-1/sqrt(in_features), drawing from gen (NULL: the default generator) in PyTorch's order.
 * Errors: EMB_ERR_NULL, EMB_ERR_INVALID (negative sizes), EMB_ERR_OVERFLOW, EMB_ERR_NOMEM.
 * Nothing is drawn on error. */
EMB_API emb_status emb_linear_create(int64_t in_features, int64_t out_features, bool bias,
                                     emb_generator *gen, emb_linear **out);
EMB_API void emb_linear_free(emb_linear *lin);

EMB_API int64_t emb_linear_in_features(const emb_linear *lin);
EMB_API int64_t emb_linear_out_features(const emb_linear *lin);
EMB_API bool emb_linear_has_bias(const emb_linear *lin);
/* Views of the parameters (writable: assigning through them changes the layer).
 * emb_linear_bias fails with EMB_ERR_STATE when the layer has no bias. */
EMB_API emb_status emb_linear_weight(emb_linear *lin, emb_tensor *view);
EMB_API emb_status emb_linear_bias(emb_linear *lin, emb_tensor *view);

/* y = x W^T + b. x: float32 [..., in_features] (rank >= 1); y: float32 [..., out_features]
 * with the same leading dimensions. Matrix products go through CBLAS when the build has it
 * (else, or with EMB_KERNELS_REF, a plain-C kernel). Through CBLAS, emb issues exactly the
 * sgemm call PyTorch 1.13's F.linear makes (addmm for 2-D/3-D x with bias, mm then + bias
 * otherwise; the same transposes, operand order and leading dimensions), so y, grad_x,
 * grad_weight and grad_bias are bit-identical to torch's when both use the same BLAS
 * (Debian: the OpenMP OpenBLAS) with the same kernels (OpenBLAS's core type, which it picks
 * from the CPU or OPENBLAS_CORETYPE) and the same thread count, the conditions under which
 * torch's own results repeat. OpenBLAS's last bits depend on both; during emb's calls it
 * runs on emb_get_num_threads() threads (applied with omp_set_num_threads on the calling
 * thread for the call, as torch.set_num_threads does for torch). The reference kernels are
 * independent of every thread count and CPU and agree with BLAS within float32 tolerance.
 * Errors (y unchanged): EMB_ERR_NULL, EMB_ERR_DTYPE ("mat1 and mat2 must have the same
 * dtype"), EMB_ERR_SHAPE (PyTorch's "mat1 and mat2 shapes cannot be multiplied (2x4 and
 * 3x2)", a 1-D x reported as 1xN; y of the wrong shape), EMB_ERR_INVALID (y overlaps x or
 * the layer's parameters). */
EMB_API emb_status emb_linear_forward(const emb_linear *lin, const emb_tensor *x, emb_tensor *y);

/* Backward of forward(x) given grad_y (shape of y). Each output may be NULL when not
 * wanted: grad_x (shape of x) is overwritten; grad_weight [out, in] and grad_bias [out]
 * are accumulated into (+=), like PyTorch's .grad (the fresh gradient is computed first,
 * then added once, as autograd does). grad_bias sums the rows of grad_y in the order of
 * PyTorch's CPU sum (bit-identical to torch; torch splits sums of more than 32768 values
 * between its threads, so longer ones match torch with one intra-op thread).
 * Errors (outputs unchanged): as forward for x, plus EMB_ERR_NOMEM, EMB_ERR_SHAPE / EMB_ERR_DTYPE
 * (grad_y or an output of the wrong shape or dtype), EMB_ERR_STATE (grad_bias given for a
 * layer without bias), EMB_ERR_INVALID (an output overlaps an input, the parameters or
 * another output). */
EMB_API emb_status emb_linear_backward(const emb_linear *lin, const emb_tensor *x,
                                       const emb_tensor *grad_y, emb_tensor *grad_x,
                                       emb_tensor *grad_weight, emb_tensor *grad_bias);

/* F.one_hot: the number of classes one_hot(indices, num_classes) produces: num_classes
 * itself, or max(indices) + 1 when num_classes is -1. indices: int64 (PyTorch accepts only
 * int64: "one_hot is only applicable to index tensor."). Errors as emb_one_hot. */
EMB_API emb_status emb_one_hot_num_classes(const emb_tensor *indices, int64_t num_classes,
                                           int64_t *out_classes);

/* F.one_hot(indices, num_classes): out has shape indices.shape + [C] and dtype int64 (as in
 * PyTorch) or float32 (a convenience, equal to .float()); indices of rank 0..8. Errors,
 * with PyTorch's messages (followed by the offending value and position):
 * EMB_ERR_DTYPE, EMB_ERR_INDEX ("Class values must be non-negative.", "Class values must be
 * smaller than num_classes."), EMB_ERR_INVALID ("Can not infer total number of classes from
 * empty tensor."; out overlapping indices), EMB_ERR_SHAPE (out has the wrong shape,
 * indices of more than 8 dims), EMB_ERR_OVERFLOW (max + 1 overflows). out unchanged on
 * error. */
EMB_API emb_status emb_one_hot(const emb_tensor *indices, int64_t num_classes, emb_tensor *out);

#ifdef __cplusplus
}
#endif

#endif /* EMB_LINEAR_H */
