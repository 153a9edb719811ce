/* py_tables.c: emb._emb.Embedding and emb._emb.EmbeddingBag (objects over emb_embedding /
 * emb_bag that export their weight through the buffer protocol); the functional forms are in
 * py_functional.c. */
#include "py_tables.h"

#include <math.h>
#include <string.h>

typedef struct py_table {
    PyObject_HEAD emb_embedding *e; /* the table (owned by `bag` for an EmbeddingBag) */
    emb_bag *bag;                   /* EmbeddingBag only */
    py_lock lock;
    Py_buffer shared; /* the caller's weight when the table shares it */
    int shared_held;
    PyObject *keep; /* anything else the table's memory depends on, or NULL */
    Py_ssize_t shape[2], strides[2];
} py_table;

static int is_table(PyObject *o) {
    return PyObject_TypeCheck(o, &py_embedding_type) || PyObject_TypeCheck(o, &py_bag_type);
}

emb_embedding *py_embedding_handle(PyObject *obj) {
    if (!is_table(obj) || !((py_table *)obj)->e) {
        PyErr_Format(PyExc_TypeError, "expected an emb Embedding or EmbeddingBag, got %.100s",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return ((py_table *)obj)->e;
}

static void table_dealloc(py_table *self) {
    if (self->bag)
        emb_bag_free(self->bag);
    else
        emb_embedding_free(self->e);
    self->bag = NULL;
    self->e = NULL;
    if (self->shared_held) PyBuffer_Release(&self->shared);
    Py_CLEAR(self->keep);
    py_lock_free(&self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static py_table *table_alloc(PyTypeObject *type) {
    py_table *self = (py_table *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    if (py_lock_init(&self->lock) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return self;
}

static PyObject *table_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    return (PyObject *)table_alloc(type);
}

PyObject *py_embedding_from_handle(emb_embedding *e, PyObject *keep) {
    py_table *self = table_alloc(&py_embedding_type);
    if (!self) {
        emb_embedding_free(e);
        return NULL;
    }
    self->e = e;
    Py_XINCREF(keep);
    self->keep = keep;
    return (PyObject *)self;
}

/* ---- buffer protocol: the weight, float32 [V, D], read-only for read-only tables ---- */

static int table_getbuffer(py_table *self, Py_buffer *view, int flags) {
    emb_tensor w;
    if (!self->e || emb_embedding_weight_const(self->e, &w) != EMB_OK) {
        PyErr_SetString(PyExc_BufferError, "the table has no weight");
        return -1;
    }
    int ro = emb_embedding_is_read_only(self->e);
    if ((flags & PyBUF_WRITABLE) && ro) {
        PyErr_SetString(PyExc_BufferError,
                        "the table is read-only (a memory-mapped file or a read-only array)");
        return -1;
    }
    return py_fill_buffer_2d(view, (PyObject *)self, w.data, (Py_ssize_t)w.shape[0],
                             (Py_ssize_t)w.shape[1], 4, "f", ro, self->shape, self->strides, flags);
}

static PyBufferProcs table_buffer = {(getbufferproc)table_getbuffer, NULL};

/* ---- construction ---- */

/* The caller's weight to share: a 2-D float32 C-contiguous array, kept; a read-only buffer
 * makes a read-only table. */
/* The _weight of a table: held by the object (release_shared), a 2-D one of the table's
 * shape. */
static int get_shared_weight(PyObject *obj, py_table *self, int64_t num, int64_t dim, emb_tensor *w,
                             emb_storage *storage) {
    py_arg a;
    if (py_arg_get(obj, "weight", PY_DT_F32, PY_ARG_KEEP, &a) < 0) return -1;
    if (a.t.ndim == 2 && (a.t.shape[0] != num || a.t.shape[1] != dim)) {
        py_arg_release(&a);
        PyErr_SetString(PyExc_ValueError,
                        "Shape of weight does not match num_embeddings and embedding_dim");
        return -1;
    }
    self->shared = a.view; /* keeps the owner alive and its memory in place */
    self->shared_held = 1;
    *w = a.t;
    memset(storage, 0, sizeof *storage);
    storage->read_only = a.view.readonly;
    return 0;
}

static void release_shared(py_table *self) {
    if (self->shared_held) PyBuffer_Release(&self->shared);
    self->shared_held = 0;
}

int py_embedding_options(PyObject *padding_idx, PyObject *max_norm, double norm_type, int scale,
                         int sparse, emb_embedding_options *o) {
    *o = emb_embedding_options_default();
    if (py_padding_idx(padding_idx, &o->padding_idx) < 0) return -1;
    if (py_max_norm(max_norm, &o->max_norm) < 0) return -1;
    o->norm_type = norm_type;
    o->scale_grad_by_freq = scale;
    o->sparse = sparse;
    return 0;
}

static int embedding_init(py_table *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"num_embeddings", "embedding_dim",      "padding_idx", "max_norm",
                            "norm_type",      "scale_grad_by_freq", "sparse",      "_weight",
                            "_freeze",        "generator",          NULL};
    long long num = 0, dim = 0;
    PyObject *pad = Py_None, *mn = Py_None, *weight = Py_None, *gen = Py_None;
    double nt = 2.0;
    int scale = 0, sparse = 0, freeze = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "LL|OOdppOp$O:Embedding", names, &num, &dim, &pad,
                                     &mn, &nt, &scale, &sparse, &weight, &freeze, &gen))
        return -1;
    if (self->e) {
        PyErr_SetString(PyExc_RuntimeError, "Embedding is already initialised");
        return -1;
    }
    emb_embedding_options o;
    if (py_embedding_options(pad, mn, nt, scale, sparse, &o) < 0) return -1;
    emb_status st;
    if (weight != Py_None) {
        emb_tensor w;
        emb_storage s;
        if (get_shared_weight(weight, self, num, dim, &w, &s) < 0) return -1;
        st = emb_embedding_wrap(&w, &s, freeze, &o, &self->e);
        if (st != EMB_OK) release_shared(self);
    } else {
        py_lock *lock = &py_generator_lock; /* the generator's own lock, or the default's */
        if (gen != Py_None && py_generator_handle(gen, &o.generator, &lock) < 0) return -1;
        PY_CALL(lock, st, emb_embedding_create(num, dim, &o, &self->e));
    }
    if (st != EMB_OK) {
        py_raise(st);
        return -1;
    }
    return 0;
}

int py_bag_mode(PyObject *obj, emb_bag_mode *out) {
    const char *s = PyUnicode_AsUTF8(obj);
    if (!s) return -1;
    if (!strcmp(s, "sum"))
        *out = EMB_BAG_SUM;
    else if (!strcmp(s, "mean"))
        *out = EMB_BAG_MEAN;
    else if (!strcmp(s, "max"))
        *out = EMB_BAG_MAX;
    else {
        PyErr_Format(PyExc_ValueError, "mode has to be one of sum, mean or max, got '%s'", s);
        return -1;
    }
    return 0;
}

static int bag_init(py_table *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"num_embeddings",      "embedding_dim", "max_norm", "norm_type",
                            "scale_grad_by_freq",  "mode",          "sparse",   "_weight",
                            "include_last_offset", "padding_idx",   "_freeze",  NULL};
    long long num = 0, dim = 0;
    PyObject *pad = Py_None, *mn = Py_None, *weight = Py_None, *mode = NULL;
    double nt = 2.0;
    int scale = 0, sparse = 0, ilo = 0, freeze = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "LL|OdpUpOpOp:EmbeddingBag", names, &num, &dim, &mn,
                                     &nt, &scale, &mode, &sparse, &weight, &ilo, &pad, &freeze))
        return -1;
    if (self->bag) {
        PyErr_SetString(PyExc_RuntimeError, "EmbeddingBag is already initialised");
        return -1;
    }
    emb_bag_options o = emb_bag_options_default();
    if (mode && py_bag_mode(mode, &o.mode) < 0) return -1;
    if (py_padding_idx(pad, &o.padding_idx) < 0 || py_max_norm(mn, &o.max_norm) < 0) return -1;
    o.norm_type = nt;
    o.scale_grad_by_freq = scale;
    o.sparse = sparse;
    o.include_last_offset = ilo;
    emb_status st;
    if (weight != Py_None) {
        emb_tensor w;
        emb_storage s;
        if (get_shared_weight(weight, self, num, dim, &w, &s) < 0) return -1;
        st = emb_bag_wrap(&w, &s, freeze, &o, &self->bag);
        if (st != EMB_OK) release_shared(self);
    } else {
        PY_CALL(&py_generator_lock, st, emb_bag_create(num, dim, &o, &self->bag));
    }
    if (st != EMB_OK) {
        py_raise(st);
        return -1;
    }
    self->e = emb_bag_embedding(self->bag);
    return 0;
}

static int check_ready(py_table *self) {
    if (!self->e) {
        PyErr_SetString(PyExc_RuntimeError, "the table was not initialised (call __init__)");
        return -1;
    }
    return 0;
}

/* ---- Embedding methods ---- */

static PyObject *embedding_forward(py_table *self, PyObject *indices) {
    if (check_ready(self) < 0) return NULL;
    py_arg ix;
    if (py_arg_get(indices, "indices", PY_DT_INDEX, 0, &ix) < 0) return NULL;
    int ndim;
    int64_t shape[EMB_MAX_DIMS];
    emb_status st = emb_embedding_output_shape(self->e, &ix.t, &ndim, shape);
    PyObject *out = NULL;
    emb_tensor o;
    if (st != EMB_OK) {
        py_raise(st);
        goto done;
    }
    out = py_new_array(EMB_FLOAT32, ndim, shape, &o);
    if (!out) goto done;
    PY_CALL(&self->lock, st, emb_embedding_forward(self->e, &ix.t, &o));
    if (st != EMB_OK) {
        Py_CLEAR(out);
        py_raise(st);
    }
done:
    py_arg_release(&ix);
    return out;
}

static PyObject *table_call(py_table *self, PyObject *args, PyObject *kw);

/* Copies a sparse gradient into (rows int64 [nnz], values float32 [nnz, dim]). */
PyObject *py_sparse_to_tuple(const emb_sparse_grad *g) {
    emb_tensor rt, vt;
    int64_t rs[1] = {g->nnz}, vs[2] = {g->nnz, g->dim};
    PyObject *rows = py_new_array(EMB_INT64, 1, rs, &rt);
    PyObject *vals = rows ? py_new_array(EMB_FLOAT32, 2, vs, &vt) : NULL;
    if (!vals) {
        Py_XDECREF(rows);
        return NULL;
    }
    if (g->nnz) {
        memcpy(rt.data, g->indices, (size_t)g->nnz * 8);
        memcpy(vt.data, g->values, (size_t)(g->nnz * g->dim) * 4);
    }
    PyObject *t = PyTuple_Pack(2, rows, vals);
    Py_DECREF(rows);
    Py_DECREF(vals);
    return t;
}

/* A new dense gradient [V, D] (overwrite form) or the caller's `grad` accumulated into. */
static PyObject *dense_grad_target(emb_embedding *e, PyObject *grad, py_arg *g, emb_tensor *t) {
    if (grad && grad != Py_None) {
        if (py_arg_get(grad, "grad", PY_DT_F32, PY_ARG_WRITE, g) < 0) return NULL;
        *t = g->t;
        Py_INCREF(grad);
        return grad;
    }
    int64_t shape[2] = {emb_embedding_num_embeddings(e), emb_embedding_embedding_dim(e)};
    return py_new_array(EMB_FLOAT32, 2, shape, t);
}

static PyObject *embedding_backward(py_table *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"indices", "grad_output", "grad", NULL};
    PyObject *ind, *go, *grad = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:backward", names, &ind, &go, &grad))
        return NULL;
    if (check_ready(self) < 0) return NULL;
    py_arg ix, gout, g = {0};
    if (py_arg_get(ind, "indices", PY_DT_INDEX, 0, &ix) < 0) return NULL;
    if (py_arg_get(go, "grad_output", PY_DT_F32, 0, &gout) < 0) {
        py_arg_release(&ix);
        return NULL;
    }
    emb_tensor t;
    emb_status st;
    PyObject *res = dense_grad_target(self->e, grad, &g, &t);
    if (res) {
        int acc = g.present;
        PY_CALL(&self->lock, st,
                acc ? emb_embedding_backward(self->e, &ix.t, &gout.t, &t)
                    : emb_embedding_backward_overwrite(self->e, &ix.t, &gout.t, &t));
        if (st != EMB_OK) {
            Py_CLEAR(res);
            py_raise(st);
        }
    }
    py_arg_release(&g);
    py_arg_release(&gout);
    py_arg_release(&ix);
    return res;
}

static PyObject *embedding_backward_sparse(py_table *self, PyObject *args) {
    PyObject *ind, *go;
    if (!PyArg_ParseTuple(args, "OO:backward_sparse", &ind, &go)) return NULL;
    if (check_ready(self) < 0) return NULL;
    py_arg ix, gout;
    if (py_arg_get(ind, "indices", PY_DT_INDEX, 0, &ix) < 0) return NULL;
    if (py_arg_get(go, "grad_output", PY_DT_F32, 0, &gout) < 0) {
        py_arg_release(&ix);
        return NULL;
    }
    emb_sparse_grad g;
    emb_status st = emb_sparse_grad_init(&g, emb_embedding_num_embeddings(self->e),
                                         emb_embedding_embedding_dim(self->e));
    PyObject *res = NULL;
    if (st == EMB_OK)
        PY_CALL(&self->lock, st, emb_embedding_backward_sparse(self->e, &ix.t, &gout.t, &g));
    if (st != EMB_OK)
        py_raise(st);
    else
        res = py_sparse_to_tuple(&g);
    emb_sparse_grad_release(&g);
    py_arg_release(&gout);
    py_arg_release(&ix);
    return res;
}

/* ---- EmbeddingBag methods ---- */

void py_bag_args_release(py_bag_args *b) {
    py_arg_release(&b->input);
    py_arg_release(&b->offsets);
    py_arg_release(&b->psw);
}

int py_bag_args_get(PyObject *input, PyObject *offsets, PyObject *psw, py_bag_args *b) {
    memset(b, 0, sizeof *b);
    if (py_arg_get(input, "input", PY_DT_INDEX, 0, &b->input) < 0 ||
        py_arg_get(offsets, "offsets", PY_DT_INDEX, PY_ARG_OPTIONAL, &b->offsets) < 0 ||
        py_arg_get(psw, "per_sample_weights", PY_DT_F32, PY_ARG_OPTIONAL, &b->psw) < 0) {
        py_bag_args_release(b);
        return -1;
    }
    return 0;
}

static PyObject *bag_forward(py_table *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"input", "offsets", "per_sample_weights", "return_max_indices", NULL};
    PyObject *input, *offsets = Py_None, *psw = Py_None;
    int want_mi = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOp:forward", names, &input, &offsets, &psw,
                                     &want_mi))
        return NULL;
    if (check_ready(self) < 0) return NULL;
    py_bag_args b;
    if (py_bag_args_get(input, offsets, psw, &b) < 0) return NULL;
    int64_t nb = 0;
    PyObject *out = NULL, *mi = NULL, *res = NULL;
    emb_tensor o, m;
    emb_status st = emb_bag_num_bags(self->bag, &b.input.t, OPT_T(b.offsets), &nb);
    if (st != EMB_OK) {
        py_raise(st);
        goto done;
    }
    int64_t shape[2] = {nb, emb_embedding_embedding_dim(self->e)};
    int is_max = emb_bag_mode_of(self->bag) == EMB_BAG_MAX;
    out = py_new_array(EMB_FLOAT32, 2, shape, &o);
    if (!out) goto done;
    if (is_max && !(mi = py_new_array(EMB_INT64, 2, shape, &m))) goto done;
    PY_CALL(&self->lock, st,
            emb_bag_forward(self->bag, &b.input.t, OPT_T(b.offsets), OPT_T(b.psw), &o,
                            is_max ? &m : NULL));
    if (st != EMB_OK) {
        py_raise(st);
        goto done;
    }
    if (want_mi)
        res = PyTuple_Pack(2, out, mi ? mi : Py_None);
    else {
        res = out;
        Py_INCREF(res);
    }
done:
    Py_XDECREF(out);
    Py_XDECREF(mi);
    py_bag_args_release(&b);
    return res;
}

static PyObject *bag_backward(py_table *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"input",       "grad_output", "offsets", "per_sample_weights",
                            "max_indices", "grad",        NULL};
    PyObject *input, *go, *offsets = Py_None, *psw = Py_None, *mi = Py_None, *grad = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOOO:backward", names, &input, &go, &offsets,
                                     &psw, &mi, &grad))
        return NULL;
    if (check_ready(self) < 0) return NULL;
    py_bag_args b;
    py_arg gout = {0}, mia = {0}, g = {0};
    PyObject *res = NULL;
    if (py_bag_args_get(input, offsets, psw, &b) < 0) return NULL;
    if (py_arg_get(go, "grad_output", PY_DT_F32, 0, &gout) < 0 ||
        py_arg_get(mi, "max_indices", PY_DT(EMB_INT64), PY_ARG_OPTIONAL, &mia) < 0)
        goto done;
    emb_tensor t;
    emb_status st;
    res = dense_grad_target(self->e, grad, &g, &t);
    if (!res) goto done;
    int acc = g.present;
    PY_CALL(&self->lock, st,
            acc ? emb_bag_backward(self->bag, &b.input.t, OPT_T(b.offsets), OPT_T(b.psw),
                                   OPT_T(mia), &gout.t, &t)
                : emb_bag_backward_overwrite(self->bag, &b.input.t, OPT_T(b.offsets), OPT_T(b.psw),
                                             OPT_T(mia), &gout.t, &t));
    if (st != EMB_OK) {
        Py_CLEAR(res);
        py_raise(st);
    }
done:
    py_arg_release(&g);
    py_arg_release(&mia);
    py_arg_release(&gout);
    py_bag_args_release(&b);
    return res;
}

static PyObject *bag_backward_sparse(py_table *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"input", "grad_output", "offsets", "per_sample_weights", NULL};
    PyObject *input, *go, *offsets = Py_None, *psw = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OO:backward_sparse", names, &input, &go,
                                     &offsets, &psw))
        return NULL;
    if (check_ready(self) < 0) return NULL;
    py_bag_args b;
    py_arg gout = {0};
    PyObject *res = NULL;
    if (py_bag_args_get(input, offsets, psw, &b) < 0) return NULL;
    if (py_arg_get(go, "grad_output", PY_DT_F32, 0, &gout) < 0) goto done;
    emb_sparse_grad g;
    emb_status st = emb_sparse_grad_init(&g, emb_embedding_num_embeddings(self->e),
                                         emb_embedding_embedding_dim(self->e));
    if (st == EMB_OK)
        PY_CALL(&self->lock, st,
                emb_bag_backward_sparse(self->bag, &b.input.t, OPT_T(b.offsets), OPT_T(b.psw),
                                        &gout.t, &g));
    if (st != EMB_OK)
        py_raise(st);
    else
        res = py_sparse_to_tuple(&g);
    emb_sparse_grad_release(&g);
done:
    py_arg_release(&gout);
    py_bag_args_release(&b);
    return res;
}

static PyObject *bag_backward_psw(py_table *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"input", "grad_output", "offsets", NULL};
    PyObject *input, *go, *offsets = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:backward_per_sample_weights", names, &input,
                                     &go, &offsets))
        return NULL;
    if (check_ready(self) < 0) return NULL;
    py_bag_args b;
    py_arg gout = {0};
    PyObject *res = NULL;
    if (py_bag_args_get(input, offsets, Py_None, &b) < 0) return NULL;
    if (py_arg_get(go, "grad_output", PY_DT_F32, 0, &gout) < 0) goto done;
    emb_tensor t;
    res = py_new_array(EMB_FLOAT32, b.input.t.ndim, b.input.t.shape, &t);
    if (!res) goto done;
    emb_status st;
    PY_CALL(
        &self->lock, st,
        emb_bag_backward_per_sample_weights(self->bag, &b.input.t, OPT_T(b.offsets), &gout.t, &t));
    if (st != EMB_OK) {
        Py_CLEAR(res);
        py_raise(st);
    }
done:
    py_arg_release(&gout);
    py_bag_args_release(&b);
    return res;
}

static PyObject *table_call(py_table *self, PyObject *args, PyObject *kw) {
    if (self->bag) return bag_forward(self, args, kw);
    PyObject *ind;
    static char *names[] = {"indices", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:Embedding", names, &ind)) return NULL;
    return embedding_forward(self, ind);
}

/* ---- properties ---- */

static PyObject *get_weight(py_table *self, void *c) {
    if (check_ready(self) < 0) return NULL;
    return py_asarray((PyObject *)self);
}

static int set_weight(py_table *self, PyObject *value, void *c) {
    if (check_ready(self) < 0) return -1;
    if (!value) {
        PyErr_SetString(PyExc_AttributeError, "the weight cannot be deleted");
        return -1;
    }
    /* weight[...] = value: copied into the table (the table's memory stays where it is,
     * so views taken earlier see the new values) */
    PyObject *w = py_asarray((PyObject *)self);
    if (!w) return -1;
    PyObject *slice = PySlice_New(NULL, NULL, NULL);
    int r = slice ? PyObject_SetItem(w, slice, value) : -1;
    Py_XDECREF(slice);
    Py_DECREF(w);
    return r;
}

#define GETTER(name, expr)                                                                         \
    static PyObject *get_##name(py_table *self, void *c) {                                         \
        if (check_ready(self) < 0) return NULL;                                                    \
        return expr;                                                                               \
    }
GETTER(num_embeddings, PyLong_FromLongLong(emb_embedding_num_embeddings(self->e)))
GETTER(embedding_dim, PyLong_FromLongLong(emb_embedding_embedding_dim(self->e)))
GETTER(norm_type, PyFloat_FromDouble(emb_embedding_norm_type(self->e)))
GETTER(scale_grad_by_freq, PyBool_FromLong(emb_embedding_scale_grad_by_freq(self->e)))
GETTER(sparse, PyBool_FromLong(emb_embedding_is_sparse(self->e)))
GETTER(read_only, PyBool_FromLong(emb_embedding_is_read_only(self->e)))
GETTER(requires_grad, PyBool_FromLong(emb_embedding_requires_grad(self->e)))

static PyObject *get_padding_idx(py_table *self, void *c) {
    if (check_ready(self) < 0) return NULL;
    int64_t p = emb_embedding_padding_idx(self->e);
    if (p == EMB_PADDING_NONE) Py_RETURN_NONE;
    return PyLong_FromLongLong(p);
}

static PyObject *get_max_norm(py_table *self, void *c) {
    if (check_ready(self) < 0) return NULL;
    double m = emb_embedding_max_norm(self->e);
    if (isinf(m)) Py_RETURN_NONE;
    return PyFloat_FromDouble(m);
}

static PyObject *get_mode(py_table *self, void *c) {
    if (check_ready(self) < 0) return NULL;
    static const char *modes[] = {"sum", "mean", "max"};
    return PyUnicode_FromString(modes[emb_bag_mode_of(self->bag)]);
}

static PyObject *get_include_last_offset(py_table *self, void *c) {
    if (check_ready(self) < 0) return NULL;
    return PyBool_FromLong(emb_bag_include_last_offset(self->bag));
}

static int set_requires_grad(py_table *self, PyObject *v, void *c) {
    if (check_ready(self) < 0) return -1;
    int b = v ? PyObject_IsTrue(v) : -1;
    if (b < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_AttributeError, "cannot delete requires_grad");
        return -1;
    }
    emb_embedding_set_requires_grad(self->e, b);
    return 0;
}

static PyObject *table_repr(py_table *self) {
    if (!self->e) return PyUnicode_FromFormat("%s(uninitialised)", Py_TYPE(self)->tp_name);
    return PyUnicode_FromFormat("%s(%lld, %lld%s)", self->bag ? "EmbeddingBag" : "Embedding",
                                (long long)emb_embedding_num_embeddings(self->e),
                                (long long)emb_embedding_embedding_dim(self->e),
                                emb_embedding_is_read_only(self->e) ? ", read_only=True" : "");
}

#define COMMON_GETSET                                                                              \
    {"weight", (getter)get_weight, (setter)set_weight,                                             \
     "The weight, float32 [num_embeddings, embedding_dim]: a numpy view of the table's own "       \
     "memory (read-only for a read-only table). Assigning copies values into the table.",          \
     NULL},                                                                                        \
        {"num_embeddings", (getter)get_num_embeddings, NULL, NULL, NULL},                          \
        {"embedding_dim", (getter)get_embedding_dim, NULL, NULL, NULL},                            \
        {"padding_idx", (getter)get_padding_idx, NULL, "normalised padding row or None", NULL},    \
        {"max_norm", (getter)get_max_norm, NULL, NULL, NULL},                                      \
        {"norm_type", (getter)get_norm_type, NULL, NULL, NULL},                                    \
        {"scale_grad_by_freq", (getter)get_scale_grad_by_freq, NULL, NULL, NULL},                  \
        {"sparse", (getter)get_sparse, NULL, NULL, NULL},                                          \
        {"read_only", (getter)get_read_only, NULL, NULL, NULL}, {                                  \
        "requires_grad", (getter)get_requires_grad, (setter)set_requires_grad, NULL, NULL          \
    }

static PyGetSetDef embedding_getset[] = {COMMON_GETSET, {NULL}};
static PyGetSetDef bag_getset[] = {
    COMMON_GETSET,
    {"mode", (getter)get_mode, NULL, NULL, NULL},
    {"include_last_offset", (getter)get_include_last_offset, NULL, NULL, NULL},
    {NULL}};

static PyMethodDef embedding_methods[] = {
    {"forward", (PyCFunction)embedding_forward, METH_O,
     "forward(indices) -> float32 array indices.shape + [embedding_dim]"},
    {"backward", (PyCFunction)(void (*)(void))embedding_backward, METH_VARARGS | METH_KEYWORDS,
     "backward(indices, grad_output, grad=None) -> the dense gradient of the weight: a new "
     "array, or `grad` with the gradient added (PyTorch's accumulation into .grad)"},
    {"backward_sparse", (PyCFunction)embedding_backward_sparse, METH_VARARGS,
     "backward_sparse(indices, grad_output) -> (rows int64 [nnz], values float32 [nnz, dim])"},
    {NULL}};

static PyMethodDef bag_methods[] = {
    {"forward", (PyCFunction)(void (*)(void))bag_forward, METH_VARARGS | METH_KEYWORDS,
     "forward(input, offsets=None, per_sample_weights=None, return_max_indices=False) -> "
     "float32 [B, dim] (and max_indices, int64 [B, dim] in mode max, else None)"},
    {"backward", (PyCFunction)(void (*)(void))bag_backward, METH_VARARGS | METH_KEYWORDS,
     "backward(input, grad_output, offsets=None, per_sample_weights=None, max_indices=None, "
     "grad=None) -> the dense gradient of the weight"},
    {"backward_sparse", (PyCFunction)(void (*)(void))bag_backward_sparse,
     METH_VARARGS | METH_KEYWORDS,
     "backward_sparse(input, grad_output, offsets=None, per_sample_weights=None) -> "
     "(rows, values)"},
    {"backward_per_sample_weights", (PyCFunction)(void (*)(void))bag_backward_psw,
     METH_VARARGS | METH_KEYWORDS,
     "backward_per_sample_weights(input, grad_output, offsets=None) -> float32, the "
     "input's shape"},
    {NULL}};

PyTypeObject py_embedding_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emb._emb.Embedding",
    .tp_basicsize = sizeof(py_table),
    .tp_dealloc = (destructor)table_dealloc,
    .tp_repr = (reprfunc)table_repr,
    .tp_call = (ternaryfunc)table_call,
    .tp_as_buffer = &table_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Embedding(num_embeddings, embedding_dim, padding_idx=None, max_norm=None, "
              "norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None, *, "
              "generator=None): nn.Embedding over emb's table, drawn from `generator` (an "
              "emb.Generator; None: emb's default generator).",
    .tp_methods = embedding_methods,
    .tp_getset = embedding_getset,
    .tp_init = (initproc)embedding_init,
    .tp_new = table_new,
};

PyTypeObject py_bag_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emb._emb.EmbeddingBag",
    .tp_basicsize = sizeof(py_table),
    .tp_dealloc = (destructor)table_dealloc,
    .tp_repr = (reprfunc)table_repr,
    .tp_call = (ternaryfunc)table_call,
    .tp_as_buffer = &table_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "EmbeddingBag(num_embeddings, embedding_dim, max_norm=None, norm_type=2.0, "
              "scale_grad_by_freq=False, mode='mean', sparse=False, _weight=None, "
              "include_last_offset=False, padding_idx=None): nn.EmbeddingBag over emb.",
    .tp_methods = bag_methods,
    .tp_getset = bag_getset,
    .tp_init = (initproc)bag_init,
    .tp_new = table_new,
};

int py_tables_init(PyObject *m) {
    if (PyType_Ready(&py_embedding_type) < 0 || PyType_Ready(&py_bag_type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "Embedding", (PyObject *)&py_embedding_type) < 0 ||
        PyModule_AddObjectRef(m, "EmbeddingBag", (PyObject *)&py_bag_type) < 0)
        return -1;
    return 0;
}
