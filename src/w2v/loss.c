/* The training loss of word2vec with negative sampling, for reporting (docs/word2vec.md,
 * "Loss"): for every trained (input, target) term, -log sigmoid(s) for the true word
 * (label 1) and -log sigmoid(-s) for a negative (label 0), where s is the score the step
 * computes from the rows as they are when it starts. Computed in double with exact
 * logarithms (not the step's sigmoid table), from the same rows the step reads; it reads
 * the tables and never changes them, so training gives the same vectors with or without
 * it. */
#include "w2v_internal.h"

#include <math.h>

static double dot(const float *a, const float *b, int64_t dim) {
    double s = 0;
    for (int64_t k = 0; k < dim; k++) s += (double)a[k] * (double)b[k];
    return s;
}

/* -log sigmoid(label ? s : -s), without overflow for large |s|. */
static double neg_log_sigmoid(double s, bool label) {
    double z = label ? s : -s;
    return z > 0 ? log1p(exp(-z)) : -z + log1p(exp(z));
}

static double terms(const float *x, const emb__sgns_rows *out, int64_t dim, const int32_t *tgt,
                    int n) {
    double sum = 0;
    for (int j = 0; j < n; j++) {
        if (j > 0 && tgt[j] == tgt[0]) continue; /* skipped by the step too */
        sum += neg_log_sigmoid(dot(x, emb__sgns_row(out, tgt[j], dim), dim), j == 0);
    }
    return sum;
}

double emb__w2v_step_loss(const emb__sgns_rows *in, const emb__sgns_rows *out, int64_t dim,
                          const int32_t *ctx, int m, const int32_t *tgt, int n, bool cbow,
                          bool cbow_mean, float *h) {
    if (m <= 0 || n <= 0) return 0;
    if (cbow) { /* h as the step forms it: the sum of the inputs (divided by m for the mean) */
        for (int64_t k = 0; k < dim; k++) h[k] = emb__sgns_row(in, ctx[0], dim)[k];
        for (int i = 1; i < m; i++)
            for (int64_t k = 0; k < dim; k++) h[k] = h[k] + emb__sgns_row(in, ctx[i], dim)[k];
        if (cbow_mean && m > 1)
            for (int64_t k = 0; k < dim; k++) h[k] = h[k] / (float)m;
        return terms(h, out, dim, tgt, n);
    }
    double sum = 0;
    for (int i = 0; i < m; i++) sum += terms(emb__sgns_row(in, ctx[i], dim), out, dim, tgt, n);
    return sum;
}
