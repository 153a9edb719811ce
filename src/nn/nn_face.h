/* src/nn/nn_face.h: what the nn module shows the modules above it (optim, quant). They
 * include this header, never nn's *_internal.h headers, and never read emb_embedding's or
 * emb_bag's fields: a table is described to them by emb__table_info, and the checks they
 * share with nn's own calls (so that their refusals read exactly as nn's) are nn's
 * functions below. Inside nn, the internal headers include this one. */
#ifndef EMB_NN_FACE_H
#define EMB_NN_FACE_H

#include "internal.h"
#include <emb/bag.h>
#include <emb/embedding.h>

/* ---- tables ------------------------------------------------------------------------- */

/* A table as a module that updates its weights sees it. */
typedef struct emb__table_info {
    float *weight; /* [rows * dim] (NULL possible when the table has no elements) */
    int64_t rows, dim;
    int64_t padding_idx; /* normalised (>= 0), or EMB_PADDING_NONE */
    bool read_only;      /* emb_storage.read_only: nothing may write the weights */
} emb__table_info;

/* The description of a table (e) or of a bag's table (bag); neither may be NULL. */
void emb__embedding_info(const emb_embedding *e, emb__table_info *out);
void emb__bag_info(const emb_bag *bag, emb__table_info *out);

/* ---- checks shared with nn's calls -------------------------------------------------- */

/* The checks of emb_embedding_backward_sparse, in its order and with its messages: NULL
 * arguments, requires_grad, scale_grad_by_freq, the index tensor, grad_output's dtype and
 * shape, then (with_grad) grad's consistency and shape, and last the index values. With
 * with_grad false, grad is not looked at: the checks of a call that builds no gradient
 * (the fused optimizer step). */
emb_status emb__embedding_sparse_check(const emb_embedding *e, const emb_tensor *indices,
                                       const emb_tensor *grad_output, const emb_sparse_grad *grad,
                                       bool with_grad);

/* The checks of F.embedding on a [V, D] table: indices int64/int32, out float32 of shape
 * indices.shape + [D] not overlapping indices, every index in [0, V). */
emb_status emb__lookup_check(int64_t V, int64_t D, const emb_tensor *indices,
                             const emb_tensor *out);

/* Checks that g is non-NULL and internally consistent (non-negative sizes,
 * nnz <= capacity, storage present when capacity > 0). `what` names it in messages. */
emb_status emb__sparse_grad_check(const emb_sparse_grad *g, const char *what);

/* ---- bags over any table ------------------------------------------------------------ */

/* What a bag call needs to know about the table and the options. */
typedef struct emb__bag_cfg {
    int64_t V, D;
    int64_t pad; /* normalised, or EMB_PADDING_NONE */
    emb_bag_mode mode;
    bool include_last_offset;
    bool scale_grad_by_freq;
    double max_norm, norm_type;
} emb__bag_cfg;

/* A validated batch: bag b covers positions [starts[b], starts[b+1]); positions from
 * end = starts[B] to n belong to no bag (include_last_offset with a short last offset). */
typedef struct emb__bag_batch {
    const emb_tensor *input;
    const void *idx;
    bool i32;
    int64_t n, end, B;
    int64_t fixed;   /* N of a 2-D input, -1 for 1-D */
    int64_t *starts; /* [B + 1], emb__malloc'ed */
    const float *psw;
} emb__bag_batch;

/* The configuration of F.embedding_bag's options on a [V, D] table (opts NULL: the
 * defaults): mode and its restrictions, padding_idx (normalised), max_norm, norm_type. */
emb_status emb__bag_cfg_from_options(int64_t V, int64_t D, const emb_bag_options *opts,
                                     emb__bag_cfg *out);

/* Checks input, per_sample_weights and offsets (dtypes, shapes, offset values, the
 * per_sample_weights/mode rule) and resolves the bags into bb->starts (allocated: free
 * with emb__bag_batch_free, also safe after a failure). Index values are not read. */
emb_status emb__bag_batch_init(const emb__bag_cfg *c, const emb_tensor *input,
                               const emb_tensor *offsets, const emb_tensor *psw,
                               emb__bag_batch *bb);
void emb__bag_batch_free(emb__bag_batch *bb);
/* A 2-D input without columns has B bags of no positions, and nothing bounds B: its starts
 * are left NULL (end = 0) by emb__bag_batch_init and made here, once the caller has checked
 * outputs of B rows. Calls that write nothing per bag (dim 0) need not call it; code that
 * reads bb->starts must. */
emb_status emb__bag_batch_ready(emb__bag_batch *bb);

/* out is float32 [B, D]; max_indices NULL, or int64 [B, D] in mode max only. */
emb_status emb__bag_check_outputs(const emb__bag_cfg *c, const emb__bag_batch *bb,
                                  const emb_tensor *out, const emb_tensor *max_indices);

/* Every index of the input in [0, V), or EMB_ERR_INDEX naming the bag, the position in
 * the bag, the input position and the valid range. */
emb_status emb__bag_check_index_values(const emb__bag_cfg *c, const emb__bag_batch *bb);

/* emb_bag_backward_sparse after its handle checks (requires_grad), on a configuration: the
 * mode and scale_grad_by_freq refusals, grad's shape, the arguments, the entries. Tables
 * that are not emb_bag handles (reduced-precision ones) share it. */
emb_status emb__bag_backward_sparse_cfg(const emb__bag_cfg *c, const emb_tensor *input,
                                        const emb_tensor *offsets,
                                        const emb_tensor *per_sample_weights,
                                        const emb_tensor *grad_output, emb_sparse_grad *grad);

/* The fresh sparse gradient emb_bag_backward_sparse would build, described for the fused
 * optimizer step without a copy of per-position values: entry k is row rows[k] with the
 * value row values + (pos ? pos[k] : k) * dim. Sum: values IS grad_output and pos[k] the
 * entry's bag; mean: values is grad_output scaled per bag by (1.0f / count) ([B, dim],
 * owned) and pos the bag; with per_sample_weights every entry's value differs, so values
 * holds one row per entry (owned) and pos is NULL. Checks exactly what
 * emb_bag_backward_sparse checks (requires_grad, mode, scale_grad_by_freq, arguments,
 * index values); on error nothing is allocated. */
typedef struct emb__bag_entries {
    int64_t nnz, dim;
    int64_t *rows;       /* [nnz], owned */
    int64_t *pos;        /* [nnz] or NULL, owned */
    const float *values; /* see above */
    float *owned_values; /* what values points to when owned, else NULL */
} emb__bag_entries;

emb_status emb__bag_sparse_entries(const emb_bag *bag, const emb_tensor *input,
                                   const emb_tensor *offsets, const emb_tensor *psw,
                                   const emb_tensor *grad_output, emb__bag_entries *out);
void emb__bag_entries_free(emb__bag_entries *e);

#endif /* EMB_NN_FACE_H */
