/* src/io/ngrams.h: fastText's character n-grams of a word and their hashed rows, and the
 * .bin writer (src/io/fasttext_bin.c), shared with subword training (src/w2v/subword.c). */
#ifndef EMB_IO_NGRAMS_H
#define EMB_IO_NGRAMS_H

#include <emb/embedding.h>
#include <emb/fasttext.h>
#include <emb/vocab.h>

#include <stddef.h>
#include <stdint.h>

/* fastText's hash: FNV-1a over the bytes, each byte sign-extended as an int8_t. */
static inline uint32_t emb__fnv1a_byte(uint32_t h, unsigned char c) {
    return (h ^ (uint32_t)(int32_t)(int8_t)c) * 16777619u;
}
#define EMB__FNV1A_INIT 2166136261u

/* The rows of the n-grams of "<word>" (word[0..len)) of minn..maxn UTF-8 characters, in
 * fastText's order (by start character, then length; "<" and ">" alone excluded): row
 * nwords + hash % bucket for each. Writes at most cap rows and returns how many there are.
 * No n-grams when maxn < 1, minn > maxn or bucket == 0. */
int64_t emb__subword_ngrams(const char *word, size_t len, int minn, int maxn, uint32_t bucket,
                            int64_t nwords, int64_t *rows, int64_t cap);

/* The magic number a fastText model file starts with (little-endian int32). */
#define EMB__FASTTEXT_MAGIC 793712314

/* Copies of a model's input rows (its words', then its `bucket` n-gram rows) and output rows
 * (one per word for cbow and skipgram models, one per label for supervised ones), malloc'd;
 * *in_rows and *out_rows their counts. Errors: EMB_ERR_NULL, EMB_ERR_NOMEM. */
emb_status emb__fasttext_tables(const emb_fasttext *ft, float **in, int64_t *in_rows, float **out,
                                int64_t *out_rows);

/* A model (emb_fasttext_free) made of copies of a's arguments, vocab's words and counts (row
 * i is word i), the (nwords + a->bucket) x a->dim input floats and nwords x a->dim output
 * floats; what emb_fasttext_read gives for the file emb__fasttext_write writes from the same.
 * Errors: EMB_ERR_NULL, EMB_ERR_NOMEM. */
emb_status emb__fasttext_from_tables(const emb_fasttext_args *a, const emb_vocab *vocab,
                                     int64_t ntokens, const float *in, const float *out,
                                     emb_fasttext **res);

/* The same with the tables in (nwords + a->bucket rows) and out (nwords rows), float32 of
 * a->dim columns, adopted instead of copied: on success the model owns them and frees them
 * with itself; on failure the caller still does. Errors: EMB_ERR_NULL, EMB_ERR_INVALID (the
 * tables' shapes are not the model's), EMB_ERR_NOMEM. */
emb_status emb__fasttext_adopt_tables(const emb_fasttext_args *a, const emb_vocab *vocab,
                                      int64_t ntokens, emb_embedding *in, emb_embedding *out,
                                      emb_fasttext **res);

/* Writes a fastText model file: the arguments, the vocabulary (all
 * words, counts from it), in_rows x dim input floats and out_rows x dim output floats (their
 * bytes, which need not be aligned) with qout as the output's quantization flag (dense
 * either way, as fastText reads it after a dense input), atomically. Errors: EMB_ERR_INVALID (more
 * than 2^31 - 1 words, a word with a NUL byte), EMB_ERR_IO, EMB_ERR_NOMEM. */
emb_status emb__fasttext_write(const char *path, const emb_fasttext_args *a, const emb_vocab *vocab,
                               int64_t ntokens, const void *in, int64_t in_rows, const void *out,
                               int64_t out_rows, bool qout);

#endif /* EMB_IO_NGRAMS_H */
