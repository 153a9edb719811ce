/* py_renorm.c: torch.embedding_renorm_ (include/emb/embedding.h) as embedding_renorm_. The
 * indices' dtype is left for emb to check, so that torch's message reaches Python. */
#include "pyemb.h"

/* embedding_renorm_(weight, indices, max_norm, norm_type=2.0) -> weight */
static PyObject *m_embedding_renorm_(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"weight", "indices", "max_norm", "norm_type", NULL};
    PyObject *w, *ind;
    double max_norm, norm_type = 2.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOd|d:embedding_renorm_", names, &w, &ind,
                                     &max_norm, &norm_type))
        return NULL;
    py_arg wa, ix;
    if (py_arg_get(w, "weight", ~0u, PY_ARG_WRITE, &wa) < 0) return NULL;
    PyObject *res = NULL;
    if (py_arg_get(ind, "indices", ~0u, 0, &ix) == 0) {
        emb_status st;
        PY_NOGIL(st, emb_embedding_renorm_(&wa.t, &ix.t, max_norm, norm_type));
        res = st != EMB_OK ? py_raise(st) : Py_NewRef(w);
        py_arg_release(&ix);
    }
    py_arg_release(&wa);
    return res;
}

PyMethodDef py_renorm_functions[] = {
    {"embedding_renorm_", (PyCFunction)(void (*)(void))m_embedding_renorm_,
     METH_VARARGS | METH_KEYWORDS,
     "embedding_renorm_(weight, indices, max_norm, norm_type=2.0) -> weight: "
     "torch.embedding_renorm_, rescaling in place each row of a writable float32 [V, D] "
     "array named by indices (int64 or int32) whose norm_type-norm exceeds max_norm"},
    {NULL}};
