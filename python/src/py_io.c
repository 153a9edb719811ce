/* py_io.c: files (word vectors, safetensors, npy), spearman; quantized tables are in
 * py_qtable.c, the k-NN index in py_knn.c. */
#include "pyemb.h"

#include <string.h>

/* ---- vocabularies <-> lists of str ---- */

int py_vocab_from_list(PyObject *words, PyObject *counts, emb_vocab **out) {
    *out = NULL;
    PyObject *seq = PySequence_Fast(words, "words must be a sequence of str");
    if (!seq) return -1;
    PyObject *cseq = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (counts && counts != Py_None) {
        cseq = PySequence_Fast(counts, "counts must be a sequence of int");
        if (!cseq) goto fail;
        if (PySequence_Fast_GET_SIZE(cseq) != n) {
            PyErr_SetString(PyExc_ValueError, "counts must have one entry per word");
            goto fail;
        }
    }
    emb_status st = emb_vocab_create(out);
    if (st == EMB_OK) st = emb_vocab_reserve(*out, n);
    if (st != EMB_OK) {
        py_raise(st);
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *w = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *b =
            PyUnicode_Check(w) ? PyUnicode_AsEncodedString(w, "utf-8", "surrogateescape") : NULL;
        if (!b) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "word %zd is %.100s, not str", i,
                             Py_TYPE(w)->tp_name);
            goto fail;
        }
        long long c = 0;
        if (cseq) {
            c = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(cseq, i));
            if (c == -1 && PyErr_Occurred()) {
                Py_DECREF(b);
                goto fail;
            }
        }
        bool added = false;
        st =
            emb_vocab_add(*out, PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b), c, NULL, &added);
        Py_DECREF(b);
        if (st != EMB_OK) {
            py_raise(st);
            goto fail;
        }
        if (!added) {
            PyErr_Format(PyExc_ValueError, "word %zd (%R) repeats an earlier word", i, w);
            goto fail;
        }
    }
    Py_DECREF(seq);
    Py_XDECREF(cseq);
    return 0;
fail:
    Py_DECREF(seq);
    Py_XDECREF(cseq);
    emb_vocab_free(*out);
    *out = NULL;
    return -1;
}

PyObject *py_vocab_lists(const emb_vocab *v) {
    if (!v) return Py_BuildValue("(OO)", Py_None, Py_None);
    int64_t n = emb_vocab_num_words(v);
    PyObject *words = PyList_New((Py_ssize_t)n), *counts = PyList_New((Py_ssize_t)n);
    if (!words || !counts) goto fail;
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = emb_vocab_word(v, i, &len);
        PyObject *w = PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "surrogateescape");
        PyObject *c = w ? PyLong_FromLongLong(emb_vocab_count(v, i)) : NULL;
        if (!c) {
            Py_XDECREF(w);
            goto fail;
        }
        PyList_SET_ITEM(words, (Py_ssize_t)i, w);
        PyList_SET_ITEM(counts, (Py_ssize_t)i, c);
    }
    PyObject *r = PyTuple_Pack(2, words, counts);
    Py_DECREF(words);
    Py_DECREF(counts);
    return r;
fail:
    Py_XDECREF(words);
    Py_XDECREF(counts);
    return NULL;
}

static int parse_format(const char *s, emb_format *f) {
    if (!s || !strcmp(s, "auto")) {
        *f = EMB_FORMAT_AUTO;
        return 0;
    }
    emb_status st = emb_format_parse(s, f);
    if (st != EMB_OK) {
        py_raise(st);
        return -1;
    }
    return 0;
}

/* Copies an emb_tensor owned by emb into a new numpy array. */
static PyObject *copy_tensor(const emb_tensor *t) {
    emb_tensor d;
    PyObject *a = py_new_array(t->dtype, t->ndim, t->shape, &d);
    if (a && emb_tensor_nbytes(t)) memcpy(d.data, t->data, emb_tensor_nbytes(t));
    return a;
}

/* read_vectors(path, limit=0, format='auto', tensor=None, check_utf8=True) ->
 *   (words or None, counts or None, float32 [rows, dim], info dict) */
static PyObject *m_read_vectors(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"path", "limit", "format", "tensor", "check_utf8", NULL};
    PyObject *p;
    long long limit = 0;
    const char *fmt = NULL, *tensor = NULL;
    int utf8 = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Lzzp:read_vectors", names, &p, &limit, &fmt,
                                     &tensor, &utf8))
        return NULL;
    emb_vectors_read_options o = emb_vectors_read_options_default();
    o.limit = limit;
    o.tensor = tensor;
    o.check_utf8 = utf8;
    if (parse_format(fmt, &o.format) < 0) return NULL;
    PyObject *path;
    if (py_path(p, &path) < 0) return NULL;
    emb_vectors v;
    emb_status st;
    PY_NOGIL(st, emb_vectors_read(PyBytes_AS_STRING(path), &o, &v));
    Py_DECREF(path);
    if (st != EMB_OK) return py_raise(st);
    PyObject *wc = py_vocab_lists(v.vocab);
    PyObject *arr = wc ? copy_tensor(&v.weight) : NULL;
    PyObject *res = NULL;
    if (arr)
        res = Py_BuildValue("(OOO{s:s,s:s,s:L,s:L,s:L})", PyTuple_GET_ITEM(wc, 0),
                            PyTuple_GET_ITEM(wc, 1), arr, "format", emb_format_name(v.format),
                            "file_dtype", emb_dtype_name(v.file_dtype), "file_rows",
                            (long long)v.file_rows, "duplicates", (long long)v.duplicates,
                            "nonfinite", (long long)v.nonfinite);
    Py_XDECREF(wc);
    Py_XDECREF(arr);
    emb_vectors_release(&v);
    return res;
}

static int parse_dtype(const char *s, emb_dtype *d) {
    static const emb_dtype all[] = {EMB_FLOAT32, EMB_FLOAT16, EMB_BFLOAT16, EMB_FLOAT64};
    for (size_t i = 0; i < 4; i++)
        if (!strcmp(s, emb_dtype_name(all[i]))) {
            *d = all[i];
            return 0;
        }
    PyErr_Format(PyExc_ValueError, "dtype must be float32, float16, bfloat16 or float64, got '%s'",
                 s);
    return -1;
}

/* write_vectors(path, array, words=None, counts=None, format='auto', dtype='float32',
 *               tensor=None, precision=0, trailing_space=False, binary_newline=True) */
static PyObject *m_write_vectors(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"path",           "array",          "words",  "counts",
                            "format",         "dtype",          "tensor", "precision",
                            "trailing_space", "binary_newline", NULL};
    PyObject *p, *arr, *words = Py_None, *counts = Py_None;
    const char *fmt = NULL, *dtype = "float32", *tensor = NULL;
    int precision = 0, ts = 0, bn = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOzszipp:write_vectors", names, &p, &arr, &words,
                                     &counts, &fmt, &dtype, &tensor, &precision, &ts, &bn))
        return NULL;
    emb_vectors_write_options o = emb_vectors_write_options_default();
    if (parse_format(fmt, &o.format) < 0 || parse_dtype(dtype, &o.dtype) < 0) return NULL;
    o.tensor = tensor;
    o.precision = precision;
    o.trailing_space = ts;
    o.binary_newline = bn;
    emb_vocab *v = NULL;
    if (words != Py_None && py_vocab_from_list(words, counts, &v) < 0) return NULL;
    PyObject *path = NULL;
    py_arg a;
    if (py_arg_get(arr, "array", PY_DT_F32, 0, &a) < 0) {
        emb_vocab_free(v);
        return NULL;
    }
    PyObject *res = NULL;
    if (py_path(p, &path) == 0) {
        emb_status st;
        PY_NOGIL(st, emb_vectors_write(PyBytes_AS_STRING(path), &a.t, v, &o));
        if (st != EMB_OK)
            py_raise(st);
        else
            res = Py_NewRef(Py_None);
    }
    Py_XDECREF(path);
    py_arg_release(&a);
    emb_vocab_free(v);
    return res;
}

static PyObject *m_npy_read(PyObject *m, PyObject *p) {
    PyObject *path;
    if (py_path(p, &path) < 0) return NULL;
    emb_tensor t;
    emb_status st;
    PY_NOGIL(st, emb_npy_read(PyBytes_AS_STRING(path), &t));
    Py_DECREF(path);
    if (st != EMB_OK) return py_raise(st);
    PyObject *a = copy_tensor(&t);
    emb_tensor_release(&t);
    return a;
}

static PyObject *m_npy_write(PyObject *m, PyObject *args) {
    PyObject *p, *arr;
    if (!PyArg_ParseTuple(args, "OO:npy_write", &p, &arr)) return NULL;
    py_arg a;
    unsigned any = PY_DT(EMB_FLOAT32) | PY_DT(EMB_FLOAT64) | PY_DT(EMB_FLOAT16) | PY_DT(EMB_INT64) |
                   PY_DT(EMB_INT32) | PY_DT(EMB_INT16) | PY_DT(EMB_INT8) | PY_DT(EMB_UINT8) |
                   PY_DT(EMB_BOOL);
    if (py_arg_get(arr, "array", any, 0, &a) < 0) return NULL;
    PyObject *path, *res = NULL;
    if (py_path(p, &path) == 0) {
        emb_status st;
        PY_NOGIL(st, emb_npy_write(PyBytes_AS_STRING(path), &a.t));
        Py_DECREF(path);
        if (st != EMB_OK)
            py_raise(st);
        else
            res = Py_NewRef(Py_None);
    }
    py_arg_release(&a);
    return res;
}

/* safetensors_read(path) -> ({name: array (a copy; BF16 as uint16 bits)}, {key: value}) */
static PyObject *m_safetensors_read(PyObject *m, PyObject *p) {
    PyObject *path;
    if (py_path(p, &path) < 0) return NULL;
    emb_safetensors *sf;
    emb_status st;
    PY_NOGIL(st, emb_safetensors_open(PyBytes_AS_STRING(path), &sf));
    Py_DECREF(path);
    if (st != EMB_OK) return py_raise(st);
    PyObject *tensors = PyDict_New(), *meta = PyDict_New(), *res = NULL;
    if (!tensors || !meta) goto done;
    for (int64_t i = 0; i < emb_safetensors_num_tensors(sf); i++) {
        emb_tensor t;
        if ((st = emb_safetensors_read(sf, i, &t)) != EMB_OK) {
            py_raise(st);
            goto done;
        }
        if (t.dtype == EMB_BFLOAT16) t.dtype = EMB_INT16; /* numpy has no bfloat16: the bits */
        PyObject *a = copy_tensor(&t);
        if (a && t.dtype == EMB_INT16 && !strcmp(emb_safetensors_dtype(sf, i), "BF16")) {
            PyObject *u = PyObject_CallMethod(a, "view", "s", "uint16");
            Py_DECREF(a);
            a = u;
        }
        emb_tensor_release(&t);
        if (!a || PyDict_SetItemString(tensors, emb_safetensors_name(sf, i), a) < 0) {
            Py_XDECREF(a);
            goto done;
        }
        Py_DECREF(a);
    }
    for (int64_t i = 0; i < emb_safetensors_num_metadata(sf); i++) {
        const char *k = emb_safetensors_metadata_key(sf, i);
        PyObject *v = PyUnicode_FromString(emb_safetensors_metadata(sf, k));
        if (!v || PyDict_SetItemString(meta, k, v) < 0) {
            Py_XDECREF(v);
            goto done;
        }
        Py_DECREF(v);
    }
    res = PyTuple_Pack(2, tensors, meta);
done:
    Py_XDECREF(tensors);
    Py_XDECREF(meta);
    emb_safetensors_free(sf);
    return res;
}

/* safetensors_write(path, {name: array}, metadata=None) */
static PyObject *m_safetensors_write(PyObject *m, PyObject *args) {
    PyObject *p, *dict, *meta = Py_None;
    if (!PyArg_ParseTuple(args, "OO!|O:safetensors_write", &p, &PyDict_Type, &dict, &meta))
        return NULL;
    if (meta != Py_None && !PyDict_Check(meta)) {
        PyErr_SetString(PyExc_TypeError, "metadata must be a dict of str to str");
        return NULL;
    }
    Py_ssize_t n = PyDict_Size(dict), nm = meta == Py_None ? 0 : PyDict_Size(meta);
    const char **names = PyMem_Calloc((size_t)n + 1, sizeof *names);
    py_arg *arrs = PyMem_Calloc((size_t)n + 1, sizeof *arrs);
    emb_tensor *ts = PyMem_Calloc((size_t)n + 1, sizeof *ts);
    const char **mk = PyMem_Calloc((size_t)nm + 1, sizeof *mk);
    const char **mv = PyMem_Calloc((size_t)nm + 1, sizeof *mv);
    PyObject *path = NULL, *res = NULL;
    if (!names || !arrs || !ts || !mk || !mv) {
        PyErr_NoMemory();
        goto done;
    }
    unsigned any = PY_DT(EMB_FLOAT32) | PY_DT(EMB_FLOAT64) | PY_DT(EMB_FLOAT16) | PY_DT(EMB_INT64) |
                   PY_DT(EMB_INT32) | PY_DT(EMB_INT16) | PY_DT(EMB_INT8) | PY_DT(EMB_UINT8) |
                   PY_DT(EMB_BOOL);
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *v;
    while (PyDict_Next(dict, &pos, &k, &v)) {
        if (!(names[i] = PyUnicode_AsUTF8(k))) goto done;
        if (py_arg_get(v, names[i], any, 0, &arrs[i]) < 0) goto done;
        ts[i] = arrs[i].t;
        i++;
    }
    pos = 0;
    i = 0;
    while (nm && PyDict_Next(meta, &pos, &k, &v)) {
        if (!(mk[i] = PyUnicode_AsUTF8(k)) || !(mv[i] = PyUnicode_AsUTF8(v))) goto done;
        i++;
    }
    if (py_path(p, &path) < 0) goto done;
    emb_status st;
    PY_NOGIL(st, emb_safetensors_write(PyBytes_AS_STRING(path), n, names, ts, nm, mk, mv));
    if (st != EMB_OK)
        py_raise(st);
    else
        res = Py_NewRef(Py_None);
done:
    Py_XDECREF(path);
    if (arrs)
        for (Py_ssize_t j = 0; j < n; j++) py_arg_release(&arrs[j]);
    PyMem_Free(names);
    PyMem_Free(arrs);
    PyMem_Free(ts);
    PyMem_Free(mk);
    PyMem_Free(mv);
    return res;
}

/* map_safetensors(path, tensor=None) -> a read-only Embedding over the mapped file */
static PyObject *m_map_safetensors(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"path", "tensor", NULL};
    PyObject *p;
    const char *tensor = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|z:map_safetensors", names, &p, &tensor))
        return NULL;
    PyObject *path;
    if (py_path(p, &path) < 0) return NULL;
    emb_embedding *e;
    emb_status st;
    PY_NOGIL(st, emb_embedding_map_safetensors(PyBytes_AS_STRING(path), tensor, NULL, &e));
    Py_DECREF(path);
    if (st != EMB_OK) return py_raise(st);
    return py_embedding_from_handle(e, NULL);
}

static PyObject *m_spearman(PyObject *m, PyObject *args) {
    PyObject *x, *y;
    if (!PyArg_ParseTuple(args, "OO:spearman", &x, &y)) return NULL;
    py_arg xa, ya;
    if (py_arg_get(x, "x", PY_DT(EMB_FLOAT64), 0, &xa) < 0) return NULL;
    if (py_arg_get(y, "y", PY_DT(EMB_FLOAT64), 0, &ya) < 0) {
        py_arg_release(&xa);
        return NULL;
    }
    PyObject *res = NULL;
    int64_t n = emb_tensor_numel(&xa.t);
    if (n != emb_tensor_numel(&ya.t))
        PyErr_SetString(PyExc_ValueError, "x and y differ in length");
    else {
        double rho;
        emb_status st = emb_spearman(xa.t.data, ya.t.data, n, &rho);
        res = st == EMB_OK ? PyFloat_FromDouble(rho) : py_raise(st);
    }
    py_arg_release(&ya);
    py_arg_release(&xa);
    return res;
}

PyMethodDef py_io_functions[] = {
    {"read_vectors", (PyCFunction)(void (*)(void))m_read_vectors, METH_VARARGS | METH_KEYWORDS,
     "read_vectors(path, limit=0, format='auto', tensor=None, check_utf8=True) -> "
     "(words, counts, float32 array, info)"},
    {"write_vectors", (PyCFunction)(void (*)(void))m_write_vectors, METH_VARARGS | METH_KEYWORDS,
     "write_vectors(path, array, words=None, counts=None, format='auto', dtype='float32', "
     "tensor=None, precision=0, trailing_space=False, binary_newline=True)"},
    {"npy_read", (PyCFunction)m_npy_read, METH_O, "npy_read(path) -> array"},
    {"npy_write", (PyCFunction)m_npy_write, METH_VARARGS, "npy_write(path, array)"},
    {"safetensors_read", (PyCFunction)m_safetensors_read, METH_O,
     "safetensors_read(path) -> ({name: array}, metadata)"},
    {"safetensors_write", (PyCFunction)m_safetensors_write, METH_VARARGS,
     "safetensors_write(path, {name: array}, metadata=None)"},
    {"map_safetensors", (PyCFunction)(void (*)(void))m_map_safetensors,
     METH_VARARGS | METH_KEYWORDS,
     "map_safetensors(path, tensor=None) -> a read-only Embedding over the mapped file"},
    {"spearman", (PyCFunction)m_spearman, METH_VARARGS, "spearman(x, y) -> rho (float64 inputs)"},
    {NULL}};

int py_io_init(PyObject *m) {
    if (PyType_Ready(&py_knn_type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "Knn", (PyObject *)&py_knn_type) < 0) return -1;
    if (PyType_Ready(&py_fasttext_type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "FastText", (PyObject *)&py_fasttext_type) < 0) return -1;
    return py_qtable_init(m);
}
