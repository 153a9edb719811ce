/* emb/similarity.h: the similarity queries of gensim's KeyedVectors, over the rows of a
 * cosine index (include/emb/search.h): most_similar with positive and negative rows,
 * similarity, n_similarity and doesnt_match, with gensim 4.2's rules (docs/search.md,
 * "Similarity queries"). They take rows: a table with words maps each word to its row with
 * emb_vocab_find; a table without words is queried by row id.
 *
 *   emb_knn *index;
 *   emb_knn_create(&weight, 0, &index);                        // or restrict_vocab rows
 *   int64_t pos[2] = {king, woman}, neg[1] = {man}, ids[10];
 *   float scores[10];
 *   emb_knn_most_similar(index, pos, 2, neg, 1, 10, ids, scores);  // queen, ...
 *
 * Input rows may be any row of the table; answers come from the rows the index searches
 * (its num_rows: gensim's restrict_vocab). Rows of norm 0 have similarity 0 with everything
 * (gensim would give NaN). */
#ifndef EMB_SIMILARITY_H
#define EMB_SIMILARITY_H

#include "core.h"
#include "search.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gensim's most_similar(positive, negative, topn=k, restrict_vocab=num_rows): the query is
 * the mean of the unit vectors of the positive rows and of the negated unit vectors of the
 * negative rows, normalised; the answers are the k searched rows of highest cosine with it,
 * the input rows excluded, best first (ties by row), in ids and scores (caller buffers of k;
 * when fewer rows remain, id -1 and score -INFINITY). A single positive row and no negative
 * gives that row's nearest neighbours: the way to query a table without words by row id.
 * Errors (outputs unchanged): EMB_ERR_NULL, EMB_ERR_INVALID (no input row, k < 1, a count
 * < 0), EMB_ERR_INDEX (a row outside the table: "positive 2: row 99 is out of range ..."),
 * EMB_ERR_NOMEM. */
EMB_API emb_status emb_knn_most_similar(const emb_knn *index, const int64_t *positive,
                                        int64_t n_positive, const int64_t *negative,
                                        int64_t n_negative, int64_t k, int64_t *ids, float *scores);

/* gensim's similarity(a, b): the cosine of rows a and b (computed in float64).
 * Errors: EMB_ERR_NULL, EMB_ERR_INDEX. */
EMB_API emb_status emb_knn_similarity(const emb_knn *index, int64_t a, int64_t b, double *out);

/* gensim's n_similarity(a, b): the cosine of the mean of rows a[0..na) and the mean of rows
 * b[0..nb) (means of the vectors as stored, not of unit vectors; float64).
 * Errors: EMB_ERR_NULL, EMB_ERR_INVALID (an empty set, as gensim refuses one),
 * EMB_ERR_INDEX, EMB_ERR_NOMEM. */
EMB_API emb_status emb_knn_n_similarity(const emb_knn *index, const int64_t *a, int64_t na,
                                        const int64_t *b, int64_t nb, double *out);

/* gensim's doesnt_match(rows): the row whose unit vector has the lowest cosine with the
 * normalised mean of the rows' unit vectors (ties: the first in the list).
 * Errors: EMB_ERR_NULL, EMB_ERR_INVALID (n < 1), EMB_ERR_INDEX, EMB_ERR_NOMEM. */
EMB_API emb_status emb_knn_doesnt_match(const emb_knn *index, const int64_t *rows, int64_t n,
                                        int64_t *out);

#ifdef __cplusplus
}
#endif

#endif /* EMB_SIMILARITY_H */
