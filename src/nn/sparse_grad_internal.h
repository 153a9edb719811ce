/* src/nn/sparse_grad_internal.h: private helpers of the nn module that manage
 * emb_sparse_grad storage (implemented in src/nn/sparse_grad.c; used by
 * src/nn/embedding_backward.c and src/nn/embedding_bag_backward.c). The modules above nn use
 * nn_face.h. */
#ifndef EMB_SPARSE_GRAD_INTERNAL_H
#define EMB_SPARSE_GRAD_INTERNAL_H

#include "nn_face.h" /* emb__sparse_grad_check */

/* Allocates storage for `rows` entries of `dim` floats (at least one byte each, so the
 * pointers are never NULL). EMB_ERR_OVERFLOW / EMB_ERR_NOMEM with a message; on failure
 * nothing is allocated. Free with emb__free. */
emb_status emb__sparse_grad_alloc(int64_t rows, int64_t dim, int64_t **indices, float **values);

/* Lets go of g's entries: frees emb's storage (not borrowed entries, which belong to the
 * caller), leaving indices/values NULL, capacity 0, borrowed false; nnz and the flags
 * are the caller's to set. */
void emb__sparse_grad_release(emb_sparse_grad *g);

/* grad += m new entries (PyTorch's in-place sparse add merges the two entry lists): the
 * room for the new entries (si, sv: m rows) and for the merged list (ri, rv: grad->nnz + m
 * rows), taken by emb__sparse_add_begin and given back by emb__sparse_add_finish. */
typedef struct emb__sparse_add {
    int64_t *si, *ri;
    float *sv, *rv;
    int64_t total; /* grad->nnz + m */
} emb__sparse_add;

/* Allocates a's buffers for adding m entries of dim floats to grad. EMB_ERR_OVERFLOW
 * ("<who>: the number of entries overflows") or an error of emb__sparse_grad_alloc; on
 * failure nothing is allocated. */
emb_status emb__sparse_add_begin(const emb_sparse_grad *grad, int64_t m, int64_t dim,
                                 const char *who, emb__sparse_add *a);

/* Merges the first `got` entries of a.si/a.sv (written by a gather kernel) into grad's
 * entries, frees a's buffers of new entries and makes the merged list grad's own storage
 * (borrowed entries are only forgotten). */
void emb__sparse_add_finish(emb_sparse_grad *grad, emb__sparse_add *a, int64_t got, int64_t dim);

#endif /* EMB_SPARSE_GRAD_INTERNAL_H */
