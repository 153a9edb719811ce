/* emb/fasttext.h: fastText models (.bin) — word vectors built from subwords.
 *
 * A fastText model keeps one input row per word and `bucket` rows shared by hashed
 * character n-grams. A word's vector is the mean of its own row (when the word is in the
 * vocabulary) and the rows of the n-grams of "<word>" of minn..maxn characters (UTF-8
 * characters, not bytes; "<" and ">" alone are not n-grams), each n-gram's row being
 * nwords + FNV-1a(n-gram bytes, each byte taken as a signed char) mod bucket. So every word,
 * seen in training or not, has a vector; a word without n-grams that is not in the
 * vocabulary (or "</s>") gets zeros, as fastText gives it.
 *
 *   emb_fasttext *ft;
 *   emb_fasttext_read("model.bin", &ft);
 *   float v[300];
 *   emb_fasttext_word_vector(ft, "unseen", 6, v);   // == fasttext print-word-vectors
 *   emb_fasttext_free(ft);
 *
 * emb_vectors_read also reads a .bin (EMB_FORMAT_FASTTEXT_BIN): the vocabulary words and
 * their vectors, which is what fastText writes to its .vec. Layout and checks:
 * docs/file-formats.md. Thread safety: a model is read-only after reading; any number of
 * threads may query it.
 */
#ifndef EMB_FASTTEXT_H
#define EMB_FASTTEXT_H

#include "core.h"
#include "io.h"
#include "vocab.h"

#ifdef __cplusplus
extern "C" {
#endif

/* fastText's training arguments as the file stores them (fastText's names). */
typedef struct emb_fasttext_args {
    int32_t dim, ws, epoch, min_count, neg, word_ngrams;
    int32_t loss;  /* 1 hs, 2 ns, 3 softmax, 4 ova */
    int32_t model; /* 1 cbow, 2 skipgram, 3 supervised */
    int32_t bucket, minn, maxn, lr_update_rate;
    double t; /* subsampling threshold */
} emb_fasttext_args;

typedef struct emb_fasttext emb_fasttext;

/* Reads a fastText model file (magic 793712314, version 11 or 12) as fastText 0.9.2 writes
 * it. Every size is checked against the bytes the file holds before anything is allocated.
 * Errors (*out untouched): EMB_ERR_NULL, EMB_ERR_IO (open/read), EMB_ERR_FORMAT (not a
 * fastText model, truncated or inconsistent: the message names the file, the byte offset
 * and what is wrong), EMB_ERR_UNSUPPORTED (a quantized model, .ftz), EMB_ERR_NOMEM. */
EMB_API emb_status emb_fasttext_read(const char *path, emb_fasttext **out);

/* Frees the model. NULL is fine. */
EMB_API void emb_fasttext_free(emb_fasttext *ft);

EMB_API emb_fasttext_args emb_fasttext_args_of(const emb_fasttext *ft);

/* The vocabulary (words only, not labels, in file order, with their counts): word i has
 * input row i. Owned by ft. */
EMB_API const emb_vocab *emb_fasttext_vocab(const emb_fasttext *ft);

/* The vector size; 0 for NULL. */
EMB_API int64_t emb_fasttext_dim(const emb_fasttext *ft);

/* The input rows whose mean is the vector of word[0..len): the word's row first when it is
 * a vocabulary word, then its n-grams' rows in fastText's order (repeats kept). Writes at
 * most cap rows to rows (may be NULL when cap is 0) and returns how many there are (which
 * may exceed cap), or -1 when ft is NULL. */
EMB_API int64_t emb_fasttext_subword_rows(const emb_fasttext *ft, const char *word, size_t len,
                                          int64_t *rows, int64_t cap);

/* The vector of any word (dim floats into out), computed as fastText does: the rows above
 * summed in order in float32, then multiplied by the float32 of 1/count; bit for bit the
 * numbers `fasttext print-word-vectors` computes. Errors: EMB_ERR_NULL, EMB_ERR_NOMEM. */
EMB_API emb_status emb_fasttext_word_vector(const emb_fasttext *ft, const char *word, size_t len,
                                            float *out);

/* The table a reader of word vectors gets from the model (what emb_vectors_read gives for
 * the model's file): the vectors of its first `limit` words (0: all), in vocabulary order, each
 * as emb_fasttext_word_vector computes it, with their words and counts; for callers that keep
 * the model too, so that the file is read once. Words must be valid UTF-8. *out is owned by
 * the caller (emb_vectors_release). Errors (*out untouched): EMB_ERR_NULL, EMB_ERR_INVALID
 * (limit < 0), EMB_ERR_FORMAT (a word that is not UTF-8), EMB_ERR_NOMEM. */
EMB_API emb_status emb_fasttext_vectors(const emb_fasttext *ft, int64_t limit, emb_vectors *out);

/* Writes the model as fastText 0.9.2 writes a .bin (version 12), atomically: its arguments,
 * its words with their counts and its token count, its input rows (words, then n-gram
 * buckets) and its output rows. A model read from a version-12 .bin (what fastText 0.9.2
 * writes) is written back byte for byte; emb_fasttext_read of the result gives the same
 * model. Errors: EMB_ERR_NULL,
 * EMB_ERR_UNSUPPORTED (a supervised model: emb does not keep its labels), EMB_ERR_INVALID (a
 * word holding a NUL byte), EMB_ERR_IO (the message names the file), EMB_ERR_NOMEM. */
EMB_API emb_status emb_fasttext_save(const emb_fasttext *ft, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* EMB_FASTTEXT_H */
