/* emb/embedding.h: nn.Embedding — a trainable lookup table from integer ids to vectors.
 *
 * Behaviour is PyTorch 1.13's (docs/semantics.md §3, §4, §5, §6); the places
 * where emb deliberately differs are listed in docs/differences.md.
 */
#ifndef EMB_EMBEDDING_H
#define EMB_EMBEDDING_H

#include "core.h"
#include "random.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "No padding row" (PyTorch: padding_idx=None). */
#define EMB_PADDING_NONE INT64_MIN

/* Options of nn.Embedding. Fill with emb_embedding_options_default(), then change fields. */
typedef struct emb_embedding_options {
    /* EMB_PADDING_NONE, or a row in [-num_embeddings, num_embeddings); a negative value
     * counts from the end and is normalised as in PyTorch (-1 -> num_embeddings - 1). The
     * padding row is zeroed at creation (not by from_pretrained), never receives gradient,
     * and is returned as stored by the lookup. */
    int64_t padding_idx;
    /* INFINITY (the default) means no renormalisation (PyTorch: max_norm=None). A finite
     * value must be > 0: every row a forward looks up whose norm_type-norm exceeds it is
     * rescaled in place to that norm, before the lookup, as PyTorch does. */
    double max_norm;
    /* p of the p-norm used with max_norm: any real p (1, 2, 3, ...) or INFINITY; default 2.
     * NaN is rejected. */
    double norm_type;
    /* Dense backward divides each row's gradient by its index's count in the batch. */
    bool scale_grad_by_freq;
    /* The gradient of the weight is meant to be sparse (emb_embedding_backward_sparse);
     * recorded for callers and for emb_embedding_is_sparse, as in PyTorch. */
    bool sparse;
    /* Generator for the default N(0, 1) initialisation; NULL: the default generator. */
    emb_generator *generator;
} emb_embedding_options;

/* An nn.Embedding: a float32 weight [num_embeddings, embedding_dim] and its options.
 * Opaque. One handle is single-threaded; forward without max_norm only reads the weight
 * and may run concurrently on one handle from several threads. */
typedef struct emb_embedding emb_embedding;

EMB_API emb_embedding_options emb_embedding_options_default(void);

/* nn.Embedding(num_embeddings, embedding_dim, ...): allocates the weight, fills it with
 * normal_(0, 1) from opts->generator exactly as PyTorch does (same numbers for the same
 * seed and the same generator history), then zeroes the padding row, which still consumed
 * its random numbers. opts NULL: the defaults. The weight requires grad.
 * Errors (nothing is drawn from the generator and *out is untouched):
 *   EMB_ERR_NULL      out is NULL
 *   EMB_ERR_INVALID   num_embeddings or embedding_dim < 1; padding_idx out of range
 *                     ("Padding_idx must be within num_embeddings ..."); max_norm <= 0 or
 *                     NaN; norm_type NaN
 *   EMB_ERR_OVERFLOW  num_embeddings * embedding_dim * 4 bytes does not fit
 *   EMB_ERR_NOMEM */
EMB_API emb_status emb_embedding_create(int64_t num_embeddings, int64_t embedding_dim,
                                        const emb_embedding_options *opts, emb_embedding **out);

/* Embedding.from_pretrained(weights, freeze, ...), copying form: a new embedding whose
 * weight is a copy of the 2-D float32 tensor `weights` (contiguous, row-major); the handle
 * owns the copy and `weights` may be freed or changed afterwards without effect. PyTorch
 * shares the storage instead: emb_embedding_wrap is that form. The padding row is not
 * zeroed and nothing is drawn. freeze: the weight does not require grad (PyTorch's default
 * is true).
 * Errors (*out untouched): as emb_embedding_create (EMB_ERR_NULL for weights or out), plus
 * EMB_ERR_SHAPE (weights not 2-D: "Embeddings parameter is expected to be 2-dimensional,
 * got 3 dimensions"), EMB_ERR_DTYPE (not float32: "weights must be float32, got int64"),
 * EMB_ERR_INVALID for a [0, D] or [V, 0] tensor (emb does not create empty tables). */
EMB_API emb_status emb_embedding_from_pretrained(const emb_tensor *weights, bool freeze,
                                                 const emb_embedding_options *opts,
                                                 emb_embedding **out);

/* How an embedding created by emb_embedding_wrap holds memory it did not allocate.
 * read_only: the memory must never be written (for example a PROT_READ file mapping).
 *   Lookups (emb_embedding_forward without max_norm), the backward passes (which only
 *   write gradients) and emb_embedding_weight_const work; every call that would write the
 *   weight fails with EMB_ERR_READ_ONLY and changes nothing: emb_embedding_forward on a
 *   table with max_norm (whatever the indices) and the writable accessor
 *   emb_embedding_weight, so that an optimizer cannot be given the weight to update (the
 *   optimizer calls that take the embedding itself check emb_embedding_is_read_only).
 * release: NULL: borrowed; the caller keeps the memory alive and unchanged in size until
 *   emb_embedding_free, and frees it afterwards. Non-NULL: handed over; emb_embedding_free
 *   calls release(weights->data, release_ctx) exactly once (munmap, free, a refcount drop:
 *   anything that does not call back into this handle). When emb_embedding_wrap fails,
 *   ownership stays with the caller and release is not called.
 * A zero-initialised emb_storage (or storage NULL) is borrowed and writable. */
typedef struct emb_storage {
    bool read_only;
    void (*release)(void *data, void *release_ctx);
    void *release_ctx;
} emb_storage;

/* Embedding.from_pretrained(weights, freeze, ...), sharing form: a new embedding whose
 * weight IS the caller's 2-D float32 tensor `weights` (contiguous, row-major), without a
 * copy, as PyTorch's from_pretrained shares the given tensor's storage: writes by the
 * caller are seen by the next lookup, and max_norm renormalisation or optimizer steps
 * write into the caller's memory. storage says who frees it and whether it may be written
 * (see emb_storage; NULL: borrowed and writable). weights->data must be aligned to a float
 * (4 bytes); no other alignment is assumed (emb's own tables are 64-byte aligned, which
 * no kernel relies on). Nothing is drawn and the padding row is not zeroed. freeze: the
 * weight does not require grad. The emb_tensor struct itself is not kept.
 * Errors (*out untouched, release not called, nothing written):
 *   as emb_embedding_from_pretrained, with the same messages, plus
 *   EMB_ERR_INVALID  weights->data not float-aligned ("... is not aligned to 4 bytes ...")
 *   EMB_ERR_NOMEM    the handle cannot be allocated */
EMB_API emb_status emb_embedding_wrap(const emb_tensor *weights, const emb_storage *storage,
                                      bool freeze, const emb_embedding_options *opts,
                                      emb_embedding **out);

/* True when the weight must not be written (created by emb_embedding_wrap with
 * read_only); false for NULL. */
EMB_API bool emb_embedding_is_read_only(const emb_embedding *e);

/* Frees the handle, and the weight as it was created: emb's own copy is freed, handed-over
 * memory is released through emb_storage.release (once), borrowed memory is left to the
 * caller. NULL is fine. */
EMB_API void emb_embedding_free(emb_embedding *e);

/* The writable weight: a [num_embeddings, embedding_dim] float32 view of the handle's
 * storage; writes through it change the table (like `with torch.no_grad():
 * emb.weight[...] = ...`). Valid until emb_embedding_free.
 * Errors (view untouched): EMB_ERR_NULL; EMB_ERR_READ_ONLY on a read-only table (use
 * emb_embedding_weight_const). */
EMB_API emb_status emb_embedding_weight(emb_embedding *e, emb_tensor *view);
/* The weight for reading, on any table, read-only ones included: the same view as
 * emb_embedding_weight, but the caller must not write through it (emb_tensor has no const
 * form; on a read-only mapping a write faults). Pass it to emb_embedding_lookup, to a
 * printer, or copy it; never to something that writes (emb_embedding_renorm_, an
 * optimizer's add_param). Valid until emb_embedding_free. Errors (view untouched):
 * EMB_ERR_NULL. */
EMB_API emb_status emb_embedding_weight_const(const emb_embedding *e, emb_tensor *view);
EMB_API int64_t emb_embedding_num_embeddings(const emb_embedding *e);
EMB_API int64_t emb_embedding_embedding_dim(const emb_embedding *e);
/* The normalised padding row (non-negative), or EMB_PADDING_NONE. */
EMB_API int64_t emb_embedding_padding_idx(const emb_embedding *e);
EMB_API double emb_embedding_max_norm(const emb_embedding *e);
EMB_API double emb_embedding_norm_type(const emb_embedding *e);
EMB_API bool emb_embedding_scale_grad_by_freq(const emb_embedding *e);
EMB_API bool emb_embedding_is_sparse(const emb_embedding *e);
EMB_API bool emb_embedding_requires_grad(const emb_embedding *e);
EMB_API void emb_embedding_set_requires_grad(emb_embedding *e, bool requires_grad);

/* Shape of the lookup output for `indices`: indices.shape + [embedding_dim]. Fills
 * *ndim and shape[0..*ndim) (shape must hold EMB_MAX_DIMS entries). Errors as forward's
 * checks of `indices` (NULL, dtype, rank); the index values are not read. */
EMB_API emb_status emb_embedding_output_shape(const emb_embedding *e, const emb_tensor *indices,
                                              int *ndim, int64_t *shape);

/* forward(indices): out[..., :] = weight[indices[...], :], bitwise row copies, for int64 or
 * int32 indices of rank 0..8. `out` is a caller buffer, float32, shape
 * indices.shape + [embedding_dim]. With max_norm set, first renormalises (in place) each
 * distinct looked-up row whose norm exceeds max_norm, as PyTorch does; without max_norm the
 * weight is only read. All indices are validated before anything is written.
 * Errors (weight and out unchanged):
 *   EMB_ERR_NULL    e, indices, out, or a data pointer is NULL
 *   EMB_ERR_DTYPE   indices not int64/int32 (PyTorch's message naming the type), out not
 *                   float32
 *   EMB_ERR_SHAPE   indices of more than 8 dims; out of the wrong shape
 *   EMB_ERR_INDEX   an index < 0 or >= num_embeddings: "index 10 at position 0 is out of
 *                   range for an embedding with 10 rows (valid: [0, 10))"
 *   EMB_ERR_INVALID out overlaps indices (out overlapping the weight is not detected:
 *                   the rows read are then unspecified)
 *   EMB_ERR_READ_ONLY  max_norm is set and the weight is read-only (emb_storage), checked
 *                   after the arguments above, for any indices, even an empty tensor
 *   EMB_ERR_NOMEM   renorm's row list */
EMB_API emb_status emb_embedding_forward(emb_embedding *e, const emb_tensor *indices,
                                         emb_tensor *out);

/* F.embedding without max_norm on a caller's 2-D float32 weight [V, D] (contiguous):
 * out = weight[indices]. Same checks and errors as emb_embedding_forward (EMB_ERR_INVALID:
 * out overlaps indices). */
EMB_API emb_status emb_embedding_lookup(const emb_tensor *weight, const emb_tensor *indices,
                                        emb_tensor *out);

/* torch.embedding_renorm_(weight, indices, max_norm, norm_type): each distinct row named
 * in `indices` whose norm exceeds max_norm is scaled in place by
 * (float)(max_norm / (norm + 1e-7)). PyTorch's numerics (the 2-norm's accumulation order
 * included). Indices are validated first; nothing changes on error. max_norm must be > 0
 * and not NaN; norm_type not NaN. Temporary buffers (also for a forward with max_norm):
 * 2n int64 for n = numel(indices) when V > 64n (the batch is sorted to find its distinct
 * rows), else min(n, V) int64 and a V-bit bitmap (at most 8 bytes per index). Errors:
 * EMB_ERR_NULL, EMB_ERR_SHAPE/EMB_ERR_DTYPE (PyTorch's wording), EMB_ERR_INDEX,
 * EMB_ERR_INVALID, EMB_ERR_NOMEM. */
EMB_API emb_status emb_embedding_renorm_(emb_tensor *weight, const emb_tensor *indices,
                                         double max_norm, double norm_type);

/* ---------------------------------------------------------------------------------------
 * Backward
 * ------------------------------------------------------------------------------------- */

/* A sparse row gradient of a [num_rows, dim] weight, as PyTorch's COO tensor with
 * sparse_dim 1: rows indices[0..nnz) with values[nnz][dim]. Uncoalesced (duplicates, any
 * order) unless `coalesced`, which follows PyTorch's is_coalesced(): true when empty, for a
 * fresh gradient of fewer than 2 entries, after emb_sparse_grad_coalesce, and after adding
 * two coalesced gradients. The storage belongs to emb (allocated and released by the
 * functions below); fields are read-only for callers. One gradient is single-threaded.
 *
 * `borrowed`: the entries are not emb's storage but the caller's indices and grad_output of
 * emb_embedding_backward_sparse_view (PyTorch's sparse gradient is a view of them too);
 * capacity is then 0. emb never writes through borrowed pointers: anything that changes the
 * entries (another backward into the gradient, coalesce) first puts them in storage of its
 * own, and clear/free just forget them. */
typedef struct emb_sparse_grad {
    int64_t num_rows;
    int64_t dim;
    int64_t nnz;
    int64_t capacity; /* rows allocated by emb (0 when borrowed) */
    int64_t *indices; /* [capacity], or [nnz] borrowed */
    float *values;    /* [capacity * dim], or [nnz * dim] borrowed */
    bool coalesced;
    bool borrowed;
} emb_sparse_grad;

/* Initialises an empty (coalesced) sparse gradient for a [num_rows, dim] weight. g must not
 * hold storage (release it first). Errors (g unchanged): EMB_ERR_NULL, EMB_ERR_INVALID
 * (negative sizes). */
EMB_API emb_status emb_sparse_grad_init(emb_sparse_grad *g, int64_t num_rows, int64_t dim);
/* A sparse gradient built from the caller's own entries (PyTorch:
 * torch.sparse_coo_tensor(rows.unsqueeze(0), values, (num_rows, dim))): entry k is row
 * rows[k] with values[k, :], in the given order, duplicates allowed (uncoalesced unless it
 * has fewer than 2 entries). rows: int64 or int32 [n], each in [0, num_rows); values:
 * float32 [n, dim]; both copied. Like emb_sparse_grad_init, g must not hold storage (release
 * it first); release the result with emb_sparse_grad_release.
 * Errors (g unchanged): EMB_ERR_NULL, EMB_ERR_INVALID (negative sizes), EMB_ERR_DTYPE,
 * EMB_ERR_SHAPE (rows not 1-D, values not [n, dim]), EMB_ERR_INDEX ("index 7 at position 1
 * is out of range for a sparse gradient with 5 rows (valid: [0, 5))"), EMB_ERR_OVERFLOW,
 * EMB_ERR_NOMEM. */
EMB_API emb_status emb_sparse_grad_from_rows(emb_sparse_grad *g, int64_t num_rows, int64_t dim,
                                             const emb_tensor *rows, const emb_tensor *values);
/* Forgets all entries and keeps the storage for reuse (optimizer.zero_grad() leaves an
 * empty sparse tensor). NULL is fine. */
EMB_API void emb_sparse_grad_clear(emb_sparse_grad *g);
/* Releases the storage; g stays an empty gradient of the same shape, ready for reuse or to
 * be forgotten. g may be NULL. */
EMB_API void emb_sparse_grad_release(emb_sparse_grad *g);
/* coalesce(): sums duplicate rows in PyTorch's order (the permutation of torch.sort
 * (stable=False) of the rows; the first value of a row is copied, later ones are added
 * with plain float adds), rows ascending. In place (the storage is replaced and
 * capacity == nnz afterwards); nothing to do when already coalesced.
 * Errors (g unchanged): EMB_ERR_NULL, EMB_ERR_INVALID (g is not a valid sparse gradient),
 * EMB_ERR_NOMEM. */
EMB_API emb_status emb_sparse_grad_coalesce(emb_sparse_grad *g);
/* The order in which coalesce() visits n entries whose rows are `rows` (int64 [n], any
 * values): perm (int64 [n]) receives the entry positions in the order of torch.sort(rows,
 * stable=False), the order emb_sparse_grad_coalesce sums a row's duplicates in (the first
 * copied, each later one added). For code that sums a part of a gradient in that order
 * (libemb_mpi's owners of sharded rows). Errors (perm unchanged): EMB_ERR_NULL,
 * EMB_ERR_DTYPE (not int64), EMB_ERR_SHAPE (not 1-D, or perm not of rows' shape),
 * EMB_ERR_INVALID (perm overlaps rows), EMB_ERR_NOMEM. */
EMB_API emb_status emb_sparse_grad_coalesce_order(const emb_tensor *rows, emb_tensor *perm);
/* dense.add_(g): dense[row] += value for each entry in entry order with plain float adds
 * (duplicates are applied one after the other, as PyTorch does). dense: float32
 * [num_rows, dim]. Independent of the thread count.
 * Errors (dense unchanged): EMB_ERR_NULL, EMB_ERR_INVALID (g not valid), EMB_ERR_DTYPE /
 * EMB_ERR_SHAPE (dense), EMB_ERR_INDEX (an entry's row outside [0, num_rows)). */
EMB_API emb_status emb_sparse_grad_add_to_dense(const emb_sparse_grad *g, emb_tensor *dense);

/* Dense backward: grad_weight (float32 [num_embeddings, dim], zeroed by the caller, or
 * holding a previous gradient) += the gradient of the lookup. grad_output has shape
 * indices.shape + [dim]. Each row's gradient is summed from +0.0 over its positions in
 * increasing order, the padding row gets nothing, scale_grad_by_freq weights each term by
 * (float)(1.0 / count) with fmaf (count over all positions, padding included), and the sum
 * is then added to grad_weight once: bit-identical to PyTorch's fresh gradient and to its
 * accumulation into an existing .grad (rows that receive nothing are not touched),
 * independent of the thread count. Temporary buffers are proportional to the batch, not
 * to the table: with n = numel(indices) and V = num_embeddings, a batch with V > 4n is
 * bucketed by radix-sorting its n (row, position) pairs (3n + 1 int64), a larger one by
 * counting over the rows (V + 2 + n int64, which is at most 5n + 2; with several threads
 * also up to 2n + 65536 per-thread counters), plus threads * dim floats either way.
 * Errors (grad_weight unchanged): EMB_ERR_NULL, EMB_ERR_DTYPE, EMB_ERR_SHAPE,
 * EMB_ERR_INDEX, EMB_ERR_STATE (the weight does not require grad), EMB_ERR_NOMEM. */
EMB_API emb_status emb_embedding_backward(const emb_embedding *e, const emb_tensor *indices,
                                          const emb_tensor *grad_output, emb_tensor *grad_weight);

/* Dense backward into a fresh gradient: grad_weight (float32 [num_embeddings, dim]) = the
 * gradient of the lookup, every element written and none read: the rows the batch does not
 * name, and the padding row, become +0.0. The same bits as zeroing grad_weight and calling
 * emb_embedding_backward (PyTorch's first backward into a .grad that is None), in one pass
 * over the table instead of two: rows of a multiple of 16 floats in a 64-byte aligned
 * gradient (emb_tensor_alloc's) are written with non-temporal stores. Temporaries as
 * emb_embedding_backward's; independent of the thread count.
 * Errors (grad_weight unchanged): as emb_embedding_backward, which refuses the same inputs. */
EMB_API emb_status emb_embedding_backward_overwrite(const emb_embedding *e,
                                                    const emb_tensor *indices,
                                                    const emb_tensor *grad_output,
                                                    emb_tensor *grad_weight);

/* Sparse backward: the new gradient has one entry per non-padding position, in input order
 * (indices and grad_output rows copied bitwise). `grad` must have been initialised for this
 * embedding's [num_embeddings, dim]. If grad is empty it becomes the new gradient (reusing
 * its storage when large enough); otherwise grad += new exactly as PyTorch's in-place
 * sparse add does when .grad already holds a sparse gradient: one merge pass over the two
 * entry lists in stored order, emitting the smaller head row, or both heads summed into one
 * entry when their rows are equal (each emitted value is computed as (0 + old) [+ new]).
 * That is torch's result for a contiguous upstream gradient; with a non-contiguous one
 * (e.g. the expanded gradient of out.sum()) torch concatenates instead, a layout-dependent
 * quirk that emb, whose grad_output is always contiguous, does not reproduce.
 * Errors (grad unchanged): as emb_embedding_backward, EMB_ERR_UNSUPPORTED with
 * scale_grad_by_freq ("embedding_backward: scale_grad_by_freq not supported with sparse
 * gradients"), EMB_ERR_INVALID (grad is not a valid sparse gradient), EMB_ERR_SHAPE (grad
 * initialised for another shape), EMB_ERR_NOMEM. */
EMB_API emb_status emb_embedding_backward_sparse(const emb_embedding *e, const emb_tensor *indices,
                                                 const emb_tensor *grad_output,
                                                 emb_sparse_grad *grad);

/* emb_embedding_backward_sparse without copying, where PyTorch does not copy either: when
 * grad is empty, the indices are int64 and no position holds padding_idx, the new gradient
 * borrows them (grad->borrowed: indices->data as its rows, grad_output->data as its values)
 * and touches no data beyond the checks (PyTorch's embedding_sparse_backward returns views
 * of both in that case). Otherwise (grad not empty, int32 indices, padding present) it does
 * exactly what emb_embedding_backward_sparse does. Either way the entries, the `coalesced`
 * flag and the errors are those of emb_embedding_backward_sparse, bit for bit. The caller
 * keeps indices and grad_output alive and unchanged while a borrowed gradient is used (until
 * emb_sparse_grad_clear/_free, a coalesce, or another backward into it, which copy or
 * forget the borrowed entries). Any emb_sparse_grad (including borrowed ones) is accepted
 * wherever one is read: optimizer steps, add_to_dense, coalesce. */
EMB_API emb_status emb_embedding_backward_sparse_view(const emb_embedding *e,
                                                      const emb_tensor *indices,
                                                      const emb_tensor *grad_output,
                                                      emb_sparse_grad *grad);

#ifdef __cplusplus
}
#endif

#endif /* EMB_EMBEDDING_H */
