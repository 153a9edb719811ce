/* src/kernels/sgns_body.h: the body of the word2vec step (see sgns.h), compiled once per
 * variant. The including file defines EMB__SGNS_NAME (the function's name),
 * EMB__SGNS_ATTR (its target attribute, or nothing) and a static function
 * `float sgns_dot(const float *a, const float *b, int64_t n)` with the lane order of
 * sgns.h; with EMB__SGNS_PAIR_BATCHED, also the side-by-side kernels named below. */
#include <math.h>
#include <string.h>

/* (label - sigmoid(f)) * alpha with the word2vec tool's table and saturation. A score that
 * is NaN (which fails both saturation tests, and whose conversion to an index is undefined)
 * or infinite clears *finite; NaN gives no update. Scores in (-MAX_EXP, MAX_EXP) index
 * [0, EMB__SGNS_TABLE]: the largest float below MAX_EXP rounds to the last entry. */
static inline float sgns_grad(float f, float label, float alpha, const float *sigmoid,
                              bool *finite) {
    float s;
    if (f >= (float)EMB__SGNS_MAX_EXP)
        s = 1.0f;
    else if (f <= -(float)EMB__SGNS_MAX_EXP)
        s = 0.0f;
    else if (f == f)
        s = sigmoid[(int)((f + (float)EMB__SGNS_MAX_EXP) *
                          ((float)EMB__SGNS_TABLE / (float)EMB__SGNS_MAX_EXP / 2.0f))];
    else
        s = label;
    *finite &= isfinite(f) != 0;
    return (label - s) * alpha;
}

#ifdef EMB__SGNS_PAIR_BATCHED
/* The rows of the targets that are trained (tgt[0], then every negative not equal to it),
 * in order, into rows[]; their count, or -1 when two of them are the same row (or there are
 * more than EMB__SGNS_PAIR_MAX targets): then one target's update reaches a later one's
 * score and only the in-place loop gives the defined result. */
static inline int sgns_distinct_rows(const emb__sgns_rows *out, int64_t dim, const int32_t *tgt,
                                     int n, float **rows) {
    if (n > EMB__SGNS_PAIR_MAX) return -1;
    int t = 0;
    for (int j = 0; j < n; j++) {
        if (j > 0 && tgt[j] == tgt[0]) continue;
        for (int q = 1; q < j; q++)
            if (tgt[q] == tgt[j]) return -1;
        rows[t++] = emb__sgns_row(out, tgt[j], dim);
    }
    return t;
}

/* The including file also defines sgns_dot3 (x against three rows side by side, each in
 * sgns_dot's order), sgns_dot2x3 (two inputs against three rows), sgns_update_pass (the fused
 * update below, over its register width) and sgns_fma_rows (a row plus a weighted sum of
 * rows, element by element in order). */
/* x . rows[j] for j in [0, t), three at a time (a last group of one or two repeats its last
 * row): out[0..t) (out has room for t + 2). */
EMB__SGNS_ATTR static inline void sgns_dots(const float *x, const float *const *rows, int t,
                                            int64_t dim, float *out) {
    for (int j = 0; j < t; j += 3) {
        const float *y1 = rows[j + 1 < t ? j + 1 : t - 1], *y2 = rows[j + 2 < t ? j + 2 : t - 1];
        sgns_dot3(x, rows[j], y1, y2, dim, out + j);
    }
}

/* One input x (a skip-gram context row, or CBOW's combined context h) against t trained
 * targets that are distinct rows (rows[0] the true word): the scores first, then one pass
 * that, for each block of 8 elements, accumulates e = sum_j g_j y_j (j in order, from zero,
 * with fmaf), updates every y_j += g_j x, and finally x += e (e_out NULL) or stores e to
 * e_out (CBOW, which adds it to every context row): per element, the operations of the
 * in-place loop in the same order, so the same bits, with the targets' rows fetched and
 * scored side by side (sgns_dot3) instead of one after another. */
EMB__SGNS_ATTR static bool sgns_pair_batched(float *x, float *const *rows, int t, int64_t dim,
                                             float alpha, const float *sigmoid, float *e_out) {
    float g[EMB__SGNS_PAIR_MAX + 2];
    bool finite = true;
    sgns_dots(x, (const float *const *)rows, t, dim, g);
    for (int j = 0; j < t; j++)
        g[j] = sgns_grad(g[j], j == 0 ? 1.0f : 0.0f, alpha, sigmoid, &finite);
    sgns_update_pass(x, rows, t, g, dim, e_out);
    return finite;
}

/* The skip-gram step with shared negatives (m > 1 context rows against n targets, sgns.h)
 * without copying the rows: the m x n scores in blocks of 2 x 3 in registers (sgns_dot2x3,
 * the dot product's order), then the output rows, each read once and updated with every
 * nonzero G[i][j] in i order while the input rows are still as on entry (each target row's
 * value on entry saved in scratch as it is first read; a repeated negative uses its first
 * occurrence's), then the input rows, each read once and updated in j order from the saved
 * targets. Per element, the operations of the reference in the same order: the same bits. */
EMB__SGNS_ATTR static bool sgns_window_blocked(const emb__sgns_rows *in, const emb__sgns_rows *out,
                                               int64_t dim, const int32_t *ctx, int m,
                                               const int32_t *tgt, int n, float alpha,
                                               const float *sigmoid, float *scratch) {
    float *G = scratch, *Ysave = scratch + (int64_t)m * n;
    const float *x[EMB__SGNS_WINDOW_MAX], *y[EMB__SGNS_PAIR_MAX + 2], *src[EMB__SGNS_WINDOW_MAX];
    int first[EMB__SGNS_PAIR_MAX];
    float g[EMB__SGNS_WINDOW_MAX], d0[EMB__SGNS_PAIR_MAX + 2], d1[EMB__SGNS_PAIR_MAX + 2];
    bool finite = true;
    for (int i = 0; i < m; i++) x[i] = emb__sgns_row(in, ctx[i], dim);
    for (int j = 0; j < n; j++) {
        y[j] = emb__sgns_row(out, tgt[j], dim);
        first[j] = j;
        for (int q = 0; q < j; q++)
            if (tgt[q] == tgt[j]) {
                first[j] = q;
                break;
            }
    }
    y[n] = y[n + 1] = y[n - 1]; /* a last group of one or two repeats the last row */
    for (int i = 0; i < m; i += 2) {
        for (int j = 0; j < n; j += 3) {
            if (i + 1 < m)
                sgns_dot2x3(x[i], x[i + 1], y + j, dim, d0 + j, d1 + j);
            else
                sgns_dot3(x[i], y[j], y[j + 1], y[j + 2], dim, d0 + j);
        }
        for (int r = i; r < m && r < i + 2; r++)
            for (int j = 0; j < n; j++)
                G[r * n + j] = j > 0 && tgt[j] == tgt[0]
                                   ? 0.0f
                                   : sgns_grad(r == i ? d0[j] : d1[j], j == 0 ? 1.0f : 0.0f, alpha,
                                               sigmoid, &finite);
    }
    for (int j = 0; j < n; j++) {
        if (j > 0 && tgt[j] == tgt[0]) continue;
        float *row = emb__sgns_row(out, tgt[j], dim);
        int c = 0;
        for (int i = 0; i < m; i++)
            if (G[i * n + j] != 0.0f) g[c] = G[i * n + j], src[c++] = x[i];
        /* the row's value on entry saved as it is read (a repeat's is its first's) */
        sgns_fma_rows(row, first[j] == j ? Ysave + (int64_t)j * dim : NULL, g, src, c, dim);
    }
    for (int i = 0; i < m; i++) {
        int c = 0;
        for (int j = 0; j < n; j++)
            if (G[i * n + j] != 0.0f)
                g[c] = G[i * n + j], src[c++] = Ysave + (int64_t)first[j] * dim;
        sgns_fma_rows(emb__sgns_row(in, ctx[i], dim), NULL, g, src, c, dim);
    }
    return finite;
}
#endif

/* The CBOW step (sgns.h): h from the input rows, the targets against h, e to every input. */
EMB__SGNS_ATTR static bool sgns_cbow(const emb__sgns_rows *in, const emb__sgns_rows *out,
                                     int64_t dim, const int32_t *ctx, int m, const int32_t *tgt,
                                     int n, float alpha, bool cbow_mean, const float *sigmoid,
                                     float *scratch) {
    bool finite = true;
    float *h = scratch, *e = scratch + dim;
    memcpy(h, emb__sgns_row(in, ctx[0], dim), (size_t)dim * sizeof(float));
#ifdef EMB__SGNS_PAIR_BATCHED
    /* h + x is fmaf(1, x, h), exactly: the rows added a block of registers at a time, h
     * read and written once instead of once a row */
    const float *xs[EMB__SGNS_WINDOW_MAX], *ex[1] = {e};
    static const float ones[EMB__SGNS_WINDOW_MAX] = {[0 ... EMB__SGNS_WINDOW_MAX - 1] = 1.0f};
    const bool rows_at_once = m <= EMB__SGNS_WINDOW_MAX;
    for (int i = 1; rows_at_once && i < m; i++) xs[i - 1] = emb__sgns_row(in, ctx[i], dim);
    if (rows_at_once)
        sgns_fma_rows(h, NULL, ones, xs, m - 1, dim);
    else
#endif
        for (int i = 1; i < m; i++) {
            const float *x = emb__sgns_row(in, ctx[i], dim);
            for (int64_t k = 0; k < dim; k++) h[k] = h[k] + x[k];
        }
    if (cbow_mean && m > 1) {
        float cw = (float)m;
        for (int64_t k = 0; k < dim; k++) h[k] = h[k] / cw;
    }
#ifdef EMB__SGNS_PAIR_BATCHED
    float *rows[EMB__SGNS_PAIR_MAX];
    int t = sgns_distinct_rows(out, dim, tgt, n, rows);
    if (t > 0)
        finite = sgns_pair_batched(h, rows, t, dim, alpha, sigmoid, e);
    else
#endif
    {
        memset(e, 0, (size_t)dim * sizeof(float));
        for (int j = 0; j < n; j++) {
            if (j > 0 && tgt[j] == tgt[0]) continue;
            float *y = emb__sgns_row(out, tgt[j], dim);
            float g = sgns_grad(sgns_dot(h, y, dim), j == 0 ? 1.0f : 0.0f, alpha, sigmoid, &finite);
            for (int64_t k = 0; k < dim; k++) e[k] = fmaf(g, y[k], e[k]);
            for (int64_t k = 0; k < dim; k++) y[k] = fmaf(g, h[k], y[k]);
        }
    }
    for (int i = 0; i < m; i++) {
        float *x = emb__sgns_row(in, ctx[i], dim);
#ifdef EMB__SGNS_PAIR_BATCHED
        sgns_fma_rows(x, NULL, ones, ex, 1, dim);
#else
        for (int64_t k = 0; k < dim; k++) x[k] = x[k] + e[k];
#endif
    }
    return finite;
}

EMB__SGNS_ATTR bool EMB__SGNS_NAME(const emb__sgns_rows *in, const emb__sgns_rows *out, int64_t dim,
                                   const int32_t *ctx, int m, const int32_t *tgt, int n,
                                   float alpha, bool cbow, bool cbow_mean, const float *sigmoid,
                                   float *scratch) {
    bool finite = true;
    if (m <= 0 || n <= 0) return finite;
    if (cbow) return sgns_cbow(in, out, dim, ctx, m, tgt, n, alpha, cbow_mean, sigmoid, scratch);
    if (m == 1) {
        /* One (center, context) pair: the word2vec tool's loop, in place. */
        float *x = emb__sgns_row(in, ctx[0], dim), *e = scratch;
#ifdef EMB__SGNS_PAIR_BATCHED
        /* When the targets that are trained are distinct rows, no target's update is seen by
         * another's score: every score can be computed first and the updates fused into one
         * pass, with the same operations on every element (EMB__SGNS_PAIR_BATCHED). */
        float *rows[EMB__SGNS_PAIR_MAX];
        int t = sgns_distinct_rows(out, dim, tgt, n, rows);
        if (t > 0) return sgns_pair_batched(x, rows, t, dim, alpha, sigmoid, NULL);
#endif
        memset(e, 0, (size_t)dim * sizeof(float));
        for (int j = 0; j < n; j++) {
            if (j > 0 && tgt[j] == tgt[0]) continue;
            float *y = emb__sgns_row(out, tgt[j], dim);
            float g = sgns_grad(sgns_dot(x, y, dim), j == 0 ? 1.0f : 0.0f, alpha, sigmoid, &finite);
            for (int64_t k = 0; k < dim; k++) e[k] = fmaf(g, y[k], e[k]);
            for (int64_t k = 0; k < dim; k++) y[k] = fmaf(g, x[k], y[k]);
        }
        for (int64_t k = 0; k < dim; k++) x[k] = x[k] + e[k];
        return finite;
    }
#ifdef EMB__SGNS_PAIR_BATCHED
    if (n <= EMB__SGNS_PAIR_MAX && m <= EMB__SGNS_WINDOW_MAX)
        return sgns_window_blocked(in, out, dim, ctx, m, tgt, n, alpha, sigmoid, scratch);
#endif
    float *X = scratch, *Y = X + (int64_t)m * dim, *G = Y + (int64_t)n * dim;
    for (int i = 0; i < m; i++)
        memcpy(X + (int64_t)i * dim, emb__sgns_row(in, ctx[i], dim), (size_t)dim * sizeof(float));
    for (int j = 0; j < n; j++)
        memcpy(Y + (int64_t)j * dim, emb__sgns_row(out, tgt[j], dim), (size_t)dim * sizeof(float));
#ifdef EMB__SGNS_PAIR_BATCHED
    /* the scores of a context row against the targets side by side (the same bits) */
    const float *yrows[EMB__SGNS_PAIR_MAX];
    float dots[EMB__SGNS_PAIR_MAX + 2];
    const bool side = n <= EMB__SGNS_PAIR_MAX;
    for (int j = 0; side && j < n; j++) yrows[j] = Y + (int64_t)j * dim;
#endif
    for (int i = 0; i < m; i++) {
        const float *x = X + (int64_t)i * dim;
#ifdef EMB__SGNS_PAIR_BATCHED
        if (side) sgns_dots(x, yrows, n, dim, dots);
#endif
        for (int j = 0; j < n; j++) {
            if (j > 0 && tgt[j] == tgt[0]) {
                G[i * n + j] = 0.0f;
                continue;
            }
#ifdef EMB__SGNS_PAIR_BATCHED
            float f = side ? dots[j] : sgns_dot(x, Y + (int64_t)j * dim, dim);
#else
            float f = sgns_dot(x, Y + (int64_t)j * dim, dim);
#endif
            G[i * n + j] = sgns_grad(f, j == 0 ? 1.0f : 0.0f, alpha, sigmoid, &finite);
        }
    }
    for (int i = 0; i < m; i++) {
        float *row = emb__sgns_row(in, ctx[i], dim);
        for (int j = 0; j < n; j++) {
            float g = G[i * n + j];
            if (g == 0.0f) continue;
            const float *y = Y + (int64_t)j * dim;
            for (int64_t k = 0; k < dim; k++) row[k] = fmaf(g, y[k], row[k]);
        }
    }
    for (int j = 0; j < n; j++) {
        if (j > 0 && tgt[j] == tgt[0]) continue;
        float *row = emb__sgns_row(out, tgt[j], dim);
        for (int i = 0; i < m; i++) {
            float g = G[i * n + j];
            if (g == 0.0f) continue;
            const float *x = X + (int64_t)i * dim;
            for (int64_t k = 0; k < dim; k++) row[k] = fmaf(g, x[k], row[k]);
        }
    }
    return finite;
}
