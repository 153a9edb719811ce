/* src/io/io_face.h: what io shows the modules above it (quant, formats): the table
 * allocator, the safetensors helpers of the quantized files, and the readers and writers
 * behind emb_vectors_read / emb_vectors_write. io's other headers are its own. */
#ifndef EMB_IO_FACE_H
#define EMB_IO_FACE_H

#include "internal.h"

#include <emb/io.h>
#include <emb/vocab.h>
#include "ngrams.h" /* fastText's n-grams and the .bin writer, for subword training */

/* A float32 [rows, dim] tensor with uninitialised 64-byte aligned storage (emb_tensor_release
 * releases it): readers fill every element they report. */
emb_status emb__alloc_table(emb_tensor *t, int64_t rows, int64_t dim);

/* The safetensors metadata values of a vocabulary of `rows` words ("emb.vocab": words joined
 * by newlines; "emb.counts": space-separated counts, NULL without counts); both NULL for a
 * NULL vocabulary. Caller frees. Errors: EMB_ERR_INVALID (size mismatch, a word that cannot
 * be stored), EMB_ERR_NOMEM. */
#define EMB__ST_VOCAB_KEY  "emb.vocab"
#define EMB__ST_COUNTS_KEY "emb.counts"
emb_status emb__st_vocab_metadata(const char *path, const emb_vocab *v, int64_t rows, char **words,
                                  char **counts);

/* The vocabulary in an open safetensors file's metadata for the first `rows` of the
 * table's `file_rows` rows (*out NULL when there is none). */
emb_status emb__safetensors_vocab(const emb_safetensors *st, int64_t rows, int64_t file_rows,
                                  emb_vocab **out);

/* Moves the file mapping out of an open safetensors handle (the handle's views become
 * invalid; close it as usual; the descriptor is closed, the mapping stays).
 * EMB_ERR_UNSUPPORTED when the file was read, not mapped. */
emb_status emb__safetensors_take_file(emb_safetensors *st, emb__file *out);

/* Tensor i's bytes in the open file (i valid; aligned or not) and their number. */
const unsigned char *emb__safetensors_bytes(const emb_safetensors *st, int64_t i, size_t *n);

/* emb_safetensors_open of a file already open (taken over: closed on failure too). */
emb_status emb__safetensors_open_file(const char *path, emb__file *f, emb_safetensors **out);

/* The word list file next to an .npy ("<stem>.vocab"). */
emb_status emb__vocab_sidecar_path(const char *npy_path, char **out);

/* Opens a writer on `path` and writes t as .npy into it (emb_npy_write without the commit;
 * the writer is aborted on failure). */
emb_status emb__npy_write_open(const char *path, const emb_tensor *t, emb__writer *w);

/* Readers behind emb_vectors_read (src/formats/vectors.c), on the file it opened (out is
 * zeroed by the caller; they fill weight and vocab, file_dtype, file_rows, duplicates,
 * nonfinite); the caller closes the file. The safetensors reader reads the table of an
 * open handle whose storage is not quantized (quant reads those). */
emb_status emb__read_w2v(const char *path, const emb__file *f, emb_format fmt,
                         const emb_vectors_read_options *o, emb_vectors *out);
emb_status emb__read_safetensors_table(const char *path, const emb_safetensors *st,
                                       const emb_vectors_read_options *o, emb_vectors *out);
emb_status emb__read_npy_vectors(const char *path, const emb__file *f,
                                 const emb_vectors_read_options *o, emb_vectors *out);
emb_status emb__read_fasttext_vectors(const char *path, const emb__file *f,
                                      const emb_vectors_read_options *o, emb_vectors *out);
/* The format of a file from its first bytes (emb_format_sniff). */
emb_format emb__sniff(const unsigned char *d, size_t n);
/* The format of an open file (an empty file and a fastText .bin model are errors). */
emb_status emb__sniff_file(const char *path, const emb__file *f, emb_format *out);
emb_status emb__write_w2v(const char *path, const emb_tensor *w, const emb_vocab *v, emb_format fmt,
                          const emb_vectors_write_options *o);
emb_status emb__write_safetensors_vectors(const char *path, const emb_tensor *w, const emb_vocab *v,
                                          const emb_vectors_write_options *o);

#endif /* EMB_IO_FACE_H */
