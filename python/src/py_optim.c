/* py_optim.c: emb._emb.Optimizer (include/emb/optim.h): torch.optim's update rules over
 * float32 arrays and tables, dense, sparse, fused and Hogwild row steps, and the state as
 * bytes. */
#include "pyemb.h"

#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Optimizer
 * ------------------------------------------------------------------------------------- */

typedef struct py_param {
    Py_buffer view; /* held for an array parameter */
    int held;
    PyObject *table; /* or the Embedding / EmbeddingBag whose weight it is */
    int64_t dims;    /* 2 for tables */
} py_param;

typedef struct py_optimizer {
    PyObject_HEAD emb_optimizer *opt;
    emb_optimizer_options opts; /* as constructed: kind and defaults */
    py_lock lock;
    py_param *params;
    int nparams, cap;
} py_optimizer;

static const char *optim_names[] = {"sgd", "adagrad", "adam", "adamw", "sparse_adam"};

static void optimizer_dealloc(py_optimizer *self) {
    emb_optimizer_free(self->opt);
    self->opt = NULL;
    for (int i = 0; i < self->nparams; i++) {
        if (self->params[i].held) PyBuffer_Release(&self->params[i].view);
        Py_CLEAR(self->params[i].table);
    }
    PyMem_Free(self->params);
    py_lock_free(&self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

int py_opt_double(PyObject *o, double *out) {
    if (!o || o == Py_None) return 0;
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

static int optimizer_init(py_optimizer *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"kind",     "lr",           "momentum", "dampening",
                            "nesterov", "weight_decay", "lr_decay", "initial_accumulator_value",
                            "eps",      "betas",        "amsgrad",  "maximize",
                            NULL};
    const char *kind;
    PyObject *lr = NULL, *mom = NULL, *damp = NULL, *wd = NULL, *lrd = NULL, *iav = NULL,
             *eps = NULL, *betas = NULL;
    int nesterov = 0, amsgrad = 0, maximize = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|OOOpOOOOOpp:Optimizer", names, &kind, &lr, &mom,
                                     &damp, &nesterov, &wd, &lrd, &iav, &eps, &betas, &amsgrad,
                                     &maximize))
        return -1;
    if (self->opt) {
        PyErr_SetString(PyExc_RuntimeError, "Optimizer is already initialised");
        return -1;
    }
    int k = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(kind, optim_names[i])) k = i;
    if (k < 0) {
        PyErr_Format(PyExc_ValueError,
                     "unknown optimizer '%s' (sgd, adagrad, adam, adamw, sparse_adam)", kind);
        return -1;
    }
    emb_optimizer_options o = emb_optimizer_options_default((emb_optimizer_kind)k);
    if (py_opt_double(lr, &o.lr) < 0 || py_opt_double(mom, &o.momentum) < 0 ||
        py_opt_double(damp, &o.dampening) < 0 || py_opt_double(wd, &o.weight_decay) < 0 ||
        py_opt_double(lrd, &o.lr_decay) < 0 ||
        py_opt_double(iav, &o.initial_accumulator_value) < 0 || py_opt_double(eps, &o.eps) < 0)
        return -1;
    if (betas && betas != Py_None &&
        !PyArg_ParseTuple(betas, "dd;betas must be a pair of floats", &o.beta1, &o.beta2))
        return -1;
    o.nesterov = nesterov;
    o.amsgrad = amsgrad;
    o.maximize = maximize;
    emb_status st = emb_optimizer_create(&o, &self->opt);
    if (st != EMB_OK) {
        py_raise(st);
        return -1;
    }
    self->opts = o;
    return 0;
}

static PyObject *optimizer_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    py_optimizer *self = (py_optimizer *)type->tp_alloc(type, 0);
    if (self && py_lock_init(&self->lock) < 0) Py_CLEAR(self);
    return (PyObject *)self;
}

static int check_opt(py_optimizer *self) {
    if (!self->opt) {
        PyErr_SetString(PyExc_RuntimeError, "the optimizer was not initialised");
        return -1;
    }
    return 0;
}

static PyObject *optimizer_add_param(py_optimizer *self, PyObject *obj) {
    if (check_opt(self) < 0) return NULL;
    if (self->nparams == self->cap) {
        int cap = self->cap ? 2 * self->cap : 4;
        py_param *p = PyMem_Realloc(self->params, sizeof *p * (size_t)cap);
        if (!p) return PyErr_NoMemory();
        self->params = p;
        self->cap = cap;
    }
    py_param *p = &self->params[self->nparams];
    memset(p, 0, sizeof *p);
    emb_tensor t;
    emb_status st;
    if (PyObject_TypeCheck(obj, &py_embedding_type) || PyObject_TypeCheck(obj, &py_bag_type)) {
        emb_embedding *e = py_embedding_handle(obj);
        if (!e) return NULL;
        st = emb_embedding_weight(e, &t); /* refuses a read-only table */
        if (st != EMB_OK) return py_raise(st);
    } else {
        py_arg a;
        if (py_arg_get(obj, "param", PY_DT_F32, PY_ARG_WRITE | PY_ARG_KEEP, &a) < 0) return NULL;
        p->view = a.view;
        p->held = 1;
        t = a.t;
    }
    int id = -1;
    PY_CALL(&self->lock, st, emb_optimizer_add_param(self->opt, &t, &id));
    if (st != EMB_OK) {
        if (p->held) PyBuffer_Release(&p->view);
        p->held = 0;
        return py_raise(st);
    }
    if (!p->held) {
        Py_INCREF(obj);
        p->table = obj; /* the table's memory lives as long as the optimizer */
    }
    self->nparams++;
    return PyLong_FromLong(id);
}

static int param_id(py_optimizer *self, int id) {
    if (id < 0 || id >= self->nparams) {
        PyErr_Format(PyExc_IndexError,
                     "param_id %d is not a parameter of this optimizer "
                     "(it has %d)",
                     id, self->nparams);
        return -1;
    }
    return 0;
}

static PyObject *optimizer_step(py_optimizer *self, PyObject *args) {
    int id;
    PyObject *grad;
    if (!PyArg_ParseTuple(args, "iO:step", &id, &grad)) return NULL;
    if (check_opt(self) < 0 || param_id(self, id) < 0) return NULL;
    py_arg g;
    if (py_arg_get(grad, "grad", PY_DT_F32, 0, &g) < 0) return NULL;
    emb_status st;
    PY_CALL(&self->lock, st, emb_optimizer_step(self->opt, id, &g.t));
    py_arg_release(&g);
    if (st != EMB_OK) return py_raise(st);
    Py_RETURN_NONE;
}

/* rows strictly ascending: what coalesced=True promises (PyTorch's coalesced COO rows) */
static int rows_ascending(const emb_tensor *r) {
    int64_t n = r->ndim == 1 ? r->shape[0] : 0;
    for (int64_t k = 1; k < n; k++) {
        int64_t a = r->dtype == EMB_INT64 ? ((const int64_t *)r->data)[k - 1]
                                          : ((const int32_t *)r->data)[k - 1];
        int64_t b =
            r->dtype == EMB_INT64 ? ((const int64_t *)r->data)[k] : ((const int32_t *)r->data)[k];
        if (a >= b) {
            PyErr_Format(PyExc_ValueError,
                         "coalesced=True needs strictly ascending rows, but rows[%lld] = %lld "
                         "follows %lld",
                         (long long)k, (long long)b, (long long)a);
            return -1;
        }
    }
    return 0;
}

int py_sparse_arg_get(PyObject *rows, PyObject *values, int64_t num_rows, int64_t dim,
                      py_sparse_arg *s) {
    memset(s, 0, sizeof *s);
    if (py_arg_get(rows, "rows", PY_DT_INDEX, 0, &s->rows) < 0 ||
        py_arg_get(values, "values", PY_DT_F32, 0, &s->values) < 0)
        goto fail;
    const emb_tensor *r = &s->rows.t, *v = &s->values.t;
    if (r->ndim != 1) {
        PyErr_Format(PyExc_ValueError, "rows must be 1-D, got %d dimensions", r->ndim);
        goto fail;
    }
    int64_t n = r->shape[0];
    if (v->ndim != 2 || v->shape[0] != n || v->shape[1] != dim) {
        PyObject *shape = py_shape_tuple(v->ndim, v->shape);
        if (shape)
            PyErr_Format(PyExc_ValueError,
                         "values must be float32 [len(rows), dim] = [%lld, %lld], got shape %R",
                         (long long)n, (long long)dim, shape);
        Py_XDECREF(shape);
        goto fail;
    }
    const int64_t *idx = r->data;
    if (r->dtype == EMB_INT32 && n > 0) {
        if (!(s->widened = PyMem_Malloc(sizeof *s->widened * (size_t)n))) {
            PyErr_NoMemory();
            goto fail;
        }
        for (int64_t k = 0; k < n; k++) s->widened[k] = ((const int32_t *)r->data)[k];
        idx = s->widened;
    }
    emb_status st = emb_sparse_grad_init(&s->g, num_rows, dim);
    if (st != EMB_OK) {
        py_raise(st);
        goto fail;
    }
    s->g.nnz = n;
    s->g.indices = (int64_t *)idx; /* borrowed: emb copies before it changes entries */
    s->g.values = v->data;
    s->g.borrowed = true;
    s->g.coalesced = n < 2;
    return 0;
fail:
    py_sparse_arg_release(s);
    return -1;
}

void py_sparse_arg_release(py_sparse_arg *s) {
    emb_sparse_grad_release(&s->g); /* forgets the borrowed entries */
    PyMem_Free(s->widened);
    s->widened = NULL;
    py_arg_release(&s->values);
    py_arg_release(&s->rows);
}

static PyObject *optimizer_step_sparse(py_optimizer *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"param_id", "rows", "values", "coalesced", NULL};
    int id, coalesced = 0;
    PyObject *rows, *values;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iOO|p:step_sparse", names, &id, &rows, &values,
                                     &coalesced))
        return NULL;
    if (check_opt(self) < 0 || param_id(self, id) < 0) return NULL;
    /* the parameter's shape: rows and dim of the registered 2-D tensor */
    int64_t nrows = -1, dim = -1;
    py_param *p = &self->params[id];
    if (p->table) {
        emb_embedding *e = py_embedding_handle(p->table);
        nrows = emb_embedding_num_embeddings(e);
        dim = emb_embedding_embedding_dim(e);
    } else if (p->view.ndim == 2) {
        nrows = p->view.shape[0];
        dim = p->view.shape[1];
    }
    if (nrows < 0) {
        PyErr_SetString(PyExc_ValueError, "step_sparse needs a 2-D parameter");
        return NULL;
    }
    py_sparse_arg sp;
    if (py_sparse_arg_get(rows, values, nrows, dim, &sp) < 0) return NULL;
    emb_status st = EMB_OK;
    if (!coalesced || rows_ascending(&sp.rows.t) == 0) {
        sp.g.coalesced = sp.g.coalesced || coalesced;
        PY_CALL(&self->lock, st, emb_optimizer_step_sparse(self->opt, id, &sp.g));
        if (st != EMB_OK) py_raise(st);
    }
    py_sparse_arg_release(&sp);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyObject *optimizer_step_fused(py_optimizer *self, PyObject *args) {
    int id;
    PyObject *table, *ind, *go;
    if (!PyArg_ParseTuple(args, "iOOO:step_fused", &id, &table, &ind, &go)) return NULL;
    if (check_opt(self) < 0 || param_id(self, id) < 0) return NULL;
    emb_embedding *e = py_embedding_handle(table);
    if (!e) return NULL;
    py_arg ix, g;
    if (py_arg_get(ind, "indices", PY_DT_INDEX, 0, &ix) < 0) return NULL;
    if (py_arg_get(go, "grad_output", PY_DT_F32, 0, &g) < 0) {
        py_arg_release(&ix);
        return NULL;
    }
    emb_status st;
    PY_CALL(&self->lock, st, emb_optimizer_step_fused(self->opt, id, e, &ix.t, &g.t));
    py_arg_release(&g);
    py_arg_release(&ix);
    if (st != EMB_OK) return py_raise(st);
    Py_RETURN_NONE;
}

/* init_state(id) / advance_step(id): the Hogwild row updates' bookkeeping */
static PyObject *optimizer_id_call(py_optimizer *self, PyObject *arg, int advance) {
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    if (check_opt(self) < 0 || param_id(self, (int)id) < 0) return NULL;
    emb_status st;
    PY_CALL(&self->lock, st,
            advance ? emb_optimizer_advance_step(self->opt, (int)id)
                    : emb_optimizer_init_state(self->opt, (int)id));
    if (st != EMB_OK) return py_raise(st);
    Py_RETURN_NONE;
}

static PyObject *optimizer_init_state(py_optimizer *self, PyObject *arg) {
    return optimizer_id_call(self, arg, 0);
}

static PyObject *optimizer_advance_step(py_optimizer *self, PyObject *arg) {
    return optimizer_id_call(self, arg, 1);
}

/* update_rows(id, rows, values): emb_optimizer_update_rows; the C function may run on
 * several threads at once, so this call takes no object lock (only the GIL is released). */
static PyObject *optimizer_update_rows(py_optimizer *self, PyObject *args) {
    int id;
    PyObject *rows, *values;
    if (!PyArg_ParseTuple(args, "iOO:update_rows", &id, &rows, &values)) return NULL;
    if (check_opt(self) < 0 || param_id(self, id) < 0) return NULL;
    py_arg r, v;
    if (py_arg_get(rows, "rows", PY_DT_INDEX, 0, &r) < 0) return NULL;
    if (py_arg_get(values, "values", PY_DT_F32, 0, &v) < 0) {
        py_arg_release(&r);
        return NULL;
    }
    emb_status st;
    PY_NOGIL(st, emb_optimizer_update_rows(self->opt, id, &r.t, &v.t));
    py_arg_release(&v);
    py_arg_release(&r);
    if (st != EMB_OK) return py_raise(st);
    Py_RETURN_NONE;
}

static PyObject *optimizer_get_kind(py_optimizer *self, void *c) {
    if (check_opt(self) < 0) return NULL;
    return PyUnicode_FromString(optim_names[self->opts.kind]);
}

/* torch's optimizer.defaults: the hyper-parameters of the kind, by torch's names */
static PyObject *optimizer_get_defaults(py_optimizer *self, void *c) {
    if (check_opt(self) < 0) return NULL;
    const emb_optimizer_options o = self->opts;
    switch (o.kind) {
    case EMB_OPTIMIZER_SGD:
        return Py_BuildValue("{s:d,s:d,s:d,s:d,s:O,s:O}", "lr", o.lr, "momentum", o.momentum,
                             "dampening", o.dampening, "weight_decay", o.weight_decay, "nesterov",
                             o.nesterov ? Py_True : Py_False, "maximize",
                             o.maximize ? Py_True : Py_False);
    case EMB_OPTIMIZER_ADAGRAD:
        return Py_BuildValue("{s:d,s:d,s:d,s:d,s:d,s:O}", "lr", o.lr, "lr_decay", o.lr_decay,
                             "weight_decay", o.weight_decay, "initial_accumulator_value",
                             o.initial_accumulator_value, "eps", o.eps, "maximize",
                             o.maximize ? Py_True : Py_False);
    case EMB_OPTIMIZER_SPARSE_ADAM:
        return Py_BuildValue("{s:d,s:(dd),s:d,s:O}", "lr", o.lr, "betas", o.beta1, o.beta2, "eps",
                             o.eps, "maximize", o.maximize ? Py_True : Py_False);
    default:
        return Py_BuildValue("{s:d,s:(dd),s:d,s:d,s:O,s:O}", "lr", o.lr, "betas", o.beta1, o.beta2,
                             "eps", o.eps, "weight_decay", o.weight_decay, "amsgrad",
                             o.amsgrad ? Py_True : Py_False, "maximize",
                             o.maximize ? Py_True : Py_False);
    }
}

static PyObject *optimizer_param_steps(py_optimizer *self, PyObject *arg) {
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    if (check_opt(self) < 0 || param_id(self, (int)id) < 0) return NULL;
    return PyLong_FromLongLong(emb_optimizer_param_steps(self->opt, (int)id));
}

static PyObject *optimizer_state_dict(py_optimizer *self, PyObject *unused) {
    if (check_opt(self) < 0) return NULL;
    size_t n = emb_optimizer_state_nbytes(self->opt);
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (!b) return NULL;
    emb_status st;
    PY_CALL(&self->lock, st, emb_optimizer_save_state(self->opt, PyBytes_AS_STRING(b), n));
    if (st != EMB_OK) {
        Py_DECREF(b);
        return py_raise(st);
    }
    return b;
}

static PyObject *optimizer_load_state_dict(py_optimizer *self, PyObject *arg) {
    if (check_opt(self) < 0) return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0) return NULL;
    emb_status st;
    PY_CALL(&self->lock, st, emb_optimizer_load_state(self->opt, v.buf, (size_t)v.len));
    PyBuffer_Release(&v);
    if (st != EMB_OK) return py_raise(st);
    Py_RETURN_NONE;
}

static PyObject *optimizer_get_lr(py_optimizer *self, void *c) {
    if (check_opt(self) < 0) return NULL;
    return PyFloat_FromDouble(emb_optimizer_lr(self->opt));
}

static int optimizer_set_lr(py_optimizer *self, PyObject *v, void *c) {
    if (check_opt(self) < 0) return -1;
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "lr cannot be deleted");
        return -1;
    }
    double lr = PyFloat_AsDouble(v);
    if (lr == -1.0 && PyErr_Occurred()) return -1;
    emb_status st;
    PY_CALL(&self->lock, st, emb_optimizer_set_lr(self->opt, lr));
    if (st != EMB_OK) {
        py_raise(st);
        return -1;
    }
    return 0;
}

static PyMethodDef optimizer_methods[] = {
    {"add_param", (PyCFunction)optimizer_add_param, METH_O,
     "add_param(array | Embedding | EmbeddingBag) -> param_id. The optimizer updates the "
     "memory in place and keeps its owner alive."},
    {"step", (PyCFunction)optimizer_step, METH_VARARGS, "step(param_id, grad): a dense step"},
    {"step_sparse", (PyCFunction)(void (*)(void))optimizer_step_sparse,
     METH_VARARGS | METH_KEYWORDS,
     "step_sparse(param_id, rows, values, coalesced=False): a step with a sparse row "
     "gradient (entry k: row rows[k], values[k]; coalesced=True: rows strictly ascending, "
     "as a coalesced torch gradient)"},
    {"step_fused", (PyCFunction)optimizer_step_fused, METH_VARARGS,
     "step_fused(param_id, table, indices, grad_output): sparse backward and step in one"},
    {"param_steps", (PyCFunction)optimizer_param_steps, METH_O, "param_steps(param_id) -> int"},
    {"init_state", (PyCFunction)optimizer_init_state, METH_O,
     "init_state(param_id): creates the parameter's state now (before update_rows)"},
    {"advance_step", (PyCFunction)optimizer_advance_step, METH_O,
     "advance_step(param_id): counts one step for update_rows"},
    {"update_rows", (PyCFunction)optimizer_update_rows, METH_VARARGS,
     "update_rows(param_id, rows, values): the step's update of these gradient entries "
     "(Hogwild: concurrent calls on disjoint or overlapping rows are allowed)"},
    {"state_dict", (PyCFunction)optimizer_state_dict, METH_NOARGS,
     "state_dict() -> bytes (docs/optimizer-state.md)"},
    {"load_state_dict", (PyCFunction)optimizer_load_state_dict, METH_O,
     "load_state_dict(bytes): restores a saved state (validated first; unchanged on error)"},
    {NULL}};

static PyGetSetDef optimizer_getset[] = {
    {"lr", (getter)optimizer_get_lr, (setter)optimizer_set_lr, "the learning rate", NULL},
    {"kind", (getter)optimizer_get_kind, NULL, "'sgd', 'adagrad', 'adam', 'adamw', 'sparse_adam'",
     NULL},
    {"defaults", (getter)optimizer_get_defaults, NULL,
     "the hyper-parameters by torch's names (torch.optim.Optimizer.defaults)", NULL},
    {NULL}};

PyTypeObject py_optimizer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emb._emb.Optimizer",
    .tp_basicsize = sizeof(py_optimizer),
    .tp_dealloc = (destructor)optimizer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Optimizer(kind, lr=None, momentum=None, dampening=None, nesterov=False, "
              "weight_decay=None, lr_decay=None, initial_accumulator_value=None, eps=None, "
              "betas=None, amsgrad=False, maximize=False); kind: 'sgd', 'adagrad', 'adam', "
              "'adamw', 'sparse_adam'. None: PyTorch's default.",
    .tp_methods = optimizer_methods,
    .tp_getset = optimizer_getset,
    .tp_init = (initproc)optimizer_init,
    .tp_new = optimizer_new,
};
