/* emb/io.h: reading and writing embedding tables and word vectors.
 *
 * Formats (docs/file-formats.md has the details, the checks and the vocabulary layout):
 *   safetensors      PyTorch / Hugging Face tensors; a file holding one tensor "weight" is
 *                    exactly an nn.Embedding state_dict. F32, F16, BF16, F64 tables.
 *   npy              NumPy .npy v1/v2/v3 (C order; Fortran order is read by transposing).
 *   word2vec text    "rows dim" header, then "word v1 ... vd" per line (also fastText .vec).
 *   word2vec binary  the same header, then word, a space, dim little-endian float32.
 *   GloVe            text without a header; words may contain spaces (the last dim fields
 *                    of a line are the numbers).
 *
 * Every reader validates what it reads: a malformed, truncated or hostile file gives
 * EMB_ERR_FORMAT (or EMB_ERR_IO) with the file name and what is wrong, never a crash, and
 * allocations are bounded by what the file can actually hold. A reader opens the file once
 * and takes everything from that one open file (a file replaced meanwhile is read whole, as
 * it was). Regular files are mapped; pipes and terminals are read into memory up to half of
 * the physical memory; character devices such as /dev/zero are refused. A mapped file that
 * another program truncates while emb reads it raises SIGBUS, as with any mapping (the emb
 * CLI reports it as an error).
 * Every writer is atomic: it writes a temporary file ".<name>.tmp.XXXXXX" in the
 * destination's folder, flushes and fsyncs it, then renames it over the destination, so a
 * failed write leaves the previous file untouched; temporaries left by a killed process are
 * removed by the next write of the same destination. A symbolic link is followed: its
 * final target is replaced and the link stays. A destination that is not a regular file (a
 * character or block device, a FIFO) is written straight through, without a temporary
 * (docs/file-formats.md, "Writing"); emb_remove_temp_files (core.h) removes the
 * temporaries of the writes in progress, from a signal handler.
 * Thread safety: all calls are safe on distinct objects; they keep no global state (but
 * for the list of temporary files in progress).
 */
#ifndef EMB_IO_H
#define EMB_IO_H

#include "core.h"
#include "embedding.h"
#include "vocab.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum emb_format {
    EMB_FORMAT_AUTO = 0, /* reading: from the content; writing: from the extension */
    EMB_FORMAT_SAFETENSORS = 1,
    EMB_FORMAT_NPY = 2,
    EMB_FORMAT_W2V_TEXT = 3, /* word2vec text, fastText .vec */
    EMB_FORMAT_W2V_BINARY = 4,
    EMB_FORMAT_GLOVE = 5,        /* word2vec text without the header line */
    EMB_FORMAT_FASTTEXT_BIN = 6, /* a fastText model (.bin, emb/fasttext.h); read only here: the
                                  * vocabulary's words and their vectors, as fastText's .vec */
} emb_format;

/* "safetensors", "npy", "word2vec-text", "word2vec-binary", "glove", "fasttext-bin"; "auto";
 * "unknown". */
EMB_API const char *emb_format_name(emb_format f);

/* Parses a format name as the CLI's --from/--to take it: the names above and the aliases
 * "st", "w2v", "txt", "vec", "text", "bin", "binary", "fasttext". Errors: EMB_ERR_NULL,
 * EMB_ERR_INVALID (unknown name; the message lists the names). */
EMB_API emb_status emb_format_parse(const char *name, emb_format *out);

/* The format an output file name implies: .safetensors, .npy, .bin (word2vec binary),
 * .vec and .txt (word2vec text); EMB_FORMAT_AUTO for other names. */
EMB_API emb_format emb_format_from_path(const char *path);

/* The format of an existing file, from its first bytes (npy magic, a safetensors header,
 * fastText's magic number, a "rows dim" header followed by text or binary rows, otherwise
 * GloVe text). A pipe is read to its end (emb_vectors_read detects the format of what it
 * reads itself). Errors: EMB_ERR_NULL, EMB_ERR_IO (cannot open or read), EMB_ERR_FORMAT
 * (empty file). */
EMB_API emb_status emb_format_sniff(const char *path, emb_format *out);

/* ---------------------------------------------------------------------------------------
 * Tables with their words
 * ------------------------------------------------------------------------------------- */

typedef struct emb_vectors_read_options {
    emb_format format;  /* EMB_FORMAT_AUTO (default): emb_format_sniff */
    int64_t limit;      /* read at most this many rows (gensim's limit); 0 (default): all */
    const char *tensor; /* safetensors: the tensor to read; NULL (default): "weight", else
                         * "embedding.weight", else the only 2-D floating-point tensor */
    bool check_utf8;    /* word formats: reject a word that is not UTF-8 (default true, like
                         * gensim's unicode_errors='strict') */
} emb_vectors_read_options;

EMB_API emb_vectors_read_options emb_vectors_read_options_default(void);

/* A table read from a file, owned by the caller; emptied with emb_vectors_release. */
typedef struct emb_vectors {
    emb_tensor weight;    /* float32 [rows, dim], owned (emb_tensor_alloc) */
    emb_vocab *vocab;     /* the rows' words, or NULL when the file carries none */
    emb_format format;    /* the format that was read */
    emb_dtype file_dtype; /* the element type stored in the file (float32 for text) */
    int64_t file_rows;    /* rows the file declares (its header) or holds */
    int64_t duplicates;   /* rows skipped because their word repeated an earlier row's
                           * (the first one is kept, as gensim does) */
    int64_t nonfinite;    /* NaN or infinite values read (allowed, counted) */
} emb_vectors;

/* Reads a table and its words. Text values are parsed exactly as strtof would (correctly
 * rounded); other element types are converted to float32 (F64 rounds to nearest).
 * A fastText model gives its vocabulary words and their vectors (the mean of the word's row
 * and its n-grams' rows, emb/fasttext.h); vectors of other words: emb_fasttext_word_vector.
 * Errors (*out untouched): EMB_ERR_NULL, EMB_ERR_IO (open/read failed), EMB_ERR_UNSUPPORTED
 * (a quantized fastText model), EMB_ERR_FORMAT
 * (malformed or truncated file; the message names the file, the row or byte offset and
 * what is wrong), EMB_ERR_DTYPE (a tensor type emb cannot convert to float32),
 * EMB_ERR_SHAPE (the chosen tensor is not 2-D), EMB_ERR_INVALID (bad options, or the
 * named tensor is absent), EMB_ERR_NOMEM. */
EMB_API emb_status emb_vectors_read(const char *path, const emb_vectors_read_options *opts,
                                    emb_vectors *out);

/* Frees the weight and the vocabulary and zeroes *v, which can be read into again. NULL is
 * fine. */
EMB_API void emb_vectors_release(emb_vectors *v);

typedef struct emb_vectors_write_options {
    emb_format format;   /* EMB_FORMAT_AUTO (default): emb_format_from_path */
    emb_dtype dtype;     /* safetensors and npy element type: EMB_FLOAT32 (default),
                          * EMB_FLOAT16, EMB_BFLOAT16 (safetensors only) or EMB_FLOAT64;
                          * round to nearest even, as torch's .half()/.bfloat16() */
    const char *tensor;  /* safetensors tensor name; NULL: "weight" */
    int precision;       /* text: 0 (default) the shortest text that reads back to the same
                          * float; 1..17: printf "%.<precision>g" */
    bool trailing_space; /* text: a space after each value, as the word2vec C tool and
                          * fastText write (default false: gensim's style) */
    bool binary_newline; /* word2vec binary: '\n' after each row, as the C tool writes
                          * (default true; gensim reads both) */
} emb_vectors_write_options;

EMB_API emb_vectors_write_options emb_vectors_write_options_default(void);

/* Writes weight (2-D float32 [rows, dim]) and its words atomically.
 * vocab: required for the word formats (size == rows; words must not contain spaces,
 * tabs or newlines, and for safetensors must be UTF-8); optional for safetensors (stored in
 * __metadata__, docs/file-formats.md) and npy (a "<stem>.vocab" file of "word count" lines
 * next to the .npy, written first).
 * Errors (the destination is unchanged): EMB_ERR_NULL, EMB_ERR_DTYPE / EMB_ERR_SHAPE
 * (weight), EMB_ERR_INVALID (no format for this name, a dtype the format cannot store,
 * vocab size != rows, a word the format cannot hold), EMB_ERR_IO (with the OS error),
 * EMB_ERR_NOMEM, EMB_ERR_UNSUPPORTED (EMB_FORMAT_FASTTEXT_BIN: a model is more than a table). */
EMB_API emb_status emb_vectors_write(const char *path, const emb_tensor *weight,
                                     const emb_vocab *vocab, const emb_vectors_write_options *opts);

/* ---------------------------------------------------------------------------------------
 * safetensors: any tensors, metadata, zero-copy mapping
 * ------------------------------------------------------------------------------------- */

/* An open safetensors file: the file is mapped read-only and its header validated (the
 * rules of the reference implementation: header size <= 100 MB, valid UTF-8 JSON object,
 * no duplicate names, known dtypes, shapes and offsets non-negative integers, byte sizes
 * matching the shapes, the data buffer covered exactly with no holes, overlaps or trailing
 * bytes). One handle may be read from several threads. */
typedef struct emb_safetensors emb_safetensors;

/* Errors (*out untouched): EMB_ERR_NULL, EMB_ERR_IO, EMB_ERR_FORMAT, EMB_ERR_NOMEM. */
EMB_API emb_status emb_safetensors_open(const char *path, emb_safetensors **out);
/* Unmaps and frees. Views obtained from the handle become invalid. NULL is fine. */
EMB_API void emb_safetensors_free(emb_safetensors *st);

/* Number of tensors; their names in data-offset order (NULL when i is out of range). */
EMB_API int64_t emb_safetensors_num_tensors(const emb_safetensors *st);
EMB_API const char *emb_safetensors_name(const emb_safetensors *st, int64_t i);
/* The index of tensor `name`, or -1. */
EMB_API int64_t emb_safetensors_find(const emb_safetensors *st, const char *name);
/* The dtype as the file spells it ("F32", "I64", "F8_E4M3", ...), NULL when out of range. */
EMB_API const char *emb_safetensors_dtype(const emb_safetensors *st, int64_t i);
/* Tensor i's shape as the file gives it (*ndim entries, up to 64; owned by the handle), for
 * every tensor, also those emb_safetensors_view cannot view; NULL when out of range. */
EMB_API const int64_t *emb_safetensors_shape(const emb_safetensors *st, int64_t i, int *ndim);

/* Tensor i's shape and emb dtype, data viewing the mapping (read-only memory: never write
 * through it). Errors: EMB_ERR_NULL, EMB_ERR_INDEX, EMB_ERR_DTYPE (a dtype emb_tensor cannot
 * hold: U16, U32, U64, F8_*, C64, F4, F6_*), EMB_ERR_SHAPE (more than EMB_MAX_DIMS dims),
 * EMB_ERR_UNSUPPORTED (the data is not aligned for its type in this file; use
 * emb_safetensors_read). */
EMB_API emb_status emb_safetensors_view(const emb_safetensors *st, int64_t i, emb_tensor *view);

/* Like view, but into new storage the caller releases with emb_tensor_release (always aligned). */
EMB_API emb_status emb_safetensors_read(const emb_safetensors *st, int64_t i, emb_tensor *out);

/* The __metadata__ value of `key`, or NULL. Number of entries and i-th key (NULL when out
 * of range), in file order. */
EMB_API const char *emb_safetensors_metadata(const emb_safetensors *st, const char *key);
EMB_API int64_t emb_safetensors_num_metadata(const emb_safetensors *st);
EMB_API const char *emb_safetensors_metadata_key(const emb_safetensors *st, int64_t i);

/* Writes n tensors (any emb dtype but FLOAT16/BFLOAT16 data are taken as stored) with the
 * given names and metadata (nmeta key/value pairs; "format": "pt" is added unless given)
 * atomically, in the reference serializer's layout (sorted by dtype alignment then name,
 * header padded to 8 bytes, so every tensor is naturally aligned).
 * Errors (destination unchanged): EMB_ERR_NULL, EMB_ERR_INVALID (n < 0, an empty, repeated
 * or non-UTF-8 name, "__metadata__" as a name, non-UTF-8 metadata), tensor errors of
 * emb_tensor_check, EMB_ERR_IO, EMB_ERR_NOMEM. */
EMB_API emb_status emb_safetensors_write(const char *path, int64_t n, const char *const *names,
                                         const emb_tensor *tensors, int64_t nmeta,
                                         const char *const *meta_keys,
                                         const char *const *meta_values);

/* Zero-copy load for tables larger than RAM: maps the file and wraps the F32 2-D tensor
 * `tensor` (NULL: chosen as emb_vectors_read does) as a read-only embedding
 * (emb_embedding_wrap): nothing is read until looked up; emb_embedding_free unmaps.
 * Errors: those of emb_safetensors_open, EMB_ERR_INVALID (no such tensor), EMB_ERR_DTYPE
 * (not F32), EMB_ERR_SHAPE (not 2-D), EMB_ERR_UNSUPPORTED (misaligned data, or
 * emb_embedding_wrap unavailable), and those of emb_embedding_wrap. *out untouched. */
EMB_API emb_status emb_embedding_map_safetensors(const char *path, const char *tensor,
                                                 const emb_embedding_options *opts,
                                                 emb_embedding **out);

/* ---------------------------------------------------------------------------------------
 * npy
 * ------------------------------------------------------------------------------------- */

/* Reads an .npy file (v1, v2, v3) of float32/64/16, int64/32/16/8, uint8 or bool, little-
 * or big-endian, C or Fortran order, into new C-order native storage (emb_tensor_release).
 * Errors: EMB_ERR_NULL, EMB_ERR_IO, EMB_ERR_FORMAT (bad magic, header, shape or size; the
 * message says what), EMB_ERR_DTYPE (object or other unsupported descr), EMB_ERR_SHAPE
 * (more than EMB_MAX_DIMS dims), EMB_ERR_NOMEM. *out untouched on error. */
EMB_API emb_status emb_npy_read(const char *path, emb_tensor *out);

/* Writes t as .npy v1.0, C order, exactly as numpy 1.24's np.save writes it. Supported:
 * float32/64/16, int64/32/16/8, uint8, bool. Atomic. Errors: EMB_ERR_NULL, tensor errors,
 * EMB_ERR_DTYPE (bfloat16: NumPy has no such type), EMB_ERR_IO, EMB_ERR_NOMEM. */
EMB_API emb_status emb_npy_write(const char *path, const emb_tensor *t);

#ifdef __cplusplus
}
#endif

#endif /* EMB_IO_H */
