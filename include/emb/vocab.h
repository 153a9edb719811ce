/* emb/vocab.h: a vocabulary — words in a fixed order, optional counts, word <-> id lookup.
 *
 * Row i of a word-vector table belongs to word i of its vocabulary. Words are byte strings
 * (compared byte for byte, no normalisation); they are usually UTF-8, and the readers of
 * formats that require UTF-8 check it. A vocabulary is built either by a
 * reader (file order) or by a trainer counting a corpus in one streaming pass:
 *
 *   emb_vocab *v; emb_vocab_create(&v);
 *   for each token: emb_vocab_add(v, tok, len, 1, NULL);     // add, or count += 1
 *   emb_vocab_sort_by_count(v, 1);                           // keep row 0 (</s>) first
 *   emb_vocab_prune(v, 1, min_count, max_size);
 *
 * Ids are dense, 0..size-1, and change only through sort/prune. One vocabulary is
 * single-threaded for writes; concurrent reads (find, word, count, size) are safe.
 */
#ifndef EMB_VOCAB_H
#define EMB_VOCAB_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct emb_vocab emb_vocab;

/* Maximum length of one word in bytes (longer words are rejected with EMB_ERR_INVALID). */
#define EMB_VOCAB_MAX_WORD (1 << 20)

/* A new empty vocabulary. Errors: EMB_ERR_NULL, EMB_ERR_NOMEM (*out untouched). */
EMB_API emb_status emb_vocab_create(emb_vocab **out);

/* Frees the vocabulary and its words. NULL is fine. */
EMB_API void emb_vocab_free(emb_vocab *v);

/* Number of words. 0 for NULL. */
EMB_API int64_t emb_vocab_num_words(const emb_vocab *v);

/* Makes room for `n` words in total (and their hash slots) so that adding up to n words
 * allocates only for their bytes: readers call it with a file's row count. Never shrinks.
 * Errors (unchanged): EMB_ERR_NULL, EMB_ERR_INVALID (n < 0), EMB_ERR_OVERFLOW, EMB_ERR_NOMEM. */
EMB_API emb_status emb_vocab_reserve(emb_vocab *v, int64_t n);

/* Adds `word` (len bytes; any bytes, NUL included, though formats restrict them) with
 * `count`, or, when the word is already present, adds `count` to its count (saturating at
 * INT64_MAX). *id (may be NULL) receives the word's id. *added (may be NULL) receives true
 * when the word is new. count must be >= 0.
 * Errors (vocabulary unchanged): EMB_ERR_NULL (v NULL, word NULL with len > 0),
 * EMB_ERR_INVALID (len 0 or > EMB_VOCAB_MAX_WORD, count < 0), EMB_ERR_OVERFLOW, EMB_ERR_NOMEM. */
EMB_API emb_status emb_vocab_add(emb_vocab *v, const char *word, size_t len, int64_t count,
                                 int64_t *id, bool *added);

/* The id of `word` (len bytes), or -1 when it is not in the vocabulary (or v is NULL). */
EMB_API int64_t emb_vocab_find(const emb_vocab *v, const char *word, size_t len);

/* Word `id` as a NUL-terminated string (the bytes, then a NUL), its length in *len (may be
 * NULL). NULL when id is out of range. The pointer stays valid until the vocabulary is
 * changed or freed. */
EMB_API const char *emb_vocab_word(const emb_vocab *v, int64_t id, size_t *len);

/* The count of word `id` (0 when the vocabulary has no counts), or -1 when id is out of
 * range. */
EMB_API int64_t emb_vocab_count(const emb_vocab *v, int64_t id);

/* Sets the count of word `id`. Errors: EMB_ERR_NULL, EMB_ERR_INDEX, EMB_ERR_INVALID
 * (count < 0). */
EMB_API emb_status emb_vocab_set_count(emb_vocab *v, int64_t id, int64_t count);

/* True when some word has a non-zero count (the format or the trainer provided counts). */
EMB_API bool emb_vocab_has_counts(const emb_vocab *v);

/* Reorders words by descending count, ties kept in their current order (stable), leaving
 * the first `keep_first` words where they are (word2vec keeps </s> at row 0). If perm is
 * not NULL it must hold size entries and receives, for each new id, the old id.
 * Errors (unchanged): EMB_ERR_NULL, EMB_ERR_INVALID (keep_first < 0), EMB_ERR_NOMEM. */
EMB_API emb_status emb_vocab_sort_by_count(emb_vocab *v, int64_t keep_first, int64_t *perm);

/* Removes every word after the first `keep_first` whose count is below min_count, then, if
 * more than max_size words remain (max_size > 0), the last ones: after sort_by_count that
 * drops the rarest, as word2vec's min-count and gensim's max_final_vocab do. Order of the
 * remaining words is kept and ids are renumbered densely. max_size 0: no size limit.
 * Errors (unchanged): EMB_ERR_NULL, EMB_ERR_INVALID (negative arguments), EMB_ERR_NOMEM. */
EMB_API emb_status emb_vocab_prune(emb_vocab *v, int64_t keep_first, int64_t min_count,
                                   int64_t max_size);

/* Writes the words and their counts in the word2vec tool's -save-vocab format, one
 * "word count" line per word in id order, atomically (a temporary file renamed into place).
 * Errors: EMB_ERR_NULL, EMB_ERR_INVALID (a word holding a space, tab or line break, which
 * the format cannot hold), EMB_ERR_IO (the file's name and the system's reason). */
EMB_API emb_status emb_vocab_save(const emb_vocab *v, const char *path);

/* Reads a vocabulary in that format (the word2vec tool's -read-vocab): "word count" lines,
 * the word up to the last blank of the line, CR LF accepted, blank lines skipped; words in
 * file order, counts as given. Errors (*out untouched): EMB_ERR_NULL, EMB_ERR_IO,
 * EMB_ERR_FORMAT ("vocab.txt: line 3 (byte offset 20): expected \"word count\""; a word
 * that repeats an earlier one, is not UTF-8 or is longer than EMB_VOCAB_MAX_WORD; a count
 * that is not a number in [1, 2^63)), EMB_ERR_NOMEM. */
EMB_API emb_status emb_vocab_load(const char *path, emb_vocab **out);

#ifdef __cplusplus
}
#endif

#endif /* EMB_VOCAB_H */
