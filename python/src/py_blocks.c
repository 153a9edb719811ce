/* py_blocks.c: arrays over memory the module manages itself.
 *
 * - The fresh dense gradients of the functional backward passes (emb.torch's modules) are
 *   written into blocks taken from a small cache of freed ones. A new allocation of
 *   megabytes is mapped by the C library from fresh pages, which the kernel faults in and
 *   zeroes one 4 KiB page at a time on first write: for a gradient that is written once and
 *   freed every training step, that page work costs as much as the backward itself. A
 *   cached block is already mapped. A block goes back to the cache only when the last
 *   array viewing it is gone, so no array ever shares memory with another.
 * - The sparse gradients emb computes into storage of its own are handed to numpy as they
 *   are (the arrays own that storage) instead of being copied. */
#include "py_tables.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Blocks smaller than this come from the C library's heap, which reuses them without
 * faulting (and costs nothing to cache). */
#define BLOCK_MIN_BYTES ((size_t)256 << 10)
#define CACHE_SLOTS     4
/* The cache never holds more than this, nor any block larger. */
#define CACHE_MAX_BYTES ((size_t)1 << 30)
#define BLOCK_ALIGN     4096

/* Blocks are mapped directly: outside the C library's heap, whose trimming would otherwise
 * depend on where they sit. */
static void *block_alloc(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void block_free(void *p, size_t bytes) {
    munmap(p, bytes);
}

typedef struct py_block {
    PyObject_HEAD void *data;
    size_t bytes;        /* allocated bytes of a cached block (0: not cache-managed) */
    emb_sparse_grad *sg; /* the emb sparse gradient whose storage this block owns, or NULL */
    PyObject *owner;     /* the block that owns `data`, or NULL */
    int ndim;
    Py_ssize_t itemsize;
    const char *format;
    Py_ssize_t shape[EMB_MAX_DIMS];
    Py_ssize_t strides[EMB_MAX_DIMS];
} py_block;

static struct {
    void *data[CACHE_SLOTS];
    size_t bytes[CACHE_SLOTS]; /* 0: empty slot */
    size_t total;
} cache; /* touched with the GIL held only */

static void *cache_take(size_t bytes) {
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (cache.bytes[i] == bytes) {
            cache.bytes[i] = 0;
            cache.total -= bytes;
            return cache.data[i];
        }
    return NULL;
}

/* Keeps a freed block (evicting the smallest cached ones to make room) or frees it. */
static void cache_give(void *data, size_t bytes) {
    if (bytes > CACHE_MAX_BYTES) {
        block_free(data, bytes);
        return;
    }
    for (;;) {
        int empty = -1, smallest = -1;
        for (int i = 0; i < CACHE_SLOTS; i++) {
            if (!cache.bytes[i])
                empty = i;
            else if (smallest < 0 || cache.bytes[i] < cache.bytes[smallest])
                smallest = i;
        }
        if (empty >= 0 && cache.total + bytes <= CACHE_MAX_BYTES) {
            cache.data[empty] = data;
            cache.bytes[empty] = bytes;
            cache.total += bytes;
            return;
        }
        if (smallest < 0 || cache.bytes[smallest] > bytes) {
            block_free(data, bytes);
            return;
        }
        block_free(cache.data[smallest], cache.bytes[smallest]);
        cache.total -= cache.bytes[smallest];
        cache.bytes[smallest] = 0;
    }
}

PyObject *py_empty_cache(PyObject *m, PyObject *unused) {
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (cache.bytes[i]) {
            block_free(cache.data[i], cache.bytes[i]);
            cache.bytes[i] = 0;
        }
    cache.total = 0;
    Py_RETURN_NONE;
}

PyObject *py_cached_bytes(PyObject *m, PyObject *unused) {
    return PyLong_FromSize_t(cache.total);
}

static void block_dealloc(py_block *b) {
    if (b->sg) {
        emb_sparse_grad_release(b->sg);
        PyMem_Free(b->sg);
    } else if (b->bytes) {
        cache_give(b->data, b->bytes);
    }
    Py_XDECREF(b->owner);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static int block_getbuffer(py_block *b, Py_buffer *view, int flags) {
    Py_ssize_t len = b->itemsize;
    for (int i = 0; i < b->ndim; i++) len *= b->shape[i];
    view->obj = Py_NewRef((PyObject *)b);
    view->buf = b->data;
    view->len = len;
    view->readonly = 0;
    view->itemsize = b->itemsize;
    view->format = (flags & PyBUF_FORMAT) ? (char *)b->format : NULL;
    view->ndim = b->ndim;
    view->shape = (flags & PyBUF_ND) ? b->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) ? b->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static PyBufferProcs block_as_buffer = {(getbufferproc)block_getbuffer, NULL};

static PyTypeObject block_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emb._emb._Block",
    .tp_basicsize = sizeof(py_block),
    .tp_dealloc = (destructor)block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "memory behind arrays the module returns (cached gradient blocks, emb's sparse "
              "gradients)",
};

/* A new block describing ndim/shape items of `dtype` at data (not yet owning anything). */
static py_block *block_new(void *data, emb_dtype dtype, int ndim, const int64_t *shape) {
    if (!(block_type.tp_flags & Py_TPFLAGS_READY) && PyType_Ready(&block_type) < 0) return NULL;
    py_block *b = PyObject_New(py_block, &block_type);
    if (!b) return NULL;
    b->data = data;
    b->bytes = 0;
    b->sg = NULL;
    b->owner = NULL;
    b->ndim = ndim;
    b->itemsize = (Py_ssize_t)emb_dtype_nbytes(dtype);
    b->format = dtype == EMB_INT64 ? "q" : "f";
    Py_ssize_t stride = b->itemsize;
    for (int i = ndim - 1; i >= 0; i--) {
        b->shape[i] = (Py_ssize_t)shape[i];
        b->strides[i] = stride;
        stride *= (Py_ssize_t)shape[i];
    }
    return b;
}

/* numpy.asarray(block), dropping the caller's reference to the block. */
static PyObject *block_array(py_block *b) {
    PyObject *arr = py_asarray((PyObject *)b);
    Py_DECREF(b);
    return arr;
}

PyObject *py_new_cached_array(emb_dtype dtype, int ndim, const int64_t *shape, emb_tensor *t) {
    size_t n = emb_dtype_nbytes(dtype);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] && n > SIZE_MAX / 2 / (size_t)shape[i]))
            return py_new_array(dtype, ndim, shape, t); /* its error */
        n *= (size_t)shape[i];
    }
    if (n < BLOCK_MIN_BYTES || (dtype != EMB_FLOAT32 && dtype != EMB_INT64))
        return py_new_array(dtype, ndim, shape, t);
    size_t bytes = (n + BLOCK_ALIGN - 1) / BLOCK_ALIGN * BLOCK_ALIGN;
    void *data = cache_take(bytes);
    if (!data && !(data = block_alloc(bytes))) return PyErr_NoMemory();
    py_block *b = block_new(data, dtype, ndim, shape);
    if (!b) {
        cache_give(data, bytes);
        return NULL;
    }
    b->bytes = bytes;
    emb_status st = emb_tensor_init(t, dtype, data, ndim, shape);
    if (st != EMB_OK) {
        Py_DECREF(b);
        return py_raise(st);
    }
    return block_array(b);
}

PyObject *py_sparse_take(emb_sparse_grad *g) {
    if (g->borrowed || !g->nnz) return py_sparse_to_tuple(g);
    emb_sparse_grad *own = PyMem_Malloc(sizeof *own);
    if (!own) return PyErr_NoMemory();
    int64_t rs[1] = {g->nnz}, vs[2] = {g->nnz, g->dim};
    py_block *rb = block_new(g->indices, EMB_INT64, 1, rs);
    py_block *vb = rb ? block_new(g->values, EMB_FLOAT32, 2, vs) : NULL;
    if (!vb) {
        Py_XDECREF(rb);
        PyMem_Free(own);
        return NULL;
    }
    *own = *g; /* the blocks own the storage now; g is left empty */
    g->indices = NULL;
    g->values = NULL;
    g->capacity = 0;
    g->nnz = 0;
    rb->sg = own;
    vb->owner = Py_NewRef((PyObject *)rb);
    PyObject *rows = block_array(rb);
    PyObject *vals = rows ? block_array(vb) : (Py_DECREF(vb), NULL);
    PyObject *res = vals ? PyTuple_Pack(2, rows, vals) : NULL;
    Py_XDECREF(rows);
    Py_XDECREF(vals);
    return res;
}
