/* py_project.c: 2-D maps of word vectors (include/emb/search.h): pca and tsne. The input's
 * dtype and shape are left for emb to check, so that its messages reach Python. */
#include "pyemb.h"

/* A float32 [n, cols] and a float64 [m] output, n the number of rows of x (0 for a 0-d x). */
static int outputs(const emb_tensor *x, int64_t cols, int64_t m, PyObject **a, emb_tensor *at,
                   PyObject **b, emb_tensor *bt) {
    int64_t shape[2] = {x->ndim >= 1 ? x->shape[0] : 0, cols};
    *a = py_new_array(EMB_FLOAT32, 2, shape, at);
    *b = *a ? py_new_array(EMB_FLOAT64, 1, &m, bt) : NULL;
    return *b ? 0 : -1;
}

/* pca(x float32 [n, d], k) -> (coords float32 [n, k], variance float64 [k]) */
static PyObject *m_pca(PyObject *m, PyObject *args) {
    PyObject *x;
    long long k;
    if (!PyArg_ParseTuple(args, "OL:pca", &x, &k)) return NULL;
    py_arg xa;
    if (py_arg_get(x, "x", ~0u, 0, &xa) < 0) return NULL;
    PyObject *coords = NULL, *var = NULL, *res = NULL;
    emb_tensor ct, vt;
    if (outputs(&xa.t, k > 0 ? k : 0, k > 0 ? k : 0, &coords, &ct, &var, &vt) == 0) {
        emb_status st;
        PY_NOGIL(st, emb_pca(&xa.t, k, ct.data, vt.data));
        res = st != EMB_OK ? py_raise(st) : PyTuple_Pack(2, coords, var);
    }
    Py_XDECREF(coords);
    Py_XDECREF(var);
    py_arg_release(&xa);
    return res;
}

/* tsne(x float32 [n, d], perplexity=30, iterations=1000, theta=0.5, learning_rate=0 (auto),
 * early_exaggeration=12, exaggeration_iterations=250) -> (coords float32 [n, 2], kl) */
static PyObject *m_tsne(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"x",
                            "perplexity",
                            "iterations",
                            "theta",
                            "learning_rate",
                            "early_exaggeration",
                            "exaggeration_iterations",
                            NULL};
    emb_tsne_options o = emb_tsne_options_default();
    PyObject *x;
    long long iters = o.iterations, exag_iters = o.exaggeration_iterations;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|dLdddL:tsne", names, &x, &o.perplexity, &iters,
                                     &o.theta, &o.learning_rate, &o.early_exaggeration,
                                     &exag_iters))
        return NULL;
    o.iterations = iters;
    o.exaggeration_iterations = exag_iters;
    py_arg xa;
    if (py_arg_get(x, "x", ~0u, 0, &xa) < 0) return NULL;
    PyObject *coords = NULL, *kl = NULL, *res = NULL;
    emb_tensor ct, kt;
    if (outputs(&xa.t, 2, 1, &coords, &ct, &kl, &kt) == 0) {
        emb_status st;
        PY_NOGIL(st, emb_tsne(&xa.t, &o, ct.data, kt.data));
        res = st != EMB_OK ? py_raise(st) : Py_BuildValue("(Od)", coords, *(const double *)kt.data);
    }
    Py_XDECREF(coords);
    Py_XDECREF(kl);
    py_arg_release(&xa);
    return res;
}

PyMethodDef py_project_functions[] = {
    {"pca", (PyCFunction)m_pca, METH_VARARGS,
     "pca(x, k) -> (coords float32 [n, k], variance float64 [k]): the first k principal "
     "components of the rows of a float32 [n, d] array"},
    {"tsne", (PyCFunction)(void (*)(void))m_tsne, METH_VARARGS | METH_KEYWORDS,
     "tsne(x, perplexity=30.0, iterations=1000, theta=0.5, learning_rate=0.0, "
     "early_exaggeration=12.0, exaggeration_iterations=250) -> (coords float32 [n, 2], kl)"},
    {NULL}};
