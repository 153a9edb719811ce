/* src/io/io_internal.h: helpers shared by the file-format readers and writers of io, and
 * nothing else (the other modules see io_face.h). */
#ifndef EMB_IO_INTERNAL_H
#define EMB_IO_INTERNAL_H

#include "io_face.h"

/* Shortest text that reads back as f (precision 0) or "%.<p>g"; returns its length.
 * buf must hold 32 bytes. */
int emb__format_float(char *buf, float f, int precision);
/* The same text by printf alone (the reference of emb__format_float's tests). */
int emb__format_float_printf(char *buf, float f, int precision);

/* Reads the word list written next to an .npy: "word count" lines, exactly one per row of
 * the table's `file_rows` (the words UTF-8 when check_utf8), keeping the first `rows`
 * words; *out NULL when the file does not exist. */
emb_status emb__vocab_sidecar_read(const char *npy_path, int64_t file_rows, int64_t rows,
                                   bool check_utf8, emb_vocab **out);
/* Parses a float from s[0..len) (no NUL needed) exactly as strtof would in the C locale
 * (correctly rounded; nan, inf, hex floats accepted), requiring the whole span to be the
 * number. Returns false when it is not a number. A fast exact path covers the decimal
 * numbers word-vector files hold. Thread-safe. */
bool emb__parse_float(const char *s, size_t len, float *out);

/* Converts n elements of `src` (dtype, little-endian, maybe unaligned) to float32 (nothing
 * when n <= 0). false when the dtype is not a floating or integer type emb converts. */
bool emb__to_f32(float *dst, const void *src, emb_dtype dtype, int64_t n);

/* safetensors: the largest header emb reads or writes, and the file name of an emb dtype
 * (NULL when safetensors has none); src/io/safetensors.c. */
#define EMB__ST_MAX_HEADER 100000000ull
const char *emb__st_dtype_name(emb_dtype d);

#endif /* EMB_IO_INTERNAL_H */
