/* py_print.c: torch's repr of an array (include/emb/print.h): tensor_repr. */
#include "pyemb.h"

#include <stdlib.h>

/* sci_mode: None (torch's rule), True or False. */
static int parse_sci_mode(PyObject *obj, emb_sci_mode *out) {
    if (obj == Py_None)
        *out = EMB_SCI_AUTO;
    else if (obj == Py_True)
        *out = EMB_SCI_ON;
    else if (obj == Py_False)
        *out = EMB_SCI_OFF;
    else {
        PyErr_Format(PyExc_TypeError, "tensor_repr: sci_mode must be None, True or False, got %s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    return 0;
}

/* suffixes: a sequence of at most 4 str or None entries; *fast (a new reference, or NULL
 * for an empty argument) keeps the strings alive while o->suffixes points into them. */
static int parse_suffixes(PyObject *obj, emb_print_options *o, PyObject **fast) {
    *fast = NULL;
    if (obj == NULL || obj == Py_None) return 0;
    if (PyUnicode_Check(obj)) {
        PyErr_SetString(PyExc_TypeError,
                        "tensor_repr: suffixes must be a sequence of str (or None), not a str");
        return -1;
    }
    *fast = PySequence_Fast(obj, "tensor_repr: suffixes must be a sequence of str (or None)");
    if (!*fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(*fast);
    if (n > 4) {
        PyErr_Format(PyExc_ValueError, "tensor_repr: at most 4 suffixes, got %zd", n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PySequence_Fast_GET_ITEM(*fast, i);
        if (s == Py_None) continue;
        if (!PyUnicode_Check(s)) {
            PyErr_Format(PyExc_TypeError, "tensor_repr: suffix %zd must be a str or None, got %s",
                         i, Py_TYPE(s)->tp_name);
            return -1;
        }
        o->suffixes[i] = PyUnicode_AsUTF8(s);
        if (!o->suffixes[i]) return -1;
    }
    return 0;
}

/* repr(t) into a new str: a size query, then the text (GIL released for both). */
static PyObject *render(const emb_tensor *t, const emb_print_options *o) {
    size_t need = 0;
    emb_status st;
    PY_NOGIL(st, emb_tensor_repr(t, o, NULL, 0, &need));
    if (st != EMB_OK) return py_raise(st);
    char *buf = malloc(need + 1);
    if (!buf) return PyErr_NoMemory();
    PY_NOGIL(st, emb_tensor_repr(t, o, buf, need + 1, NULL));
    PyObject *res = st != EMB_OK ? py_raise(st) : PyUnicode_DecodeUTF8(buf, (Py_ssize_t)need, NULL);
    free(buf);
    return res;
}

/* tensor_repr(x, precision=4, threshold=1000, edgeitems=3, linewidth=80, sci_mode=None,
 * suffixes=()) -> str */
static PyObject *m_tensor_repr(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"x",         "precision", "threshold", "edgeitems",
                            "linewidth", "sci_mode",  "suffixes",  NULL};
    emb_print_options o = emb_print_options_default();
    PyObject *x, *sci = Py_None, *suffixes = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$iiiiOO:tensor_repr", names, &x, &o.precision,
                                     &o.threshold, &o.edgeitems, &o.linewidth, &sci, &suffixes))
        return NULL;
    PyObject *fast = NULL, *res = NULL;
    if (parse_sci_mode(sci, &o.sci_mode) == 0 && parse_suffixes(suffixes, &o, &fast) == 0) {
        py_arg xa;
        if (py_arg_get(x, "x", ~0u, 0, &xa) == 0) {
            res = render(&xa.t, &o);
            py_arg_release(&xa);
        }
    }
    Py_XDECREF(fast);
    return res;
}

PyMethodDef py_print_functions[] = {
    {"tensor_repr", (PyCFunction)(void (*)(void))m_tensor_repr, METH_VARARGS | METH_KEYWORDS,
     "tensor_repr(x, *, precision=4, threshold=1000, edgeitems=3, linewidth=80, "
     "sci_mode=None, suffixes=()) -> str: repr(torch.from_numpy(x)) under "
     "torch.set_printoptions(...) with these options, for float32, float64, int64, int32, "
     "int16, int8, uint8 and bool arrays of up to 9 dimensions; suffixes (at most 4, None "
     "entries skipped) are appended as torch appends requires_grad=True or grad_fn=<...>"},
    {NULL}};
