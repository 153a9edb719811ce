/* py_random.c: emb's generators (include/emb/random.h) as emb._emb.Generator: torch's CPU
 * generator, bit for bit. Generator(seed) owns a generator of its own; default_generator()
 * is the process's default one (the generator of emb.manual_seed and of new tables), used
 * under py_generator_lock. */
#include "pyemb.h"

typedef struct py_gen {
    PyObject_HEAD emb_generator *gen; /* NULL: the default generator */
    py_lock own;
    py_lock *lock; /* &own, or &py_generator_lock for the default generator */
} py_gen;

static PyObject *gen_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    py_gen *self = (py_gen *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    if (py_lock_init(&self->own) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->lock = &self->own;
    return (PyObject *)self;
}

static void gen_dealloc(py_gen *self) {
    emb_generator_free(self->gen);
    py_lock_free(&self->own);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int gen_init(py_gen *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"seed", NULL};
    unsigned long long seed = 67280421310721ull; /* torch's default seed */
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|K:Generator", names, &seed)) return -1;
    if (self->gen || self->lock != &self->own) {
        PyErr_SetString(PyExc_RuntimeError, "Generator is already initialised");
        return -1;
    }
    emb_status st = emb_generator_create((uint64_t)seed, &self->gen);
    if (st != EMB_OK) {
        py_raise(st);
        return -1;
    }
    return 0;
}

static PyObject *gen_seed(py_gen *self, PyObject *arg) {
    unsigned long long s = PyLong_AsUnsignedLongLongMask(arg);
    if (s == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    emb_status st;
    PY_CALL(self->lock, st, (emb_generator_seed(self->gen, (uint64_t)s), EMB_OK));
    return st == EMB_OK ? Py_NewRef(Py_None) : py_raise(st);
}

static PyObject *gen_initial_seed(py_gen *self, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(emb_generator_initial_seed(self->gen));
}

static PyObject *gen_random(py_gen *self, PyObject *unused) {
    uint32_t r;
    emb_status st;
    PY_CALL(self->lock, st, (r = emb_generator_random(self->gen), EMB_OK));
    return st == EMB_OK ? PyLong_FromUnsignedLong(r) : NULL;
}

static PyObject *gen_random64(py_gen *self, PyObject *unused) {
    uint64_t r;
    emb_status st;
    PY_CALL(self->lock, st, (r = emb_generator_random64(self->gen), EMB_OK));
    return st == EMB_OK ? PyLong_FromUnsignedLongLong(r) : NULL;
}

static PyObject *gen_get_state(py_gen *self, PyObject *unused) {
    size_t n = emb_generator_state_nbytes();
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (!b) return NULL;
    emb_status st;
    PY_CALL(self->lock, st, emb_generator_get_state(self->gen, PyBytes_AS_STRING(b), n));
    if (st != EMB_OK) {
        Py_DECREF(b);
        return py_raise(st);
    }
    return b;
}

static PyObject *gen_set_state(py_gen *self, PyObject *arg) {
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0) return NULL;
    emb_status st;
    PY_CALL(self->lock, st, emb_generator_set_state(self->gen, v.buf, (size_t)v.len));
    PyBuffer_Release(&v);
    if (st != EMB_OK) return py_raise(st);
    Py_RETURN_NONE;
}

/* The in-place draws: out is any writable C-contiguous array (emb checks its dtype). */
enum { DRAW_NORMAL, DRAW_RANDN, DRAW_UNIFORM, DRAW_RANDINT };

static PyObject *gen_draw(py_gen *self, int kind, PyObject *out, double a, double b, long long lo,
                          long long hi) {
    py_arg o;
    if (py_arg_get(out, "out", ~0u, PY_ARG_WRITE, &o) < 0) return NULL;
    emb_status st;
    emb_generator *g = self->gen;
    PY_CALL(self->lock, st,
            kind == DRAW_NORMAL    ? emb_normal_(&o.t, a, b, g)
            : kind == DRAW_RANDN   ? emb_randn_(&o.t, g)
            : kind == DRAW_UNIFORM ? emb_uniform_(&o.t, a, b, g)
                                   : emb_randint_(&o.t, (int64_t)lo, (int64_t)hi, g));
    py_arg_release(&o);
    if (st != EMB_OK) return py_raise(st);
    Py_RETURN_NONE;
}

static PyObject *gen_normal_(py_gen *self, PyObject *args) {
    PyObject *out;
    double mean = 0, std = 1;
    if (!PyArg_ParseTuple(args, "O|dd:normal_", &out, &mean, &std)) return NULL;
    return gen_draw(self, DRAW_NORMAL, out, mean, std, 0, 0);
}

static PyObject *gen_randn_(py_gen *self, PyObject *out) {
    return gen_draw(self, DRAW_RANDN, out, 0, 0, 0, 0);
}

static PyObject *gen_uniform_(py_gen *self, PyObject *args) {
    PyObject *out;
    double from = 0, to = 1;
    if (!PyArg_ParseTuple(args, "O|dd:uniform_", &out, &from, &to)) return NULL;
    return gen_draw(self, DRAW_UNIFORM, out, from, to, 0, 0);
}

static PyObject *gen_randint_(py_gen *self, PyObject *args) {
    PyObject *out;
    long long lo, hi;
    if (!PyArg_ParseTuple(args, "OLL:randint_", &out, &lo, &hi)) return NULL;
    return gen_draw(self, DRAW_RANDINT, out, 0, 0, lo, hi);
}

static PyMethodDef gen_methods[] = {
    {"seed", (PyCFunction)gen_seed, METH_O, "seed(s): Generator.manual_seed(s)"},
    {"initial_seed", (PyCFunction)gen_initial_seed, METH_NOARGS, "initial_seed() -> int"},
    {"random", (PyCFunction)gen_random, METH_NOARGS, "random() -> the next 32-bit draw"},
    {"random64", (PyCFunction)gen_random64, METH_NOARGS, "random64() -> the next 64-bit draw"},
    {"get_state", (PyCFunction)gen_get_state, METH_NOARGS,
     "get_state() -> bytes (emb_generator_get_state)"},
    {"set_state", (PyCFunction)gen_set_state, METH_O, "set_state(bytes) (emb_generator_set_state)"},
    {"normal_", (PyCFunction)gen_normal_, METH_VARARGS,
     "normal_(out, mean=0.0, std=1.0): Tensor.normal_ into a float32/float64 array"},
    {"randn_", (PyCFunction)gen_randn_, METH_O, "randn_(out): torch.randn into out"},
    {"uniform_", (PyCFunction)gen_uniform_, METH_VARARGS,
     "uniform_(out, from_=0.0, to=1.0): Tensor.uniform_ into a float32/float64 array"},
    {"randint_", (PyCFunction)gen_randint_, METH_VARARGS,
     "randint_(out, low, high): torch.randint(low, high) into an int32/int64/float array"},
    {NULL}};

PyTypeObject py_generator_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emb._emb.Generator",
    .tp_basicsize = sizeof(py_gen),
    .tp_dealloc = (destructor)gen_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Generator(seed=67280421310721): a generator of its own, torch.Generator's "
              "streams bit for bit.",
    .tp_methods = gen_methods,
    .tp_init = (initproc)gen_init,
    .tp_new = gen_new,
};

int py_generator_arg(PyObject *obj, emb_generator **gen, py_lock **lock) {
    if (obj == Py_None) {
        *gen = NULL;
        *lock = &py_generator_lock;
        return 0;
    }
    if (!PyObject_TypeCheck(obj, &py_generator_type)) {
        PyErr_Format(PyExc_TypeError, "generator must be an emb.Generator or None, got %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *gen = ((py_gen *)obj)->gen;
    *lock = ((py_gen *)obj)->lock;
    return 0;
}

static PyObject *m_default_generator(PyObject *m, PyObject *unused) {
    py_gen *g = (py_gen *)gen_new(&py_generator_type, NULL, NULL);
    if (g) g->lock = &py_generator_lock; /* gen stays NULL: emb's default generator */
    return (PyObject *)g;
}

int py_generator_handle(PyObject *obj, emb_generator **gen, py_lock **lock) {
    if (!PyObject_TypeCheck(obj, &py_generator_type)) {
        PyErr_Format(PyExc_TypeError, "generator must be an emb.Generator or None, got %s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *gen = ((py_gen *)obj)->gen;
    *lock = ((py_gen *)obj)->lock;
    return 0;
}

PyMethodDef py_random_functions[] = {
    {"default_generator", (PyCFunction)m_default_generator, METH_NOARGS,
     "default_generator() -> a Generator object for emb's default generator (emb.manual_seed)"},
    {NULL}};

int py_random_init(PyObject *m) {
    if (PyType_Ready(&py_generator_type) < 0) return -1;
    return PyModule_AddObjectRef(m, "Generator", (PyObject *)&py_generator_type);
}
