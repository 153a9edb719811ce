/* Dtypes, tensor views, aligned allocation. */
#include "internal.h"

#include <emb/print.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

size_t emb_dtype_nbytes(emb_dtype dtype) {
    switch (dtype) {
    case EMB_FLOAT32:
        return 4;
    case EMB_INT64:
        return 8;
    case EMB_INT32:
        return 4;
    case EMB_FLOAT64:
        return 8;
    case EMB_FLOAT16:
        return 2;
    case EMB_BFLOAT16:
        return 2;
    case EMB_INT8:
        return 1;
    case EMB_UINT8:
        return 1;
    case EMB_INT16:
        return 2;
    case EMB_BOOL:
        return 1;
    }
    return 0;
}

const char *emb_dtype_name(emb_dtype dtype) {
    switch (dtype) {
    case EMB_FLOAT32:
        return "float32";
    case EMB_INT64:
        return "int64";
    case EMB_INT32:
        return "int32";
    case EMB_FLOAT64:
        return "float64";
    case EMB_FLOAT16:
        return "float16";
    case EMB_BFLOAT16:
        return "bfloat16";
    case EMB_INT8:
        return "int8";
    case EMB_UINT8:
        return "uint8";
    case EMB_INT16:
        return "int16";
    case EMB_BOOL:
        return "bool";
    }
    return "unknown";
}

const char *emb__dtype_torch_type(emb_dtype dtype) {
    switch (dtype) {
    case EMB_FLOAT32:
        return "torch.FloatTensor";
    case EMB_INT64:
        return "torch.LongTensor";
    case EMB_INT32:
        return "torch.IntTensor";
    case EMB_FLOAT64:
        return "torch.DoubleTensor";
    case EMB_FLOAT16:
        return "torch.HalfTensor";
    case EMB_BFLOAT16:
        return "CPUBFloat16Type";
    case EMB_INT8:
        return "torch.CharTensor";
    case EMB_UINT8:
        return "torch.ByteTensor";
    case EMB_INT16:
        return "torch.ShortTensor";
    case EMB_BOOL:
        return "CPUBoolType";
    }
    return "unknown";
}

/* Validates dtype and shape; computes numel. Does not look at data. */
static emb_status check_shape(emb_dtype dtype, int ndim, const int64_t *shape, const char *what,
                              int64_t *numel_out) {
    if (emb_dtype_nbytes(dtype) == 0)
        return emb__error(EMB_ERR_DTYPE, "%s has an unknown dtype (%d)", what, (int)dtype);
    if (ndim < 0 || ndim > EMB_MAX_DIMS)
        return emb__error(EMB_ERR_SHAPE, "%s has %d dimensions; emb tensors have 0 to %d", what,
                          ndim, EMB_MAX_DIMS);
    if (ndim > 0 && !shape) return emb__null("shape");
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return emb__error(EMB_ERR_SHAPE, "%s has a negative dimension %" PRId64 " at dim %d",
                              what, shape[i], i);
        empty |= shape[i] == 0;
    }
    /* A zero dimension anywhere makes the tensor empty, whatever the others (as PyTorch:
     * torch.empty(3, 2**62, 0, 2**62) is fine); only the product of a non-empty shape can
     * overflow. */
    int64_t numel = empty ? 0 : 1;
    for (int i = 0; !empty && i < ndim; i++)
        if (!emb__mul_i64(numel, shape[i], &numel))
            return emb__error(EMB_ERR_OVERFLOW, "the number of elements of %s overflows", what);
    int64_t bytes;
    if (!emb__mul_i64(numel, (int64_t)emb_dtype_nbytes(dtype), &bytes))
        return emb__error(EMB_ERR_OVERFLOW, "the byte size of %s overflows", what);
    *numel_out = numel;
    return EMB_OK;
}

emb_status emb_tensor_init(emb_tensor *t, emb_dtype dtype, void *data, int ndim,
                           const int64_t *shape) {
    if (!t) return emb__null("tensor");
    int64_t numel = 0;
    emb_status st = check_shape(dtype, ndim, shape, "tensor", &numel);
    if (st) return st;
    if (numel > 0 && !data) return emb__null("data of a non-empty tensor");
    emb_tensor v;
    memset(&v, 0, sizeof v);
    v.dtype = dtype;
    v.ndim = ndim;
    for (int i = 0; i < ndim; i++) v.shape[i] = shape[i];
    v.data = data;
    *t = v;
    return EMB_OK;
}

emb_status emb_tensor_alloc(emb_tensor *t, emb_dtype dtype, int ndim, const int64_t *shape) {
    if (!t) return emb__null("tensor");
    int64_t numel = 0;
    emb_status st = check_shape(dtype, ndim, shape, "tensor", &numel);
    if (st) return st;
    void *data = NULL;
    if (numel > 0) {
        size_t nbytes = (size_t)numel * emb_dtype_nbytes(dtype);
        data = emb__malloc(nbytes);
        if (!data)
            return emb__error(EMB_ERR_NOMEM, "cannot allocate %zu bytes for a tensor", nbytes);
        memset(data, 0, nbytes);
    }
    return emb_tensor_init(t, dtype, data, ndim, shape);
}

void emb_tensor_release(emb_tensor *t) {
    if (!t) return;
    emb__free(t->data);
    t->data = NULL;
}

int64_t emb_tensor_numel(const emb_tensor *t) {
    if (!t || t->ndim < 0 || t->ndim > EMB_MAX_DIMS) return -1;
    bool empty = false;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0) return -1;
        empty |= t->shape[i] == 0;
    }
    if (empty) return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        if (!emb__mul_i64(n, t->shape[i], &n)) return -1;
    return n;
}

size_t emb_tensor_nbytes(const emb_tensor *t) {
    int64_t n = emb_tensor_numel(t);
    size_t b;
    if (n < 0 || __builtin_mul_overflow((size_t)n, emb_dtype_nbytes(t->dtype), &b)) return 0;
    return b;
}

emb_status emb_tensor_check(const emb_tensor *t, const char *what) {
    if (!what) what = "tensor";
    if (!t) return emb__null(what);
    int64_t numel = 0;
    emb_status st = check_shape(t->dtype, t->ndim, t->shape, what, &numel);
    if (st) return st;
    if (numel > 0 && !t->data)
        return emb__error(EMB_ERR_NULL, "%s has %" PRId64 " elements but its data is NULL", what,
                          numel);
    return EMB_OK;
}

bool emb__tensor_same_shape(const emb_tensor *a, const emb_tensor *b) {
    if (!a || !b || a->ndim != b->ndim || a->ndim < 0 || a->ndim > EMB_MAX_DIMS) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

size_t emb_shape_repr(int ndim, const int64_t *shape, char *buf, size_t size) {
    char tmp[32 * EMB_MAX_DIMS + 32];
    emb__shape_fmt(tmp, sizeof tmp, ndim, shape);
    int n = snprintf(buf, size, "torch.Size(%s)", tmp);
    return n < 0 ? 0 : (size_t)n;
}

const char *emb__shape_fmt(char *buf, size_t size, int ndim, const int64_t *shape) {
    size_t used = 0;
    if (size == 0) return buf;
    buf[0] = '\0';
#define EMB__APPEND(...)                                                                           \
    do {                                                                                           \
        int k_ = snprintf(buf + used, size - used, __VA_ARGS__);                                   \
        if (k_ < 0 || (size_t)k_ >= size - used) return buf;                                       \
        used += (size_t)k_;                                                                        \
    } while (0)
    EMB__APPEND("[");
    for (int i = 0; shape && i < ndim && i < EMB_MAX_DIMS; i++)
        EMB__APPEND(i ? ", %" PRId64 : "%" PRId64, shape[i]);
    EMB__APPEND("]");
#undef EMB__APPEND
    return buf;
}

/* Large buffers (embedding tables, optimizer state) are read at random rows: with 4 KiB
 * pages nearly every row costs a TLB miss and a page walk. Transparent huge pages (2 MiB)
 * remove most of those: on the reference VM (THP "madvise" mode) the random gather of
 * 262,144 rows from a 1M x 64 table took 30% less CPU time (bench/bench_embedding.c's
 * gather probe and forward; docs/PERFORMANCE.md), and 1-thread CBOW training, whose two
 * 4.7 MB tables are read at random rows, 10-14% less (docs/word2vec.md). Advised before the
 * first touch, so the pages are huge from the start, for every buffer of at least one huge
 * page, which emb__malloc aligns to 2 MiB so that its pages are the huge pages' (only the
 * huge pages a buffer covers whole are advised: no memory beyond it is touched). Failure
 * (no THP, an old kernel) changes nothing. */
#define EMB__HUGEPAGE_BYTES     ((size_t)2 << 20)
#define EMB__HUGEPAGE_MIN_BYTES EMB__HUGEPAGE_BYTES

bool emb__advise_hugepages(void *p, size_t nbytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (!p || nbytes < EMB__HUGEPAGE_MIN_BYTES) return false;
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t page = ps > 0 ? (uintptr_t)ps : 4096;
    uintptr_t b = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t e = ((uintptr_t)p + nbytes) & ~(page - 1);
    return e > b && madvise((void *)b, e - b, MADV_HUGEPAGE) == 0;
#else
    (void)p;
    (void)nbytes;
    return false;
#endif
}

void *emb__malloc(size_t nbytes) {
    if (nbytes == 0) nbytes = 1;
    size_t rounded = (nbytes + 63) & ~(size_t)63;
    if (rounded < nbytes) return NULL;
    const size_t huge = EMB__HUGEPAGE_BYTES;
    const bool big = rounded >= EMB__HUGEPAGE_MIN_BYTES && rounded <= SIZE_MAX - huge;
    /* aligned_alloc wants a multiple of the alignment */
    void *p =
        big ? aligned_alloc(huge, (rounded + huge - 1) & ~(huge - 1)) : aligned_alloc(64, rounded);
    emb__advise_hugepages(p, rounded);
    return p;
}

void emb__free(void *p) {
    free(p);
}

emb_status emb__check_indices(const emb_tensor *t, const char *what, const char *op) {
    if (!t) return emb__null(what);
    if (t->dtype != EMB_INT64 && t->dtype != EMB_INT32) {
        const char *tn = emb_dtype_nbytes(t->dtype) ? emb__dtype_torch_type(t->dtype) : "unknown";
        return emb__error(EMB_ERR_DTYPE,
                          "Expected tensor for argument #1 '%s' to have one of the following "
                          "scalar types: Long, Int; but got %s instead (while checking "
                          "arguments for %s)",
                          what, tn, op);
    }
    if (t->ndim > EMB_MAX_INDEX_DIMS || t->ndim < 0)
        return emb__error(EMB_ERR_SHAPE, "%s has %d dimensions; at most %d are supported", what,
                          t->ndim, EMB_MAX_INDEX_DIMS);
    return emb_tensor_check(t, what);
}

emb_status emb__check_index_list(const emb_tensor *t, const char *what, const char *op) {
    emb_status st = emb__check_indices(t, what, op);
    if (st || t->ndim == 1) return st;
    char b[300];
    return emb__error(EMB_ERR_SHAPE, "%s must be 1-D, got shape %s", what,
                      emb__shape_fmt(b, sizeof b, t->ndim, t->shape));
}

int64_t emb__find_bad_index(const emb_tensor *indices, int64_t num_rows) {
    int64_t n = emb_tensor_numel(indices);
    if (indices->dtype == EMB_INT64) {
        const int64_t *p = indices->data;
        uint64_t lim = (uint64_t)num_rows;
        for (int64_t i = 0; i < n; i++)
            if ((uint64_t)p[i] >= lim) return i;
    } else {
        const int32_t *p = indices->data;
        uint64_t lim = (uint64_t)num_rows;
        for (int64_t i = 0; i < n; i++)
            if ((uint64_t)(int64_t)p[i] >= lim) return i;
    }
    return -1;
}

emb_status emb__index_error(const emb_tensor *indices, int64_t pos, int64_t num_rows,
                            const char *table) {
    int64_t v = emb__index_at(indices, pos);
    return emb__error(EMB_ERR_INDEX,
                      "index %" PRId64 " at position %" PRId64
                      " is out of range for %s with %" PRId64 " rows (valid: [0, %" PRId64 "))",
                      v, pos, table ? table : "an embedding", num_rows, num_rows);
}

emb_status emb__check_f32_shape(const emb_tensor *t, const char *what, int ndim,
                                const int64_t *shape) {
    emb_status st = emb_tensor_check(t, what);
    if (st) return st;
    if (t->dtype != EMB_FLOAT32)
        return emb__error(EMB_ERR_DTYPE, "%s must be float32, got %s", what,
                          emb_dtype_name(t->dtype));
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char want[300], got[300];
        return emb__error(EMB_ERR_SHAPE, "%s has shape %s, expected %s", what,
                          emb__shape_fmt(got, sizeof got, t->ndim, t->shape),
                          emb__shape_fmt(want, sizeof want, ndim, shape));
    }
    return EMB_OK;
}

bool emb__overlap(const void *a, size_t na, const void *b, size_t nb) {
    if (!a || !b || na == 0 || nb == 0) return false;
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y ? y - x < na : x - y < nb;
}

bool emb__tensors_overlap(const emb_tensor *a, const emb_tensor *b) {
    return a && b && emb__overlap(a->data, emb_tensor_nbytes(a), b->data, emb_tensor_nbytes(b));
}
