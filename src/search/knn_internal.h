/* src/search/knn_internal.h: what the similarity queries (similarity.c) use of the cosine
 * index of knn.c. */
#ifndef EMB_KNN_INTERNAL_H
#define EMB_KNN_INTERNAL_H

#include <emb/search.h>

/* Rows of the whole table (searched or not). */
int64_t emb__knn_total_rows(const emb_knn *x);
/* Row r (any row of the table, r validated) as float32: a pointer into the table, or
 * dequantized into buf (dim floats). */
const float *emb__knn_row(const emb_knn *x, int64_t r, float *buf);
/* dst = row r / |row r| (dim floats; zeros for a row of norm 0), as the searches form
 * their unit vectors. */
void emb__knn_unit_row(const emb_knn *x, int64_t r, float *dst);
/* The k best searched rows for one unit query qn [dim], rows in exclude[0..n_ex) left out;
 * ids and scores as emb_knn_search. */
emb_status emb__knn_search_unit(const emb_knn *x, const float *qn, int64_t k,
                                const int64_t *exclude, int64_t n_ex, int64_t *ids, float *scores);

#endif /* EMB_KNN_INTERNAL_H */
