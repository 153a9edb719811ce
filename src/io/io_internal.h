/* src/io/io_internal.h: helpers shared by the file-format readers and writers. */
#ifndef EMB_IO_INTERNAL_H
#define EMB_IO_INTERNAL_H

#include "internal.h"

#include <emb/io.h>
#include <emb/vocab.h>

/* A read-only view of a whole file: mapped when it is a regular file, read into memory
 * otherwise (pipes). `mapped` says which, for emb__file_close. */
typedef struct emb__file {
    const unsigned char *data;
    size_t size;
    bool mapped;
} emb__file;

/* Opens and maps `path`. Errors: EMB_ERR_IO with the OS error, EMB_ERR_NOMEM.
 * emb__file_open_all also pre-faults the whole mapping (MAP_POPULATE): for readers that
 * read every byte, one batch instead of a page fault per 4 KiB. */
emb_status emb__file_open(const char *path, emb__file *f);
emb_status emb__file_open_all(const char *path, emb__file *f);

/* Reads n bytes at `offset` of `path` straight into dst (pread, no mapping, no copy).
 * Errors: EMB_ERR_IO, EMB_ERR_FORMAT (the file is shorter than it was). */
emb_status emb__pread_all(const char *path, uint64_t offset, void *dst, size_t n);

/* A float32 [rows, dim] tensor with uninitialised 64-byte aligned storage (emb_tensor_release
 * releases it): readers fill every element they report. */
emb_status emb__alloc_table(emb_tensor *t, int64_t rows, int64_t dim);
void emb__file_close(emb__file *f);

/* An atomic writer: bytes go to a temporary file next to the destination through a large
 * buffer; commit flushes, fsyncs and renames; abort (or a failed commit) removes the
 * temporary file. After the first failure every call returns that failure. */
typedef struct emb__writer {
    int fd;
    char *tmp;        /* temporary path */
    char *dest;       /* destination path */
    unsigned char *buf;
    size_t len, cap;
    uint64_t written; /* bytes handed to write(2) */
    emb_status status;
} emb__writer;

emb_status emb__writer_open(emb__writer *w, const char *path);
emb_status emb__writer_put(emb__writer *w, const void *data, size_t n);
/* Room for at least n bytes at the end of the buffer (flushes first if needed); returns a
 * pointer to write into, then emb__writer_advance(w, used). NULL after a failure. n must be
 * <= 64 KiB. */
unsigned char *emb__writer_reserve(emb__writer *w, size_t n);
static inline void emb__writer_advance(emb__writer *w, size_t n) { w->len += n; }
emb_status emb__writer_commit(emb__writer *w);
void emb__writer_abort(emb__writer *w);

/* Test hook: when not UINT64_MAX, a writer fails with EMB_ERR_IO ("injected failure")
 * once it has written this many bytes in total (not thread-safe; tests only). */
extern uint64_t emb__io_fail_after;

/* Writes n bytes at absolute file offset `offset` of the temporary file (after flushing the
 * buffer): for headers completed once the data is written. The offset range must already
 * have been written. */
emb_status emb__writer_pwrite(emb__writer *w, uint64_t offset, const void *data, size_t n);

/* Reserves `size` bytes of disk for the temporary file (posix_fallocate), so that a disk too
 * small fails at once with a clear message; file systems without the call are fine. */
emb_status emb__writer_preallocate(emb__writer *w, uint64_t size);

/* The safetensors metadata values of a vocabulary of `rows` words ("emb.vocab": words joined
 * by newlines; "emb.counts": space-separated counts, NULL without counts); both NULL for a
 * NULL vocabulary. Caller frees. Errors: EMB_ERR_INVALID (size mismatch, a word that cannot
 * be stored), EMB_ERR_NOMEM. */
#define EMB__ST_VOCAB_KEY "emb.vocab"
#define EMB__ST_COUNTS_KEY "emb.counts"
emb_status emb__st_vocab_metadata(const char *path, const emb_vocab *v, int64_t rows, char **words,
                                  char **counts);

/* The vocabulary in an open safetensors file's metadata for the first `rows` of the
 * table's `file_rows` rows (*out NULL when there is none). */
emb_status emb__safetensors_vocab(const emb_safetensors *st, int64_t rows, int64_t file_rows, emb_vocab **out);

/* emb_vectors_read of a safetensors file holding an int8/int4 table (src/quant/qfile.c):
 * the first `limit` rows (0: all) dequantized, the words, file_dtype uint8. */
emb_status emb__qtable_read_vectors(const emb_safetensors *st, const char *path, int64_t limit, emb_vectors *out);

/* Moves the file mapping out of an open safetensors handle (the handle's views become
 * invalid; close it as usual). EMB_ERR_UNSUPPORTED when the file was read, not mapped. */
emb_status emb__safetensors_take_file(emb_safetensors *st, emb__file *out);

/* The last component of a path (for messages). */
const char *emb__basename(const char *path);

/* Shortest text that reads back as f (precision 0) or "%.<p>g"; returns its length.
 * buf must hold 32 bytes. */
int emb__format_float(char *buf, float f, int precision);

/* Reads a word list written next to an .npy ("word count" lines); *out NULL when the file
 * does not exist. */
emb_status emb__vocab_sidecar_read(const char *npy_path, int64_t rows, emb_vocab **out);
emb_status emb__vocab_sidecar_path(const char *npy_path, char **out);

/* Readers behind emb_vectors_read (out is zeroed by the caller; they fill weight and vocab,
 * file_dtype, file_rows, duplicates, nonfinite). */
emb_status emb__read_w2v(const char *path, const emb__file *f, emb_format fmt,
                         const emb_vectors_read_options *o, emb_vectors *out);
emb_status emb__read_safetensors_vectors(const char *path, const emb_vectors_read_options *o,
                                         emb_vectors *out);
emb_status emb__write_w2v(const char *path, const emb_tensor *w, const emb_vocab *v,
                          emb_format fmt, const emb_vectors_write_options *o);
emb_status emb__write_safetensors_vectors(const char *path, const emb_tensor *w,
                                          const emb_vocab *v, const emb_vectors_write_options *o);

/* Parses a float from s[0..len) (no NUL needed) exactly as strtof would in the C locale
 * (correctly rounded; nan, inf, hex floats accepted), requiring the whole span to be the
 * number. Returns false when it is not a number. A fast exact path covers the decimal
 * numbers word-vector files hold. Thread-safe. */
bool emb__parse_float(const char *s, size_t len, float *out);

/* Converts n elements of `src` (dtype, little-endian, maybe unaligned) to float32. false
 * when the dtype is not a floating or integer type emb converts. */
bool emb__to_f32(float *dst, const void *src, emb_dtype dtype, int64_t n);

#endif /* EMB_IO_INTERNAL_H */
