/* t-SNE maps of a table's rows (include/emb/search.h, docs/search.md): Barnes-Hut t-SNE
 * over sparse neighbour affinities, started from the PCA coordinates (project.c).
 *
 * Works in float64 on a copy of the rows. Every parallel loop writes disjoint outputs and
 * every sum runs in a fixed order (sums over all points are taken over per-point partial
 * results, in point order), so the results are the same bits at any thread count. */
#include "search_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * t-SNE
 * ------------------------------------------------------------------------------------- */

emb_tsne_options emb_tsne_options_default(void) {
    emb_tsne_options o;
    o.perplexity = 30;
    o.iterations = 1000;
    o.theta = 0.5;
    o.learning_rate = 0;
    o.early_exaggeration = 12;
    o.exaggeration_iterations = 250;
    return o;
}

/* The input similarities: a sparse symmetric P in compressed rows (row i's entries are
 * col[start[i] .. start[i+1]) with values val), summing to 1. */
typedef struct {
    int64_t *start, *col;
    double *val;
} sparse_p;

/* Row i's conditional probabilities over its nn neighbours (squared distances d2[nn]):
 * exp(-beta d2) normalised, with beta found by bisection so that the entropy (natural log)
 * is log(perplexity), as scikit-learn's binary search (100 steps, tolerance 1e-5). */
static void conditional_p(const double *d2, int64_t nn, double perplexity, double *p) {
    double beta = 1, lo = -INFINITY, hi = INFINITY;
    const double target = log(perplexity);
    for (int step = 0; step < 100; step++) {
        double sum = 0;
        for (int64_t j = 0; j < nn; j++) sum += (p[j] = exp(-d2[j] * beta));
        if (sum == 0) sum = 1e-8;
        double h = 0;
        for (int64_t j = 0; j < nn; j++) {
            p[j] /= sum;
            h += d2[j] * p[j];
        }
        double entropy = log(sum) + beta * h;
        double diff = entropy - target;
        if (fabs(diff) <= 1e-5) break;
        if (diff > 0) {
            lo = beta;
            beta = hi == INFINITY ? beta * 2 : (beta + hi) / 2;
        } else {
            hi = beta;
            beta = lo == -INFINITY ? beta / 2 : (beta + lo) / 2;
        }
    }
}

/* Point i's nn nearest neighbours (by squared distance, then index) and their
 * conditional probabilities. */
typedef struct {
    const double *y, *sq;
    double *scratch, *pc;
    int64_t *nbr;
    int64_t n, d, nn;
    double perplexity;
} nbr_ctx;

static void nbr_row(void *ctx, int64_t i, int ith) {
    (void)ith;
    const nbr_ctx *x = ctx;
    const double *y = x->y, *sq = x->sq;
    const int64_t n = x->n, d = x->d, nn = x->nn;
    const double perplexity = x->perplexity;
    double *scratch = x->scratch, *pc = x->pc;
    int64_t *nbr = x->nbr;
    /* a bounded max-heap of the nn closest (distance, then index) */
    double *hd = scratch + i * nn;
    int64_t *hj = nbr + i * nn, cnt = 0;
    for (int64_t j = 0; j < n; j++) {
        if (j == i) continue;
        double dot = 0;
        for (int64_t l = 0; l < d; l++) dot += y[i * d + l] * y[j * d + l];
        double dist = sq[i] + sq[j] - 2 * dot;
        if (dist < 0) dist = 0;
        if (cnt < nn) {
            int64_t c = cnt++;
            while (c > 0) {
                int64_t par = (c - 1) / 2;
                if (hd[par] > dist || (hd[par] == dist && hj[par] > j)) break;
                hd[c] = hd[par], hj[c] = hj[par], c = par;
            }
            hd[c] = dist, hj[c] = j;
        } else if (dist < hd[0] || (dist == hd[0] && j < hj[0])) {
            int64_t c = 0;
            for (;;) {
                int64_t l = 2 * c + 1, r = l + 1, big = c;
                double bd = dist;
                int64_t bj = j;
                if (l < nn && (hd[l] > bd || (hd[l] == bd && hj[l] > bj)))
                    big = l, bd = hd[l], bj = hj[l];
                if (r < nn && (hd[r] > bd || (hd[r] == bd && hj[r] > bj))) big = r;
                if (big == c) break;
                hd[c] = hd[big], hj[c] = hj[big], c = big;
            }
            hd[c] = dist, hj[c] = j;
        }
    }
    conditional_p(hd, nn, perplexity, pc + i * nn);
}

/* Exact nearest neighbours (squared Euclidean) of every point, nn of them, then the
 * symmetric joint probabilities. */
static emb_status joint_p(const double *y, int64_t n, int64_t d, double perplexity, int64_t nn,
                          sparse_p *out) {
    int64_t *nbr = malloc(sizeof(int64_t) * (size_t)(n * nn));
    double *pc = malloc(sizeof(double) * (size_t)(n * nn));
    double *scratch = malloc(sizeof(double) * (size_t)(n * nn));
    double *sq = malloc(sizeof(double) * (size_t)n);
    int64_t *deg = calloc((size_t)n + 1, sizeof(int64_t));
    if (!nbr || !pc || !scratch || !sq || !deg) {
        free(nbr), free(pc), free(scratch), free(sq), free(deg);
        return emb__error(EMB_ERR_NOMEM,
                          "tsne: cannot allocate the neighbours of %" PRId64 " points", n);
    }
    for (int64_t i = 0; i < n; i++) {
        double s = 0;
        for (int64_t l = 0; l < d; l++) s += y[i * d + l] * y[i * d + l];
        sq[i] = s;
    }
    nbr_ctx nc = {y, sq, scratch, pc, nbr, n, d, nn, perplexity};
    emb__for_points(emb__threads_for(n * n * d, 1 << 18), n, 16, nbr_row, &nc);
    /* P = (P_cond + P_cond') / sum: count each row's entries (its own neighbours and the
     * points that have it as a neighbour), fill, then merge duplicates. */
    for (int64_t i = 0; i < n; i++)
        for (int64_t a = 0; a < nn; a++) deg[i + 1]++, deg[nbr[i * nn + a] + 1]++;
    for (int64_t i = 0; i < n; i++) deg[i + 1] += deg[i];
    const int64_t total = deg[n];
    int64_t *col = malloc(sizeof(int64_t) * (size_t)total),
            *fill = malloc(sizeof(int64_t) * (size_t)n);
    double *val = malloc(sizeof(double) * (size_t)total);
    if (!col || !fill || !val) {
        free(nbr), free(pc), free(scratch), free(sq), free(deg), free(col), free(fill), free(val);
        return emb__error(EMB_ERR_NOMEM,
                          "tsne: cannot allocate the similarities of %" PRId64 " points", n);
    }
    for (int64_t i = 0; i < n; i++) fill[i] = deg[i];
    for (int64_t i = 0; i < n; i++)
        for (int64_t a = 0; a < nn; a++) {
            int64_t j = nbr[i * nn + a];
            double p = pc[i * nn + a];
            col[fill[i]] = j, val[fill[i]++] = p;
            col[fill[j]] = i, val[fill[j]++] = p;
        }
    /* sort each row by column (insertion sort: rows are short), merge equal columns */
    int64_t w = 0;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = deg[i], e = deg[i + 1];
        for (int64_t a = s + 1; a < e; a++)
            for (int64_t b = a; b > s && col[b] < col[b - 1]; b--) {
                int64_t tc = col[b];
                col[b] = col[b - 1], col[b - 1] = tc;
                double tv = val[b];
                val[b] = val[b - 1], val[b - 1] = tv;
            }
        int64_t row_start = w;
        for (int64_t a = s; a < e; a++) {
            if (w > row_start && col[w - 1] == col[a])
                val[w - 1] += val[a];
            else
                col[w] = col[a], val[w] = val[a], w++;
        }
        deg[i] = row_start;
        for (int64_t a = row_start; a < w; a++) sum += val[a];
    }
    deg[n] = w;
    if (!(sum > 0)) sum = 1;
    for (int64_t a = 0; a < w; a++) val[a] /= sum;
    free(nbr), free(pc), free(scratch), free(sq), free(fill);
    out->start = deg, out->col = col, out->val = val;
    return EMB_OK;
}

/* A quadtree over the 2-D points: each node a square cell (centre cx, cy, half width hw)
 * with the points' count and centre of mass; leaves hold a chain of points (one, or
 * several that coincide or sit at the maximum depth). */
typedef struct {
    double cx, cy, hw;
    double mx, my; /* sum of the positions, then the centre of mass */
    int64_t count;
    int64_t child; /* index of the first of 4 children, or -1 for a leaf */
    int64_t first; /* leaf: first point of the chain, -1 when empty */
    int depth;
} qnode;

typedef struct {
    qnode *node;
    int64_t used, cap;
    int64_t *next; /* next point in a leaf's chain, -1 at the end */
} qtree;

#define EMB__QT_MAX_DEPTH 48

static int64_t qt_new(qtree *t, double cx, double cy, double hw, int depth) {
    if (t->used == t->cap) {
        int64_t cap = t->cap * 2;
        qnode *nn = realloc(t->node, sizeof(qnode) * (size_t)cap);
        if (!nn) return -1;
        t->node = nn, t->cap = cap;
    }
    qnode *q = &t->node[t->used];
    q->cx = cx, q->cy = cy, q->hw = hw;
    q->mx = q->my = 0;
    q->count = 0;
    q->child = -1;
    q->first = -1;
    q->depth = depth;
    return t->used++;
}

static int quadrant(const qnode *q, double x, double y) {
    return (x >= q->cx ? 1 : 0) + (y >= q->cy ? 2 : 0);
}

/* Inserts point i at (x, y). False when out of memory. */
static bool qt_insert(qtree *t, int64_t i, const double *y2) {
    const double x = y2[2 * i], y = y2[2 * i + 1];
    int64_t cur = 0;
    for (;;) {
        qnode *q = &t->node[cur];
        q->count++;
        q->mx += x, q->my += y;
        if (q->child < 0) {
            if (q->first < 0 || q->depth >= EMB__QT_MAX_DEPTH) {
                t->next[i] = q->first;
                q->first = i;
                return true;
            }
            int64_t o = q->first;
            if (y2[2 * o] == x && y2[2 * o + 1] == y) { /* the same position: chain it */
                t->next[i] = q->first;
                q->first = i;
                return true;
            }
            /* split: four children, move the resident chain down */
            const double h = q->hw / 2, cx = q->cx, cy = q->cy;
            const int depth = q->depth + 1;
            int64_t c0 = -1;
            for (int c = 0; c < 4; c++) {
                int64_t id = qt_new(t, cx + ((c & 1) ? h : -h), cy + ((c & 2) ? h : -h), h, depth);
                if (id < 0) return false;
                if (c == 0) c0 = id;
            }
            q = &t->node[cur]; /* realloc may have moved it */
            q->child = c0;
            for (int64_t p = q->first; p >= 0;) {
                int64_t nx = t->next[p];
                qnode *ch = &t->node[c0 + quadrant(q, y2[2 * p], y2[2 * p + 1])];
                ch->count++;
                ch->mx += y2[2 * p], ch->my += y2[2 * p + 1];
                t->next[p] = ch->first;
                ch->first = p;
                p = nx;
            }
            q->first = -1;
        }
        cur = q->child + quadrant(q, x, y);
    }
}

static bool qt_build(qtree *t, const double *y2, int64_t n) {
    double lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY};
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < 2; c++) {
            if (y2[2 * i + c] < lo[c]) lo[c] = y2[2 * i + c];
            if (y2[2 * i + c] > hi[c]) hi[c] = y2[2 * i + c];
        }
    double hw = fmax(hi[0] - lo[0], hi[1] - lo[1]) / 2;
    hw = hw * (1 + 1e-6) + 1e-12;
    t->used = 0;
    if (qt_new(t, (lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2, hw, 0) < 0) return false;
    for (int64_t i = 0; i < n; i++)
        if (!qt_insert(t, i, y2)) return false;
    for (int64_t a = 0; a < t->used; a++) {
        qnode *q = &t->node[a];
        if (q->count > 0) q->mx /= (double)q->count, q->my /= (double)q->count;
    }
    return true;
}

/* The repulsion on point i: f[2] += sum_j q_ij^2 Z (y_i - y_j) and returns sum_j q_ij Z
 * (q_ij Z = 1 / (1 + |y_i - y_j|^2)), cells far enough away (width < theta * distance)
 * taken as one point at their centre of mass. The children are visited in a fixed order,
 * so the result depends on the tree only. */
static double repulsion(const qtree *t, const double *y2, int64_t i, double theta2, double *f,
                        int64_t *stack) {
    const double xi = y2[2 * i], yi = y2[2 * i + 1];
    double sq = 0, fx = 0, fy = 0;
    int64_t top = 0;
    stack[top++] = 0;
    while (top > 0) {
        const qnode *q = &t->node[stack[--top]];
        if (q->count == 0) continue;
        if (q->child < 0) {
            for (int64_t j = q->first; j >= 0; j = t->next[j]) {
                if (j == i) continue;
                double dx = xi - y2[2 * j], dy = yi - y2[2 * j + 1];
                double w = 1 / (1 + dx * dx + dy * dy);
                sq += w;
                fx += w * w * dx, fy += w * w * dy;
            }
            continue;
        }
        double dx = xi - q->mx, dy = yi - q->my, dist2 = dx * dx + dy * dy;
        double width = 2 * q->hw;
        if (width * width < theta2 * dist2) {
            double w = 1 / (1 + dist2), c = (double)q->count;
            sq += c * w;
            fx += c * w * w * dx, fy += c * w * w * dy;
        } else {
            for (int c = 3; c >= 0; c--) stack[top++] = q->child + c;
        }
    }
    f[0] += fx, f[1] += fy;
    return sq;
}

/* Point i's part of Q's normaliser: the sum over j != i of 1 / (1 + |y_i - y_j|^2). */
typedef struct {
    const double *y2;
    double *zpart;
    int64_t n;
} kl_ctx;

static void kl_row(void *ctx, int64_t i, int ith) {
    (void)ith;
    const kl_ctx *x = ctx;
    const double *y2 = x->y2;
    double s = 0;
    for (int64_t j = 0; j < x->n; j++) {
        if (j == i) continue;
        double dx = y2[2 * i] - y2[2 * j], dy = y2[2 * i + 1] - y2[2 * j + 1];
        s += 1 / (1 + dx * dx + dy * dy);
    }
    x->zpart[i] = s;
}

/* KL(P || Q) of the layout y2, with Q computed exactly (O(n^2)). */
static double kl_divergence(const sparse_p *p, const double *y2, int64_t n, double *zpart) {
    kl_ctx kc = {y2, zpart, n};
    emb__for_points(emb__threads_for(n * n, 1 << 16), n, 16, kl_row, &kc);
    double z = 0;
    for (int64_t i = 0; i < n; i++) z += zpart[i];
    double kl = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t a = p->start[i]; a < p->start[i + 1]; a++) {
            int64_t j = p->col[a];
            double pij = p->val[a];
            if (!(pij > 0)) continue;
            double dx = y2[2 * i] - y2[2 * j], dy = y2[2 * i + 1] - y2[2 * j + 1];
            double qij = 1 / (1 + dx * dx + dy * dy) / z;
            kl += pij * log(pij / fmax(qij, 1e-300));
        }
    return kl;
}

/* Point i's attraction (times the exaggeration) and its repulsion before the division by
 * Z, on share ith's stack for the tree walk. */
typedef struct {
    const qtree *t;
    const sparse_p *p;
    const double *y2;
    double *grad, *rep, *zpart;
    int64_t *stacks;
    double theta2, exag;
} force_ctx;

static void force_row(void *ctx, int64_t i, int ith) {
    const force_ctx *x = ctx;
    const double *y2 = x->y2;
    double f[2] = {0, 0};
    x->zpart[i] =
        repulsion(x->t, y2, i, x->theta2, f, x->stacks + (size_t)ith * (4 * EMB__QT_MAX_DEPTH + 8));
    double ax = 0, ay = 0;
    for (int64_t a = x->p->start[i]; a < x->p->start[i + 1]; a++) {
        int64_t j = x->p->col[a];
        double dx = y2[2 * i] - y2[2 * j], dy = y2[2 * i + 1] - y2[2 * j + 1];
        double w = x->p->val[a] / (1 + dx * dx + dy * dy);
        ax += w * dx, ay += w * dy;
    }
    x->grad[2 * i] = x->exag * ax, x->grad[2 * i + 1] = x->exag * ay;
    x->rep[2 * i] = f[0], x->rep[2 * i + 1] = f[1]; /* divided by Z once Z is known */
}

static emb_status check_tsne_options(const emb_tsne_options *o, int64_t n) {
    if (!(o->perplexity > 0) || !isfinite(o->perplexity) || o->perplexity >= (double)n)
        return emb__error(EMB_ERR_INVALID,
                          "tsne: perplexity must be positive and less than the number of points "
                          "(%" PRId64 "), got %g",
                          n, o->perplexity);
    if (o->iterations < 0 || o->iterations > 1000000)
        return emb__error(EMB_ERR_INVALID, "tsne: iterations must be in [0, 1000000], got %" PRId64,
                          o->iterations);
    if (!(o->theta >= 0 && o->theta <= 1))
        return emb__error(EMB_ERR_INVALID, "tsne: theta must be in [0, 1], got %g", o->theta);
    if (!(o->learning_rate >= 0) || !isfinite(o->learning_rate))
        return emb__error(EMB_ERR_INVALID,
                          "tsne: learning_rate must be finite and >= 0 (0: auto), got %g",
                          o->learning_rate);
    if (!(o->early_exaggeration >= 1) || !isfinite(o->early_exaggeration))
        return emb__error(EMB_ERR_INVALID,
                          "tsne: early_exaggeration must be finite and >= 1, got %g",
                          o->early_exaggeration);
    if (o->exaggeration_iterations < 0 || o->exaggeration_iterations > o->iterations)
        return emb__error(EMB_ERR_INVALID,
                          "tsne: exaggeration_iterations must be in [0, iterations = %" PRId64
                          "], got %" PRId64,
                          o->iterations, o->exaggeration_iterations);
    return EMB_OK;
}

emb_status emb_tsne(const emb_tensor *x, const emb_tsne_options *opts, float *coords, double *kl) {
    if (!coords) return emb__null("coords");
    emb_status st = emb__check_points(x, "tsne");
    if (st) return st;
    const emb_tsne_options o = opts ? *opts : emb_tsne_options_default();
    const int64_t n = x->shape[0], d = x->shape[1];
    if (n < 2) return emb__error(EMB_ERR_SHAPE, "tsne: needs at least 2 points, got %" PRId64, n);
    if ((st = check_tsne_options(&o, n))) return st;
    int64_t nn = (int64_t)(3 * o.perplexity + 1);
    if (nn > n - 1) nn = n - 1;
    if (nn < 1) nn = 1;

    double *xd = malloc(sizeof(double) * (size_t)(n * d));
    double *y2 = malloc(sizeof(double) * (size_t)(2 * n));
    double *upd = calloc((size_t)(2 * n), sizeof(double));
    double *gain = malloc(sizeof(double) * (size_t)(2 * n));
    double *grad = malloc(sizeof(double) * (size_t)(2 * n));
    double *rep = malloc(sizeof(double) * (size_t)(2 * n));
    double *zpart = malloc(sizeof(double) * (size_t)n);
    int nt = emb__threads_for(n, 1024); /* a step over fewer points is not worth a team */
    int64_t *stacks = malloc(sizeof(int64_t) * (size_t)(4 * EMB__QT_MAX_DEPTH + 8) * (size_t)nt);
    qtree t = {malloc(sizeof(qnode) * (size_t)(4 * n + 8)), 0, 4 * n + 8,
               malloc(sizeof(int64_t) * (size_t)n)};
    sparse_p p = {NULL, NULL, NULL};
    if (!xd || !y2 || !upd || !gain || !grad || !rep || !zpart || !stacks || !t.node || !t.next) {
        st = emb__error(EMB_ERR_NOMEM, "tsne: cannot allocate the work space of %" PRId64 " points",
                        n);
        goto done;
    }
    const float *xf = x->data;
    for (int64_t i = 0; i < n * d; i++) xd[i] = (double)xf[i];
    if ((st = joint_p(xd, n, d, o.perplexity, nn, &p))) goto done;
    /* Start from the PCA layout, scaled so that the first axis has standard deviation 1e-4
     * (scikit-learn's init="pca"). */
    if (d >= 2) {
        if ((st = emb__pca_double(xf, n, d, 2, y2, NULL))) goto done;
    } else {
        if ((st = emb__pca_double(xf, n, d, 1, y2, NULL))) goto done;
        for (int64_t i = n - 1; i >= 0; i--) y2[2 * i] = y2[i], y2[2 * i + 1] = 0;
    }
    {
        double mu = 0, var = 0;
        for (int64_t i = 0; i < n; i++) mu += y2[2 * i];
        mu /= (double)n;
        for (int64_t i = 0; i < n; i++) var += (y2[2 * i] - mu) * (y2[2 * i] - mu);
        double sd = sqrt(var / (double)n);
        double scale = sd > 0 ? 1e-4 / sd : 1;
        for (int64_t i = 0; i < 2 * n; i++) y2[i] *= scale;
    }
    for (int64_t i = 0; i < 2 * n; i++) gain[i] = 1;
    const double lr =
        o.learning_rate > 0 ? o.learning_rate : fmax((double)n / o.early_exaggeration / 4, 50);
    const double theta2 = o.theta * o.theta;
    for (int64_t it = 0; it < o.iterations; it++) {
        const bool early = it < o.exaggeration_iterations;
        const double exag = early ? o.early_exaggeration : 1, momentum = early ? 0.5 : 0.8;
        if (!qt_build(&t, y2, n)) {
            st = emb__error(EMB_ERR_NOMEM, "tsne: cannot allocate the quadtree");
            goto done;
        }
        force_ctx fc = {&t, &p, y2, grad, rep, zpart, stacks, theta2, exag};
        emb__for_points(nt, n, 32, force_row, &fc);
        double z = 0;
        for (int64_t i = 0; i < n; i++) z += zpart[i];
        if (!(z > 0)) z = 1e-300;
        for (int64_t i = 0; i < 2 * n; i++) {
            double g = 4 * (grad[i] - rep[i] / z);
            if (g * upd[i] < 0)
                gain[i] += 0.2;
            else
                gain[i] *= 0.8;
            if (gain[i] < 0.01) gain[i] = 0.01;
            upd[i] = momentum * upd[i] - lr * gain[i] * g;
            y2[i] += upd[i];
        }
    }
    if (kl) *kl = kl_divergence(&p, y2, n, zpart);
    for (int64_t i = 0; i < 2 * n; i++) coords[i] = (float)y2[i];
done:
    free(xd), free(y2), free(upd), free(gain), free(grad), free(rep), free(zpart), free(stacks);
    free(t.node), free(t.next);
    free(p.start), free(p.col), free(p.val);
    return st;
}
