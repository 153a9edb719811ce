/* 2-D maps of a table's rows (include/emb/search.h, docs/search.md): principal component
 * analysis here, t-SNE in tsne.c, and what both use (search_internal.h).
 *
 * Both work in float64 on a copy of the rows. Every parallel loop writes disjoint outputs
 * and every sum runs in a fixed order (sums over all points are taken over per-point
 * partial results, in point order), so the results are the same bits at any thread count. */
#include <emb/search.h>

#include "search_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The point loop (search_internal.h). */
typedef struct {
    point_fn body;
    void *ctx;
    int64_t n, chunk;
    emb__counter next;
} point_loop;

static void point_range(void *p, int64_t lo, int64_t hi, int ith) {
    point_loop *l = p;
    for (int64_t i = lo; i < hi; i++) l->body(l->ctx, i, ith);
}

static void point_claims(void *p, int ith, int nth) {
    (void)nth;
    point_loop *l = p;
    for (int64_t lo; (lo = emb__claim(&l->next) * l->chunk) < l->n;) {
        const int64_t hi = lo + l->chunk < l->n ? lo + l->chunk : l->n;
        for (int64_t i = lo; i < hi; i++) l->body(l->ctx, i, ith);
    }
}

/* chunk 0: even split; otherwise chunks claimed as shares become free. */
void emb__for_points(int nth, int64_t n, int64_t chunk, point_fn body, void *ctx) {
    point_loop l = {body, ctx, n, chunk, {0}};
    if (chunk > 0)
        emb__parallel(nth, point_claims, &l);
    else
        emb__parallel_for(nth, n, point_range, &l);
}

/* ---------------------------------------------------------------------------------------
 * Checks and copies
 * ------------------------------------------------------------------------------------- */

/* x must be a finite float32 [n, d] tensor with n, d >= 1. */
emb_status emb__check_points(const emb_tensor *x, const char *op) {
    emb_status st = emb_tensor_check(x, "x");
    if (st) return st;
    if (x->dtype != EMB_FLOAT32)
        return emb__error(EMB_ERR_DTYPE, "%s: x must be float32, got %s", op,
                          emb_dtype_name(x->dtype));
    if (x->ndim != 2 || x->shape[0] < 1 || x->shape[1] < 1) {
        char buf[96];
        return emb__error(EMB_ERR_SHAPE,
                          "%s: x must be 2-D with at least one row and column, got %s", op,
                          emb__shape_fmt(buf, sizeof buf, x->ndim, x->shape));
    }
    const int64_t n = x->shape[0], d = x->shape[1];
    if ((uint64_t)n > SIZE_MAX / sizeof(double) / (uint64_t)d / 4)
        return emb__error(EMB_ERR_OVERFLOW, "%s: %" PRId64 " x %" PRId64 " points are too many", op,
                          n, d);
    const float *p = x->data;
    for (int64_t i = 0; i < n * d; i++)
        if (!isfinite(p[i]))
            return emb__error(EMB_ERR_INVALID, "%s: row %" PRId64 ", column %" PRId64 " is %s", op,
                              i / d, i % d, isnan(p[i]) ? "NaN" : "infinite");
    return EMB_OK;
}

/* ---------------------------------------------------------------------------------------
 * PCA
 * ------------------------------------------------------------------------------------- */

/* Eigenvalues and eigenvectors of the symmetric m x m matrix a (destroyed) by cyclic Jacobi
 * rotations: w[m] the eigenvalues, v[m x m] row-major with eigenvector j in column j. */
static void jacobi_eig(double *a, int64_t m, double *w, double *v) {
    for (int64_t i = 0; i < m * m; i++) v[i] = 0;
    for (int64_t i = 0; i < m; i++) v[i * m + i] = 1;
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0, diag = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < m; j++)
                if (i != j)
                    off += a[i * m + j] * a[i * m + j];
                else
                    diag += a[i * m + j] * a[i * m + j];
        if (off <= 1e-30 * diag || off == 0) break;
        for (int64_t p = 0; p < m; p++)
            for (int64_t q = p + 1; q < m; q++) {
                double apq = a[p * m + q];
                if (apq == 0) continue;
                double theta = (a[q * m + q] - a[p * m + p]) / (2 * apq);
                double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int64_t k = 0; k < m; k++) { /* columns p, q */
                    double akp = a[k * m + p], akq = a[k * m + q];
                    a[k * m + p] = c * akp - s * akq;
                    a[k * m + q] = s * akp + c * akq;
                }
                for (int64_t k = 0; k < m; k++) { /* rows p, q */
                    double apk = a[p * m + k], aqk = a[q * m + k];
                    a[p * m + k] = c * apk - s * aqk;
                    a[q * m + k] = s * apk + c * aqk;
                }
                for (int64_t k = 0; k < m; k++) {
                    double vkp = v[k * m + p], vkq = v[k * m + q];
                    v[k * m + p] = c * vkp - s * vkq;
                    v[k * m + q] = s * vkp + c * vkq;
                }
            }
    }
    for (int64_t i = 0; i < m; i++) w[i] = a[i * m + i];
}

/* Orthonormalises the m vectors q[j*d ..] of length d in place (modified Gram-Schmidt, run
 * twice); a vector that vanishes is replaced by the first unit vector e_i that stays
 * independent of the others. */
static void orthonormalise(double *q, int64_t m, int64_t d) {
    int64_t next_e = 0;
    for (int64_t j = 0; j < m; j++) {
        double *v = q + j * d;
        double before = 0;
        for (int64_t i = 0; i < d; i++) before += v[i] * v[i];
        for (int attempt = 0;; attempt++) {
            for (int pass = 0; pass < 2; pass++)
                for (int64_t l = 0; l < j; l++) {
                    const double *u = q + l * d;
                    double p = 0;
                    for (int64_t i = 0; i < d; i++) p += u[i] * v[i];
                    for (int64_t i = 0; i < d; i++) v[i] -= p * u[i];
                }
            double nrm = 0;
            for (int64_t i = 0; i < d; i++) nrm += v[i] * v[i];
            if (nrm > 1e-24 * before && nrm > 0 && (attempt > 0 || nrm > 1e-300)) {
                nrm = 1 / sqrt(nrm);
                for (int64_t i = 0; i < d; i++) v[i] *= nrm;
                break;
            }
            /* dependent on the previous vectors: try the next unit vector */
            for (int64_t i = 0; i < d; i++) v[i] = 0;
            v[next_e % d] = 1;
            next_e++;
            before = 1;
            if (attempt > d + 1) break; /* cannot happen for m <= d */
        }
    }
}

/* Row i of z = c q (z holds q's m vectors of length d, like q). */
typedef struct {
    const double *c, *q;
    double *z;
    int64_t d, m;
} cq_ctx;

static void cq_row(void *p, int64_t i, int ith) {
    (void)ith;
    const cq_ctx *x = p;
    const double *row = x->c + i * x->d;
    for (int64_t j = 0; j < x->m; j++) {
        const double *qj = x->q + j * x->d;
        double acc = 0;
        for (int64_t l = 0; l < x->d; l++) acc += row[l] * qj[l];
        x->z[j * x->d + i] = acc;
    }
}

/* The k leading eigenpairs of the symmetric d x d matrix c (row-major): axes[k x d] (axis j
 * at axes[j*d]), lam[k], by orthogonal iteration on a block of m >= k vectors with
 * Rayleigh-Ritz, until each axis's residual |c u - lam u| is below 1e-11 of the largest
 * eigenvalue. Returns false when out of memory. */
static bool leading_eigen(const double *c, int64_t d, int64_t k, double *axes, double *lam) {
    int64_t m = 2 * k + 10;
    if (m > d) m = d;
    double *q = malloc(sizeof(double) * (size_t)(m * d)),
           *z = malloc(sizeof(double) * (size_t)(m * d));
    double *t = malloc(sizeof(double) * (size_t)(m * m)),
           *v = malloc(sizeof(double) * (size_t)(m * m));
    double *w = malloc(sizeof(double) * (size_t)m);
    int64_t *order = malloc(sizeof(int64_t) * (size_t)m);
    if (!q || !z || !t || !v || !w || !order) {
        free(q), free(z), free(t), free(v), free(w), free(order);
        return false;
    }
    /* A fixed start: a deterministic pseudo-random block (xorshift), so that no axis starts
     * orthogonal to the answer by construction. */
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < m * d; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        q[i] = (double)(s >> 11) / 9007199254740992.0 - 0.5;
    }
    orthonormalise(q, m, d);
    for (int iter = 0; iter < 3000; iter++) {
        /* z = c q */
        cq_ctx cq = {c, q, z, d, m};
        emb__for_points(emb__threads_for(d * d * m, 1 << 16), d, 0, cq_row, &cq);
        /* t = q' c q, its eigenpairs, sorted by eigenvalue descending */
        for (int64_t a = 0; a < m; a++)
            for (int64_t b = 0; b < m; b++) {
                double acc = 0;
                for (int64_t l = 0; l < d; l++) acc += q[a * d + l] * z[b * d + l];
                t[a * m + b] = acc;
            }
        for (int64_t a = 0; a < m; a++) /* symmetrise the rounding */
            for (int64_t b = a + 1; b < m; b++)
                t[a * m + b] = t[b * m + a] = 0.5 * (t[a * m + b] + t[b * m + a]);
        jacobi_eig(t, m, w, v);
        for (int64_t a = 0; a < m; a++) order[a] = a;
        for (int64_t a = 1; a < m; a++) /* insertion sort, stable */
            for (int64_t b = a; b > 0 && w[order[b]] > w[order[b - 1]]; b--) {
                int64_t tmp = order[b];
                order[b] = order[b - 1], order[b - 1] = tmp;
            }
        /* Ritz vectors u = q v and residuals c u - lam u = z v - lam q v */
        double top = fabs(w[order[0]]), worst = 0;
        for (int64_t j = 0; j < k; j++) {
            const int64_t o = order[j];
            double r2 = 0;
            for (int64_t l = 0; l < d; l++) {
                double u = 0, cu = 0;
                for (int64_t a = 0; a < m; a++)
                    u += q[a * d + l] * v[a * m + o], cu += z[a * d + l] * v[a * m + o];
                axes[j * d + l] = u;
                double r = cu - w[o] * u;
                r2 += r * r;
            }
            lam[j] = w[o];
            if (sqrt(r2) > worst) worst = sqrt(r2);
        }
        if (m == d || worst <= 1e-11 * top || top == 0) break;
        memcpy(q, z, sizeof(double) * (size_t)(m * d));
        orthonormalise(q, m, d);
    }
    free(q), free(z), free(t), free(v), free(w), free(order);
    return true;
}

/* Centred float64 copy of x [n, d] into xc, its mean subtracted column by column. */
void emb__centre(const float *x, int64_t n, int64_t d, double *xc) {
    for (int64_t j = 0; j < d; j++) {
        double mu = 0;
        for (int64_t i = 0; i < n; i++) mu += (double)x[i * d + j];
        mu /= (double)n;
        for (int64_t i = 0; i < n; i++) xc[i * d + j] = (double)x[i * d + j] - mu;
    }
}

/* Row a of the covariance's lower triangle, each sum over the points in order. */
typedef struct {
    const double *xc;
    double *c;
    int64_t n, d;
    double denom;
} cov_ctx;

static void cov_row(void *p, int64_t a, int ith) {
    (void)ith;
    const cov_ctx *x = p;
    double *ca = x->c + a * x->d;
    for (int64_t b = 0; b <= a; b++) ca[b] = 0;
    for (int64_t i = 0; i < x->n; i++) {
        const double *xi = x->xc + i * x->d, xa = xi[a];
        for (int64_t b = 0; b <= a; b++) ca[b] += xa * xi[b];
    }
    for (int64_t b = 0; b <= a; b++) ca[b] /= x->denom;
}

/* Point i's coordinates on the k axes. */
typedef struct {
    const double *xc, *axes;
    double *out;
    int64_t d, k;
} proj_ctx;

static void proj_row(void *p, int64_t i, int ith) {
    (void)ith;
    const proj_ctx *x = p;
    for (int64_t j = 0; j < x->k; j++) {
        double acc = 0;
        for (int64_t l = 0; l < x->d; l++) acc += x->xc[i * x->d + l] * x->axes[j * x->d + l];
        x->out[i * x->k + j] = acc;
    }
}

/* PCA into double coordinates out[n, k] (the shared part of emb_pca and t-SNE's start). */
emb_status emb__pca_double(const float *x, int64_t n, int64_t d, int64_t k, double *out,
                           double *variance) {
    double *xc = malloc(sizeof(double) * (size_t)(n * d));
    double *c = malloc(sizeof(double) * (size_t)(d * d));
    double *axes = malloc(sizeof(double) * (size_t)(k * d)),
           *lam = malloc(sizeof(double) * (size_t)k);
    if (!xc || !c || !axes || !lam) {
        free(xc), free(c), free(axes), free(lam);
        return emb__error(EMB_ERR_NOMEM,
                          "pca: cannot allocate the covariance of %" PRId64 " x %" PRId64 " points",
                          n, d);
    }
    emb__centre(x, n, d, xc);
    const double denom = n > 1 ? (double)(n - 1) : 1.0;
    cov_ctx cv = {xc, c, n, d, denom};
    emb__for_points(emb__threads_for(n * d * d, 1 << 18), d, 4, cov_row, &cv);
    for (int64_t a = 0; a < d; a++)
        for (int64_t b = a + 1; b < d; b++) c[a * d + b] = c[b * d + a];
    if (!leading_eigen(c, d, k, axes, lam)) {
        free(xc), free(c), free(axes), free(lam);
        return emb__error(EMB_ERR_NOMEM, "pca: cannot allocate the eigen solver");
    }
    proj_ctx pj = {xc, axes, out, d, k};
    emb__for_points(emb__threads_for(n * d * k, 1 << 16), n, 0, proj_row, &pj);
    /* scikit-learn's sign rule: each axis points so that its largest coordinate (in
     * magnitude; the first such row on ties) is positive. */
    for (int64_t j = 0; j < k; j++) {
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++)
            if (fabs(out[i * k + j]) > fabs(out[best * k + j])) best = i;
        if (out[best * k + j] < 0)
            for (int64_t i = 0; i < n; i++) out[i * k + j] = -out[i * k + j];
        if (variance) variance[j] = lam[j] > 0 ? lam[j] : 0;
    }
    free(xc), free(c), free(axes), free(lam);
    return EMB_OK;
}

emb_status emb_pca(const emb_tensor *x, int64_t k, float *coords, double *variance) {
    if (!coords) return emb__null("coords");
    emb_status st = emb__check_points(x, "pca");
    if (st) return st;
    const int64_t n = x->shape[0], d = x->shape[1];
    if (k < 1 || k > d)
        return emb__error(EMB_ERR_INVALID,
                          "pca: k must be in [1, %" PRId64 "] (the dimension), got %" PRId64, d, k);
    double *out = malloc(sizeof(double) * (size_t)(n * k));
    if (!out)
        return emb__error(EMB_ERR_NOMEM, "pca: cannot allocate %" PRId64 " coordinates", n * k);
    double var[1];
    double *vk = variance ? malloc(sizeof(double) * (size_t)k) : var;
    if (!vk) {
        free(out);
        return emb__error(EMB_ERR_NOMEM, "pca: cannot allocate %" PRId64 " variances", k);
    }
    st = emb__pca_double(x->data, n, d, k, out, variance ? vk : NULL);
    if (st == EMB_OK) {
        for (int64_t i = 0; i < n * k; i++) coords[i] = (float)out[i];
        if (variance) memcpy(variance, vk, sizeof(double) * (size_t)k);
    }
    if (variance) free(vk);
    free(out);
    return st;
}
