/* src/nn/sparse_grad_internal.h: private helpers of the nn module that manage
 * emb_sparse_grad storage (implemented in src/nn/sparse_grad.c; used by
 * src/nn/embedding_backward.c). The modules above nn use nn_face.h. */
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

#endif /* EMB_SPARSE_GRAD_INTERNAL_H */
