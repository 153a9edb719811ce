/* emb/phrases.h: bigram phrase detection as gensim's Phrases does it (its default scorer or
 * its npmi scorer, no connector words): learn unigram and bigram counts from a corpus, then
 * rewrite text with each detected pair joined ("new york" -> "new_york"), so that training
 * sees the phrase as one token (docs/word2vec.md, "Phrases"). A corpus is read as
 * emb_w2v_create_from_files reads it (emb/word2vec.h): files, directories, "-" for stdin,
 * gzip, bzip2, xz or zstd data recognised by its first bytes.
 *
 *   emb_phrases_options o = emb_phrases_options_default();   // min_count 5, threshold 10, "_"
 *   emb_phrases *p;
 *   emb_phrases_learn("corpus.txt", &o, &p);
 *   emb_phrases_apply(p, "corpus.txt", stdout);
 *   emb_phrases_free(p);
 */
#ifndef EMB_PHRASES_H
#define EMB_PHRASES_H

#include <stdio.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gensim's scorers (Phrases' `scoring`): 'default' (Mikolov et al.) and 'npmi' (normalised
 * pointwise mutual information, in [-1, 1]). */
typedef enum emb_phrases_scoring {
    EMB_PHRASES_DEFAULT = 0,
    EMB_PHRASES_NPMI = 1,
} emb_phrases_scoring;

typedef struct emb_phrases_options {
    int64_t min_count;           /* default: subtracted from a pair's count in the score; npmi:
                                    a pair seen fewer times is never a phrase; >= 1 (5) */
    double threshold;            /* a pair is a phrase when its score is above it (gensim's 10;
                                    with npmi in [-1, 1]) */
    const char *delimiter;       /* joins the two words ("_"); 1 to 16 bytes, no whitespace */
    emb_phrases_scoring scoring; /* EMB_PHRASES_DEFAULT */
} emb_phrases_options;

EMB_API emb_phrases_options emb_phrases_options_default(void);

typedef struct emb_phrases emb_phrases;

/* Counts every token and every pair of consecutive tokens of a line (tokens separated by
 * ASCII whitespace; a line is a sentence, as gensim's LineSentence), in one table keyed by
 * the token or by "a<delimiter>b", as gensim's vocab, and the tokens (gensim's
 * corpus_word_count). path "-" reads stdin.
 * Errors (*out untouched): EMB_ERR_NULL, EMB_ERR_INVALID (options), EMB_ERR_IO (the file's
 * name and the system's reason), EMB_ERR_FORMAT (a token or pair longer than
 * EMB_VOCAB_MAX_WORD bytes: "corpus.txt:12: ..."; corrupt compressed data: the file and the
 * offset), EMB_ERR_UNSUPPORTED (a compression this build has no library for), EMB_ERR_NOMEM. */
EMB_API emb_status emb_phrases_learn(const char *path, const emb_phrases_options *opts,
                                     emb_phrases **out);
/* The same over paths[0..n), read one after the other as emb_w2v_create_from_files reads
 * them: as if concatenated with a line end between two files, a UTF-8 byte-order mark at
 * the start of each file dropped (line numbers in messages count lines of that
 * concatenation). Errors: as emb_phrases_learn, EMB_ERR_INVALID (n == 0, "-" twice),
 * EMB_ERR_IO (a directory without files). */
EMB_API emb_status emb_phrases_learn_files(const char *const *paths, size_t n,
                                           const emb_phrases_options *opts, emb_phrases **out);
EMB_API void emb_phrases_free(emb_phrases *p);

/* gensim's score of the pair (a, b), in float64 as gensim computes it; -INFINITY when a, b
 * or the pair was never seen. Default: (count(a b) - min_count) / (count(a) * count(b)) *
 * size, size the number of distinct keys (tokens and pairs) counted. npmi: -INFINITY when
 * count(a b) < min_count, else log(p(a b) / (p(a) * p(b))) / -log(p(a b)), each p a count
 * over the tokens counted. */
EMB_API double emb_phrases_score(const emb_phrases *p, const char *a, size_t na, const char *b,
                                 size_t nb);

/* Rewrites the text of `path` ("-": stdin) line by line to `out`, as gensim's
 * phrases[sentence]: from left to right, a token and the next form a phrase when their score
 * is above the threshold; the pair is written joined by the delimiter and the scan goes on
 * after it; tokens are written separated by one space, each line ending in a newline.
 * Returns the number of phrases written in *n_phrases (may be NULL).
 * Errors: EMB_ERR_NULL, EMB_ERR_IO (reading, or writing `out`), EMB_ERR_FORMAT and
 * EMB_ERR_UNSUPPORTED (compressed data, as emb_phrases_learn), EMB_ERR_NOMEM. */
EMB_API emb_status emb_phrases_apply(const emb_phrases *p, const char *path, FILE *out,
                                     int64_t *n_phrases);
/* The same over paths[0..n) (emb_phrases_learn_files). */
EMB_API emb_status emb_phrases_apply_files(const emb_phrases *p, const char *const *paths, size_t n,
                                           FILE *out, int64_t *n_phrases);

/* Learns the phrases of paths[0..n) and writes their phrased text to `out`: emb_phrases_learn_files
 * then emb_phrases_apply_files, reading the corpus twice. Standard input ("-") cannot be
 * read twice: it is copied once, as it comes, into a temporary file in TMPDIR (without a
 * name in the folder, so nothing is left behind) of at most 64 GiB, and read from there.
 * Errors: as emb_phrases_learn_files and emb_phrases_apply_files, EMB_ERR_IO (the copy of
 * stdin cannot be written: the message names the folder), EMB_ERR_UNSUPPORTED (stdin longer
 * than 64 GiB). */
EMB_API emb_status emb_phrases_rewrite_files(const char *const *paths, size_t n,
                                             const emb_phrases_options *opts, FILE *out,
                                             int64_t *n_phrases);

#ifdef __cplusplus
}
#endif

#endif /* EMB_PHRASES_H */
