/* pyemb.h: what the files of the extension module emb._emb share: argument conversion
 * (buffer protocol <-> emb_tensor), errors, output arrays, the per-object call lock. */
#ifndef PYEMB_H
#define PYEMB_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <emb/emb.h>

/* ---- an array argument ----------------------------------------------------------------
 * py_arg_get fills `t` with a view of an object exporting the buffer protocol (numpy
 * arrays, memoryview, bytes, array.array, emb objects) or, failing that, of
 * numpy.asarray(obj) (lists, torch CPU tensors). Read-only arguments that are not
 * C-contiguous or not aligned for their type are copied; arguments emb writes into or keeps
 * (PY_ARG_WRITE, PY_ARG_KEEP) must be C-contiguous and aligned: ValueError otherwise. */
enum {
    PY_ARG_WRITE = 1,    /* emb writes into it: a writable, C-contiguous, aligned buffer */
    PY_ARG_KEEP = 2,     /* emb keeps a pointer to it: no copy allowed */
    PY_ARG_OPTIONAL = 4, /* None is accepted (t.data stays NULL, present == 0) */
};

/* Bit masks of accepted dtypes. */
#define PY_DT(d)    (1u << (d))
#define PY_DT_INDEX (PY_DT(EMB_INT64) | PY_DT(EMB_INT32))
#define PY_DT_F32   PY_DT(EMB_FLOAT32)

typedef struct py_arg {
    emb_tensor t;
    Py_buffer view;
    int held;    /* view holds a buffer */
    int present; /* the argument was given (not None) */
    void *copy;  /* a contiguous copy of a read-only argument, or NULL */
} py_arg;

/* 0 on success; -1 with a Python exception set. `what` names the argument in messages. */
int py_arg_get(PyObject *obj, const char *what, unsigned dtypes, int flags, py_arg *a);
/* Releases the buffer (and copy). Safe on a zeroed or already released py_arg. */
void py_arg_release(py_arg *a);

/* A new numpy array of the given shape and dtype (numpy.empty), its data described by *t
 * (writable). NULL with an exception set on failure. */
PyObject *py_new_array(emb_dtype dtype, int ndim, const int64_t *shape, emb_tensor *t);
/* numpy.asarray(obj): a numpy view of an object exporting a buffer. */
PyObject *py_asarray(PyObject *obj);

/* ---- errors --------------------------------------------------------------------------- */

/* Raises the exception of a failed emb call: its class follows the status (emb.Error and
 * the matching builtin: IndexError, TypeError, ValueError, MemoryError, OSError, ...),
 * its text is emb_errmsg(). Returns NULL. Call with the GIL held, on the thread that made
 * the call (the message is per thread). */
PyObject *py_raise(emb_status st);
/* Creates the exception classes in the module. */
int py_errors_init(PyObject *module);

/* ---- per-object lock -------------------------------------------------------------------
 * Every object that wraps an emb handle holds one: a call takes it with the GIL released,
 * so that two Python threads never run emb on one handle at once (emb's handles are
 * single-threaded) and a handle is never freed while a call uses it (the call holds a
 * reference to the object). */
typedef struct py_lock {
    PyThread_type_lock lock;
} py_lock;

int py_lock_init(py_lock *l);
void py_lock_free(py_lock *l);

/* PY_CALL(lock, status_var, expr): runs expr with the GIL released under the lock. */
#define PY_CALL(l, st, expr)                                                                       \
    do {                                                                                           \
        Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock((l)->lock, WAIT_LOCK);                        \
        (st) = (expr);                                                                             \
        PyThread_release_lock((l)->lock);                                                          \
        Py_END_ALLOW_THREADS                                                                       \
    } while (0)

/* emb's default generator (emb_manual_seed, the draws of a new table) is not locked by the
 * library: every use from the package takes this lock (with the GIL released). */
extern py_lock py_generator_lock;

/* PY_NOGIL(status_var, expr): runs expr with the GIL released (no object lock). */
#define PY_NOGIL(st, expr)                                                                         \
    do {                                                                                           \
        Py_BEGIN_ALLOW_THREADS(st) = (expr);                                                       \
        Py_END_ALLOW_THREADS                                                                       \
    } while (0)

/* ---- small parsers -------------------------------------------------------------------- */

/* padding_idx: None -> EMB_PADDING_NONE, else an int. */
int py_padding_idx(PyObject *obj, int64_t *out);
/* max_norm: None -> INFINITY, else a float. */
int py_max_norm(PyObject *obj, double *out);
/* An optional float: None (or NULL) leaves *out as it is. (py_optim.c) */
int py_opt_double(PyObject *obj, double *out);
/* A path: str, bytes or os.PathLike -> a new bytes object (PyUnicode_FSConverter). */
int py_path(PyObject *obj, PyObject **bytes_out);
/* A tuple of ints from a shape. */
PyObject *py_shape_tuple(int ndim, const int64_t *shape);
/* (words, counts) lists of a vocabulary (words decoded as UTF-8 with surrogateescape);
 * (None, None) for NULL. */
PyObject *py_vocab_lists(const emb_vocab *v);
/* A vocabulary from a sequence of str and optional counts (a new emb_vocab in *out); -1
 * with an exception set. */
int py_vocab_from_list(PyObject *words, PyObject *counts, emb_vocab **out);
/* The generator argument of a call that draws: None -> emb's default generator (NULL) and
 * its lock, a Generator -> its handle and lock; TypeError otherwise. */
int py_generator_arg(PyObject *obj, emb_generator **gen, py_lock **lock);
/* A sparse gradient argument (rows, values) of a [num_rows, dim] table: g views the
 * caller's entries without a copy (borrowed; emb never writes them); rows int64 or int32
 * [n] (int32 rows are widened into `widened`), values float32 [n, dim]. -1 with an exception
 * set (ValueError when the shapes do not fit), everything released. (py_optim.c) */
typedef struct py_sparse_arg {
    py_arg rows, values;
    int64_t *widened;
    emb_sparse_grad g;
} py_sparse_arg;
int py_sparse_arg_get(PyObject *rows, PyObject *values, int64_t num_rows, int64_t dim,
                      py_sparse_arg *s);
void py_sparse_arg_release(py_sparse_arg *s);
/* Fills a Py_buffer exporting a C-contiguous 2-D array at `buf` of rows x cols items of
 * `itemsize` bytes in `format`; shape and strides (two each) live in the exporting object
 * `obj`, which the view holds a reference to. Returns 0. */
int py_fill_buffer_2d(Py_buffer *view, PyObject *obj, void *buf, Py_ssize_t rows, Py_ssize_t cols,
                      Py_ssize_t itemsize, const char *format, int readonly, Py_ssize_t *shape,
                      Py_ssize_t *strides, int flags);

/* ---- the types and functions each file adds ------------------------------------------- */
extern PyTypeObject py_embedding_type;
extern PyTypeObject py_bag_type;
extern PyTypeObject py_optimizer_type;
extern PyTypeObject py_knn_type;
extern PyTypeObject py_fasttext_type;
/* A new emb._emb.FastText owning ft (freed, and NULL returned, when it cannot be made). */
PyObject *py_fasttext_from(emb_fasttext *ft);
extern PyTypeObject py_qtable_type;
extern PyTypeObject py_qwriter_type;
extern PyTypeObject py_generator_type;

extern PyMethodDef py_table_functions[];   /* py_tables.c: functional forms */
extern PyMethodDef py_train_functions[];   /* py_train.c: losses, seed, word2vec */
extern PyMethodDef py_io_functions[];      /* py_io.c: files */
extern PyMethodDef py_random_functions[];  /* py_random.c: generators */
extern PyMethodDef py_project_functions[]; /* py_project.c: pca, tsne */
extern PyMethodDef py_print_functions[];   /* py_print.c: tensor_repr */
extern PyMethodDef py_linear_functions[];  /* py_linear.c: one_hot */
extern PyMethodDef py_renorm_functions[];  /* py_renorm.c: embedding_renorm_ */
extern PyMethodDef py_sparse_functions[];  /* py_sparse.c: sparse_coalesce_order */

int py_tables_init(PyObject *module);
int py_train_init(PyObject *module);
int py_io_init(PyObject *module);
int py_qtable_init(PyObject *module); /* py_qtable.c, called by py_io_init */
int py_random_init(PyObject *module);
int py_linear_init(PyObject *module);
int py_sparse_init(PyObject *module);

/* A table handle for other files: the emb_embedding behind an Embedding or EmbeddingBag
 * object, or NULL (TypeError set). */
emb_embedding *py_embedding_handle(PyObject *obj);
/* The emb_bag behind an EmbeddingBag object, or NULL (TypeError set). */
emb_bag *py_bag_handle(PyObject *obj);
/* The generator of an emb.Generator object (NULL for the default one) and the lock its
 * calls take; -1 with a TypeError for any other object. */
int py_generator_handle(PyObject *obj, emb_generator **gen, py_lock **lock);
/* The QTable an object wraps, or NULL if it is not a QTable. */
emb_qtable *py_qtable_handle(PyObject *obj);
/* Wraps a new emb_embedding (taking ownership) in an Embedding object; `keep` (may be
 * NULL) is kept alive with it. */
PyObject *py_embedding_from_handle(emb_embedding *e, PyObject *keep);

#endif /* PYEMB_H */
