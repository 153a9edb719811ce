/* py_tables.h: what py_tables.c (the Embedding and EmbeddingBag objects) shares with
 * py_functional.c (the functional forms over a caller's weight). */
#ifndef PY_TABLES_H
#define PY_TABLES_H

#include "pyemb.h"

/* An EmbeddingBag call's index arguments: input, offsets (optional) and
 * per_sample_weights (optional). */
typedef struct py_bag_args {
    py_arg input, offsets, psw;
} py_bag_args;

#define OPT_T(a) ((a).present ? &(a).t : NULL)

/* 0, or -1 with an exception set (the arguments are then released). */
int py_bag_args_get(PyObject *input, PyObject *offsets, PyObject *psw, py_bag_args *b);
void py_bag_args_release(py_bag_args *b);
/* "sum", "mean" or "max"; ValueError otherwise. */
int py_bag_mode(PyObject *obj, emb_bag_mode *out);
/* emb_embedding_options from torch's constructor arguments; -1 with an exception set. */
int py_embedding_options(PyObject *padding_idx, PyObject *max_norm, double norm_type, int scale,
                         int sparse, emb_embedding_options *o);
/* A sparse gradient copied into (rows int64 [nnz], values float32 [nnz, dim]). */
PyObject *py_sparse_to_tuple(const emb_sparse_grad *g);

/* py_blocks.c. A new array as py_new_array, for a fresh gradient written once: a large one
 * comes from the module's cache of freed gradients (already mapped memory, page aligned). */
PyObject *py_new_cached_array(emb_dtype dtype, int ndim, const int64_t *shape, emb_tensor *t);
/* (rows int64 [nnz], values float32 [nnz, dim]) over g's own storage, which the arrays take
 * over (g is left empty); borrowed or empty gradients are copied (py_sparse_to_tuple). */
PyObject *py_sparse_take(emb_sparse_grad *g);
/* _emb.empty_cache() and _emb.cached_bytes(): the cache of freed gradients. */
PyObject *py_empty_cache(PyObject *m, PyObject *unused);
PyObject *py_cached_bytes(PyObject *m, PyObject *unused);

#endif
