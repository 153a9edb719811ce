/* src/core/internal.h: private helpers shared by emb's sources (not installed).
 * Private non-static names start with emb__. */
#ifndef EMB_INTERNAL_H
#define EMB_INTERNAL_H

#include <emb/core.h>

#include "bytes.h"
#include "cpu.h"
#include "parallel.h"

#include <stdarg.h>

#if defined(__GNUC__)
#define EMB__PRINTF(a, b) __attribute__((format(printf, a, b)))
#define EMB__LIKELY(x)    __builtin_expect(!!(x), 1)
#define EMB__UNLIKELY(x)  __builtin_expect(!!(x), 0)
#else
#define EMB__PRINTF(a, b)
#define EMB__LIKELY(x)   (x)
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

/* emb__check_indices, then a 1-D shape ("<what> must be 1-D, got shape [2, 3]"): a list of
 * rows, as emb_sparse_grad_from_rows and the optimizers' row updates take. */
emb_status emb__check_index_list(const emb_tensor *t, const char *what, const char *op);

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

/* Aligned allocation (64-byte alignment; 2 MiB from 2 MiB up), freed with emb__free. On
 * Linux an allocation of 2 MiB or more is advised to use transparent huge pages (madvise
 * MADV_HUGEPAGE) over the huge pages it covers whole, which makes random row access to
 * tables faster. emb_tensor_alloc's storage comes from here. */
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
 * nbytes is at least 2 MiB (Linux madvise(MADV_HUGEPAGE); a no-op elsewhere). Returns true
 * when the advice was given. emb__malloc calls it on every allocation; contents unchanged. */
bool emb__advise_hugepages(void *p, size_t nbytes);

/* sizeof(emb_generator), for the API fuzzer, which copies generators to see cheaply that a
 * failed call left them alone. */
size_t emb__generator_nbytes(void);

/* ---------------------------------------------------------------------------------------
 * Files: the one reader and the one atomic writer (src/core/file.c; docs/file-formats.md)
 * ------------------------------------------------------------------------------------- */

/* A read-only view of a whole file. A regular file is mapped (or, with EMB__FILE_READ, read
 * into memory) and its descriptor `fd` stays open with it, so that everything a reader
 * takes from the file comes from this one file even when the path is replaced meanwhile.
 * Pipes, FIFOs, sockets, terminals and block devices are read into memory (fd -1) up to a
 * limit (half of the physical memory); character devices that are not terminals have no
 * end and are refused. `mapped` says which, for emb__file_close. */
typedef struct emb__file {
    const unsigned char *data;
    size_t size;
    bool mapped;
    int fd;
} emb__file;

enum {
    EMB__FILE_POPULATE = 1, /* pre-fault the whole mapping (a reader that reads every byte) */
    EMB__FILE_READ = 2,     /* read into memory, never map (no SIGBUS if the file shrinks) */
};

/* Opens `path`. Errors: EMB_ERR_IO with the OS error (also: a directory, an endless
 * character device, more than the limit from a pipe), EMB_ERR_NOMEM. *f is zeroed (fd -1)
 * on failure. */
emb_status emb__file_open(const char *path, emb__file *f, int flags);
/* Pre-faults a mapping opened without EMB__FILE_POPULATE (after the format is known). */
void emb__file_populate(emb__file *f);
/* Reads n bytes at `offset` of the open file into dst: pread on its descriptor (no page
 * faults on the mapping, no copy through it), or a copy when it was read into memory.
 * Errors: EMB_ERR_FORMAT (beyond the end, or the file became shorter), EMB_ERR_IO. */
emb_status emb__file_pread(const emb__file *f, const char *path, uint64_t offset, void *dst,
                           size_t n);
/* Closes the descriptor and keeps the mapping (a zero-copy table that outlives the read). */
void emb__file_drop_fd(emb__file *f);
void emb__file_close(emb__file *f);

/* Test hooks (not thread-safe; tests only): a limit for emb__file_open of a pipe (0: half
 * the physical memory), and a function the table readers call with the path after they
 * have read a file's header and words and before they read its values. */
extern uint64_t emb__stream_limit;
extern void (*emb__io_test_hook)(const char *path);

/* An atomic writer: bytes go through a large buffer to a temporary ".<name>.tmp.XXXXXX"
 * next to the file being replaced (for a symbolic link, next to its final target, which is
 * replaced; the link stays), locked with flock while the writer lives; commit flushes,
 * fsyncs and renames it over the target; abort (or a failed commit) removes it. Opening a
 * writer first removes the temporaries of the same target that no live writer holds (left
 * by a process that was killed). A destination that is not a regular file (a device, a
 * FIFO, a link to one) is written straight through ("stream": no temporary, no rename;
 * what was written stays on failure; pwrite is not possible). After the first failure
 * every call returns that failure. */
typedef struct emb__writer {
    int fd;
    char *tmp;    /* temporary path (NULL when streaming or once renamed) */
    char *dest;   /* destination path as given (messages) */
    char *target; /* the regular file that is replaced */
    unsigned char *buf;
    size_t len, cap;
    uint64_t written; /* bytes handed to write(2) */
    emb_status status;
    bool stream;
    int slot; /* in the table emb_remove_temp_files walks, or -1 */
} emb__writer;

emb_status emb__writer_open(emb__writer *w, const char *path);
/* False when the destination is written straight through (no pwrite, no going back). */
bool emb__writer_seekable(const emb__writer *w);
emb_status emb__writer_put(emb__writer *w, const void *data, size_t n);
/* Room for at least n bytes at the end of the buffer (flushes first if needed); returns a
 * pointer to write into, then emb__writer_advance(w, used). NULL after a failure. n must be
 * <= 64 KiB. */
unsigned char *emb__writer_reserve(emb__writer *w, size_t n);
static inline void emb__writer_advance(emb__writer *w, size_t n) {
    w->len += n;
}
/* Writes n bytes at absolute file offset `offset` of the temporary file (after flushing the
 * buffer): for headers completed once the data is written. The offset range must already
 * have been written. EMB_ERR_UNSUPPORTED when streaming. */
emb_status emb__writer_pwrite(emb__writer *w, uint64_t offset, const void *data, size_t n);
/* Reserves `size` bytes of disk for the temporary file (posix_fallocate), so that a disk too
 * small fails at once with a clear message; file systems without the call are fine. */
emb_status emb__writer_preallocate(emb__writer *w, uint64_t size);
/* commit = finish (flush, fsync; the file is complete) + rename (into place, close). */
emb_status emb__writer_finish(emb__writer *w);
emb_status emb__writer_rename(emb__writer *w);
emb_status emb__writer_commit(emb__writer *w);
/* Commits two files together: both are written completely before either replaces its
 * target; if the second cannot be renamed into place, the first one's previous version is
 * put back. */
emb_status emb__writer_commit_pair(emb__writer *a, emb__writer *b);
void emb__writer_abort(emb__writer *w);

/* Test hook: when not UINT64_MAX, a writer fails with EMB_ERR_IO ("injected failure")
 * once it has written this many bytes in total (not thread-safe; tests only). */
extern uint64_t emb__io_fail_after;

/* The last component of a path (for messages). */
const char *emb__basename(const char *path);

/* Parses s[0..n) as a decimal integer in [0, INT64_MAX] (digits only, no sign, no
 * blanks); false when it is not one or does not fit. */
bool emb__parse_count(const char *s, size_t n, int64_t *out);

#endif /* EMB_INTERNAL_H */
