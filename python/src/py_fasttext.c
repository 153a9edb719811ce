/* py_fasttext.c: emb._emb.FastText, a fastText model (.bin) read by emb_fasttext_read, or
 * one emb.train made (emb_fasttext_from_w2v): the vectors of its words and of any other word (from
 * its character n-grams), for emb.FastTextKeyedVectors. */
#include "pyemb.h"

#include <emb/fasttext.h>

typedef struct py_fasttext {
    PyObject_HEAD emb_fasttext *ft;
} py_fasttext;

static void fasttext_dealloc(py_fasttext *self) {
    emb_fasttext_free(self->ft);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int fasttext_init(py_fasttext *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"path", NULL};
    PyObject *path = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&:FastText", names, PyUnicode_FSConverter, &path))
        return -1;
    if (self->ft) {
        Py_DECREF(path);
        PyErr_SetString(PyExc_RuntimeError, "FastText is already initialised");
        return -1;
    }
    emb_status st;
    const char *p = PyBytes_AS_STRING(path);
    PY_NOGIL(st, emb_fasttext_read(p, &self->ft));
    Py_DECREF(path);
    if (st != EMB_OK) {
        py_raise(st);
        return -1;
    }
    return 0;
}

PyObject *py_fasttext_from(emb_fasttext *ft) {
    py_fasttext *self = (py_fasttext *)PyType_GenericNew(&py_fasttext_type, NULL, NULL);
    if (!self) {
        emb_fasttext_free(ft);
        return NULL;
    }
    self->ft = ft;
    return (PyObject *)self;
}

static int fasttext_ready(py_fasttext *self) {
    if (!self->ft) {
        PyErr_SetString(PyExc_RuntimeError, "the model was not initialised");
        return -1;
    }
    return 0;
}

/* word_vector(word) -> float32 [dim]: the word's vector as `fasttext print-word-vectors`
 * computes it (its row and its n-grams' rows, or the n-grams' alone for an unseen word). */
static PyObject *fasttext_word_vector(py_fasttext *self, PyObject *args) {
    const char *word;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "s#:word_vector", &word, &len)) return NULL;
    if (fasttext_ready(self) < 0) return NULL;
    const int64_t dim = emb_fasttext_dim(self->ft);
    emb_tensor t;
    PyObject *out = py_new_array(EMB_FLOAT32, 1, &dim, &t);
    if (!out) return NULL;
    emb_status st;
    PY_NOGIL(st, emb_fasttext_word_vector(self->ft, word, (size_t)len, t.data));
    if (st != EMB_OK) {
        Py_DECREF(out);
        return py_raise(st);
    }
    return out;
}

/* num_subwords(word) -> the number of rows whose mean is the word's vector (0: none, the
 * vector is zeros). */
static PyObject *fasttext_num_subwords(py_fasttext *self, PyObject *args) {
    const char *word;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "s#:num_subwords", &word, &len)) return NULL;
    if (fasttext_ready(self) < 0) return NULL;
    return PyLong_FromLongLong(emb_fasttext_subword_rows(self->ft, word, (size_t)len, NULL, 0));
}

/* vectors() -> (words, counts, vectors float32 [V, dim]): the vocabulary words' vectors
 * (what fastText writes to its .vec). */
static PyObject *fasttext_vectors(py_fasttext *self, PyObject *noargs) {
    (void)noargs;
    if (fasttext_ready(self) < 0) return NULL;
    const emb_vocab *v = emb_fasttext_vocab(self->ft);
    const int64_t n = emb_vocab_num_words(v), dim = emb_fasttext_dim(self->ft);
    const int64_t shape[2] = {n, dim};
    emb_tensor t;
    PyObject *arr = py_new_array(EMB_FLOAT32, 2, shape, &t);
    if (!arr) return NULL;
    emb_status st = EMB_OK;
    float *out = t.data;
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t i = 0; i < n && st == EMB_OK; i++) {
        size_t len;
        const char *w = emb_vocab_word(v, i, &len);
        st = emb_fasttext_word_vector(self->ft, w, len, out + i * dim);
    }
    Py_END_ALLOW_THREADS;
    if (st != EMB_OK) {
        Py_DECREF(arr);
        return py_raise(st);
    }
    PyObject *wc = py_vocab_lists(v); /* (words, counts) */
    PyObject *res =
        wc ? PyTuple_Pack(3, PyTuple_GET_ITEM(wc, 0), PyTuple_GET_ITEM(wc, 1), arr) : NULL;
    Py_XDECREF(wc);
    Py_DECREF(arr);
    return res;
}

/* save(path): the model as a fastText .bin (emb_fasttext_save), atomically. */
static PyObject *fasttext_save(py_fasttext *self, PyObject *args) {
    PyObject *path = NULL;
    if (!PyArg_ParseTuple(args, "O&:save", PyUnicode_FSConverter, &path)) return NULL;
    if (fasttext_ready(self) < 0) {
        Py_DECREF(path);
        return NULL;
    }
    emb_status st;
    const char *p = PyBytes_AS_STRING(path);
    PY_NOGIL(st, emb_fasttext_save(self->ft, p));
    Py_DECREF(path);
    if (st != EMB_OK) return py_raise(st);
    Py_RETURN_NONE;
}

static PyObject *fasttext_get_arg(py_fasttext *self, void *which) {
    if (fasttext_ready(self) < 0) return NULL;
    const emb_fasttext_args a = emb_fasttext_args_of(self->ft);
    const char *w = which;
    int v = w[0] == 'd' ? a.dim : w[1] == 'i' ? a.minn : w[1] == 'a' ? a.maxn : a.bucket;
    return PyLong_FromLong(v);
}

static PyMethodDef fasttext_methods[] = {
    {"word_vector", (PyCFunction)fasttext_word_vector, METH_VARARGS,
     "word_vector(word) -> float32 [dim]: any word's vector, as fastText computes it"},
    {"num_subwords", (PyCFunction)fasttext_num_subwords, METH_VARARGS,
     "num_subwords(word) -> how many rows the word's vector is the mean of"},
    {"save", (PyCFunction)fasttext_save, METH_VARARGS,
     "save(path): the model as a fastText .bin, as fastText 0.9.2 writes it"},
    {"vectors", (PyCFunction)fasttext_vectors, METH_NOARGS,
     "vectors() -> (words, counts, float32 [V, dim]): the vocabulary's vectors"},
    {NULL}};

static PyGetSetDef fasttext_getset[] = {
    {"dim", (getter)fasttext_get_arg, NULL, "the vector size", "dim"},
    {"minn", (getter)fasttext_get_arg, NULL, "the shortest n-gram, in characters", "minn"},
    {"maxn", (getter)fasttext_get_arg, NULL, "the longest n-gram (0: no n-grams)", "maxn"},
    {"bucket", (getter)fasttext_get_arg, NULL, "the number of n-gram rows", "bucket"},
    {NULL}};

PyTypeObject py_fasttext_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emb._emb.FastText",
    .tp_basicsize = sizeof(py_fasttext),
    .tp_dealloc = (destructor)fasttext_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "FastText(path): a fastText model (.bin) as fastText 0.9.2 or emb writes it, read "
              "into memory; the vector of any word from its row and character n-grams.",
    .tp_methods = fasttext_methods,
    .tp_getset = fasttext_getset,
    .tp_init = (initproc)fasttext_init,
    .tp_new = PyType_GenericNew,
};
