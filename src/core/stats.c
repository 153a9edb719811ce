/* Rank statistics for word-vector evaluations (<emb/util.h>): Spearman correlation. */
#include <emb/util.h>

#include "internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

typedef struct {
    double v;
    int64_t i;
} emb__ranked;

static int cmp_ranked(const void *a, const void *b) {
    const emb__ranked *x = a, *y = b;
    if (x->v < y->v) return -1;
    if (x->v > y->v) return 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* ranks[i] = the 1-based rank of v[i], ties sharing their average rank. */
static void average_ranks(const double *v, int64_t n, emb__ranked *tmp, double *ranks) {
    for (int64_t i = 0; i < n; i++) tmp[i].v = v[i], tmp[i].i = i;
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_ranked);
    for (int64_t i = 0; i < n;) {
        int64_t j = i + 1;
        while (j < n && tmp[j].v == tmp[i].v) j++;
        double r = 0.5 * (double)(i + 1 + j); /* mean of ranks i+1 .. j */
        for (int64_t m = i; m < j; m++) ranks[tmp[m].i] = r;
        i = j;
    }
}

emb_status emb_spearman(const double *x, const double *y, int64_t n, double *rho) {
    if (!x) return emb__null("x");
    if (!y) return emb__null("y");
    if (!rho) return emb__null("rho");
    if (n < 2) return emb__error(EMB_ERR_INVALID, "need at least 2 pairs, got %" PRId64, n);
    for (int64_t i = 0; i < n; i++)
        if (isnan(x[i]) || isnan(y[i]))
            return emb__error(EMB_ERR_INVALID, "pair %" PRId64 " has a NaN value", i);
    if ((uint64_t)n > SIZE_MAX / (sizeof(emb__ranked) + 2 * sizeof(double)))
        return emb__error(EMB_ERR_OVERFLOW, "too many pairs");
    emb__ranked *tmp = malloc((size_t)n * sizeof *tmp);
    double *rx = malloc((size_t)n * sizeof *rx), *ry = malloc((size_t)n * sizeof *ry);
    if (!tmp || !rx || !ry) {
        free(tmp), free(rx), free(ry);
        return emb__error(EMB_ERR_NOMEM, "cannot allocate ranks of %" PRId64 " pairs", n);
    }
    average_ranks(x, n, tmp, rx);
    average_ranks(y, n, tmp, ry);
    double mx = 0, my = 0;
    for (int64_t i = 0; i < n; i++) mx += rx[i], my += ry[i];
    mx /= (double)n, my /= (double)n;
    double sxy = 0, sxx = 0, syy = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = rx[i] - mx, b = ry[i] - my;
        sxy += a * b, sxx += a * a, syy += b * b;
    }
    *rho = (sxx > 0 && syy > 0) ? sxy / sqrt(sxx * syy) : NAN;
    free(tmp), free(rx), free(ry);
    return EMB_OK;
}
