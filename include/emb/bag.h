/* emb/bag.h: nn.EmbeddingBag and F.embedding_bag — pooled lookups (sum, mean, max) over
 * bags of indices, forward and backward.
 *
 * Behaviour is PyTorch 1.13's (docs/semantics.md §14); the places where emb deliberately
 * differs (PyTorch bugs) are listed in docs/differences.md.
 *
 * Bags. The input is either
 *   - 2-D [B, N] with offsets NULL: B bags of N positions each (N may be 0: empty bags), or
 *   - 1-D [N] with 1-D offsets [K] (int64 or int32, independently of the input's type):
 *     bag b covers positions [offsets[b], offsets[b+1]), the last bag ends at N. With
 *     include_last_offset, offsets[K-1] is the end of bag K-2 and there are K-1 bags
 *     (positions from offsets[K-1] to N belong to no bag and are ignored; PyTorch's modes
 *     disagree there, emb treats every mode like PyTorch's sum).
 *   offsets must start at 0, never decrease and never exceed N.
 * Every mode gives a zero row for an empty bag. Positions whose index is padding_idx are
 * skipped (and not counted by mean); a bag of padding only gives zeros.
 * per_sample_weights (float32, the shape of the input) are allowed with mode sum only.
 */
#ifndef EMB_BAG_H
#define EMB_BAG_H

#include "core.h"
#include "embedding.h"
#include "random.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pooling modes, PyTorch's mode_enum values. */
typedef enum emb_bag_mode {
    EMB_BAG_SUM = 0,
    EMB_BAG_MEAN = 1, /* PyTorch's default */
    EMB_BAG_MAX = 2,
} emb_bag_mode;

/* Options of nn.EmbeddingBag / F.embedding_bag. Fill with emb_bag_options_default(), then
 * change fields. padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse and
 * generator mean what they mean for emb_embedding_options. */
typedef struct emb_bag_options {
    emb_bag_mode mode; /* default EMB_BAG_MEAN */
    int64_t padding_idx;
    double max_norm;
    double norm_type;
    bool scale_grad_by_freq; /* not with EMB_BAG_MAX */
    bool sparse;             /* not with EMB_BAG_MAX */
    bool include_last_offset;
    emb_generator *generator;
} emb_bag_options;

/* An nn.EmbeddingBag: an emb_embedding (the table) plus the pooling mode. Opaque. One
 * handle is single-threaded; forward without max_norm only reads the weight and may run
 * concurrently on one handle from several threads. */
typedef struct emb_bag emb_bag;

EMB_API emb_bag_options emb_bag_options_default(void);

/* nn.EmbeddingBag(num_embeddings, embedding_dim, ...): the weight is drawn exactly as
 * nn.EmbeddingBag draws it (normal_(0, 1) from opts->generator, then the padding row is
 * zeroed), which is also nn.Embedding's draw. opts NULL: the defaults.
 * Errors (nothing drawn, *out untouched): EMB_ERR_NULL (out), EMB_ERR_INVALID (sizes < 1;
 * padding_idx out of range: "padding_idx must be within num_embeddings ..."; max_norm <= 0
 * or NaN; norm_type NaN; an unknown mode: "mode has to be one of sum, mean or max"; max
 * with scale_grad_by_freq: "max mode does not support scaling the gradient by the
 * frequency"; max with sparse: "max mode does not support sparse weights"),
 * EMB_ERR_OVERFLOW, EMB_ERR_NOMEM. */
EMB_API emb_status emb_bag_create(int64_t num_embeddings, int64_t embedding_dim,
                                  const emb_bag_options *opts, emb_bag **out);

/* EmbeddingBag.from_pretrained(weights, freeze, ...): the table is a copy of the 2-D
 * float32 `weights`; nothing is drawn, the padding row is not zeroed. freeze: the weight
 * does not require grad. Errors: as emb_bag_create, plus those of
 * emb_embedding_from_pretrained (EMB_ERR_SHAPE, EMB_ERR_DTYPE). */
EMB_API emb_status emb_bag_from_pretrained(const emb_tensor *weights, bool freeze,
                                           const emb_bag_options *opts, emb_bag **out);

/* The borrowing form: the table IS the caller's 2-D float32 `weights`, held as
 * emb_embedding_wrap holds it (storage NULL: borrowed and writable; see emb_storage for
 * read-only memory and handing the memory over). Errors: as emb_bag_create and
 * emb_embedding_wrap; on failure the storage's release is not called. */
EMB_API emb_status emb_bag_wrap(const emb_tensor *weights, const emb_storage *storage, bool freeze,
                                const emb_bag_options *opts, emb_bag **out);

/* Frees the bag and its table (the table's weight as emb_embedding_free does). NULL is
 * fine. */
EMB_API void emb_bag_free(emb_bag *bag);

/* The bag's table, owned by the bag (valid until emb_bag_free): use it for the weight,
 * its options (padding_idx, max_norm, ...), requires_grad, and the optimizers. */
EMB_API emb_embedding *emb_bag_embedding(emb_bag *bag);
/* A writable view of the weight [num_embeddings, embedding_dim] (emb_embedding_weight of
 * the table: EMB_ERR_READ_ONLY for a read-only table, whose weight
 * emb_embedding_weight_const(emb_bag_embedding(bag), ...) reads). */
EMB_API emb_status emb_bag_weight(emb_bag *bag, emb_tensor *view);
EMB_API emb_bag_mode emb_bag_mode_of(const emb_bag *bag);
EMB_API bool emb_bag_include_last_offset(const emb_bag *bag);

/* The number of bags B that forward(input, offsets) produces (the output is [B, dim]).
 * Checks the arguments as forward does, offsets' values included; index values are not
 * read. */
EMB_API emb_status emb_bag_num_bags(const emb_bag *bag, const emb_tensor *input,
                                    const emb_tensor *offsets, int64_t *num_bags);

/* forward(input, offsets, per_sample_weights): out[b] = the pool of weight[input[p]] over
 * the positions p of bag b. out: float32 [B, dim], overwritten. Numerics (bit-identical to
 * PyTorch 1.13's CPU kernels, independent of the thread count):
 *   sum   per bag from +0.0, positions ascending, acc + w;
 *         with per_sample_weights: fmaf(p, w, acc) when there is no padding_idx, else
 *         acc + (float)(w * p) (PyTorch's slow path whenever a padding_idx is set)
 *   mean  the sum divided by (float)max(count, 1), count = non-padding positions
 *   max   per column, the first non-padding position, replaced by a later one that is
 *         strictly greater, or NaN (a NaN anywhere in a bag's column gives NaN and the
 *         first NaN's index; PyTorch lets only a leading NaN through, docs/differences.md).
 * Empty offsets with a 1-D input: B = 0, no position is in a bag (docs/differences.md).
 * max_indices: with mode max, NULL or int64 [B, dim], receiving the index (row of the
 * table) chosen per column, 0 for empty bags; the backward needs it. Must be NULL in
 * other modes. With max_norm set, every row named at a position inside a bag (padding
 * included) whose norm exceeds max_norm is renormalised in place first, as PyTorch does.
 * Errors (weight, out and max_indices unchanged):
 *   EMB_ERR_NULL     bag, input, out; offsets with a 1-D input ("offsets has to be a 1D
 *                    Tensor but got NULL")
 *   EMB_ERR_DTYPE    input or offsets not int64/int32; per_sample_weights not float32;
 *                    out not float32; max_indices not int64
 *   EMB_ERR_SHAPE    input not 1-D or 2-D ("input has to be 1D or 2D Tensor, but got
 *                    Tensor of dimension 3"); offsets not 1-D; per_sample_weights not of
 *                    the input's shape; out or max_indices not [B, dim]
 *   EMB_ERR_INVALID  offsets given with a 2-D input; offsets[0] != 0; offsets decreasing;
 *                    an offset past the end of the input; include_last_offset with empty
 *                    offsets; max_indices given in mode sum or mean
 *   EMB_ERR_UNSUPPORTED per_sample_weights with mode mean or max (PyTorch's message)
 *   EMB_ERR_INDEX    an index outside [0, num_embeddings): "embedding_bag: index 9 at
 *                    position 1 of bag 2 (input position 5) is out of range for a table
 *                    of 6 rows (valid: [0, 6))"
 *   EMB_ERR_READ_ONLY max_norm set on a read-only table
 *   EMB_ERR_NOMEM */
EMB_API emb_status emb_bag_forward(emb_bag *bag, const emb_tensor *input, const emb_tensor *offsets,
                                   const emb_tensor *per_sample_weights, emb_tensor *out,
                                   emb_tensor *max_indices);

/* F.embedding_bag(input, weight, offsets, ...) over a caller's 2-D float32 weight [V, D]:
 * the forward above with the options in opts (NULL: the defaults; mode, padding_idx
 * (negative values count from the end, as ATen accepts), max_norm, norm_type,
 * include_last_offset; scale_grad_by_freq and sparse are only checked against mode max,
 * generator is ignored). With max_norm the weight is renormalised in place.
 * Errors: as emb_bag_forward, plus the option errors of emb_bag_create and
 * EMB_ERR_SHAPE / EMB_ERR_DTYPE for the weight. */
EMB_API emb_status emb_bag_lookup(emb_tensor *weight, const emb_tensor *input,
                                  const emb_tensor *offsets, const emb_tensor *per_sample_weights,
                                  const emb_bag_options *opts, emb_tensor *out,
                                  emb_tensor *max_indices);

/* Dense backward: grad_weight (float32 [num_embeddings, dim], zeroed by the caller or
 * holding a previous gradient) += the gradient of forward(input, offsets,
 * per_sample_weights) given grad_output [B, dim]. Rows that receive nothing are not
 * touched; the padding row never receives anything. Numerics (bit-identical to PyTorch
 * 1.13's fresh gradient followed by its accumulation into .grad; independent of the
 * thread count, threads own disjoint rows):
 *   sum, mean: positions grouped by index in the order of PyTorch's unstable sort of the
 *     input; per row from +0.0: acc = fmaf(grad_output[bag], (float)scale, acc) with
 *     scale = per_sample_weight (or 1), divided by the index's count with
 *     scale_grad_by_freq (the count of the row's own index: PyTorch divides by another
 *     index's count, docs/differences.md), divided by the bag's count in mean mode (all in
 *     double); then grad_weight[row] += acc.
 *   max: max_indices (from the forward) routes grad_output[b][d] to row max_indices[b][d],
 *     over non-empty bags in increasing order, per column.
 * Errors (grad_weight unchanged): those of forward for the arguments they share,
 * EMB_ERR_NULL / EMB_ERR_DTYPE / EMB_ERR_SHAPE (grad_output, grad_weight; max_indices
 * NULL or not int64 [B, dim] in mode max), EMB_ERR_INDEX (a max_indices value outside the
 * table), EMB_ERR_STATE (the weight does not require grad), EMB_ERR_NOMEM.
 * Scratch: O(numel(input) + num_bags) integers; mode max O(num_embeddings) per thread. */
EMB_API emb_status emb_bag_backward(const emb_bag *bag, const emb_tensor *input,
                                    const emb_tensor *offsets, const emb_tensor *per_sample_weights,
                                    const emb_tensor *max_indices, const emb_tensor *grad_output,
                                    emb_tensor *grad_weight);

/* Dense backward into a fresh gradient: grad_weight = the gradient (every element written,
 * none read; rows that receive nothing and the padding row become +0.0). The bits of
 * zeroing grad_weight and calling emb_bag_backward, and the same errors (grad_weight
 * unchanged); in modes sum and mean one pass over the table instead of two, with streaming
 * stores for large 64-byte aligned gradients of rows of a multiple of 16 floats. */
EMB_API emb_status emb_bag_backward_overwrite(const emb_bag *bag, const emb_tensor *input,
                                              const emb_tensor *offsets,
                                              const emb_tensor *per_sample_weights,
                                              const emb_tensor *max_indices,
                                              const emb_tensor *grad_output,
                                              emb_tensor *grad_weight);

/* Sparse backward (modes sum and mean): one entry per non-padding position inside a bag,
 * in input order, row input[p], value grad_output[bag] (sum), grad_output[bag] *
 * per_sample_weights[p] (sum with weights), or grad_output[bag] * (1.0f / count) (mean),
 * each one float multiply as PyTorch. An empty `grad` becomes the new gradient; otherwise
 * grad += new as emb_embedding_backward_sparse does. Errors (grad unchanged): as
 * emb_bag_backward, plus EMB_ERR_UNSUPPORTED for mode max ("max mode does not support
 * sparse weights") and scale_grad_by_freq ("embedding_backward: scale_grad_by_freq not
 * supported with sparse gradients"), EMB_ERR_INVALID / EMB_ERR_SHAPE (grad not a valid
 * sparse gradient of [num_embeddings, dim]). */
EMB_API emb_status emb_bag_backward_sparse(const emb_bag *bag, const emb_tensor *input,
                                           const emb_tensor *offsets,
                                           const emb_tensor *per_sample_weights,
                                           const emb_tensor *grad_output, emb_sparse_grad *grad);

/* The gradient of the per_sample_weights (mode sum): grad_per_sample_weights (float32,
 * the input's shape) is overwritten with dot(grad_output[bag], weight[input[p]]) per
 * position (a sequential float32 sum of rounded products), 0 for padding positions and
 * positions in no bag. Uses the current weight (after any max_norm renormalisation of the
 * forward, as PyTorch does). PyTorch computes the dot with its BLAS, whose summation
 * order differs between BLAS libraries: agreement is within float32 tolerance.
 * Errors (output unchanged): those of forward for input and offsets, EMB_ERR_UNSUPPORTED
 * when the mode is not sum, EMB_ERR_NULL / EMB_ERR_DTYPE / EMB_ERR_SHAPE (grad_output
 * [B, dim], grad_per_sample_weights), EMB_ERR_NOMEM. */
EMB_API emb_status emb_bag_backward_per_sample_weights(const emb_bag *bag, const emb_tensor *input,
                                                       const emb_tensor *offsets,
                                                       const emb_tensor *grad_output,
                                                       emb_tensor *grad_per_sample_weights);

#ifdef __cplusplus
}
#endif

#endif /* EMB_BAG_H */
