/* py_module.c: the module emb._emb — argument conversion, errors, output arrays. */
#include "pyemb.h"

#include <math.h>
#include <string.h>

static PyObject *np_asarray; /* numpy.asarray */
static PyObject *np_empty;   /* numpy.empty */

/* ---------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------- */

static PyObject *err_base;          /* emb.Error */
static PyObject *err_by_status[16]; /* indexed by -status */

static const struct {
    emb_status st;
    const char *name;
    const char *doc;
} err_classes[] = {
    {EMB_ERR_INVALID, "InvalidArgumentError", "an argument has a value that is not allowed"},
    {EMB_ERR_NULL, "NullArgumentError", "a required argument is missing"},
    {EMB_ERR_NOMEM, "OutOfMemoryError", "memory allocation failed"},
    {EMB_ERR_INDEX, "IndexOutOfRangeError", "an index is out of range"},
    {EMB_ERR_DTYPE, "DtypeError", "an array has a dtype the call does not accept"},
    {EMB_ERR_SHAPE, "ShapeError", "an array has a shape the call does not accept"},
    {EMB_ERR_OVERFLOW, "OverflowError_", "a size or value overflows"},
    {EMB_ERR_UNSUPPORTED, "UnsupportedError", "a valid request this call cannot serve"},
    {EMB_ERR_STATE, "StateError", "the object is not in a state that allows the call"},
    {EMB_ERR_IO, "IOError_", "reading or writing a file failed"},
    {EMB_ERR_FORMAT, "FormatError", "a file or string is malformed"},
    {EMB_ERR_READ_ONLY, "ReadOnlyError", "the call would write read-only memory"},
    {EMB_ERR_CANCELLED, "CancelledError", "a long operation was stopped"},
    {EMB_ERR_NUMERIC, "NumericError", "a computation became NaN or infinite (training diverged)"},
};

static PyObject *builtin_for(emb_status st) {
    switch (st) {
    case EMB_ERR_NOMEM:
        return PyExc_MemoryError;
    case EMB_ERR_INDEX:
        return PyExc_IndexError;
    case EMB_ERR_DTYPE:
        return PyExc_TypeError;
    case EMB_ERR_NULL:
        return PyExc_TypeError;
    case EMB_ERR_OVERFLOW:
        return PyExc_OverflowError;
    case EMB_ERR_UNSUPPORTED:
        return PyExc_NotImplementedError;
    case EMB_ERR_STATE:
        return PyExc_RuntimeError;
    case EMB_ERR_IO:
        return PyExc_OSError;
    case EMB_ERR_CANCELLED:
        return PyExc_RuntimeError;
    case EMB_ERR_NUMERIC:
        return PyExc_ArithmeticError;
    default:
        return PyExc_ValueError; /* invalid, shape, format, read-only */
    }
}

int py_errors_init(PyObject *m) {
    err_base = PyErr_NewExceptionWithDoc("emb.Error",
                                         "An error reported by the emb library; .status is "
                                         "its emb_status code (negative).",
                                         PyExc_Exception, NULL);
    if (!err_base || PyModule_AddObjectRef(m, "Error", err_base) < 0) return -1;
    for (size_t i = 0; i < sizeof err_classes / sizeof err_classes[0]; i++) {
        char qual[64];
        snprintf(qual, sizeof qual, "emb.%s", err_classes[i].name);
        PyObject *bases = PyTuple_Pack(2, err_base, builtin_for(err_classes[i].st));
        if (!bases) return -1;
        PyObject *cls = PyErr_NewExceptionWithDoc(qual, err_classes[i].doc, bases, NULL);
        Py_DECREF(bases);
        if (!cls) return -1;
        err_by_status[-err_classes[i].st] = cls;
        if (PyModule_AddObjectRef(m, err_classes[i].name, cls) < 0) return -1;
    }
    return 0;
}

PyObject *py_raise(emb_status st) {
    if (PyErr_Occurred()) return NULL; /* a Python callback's exception wins */
    const char *msg = emb_errmsg();
    if (!msg || !*msg) msg = emb_status_str(st);
    PyObject *cls = (st < 0 && -st < 16 && err_by_status[-st]) ? err_by_status[-st] : err_base;
    PyObject *exc = PyObject_CallFunction(cls, "s", msg);
    if (!exc) return NULL;
    PyObject *code = PyLong_FromLong(st);
    if (code) {
        PyObject_SetAttrString(exc, "status", code);
        Py_DECREF(code);
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

/* ---------------------------------------------------------------------------------------
 * Arrays
 * ------------------------------------------------------------------------------------- */

static const char *dtype_names(unsigned mask, char *buf, size_t n) {
    buf[0] = 0;
    int first = 1;
    for (int d = 0; d <= EMB_BOOL; d++) {
        if (!(mask & PY_DT(d))) continue;
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s", first ? "" : " or ", emb_dtype_name((emb_dtype)d));
        first = 0;
    }
    return buf;
}

/* The emb dtype of a struct-module format with the given item size, or -1. */
static int format_dtype(const char *fmt, Py_ssize_t itemsize) {
    if (!fmt) return EMB_UINT8; /* plain bytes */
    if (*fmt == '@' || *fmt == '=' || *fmt == '<')
        fmt++;
    else if (*fmt == '>' || *fmt == '!')
        return -2; /* big-endian */
    if (!fmt[0] || fmt[1]) return -1;
    switch (fmt[0]) {
    case 'f':
        return itemsize == 4 ? EMB_FLOAT32 : -1;
    case 'd':
        return itemsize == 8 ? EMB_FLOAT64 : -1;
    case 'e':
        return itemsize == 2 ? EMB_FLOAT16 : -1;
    case 'q':
    case 'l':
        return itemsize == 8 ? EMB_INT64 : itemsize == 4 ? EMB_INT32 : -1;
    case 'i':
        return itemsize == 4 ? EMB_INT32 : -1;
    case 'h':
        return itemsize == 2 ? EMB_INT16 : -1;
    case 'b':
        return itemsize == 1 ? EMB_INT8 : -1;
    case 'B':
        return itemsize == 1 ? EMB_UINT8 : -1;
    case '?':
        return itemsize == 1 ? EMB_BOOL : -1;
    default:
        return -1;
    }
}

static const char *format_name(const char *fmt, Py_ssize_t itemsize, char *buf, size_t n) {
    /* numpy's names for the formats emb does not take, for messages */
    static const struct {
        char c;
        const char *name;
    } names[] = {{'d', "float64"}, {'f', "float32"}, {'e', "float16"}, {'g', "float128"},
                 {'Q', "uint64"},  {'L', "uint64"},  {'I', "uint32"},  {'H', "uint16"},
                 {'Z', "complex"}, {'O', "object"},  {'q', "int64"},   {'l', "int64"},
                 {'i', "int32"},   {'h', "int16"},   {'b', "int8"},    {'B', "uint8"},
                 {'?', "bool"}};
    const char *f = fmt ? fmt : "B";
    if (*f == '@' || *f == '=' || *f == '<' || *f == '>' || *f == '!') f++;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (f[0] == names[i].c) {
            snprintf(buf, n, "%s%s", names[i].name,
                     (fmt && (fmt[0] == '>' || fmt[0] == '!')) ? " (big-endian)" : "");
            return buf;
        }
    snprintf(buf, n, "format '%s' (%zd bytes per item)", fmt ? fmt : "B", itemsize);
    return buf;
}

void py_arg_release(py_arg *a) {
    if (a->held) {
        PyBuffer_Release(&a->view);
        a->held = 0;
    }
    PyMem_Free(a->copy);
    a->copy = NULL;
}

int py_arg_get(PyObject *obj, const char *what, unsigned dtypes, int flags, py_arg *a) {
    memset(a, 0, sizeof *a);
    if (obj == NULL || obj == Py_None) {
        if (flags & PY_ARG_OPTIONAL) return 0;
        PyErr_Format(PyExc_TypeError, "%s must be an array, got None", what);
        return -1;
    }
    int want_write = flags & PY_ARG_WRITE;
    int bflags = PyBUF_RECORDS_RO | (want_write ? PyBUF_WRITABLE : 0);
    PyObject *tmp = NULL;
    if (PyObject_GetBuffer(obj, &a->view, bflags) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError) || PyObject_CheckBuffer(obj)) {
            if (want_write && PyObject_CheckBuffer(obj)) { /* a read-only buffer */
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError,
                             "%s must be writable (emb writes into it), "
                             "got a read-only %.100s",
                             what, Py_TYPE(obj)->tp_name);
            }
            return -1;
        }
        /* not a buffer: numpy.asarray (lists, torch CPU tensors, ...) */
        PyErr_Clear();
        tmp = PyObject_CallOneArg(np_asarray, obj);
        if (!tmp) return -1;
        if (PyObject_GetBuffer(tmp, &a->view, bflags) < 0) {
            Py_DECREF(tmp);
            return -1;
        }
        Py_DECREF(tmp); /* the view holds its own reference */
    }
    a->held = 1;
    a->present = 1;
    char names[96], got[64];
    int dt = format_dtype(a->view.format, a->view.itemsize);
    if (dt < 0 || !(dtypes & PY_DT(dt))) {
        PyErr_Format(PyExc_TypeError, "%s must be %s, got %s", what,
                     dtype_names(dtypes, names, sizeof names),
                     format_name(a->view.format, a->view.itemsize, got, sizeof got));
        goto fail;
    }
    if (a->view.ndim > EMB_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s has %d dimensions; emb takes at most %d", what,
                     a->view.ndim, EMB_MAX_DIMS);
        goto fail;
    }
    int contiguous = PyBuffer_IsContiguous(&a->view, 'C');
    int aligned = ((uintptr_t)a->view.buf % (uintptr_t)a->view.itemsize) == 0;
    void *data = a->view.buf;
    if (!contiguous || !aligned) {
        if (flags & (PY_ARG_WRITE | PY_ARG_KEEP)) {
            PyErr_Format(PyExc_ValueError,
                         "%s must be %s: emb %s it in place and does not copy it "
                         "(numpy.ascontiguousarray gives such an array)",
                         what, !contiguous ? "C-contiguous" : "aligned to its item size",
                         want_write ? "writes" : "keeps");
            goto fail;
        }
        a->copy = PyMem_Malloc(a->view.len ? (size_t)a->view.len : 1);
        if (!a->copy) {
            PyErr_NoMemory();
            goto fail;
        }
        if (PyBuffer_ToContiguous(a->copy, &a->view, a->view.len, 'C') < 0) goto fail;
        data = a->copy;
    }
    int64_t shape[EMB_MAX_DIMS];
    for (int i = 0; i < a->view.ndim; i++) shape[i] = a->view.shape ? a->view.shape[i] : 0;
    if (a->view.ndim == 1 && !a->view.shape) shape[0] = a->view.len / a->view.itemsize;
    emb_status st = emb_tensor_init(&a->t, (emb_dtype)dt, data, a->view.ndim, shape);
    if (st != EMB_OK) {
        py_raise(st);
        goto fail;
    }
    return 0;
fail:
    py_arg_release(a);
    return -1;
}

int py_fill_buffer_2d(Py_buffer *view, PyObject *obj, void *buf, Py_ssize_t rows, Py_ssize_t cols,
                      Py_ssize_t itemsize, const char *format, int readonly, Py_ssize_t *shape,
                      Py_ssize_t *strides, int flags) {
    shape[0] = rows;
    shape[1] = cols;
    strides[0] = cols * itemsize;
    strides[1] = itemsize;
    view->obj = Py_NewRef(obj);
    view->buf = buf;
    view->len = rows * cols * itemsize;
    view->readonly = readonly;
    view->itemsize = itemsize;
    view->format = (flags & PyBUF_FORMAT) ? (char *)format : NULL;
    view->ndim = 2;
    view->shape = (flags & PyBUF_ND) ? shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) ? strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

PyObject *py_shape_tuple(int ndim, const int64_t *shape) {
    PyObject *t = PyTuple_New(ndim);
    if (!t) return NULL;
    for (int i = 0; i < ndim; i++) {
        PyObject *v = PyLong_FromLongLong(shape[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

PyObject *py_new_array(emb_dtype dtype, int ndim, const int64_t *shape, emb_tensor *t) {
    PyObject *shp = py_shape_tuple(ndim, shape);
    if (!shp) return NULL;
    PyObject *arr = PyObject_CallFunction(np_empty, "Os", shp, emb_dtype_name(dtype));
    Py_DECREF(shp);
    if (!arr) return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(arr, &v, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    void *data = v.buf;
    PyBuffer_Release(&v); /* the array owns the memory; it stays where it is */
    emb_status st = emb_tensor_init(t, dtype, data, ndim, shape);
    if (st != EMB_OK) {
        Py_DECREF(arr);
        return py_raise(st);
    }
    return arr;
}

PyObject *py_asarray(PyObject *obj) {
    return PyObject_CallOneArg(np_asarray, obj);
}

/* ---------------------------------------------------------------------------------------
 * Locks and small parsers
 * ------------------------------------------------------------------------------------- */

py_lock py_generator_lock;

int py_lock_init(py_lock *l) {
    l->lock = PyThread_allocate_lock();
    if (!l->lock) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

void py_lock_free(py_lock *l) {
    if (l->lock) PyThread_free_lock(l->lock);
    l->lock = NULL;
}

int py_padding_idx(PyObject *obj, int64_t *out) {
    if (!obj || obj == Py_None) {
        *out = EMB_PADDING_NONE;
        return 0;
    }
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v == (long long)EMB_PADDING_NONE) {
        PyErr_SetString(PyExc_ValueError, "padding_idx is out of range");
        return -1;
    }
    *out = v;
    return 0;
}

int py_max_norm(PyObject *obj, double *out) {
    if (!obj || obj == Py_None) {
        *out = INFINITY;
        return 0;
    }
    double v = PyFloat_AsDouble(obj);
    if (v == -1.0 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

int py_path(PyObject *obj, PyObject **bytes_out) {
    *bytes_out = NULL;
    return PyUnicode_FSConverter(obj, bytes_out) ? 0 : -1;
}

/* ---------------------------------------------------------------------------------------
 * Module-level functions of this file
 * ------------------------------------------------------------------------------------- */

static PyObject *m_set_num_threads(PyObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0 || n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "set_num_threads: n must be >= 0 (0: the default)");
        return NULL;
    }
    emb_set_num_threads((int)n);
    Py_RETURN_NONE;
}

static PyObject *m_get_num_threads(PyObject *self, PyObject *unused) {
    return PyLong_FromLong(emb_get_num_threads());
}

static PyObject *m_set_kernel_mode(PyObject *self, PyObject *arg) {
    const char *s = PyUnicode_AsUTF8(arg);
    if (!s) return NULL;
    emb_kernel_mode m;
    if (!strcmp(s, "auto"))
        m = EMB_KERNELS_AUTO;
    else if (!strcmp(s, "ref"))
        m = EMB_KERNELS_REF;
    else if (!strcmp(s, "avx2"))
        m = EMB_KERNELS_AVX2;
    else {
        PyErr_Format(PyExc_ValueError, "kernel mode must be 'auto', 'ref' or 'avx2', got '%s'", s);
        return NULL;
    }
    emb_set_kernel_mode(m);
    Py_RETURN_NONE;
}

static PyObject *m_get_kernel_mode(PyObject *self, PyObject *unused) {
    switch (emb_get_kernel_mode()) {
    case EMB_KERNELS_REF:
        return PyUnicode_FromString("ref");
    case EMB_KERNELS_AVX2:
        return PyUnicode_FromString("avx2");
    default:
        return PyUnicode_FromString("auto");
    }
}

static PyMethodDef module_functions[] = {
    {"set_num_threads", m_set_num_threads, METH_O,
     "set_num_threads(n): threads emb's loops may use (0: the default). Results never "
     "depend on it."},
    {"get_num_threads", m_get_num_threads, METH_NOARGS, "get_num_threads() -> int"},
    {"set_kernel_mode", m_set_kernel_mode, METH_O,
     "set_kernel_mode('auto' | 'ref' | 'avx2'): which kernel variants run."},
    {"get_kernel_mode", m_get_kernel_mode, METH_NOARGS, "get_kernel_mode() -> str"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "emb._emb",
    "The C extension behind the emb package (use `import emb`).",
    -1,
    module_functions,
    NULL,
    NULL,
    NULL,
    NULL};

static int add_functions(PyObject *m, PyMethodDef *defs) {
    return PyModule_AddFunctions(m, defs);
}

PyMODINIT_FUNC PyInit__emb(void); /* the one symbol the module exports */
PyMODINIT_FUNC PyInit__emb(void) {
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np) return NULL;
    np_asarray = PyObject_GetAttrString(np, "asarray");
    np_empty = PyObject_GetAttrString(np, "empty");
    Py_DECREF(np);
    if (!np_asarray || !np_empty) return NULL;
    if (!py_generator_lock.lock && py_lock_init(&py_generator_lock) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (py_errors_init(m) < 0 || add_functions(m, py_table_functions) < 0 ||
        add_functions(m, py_train_functions) < 0 || add_functions(m, py_io_functions) < 0 ||
        add_functions(m, py_random_functions) < 0 || add_functions(m, py_project_functions) < 0 ||
        add_functions(m, py_print_functions) < 0 || add_functions(m, py_linear_functions) < 0 ||
        add_functions(m, py_renorm_functions) < 0 || add_functions(m, py_sparse_functions) < 0 ||
        py_sparse_init(m) < 0 || py_linear_init(m) < 0 || py_random_init(m) < 0 ||
        py_tables_init(m) < 0 || py_train_init(m) < 0 || py_io_init(m) < 0 ||
        PyModule_AddStringConstant(m, "__version__", emb_version()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
