/* py_functional.c: the functional forms F.embedding, F.embedding_bag and their backward
 * passes over a caller's weight (emb.torch runs these on torch's parameters). */
#include "py_tables.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Functional forms over a caller's weight (emb.torch runs these on torch's parameters)
 * ------------------------------------------------------------------------------------- */

/* F.embedding(indices, weight, max_norm=None, norm_type=2.0): with max_norm the weight is
 * renormalised in place first (it must then be writable). */
static PyObject *f_embedding(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"weight", "indices", "max_norm", "norm_type", NULL};
    PyObject *w, *ind, *mn = Py_None;
    double nt = 2.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|Od:embedding", names, &w, &ind, &mn, &nt))
        return NULL;
    double max_norm;
    if (py_max_norm(mn, &max_norm) < 0) return NULL;
    int renorm = !isinf(max_norm);
    py_arg wa, ix;
    if (py_arg_get(w, "weight", PY_DT_F32, renorm ? PY_ARG_WRITE : 0, &wa) < 0) return NULL;
    /* the indices' dtype is emb's to check: torch's message */
    if (py_arg_get(ind, "indices", ~0u, 0, &ix) < 0) {
        py_arg_release(&wa);
        return NULL;
    }
    PyObject *out = NULL;
    emb_tensor o;
    if (wa.t.ndim != 2) {
        PyErr_Format(PyExc_ValueError, "weight must be 2-D, got %d dimensions", wa.t.ndim);
        goto done;
    }
    int64_t shape[EMB_MAX_DIMS + 1];
    memcpy(shape, ix.t.shape, sizeof(int64_t) * (size_t)ix.t.ndim);
    shape[ix.t.ndim] = wa.t.shape[1];
    if (ix.t.ndim >= EMB_MAX_DIMS) {
        PyErr_SetString(PyExc_ValueError, "indices have more than 8 dimensions");
        goto done;
    }
    out = py_new_array(EMB_FLOAT32, ix.t.ndim + 1, shape, &o);
    if (!out) goto done;
    emb_status st = EMB_OK;
    Py_BEGIN_ALLOW_THREADS if (renorm) st = emb_embedding_renorm_(&wa.t, &ix.t, max_norm, nt);
    if (st == EMB_OK) st = emb_embedding_lookup(&wa.t, &ix.t, &o);
    Py_END_ALLOW_THREADS if (st != EMB_OK) {
        Py_CLEAR(out);
        py_raise(st);
    }
done:
    py_arg_release(&ix);
    py_arg_release(&wa);
    return out;
}

/* A temporary read-only emb_embedding or emb_bag over the caller's weight [V, D], for the
 * backward passes (which only read the options and the shape). */
static const emb_storage read_only_storage = {true, NULL, NULL};

static PyObject *f_embedding_backward(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"weight", "indices", "grad_output", "padding_idx", "scale_grad_by_freq",
                            "sparse", NULL};
    PyObject *w, *ind, *go, *pad = Py_None;
    int scale = 0, sparse = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|Opp:embedding_backward", names, &w, &ind, &go,
                                     &pad, &scale, &sparse))
        return NULL;
    emb_embedding_options o;
    if (py_embedding_options(pad, Py_None, 2.0, scale, sparse, &o) < 0) return NULL;
    py_arg wa = {0}, ix = {0}, gout = {0};
    PyObject *res = NULL;
    emb_embedding *e = NULL;
    if (py_arg_get(w, "weight", PY_DT_F32, 0, &wa) < 0 ||
        py_arg_get(ind, "indices", PY_DT_INDEX, 0, &ix) < 0 ||
        py_arg_get(go, "grad_output", PY_DT_F32, 0, &gout) < 0)
        goto done;
    emb_status st = emb_embedding_wrap(&wa.t, &read_only_storage, false, &o, &e);
    if (st != EMB_OK) {
        py_raise(st);
        goto done;
    }
    if (sparse) {
        emb_sparse_grad g;
        st = emb_sparse_grad_init(&g, wa.t.shape[0], wa.t.shape[1]);
        if (st == EMB_OK) PY_NOGIL(st, emb_embedding_backward_sparse(e, &ix.t, &gout.t, &g));
        if (st != EMB_OK)
            py_raise(st);
        else
            res = py_sparse_to_tuple(&g);
        emb_sparse_grad_release(&g);
    } else {
        emb_tensor t;
        res = py_new_array(EMB_FLOAT32, 2, wa.t.shape, &t);
        if (!res) goto done;
        PY_NOGIL(st, emb_embedding_backward_overwrite(e, &ix.t, &gout.t, &t));
        if (st != EMB_OK) {
            Py_CLEAR(res);
            py_raise(st);
        }
    }
done:
    emb_embedding_free(e);
    py_arg_release(&gout);
    py_arg_release(&ix);
    py_arg_release(&wa);
    return res;
}

static int parse_bag_options(PyObject *mode, PyObject *pad, PyObject *mn, double nt, int scale,
                             int sparse, int ilo, emb_bag_options *o) {
    *o = emb_bag_options_default();
    if (mode && py_bag_mode(mode, &o->mode) < 0) return -1;
    if (py_padding_idx(pad, &o->padding_idx) < 0 || py_max_norm(mn, &o->max_norm) < 0) return -1;
    o->norm_type = nt;
    o->scale_grad_by_freq = scale;
    o->sparse = sparse;
    o->include_last_offset = ilo;
    return 0;
}

/* F.embedding_bag(weight, input, offsets, per_sample_weights, mode, padding_idx, max_norm,
 * norm_type, include_last_offset) -> (out, max_indices or None) */
static PyObject *f_embedding_bag(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"weight",      "input",    "offsets",   "per_sample_weights",  "mode",
                            "padding_idx", "max_norm", "norm_type", "include_last_offset", NULL};
    PyObject *w, *input, *offsets = Py_None, *psw = Py_None, *mode = NULL, *pad = Py_None,
                         *mn = Py_None;
    double nt = 2.0;
    int ilo = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOUOOdp:embedding_bag", names, &w, &input,
                                     &offsets, &psw, &mode, &pad, &mn, &nt, &ilo))
        return NULL;
    emb_bag_options o;
    if (parse_bag_options(mode, pad, mn, nt, 0, 0, ilo, &o) < 0) return NULL;
    int renorm = !isinf(o.max_norm);
    py_arg wa = {0};
    py_bag_args b = {0};
    PyObject *out = NULL, *mi = NULL, *res = NULL;
    if (py_arg_get(w, "weight", PY_DT_F32, renorm ? PY_ARG_WRITE : 0, &wa) < 0) return NULL;
    if (py_bag_args_get(input, offsets, psw, &b) < 0) goto done;
    if (wa.t.ndim != 2) {
        PyErr_Format(PyExc_ValueError, "weight must be 2-D, got %d dimensions", wa.t.ndim);
        goto done;
    }
    int64_t nb;
    if (b.input.t.ndim == 2)
        nb = b.input.t.shape[0];
    else if (b.offsets.present && b.offsets.t.ndim == 1)
        nb = b.offsets.t.shape[0] - (ilo && b.offsets.t.shape[0] > 0 ? 1 : 0);
    else
        nb = 0; /* emb reports what is wrong */
    int64_t shape[2] = {nb, wa.t.shape[1]};
    emb_tensor ot, mt;
    out = py_new_array(EMB_FLOAT32, 2, shape, &ot);
    if (!out) goto done;
    if (o.mode == EMB_BAG_MAX && !(mi = py_new_array(EMB_INT64, 2, shape, &mt))) goto done;
    emb_status st;
    PY_NOGIL(st, emb_bag_lookup(&wa.t, &b.input.t, OPT_T(b.offsets), OPT_T(b.psw), &o, &ot,
                                mi ? &mt : NULL));
    if (st != EMB_OK) {
        py_raise(st);
        goto done;
    }
    res = PyTuple_Pack(2, out, mi ? mi : Py_None);
done:
    Py_XDECREF(out);
    Py_XDECREF(mi);
    py_bag_args_release(&b);
    py_arg_release(&wa);
    return res;
}

/* The backward passes of F.embedding_bag: what="dense" -> grad [V, D]; "sparse" -> (rows,
 * values); "per_sample_weights" -> the gradient of per_sample_weights. */
static PyObject *f_embedding_bag_backward(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"weight",
                            "input",
                            "grad_output",
                            "offsets",
                            "per_sample_weights",
                            "max_indices",
                            "mode",
                            "padding_idx",
                            "scale_grad_by_freq",
                            "include_last_offset",
                            "what",
                            NULL};
    PyObject *w, *input, *go, *offsets = Py_None, *psw = Py_None, *mi = Py_None, *mode = NULL,
                              *pad = Py_None;
    int scale = 0, ilo = 0;
    const char *what = "dense";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|OOOUOpps:embedding_bag_backward", names, &w,
                                     &input, &go, &offsets, &psw, &mi, &mode, &pad, &scale, &ilo,
                                     &what))
        return NULL;
    int kind = !strcmp(what, "dense")                ? 0
               : !strcmp(what, "sparse")             ? 1
               : !strcmp(what, "per_sample_weights") ? 2
                                                     : -1;
    if (kind < 0) {
        PyErr_Format(PyExc_ValueError,
                     "what must be 'dense', 'sparse' or 'per_sample_weights', got '%s'", what);
        return NULL;
    }
    emb_bag_options o;
    if (parse_bag_options(mode, pad, Py_None, 2.0, scale, kind == 1, ilo, &o) < 0) return NULL;
    py_arg wa = {0}, gout = {0}, mia = {0};
    py_bag_args b = {0};
    emb_bag *bag = NULL;
    PyObject *res = NULL;
    if (py_arg_get(w, "weight", PY_DT_F32, 0, &wa) < 0) return NULL;
    if (py_bag_args_get(input, offsets, psw, &b) < 0 ||
        py_arg_get(go, "grad_output", PY_DT_F32, 0, &gout) < 0 ||
        py_arg_get(mi, "max_indices", PY_DT(EMB_INT64), PY_ARG_OPTIONAL, &mia) < 0)
        goto done;
    emb_status st = emb_bag_wrap(&wa.t, &read_only_storage, false, &o, &bag);
    if (st != EMB_OK) {
        py_raise(st);
        goto done;
    }
    emb_tensor t;
    if (kind == 1) {
        emb_sparse_grad g;
        st = emb_sparse_grad_init(&g, wa.t.shape[0], wa.t.shape[1]);
        if (st == EMB_OK)
            PY_NOGIL(st, emb_bag_backward_sparse(bag, &b.input.t, OPT_T(b.offsets), OPT_T(b.psw),
                                                 &gout.t, &g));
        if (st != EMB_OK)
            py_raise(st);
        else
            res = py_sparse_to_tuple(&g);
        emb_sparse_grad_release(&g);
        goto done;
    }
    if (kind == 0)
        res = py_new_array(EMB_FLOAT32, 2, wa.t.shape, &t);
    else
        res = py_new_array(EMB_FLOAT32, b.input.t.ndim, b.input.t.shape, &t);
    if (!res) goto done;
    if (kind == 0)
        PY_NOGIL(st, emb_bag_backward_overwrite(bag, &b.input.t, OPT_T(b.offsets), OPT_T(b.psw),
                                                OPT_T(mia), &gout.t, &t));
    else
        PY_NOGIL(st, emb_bag_backward_per_sample_weights(bag, &b.input.t, OPT_T(b.offsets), &gout.t,
                                                         &t));
    if (st != EMB_OK) {
        Py_CLEAR(res);
        py_raise(st);
    }
done:
    emb_bag_free(bag);
    py_arg_release(&mia);
    py_arg_release(&gout);
    py_bag_args_release(&b);
    py_arg_release(&wa);
    return res;
}

PyMethodDef py_table_functions[] = {
    {"embedding", (PyCFunction)(void (*)(void))f_embedding, METH_VARARGS | METH_KEYWORDS,
     "embedding(weight, indices, max_norm=None, norm_type=2.0) -> F.embedding(indices, "
     "weight, max_norm, norm_type); with max_norm the weight is renormalised in place"},
    {"embedding_backward", (PyCFunction)(void (*)(void))f_embedding_backward,
     METH_VARARGS | METH_KEYWORDS,
     "embedding_backward(weight, indices, grad_output, padding_idx=None, "
     "scale_grad_by_freq=False, sparse=False) -> dense gradient, or (rows, values)"},
    {"embedding_bag", (PyCFunction)(void (*)(void))f_embedding_bag, METH_VARARGS | METH_KEYWORDS,
     "embedding_bag(weight, input, offsets=None, per_sample_weights=None, mode='mean', "
     "padding_idx=None, max_norm=None, norm_type=2.0, include_last_offset=False) -> "
     "(out, max_indices or None)"},
    {"embedding_bag_backward", (PyCFunction)(void (*)(void))f_embedding_bag_backward,
     METH_VARARGS | METH_KEYWORDS,
     "embedding_bag_backward(weight, input, grad_output, offsets=None, "
     "per_sample_weights=None, max_indices=None, mode='mean', padding_idx=None, "
     "scale_grad_by_freq=False, include_last_offset=False, what='dense')"},
    {NULL}};
