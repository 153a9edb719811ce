/* py_knn.c: emb._emb.Knn, the k-NN index over a float32 table, an Embedding or a QTable. */
#include "pyemb.h"

/* ---------------------------------------------------------------------------------------
 * Knn
 * ------------------------------------------------------------------------------------- */

typedef struct py_knn {
    PyObject_HEAD emb_knn *index;
    py_arg table;    /* a float32 table it reads (kept: the index borrows it) */
    PyObject *owner; /* or the QTable / Embedding it reads */
} py_knn;

static void knn_dealloc(py_knn *self) {
    emb_knn_free(self->index);
    py_arg_release(&self->table);
    Py_CLEAR(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int knn_init(py_knn *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"table", "num_rows", NULL};
    PyObject *t;
    long long nrows = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|L:Knn", names, &t, &nrows)) return -1;
    if (self->index) {
        PyErr_SetString(PyExc_RuntimeError, "Knn is already initialised");
        return -1;
    }
    emb_status st;
    if (py_qtable_handle(t)) {
        PY_NOGIL(st, emb_knn_create_from_qtable(py_qtable_handle(t), nrows, &self->index));
        if (st == EMB_OK) self->owner = Py_NewRef(t);
    } else {
        /* an array or an Embedding (through its buffer): kept, not copied */
        if (py_arg_get(t, "table", PY_DT_F32, PY_ARG_KEEP, &self->table) < 0) return -1;
        PY_NOGIL(st, emb_knn_create(&self->table.t, nrows, &self->index));
        if (st != EMB_OK) py_arg_release(&self->table);
    }
    if (st != EMB_OK) {
        py_raise(st);
        return -1;
    }
    return 0;
}

static int knn_ready(py_knn *self) {
    if (!self->index) {
        PyErr_SetString(PyExc_RuntimeError, "the index was not initialised");
        return -1;
    }
    return 0;
}

/* The result arrays of a search, ids int64 [nq, k] and scores float32 [nq, k]; -1 with an
 * exception set (ValueError for k < 1). */
static int knn_results(int64_t nq, long long k, PyObject **ids, PyObject **sc, emb_tensor *it,
                       emb_tensor *st) {
    if (k < 1) {
        PyErr_SetString(PyExc_ValueError, "k must be at least 1");
        return -1;
    }
    int64_t shape[2] = {nq, k};
    *ids = py_new_array(EMB_INT64, 2, shape, it);
    *sc = *ids ? py_new_array(EMB_FLOAT32, 2, shape, st) : NULL;
    return *sc ? 0 : -1;
}

/* search(queries [Q, D], k, exclude=None [Q, n]) -> (ids int64 [Q, k], scores float32 [Q, k]) */
static PyObject *knn_search(py_knn *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"queries", "k", "exclude", NULL};
    PyObject *q, *ex = Py_None;
    long long k;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OL|O:search", names, &q, &k, &ex)) return NULL;
    if (knn_ready(self) < 0) return NULL;
    py_arg qa = {0}, ea = {0};
    PyObject *ids = NULL, *sc = NULL, *res = NULL;
    if (py_arg_get(q, "queries", PY_DT_F32, 0, &qa) < 0 ||
        py_arg_get(ex, "exclude", PY_DT(EMB_INT64), PY_ARG_OPTIONAL, &ea) < 0)
        goto done;
    int64_t nq = qa.t.ndim == 2 ? qa.t.shape[0] : 0;
    int64_t nex = 0;
    if (ea.present) {
        if (ea.t.ndim != 2 || ea.t.shape[0] != nq) {
            PyErr_SetString(PyExc_ValueError, "exclude must be int64 [Q, n] (one row per query)");
            goto done;
        }
        nex = ea.t.shape[1];
    }
    emb_tensor it, st_;
    if (knn_results(nq, k, &ids, &sc, &it, &st_) < 0) goto done;
    emb_status st;
    PY_NOGIL(st, emb_knn_search(self->index, &qa.t, k, ea.present ? ea.t.data : NULL, nex, it.data,
                                st_.data));
    res = st != EMB_OK ? py_raise(st) : PyTuple_Pack(2, ids, sc);
done:
    Py_XDECREF(ids);
    Py_XDECREF(sc);
    py_arg_release(&ea);
    py_arg_release(&qa);
    return res;
}

/* analogy(abc int64 [Q, 3], k) -> (ids, scores) */
static PyObject *knn_analogy(py_knn *self, PyObject *args) {
    PyObject *abc;
    long long k;
    if (!PyArg_ParseTuple(args, "OL:analogy", &abc, &k)) return NULL;
    if (knn_ready(self) < 0) return NULL;
    py_arg a;
    if (py_arg_get(abc, "abc", PY_DT(EMB_INT64), 0, &a) < 0) return NULL;
    PyObject *ids = NULL, *sc = NULL, *res = NULL;
    if (a.t.ndim != 2 || a.t.shape[1] != 3) {
        PyErr_SetString(PyExc_ValueError, "abc must be int64 [Q, 3]");
        goto done;
    }
    emb_tensor it, stt;
    if (knn_results(a.t.shape[0], k, &ids, &sc, &it, &stt) < 0) goto done;
    emb_status st;
    PY_NOGIL(st, emb_knn_analogy(self->index, a.t.data, a.t.shape[0], k, it.data, stt.data));
    res = st != EMB_OK ? py_raise(st) : PyTuple_Pack(2, ids, sc);
done:
    Py_XDECREF(ids);
    Py_XDECREF(sc);
    py_arg_release(&a);
    return res;
}

static PyObject *knn_get_num_rows(py_knn *self, void *c) {
    return PyLong_FromLongLong(emb_knn_num_rows(self->index));
}

static PyMethodDef knn_methods[] = {
    {"search", (PyCFunction)(void (*)(void))knn_search, METH_VARARGS | METH_KEYWORDS,
     "search(queries, k, exclude=None) -> (ids [Q, k], cosine similarities [Q, k])"},
    {"analogy", (PyCFunction)knn_analogy, METH_VARARGS,
     "analogy(abc [Q, 3], k) -> (ids, scores): b - a + c, excluding a, b, c"},
    {NULL}};

static PyGetSetDef knn_getset[] = {{"num_rows", (getter)knn_get_num_rows, NULL, NULL, NULL},
                                   {NULL}};

PyTypeObject py_knn_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emb._emb.Knn",
    .tp_basicsize = sizeof(py_knn),
    .tp_dealloc = (destructor)knn_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Knn(table, num_rows=0): a cosine-similarity index over the first num_rows rows "
              "(0: all) of a float32 table, an Embedding or a QTable, which it keeps alive and "
              "reads in place: rows changed after the index was built give stale norms.",
    .tp_methods = knn_methods,
    .tp_getset = knn_getset,
    .tp_init = (initproc)knn_init,
    .tp_new = PyType_GenericNew,
};
