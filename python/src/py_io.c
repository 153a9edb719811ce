/* py_io.c: files (word vectors, safetensors, npy), quantized tables and the k-NN index. */
#include "pyemb.h"

#include <string.h>

/* ---- vocabularies <-> lists of str ---- */

static int vocab_from_list(PyObject *words, PyObject *counts, emb_vocab **out) {
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
    if (words != Py_None && vocab_from_list(words, counts, &v) < 0) return NULL;
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

/* ---------------------------------------------------------------------------------------
 * QTable
 * ------------------------------------------------------------------------------------- */

typedef struct py_qtable {
    PyObject_HEAD emb_qtable *q;
    PyObject *words, *counts; /* from a file, or None */
    Py_ssize_t shape[2], strides[2];
} py_qtable;

static void qtable_dealloc(py_qtable *self) {
    emb_qtable_free(self->q);
    Py_CLEAR(self->words);
    Py_CLEAR(self->counts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *qtable_wrap(emb_qtable *q, emb_vocab *v) {
    py_qtable *self = PyObject_New(py_qtable, &py_qtable_type);
    if (!self) {
        emb_qtable_free(q);
        emb_vocab_free(v);
        return NULL;
    }
    self->q = q;
    self->words = self->counts = NULL;
    PyObject *wc = py_vocab_lists(v);
    emb_vocab_free(v);
    if (!wc) {
        Py_DECREF(self);
        return NULL;
    }
    self->words = Py_NewRef(PyTuple_GET_ITEM(wc, 0));
    self->counts = Py_NewRef(PyTuple_GET_ITEM(wc, 1));
    Py_DECREF(wc);
    return (PyObject *)self;
}

static PyObject *qtable_quantize(PyObject *cls, PyObject *args) {
    PyObject *arr;
    const char *qt;
    if (!PyArg_ParseTuple(args, "Os:quantize", &arr, &qt)) return NULL;
    emb_qtype q;
    emb_status st = emb_qtype_parse(qt, &q);
    if (st != EMB_OK) return py_raise(st);
    py_arg a;
    if (py_arg_get(arr, "weight", PY_DT_F32, 0, &a) < 0) return NULL;
    emb_qtable *t;
    PY_NOGIL(st, emb_qtable_quantize(&a.t, q, &t));
    py_arg_release(&a);
    if (st != EMB_OK) return py_raise(st);
    return qtable_wrap(t, NULL);
}

static PyObject *qtable_open(PyObject *args, int map) {
    PyObject *p;
    if (!PyArg_ParseTuple(args, "O", &p)) return NULL;
    PyObject *path;
    if (py_path(p, &path) < 0) return NULL;
    emb_qtable *t;
    emb_vocab *v = NULL;
    emb_status st;
    PY_NOGIL(st, map ? emb_qtable_map(PyBytes_AS_STRING(path), &t, &v)
                     : emb_qtable_load(PyBytes_AS_STRING(path), &t, &v));
    Py_DECREF(path);
    if (st != EMB_OK) return py_raise(st);
    return qtable_wrap(t, v);
}

static PyObject *qtable_load(PyObject *cls, PyObject *args) {
    return qtable_open(args, 0);
}
static PyObject *qtable_map(PyObject *cls, PyObject *args) {
    return qtable_open(args, 1);
}

static PyObject *qtable_save(py_qtable *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"path", "words", "counts", NULL};
    PyObject *p, *words = Py_None, *counts = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO:save", names, &p, &words, &counts))
        return NULL;
    emb_vocab *v = NULL;
    if (words != Py_None && vocab_from_list(words, counts, &v) < 0) return NULL;
    PyObject *path;
    if (py_path(p, &path) < 0) {
        emb_vocab_free(v);
        return NULL;
    }
    emb_status st;
    PY_NOGIL(st, emb_qtable_save(PyBytes_AS_STRING(path), self->q, v));
    Py_DECREF(path);
    emb_vocab_free(v);
    if (st != EMB_OK) return py_raise(st);
    Py_RETURN_NONE;
}

static PyObject *qtable_forward(py_qtable *self, PyObject *indices) {
    py_arg ix;
    if (py_arg_get(indices, "indices", PY_DT_INDEX, 0, &ix) < 0) return NULL;
    PyObject *out = NULL;
    if (ix.t.ndim >= EMB_MAX_DIMS) {
        PyErr_SetString(PyExc_ValueError, "indices have more than 8 dimensions");
        goto done;
    }
    int64_t shape[EMB_MAX_DIMS];
    memcpy(shape, ix.t.shape, sizeof(int64_t) * (size_t)ix.t.ndim);
    shape[ix.t.ndim] = emb_qtable_dim(self->q);
    emb_tensor o;
    out = py_new_array(EMB_FLOAT32, ix.t.ndim + 1, shape, &o);
    if (!out) goto done;
    emb_status st;
    PY_NOGIL(st, emb_qtable_forward(self->q, &ix.t, &o)); /* tables are immutable: no lock */
    if (st != EMB_OK) {
        Py_CLEAR(out);
        py_raise(st);
    }
done:
    py_arg_release(&ix);
    return out;
}

static PyObject *qtable_bag(py_qtable *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"input",
                            "offsets",
                            "per_sample_weights",
                            "mode",
                            "padding_idx",
                            "include_last_offset",
                            "return_max_indices",
                            NULL};
    PyObject *input, *offsets = Py_None, *psw = Py_None, *pad = Py_None;
    const char *mode = "mean";
    int ilo = 0, want_mi = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOsOpp:bag", names, &input, &offsets, &psw, &mode,
                                     &pad, &ilo, &want_mi))
        return NULL;
    emb_bag_options o = emb_bag_options_default();
    if (!strcmp(mode, "sum"))
        o.mode = EMB_BAG_SUM;
    else if (!strcmp(mode, "mean"))
        o.mode = EMB_BAG_MEAN;
    else if (!strcmp(mode, "max"))
        o.mode = EMB_BAG_MAX;
    else {
        PyErr_Format(PyExc_ValueError, "mode has to be one of sum, mean or max, got '%s'", mode);
        return NULL;
    }
    if (py_padding_idx(pad, &o.padding_idx) < 0) return NULL;
    o.include_last_offset = ilo;
    py_arg in = {0}, of = {0}, pw = {0};
    PyObject *out = NULL;
    if (py_arg_get(input, "input", PY_DT_INDEX, 0, &in) < 0 ||
        py_arg_get(offsets, "offsets", PY_DT_INDEX, PY_ARG_OPTIONAL, &of) < 0 ||
        py_arg_get(psw, "per_sample_weights", PY_DT_F32, PY_ARG_OPTIONAL, &pw) < 0)
        goto done;
    int64_t nb = in.t.ndim == 2                   ? in.t.shape[0]
                 : (of.present && of.t.ndim == 1) ? of.t.shape[0] - (ilo && of.t.shape[0] ? 1 : 0)
                                                  : 0;
    int64_t shape[2] = {nb, emb_qtable_dim(self->q)};
    emb_tensor ot, mt;
    PyObject *mi = NULL;
    out = py_new_array(EMB_FLOAT32, 2, shape, &ot);
    if (!out) goto done;
    if (o.mode == EMB_BAG_MAX && !(mi = py_new_array(EMB_INT64, 2, shape, &mt))) {
        Py_CLEAR(out);
        goto done;
    }
    emb_status st;
    PY_NOGIL(st, emb_qtable_bag_forward(self->q, &in.t, of.present ? &of.t : NULL,
                                        pw.present ? &pw.t : NULL, &o, &ot, mi ? &mt : NULL));
    if (st != EMB_OK) {
        Py_CLEAR(out);
        py_raise(st);
    } else if (want_mi) {
        PyObject *pair = PyTuple_Pack(2, out, mi ? mi : Py_None);
        Py_SETREF(out, pair);
    }
    Py_XDECREF(mi);
done:
    py_arg_release(&pw);
    py_arg_release(&of);
    py_arg_release(&in);
    return out;
}

static PyObject *qtable_dequantize(py_qtable *self, PyObject *unused) {
    int64_t shape[2] = {emb_qtable_num_rows(self->q), emb_qtable_dim(self->q)};
    emb_tensor o;
    PyObject *out = py_new_array(EMB_FLOAT32, 2, shape, &o);
    if (!out) return NULL;
    emb_status st;
    PY_NOGIL(st, emb_qtable_dequantize(self->q, 0, shape[0], o.data));
    if (st != EMB_OK) {
        Py_DECREF(out);
        return py_raise(st);
    }
    return out;
}

/* the stored rows as read-only uint8 [rows, row_bytes] */
static int qtable_getbuffer(py_qtable *self, Py_buffer *view, int flags) {
    if (flags & PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError, "a QTable is read-only");
        return -1;
    }
    return py_fill_buffer_2d(view, (PyObject *)self, (void *)emb_qtable_data(self->q),
                             (Py_ssize_t)emb_qtable_num_rows(self->q),
                             (Py_ssize_t)emb_qtable_row_nbytes(self->q), 1, "B", 1, self->shape,
                             self->strides, flags);
}

static PyBufferProcs qtable_buffer = {(getbufferproc)qtable_getbuffer, NULL};

static PyObject *qtable_get_qtype(py_qtable *self, void *c) {
    return PyUnicode_FromString(emb_qtype_name(emb_qtable_qtype(self->q)));
}
static PyObject *qtable_get_num_rows(py_qtable *self, void *c) {
    return PyLong_FromLongLong(emb_qtable_num_rows(self->q));
}
static PyObject *qtable_get_dim(py_qtable *self, void *c) {
    return PyLong_FromLongLong(emb_qtable_dim(self->q));
}
static PyObject *qtable_get_words(py_qtable *self, void *c) {
    return Py_NewRef(self->words);
}
static PyObject *qtable_get_counts(py_qtable *self, void *c) {
    return Py_NewRef(self->counts);
}

static PyMethodDef qtable_methods[] = {
    {"quantize", (PyCFunction)qtable_quantize, METH_VARARGS | METH_CLASS,
     "QTable.quantize(weight, qtype): qtype 'f32', 'f16', 'bf16', 'int8' or 'int4'"},
    {"load", (PyCFunction)qtable_load, METH_VARARGS | METH_CLASS, "QTable.load(path)"},
    {"map", (PyCFunction)qtable_map, METH_VARARGS | METH_CLASS,
     "QTable.map(path): memory-mapped, read on first touch"},
    {"save", (PyCFunction)(void (*)(void))qtable_save, METH_VARARGS | METH_KEYWORDS,
     "save(path, words=None, counts=None)"},
    {"forward", (PyCFunction)qtable_forward, METH_O, "forward(indices) -> float32"},
    {"bag", (PyCFunction)(void (*)(void))qtable_bag, METH_VARARGS | METH_KEYWORDS,
     "bag(input, offsets=None, per_sample_weights=None, mode='mean', padding_idx=None, "
     "include_last_offset=False, return_max_indices=False) -> float32 [B, dim] (and "
     "max_indices in mode max, else None)"},
    {"dequantize", (PyCFunction)qtable_dequantize, METH_NOARGS, "dequantize() -> float32 [V, D]"},
    {NULL}};

static PyGetSetDef qtable_getset[] = {
    {"qtype", (getter)qtable_get_qtype, NULL, NULL, NULL},
    {"num_rows", (getter)qtable_get_num_rows, NULL, NULL, NULL},
    {"dim", (getter)qtable_get_dim, NULL, NULL, NULL},
    {"words", (getter)qtable_get_words, NULL, "the file's words, or None", NULL},
    {"counts", (getter)qtable_get_counts, NULL, NULL, NULL},
    {NULL}};

PyTypeObject py_qtable_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emb._emb.QTable",
    .tp_basicsize = sizeof(py_qtable),
    .tp_dealloc = (destructor)qtable_dealloc,
    .tp_as_buffer = &qtable_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A read-only table stored as f32, f16, bf16, int8 or int4 rows "
              "(QTable.quantize, QTable.load, QTable.map).",
    .tp_methods = qtable_methods,
    .tp_getset = qtable_getset,
};

/* ---------------------------------------------------------------------------------------
 * Knn
 * ------------------------------------------------------------------------------------- */

typedef struct py_knn {
    PyObject_HEAD emb_knn *index;
    py_arg table;    /* a float32 table it reads (kept: the index borrows it) */
    PyObject *owner; /* or the QTable / Embedding it reads */
} py_knn;

static void knn_dealloc(py_knn *self) {
    emb_knn_free(self->index);
    py_arg_release(&self->table);
    Py_CLEAR(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int knn_init(py_knn *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"table", "num_rows", NULL};
    PyObject *t;
    long long nrows = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|L:Knn", names, &t, &nrows)) return -1;
    if (self->index) {
        PyErr_SetString(PyExc_RuntimeError, "Knn is already initialised");
        return -1;
    }
    emb_status st;
    if (PyObject_TypeCheck(t, &py_qtable_type)) {
        PY_NOGIL(st, emb_knn_create_from_qtable(((py_qtable *)t)->q, nrows, &self->index));
        if (st == EMB_OK) self->owner = Py_NewRef(t);
    } else {
        /* an array or an Embedding (through its buffer): kept, not copied */
        if (py_arg_get(t, "table", PY_DT_F32, PY_ARG_KEEP, &self->table) < 0) return -1;
        PY_NOGIL(st, emb_knn_create(&self->table.t, nrows, &self->index));
        if (st != EMB_OK) py_arg_release(&self->table);
    }
    if (st != EMB_OK) {
        py_raise(st);
        return -1;
    }
    return 0;
}

static int knn_ready(py_knn *self) {
    if (!self->index) {
        PyErr_SetString(PyExc_RuntimeError, "the index was not initialised");
        return -1;
    }
    return 0;
}

/* The result arrays of a search, ids int64 [nq, k] and scores float32 [nq, k]; -1 with an
 * exception set (ValueError for k < 1). */
static int knn_results(int64_t nq, long long k, PyObject **ids, PyObject **sc, emb_tensor *it,
                       emb_tensor *st) {
    if (k < 1) {
        PyErr_SetString(PyExc_ValueError, "k must be at least 1");
        return -1;
    }
    int64_t shape[2] = {nq, k};
    *ids = py_new_array(EMB_INT64, 2, shape, it);
    *sc = *ids ? py_new_array(EMB_FLOAT32, 2, shape, st) : NULL;
    return *sc ? 0 : -1;
}

/* search(queries [Q, D], k, exclude=None [Q, n]) -> (ids int64 [Q, k], scores float32 [Q, k]) */
static PyObject *knn_search(py_knn *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"queries", "k", "exclude", NULL};
    PyObject *q, *ex = Py_None;
    long long k;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OL|O:search", names, &q, &k, &ex)) return NULL;
    if (knn_ready(self) < 0) return NULL;
    py_arg qa = {0}, ea = {0};
    PyObject *ids = NULL, *sc = NULL, *res = NULL;
    if (py_arg_get(q, "queries", PY_DT_F32, 0, &qa) < 0 ||
        py_arg_get(ex, "exclude", PY_DT(EMB_INT64), PY_ARG_OPTIONAL, &ea) < 0)
        goto done;
    int64_t nq = qa.t.ndim == 2 ? qa.t.shape[0] : 0;
    int64_t nex = 0;
    if (ea.present) {
        if (ea.t.ndim != 2 || ea.t.shape[0] != nq) {
            PyErr_SetString(PyExc_ValueError, "exclude must be int64 [Q, n] (one row per query)");
            goto done;
        }
        nex = ea.t.shape[1];
    }
    emb_tensor it, st_;
    if (knn_results(nq, k, &ids, &sc, &it, &st_) < 0) goto done;
    emb_status st;
    PY_NOGIL(st, emb_knn_search(self->index, &qa.t, k, ea.present ? ea.t.data : NULL, nex, it.data,
                                st_.data));
    res = st != EMB_OK ? py_raise(st) : PyTuple_Pack(2, ids, sc);
done:
    Py_XDECREF(ids);
    Py_XDECREF(sc);
    py_arg_release(&ea);
    py_arg_release(&qa);
    return res;
}

/* analogy(abc int64 [Q, 3], k) -> (ids, scores) */
static PyObject *knn_analogy(py_knn *self, PyObject *args) {
    PyObject *abc;
    long long k;
    if (!PyArg_ParseTuple(args, "OL:analogy", &abc, &k)) return NULL;
    if (knn_ready(self) < 0) return NULL;
    py_arg a;
    if (py_arg_get(abc, "abc", PY_DT(EMB_INT64), 0, &a) < 0) return NULL;
    PyObject *ids = NULL, *sc = NULL, *res = NULL;
    if (a.t.ndim != 2 || a.t.shape[1] != 3) {
        PyErr_SetString(PyExc_ValueError, "abc must be int64 [Q, 3]");
        goto done;
    }
    emb_tensor it, stt;
    if (knn_results(a.t.shape[0], k, &ids, &sc, &it, &stt) < 0) goto done;
    emb_status st;
    PY_NOGIL(st, emb_knn_analogy(self->index, a.t.data, a.t.shape[0], k, it.data, stt.data));
    res = st != EMB_OK ? py_raise(st) : PyTuple_Pack(2, ids, sc);
done:
    Py_XDECREF(ids);
    Py_XDECREF(sc);
    py_arg_release(&a);
    return res;
}

static PyObject *knn_get_num_rows(py_knn *self, void *c) {
    return PyLong_FromLongLong(emb_knn_num_rows(self->index));
}

static PyMethodDef knn_methods[] = {
    {"search", (PyCFunction)(void (*)(void))knn_search, METH_VARARGS | METH_KEYWORDS,
     "search(queries, k, exclude=None) -> (ids [Q, k], cosine similarities [Q, k])"},
    {"analogy", (PyCFunction)knn_analogy, METH_VARARGS,
     "analogy(abc [Q, 3], k) -> (ids, scores): b - a + c, excluding a, b, c"},
    {NULL}};

static PyGetSetDef knn_getset[] = {{"num_rows", (getter)knn_get_num_rows, NULL, NULL, NULL},
                                   {NULL}};

PyTypeObject py_knn_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emb._emb.Knn",
    .tp_basicsize = sizeof(py_knn),
    .tp_dealloc = (destructor)knn_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Knn(table, num_rows=0): a cosine-similarity index over the first num_rows rows "
              "(0: all) of a float32 table, an Embedding or a QTable, which it keeps alive and "
              "reads in place: rows changed after the index was built give stale norms.",
    .tp_methods = knn_methods,
    .tp_getset = knn_getset,
    .tp_init = (initproc)knn_init,
    .tp_new = PyType_GenericNew,
};

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
    if (PyType_Ready(&py_qtable_type) < 0 || PyType_Ready(&py_knn_type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "QTable", (PyObject *)&py_qtable_type) < 0 ||
        PyModule_AddObjectRef(m, "Knn", (PyObject *)&py_knn_type) < 0)
        return -1;
    return 0;
}
