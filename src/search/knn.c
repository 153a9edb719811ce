/* Nearest neighbours by cosine similarity and 3CosAdd analogies (include/emb/search.h).
 *
 * The scores of a block of queries against a block of rows are dot products of the queries
 * (normalised to unit length) with the rows, computed by emb's score kernel
 * (kernels/score.h: one fused multiply-add chain per dot product, over the dimension in
 * order, in every kernel variant), then each column is scaled by the row's inverse norm and
 * fed to a bounded min-heap per query. Blocks are fixed sizes, independent of the thread
 * count; threads take whole query blocks, each with its own scratch, so a query's result
 * depends neither on how many threads ran nor on the CPU's kernel tier. (A BLAS sgemm was
 * used here before: its bits changed with the way OpenBLAS split the product between its
 * own threads; docs/search.md.) */
#include <emb/search.h>

#include "internal.h"
#include "kernels/dispatch.h"
#include "knn_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Queries per block and rows per block: a score tile of 64 x 2048 floats (512 KB). */
#define EMB__KNN_QB 64
#define EMB__KNN_RB 2048

struct emb_knn {
    const float *table;       /* [total_rows, dim], borrowed; NULL over a quantized table */
    const emb_qtable *qtable; /* borrowed; NULL over a float32 table */
    int64_t total_rows;
    int64_t rows; /* searched rows: [0, rows) */
    int64_t dim;
    float *inv_norm; /* [rows]: 1 / |row|, 0 for a zero or non-finite norm */
};

/* 1 / |x| for a row of n floats, summed in double; 0 when the norm is 0 or not finite. */
static float inv_norm_of(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    double nrm = sqrt(s);
    if (!(nrm > 0) || !isfinite(nrm)) return 0.0f;
    double inv = 1.0 / nrm;
    return isfinite((float)inv) ? (float)inv : 0.0f;
}

/* Rows [r0, r0 + n) as float32: the table itself, or dequantized into buf [n, dim]. */
static const float *rows_at(const emb_knn *x, int64_t r0, int64_t n, float *buf) {
    if (x->table) return x->table + r0 * x->dim;
    emb_qtable_dequantize(x->qtable, r0, n, buf); /* validated range: cannot fail */
    return buf;
}

/* inv[r] = inv_norm_of(row r of t [n, d]) for r in [lo, hi). */
typedef struct norms_ctx {
    const float *t;
    float *inv;
    int64_t d;
} norms_ctx;

static void norms_range(void *p, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    const norms_ctx *c = p;
    for (int64_t r = lo; r < hi; r++) c->inv[r] = inv_norm_of(c->t + r * c->d, c->d);
}

/* A new index over rows [0, num_rows) of a validated [v, d] table (float32 or quantized). */
static emb_status knn_new(const float *table, const emb_qtable *qt, int64_t v, int64_t d,
                          int64_t num_rows, emb_knn **out) {
    if (num_rows < 0 || num_rows > v)
        return emb__error(EMB_ERR_INVALID,
                          "num_rows must be in [0, %" PRId64 "] (0: all rows), got %" PRId64, v,
                          num_rows);
    if (num_rows == 0) num_rows = v;
    emb_knn *k = calloc(1, sizeof *k);
    if (!k) return emb__error(EMB_ERR_NOMEM, "cannot allocate a search index");
    k->inv_norm = emb__malloc((size_t)num_rows * sizeof(float));
    float *buf = qt ? emb__malloc((size_t)EMB__KNN_RB * (size_t)d * sizeof(float)) : NULL;
    if (!k->inv_norm || (qt && !buf)) {
        emb__free(k->inv_norm);
        emb__free(buf);
        free(k);
        return emb__error(EMB_ERR_NOMEM, "cannot allocate the norms of %" PRId64 " rows", num_rows);
    }
    k->table = table;
    k->qtable = qt;
    k->total_rows = v;
    k->rows = num_rows;
    k->dim = d;
    float *inv = k->inv_norm;
    for (int64_t r0 = 0; r0 < num_rows; r0 += EMB__KNN_RB) {
        const int64_t n = num_rows - r0 < EMB__KNN_RB ? num_rows - r0 : EMB__KNN_RB;
        norms_ctx c = {rows_at(k, r0, n, buf), inv + r0, d};
        emb__parallel_for(emb__threads_for(n * d, 1 << 16), n, norms_range, &c);
    }
    emb__free(buf);
    *out = k;
    return EMB_OK;
}

emb_status emb_knn_create(const emb_tensor *table, int64_t num_rows, emb_knn **out) {
    if (!out) return emb__null("out");
    emb_status st = emb_tensor_check(table, "table");
    if (st) return st;
    if (table->dtype != EMB_FLOAT32)
        return emb__error(EMB_ERR_DTYPE, "table must be float32, got %s",
                          emb_dtype_name(table->dtype));
    if (table->ndim != 2 || table->shape[0] < 1 || table->shape[1] < 1) {
        char buf[96];
        return emb__error(EMB_ERR_SHAPE,
                          "table must be 2-D with at least one row and column, got %s",
                          emb__shape_fmt(buf, sizeof buf, table->ndim, table->shape));
    }
    return knn_new(table->data, NULL, table->shape[0], table->shape[1], num_rows, out);
}

emb_status emb_knn_create_from_qtable(const emb_qtable *table, int64_t num_rows, emb_knn **out) {
    if (!out) return emb__null("out");
    if (!table) return emb__null("table");
    const int64_t v = emb_qtable_num_rows(table), d = emb_qtable_dim(table);
    if (v < 1 || d < 1)
        return emb__error(EMB_ERR_SHAPE,
                          "table must have at least one row and column, got %" PRId64 " x %" PRId64,
                          v, d);
    return knn_new(NULL, table, v, d, num_rows, out);
}

void emb_knn_free(emb_knn *index) {
    if (!index) return;
    emb__free(index->inv_norm);
    free(index);
}

int64_t emb_knn_num_rows(const emb_knn *index) {
    return index ? index->rows : 0;
}
int64_t emb_knn_dim(const emb_knn *index) {
    return index ? index->dim : 0;
}

/* ---- bounded min-heap of (score, id): the root is the worst kept candidate ---- */

/* a ranks below b: a lower score, or the same score and a higher row. */
static inline bool worse(float sa, int64_t ia, float sb, int64_t ib) {
    return sa < sb || (sa == sb && ia > ib);
}

/* Puts (s, id) at the root's place of a heap of n entries and sifts it down. */
static void sift_down(float *hs, int64_t *hi, int64_t n, float s, int64_t id) {
    int64_t i = 0;
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        float ms = s;
        int64_t mi = id;
        if (l < n && worse(hs[l], hi[l], ms, mi)) m = l, ms = hs[l], mi = hi[l];
        if (r < n && worse(hs[r], hi[r], ms, mi)) m = r;
        if (m == i) break;
        hs[i] = hs[m], hi[i] = hi[m];
        i = m;
    }
    hs[i] = s, hi[i] = id;
}

static void heap_push(float *hs, int64_t *hi, int64_t *n, int64_t cap, float s, int64_t id) {
    if (*n < cap) {
        int64_t i = (*n)++;
        while (i > 0) { /* sift up */
            int64_t p = (i - 1) / 2;
            if (!worse(s, id, hs[p], hi[p])) break;
            hs[i] = hs[p], hi[i] = hi[p];
            i = p;
        }
        hs[i] = s, hi[i] = id;
        return;
    }
    if (worse(hs[0], hi[0], s, id)) sift_down(hs, hi, cap, s, id); /* better than the worst */
}

/* Writes the heap's entries best first into ids/scores[0..k), padding with -1/-INFINITY. */
static void heap_drain(float *hs, int64_t *hi, int64_t n, int64_t k, int64_t *ids, float *scores) {
    for (int64_t j = n; j < k; j++) ids[j] = -1, scores[j] = -INFINITY;
    /* Repeatedly move the worst (root) to the end of the kept range. */
    while (n > 0) {
        ids[n - 1] = hi[0], scores[n - 1] = hs[0];
        n--;
        if (n > 0) sift_down(hs, hi, n, hs[n], hi[n]);
    }
}

/* One block of qb unit queries qn [qb, d]: top k into ids/scores [qb, k]. Scratch: tile
 * [QB * RB], heaps hs/hi [QB * k], the score kernel's ks. */
static void search_block(const emb_knn *x, const emb__score_tile_fn score, const float *qn,
                         int64_t qb, int64_t k, const int64_t *exclude, int64_t n_ex, int64_t *ids,
                         float *scores, float *tile, float *hs, int64_t *hi, float *rowbuf,
                         float *ks) {
    int64_t hn[EMB__KNN_QB];
    for (int64_t q = 0; q < qb; q++) hn[q] = 0;
    const int64_t d = x->dim;
    for (int64_t r0 = 0; r0 < x->rows; r0 += EMB__KNN_RB) {
        int64_t rb = x->rows - r0 < EMB__KNN_RB ? x->rows - r0 : EMB__KNN_RB;
        score(tile, rb, qn, qb, rows_at(x, r0, rb, rowbuf), rb, d, ks);
        for (int64_t q = 0; q < qb; q++) {
            const float *row = tile + q * rb;
            const int64_t *ex = n_ex ? exclude + q * n_ex : NULL;
            for (int64_t j = 0; j < rb; j++) {
                int64_t id = r0 + j;
                float inv = x->inv_norm[id];
                float s = inv == 0.0f ? 0.0f : row[j] * inv;
                if (!isfinite(s)) s = 0.0f;
                bool skip = false;
                for (int64_t e = 0; e < n_ex; e++)
                    if (ex[e] == id) skip = true;
                if (skip) continue;
                heap_push(hs + q * k, hi + q * k, &hn[q], k, s, id);
            }
        }
    }
    for (int64_t q = 0; q < qb; q++)
        heap_drain(hs + q * k, hi + q * k, hn[q], k, ids + q * k, scores + q * k);
}

/* The query blocks of search_unit, claimed one at a time by the shares (their cost varies
 * with the exclusions and the heaps), each share with its own scratch. */
typedef struct search_ctx {
    const emb_knn *x;
    emb__score_tile_fn score;
    const float *qn;
    int64_t nq, k;
    const int64_t *exclude;
    int64_t n_ex;
    int64_t *ids;
    float *scores;
    char *scratch;
    size_t per;
    int64_t tile, hsz;
    size_t rowbuf, ksz;
    int64_t nblocks;
    emb__counter next;
} search_ctx;

static void search_share(void *p, int t, int nt) {
    (void)nt;
    search_ctx *c = p;
    const emb_knn *x = c->x;
    char *s = c->scratch + c->per * (size_t)t;
    float *ti = (float *)s;
    int64_t *hi = (int64_t *)(s + (size_t)c->tile * sizeof(float));
    float *hs = (float *)(s + (size_t)c->tile * sizeof(float) + (size_t)c->hsz * sizeof(int64_t));
    float *rb = c->rowbuf ? (float *)(s + c->per - c->ksz - c->rowbuf) : NULL;
    float *ks = (float *)(s + c->per - c->ksz);
    for (int64_t b; (b = emb__claim(&c->next)) < c->nblocks;) {
        const int64_t q0 = b * EMB__KNN_QB;
        const int64_t qb = c->nq - q0 < EMB__KNN_QB ? c->nq - q0 : EMB__KNN_QB;
        search_block(x, c->score, c->qn + q0 * x->dim, qb, c->k,
                     c->n_ex ? c->exclude + q0 * c->n_ex : NULL, c->n_ex, c->ids + q0 * c->k,
                     c->scores + q0 * c->k, ti, hs, hi, rb, ks);
    }
}

/* Searches Q unit queries qn [Q, d] (already validated). */
static emb_status search_unit(const emb_knn *x, const float *qn, int64_t nq, int64_t k,
                              const int64_t *exclude, int64_t n_ex, int64_t *ids, float *scores) {
    if (nq == 0) return EMB_OK;
    int64_t nblocks = (nq + EMB__KNN_QB - 1) / EMB__KNN_QB;
    int nt = emb__threads_for(nblocks, 1);
    int64_t hsz, tile = (int64_t)EMB__KNN_QB * EMB__KNN_RB;
    if (!emb__mul_i64(k, EMB__KNN_QB, &hsz) || hsz > (INT64_MAX / 16) / nt)
        return emb__error(EMB_ERR_OVERFLOW, "k = %" PRId64 " is too large", k);
    const size_t rowbuf = x->qtable ? (size_t)EMB__KNN_RB * (size_t)x->dim * sizeof(float) : 0;
    const size_t ksz = emb__score_scratch_floats(EMB__KNN_QB, x->dim) * sizeof(float);
    size_t per = (size_t)tile * sizeof(float) + (size_t)hsz * (sizeof(float) + sizeof(int64_t)) +
                 rowbuf + ksz;
    const emb__score_tile_fn score = emb__kernels()->score_tile;
    char *scratch = emb__malloc(per * (size_t)nt);
    if (!scratch)
        return emb__error(EMB_ERR_NOMEM, "cannot allocate %zu bytes of search scratch",
                          per * (size_t)nt);
    search_ctx c = {x,       score, qn,   nq,  k,      exclude, n_ex,    ids, scores,
                    scratch, per,   tile, hsz, rowbuf, ksz,     nblocks, {0}};
    emb__parallel(nt, search_share, &c);
    emb__free(scratch);
    return EMB_OK;
}

/* dst = src / |src| (in float, the norm summed in double); zeros when the norm is 0 or not
 * finite. */
static void unit_copy(float *dst, const float *src, int64_t d) {
    float inv = inv_norm_of(src, d);
    for (int64_t i = 0; i < d; i++) dst[i] = src[i] * inv;
}

static emb_status check_k(int64_t k, int64_t nq, int64_t *total) {
    if (k < 1) return emb__error(EMB_ERR_INVALID, "k must be at least 1, got %" PRId64, k);
    if (!emb__mul_i64(nq, k, total) || (uint64_t)*total > SIZE_MAX / sizeof(int64_t))
        return emb__error(EMB_ERR_OVERFLOW,
                          "%" PRId64 " queries x k = %" PRId64 " results do not fit", nq, k);
    return EMB_OK;
}

emb_status emb_knn_search(const emb_knn *index, const emb_tensor *queries, int64_t k,
                          const int64_t *exclude, int64_t n_exclude, int64_t *ids, float *scores) {
    if (!index) return emb__null("index");
    emb_status st = emb_tensor_check(queries, "queries");
    if (st) return st;
    if (queries->dtype != EMB_FLOAT32)
        return emb__error(EMB_ERR_DTYPE, "queries must be float32, got %s",
                          emb_dtype_name(queries->dtype));
    if (queries->ndim != 2 || queries->shape[1] != index->dim) {
        char buf[96];
        return emb__error(EMB_ERR_SHAPE, "queries must be [Q, %" PRId64 "], got %s", index->dim,
                          emb__shape_fmt(buf, sizeof buf, queries->ndim, queries->shape));
    }
    if (n_exclude < 0)
        return emb__error(EMB_ERR_INVALID, "n_exclude must be >= 0, got %" PRId64, n_exclude);
    int64_t nq = queries->shape[0], total = 0;
    if ((st = check_k(k, nq, &total))) return st;
    if (nq == 0) return EMB_OK;
    if (!ids) return emb__null("ids");
    if (!scores) return emb__null("scores");
    if (n_exclude > 0 && !exclude) return emb__null("exclude");
    int64_t qsz;
    if (!emb__mul_i64(nq, index->dim, &qsz) || (uint64_t)qsz > SIZE_MAX / sizeof(float))
        return emb__error(EMB_ERR_OVERFLOW, "too many queries");
    float *qn = emb__malloc((size_t)qsz * sizeof(float));
    int64_t *tid = emb__malloc((size_t)total * sizeof(int64_t));
    float *tsc = emb__malloc((size_t)total * sizeof(float));
    if (!qn || !tid || !tsc) {
        emb__free(qn), emb__free(tid), emb__free(tsc);
        return emb__error(EMB_ERR_NOMEM, "cannot allocate search buffers");
    }
    const float *q = queries->data;
    for (int64_t i = 0; i < nq; i++) unit_copy(qn + i * index->dim, q + i * index->dim, index->dim);
    st = search_unit(index, qn, nq, k, exclude, n_exclude, tid, tsc);
    if (st == EMB_OK) {
        memcpy(ids, tid, (size_t)total * sizeof(int64_t));
        memcpy(scores, tsc, (size_t)total * sizeof(float));
    }
    emb__free(qn), emb__free(tid), emb__free(tsc);
    return st;
}

emb_status emb_knn_analogy(const emb_knn *index, const int64_t *abc, int64_t n_questions, int64_t k,
                           int64_t *ids, float *scores) {
    if (!index) return emb__null("index");
    if (n_questions < 0)
        return emb__error(EMB_ERR_INVALID, "n_questions must be >= 0, got %" PRId64, n_questions);
    int64_t total = 0;
    emb_status st = check_k(k, n_questions, &total);
    if (st) return st;
    if (n_questions == 0) return EMB_OK;
    if (!abc) return emb__null("abc");
    if (!ids) return emb__null("ids");
    if (!scores) return emb__null("scores");
    for (int64_t i = 0; i < 3 * n_questions; i++)
        if (abc[i] < 0 || abc[i] >= index->total_rows)
            return emb__error(EMB_ERR_INDEX,
                              "analogy %" PRId64 ": row %" PRId64
                              " is out of range for a table with %" PRId64
                              " rows (valid: [0, %" PRId64 "))",
                              i / 3, abc[i], index->total_rows, index->total_rows);
    const int64_t d = index->dim;
    int64_t qsz;
    if (!emb__mul_i64(n_questions, d, &qsz) || (uint64_t)qsz > SIZE_MAX / sizeof(float))
        return emb__error(EMB_ERR_OVERFLOW, "too many questions");
    float *qn = emb__malloc((size_t)qsz * sizeof(float));
    float *tmp = emb__malloc((size_t)d * 3 * sizeof(float));
    int64_t *tid = emb__malloc((size_t)total * sizeof(int64_t));
    float *tsc = emb__malloc((size_t)total * sizeof(float));
    if (!qn || !tmp || !tid || !tsc) {
        emb__free(qn), emb__free(tmp), emb__free(tid), emb__free(tsc);
        return emb__error(EMB_ERR_NOMEM, "cannot allocate analogy buffers");
    }
    for (int64_t i = 0; i < n_questions; i++) {
        float *ua = tmp, *ub = tmp + d, *uc = tmp + 2 * d, *qv = qn + i * d;
        unit_copy(ua, rows_at(index, abc[3 * i], 1, ua), d);
        unit_copy(ub, rows_at(index, abc[3 * i + 1], 1, ub), d);
        unit_copy(uc, rows_at(index, abc[3 * i + 2], 1, uc), d);
        for (int64_t j = 0; j < d; j++) ua[j] = ub[j] - ua[j] + uc[j];
        unit_copy(qv, ua, d);
    }
    st = search_unit(index, qn, n_questions, k, abc, 3, tid, tsc);
    if (st == EMB_OK) {
        memcpy(ids, tid, (size_t)total * sizeof(int64_t));
        memcpy(scores, tsc, (size_t)total * sizeof(float));
    }
    emb__free(qn), emb__free(tmp), emb__free(tid), emb__free(tsc);
    return st;
}

/* ---- for the similarity queries of src/search/similarity.c (knn_internal.h) ---- */

int64_t emb__knn_total_rows(const emb_knn *x) {
    return x->total_rows;
}

void emb__knn_unit_row(const emb_knn *x, int64_t r, float *dst) {
    unit_copy(dst, rows_at(x, r, 1, dst), x->dim);
}

const float *emb__knn_row(const emb_knn *x, int64_t r, float *buf) {
    return rows_at(x, r, 1, buf);
}

emb_status emb__knn_search_unit(const emb_knn *x, const float *qn, int64_t k,
                                const int64_t *exclude, int64_t n_ex, int64_t *ids, float *scores) {
    int64_t total;
    emb_status st = check_k(k, 1, &total);
    return st ? st : search_unit(x, qn, 1, k, exclude, n_ex, ids, scores);
}
