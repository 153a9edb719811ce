/* The similarity queries of gensim's KeyedVectors over a cosine index
 * (include/emb/similarity.h): most_similar, similarity, n_similarity, doesnt_match. Means
 * and dot products are summed in float64 from the float32 rows (or their unit vectors as the
 * searches form them); most_similar's ranking goes through the index's own search. */
#include <emb/similarity.h>

#include "internal.h"
#include "knn_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static emb_status check_rows(const emb_knn *x, const char *what, const int64_t *rows, int64_t n) {
    if (n < 0)
        return emb__error(EMB_ERR_INVALID, "the number of %s rows is negative (%" PRId64 ")", what,
                          n);
    if (n > 0 && !rows) return emb__null(what);
    const int64_t v = emb__knn_total_rows(x);
    for (int64_t i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= v)
            return emb__error(EMB_ERR_INDEX,
                              "%s %" PRId64 ": row %" PRId64
                              " is out of range for a table of %" PRId64
                              " rows (valid: [0, %" PRId64 "))",
                              what, i, rows[i], v, v);
    return EMB_OK;
}

/* acc[0..d) += weight * row (the row itself, or its unit vector). */
static void add_row(const emb_knn *x, int64_t r, bool unit, double weight, double *acc,
                    float *buf) {
    const int64_t d = emb_knn_dim(x);
    const float *v = buf;
    if (unit)
        emb__knn_unit_row(x, r, buf);
    else
        v = emb__knn_row(x, r, buf);
    for (int64_t j = 0; j < d; j++) acc[j] += weight * (double)v[j];
}

/* 1 / |v| of a float64 vector; 0 for a zero (or non-finite) norm. */
static double inv_norm(const double *v, int64_t d) {
    double s = 0;
    for (int64_t j = 0; j < d; j++) s += v[j] * v[j];
    double n = sqrt(s);
    return n > 0 && isfinite(n) ? 1.0 / n : 0.0;
}

emb_status emb_knn_most_similar(const emb_knn *index, const int64_t *positive, int64_t n_positive,
                                const int64_t *negative, int64_t n_negative, int64_t k,
                                int64_t *ids, float *scores) {
    if (!index) return emb__null("index");
    emb_status st;
    if ((st = check_rows(index, "positive", positive, n_positive)) ||
        (st = check_rows(index, "negative", negative, n_negative)))
        return st;
    if (n_positive + n_negative == 0)
        return emb__error(EMB_ERR_INVALID,
                          "most_similar needs at least one positive or negative row");
    if (k < 1) return emb__error(EMB_ERR_INVALID, "k must be at least 1, got %" PRId64, k);
    if (!ids) return emb__null("ids");
    if (!scores) return emb__null("scores");
    const int64_t d = emb_knn_dim(index), n_in = n_positive + n_negative;
    double *acc = calloc((size_t)d, sizeof(double));
    float *buf = malloc((size_t)d * sizeof(float)), *q = malloc((size_t)d * sizeof(float));
    int64_t *ex = malloc((size_t)n_in * sizeof(int64_t));
    int64_t *tid = malloc((size_t)k * sizeof(int64_t));
    float *tsc = malloc((size_t)k * sizeof(float));
    if (!acc || !buf || !q || !ex || !tid || !tsc) {
        st = emb__error(EMB_ERR_NOMEM, "cannot allocate a most_similar query");
    } else {
        /* the mean of +unit(positive) and -unit(negative); its direction is all that counts */
        for (int64_t i = 0; i < n_positive; i++) add_row(index, positive[i], true, 1.0, acc, buf);
        for (int64_t i = 0; i < n_negative; i++) add_row(index, negative[i], true, -1.0, acc, buf);
        double inv = inv_norm(acc, d);
        for (int64_t j = 0; j < d; j++) q[j] = (float)(acc[j] * inv);
        if (n_positive) memcpy(ex, positive, (size_t)n_positive * sizeof(int64_t));
        if (n_negative) memcpy(ex + n_positive, negative, (size_t)n_negative * sizeof(int64_t));
        st = emb__knn_search_unit(index, q, k, ex, n_in, tid, tsc);
        if (st == EMB_OK) {
            memcpy(ids, tid, (size_t)k * sizeof(int64_t));
            memcpy(scores, tsc, (size_t)k * sizeof(float));
        }
    }
    free(acc), free(buf), free(q), free(ex), free(tid), free(tsc);
    return st;
}

/* The cosine of two float64 vectors (0 when one has norm 0). */
static double cosine(const double *a, const double *b, int64_t d) {
    double dot = 0;
    for (int64_t j = 0; j < d; j++) dot += a[j] * b[j];
    return dot * inv_norm(a, d) * inv_norm(b, d);
}

emb_status emb_knn_n_similarity(const emb_knn *index, const int64_t *a, int64_t na,
                                const int64_t *b, int64_t nb, double *out) {
    if (!index) return emb__null("index");
    if (!out) return emb__null("out");
    emb_status st;
    if ((st = check_rows(index, "first set's", a, na)) ||
        (st = check_rows(index, "second set's", b, nb)))
        return st;
    if (na == 0 || nb == 0)
        return emb__error(EMB_ERR_INVALID,
                          "n_similarity needs two non-empty sets of rows (got %" PRId64
                          " and %" PRId64 ")",
                          na, nb);
    const int64_t d = emb_knn_dim(index);
    double *ma = calloc((size_t)d * 2, sizeof(double));
    float *buf = malloc((size_t)d * sizeof(float));
    if (!ma || !buf) {
        free(ma), free(buf);
        return emb__error(EMB_ERR_NOMEM, "cannot allocate an n_similarity query");
    }
    double *mb = ma + d;
    /* sums, not means: the cosine does not see the scale */
    for (int64_t i = 0; i < na; i++) add_row(index, a[i], false, 1.0, ma, buf);
    for (int64_t i = 0; i < nb; i++) add_row(index, b[i], false, 1.0, mb, buf);
    *out = cosine(ma, mb, d);
    free(ma), free(buf);
    return EMB_OK;
}

emb_status emb_knn_similarity(const emb_knn *index, int64_t a, int64_t b, double *out) {
    if (!index) return emb__null("index");
    if (!out) return emb__null("out");
    emb_status st;
    if ((st = check_rows(index, "first", &a, 1)) || (st = check_rows(index, "second", &b, 1)))
        return st;
    return emb_knn_n_similarity(index, &a, 1, &b, 1, out);
}

emb_status emb_knn_doesnt_match(const emb_knn *index, const int64_t *rows, int64_t n,
                                int64_t *out) {
    if (!index) return emb__null("index");
    if (!out) return emb__null("out");
    emb_status st = check_rows(index, "doesnt_match", rows, n);
    if (st) return st;
    if (n < 1) return emb__error(EMB_ERR_INVALID, "doesnt_match needs at least one row");
    const int64_t d = emb_knn_dim(index);
    double *mean = calloc((size_t)d, sizeof(double));
    float *buf = malloc((size_t)d * sizeof(float));
    if (!mean || !buf) {
        free(mean), free(buf);
        return emb__error(EMB_ERR_NOMEM, "cannot allocate a doesnt_match query");
    }
    for (int64_t i = 0; i < n; i++) add_row(index, rows[i], true, 1.0, mean, buf);
    double inv = inv_norm(mean, d), best = INFINITY;
    int64_t pick = rows[0];
    for (int64_t i = 0; i < n; i++) {
        emb__knn_unit_row(index, rows[i], buf);
        double dot = 0;
        for (int64_t j = 0; j < d; j++) dot += (double)buf[j] * mean[j] * inv;
        if (dot < best) best = dot, pick = rows[i];
    }
    *out = pick;
    free(mean), free(buf);
    return EMB_OK;
}
