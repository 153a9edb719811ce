/* emb/phrases.h: bigram phrase detection as gensim's Phrases does it (default scorer, no
 * connector words): learn unigram and bigram counts from a corpus, then rewrite text with
 * each detected pair joined ("new york" -> "new_york"), so that training sees the phrase as
 * one token (docs/word2vec.md, "Phrases").
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

typedef struct emb_phrases_options {
    int64_t min_count;     /* subtracted from a pair's count in the score; >= 1 (gensim's 5) */
    double threshold;      /* a pair is a phrase when its score is above it (gensim's 10) */
    const char *delimiter; /* joins the two words ("_"); 1 to 16 bytes, no whitespace */
} emb_phrases_options;

EMB_API emb_phrases_options emb_phrases_options_default(void);

typedef struct emb_phrases emb_phrases;

/* Counts every token and every pair of consecutive tokens of a line (tokens separated by
 * ASCII whitespace; a line is a sentence, as gensim's LineSentence), in one table keyed by
 * the token or by "a<delimiter>b", as gensim's vocab. path "-" reads stdin.
 * Errors (*out untouched): EMB_ERR_NULL, EMB_ERR_INVALID (options), EMB_ERR_IO (the file's
 * name and the system's reason), EMB_ERR_FORMAT (a token or pair longer than
 * EMB_VOCAB_MAX_WORD bytes: "corpus.txt:12: ..."), EMB_ERR_NOMEM. */
EMB_API emb_status emb_phrases_learn(const char *path, const emb_phrases_options *opts,
                                     emb_phrases **out);
EMB_API void emb_phrases_free(emb_phrases *p);

/* gensim's default score of the pair (a, b): (count(a b) - min_count) / (count(a) *
 * count(b)) * size, size the number of distinct keys (tokens and pairs) counted, in float64
 * as gensim computes it; -INFINITY when a, b or the pair was never seen. */
EMB_API double emb_phrases_score(const emb_phrases *p, const char *a, size_t na, const char *b,
                                 size_t nb);

/* Rewrites the text of `path` ("-": stdin) line by line to `out`, as gensim's
 * phrases[sentence]: from left to right, a token and the next form a phrase when their score
 * is above the threshold; the pair is written joined by the delimiter and the scan goes on
 * after it; tokens are written separated by one space, each line ending in a newline.
 * Returns the number of phrases written in *n_phrases (may be NULL).
 * Errors: EMB_ERR_NULL, EMB_ERR_IO (reading, or writing `out`), EMB_ERR_NOMEM. */
EMB_API emb_status emb_phrases_apply(const emb_phrases *p, const char *path, FILE *out,
                                     int64_t *n_phrases);

#ifdef __cplusplus
}
#endif

#endif /* EMB_PHRASES_H */
