/* emb/optim.h: optimizers with PyTorch 1.13's update rules and state (torch.optim with
 * foreach=False on CPU), dense and sparse, plus a fused sparse step for embeddings. */
#ifndef EMB_OPTIM_H
#define EMB_OPTIM_H

#include "core.h"
#include "bag.h"
#include "embedding.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum emb_optimizer_kind {
    EMB_OPTIMIZER_SGD = 0,
    EMB_OPTIMIZER_ADAGRAD = 1,
    EMB_OPTIMIZER_ADAM = 2,
    EMB_OPTIMIZER_ADAMW = 3,
    EMB_OPTIMIZER_SPARSE_ADAM = 4,
} emb_optimizer_kind;

/* Hyper-parameters. Fill with emb_optimizer_options_default(kind): PyTorch's defaults for that
 * optimizer (SGD: lr 1e-3, the default later PyTorch releases give; PyTorch 1.13 requires
 * lr). Fields that an optimizer does not use are ignored. */
typedef struct emb_optimizer_options {
    emb_optimizer_kind kind;
    double lr;
    double momentum;                  /* SGD */
    double dampening;                 /* SGD */
    bool nesterov;                    /* SGD */
    double weight_decay;              /* SGD, Adagrad, Adam, AdamW (AdamW default 1e-2) */
    double lr_decay;                  /* Adagrad */
    double initial_accumulator_value; /* Adagrad */
    double eps;                       /* Adagrad 1e-10, Adam/AdamW/SparseAdam 1e-8 */
    double beta1, beta2;              /* Adam, AdamW, SparseAdam: 0.9, 0.999 */
    bool amsgrad;                     /* Adam, AdamW */
    bool maximize;                    /* all */
} emb_optimizer_options;

/* An optimizer over a set of float32 parameters it does not own. Opaque. One optimizer is
 * single-threaded (its steps use emb's own threads inside), except for the row updates of
 * the Hogwild section below, which several threads may run at once. */
typedef struct emb_optimizer emb_optimizer;

EMB_API emb_optimizer_options emb_optimizer_options_default(emb_optimizer_kind kind);

/* Validates the options (PyTorch's checks and messages: "Invalid learning rate: -1.0",
 * "Invalid beta parameter at index 0: 1.0", "Nesterov momentum requires a momentum and zero
 * dampening", ...; stricter than PyTorch: every value an optimizer uses must be finite, so
 * NaN and infinities are rejected with the same message form, "Invalid learning rate: inf",
 * "Invalid dampening value: nan") and creates the optimizer. Errors: EMB_ERR_NULL, EMB_ERR_INVALID
 * (also an unknown kind), EMB_ERR_NOMEM; *out is untouched on error. */
EMB_API emb_status emb_optimizer_create(const emb_optimizer_options *opts, emb_optimizer **out);
EMB_API void emb_optimizer_free(emb_optimizer *opt);

/* Registers a parameter: a float32 tensor view (any shape) the optimizer will update in
 * place (it keeps the pointer; the memory must outlive the optimizer). *param_id (may be
 * NULL) receives its id (0, 1, 2, ... in registration order). State (step count, moments)
 * is per parameter and allocated on the first step, as in PyTorch (Adagrad's, which
 * PyTorch creates in its constructor, too), or up front by emb_optimizer_init_state.
 * Errors: EMB_ERR_NULL, EMB_ERR_DTYPE, EMB_ERR_SHAPE (an invalid view), EMB_ERR_INVALID
 * (the memory overlaps a parameter already registered: PyTorch's "some parameters appear
 * in more than one parameter group"), EMB_ERR_OVERFLOW, EMB_ERR_NOMEM. */
EMB_API emb_status emb_optimizer_add_param(emb_optimizer *opt, const emb_tensor *param,
                                           int *param_id);

/* The learning rate of every parameter (PyTorch: optimizer.param_groups[0]['lr'] = lr, for
 * a scheduler). Takes effect from the next step, exactly as in PyTorch: every step reads
 * the current lr (Adagrad's lr / (1 + (step - 1) * lr_decay), Adam's lr / bias_correction1
 * and AdamW's 1 - lr * weight_decay included); state and step counts are kept.
 * Validated like emb_optimizer_create ("Invalid learning rate: -0.1"; NaN and infinities
 * rejected; SparseAdam needs lr > 0). Errors: EMB_ERR_NULL, EMB_ERR_INVALID (lr unchanged).
 * Not thread-safe against any other call on the same optimizer. */
EMB_API emb_status emb_optimizer_set_lr(emb_optimizer *opt, double lr);
/* The current learning rate; NaN when opt is NULL. */
EMB_API double emb_optimizer_lr(const emb_optimizer *opt);

/* Creates a parameter's state now instead of on its first step (Adagrad's sum, filled with
 * initial_accumulator_value; Adam/AdamW's exp_avg, exp_avg_sq and max_exp_avg_sq;
 * SparseAdam's exp_avg and exp_avg_sq). Results stay bit-identical to lazy creation. SGD
 * has no state to create: its momentum buffer is, as in PyTorch, the first step's gradient
 * itself (dense or sparse), so it stays lazy (this call does nothing for SGD). Calling it
 * again does nothing. Errors: EMB_ERR_NULL, EMB_ERR_INDEX (param_id), EMB_ERR_NOMEM
 * (nothing kept). */
EMB_API emb_status emb_optimizer_init_state(emb_optimizer *opt, int param_id);

/* One optimizer step for one parameter with a dense gradient (same shape as the parameter).
 * Errors: EMB_ERR_NULL, EMB_ERR_INDEX (unknown param_id), EMB_ERR_DTYPE, EMB_ERR_SHAPE,
 * EMB_ERR_UNSUPPORTED (SparseAdam: "SparseAdam does not support dense gradients, please
 * consider Adam instead"; SGD with momentum whose buffer is sparse from earlier sparse
 * steps, where PyTorch fails in add(sparse, dense)), EMB_ERR_NOMEM. Parameter and state
 * unchanged on error. */
EMB_API emb_status emb_optimizer_step(emb_optimizer *opt, int param_id, const emb_tensor *grad);

/* One step with a sparse row gradient of a 2-D parameter (from
 * emb_embedding_backward_sparse, or built with emb_sparse_grad_from_rows) (SGD, Adagrad,
 * SparseAdam, as PyTorch; only the rows in the gradient change, except where PyTorch's rule says
 * otherwise: SGD with momentum keeps PyTorch's sparse momentum buffer, which grows by
 * merging with every gradient, and updates every row it holds; after dense steps the
 * buffer is dense and every row moves). grad is read only. An empty gradient counts as a
 * step that changes nothing (PyTorch's Adagrad and SparseAdam count the step, then raise).
 * Errors as emb_optimizer_step, plus EMB_ERR_INVALID (a malformed emb_sparse_grad),
 * EMB_ERR_INDEX (a row outside [0, rows)), and EMB_ERR_UNSUPPORTED with PyTorch's message
 * for optimizers or options that reject sparse gradients ("Adam does not support sparse
 * gradients, please consider SparseAdam instead", "AdamW does not support sparse
 * gradients", "weight_decay option is not compatible with sparse gradients" (Adagrad); SGD
 * with weight_decay, where PyTorch raises "add(sparse, dense) is not supported. ...";
 * SGD nesterov on a dense momentum buffer). Parameter and state unchanged on error.
 * Adagrad and SparseAdam coalesce the gradient in a scratch buffer of 16 bytes per entry
 * (plus dim floats per thread) that the optimizer keeps for its next steps, grown to the
 * largest step's need and freed by emb_optimizer_free (this step and the fused ones). */
EMB_API emb_status emb_optimizer_step_sparse(emb_optimizer *opt, int param_id,
                                             const emb_sparse_grad *grad);

/* Fused sparse step for an embedding table (beyond PyTorch): the same update as
 * emb_embedding_backward_sparse(e, indices, grad_output, fresh grad) followed by
 * emb_optimizer_step_sparse(opt, param_id, grad), computed straight from the lookup's
 * output gradient and its indices, without a sparse-gradient copy and without a
 * [num_embeddings, dim] buffer (scratch: O(numel(indices)) integers and O(dim) floats per
 * thread; Adagrad's and SparseAdam's are kept, as in emb_optimizer_step_sparse).
 * Bit-identical to the unfused path: the table's own padding_idx positions are
 * skipped, and everything else (requires_grad, scale_grad_by_freq) is taken from `e`, so
 * the fused step cannot do what the unfused path would not.
 * param_id must be the id under which e's weight (the view emb_embedding_weight gives:
 * same data pointer, shape [num_embeddings, dim]) was registered with opt.
 * indices: int64/int32, any rank up to 8, values in [0, num_embeddings) (all checked,
 * padding positions included); grad_output: float32 indices.shape + [dim]; both read only.
 * Refusals, checked in this order, are exactly the unfused path's (same status, same
 * message), then two of the fused step's own:
 *   emb_embedding_backward_sparse's: EMB_ERR_NULL (e: "embedding must not be NULL",
 *     indices, grad_output), EMB_ERR_STATE (e's weight does not require grad: a table
 *     created with freeze=true), EMB_ERR_UNSUPPORTED (scale_grad_by_freq), EMB_ERR_DTYPE /
 *     EMB_ERR_SHAPE (indices, grad_output), EMB_ERR_INDEX ("index 7 at position 3 is out
 *     of range for an embedding with 5 rows (valid: [0, 5))");
 *   emb_optimizer_step_sparse's: EMB_ERR_NULL (opt), EMB_ERR_INDEX (param_id),
 *     EMB_ERR_UNSUPPORTED (Adam, AdamW), EMB_ERR_SHAPE (a parameter that is not 2-D, or
 *     whose shape is not the table's: "grad is a sparse gradient of size [V, D], expected
 *     ..."), EMB_ERR_UNSUPPORTED (options that reject sparse gradients, as
 *     emb_optimizer_step_sparse);
 *   its own: EMB_ERR_INVALID (the parameter has the table's shape but is other memory),
 *     EMB_ERR_READ_ONLY (emb_embedding_is_read_only(e)); and EMB_ERR_NOMEM.
 * Parameter, state and step count unchanged on error. Single-threaded per optimizer. */
EMB_API emb_status emb_optimizer_step_fused(emb_optimizer *opt, int param_id,
                                            const emb_embedding *e, const emb_tensor *indices,
                                            const emb_tensor *grad_output);

/* The fused sparse step for an embedding bag (beyond PyTorch): the same update as
 * emb_bag_backward_sparse(bag, input, offsets, per_sample_weights, grad_output, fresh grad)
 * followed by emb_optimizer_step_sparse(opt, param_id, grad), bit for bit, computed from the
 * bag's output gradient grad_output [B, dim] and its input (as given to emb_bag_forward).
 * No [num_embeddings, dim] buffer and no copy of per-position values in modes sum and mean
 * (scratch: O(number of positions) integers, plus the [B, dim] output gradient scaled by
 * 1/count in mode mean); with per_sample_weights every position's value is its own
 * product, so those nnz x dim values are formed. param_id must be the id under which the
 * bag's weight (the view emb_bag_weight gives) was registered with opt.
 * Refusals, in this order, are exactly the unfused path's (same status, same message),
 * then two of the fused step's own:
 *   emb_bag_backward_sparse's: EMB_ERR_NULL, EMB_ERR_STATE (the weight does not require
 *     grad), EMB_ERR_UNSUPPORTED (mode max, scale_grad_by_freq), the argument errors of
 *     emb_bag_forward (input, offsets, per_sample_weights, index values), EMB_ERR_SHAPE
 *     (grad_output);
 *   emb_optimizer_step_sparse's: EMB_ERR_NULL (opt), EMB_ERR_INDEX (param_id),
 *     EMB_ERR_UNSUPPORTED (Adam, AdamW, options that reject sparse gradients),
 *     EMB_ERR_SHAPE (a parameter that is not 2-D or not of the bag's shape);
 *   its own: EMB_ERR_INVALID (the parameter has the bag's shape but is other memory),
 *     EMB_ERR_READ_ONLY (a read-only table); and EMB_ERR_NOMEM.
 * Parameter, state and step count unchanged on error. Single-threaded per optimizer. */
EMB_API emb_status emb_optimizer_step_fused_bag(emb_optimizer *opt, int param_id,
                                                const emb_bag *bag, const emb_tensor *input,
                                                const emb_tensor *offsets,
                                                const emb_tensor *per_sample_weights,
                                                const emb_tensor *grad_output);

/* The optimizer's step count for a parameter (PyTorch's state['step']; SGD, which has no
 * such state in PyTorch, counts its steps too); 0 before the first step, -1 when opt is
 * NULL or param_id unknown. */
EMB_API int64_t emb_optimizer_param_steps(const emb_optimizer *opt, int param_id);

/* ---------------------------------------------------------------------------------------
 * Hogwild: several threads updating rows of one table concurrently
 *
 * Lock-free row updates as word2vec and fastText train: the optimizer's own bookkeeping
 * (step count, lazily created state, scratch) is kept out of the concurrent part.
 *   once:      emb_optimizer_init_state(opt, id)         (state up front; never lazily)
 *   per step:  emb_optimizer_advance_step(opt, id)       (one thread, no update running)
 *              then any number of threads, each:
 *              emb_optimizer_update_rows(opt, id, rows, values)
 * Safe: concurrent emb_optimizer_update_rows calls on the same or different parameters of
 * one optimizer. Each call reads the optimizer (options, step count, state pointers), writes
 * only the parameter's rows named in `rows` and the same rows of its per-row state (Adagrad's
 * sum, SparseAdam's moments), allocates only its own scratch, and never changes the step
 * count or the optimizer object. Calls whose row sets are disjoint do not race at all: the
 * result equals running them one after the other, in any order, bit for bit (the ThreadSanitizer
 * test shows it). Calls whose row sets overlap race on those rows' floats BY DESIGN
 * (Hogwild): an update may be lost or mixed with another, the result depends on timing, and
 * it is a data race in the C sense (ThreadSanitizer reports it); every value is still some
 * float computed from finite inputs (no tearing of aligned 4-byte floats on the supported
 * CPUs). Use overlapping updates only where that is acceptable, as word2vec does.
 * Not safe while updates run: any other call that takes the optimizer (step, step_sparse,
 * step_fused, advance_step, init_state, set_lr, load_state, add_param, free) or writes the
 * table (a forward with max_norm, renorm); a lookup of rows being updated reads values
 * mid-update (again a race by design). emb's own threads are not used inside the call.
 * ------------------------------------------------------------------------------------- */

/* Advances the parameter's step count by one (the step that the following row updates
 * belong to: Adagrad's lr_decay and SparseAdam's bias corrections read it). Not
 * thread-safe. Errors: EMB_ERR_NULL, EMB_ERR_INDEX, EMB_ERR_OVERFLOW. */
EMB_API emb_status emb_optimizer_advance_step(emb_optimizer *opt, int param_id);

/* Applies the sparse update of the current step (the step count as advanced by
 * emb_optimizer_advance_step, not advanced again) for the gradient entries rows[k] with
 * values[k, :]: the same rule and bits as emb_optimizer_step_sparse (SGD entry by entry in
 * order; Adagrad and SparseAdam sum duplicate rows in coalesce() order first), so that
 * advance_step + update_rows(all entries) == step_sparse(the same entries).
 * rows: int64 or int32 [n], values in [0, rows of the parameter); values: float32 [n, dim];
 * both read only. Optimizers: SGD without momentum, Adagrad, SparseAdam, with the options
 * emb_optimizer_step_sparse accepts.
 * Errors (nothing changed): EMB_ERR_NULL, EMB_ERR_INDEX (param_id, or a row out of range:
 * "index 9 at position 2 is out of range for a parameter with 5 rows ..."), EMB_ERR_DTYPE,
 * EMB_ERR_SHAPE (rows not 1-D, values not [n, dim], a parameter that is not 2-D),
 * EMB_ERR_UNSUPPORTED (Adam, AdamW, options that reject sparse gradients, SGD with momentum:
 * its buffer is one tensor for the whole parameter), EMB_ERR_STATE (no step yet: call
 * emb_optimizer_advance_step; Adagrad/SparseAdam without state: call
 * emb_optimizer_init_state), EMB_ERR_NOMEM. Thread safety: see above. */
EMB_API emb_status emb_optimizer_update_rows(const emb_optimizer *opt, int param_id,
                                             const emb_tensor *rows, const emb_tensor *values);

/* ---------------------------------------------------------------------------------------
 * State save / load (PyTorch: optimizer.state_dict() / load_state_dict())
 *
 * The whole state: the options (lr included, as param_groups), and per parameter the step
 * count, the dense state buffers (Adagrad's sum, Adam/AdamW's exp_avg, exp_avg_sq,
 * max_exp_avg_sq, SparseAdam's exp_avg, exp_avg_sq) and SGD's momentum buffer, dense or
 * sparse (its rows and values in stored order). Layout: docs/optimizer-state.md (version 1,
 * little-endian, magic "EMBOPTST", FNV-1a 64 checksum). Loading into an optimizer of the same
 * kind with the same parameters (registered in the same order with the same shapes)
 * resumes training bit-identically. The parameters' values are not part of the state (save
 * the tables themselves).
 * ------------------------------------------------------------------------------------- */

/* Bytes emb_optimizer_save_state writes now (changes as state is created or SGD's sparse
 * buffer grows); 0 when opt is NULL or the size does not fit in size_t. */
EMB_API size_t emb_optimizer_state_nbytes(const emb_optimizer *opt);

/* Writes the state into buf (n >= emb_optimizer_state_nbytes(opt) bytes; exactly that many
 * are written). Errors: EMB_ERR_NULL, EMB_ERR_INVALID (buf too small; nothing written),
 * EMB_ERR_OVERFLOW. */
EMB_API emb_status emb_optimizer_save_state(const emb_optimizer *opt, void *buf, size_t n);

/* Replaces the optimizer's options and state with a saved state of exactly n bytes.
 * Everything is validated before anything changes: EMB_ERR_FORMAT for a truncated or
 * over-long buffer, a wrong magic, an unsupported version, a checksum mismatch, another
 * optimizer kind, invalid options, another number of parameters, a parameter of another
 * shape, or an inconsistent record (state an optimizer does not have, a momentum buffer
 * row out of range); EMB_ERR_NULL; EMB_ERR_NOMEM. Optimizer unchanged on error. */
EMB_API emb_status emb_optimizer_load_state(emb_optimizer *opt, const void *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* EMB_OPTIM_H */
