/* py_linear.c: nn.Linear and F.one_hot (include/emb/linear.h) as emb._emb.Linear and
 * emb._emb.one_hot. A layer's weight and bias are numpy views of its own memory: a small
 * exporter object (_Parameter) holds the layer and hands out the buffer. */
#include "pyemb.h"

#include <string.h>

typedef struct py_linear {
    PyObject_HEAD emb_linear *lin;
    py_lock lock;
} py_linear;

/* ---- _Parameter: the buffer of one parameter of a layer ------------------------------- */

typedef struct py_param {
    PyObject_HEAD PyObject *owner; /* the layer, kept alive by every view */
    float *data;
    Py_ssize_t rows, cols;
    Py_ssize_t shape[2], strides[2];
} py_param;

static void param_dealloc(py_param *self) {
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int param_getbuffer(py_param *self, Py_buffer *view, int flags) {
    return py_fill_buffer_2d(view, (PyObject *)self, self->data, self->rows, self->cols,
                             sizeof(float), "f", 0, self->shape, self->strides, flags);
}

static PyBufferProcs param_buffer = {(getbufferproc)param_getbuffer, NULL};

static PyTypeObject py_param_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emb._emb._Parameter",
    .tp_basicsize = sizeof(py_param),
    .tp_dealloc = (destructor)param_dealloc,
    .tp_as_buffer = &param_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The memory of one parameter of a layer (numpy.asarray views it).",
};

/* A numpy view of a parameter: [rows, cols], or [cols] when flat. */
static PyObject *param_array(PyObject *owner, const emb_tensor *v, int flat) {
    py_param *p = PyObject_New(py_param, &py_param_type);
    if (!p) return NULL;
    p->owner = Py_NewRef(owner);
    p->data = v->data;
    p->rows = v->ndim == 2 ? (Py_ssize_t)v->shape[0] : 1;
    Py_ssize_t cols = p->cols = (Py_ssize_t)v->shape[v->ndim - 1];
    PyObject *arr = py_asarray((PyObject *)p);
    Py_DECREF(p);
    if (!arr || !flat) return arr;
    PyObject *res = PyObject_CallMethod(arr, "reshape", "(n)", cols);
    Py_DECREF(arr);
    return res;
}

/* ---- Linear --------------------------------------------------------------------------- */

static PyObject *linear_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    py_linear *self = (py_linear *)type->tp_alloc(type, 0);
    if (self && py_lock_init(&self->lock) < 0) Py_CLEAR(self);
    return (PyObject *)self;
}

static void linear_dealloc(py_linear *self) {
    emb_linear_free(self->lin);
    py_lock_free(&self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int linear_init(py_linear *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"in_features", "out_features", "bias", "generator", NULL};
    long long in = 0, out = 0;
    int bias = 1;
    PyObject *genobj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "LL|p$O:Linear", names, &in, &out, &bias, &genobj))
        return -1;
    if (self->lin) {
        PyErr_SetString(PyExc_RuntimeError, "Linear is already initialised");
        return -1;
    }
    emb_generator *gen = NULL;
    py_lock *lock = &py_generator_lock;
    if (genobj != Py_None && py_generator_handle(genobj, &gen, &lock) < 0) return -1;
    emb_status st;
    PY_CALL(lock, st, emb_linear_create(in, out, bias, gen, &self->lin));
    if (st != EMB_OK) {
        py_raise(st);
        return -1;
    }
    return 0;
}

static int linear_ready(py_linear *self) {
    if (self->lin) return 0;
    PyErr_SetString(PyExc_RuntimeError, "the layer was not initialised (call __init__)");
    return -1;
}

static PyObject *linear_get_weight(py_linear *self, void *unused) {
    if (linear_ready(self) < 0) return NULL;
    emb_tensor v;
    emb_status st = emb_linear_weight(self->lin, &v);
    return st != EMB_OK ? py_raise(st) : param_array((PyObject *)self, &v, 0);
}

static PyObject *linear_get_bias(py_linear *self, void *unused) {
    if (linear_ready(self) < 0) return NULL;
    if (!emb_linear_has_bias(self->lin)) Py_RETURN_NONE; /* torch: bias is None */
    emb_tensor v;
    emb_status st = emb_linear_bias(self->lin, &v);
    return st != EMB_OK ? py_raise(st) : param_array((PyObject *)self, &v, 1);
}

static PyObject *linear_get_in(py_linear *self, void *unused) {
    if (linear_ready(self) < 0) return NULL;
    return PyLong_FromLongLong(emb_linear_in_features(self->lin));
}

static PyObject *linear_get_out(py_linear *self, void *unused) {
    if (linear_ready(self) < 0) return NULL;
    return PyLong_FromLongLong(emb_linear_out_features(self->lin));
}

/* The shape of x with its last dimension replaced by n ([n] for a 0-d x, which emb
 * refuses). */
static int replace_last(const emb_tensor *x, int64_t n, int64_t *shape) {
    int nd = x->ndim >= 1 ? x->ndim : 1;
    for (int i = 0; i + 1 < nd; i++) shape[i] = x->shape[i];
    shape[nd - 1] = n;
    return nd;
}

/* An output argument: an array emb writes (returned as given, a new reference in *res), or
 * a new array of `shape` (zeroed when zero is set); *t describes it. */
static int output_arg(PyObject *obj, const char *what, int ndim, const int64_t *shape, int zero,
                      py_arg *a, PyObject **res) {
    memset(a, 0, sizeof *a);
    if (obj != Py_None && obj != Py_True) {
        if (py_arg_get(obj, what, ~0u, PY_ARG_WRITE, a) < 0) return -1;
        *res = Py_NewRef(obj);
        return 0;
    }
    *res = py_new_array(EMB_FLOAT32, ndim, shape, &a->t);
    if (!*res) return -1;
    a->present = 1;
    if (zero) memset(a->t.data, 0, (size_t)emb_tensor_numel(&a->t) * sizeof(float));
    return 0;
}

static PyObject *linear_forward(py_linear *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"x", "out", NULL};
    PyObject *x, *out = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$O:forward", names, &x, &out)) return NULL;
    if (linear_ready(self) < 0) return NULL;
    py_arg xa, ya;
    if (py_arg_get(x, "x", ~0u, 0, &xa) < 0) return NULL;
    int64_t shape[EMB_MAX_DIMS];
    int nd = replace_last(&xa.t, emb_linear_out_features(self->lin), shape);
    PyObject *res = NULL;
    if (output_arg(out, "out", nd, shape, 0, &ya, &res) == 0) {
        emb_status st;
        PY_CALL(&self->lock, st, emb_linear_forward(self->lin, &xa.t, &ya.t));
        if (st != EMB_OK) Py_SETREF(res, py_raise(st));
    }
    py_arg_release(&ya);
    py_arg_release(&xa);
    return res;
}

/* One gradient of backward: False/None -> not computed (NULL), True -> a new array, an
 * array -> written in place. */
static int grad_arg(PyObject *obj, const char *what, int ndim, const int64_t *shape, int zero,
                    py_arg *a, PyObject **res, emb_tensor **t) {
    *t = NULL;
    *res = Py_NewRef(Py_None);
    memset(a, 0, sizeof *a);
    if (obj == Py_None || obj == Py_False) return 0;
    Py_DECREF(*res);
    if (output_arg(obj, what, ndim, shape, zero, a, res) < 0) {
        *res = NULL;
        return -1;
    }
    *t = &a->t;
    return 0;
}

/* backward(x, grad_y, grad_x=True, grad_weight=True, grad_bias=True) */
static PyObject *linear_backward(py_linear *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"x", "grad_y", "grad_x", "grad_weight", "grad_bias", NULL};
    PyObject *x, *gy, *gxo = Py_True, *gwo = Py_True, *gbo = Py_True;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOO:backward", names, &x, &gy, &gxo, &gwo, &gbo))
        return NULL;
    if (linear_ready(self) < 0) return NULL;
    if (gbo == Py_True && !emb_linear_has_bias(self->lin)) gbo = Py_None;
    int64_t in = emb_linear_in_features(self->lin), out = emb_linear_out_features(self->lin);
    int64_t wshape[2] = {out, in};
    py_arg xa, gya, a[3];
    memset(a, 0, sizeof a);
    PyObject *r[3] = {NULL, NULL, NULL}, *res = NULL;
    emb_tensor *t[3];
    if (py_arg_get(x, "x", ~0u, 0, &xa) < 0) return NULL;
    if (py_arg_get(gy, "grad_y", ~0u, 0, &gya) == 0) {
        int nd = xa.t.ndim >= 1 ? xa.t.ndim : 1;
        int64_t xshape[EMB_MAX_DIMS];
        replace_last(&xa.t, xa.t.ndim >= 1 ? xa.t.shape[xa.t.ndim - 1] : in, xshape);
        if (grad_arg(gxo, "grad_x", nd, xshape, 0, &a[0], &r[0], &t[0]) == 0 &&
            grad_arg(gwo, "grad_weight", 2, wshape, 1, &a[1], &r[1], &t[1]) == 0 &&
            grad_arg(gbo, "grad_bias", 1, &out, 1, &a[2], &r[2], &t[2]) == 0) {
            emb_status st;
            PY_CALL(&self->lock, st,
                    emb_linear_backward(self->lin, &xa.t, &gya.t, t[0], t[1], t[2]));
            res = st != EMB_OK ? py_raise(st) : PyTuple_Pack(3, r[0], r[1], r[2]);
        }
        py_arg_release(&gya);
    }
    for (int i = 0; i < 3; i++) {
        py_arg_release(&a[i]);
        Py_XDECREF(r[i]);
    }
    py_arg_release(&xa);
    return res;
}

static PyObject *linear_call(py_linear *self, PyObject *args, PyObject *kw) {
    return linear_forward(self, args, kw);
}

static PyMethodDef linear_methods[] = {
    {"forward", (PyCFunction)(void (*)(void))linear_forward, METH_VARARGS | METH_KEYWORDS,
     "forward(x, *, out=None) -> y = x W^T + b: x float32 [..., in_features], y float32 "
     "[..., out_features] (written into `out` when given)"},
    {"backward", (PyCFunction)(void (*)(void))linear_backward, METH_VARARGS | METH_KEYWORDS,
     "backward(x, grad_y, grad_x=True, grad_weight=True, grad_bias=True) -> (grad_x, "
     "grad_weight, grad_bias): each True gives a new array, False/None skips it (None in the "
     "result), an array is written in place; grad_x is overwritten, grad_weight and "
     "grad_bias are accumulated into (+=, as .grad)"},
    {NULL}};

static PyGetSetDef linear_getset[] = {{"weight", (getter)linear_get_weight, NULL,
                                       "float32 [out_features, in_features], a view", NULL},
                                      {"bias", (getter)linear_get_bias, NULL,
                                       "float32 [out_features], a view (None without bias)", NULL},
                                      {"in_features", (getter)linear_get_in, NULL, NULL, NULL},
                                      {"out_features", (getter)linear_get_out, NULL, NULL, NULL},
                                      {NULL}};

PyTypeObject py_linear_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emb._emb.Linear",
    .tp_basicsize = sizeof(py_linear),
    .tp_dealloc = (destructor)linear_dealloc,
    .tp_call = (ternaryfunc)linear_call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Linear(in_features, out_features, bias=True, *, generator=None): nn.Linear. "
              "Initialised as torch initialises it from the generator (None: emb's default "
              "generator, emb.manual_seed); forward and backward are torch's bit for bit "
              "through the same BLAS call.",
    .tp_methods = linear_methods,
    .tp_getset = linear_getset,
    .tp_init = (initproc)linear_init,
    .tp_new = linear_new,
};

/* ---- one_hot -------------------------------------------------------------------------- */

/* The emb dtype of a numpy dtype-like object for one_hot's output: int64 or float32. */
static int one_hot_dtype(PyObject *obj, emb_dtype *out) {
    PyObject *np = PyImport_ImportModule("numpy");
    PyObject *dt = np ? PyObject_CallMethod(np, "dtype", "(O)", obj) : NULL;
    PyObject *name = dt ? PyObject_GetAttrString(dt, "name") : NULL;
    const char *s = name ? PyUnicode_AsUTF8(name) : NULL;
    int rc = -1;
    if (s && !strcmp(s, "int64")) {
        *out = EMB_INT64;
        rc = 0;
    } else if (s && !strcmp(s, "float32")) {
        *out = EMB_FLOAT32;
        rc = 0;
    } else if (s)
        PyErr_Format(PyExc_TypeError, "one_hot: dtype must be int64 or float32, got %s", s);
    Py_XDECREF(name);
    Py_XDECREF(dt);
    Py_XDECREF(np);
    return rc;
}

/* one_hot(indices, num_classes=-1, *, dtype=numpy.int64, out=None) */
static PyObject *m_one_hot(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"indices", "num_classes", "dtype", "out", NULL};
    PyObject *idx, *dtobj = NULL, *out = Py_None;
    long long nc = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|L$OO:one_hot", names, &idx, &nc, &dtobj, &out))
        return NULL;
    emb_dtype dt = EMB_INT64;
    if (dtobj && one_hot_dtype(dtobj, &dt) < 0) return NULL;
    py_arg ia, oa = {0};
    if (py_arg_get(idx, "indices", ~0u, 0, &ia) < 0) return NULL;
    PyObject *res = NULL;
    int64_t c = 0;
    emb_status st;
    if (out != Py_None) {
        if (py_arg_get(out, "out", ~0u, PY_ARG_WRITE, &oa) == 0) {
            PY_NOGIL(st, emb_one_hot(&ia.t, nc, &oa.t));
            res = st != EMB_OK ? py_raise(st) : Py_NewRef(out);
        }
    } else {
        PY_NOGIL(st, emb_one_hot_num_classes(&ia.t, nc, &c));
        int64_t shape[EMB_MAX_DIMS + 1];
        for (int i = 0; i < ia.t.ndim; i++) shape[i] = ia.t.shape[i];
        shape[ia.t.ndim] = c;
        if (st != EMB_OK)
            py_raise(st);
        else if ((res = py_new_array(dt, ia.t.ndim + 1, shape, &oa.t)) != NULL) {
            PY_NOGIL(st, emb_one_hot(&ia.t, nc, &oa.t));
            if (st != EMB_OK) Py_SETREF(res, py_raise(st));
        }
        memset(&oa, 0, sizeof oa);
    }
    py_arg_release(&oa);
    py_arg_release(&ia);
    return res;
}

PyMethodDef py_linear_functions[] = {
    {"one_hot", (PyCFunction)(void (*)(void))m_one_hot, METH_VARARGS | METH_KEYWORDS,
     "one_hot(indices, num_classes=-1, *, dtype=numpy.int64, out=None) -> F.one_hot: an "
     "array of indices.shape + (num_classes,) (max(indices) + 1 classes for -1), int64 or "
     "float32, written into `out` when given"},
    {NULL}};

int py_linear_init(PyObject *module) {
    if (PyType_Ready(&py_param_type) < 0 || PyType_Ready(&py_linear_type) < 0) return -1;
    return PyModule_AddObjectRef(module, "Linear", (PyObject *)&py_linear_type);
}
