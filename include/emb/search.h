/* emb/search.h: nearest neighbours by cosine similarity over the rows of a table, word
 * analogies (b - a + c), and 2-D maps of rows (PCA, t-SNE).
 *
 * Scores are cosine similarities computed as dot(q / |q|, row) * (1 / |row|), through
 * CBLAS matrix products over blocks of queries and rows when the build has CBLAS, else a
 * plain-C product; they equal a float64 computation within float32 tolerance (a few ulps),
 * not bit for bit (docs/search.md). Rankings are by score, descending; equal scores are
 * ordered by row, ascending, so a result never depends on the thread count or the block
 * sizes except where two scores are within rounding of each other.
 */
#ifndef EMB_SEARCH_H
#define EMB_SEARCH_H

#include "core.h"
#include "quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A cosine-similarity index over rows [0, num_rows) of a 2-D float32 table [V, D]. It keeps
 * a pointer to the table (borrowed: the table must outlive the index and not change, or the
 * scores are stale) and the inverse norm of each searched row (4 bytes a row). A row whose
 * norm is 0 (or not finite) has similarity 0 with every query and never ranks above a row
 * with a positive similarity. Thread safety: after creation an index is read-only; searches
 * on one index may run concurrently. */
typedef struct emb_knn emb_knn;

/* Builds an index over the first num_rows rows of `table` (0: all of them; like gensim's
 * restrict_vocab and the word2vec tool's threshold, this limits the search to the most
 * frequent words when the rows are sorted by frequency).
 * Errors (*out untouched): EMB_ERR_NULL, EMB_ERR_DTYPE (not float32), EMB_ERR_SHAPE (not
 * 2-D, or no rows/columns), EMB_ERR_INVALID (num_rows < 0 or > V), EMB_ERR_NOMEM. */
EMB_API emb_status emb_knn_create(const emb_tensor *table, int64_t num_rows, emb_knn **out);
/* The same index over a reduced-precision or quantized table (include/emb/quant.h), read
 * directly: rows are dequantized block by block as they are scored, so memory stays the
 * table (mapped or not) plus the norms and a block of rows; scores are those of the
 * dequantized rows. The table is borrowed and must outlive the index.
 * Errors (*out untouched): EMB_ERR_NULL, EMB_ERR_SHAPE (no rows or columns),
 * EMB_ERR_INVALID (num_rows), EMB_ERR_NOMEM. */
EMB_API emb_status emb_knn_create_from_qtable(const emb_qtable *table, int64_t num_rows,
                                              emb_knn **out);
EMB_API void emb_knn_free(emb_knn *index);

/* Number of rows searched, and the dimension. 0 for NULL. */
EMB_API int64_t emb_knn_num_rows(const emb_knn *index);
EMB_API int64_t emb_knn_dim(const emb_knn *index);

/* The k nearest rows of each query: queries is float32 [Q, D] (D the table's dimension);
 * ids and scores (caller buffers of Q * k) receive, for query q, the rows with the highest
 * cosine similarity in ids[q*k .. q*k+k) (descending) and their similarities. exclude
 * (may be NULL when n_exclude is 0) is [Q, n_exclude]: rows never returned for that query
 * (-1 entries are ignored), as most_similar excludes the query words. When fewer than k
 * rows remain, the remaining slots get id -1 and score -INFINITY. A query of norm 0 scores
 * 0 against every row. Q may be 0.
 * Errors (ids and scores unchanged): EMB_ERR_NULL, EMB_ERR_DTYPE, EMB_ERR_SHAPE (queries
 * not [Q, D]), EMB_ERR_INVALID (k < 1, n_exclude < 0), EMB_ERR_OVERFLOW, EMB_ERR_NOMEM. */
EMB_API emb_status emb_knn_search(const emb_knn *index, const emb_tensor *queries, int64_t k,
                                  const int64_t *exclude, int64_t n_exclude, int64_t *ids,
                                  float *scores);

/* Word analogies by 3CosAdd, as the word2vec tool's compute-accuracy and gensim's
 * most_similar(positive=[b, c], negative=[a]) rank them: for each question q, with a, b, c
 * = abc[3q], abc[3q+1], abc[3q+2] (rows of the table; they may lie beyond the searched
 * rows), the query is unit(b) - unit(a) + unit(c) and the answers are its k nearest
 * searched rows other than a, b and c ("a is to b as c is to ?"). ids/scores as
 * emb_knn_search ([Q, k]); scores are cosines with the normalised query.
 * Errors (outputs unchanged): EMB_ERR_NULL, EMB_ERR_INVALID (k < 1, n_questions < 0),
 * EMB_ERR_INDEX (a row outside [0, V): "analogy 3: row 12 is out of range ..."),
 * EMB_ERR_OVERFLOW, EMB_ERR_NOMEM. */
EMB_API emb_status emb_knn_analogy(const emb_knn *index, const int64_t *abc, int64_t n_questions,
                                   int64_t k, int64_t *ids, float *scores);

/* ---------------------------------------------------------------------------------------
 * 2-D maps of rows (docs/search.md, "Maps"): principal component analysis and t-SNE, for
 * pictures of a table such as the map `emb plot` draws and `emb serve`'s page shows. Both
 * compute in float64 and give the same bits at any thread count.
 * ------------------------------------------------------------------------------------- */

/* The coordinates of the rows of x (float32 [n, d], finite) on their first k principal
 * axes: coords [n, k] (caller's buffer) receives (x_i - mean) . axis_j. The axes are the
 * eigenvectors of the covariance matrix (denominator n - 1), largest eigenvalue first;
 * variance (k doubles, may be NULL) receives those eigenvalues (scikit-learn's
 * explained_variance_). Each axis's sign is scikit-learn's: the coordinate of largest
 * magnitude on it is positive. Errors (outputs unchanged): EMB_ERR_NULL, EMB_ERR_DTYPE,
 * EMB_ERR_SHAPE (x not 2-D, no rows or columns), EMB_ERR_INVALID (k outside [1, d]; a NaN
 * or infinite value, named by row and column), EMB_ERR_OVERFLOW, EMB_ERR_NOMEM. */
EMB_API emb_status emb_pca(const emb_tensor *x, int64_t k, float *coords, double *variance);

typedef struct emb_tsne_options {
    double perplexity;               /* effective number of neighbours, in (0, n) (default 30) */
    int64_t iterations;              /* gradient steps, [0, 1000000] (default 1000) */
    double theta;                    /* Barnes-Hut accuracy in [0, 1]: a cell counts as one point
                                      * when its width is below theta times its distance (default
                                      * 0.5); 0: the exact gradient, O(n^2) per step */
    double learning_rate;            /* default 0: max(n / early_exaggeration / 4, 50) */
    double early_exaggeration;       /* >= 1 (default 12) */
    int64_t exaggeration_iterations; /* the first steps, with exaggerated P and momentum 0.5
                                      * (then 0.8), in [0, iterations] (default 250) */
} emb_tsne_options;

EMB_API emb_tsne_options emb_tsne_options_default(void);

/* t-SNE (van der Maaten and Hinton 2008) of the rows of x (float32 [n, d], finite, n >= 2)
 * into coords [n, 2], with the Barnes-Hut gradient (van der Maaten 2014) and scikit-learn's
 * recipe: the input similarities over each point's min(n - 1, 3 * perplexity + 1) nearest
 * neighbours (squared Euclidean distances, exact search), each row's Gaussian chosen by
 * bisection to the perplexity, symmetrised and normalised; the start is the PCA layout scaled
 * to a standard deviation of 1e-4 on the first axis (no random numbers); steps with momentum
 * and adaptive gains. Runs all the iterations (no early stop). kl (may be NULL) receives the
 * final KL divergence between the input similarities and the layout's, computed exactly.
 * opts NULL: the defaults. Cost: O(n^2 d) for the neighbours, then O(n log n) per step.
 * Errors (outputs unchanged): EMB_ERR_NULL, EMB_ERR_DTYPE, EMB_ERR_SHAPE (x not 2-D, fewer
 * than 2 rows), EMB_ERR_INVALID (an option out of its range, a non-finite value),
 * EMB_ERR_OVERFLOW, EMB_ERR_NOMEM. */
EMB_API emb_status emb_tsne(const emb_tensor *x, const emb_tsne_options *opts, float *coords,
                            double *kl);

#ifdef __cplusplus
}
#endif

#endif /* EMB_SEARCH_H */
