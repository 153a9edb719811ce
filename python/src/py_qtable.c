/* py_qtable.c: reduced-precision and quantized tables (include/emb/quant.h) as
 * emb._emb.QTable (lookups, bags, the sparse gradient and the SGD step of f32/f16/bf16
 * tables, the quantization error, files) and emb._emb.QTableWriter (a table file written in
 * batches), plus the row conversions quantize_rows and qtype_row_nbytes. */
#include "py_tables.h"

#include <string.h>

typedef struct py_qtable {
    PyObject_HEAD emb_qtable *q;
    py_lock lock;             /* the training step writes the rows */
    PyObject *words, *counts; /* from a file, or None */
    Py_ssize_t shape[2], strides[2];
} py_qtable;

static void qtable_dealloc(py_qtable *self) {
    emb_qtable_free(self->q);
    Py_CLEAR(self->words);
    Py_CLEAR(self->counts);
    py_lock_free(&self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *qtable_wrap(emb_qtable *q, emb_vocab *v) {
    py_qtable *self = PyObject_New(py_qtable, &py_qtable_type);
    if (!self) {
        emb_qtable_free(q);
        emb_vocab_free(v);
        return NULL;
    }
    self->q = q;
    self->words = self->counts = NULL;
    self->lock.lock = NULL;
    PyObject *wc = py_lock_init(&self->lock) < 0 ? NULL : py_vocab_lists(v);
    emb_vocab_free(v);
    if (!wc) {
        Py_DECREF(self);
        return NULL;
    }
    self->words = Py_NewRef(PyTuple_GET_ITEM(wc, 0));
    self->counts = Py_NewRef(PyTuple_GET_ITEM(wc, 1));
    Py_DECREF(wc);
    return (PyObject *)self;
}

static int qtype_arg(const char *name, emb_qtype *out) {
    emb_status st = emb_qtype_parse(name, out);
    if (st != EMB_OK) py_raise(st);
    return st == EMB_OK ? 0 : -1;
}

static PyObject *qtable_quantize(PyObject *cls, PyObject *args) {
    PyObject *arr;
    const char *qt;
    if (!PyArg_ParseTuple(args, "Os:quantize", &arr, &qt)) return NULL;
    emb_qtype q;
    if (qtype_arg(qt, &q) < 0) return NULL;
    py_arg a;
    if (py_arg_get(arr, "weight", PY_DT_F32, 0, &a) < 0) return NULL;
    emb_qtable *t;
    emb_status st;
    PY_NOGIL(st, emb_qtable_quantize(&a.t, q, &t));
    py_arg_release(&a);
    if (st != EMB_OK) return py_raise(st);
    return qtable_wrap(t, NULL);
}

static PyObject *qtable_open(PyObject *args, int map) {
    PyObject *p;
    if (!PyArg_ParseTuple(args, "O", &p)) return NULL;
    PyObject *path;
    if (py_path(p, &path) < 0) return NULL;
    emb_qtable *t;
    emb_vocab *v = NULL;
    emb_status st;
    PY_NOGIL(st, map ? emb_qtable_map(PyBytes_AS_STRING(path), &t, &v)
                     : emb_qtable_load(PyBytes_AS_STRING(path), &t, &v));
    Py_DECREF(path);
    if (st != EMB_OK) return py_raise(st);
    return qtable_wrap(t, v);
}

static PyObject *qtable_load(PyObject *cls, PyObject *args) {
    return qtable_open(args, 0);
}
static PyObject *qtable_map(PyObject *cls, PyObject *args) {
    return qtable_open(args, 1);
}

static PyObject *qtable_save(py_qtable *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"path", "words", "counts", NULL};
    PyObject *p, *words = Py_None, *counts = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO:save", names, &p, &words, &counts))
        return NULL;
    emb_vocab *v = NULL;
    if (words != Py_None && py_vocab_from_list(words, counts, &v) < 0) return NULL;
    PyObject *path;
    if (py_path(p, &path) < 0) {
        emb_vocab_free(v);
        return NULL;
    }
    emb_status st;
    PY_CALL(&self->lock, st, emb_qtable_save(PyBytes_AS_STRING(path), self->q, v));
    Py_DECREF(path);
    emb_vocab_free(v);
    if (st != EMB_OK) return py_raise(st);
    Py_RETURN_NONE;
}

static PyObject *qtable_forward(py_qtable *self, PyObject *indices) {
    py_arg ix;
    if (py_arg_get(indices, "indices", PY_DT_INDEX, 0, &ix) < 0) return NULL;
    PyObject *out = NULL;
    if (ix.t.ndim >= EMB_MAX_DIMS) {
        PyErr_SetString(PyExc_ValueError, "indices have more than 8 dimensions");
        goto done;
    }
    int64_t shape[EMB_MAX_DIMS];
    memcpy(shape, ix.t.shape, sizeof(int64_t) * (size_t)ix.t.ndim);
    shape[ix.t.ndim] = emb_qtable_dim(self->q);
    emb_tensor o;
    out = py_new_array(EMB_FLOAT32, ix.t.ndim + 1, shape, &o);
    if (!out) goto done;
    emb_status st;
    PY_CALL(&self->lock, st, emb_qtable_forward(self->q, &ix.t, &o));
    if (st != EMB_OK) {
        Py_CLEAR(out);
        py_raise(st);
    }
done:
    py_arg_release(&ix);
    return out;
}

/* The bag options of torch's arguments (mode None: mean). */
static int bag_options(PyObject *mode, PyObject *pad, int ilo, PyObject *max_norm,
                       emb_bag_options *o) {
    *o = emb_bag_options_default();
    if (mode && mode != Py_None && py_bag_mode(mode, &o->mode) < 0) return -1;
    if (py_padding_idx(pad, &o->padding_idx) < 0 || py_max_norm(max_norm, &o->max_norm) < 0)
        return -1;
    o->include_last_offset = ilo;
    return 0;
}

static PyObject *qtable_bag(py_qtable *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"input",
                            "offsets",
                            "per_sample_weights",
                            "mode",
                            "padding_idx",
                            "include_last_offset",
                            "return_max_indices",
                            "max_norm",
                            NULL};
    PyObject *input, *offsets = Py_None, *psw = Py_None, *pad = Py_None, *mode = NULL,
                     *mn = Py_None;
    int ilo = 0, want_mi = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOOOppO:bag", names, &input, &offsets, &psw,
                                     &mode, &pad, &ilo, &want_mi, &mn))
        return NULL;
    emb_bag_options o;
    py_bag_args b;
    if (bag_options(mode, pad, ilo, mn, &o) < 0 || py_bag_args_get(input, offsets, psw, &b) < 0)
        return NULL;
    const emb_tensor *in = &b.input.t, *of = OPT_T(b.offsets);
    int64_t nb = in->ndim == 2           ? in->shape[0]
                 : (of && of->ndim == 1) ? of->shape[0] - (ilo && of->shape[0] ? 1 : 0)
                                         : 0;
    int64_t shape[2] = {nb, emb_qtable_dim(self->q)};
    emb_tensor ot, mt;
    PyObject *mi = NULL, *out = py_new_array(EMB_FLOAT32, 2, shape, &ot);
    if (out && o.mode == EMB_BAG_MAX && !(mi = py_new_array(EMB_INT64, 2, shape, &mt)))
        Py_CLEAR(out);
    if (out) {
        emb_status st;
        PY_CALL(&self->lock, st,
                emb_qtable_bag_forward(self->q, in, of, OPT_T(b.psw), &o, &ot, mi ? &mt : NULL));
        if (st != EMB_OK) {
            Py_CLEAR(out);
            py_raise(st);
        } else if (want_mi) {
            Py_SETREF(out, PyTuple_Pack(2, out, mi ? mi : Py_None));
        }
    }
    Py_XDECREF(mi);
    py_bag_args_release(&b);
    return out;
}

static PyObject *qtable_dequantize(py_qtable *self, PyObject *unused) {
    int64_t shape[2] = {emb_qtable_num_rows(self->q), emb_qtable_dim(self->q)};
    emb_tensor o;
    PyObject *out = py_new_array(EMB_FLOAT32, 2, shape, &o);
    if (!out) return NULL;
    emb_status st;
    PY_CALL(&self->lock, st, emb_qtable_dequantize(self->q, 0, shape[0], o.data));
    if (st != EMB_OK) {
        Py_DECREF(out);
        return py_raise(st);
    }
    return out;
}

static PyObject *qerror_dict(const emb_qerror *e) {
    return Py_BuildValue("{s:d,s:d,s:d,s:L,s:L}", "max_abs", e->max_abs, "mean_abs", e->mean_abs,
                         "mean_cosine", e->mean_cosine, "rows", (long long)e->rows, "elements",
                         (long long)e->elements);
}

static PyObject *qtable_error(py_qtable *self, PyObject *weight) {
    py_arg w;
    if (py_arg_get(weight, "weight", PY_DT_F32, 0, &w) < 0) return NULL;
    emb_qerror e;
    emb_status st;
    PY_CALL(&self->lock, st, emb_qtable_error(self->q, &w.t, &e));
    py_arg_release(&w);
    return st == EMB_OK ? qerror_dict(&e) : py_raise(st);
}

/* ---- training (f32, f16, bf16 tables) ---- */

static PyObject *qtable_backward_sparse(py_qtable *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"input",
                            "grad_output",
                            "offsets",
                            "per_sample_weights",
                            "mode",
                            "padding_idx",
                            "include_last_offset",
                            "max_norm",
                            NULL};
    PyObject *input, *go, *offsets = Py_None, *psw = Py_None, *mode = NULL, *pad = Py_None,
                          *mn = Py_None;
    int ilo = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOOOpO:backward_sparse", names, &input, &go,
                                     &offsets, &psw, &mode, &pad, &ilo, &mn))
        return NULL;
    emb_bag_options o;
    py_bag_args b;
    py_arg g;
    if (bag_options(mode, pad, ilo, mn, &o) < 0 || py_bag_args_get(input, offsets, psw, &b) < 0)
        return NULL;
    if (py_arg_get(go, "grad_output", PY_DT_F32, 0, &g) < 0) {
        py_bag_args_release(&b);
        return NULL;
    }
    emb_sparse_grad sg;
    emb_status st =
        emb_sparse_grad_init(&sg, emb_qtable_num_rows(self->q), emb_qtable_dim(self->q));
    if (st == EMB_OK)
        PY_CALL(&self->lock, st,
                emb_qtable_bag_backward_sparse(self->q, &b.input.t, OPT_T(b.offsets), OPT_T(b.psw),
                                               &o, &g.t, &sg));
    PyObject *res = st == EMB_OK ? py_sparse_to_tuple(&sg) : py_raise(st);
    emb_sparse_grad_release(&sg);
    py_arg_release(&g);
    py_bag_args_release(&b);
    return res;
}

static int rounding_arg(const char *s, emb_qround *out) {
    if (!strcmp(s, "nearest"))
        *out = EMB_QROUND_NEAREST;
    else if (!strcmp(s, "stochastic"))
        *out = EMB_QROUND_STOCHASTIC;
    else {
        PyErr_Format(PyExc_ValueError, "unknown rounding '%s' (nearest or stochastic)", s);
        return -1;
    }
    return 0;
}

/* A step: the table's lock, then the generator's, with the GIL released. */
#define QSTEP(self, glock, st, expr)                                                               \
    do {                                                                                           \
        Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock((self)->lock.lock, WAIT_LOCK);                \
        PyThread_acquire_lock((glock)->lock, WAIT_LOCK);                                           \
        (st) = (expr);                                                                             \
        PyThread_release_lock((glock)->lock);                                                      \
        PyThread_release_lock((self)->lock.lock);                                                  \
        Py_END_ALLOW_THREADS                                                                       \
    } while (0)

static PyObject *qtable_sgd_step(py_qtable *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"rows", "values", "lr", "rounding", "generator", NULL};
    PyObject *rows, *values, *genobj = Py_None;
    float lr;
    const char *rname = "nearest";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOf|sO:sgd_step", names, &rows, &values, &lr,
                                     &rname, &genobj))
        return NULL;
    emb_qround rounding;
    emb_generator *gen;
    py_lock *glock;
    if (rounding_arg(rname, &rounding) < 0 || py_generator_arg(genobj, &gen, &glock) < 0)
        return NULL;
    py_sparse_arg sp;
    if (py_sparse_arg_get(rows, values, emb_qtable_num_rows(self->q), emb_qtable_dim(self->q),
                          &sp) < 0)
        return NULL;
    emb_status st;
    QSTEP(self, glock, st, emb_qtable_sgd_step(self->q, &sp.g, lr, rounding, gen));
    PyObject *res = st == EMB_OK ? Py_NewRef(Py_None) : py_raise(st);
    py_sparse_arg_release(&sp);
    return res;
}

static PyObject *qtable_sgd_step_bag(py_qtable *self, PyObject *args, PyObject *kw) {
    static char *names[] = {
        "input",       "grad_output",         "lr",       "offsets",  "per_sample_weights", "mode",
        "padding_idx", "include_last_offset", "max_norm", "rounding", "generator",          NULL};
    PyObject *input, *go, *offsets = Py_None, *psw = Py_None, *mode = NULL, *pad = Py_None,
                          *mn = Py_None, *genobj = Py_None;
    float lr;
    int ilo = 0;
    const char *rname = "nearest";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOf|OOOOpOsO:sgd_step_bag", names, &input, &go, &lr,
                                     &offsets, &psw, &mode, &pad, &ilo, &mn, &rname, &genobj))
        return NULL;
    emb_bag_options o;
    emb_qround rounding;
    emb_generator *gen;
    py_lock *glock;
    py_bag_args b;
    py_arg g;
    if (bag_options(mode, pad, ilo, mn, &o) < 0 || rounding_arg(rname, &rounding) < 0 ||
        py_generator_arg(genobj, &gen, &glock) < 0 || py_bag_args_get(input, offsets, psw, &b) < 0)
        return NULL;
    if (py_arg_get(go, "grad_output", PY_DT_F32, 0, &g) < 0) {
        py_bag_args_release(&b);
        return NULL;
    }
    emb_status st;
    QSTEP(self, glock, st,
          emb_qtable_sgd_step_bag(self->q, &b.input.t, OPT_T(b.offsets), OPT_T(b.psw), &o, &g.t, lr,
                                  rounding, gen));
    py_arg_release(&g);
    py_bag_args_release(&b);
    if (st != EMB_OK) return py_raise(st);
    Py_RETURN_NONE;
}

/* the stored rows as read-only uint8 [rows, row_bytes] */
static int qtable_getbuffer(py_qtable *self, Py_buffer *view, int flags) {
    if (flags & PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError, "a QTable is read-only");
        return -1;
    }
    return py_fill_buffer_2d(view, (PyObject *)self, (void *)emb_qtable_data(self->q),
                             (Py_ssize_t)emb_qtable_num_rows(self->q),
                             (Py_ssize_t)emb_qtable_row_nbytes(self->q), 1, "B", 1, self->shape,
                             self->strides, flags);
}

static PyBufferProcs qtable_buffer = {(getbufferproc)qtable_getbuffer, NULL};

static PyObject *qtable_get_qtype(py_qtable *self, void *c) {
    return PyUnicode_FromString(emb_qtype_name(emb_qtable_qtype(self->q)));
}
static PyObject *qtable_get_num_rows(py_qtable *self, void *c) {
    return PyLong_FromLongLong(emb_qtable_num_rows(self->q));
}
static PyObject *qtable_get_dim(py_qtable *self, void *c) {
    return PyLong_FromLongLong(emb_qtable_dim(self->q));
}
static PyObject *qtable_get_row_nbytes(py_qtable *self, void *c) {
    return PyLong_FromLongLong(emb_qtable_row_nbytes(self->q));
}
static PyObject *qtable_get_read_only(py_qtable *self, void *c) {
    return PyBool_FromLong(emb_qtable_is_read_only(self->q));
}
static PyObject *qtable_get_words(py_qtable *self, void *c) {
    return Py_NewRef(self->words);
}
static PyObject *qtable_get_counts(py_qtable *self, void *c) {
    return Py_NewRef(self->counts);
}

#define KW_METHOD(name, fn, doc)                                                                   \
    { name, (PyCFunction)(void (*)(void))fn, METH_VARARGS | METH_KEYWORDS, doc }

static PyMethodDef qtable_methods[] = {
    {"quantize", (PyCFunction)qtable_quantize, METH_VARARGS | METH_CLASS,
     "QTable.quantize(weight, qtype): qtype 'f32', 'f16', 'bf16', 'int8' or 'int4'"},
    {"load", (PyCFunction)qtable_load, METH_VARARGS | METH_CLASS, "QTable.load(path)"},
    {"map", (PyCFunction)qtable_map, METH_VARARGS | METH_CLASS,
     "QTable.map(path): memory-mapped, read on first touch"},
    KW_METHOD("save", qtable_save, "save(path, words=None, counts=None)"),
    {"forward", (PyCFunction)qtable_forward, METH_O, "forward(indices) -> float32"},
    KW_METHOD("bag", qtable_bag,
              "bag(input, offsets=None, per_sample_weights=None, mode='mean', padding_idx=None, "
              "include_last_offset=False, return_max_indices=False, max_norm=None) -> float32 "
              "[B, dim] (and max_indices in mode max, else None)"),
    {"dequantize", (PyCFunction)qtable_dequantize, METH_NOARGS, "dequantize() -> float32 [V, D]"},
    {"error", (PyCFunction)qtable_error, METH_O,
     "error(weight) -> {max_abs, mean_abs, mean_cosine, rows, elements}: the quantization "
     "error against the float32 table `weight`"},
    KW_METHOD("backward_sparse", qtable_backward_sparse,
              "backward_sparse(input, grad_output, offsets=None, per_sample_weights=None, "
              "mode='mean', padding_idx=None, include_last_offset=False) -> (rows, values): "
              "the sparse gradient of bag() (modes sum and mean)"),
    KW_METHOD("sgd_step", qtable_sgd_step,
              "sgd_step(rows, values, lr, rounding='nearest', generator=None): torch's sparse "
              "SGD step on the rows (f32, f16, bf16 tables); rounding 'nearest' or "
              "'stochastic'"),
    KW_METHOD("sgd_step_bag", qtable_sgd_step_bag,
              "sgd_step_bag(input, grad_output, lr, offsets=None, per_sample_weights=None, "
              "mode='mean', padding_idx=None, include_last_offset=False, max_norm=None, "
              "rounding='nearest', generator=None): backward_sparse and sgd_step in one"),
    {NULL}};

static PyGetSetDef qtable_getset[] = {
    {"qtype", (getter)qtable_get_qtype, NULL, NULL, NULL},
    {"num_rows", (getter)qtable_get_num_rows, NULL, NULL, NULL},
    {"dim", (getter)qtable_get_dim, NULL, NULL, NULL},
    {"row_nbytes", (getter)qtable_get_row_nbytes, NULL, "bytes per stored row", NULL},
    {"read_only", (getter)qtable_get_read_only, NULL, "True for a mapped file", NULL},
    {"words", (getter)qtable_get_words, NULL, "the file's words, or None", NULL},
    {"counts", (getter)qtable_get_counts, NULL, NULL, NULL},
    {NULL}};

emb_qtable *py_qtable_handle(PyObject *obj) {
    return PyObject_TypeCheck(obj, &py_qtable_type) ? ((py_qtable *)obj)->q : NULL;
}

PyTypeObject py_qtable_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emb._emb.QTable",
    .tp_basicsize = sizeof(py_qtable),
    .tp_dealloc = (destructor)qtable_dealloc,
    .tp_as_buffer = &qtable_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A table stored as f32, f16, bf16, int8 or int4 rows (QTable.quantize, "
              "QTable.load, QTable.map); f32/f16/bf16 tables train with sgd_step.",
    .tp_methods = qtable_methods,
    .tp_getset = qtable_getset,
};

/* ---------------------------------------------------------------------------------------
 * QTableWriter
 * ------------------------------------------------------------------------------------- */

typedef struct py_qwriter {
    PyObject_HEAD emb_qtable_writer *w;
    py_lock lock;
    int64_t dim;
} py_qwriter;

static PyObject *qwriter_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    py_qwriter *self = (py_qwriter *)type->tp_alloc(type, 0);
    if (self && py_lock_init(&self->lock) < 0) Py_CLEAR(self);
    return (PyObject *)self;
}

static void qwriter_dealloc(py_qwriter *self) {
    emb_qtable_writer_free(self->w);
    py_lock_free(&self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int qwriter_init(py_qwriter *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"path", "qtype", "rows", "dim", "words", "counts", NULL};
    PyObject *p, *words = Py_None, *counts = Py_None;
    const char *qt;
    long long rows, dim;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OsLL|OO:QTableWriter", names, &p, &qt, &rows, &dim,
                                     &words, &counts))
        return -1;
    if (self->w) {
        PyErr_SetString(PyExc_RuntimeError, "QTableWriter is already initialised");
        return -1;
    }
    emb_qtype q;
    emb_vocab *v = NULL;
    PyObject *path;
    if (qtype_arg(qt, &q) < 0) return -1;
    if (words != Py_None && py_vocab_from_list(words, counts, &v) < 0) return -1;
    if (py_path(p, &path) < 0) {
        emb_vocab_free(v);
        return -1;
    }
    emb_status st;
    PY_NOGIL(st, emb_qtable_writer_open(PyBytes_AS_STRING(path), q, rows, dim, v, &self->w));
    Py_DECREF(path);
    emb_vocab_free(v);
    if (st != EMB_OK) {
        py_raise(st);
        return -1;
    }
    self->dim = dim;
    return 0;
}

static int qwriter_open(py_qwriter *self) {
    if (!self->w) PyErr_SetString(PyExc_ValueError, "the QTableWriter is closed");
    return self->w ? 0 : -1;
}

static PyObject *qwriter_append(py_qwriter *self, PyObject *rows) {
    if (qwriter_open(self) < 0) return NULL;
    py_arg r;
    if (py_arg_get(rows, "rows", PY_DT_F32, 0, &r) < 0) return NULL;
    if (r.t.ndim != 2 || r.t.shape[1] != self->dim) {
        PyObject *shape = py_shape_tuple(r.t.ndim, r.t.shape);
        if (shape)
            PyErr_Format(PyExc_ValueError,
                         "rows must be float32 [n, %lld] (the writer's dim), got shape %R",
                         (long long)self->dim, shape);
        Py_XDECREF(shape);
        py_arg_release(&r);
        return NULL;
    }
    emb_status st;
    PY_CALL(&self->lock, st, emb_qtable_writer_append(self->w, r.t.data, r.t.shape[0]));
    py_arg_release(&r);
    if (st != EMB_OK) return py_raise(st);
    Py_RETURN_NONE;
}

static PyObject *qwriter_commit(py_qwriter *self, PyObject *unused) {
    if (qwriter_open(self) < 0) return NULL;
    emb_qerror e;
    emb_status st;
    PY_CALL(&self->lock, st, emb_qtable_writer_commit(self->w, &e));
    return st == EMB_OK ? qerror_dict(&e) : py_raise(st);
}

static PyObject *qwriter_close(py_qwriter *self, PyObject *unused) {
    emb_qtable_writer *w = self->w;
    self->w = NULL;
    Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(self->lock.lock, WAIT_LOCK);
    emb_qtable_writer_free(w);
    PyThread_release_lock(self->lock.lock);
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyObject *qwriter_enter(PyObject *self, PyObject *unused) {
    return Py_NewRef(self);
}

static PyObject *qwriter_exit(py_qwriter *self, PyObject *args) {
    return qwriter_close(self, NULL);
}

static PyMethodDef qwriter_methods[] = {
    {"append", (PyCFunction)qwriter_append, METH_O,
     "append(rows): the next float32 rows [n, dim]; a refused row fails the writer"},
    {"commit", (PyCFunction)qwriter_commit, METH_NOARGS,
     "commit() -> {max_abs, mean_abs, mean_cosine, rows, elements}: the file moves into place"},
    {"close", (PyCFunction)qwriter_close, METH_NOARGS,
     "close(): frees the writer; before commit() this abandons the file"},
    {"__enter__", (PyCFunction)qwriter_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)qwriter_exit, METH_VARARGS, NULL},
    {NULL}};

PyTypeObject py_qwriter_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emb._emb.QTableWriter",
    .tp_basicsize = sizeof(py_qwriter),
    .tp_dealloc = (destructor)qwriter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "QTableWriter(path, qtype, rows, dim, words=None, counts=None): writes a table "
              "file in batches of float32 rows (append, then commit); nothing appears at "
              "`path` unless commit() succeeds.",
    .tp_methods = qwriter_methods,
    .tp_init = (initproc)qwriter_init,
    .tp_new = qwriter_new,
};

/* ---------------------------------------------------------------------------------------
 * Row conversions
 * ------------------------------------------------------------------------------------- */

static PyObject *m_qtype_row_nbytes(PyObject *m, PyObject *args) {
    const char *qt;
    long long dim;
    if (!PyArg_ParseTuple(args, "sL:qtype_row_nbytes", &qt, &dim)) return NULL;
    emb_qtype q;
    int64_t n;
    if (qtype_arg(qt, &q) < 0) return NULL;
    emb_status st = emb_qtype_row_nbytes(q, dim, &n);
    return st == EMB_OK ? PyLong_FromLongLong(n) : py_raise(st);
}

static PyObject *m_quantize_rows(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"rows", "qtype", "out", NULL};
    PyObject *rows, *outobj = Py_None;
    const char *qt;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Os|O:quantize_rows", names, &rows, &qt, &outobj))
        return NULL;
    emb_qtype q;
    py_arg r, o = {0};
    if (qtype_arg(qt, &q) < 0 || py_arg_get(rows, "rows", PY_DT_F32, 0, &r) < 0) return NULL;
    PyObject *res = NULL;
    int64_t rb;
    emb_status st = EMB_OK;
    if (r.t.ndim != 2) {
        PyErr_Format(PyExc_ValueError, "rows must be float32 [n, dim], got %d-D", r.t.ndim);
        goto done;
    }
    if ((st = emb_qtype_row_nbytes(q, r.t.shape[1], &rb)) != EMB_OK) goto done;
    if (outobj == Py_None) {
        int64_t shape[2] = {r.t.shape[0], rb};
        if (!(res = py_new_array(EMB_UINT8, 2, shape, &o.t))) goto done;
        o.view.len = (Py_ssize_t)(shape[0] * rb);
    } else {
        if (py_arg_get(outobj, "out", PY_DT(EMB_UINT8), PY_ARG_WRITE, &o) < 0) goto done;
        res = Py_NewRef(outobj);
    }
    PY_NOGIL(st, emb_quantize_rows(q, r.t.data, r.t.shape[0], r.t.shape[1], o.t.data,
                                   (size_t)o.view.len));
    if (st != EMB_OK) Py_CLEAR(res);
done:
    if (st != EMB_OK) py_raise(st);
    py_arg_release(&o);
    py_arg_release(&r);
    return res;
}

static PyMethodDef qtable_functions[] = {
    {"qtype_row_nbytes", (PyCFunction)m_qtype_row_nbytes, METH_VARARGS,
     "qtype_row_nbytes(qtype, dim) -> bytes of one stored row"},
    KW_METHOD("quantize_rows", m_quantize_rows,
              "quantize_rows(rows, qtype, out=None) -> uint8 [n, row_nbytes]: float32 rows "
              "[n, dim] converted; a refused row (NaN, infinite, out of range) raises and "
              "writes nothing to `out`"),
    {NULL}};

int py_qtable_init(PyObject *m) {
    if (PyType_Ready(&py_qtable_type) < 0 || PyType_Ready(&py_qwriter_type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "QTable", (PyObject *)&py_qtable_type) < 0 ||
        PyModule_AddObjectRef(m, "QTableWriter", (PyObject *)&py_qwriter_type) < 0)
        return -1;
    for (PyMethodDef *d = qtable_functions; d->ml_name; d++) {
        PyObject *f = PyCFunction_NewEx(d, NULL, NULL);
        if (!f || PyModule_AddObject(m, d->ml_name, f) < 0) {
            Py_XDECREF(f);
            return -1;
        }
    }
    return 0;
}
