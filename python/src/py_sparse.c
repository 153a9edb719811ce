/* py_sparse.c: the sparse row gradient (emb_sparse_grad, include/emb/embedding.h) as
 * emb._emb.SparseGrad: torch's sparse .grad of an embedding, accumulated over backward
 * calls, cleared, coalesced and added to a dense array as torch does. A gradient that
 * borrows the caller's arrays (view=True) holds their buffers until it stops borrowing. */
#include "pyemb.h"

#include <stdlib.h>
#include <string.h>

typedef struct py_sparse {
    PyObject_HEAD emb_sparse_grad g;
    int ready;
    py_lock lock;
    py_arg *held; /* the arrays a borrowed gradient may point into */
    int nheld, capheld;
} py_sparse;

static void release_held(py_sparse *self) {
    for (int i = 0; i < self->nheld; i++) py_arg_release(&self->held[i]);
    self->nheld = 0;
}

static PyObject *sparse_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    py_sparse *self = (py_sparse *)type->tp_alloc(type, 0);
    if (self && py_lock_init(&self->lock) < 0) Py_CLEAR(self);
    return (PyObject *)self;
}

static void sparse_dealloc(py_sparse *self) {
    emb_sparse_grad_release(&self->g);
    release_held(self);
    free(self->held);
    py_lock_free(&self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int sparse_init(py_sparse *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"num_rows", "dim", NULL};
    long long rows, dim;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "LL:SparseGrad", names, &rows, &dim)) return -1;
    if (self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "SparseGrad is already initialised");
        return -1;
    }
    emb_status st = emb_sparse_grad_init(&self->g, rows, dim);
    if (st != EMB_OK) {
        py_raise(st);
        return -1;
    }
    self->ready = 1;
    return 0;
}

static int sparse_ready(py_sparse *self) {
    if (self->ready) return 0;
    PyErr_SetString(PyExc_RuntimeError, "the gradient was not initialised (call __init__)");
    return -1;
}

/* Keeps a and b (moved from the caller) while the gradient borrows; 0 or -1. */
static int hold(py_sparse *self, py_arg *a, py_arg *b) {
    if (self->nheld + 2 > self->capheld) {
        int cap = self->capheld ? 2 * self->capheld : 8;
        py_arg *h = realloc(self->held, (size_t)cap * sizeof *h);
        if (!h) {
            PyErr_NoMemory();
            return -1;
        }
        self->held = h;
        self->capheld = cap;
    }
    self->held[self->nheld++] = *a;
    self->held[self->nheld++] = *b;
    memset(a, 0, sizeof *a);
    memset(b, 0, sizeof *b);
    return 0;
}

/* accumulate(table, indices, grad_output, view=False) */
static PyObject *sparse_accumulate(py_sparse *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"table", "indices", "grad_output", "view", NULL};
    PyObject *table, *ind, *go;
    int view = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|p:accumulate", names, &table, &ind, &go, &view))
        return NULL;
    if (sparse_ready(self) < 0) return NULL;
    emb_embedding *e = py_embedding_handle(table);
    if (!e) return NULL;
    py_arg ix, ga;
    if (py_arg_get(ind, "indices", PY_DT_INDEX, 0, &ix) < 0) return NULL;
    if (py_arg_get(go, "grad_output", PY_DT_F32, 0, &ga) < 0) {
        py_arg_release(&ix);
        return NULL;
    }
    emb_status st;
    PY_CALL(&self->lock, st,
            view ? emb_embedding_backward_sparse_view(e, &ix.t, &ga.t, &self->g)
                 : emb_embedding_backward_sparse(e, &ix.t, &ga.t, &self->g));
    PyObject *res = NULL;
    if (st != EMB_OK)
        py_raise(st);
    else if (!self->g.borrowed)
        release_held(self); /* the entries are emb's own again */
    if (st == EMB_OK && (!self->g.borrowed || hold(self, &ix, &ga) == 0)) res = Py_NewRef(Py_None);
    py_arg_release(&ga);
    py_arg_release(&ix);
    return res;
}

static PyObject *sparse_clear(py_sparse *self, PyObject *unused) {
    if (sparse_ready(self) < 0) return NULL;
    emb_status st;
    PY_CALL(&self->lock, st, (emb_sparse_grad_clear(&self->g), EMB_OK));
    (void)st;
    release_held(self);
    Py_RETURN_NONE;
}

static PyObject *sparse_coalesce(py_sparse *self, PyObject *unused) {
    if (sparse_ready(self) < 0) return NULL;
    emb_status st;
    PY_CALL(&self->lock, st, emb_sparse_grad_coalesce(&self->g));
    if (st != EMB_OK) return py_raise(st);
    if (!self->g.borrowed) release_held(self);
    Py_RETURN_NONE;
}

static PyObject *sparse_add_to_dense(py_sparse *self, PyObject *dense) {
    if (sparse_ready(self) < 0) return NULL;
    py_arg d;
    if (py_arg_get(dense, "dense", ~0u, PY_ARG_WRITE, &d) < 0) return NULL;
    emb_status st;
    PY_CALL(&self->lock, st, emb_sparse_grad_add_to_dense(&self->g, &d.t));
    py_arg_release(&d);
    if (st != EMB_OK) return py_raise(st);
    return Py_NewRef(dense);
}

/* Copies of the entries: indices int64 [nnz], values float32 [nnz, dim]. */
static PyObject *sparse_get_indices(py_sparse *self, void *unused) {
    if (sparse_ready(self) < 0) return NULL;
    emb_tensor t;
    int64_t n = self->g.nnz;
    PyObject *a = py_new_array(EMB_INT64, 1, &n, &t);
    if (a && n) memcpy(t.data, self->g.indices, (size_t)n * sizeof(int64_t));
    return a;
}

static PyObject *sparse_get_values(py_sparse *self, void *unused) {
    if (sparse_ready(self) < 0) return NULL;
    emb_tensor t;
    int64_t shape[2] = {self->g.nnz, self->g.dim};
    PyObject *a = py_new_array(EMB_FLOAT32, 2, shape, &t);
    if (a && shape[0] > 0 && shape[1] > 0)
        memcpy(t.data, self->g.values, (size_t)(shape[0] * shape[1]) * sizeof(float));
    return a;
}

static PyObject *sparse_get_int(py_sparse *self, void *which) {
    if (sparse_ready(self) < 0) return NULL;
    switch ((int)(intptr_t)which) {
    case 0:
        return PyLong_FromLongLong(self->g.nnz);
    case 1:
        return PyLong_FromLongLong(self->g.num_rows);
    case 2:
        return PyLong_FromLongLong(self->g.dim);
    case 3:
        return PyBool_FromLong(self->g.coalesced);
    default:
        return PyBool_FromLong(self->g.borrowed);
    }
}

static PyMethodDef sparse_methods[] = {
    {"accumulate", (PyCFunction)(void (*)(void))sparse_accumulate, METH_VARARGS | METH_KEYWORDS,
     "accumulate(table, indices, grad_output, view=False): adds the sparse gradient of an "
     "Embedding's lookup of `indices` (torch's backward into a sparse .grad). view=True "
     "borrows the arrays, as torch's first sparse gradient is a view of them (when the "
     "gradient is empty and the indices are int64 without padding): the gradient then "
     "holds them until another call replaces its entries"},
    {"clear", (PyCFunction)sparse_clear, METH_NOARGS,
     "clear(): forgets every entry (optimizer.zero_grad(set_to_none=False))"},
    {"coalesce", (PyCFunction)sparse_coalesce, METH_NOARGS,
     "coalesce(): sums duplicate rows in torch's order, rows ascending (in place)"},
    {"add_to_dense", (PyCFunction)sparse_add_to_dense, METH_O,
     "add_to_dense(dense) -> dense: dense.add_(grad) on a writable float32 "
     "[num_rows, dim] array, entry by entry as torch adds them"},
    {NULL}};

static PyGetSetDef sparse_getset[] = {
    {"indices", (getter)sparse_get_indices, NULL, "the rows of the entries, int64 [nnz] (a copy)",
     NULL},
    {"values", (getter)sparse_get_values, NULL, "the entries, float32 [nnz, dim] (a copy)", NULL},
    {"nnz", (getter)sparse_get_int, NULL, "the number of entries", (void *)0},
    {"num_rows", (getter)sparse_get_int, NULL, NULL, (void *)1},
    {"dim", (getter)sparse_get_int, NULL, NULL, (void *)2},
    {"coalesced", (getter)sparse_get_int, NULL, "torch's is_coalesced()", (void *)3},
    {"borrowed", (getter)sparse_get_int, NULL,
     "True while the entries are the arrays of a view=True accumulate", (void *)4},
    {NULL}};

PyTypeObject py_sparse_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emb._emb.SparseGrad",
    .tp_basicsize = sizeof(py_sparse),
    .tp_dealloc = (destructor)sparse_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "SparseGrad(num_rows, dim): an empty sparse row gradient of a [num_rows, dim] "
              "weight, torch's sparse COO .grad of an embedding (uncoalesced: duplicates in "
              "order of appearance).",
    .tp_methods = sparse_methods,
    .tp_getset = sparse_getset,
    .tp_init = (initproc)sparse_init,
    .tp_new = sparse_new,
};

/* sparse_coalesce_order(rows) -> perm: the order torch.sort(rows, stable=False) gives */
static PyObject *m_coalesce_order(PyObject *m, PyObject *rows) {
    py_arg ra;
    if (py_arg_get(rows, "rows", ~0u, 0, &ra) < 0) return NULL;
    emb_tensor pt;
    int64_t n = ra.t.ndim == 1 ? ra.t.shape[0] : 0;
    PyObject *perm = py_new_array(EMB_INT64, 1, &n, &pt);
    if (perm) {
        emb_status st;
        PY_NOGIL(st, emb_sparse_grad_coalesce_order(&ra.t, &pt));
        if (st != EMB_OK) Py_SETREF(perm, py_raise(st));
    }
    py_arg_release(&ra);
    return perm;
}

PyMethodDef py_sparse_functions[] = {
    {"sparse_coalesce_order", (PyCFunction)m_coalesce_order, METH_O,
     "sparse_coalesce_order(rows) -> perm int64: the positions of the int64 [n] rows in the "
     "order of torch.sort(rows, stable=False), the order SparseGrad.coalesce sums a row's "
     "duplicates in"},
    {NULL}};

int py_sparse_init(PyObject *module) {
    if (PyType_Ready(&py_sparse_type) < 0) return -1;
    return PyModule_AddObjectRef(module, "SparseGrad", (PyObject *)&py_sparse_type);
}
