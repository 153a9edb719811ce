/* src/io/io_internal.h: helpers shared by the file-format readers and writers. */
#ifndef EMB_IO_INTERNAL_H
#define EMB_IO_INTERNAL_H

#include "internal.h"

#include <emb/io.h>
#include <emb/vocab.h>

/* A float32 [rows, dim] tensor with uninitialised 64-byte aligned storage (emb_tensor_free
 * releases it): readers fill every element they report. */
emb_status emb__alloc_table(emb_tensor *t, int64_t rows, int64_t dim);

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
 * invalid; close it as usual; the descriptor is closed, the mapping stays).
 * EMB_ERR_UNSUPPORTED when the file was read, not mapped. */
emb_status emb__safetensors_take_file(emb_safetensors *st, emb__file *out);

/* Tensor i's bytes in the open file (i valid; aligned or not) and their number. */
const unsigned char *emb__safetensors_bytes(const emb_safetensors *st, int64_t i, size_t *n);

/* emb_safetensors_open of a file already open (taken over: closed on failure too). */
emb_status emb__safetensors_open_file(const char *path, emb__file *f, emb_safetensors **out);

/* Shortest text that reads back as f (precision 0) or "%.<p>g"; returns its length.
 * buf must hold 32 bytes. */
int emb__format_float(char *buf, float f, int precision);

/* Reads the word list written next to an .npy: "word count" lines, exactly one per row of
 * the table's `file_rows` (the words UTF-8 when check_utf8), keeping the first `rows`
 * words; *out NULL when the file does not exist. */
emb_status emb__vocab_sidecar_read(const char *npy_path, int64_t file_rows, int64_t rows, bool check_utf8,
                                   emb_vocab **out);
emb_status emb__vocab_sidecar_path(const char *npy_path, char **out);

/* Opens a writer on `path` and writes t as .npy into it (emb_npy_write without the commit;
 * the writer is aborted on failure). */
emb_status emb__npy_write_open(const char *path, const emb_tensor *t, emb__writer *w);

/* Readers behind emb_vectors_read, on the file it opened (out is zeroed by the caller; they
 * fill weight and vocab, file_dtype, file_rows, duplicates, nonfinite). The safetensors
 * reader takes the file over; the others leave it to the caller. */
emb_status emb__read_w2v(const char *path, const emb__file *f, emb_format fmt,
                         const emb_read_options *o, emb_vectors *out);
emb_status emb__read_safetensors_vectors(const char *path, emb__file *f, const emb_read_options *o,
                                         emb_vectors *out);
emb_status emb__read_npy_vectors(const char *path, const emb__file *f, const emb_read_options *o,
                                 emb_vectors *out);
/* The format of a file from its first bytes (emb_format_sniff). */
emb_format emb__sniff(const unsigned char *d, size_t n);
emb_status emb__write_w2v(const char *path, const emb_tensor *w, const emb_vocab *v,
                          emb_format fmt, const emb_write_options *o);
emb_status emb__write_safetensors_vectors(const char *path, const emb_tensor *w,
                                          const emb_vocab *v, const emb_write_options *o);

/* Converts n elements of `src` (dtype, little-endian, maybe unaligned) to float32 (nothing
 * when n <= 0). false when the dtype is not a floating or integer type emb converts. */
bool emb__to_f32(float *dst, const void *src, emb_dtype dtype, int64_t n);

#endif /* EMB_IO_INTERNAL_H */
