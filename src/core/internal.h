/* src/core/internal.h: private helpers shared by emb's sources (not installed).
 * Private non-static names start with emb__. */
#ifndef EMB_INTERNAL_H
#define EMB_INTERNAL_H

#include <emb/core.h>

#include "cpu.h"
#include "parallel.h"

#include <stdarg.h>

#if defined(__GNUC__)
#define EMB__PRINTF(a, b) __attribute__((format(printf, a, b)))
#define EMB__LIKELY(x) __builtin_expect(!!(x), 1)
#define EMB__UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define EMB__PRINTF(a, b)
#define EMB__LIKELY(x) (x)
#define EMB__UNLIKELY(x) (x)
#endif

/* Records a detailed message for the calling thread and returns `status`. Use as
 *   return emb__error(EMB_ERR_INDEX, "index %lld ...", ...); */
emb_status emb__error(emb_status status, const char *fmt, ...) EMB__PRINTF(2, 3);

/* The standard message for a NULL argument: "<what> must not be NULL". */
emb_status emb__null(const char *what);

/* Checked arithmetic: return false on overflow (result unspecified then). */
static inline bool emb__mul_i64(int64_t a, int64_t b, int64_t *r) {
    return !__builtin_mul_overflow(a, b, r);
}
static inline bool emb__add_i64(int64_t a, int64_t b, int64_t *r) {
    return !__builtin_add_overflow(a, b, r);
}

/* Validates an index tensor: non-NULL, int64 or int32, rank <= EMB_MAX_INDEX_DIMS, valid
 * shape. `what` names the argument, `op` the operation for PyTorch-style messages
 * ("Expected tensor for argument #1 'indices' to have one of the following scalar types:
 * Long, Int; but got torch.FloatTensor instead (while checking arguments for embedding)"). */
emb_status emb__check_indices(const emb_tensor *t, const char *what, const char *op);

/* Reads element i of an int64 or int32 tensor (no checks). */
static inline int64_t emb__index_at(const emb_tensor *t, int64_t i) {
    return t->dtype == EMB_INT64 ? ((const int64_t *)t->data)[i]
                                 : (int64_t)((const int32_t *)t->data)[i];
}

/* Finds the first index outside [0, num_rows); returns its position or -1 if all are in
 * range. Runs over an int64 or int32 buffer. */
int64_t emb__find_bad_index(const emb_tensor *indices, int64_t num_rows);

/* Formats "index V at position P is out of range for an embedding with N rows (valid:
 * [0, N))" for the first bad index and returns EMB_ERR_INDEX; `pos` is the flat position. */
emb_status emb__index_error(const emb_tensor *indices, int64_t pos, int64_t num_rows,
                            const char *table);

/* Checks that `t` is float32 with exactly the given shape; names `what` in messages. */
emb_status emb__check_f32_shape(const emb_tensor *t, const char *what, int ndim,
                                const int64_t *shape);

/* True when the byte ranges [a, a + na) and [b, b + nb) share a byte (empty ranges and NULL
 * pointers never overlap). emb__tensors_overlap does this for two checked tensors' data. */
bool emb__overlap(const void *a, size_t na, const void *b, size_t nb);
bool emb__tensors_overlap(const emb_tensor *a, const emb_tensor *b);

/* Formats a shape as "[2, 3]" into buf (always NUL-terminated). Returns buf. */
const char *emb__shape_fmt(char *buf, size_t size, int ndim, const int64_t *shape);

/* Aligned allocation (64-byte alignment), freed with emb__free. On Linux an allocation of
 * 32 MiB or more is advised to use transparent huge pages (madvise MADV_HUGEPAGE), which
 * makes random row access to large tables faster. emb_tensor_alloc's storage comes from here. */
void *emb__malloc(size_t nbytes);
void emb__free(void *p);

/* PyTorch's legacy tensor type name used in its error messages: "torch.FloatTensor",
 * "torch.LongTensor", "torch.IntTensor", ... */
const char *emb__dtype_torch_type(emb_dtype dtype);

/* True when both tensors have the same ndim (in [0, EMB_MAX_DIMS]) and shape; false when
 * either is NULL. */
bool emb__tensor_same_shape(const emb_tensor *a, const emb_tensor *b);

/* True when s[0..len) is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF). NUL bytes are allowed. */
bool emb__utf8_valid(const char *s, size_t len);

/* Asks the kernel for transparent huge pages over the whole pages of [p, p + nbytes) when
 * nbytes is at least 32 MiB (Linux madvise(MADV_HUGEPAGE); a no-op elsewhere). Returns true
 * when the advice was given. emb__malloc calls it on every allocation; contents unchanged. */
bool emb__advise_hugepages(void *p, size_t nbytes);

#endif /* EMB_INTERNAL_H */
