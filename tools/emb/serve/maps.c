/* 2-D maps of the table for the page: the first rows (the most frequent words of a table
 * sorted by frequency) or a query's neighbourhood, projected by PCA or t-SNE (emb_pca,
 * emb_tsne) from their unit vectors, so that the map shows cosine geometry. The replies
 * of the last few maps are kept: the page asks for the same map again and again. */
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAPS_CACHED         16
#define MAPS_MAX_ITERATIONS 5000

typedef struct {
    char *key;
    char *body;
    size_t len;
    uint64_t used;
} cached;

struct serve_maps {
    pthread_mutex_t lock;
    cached slot[MAPS_CACHED];
    uint64_t clock;
};

serve_maps *serve_maps_create(void) {
    serve_maps *m = calloc(1, sizeof *m);
    if (m && pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m);
        return NULL;
    }
    return m;
}

void serve_maps_free(serve_maps *m) {
    if (!m) return;
    for (int i = 0; i < MAPS_CACHED; i++) free(m->slot[i].key), free(m->slot[i].body);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static bool cache_get(serve_maps *m, const char *key, serve_reply *r) {
    bool hit = false;
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < MAPS_CACHED; i++)
        if (m->slot[i].key && strcmp(m->slot[i].key, key) == 0) {
            r->body = malloc(m->slot[i].len + 1);
            if (r->body) {
                memcpy(r->body, m->slot[i].body, m->slot[i].len + 1);
                r->len = m->slot[i].len;
                r->status = 200;
                m->slot[i].used = ++m->clock;
                hit = true;
            }
            break;
        }
    pthread_mutex_unlock(&m->lock);
    return hit;
}

static void cache_put(serve_maps *m, const char *key, const serve_reply *r) {
    char *k = strdup(key), *b = malloc(r->len + 1);
    if (!k || !b) {
        free(k), free(b);
        return;
    }
    memcpy(b, r->body, r->len + 1);
    pthread_mutex_lock(&m->lock);
    int victim = 0;
    for (int i = 0; i < MAPS_CACHED; i++) {
        if (m->slot[i].key && strcmp(m->slot[i].key, key) == 0) { /* computed twice */
            victim = i;
            break;
        }
        if (m->slot[i].used < m->slot[victim].used) victim = i;
    }
    free(m->slot[victim].key), free(m->slot[victim].body);
    m->slot[victim] = (cached){k, b, r->len, ++m->clock};
    pthread_mutex_unlock(&m->lock);
}

/* Rows ids[0..n) as unit vectors into x [n, dim]. */
static void unit_rows(const serve_table *t, const int64_t *ids, int64_t n, float *x) {
    for (int64_t i = 0; i < n; i++) {
        float *row = x + i * t->dim;
        serve_table_row(t, ids[i], row);
        double s = 0;
        for (int64_t k = 0; k < t->dim; k++) s += (double)row[k] * row[k];
        float inv = s > 0 ? (float)(1 / sqrt(s)) : 0.0f;
        for (int64_t k = 0; k < t->dim; k++) row[k] *= inv;
    }
}

void serve_map_route(serve_ctx *ctx, json_t *req, serve_reply *r) {
    const serve_table *t = ctx->table;
    const char *method = "pca";
    json_t *jm = json_object_get(req, "method");
    if (jm) {
        method = json_string_value(jm);
        if (!method || (strcmp(method, "pca") != 0 && strcmp(method, "tsne") != 0)) {
            serve_error(r, 400, "'method' must be \"pca\" or \"tsne\"");
            return;
        }
    }
    const bool tsne = strcmp(method, "tsne") == 0;
    /* the query: a word or a row id, or none (the first rows) */
    json_t *jq = json_object_get(req, "query");
    int64_t qrow = -1;
    if (jq && !json_is_null(jq)) {
        if (json_is_integer(jq)) {
            qrow = json_integer_value(jq);
            if (qrow < 0 || qrow >= t->rows) {
                serve_error(r, 404, "query: row %lld is out of range (the table has rows 0..%lld)",
                            (long long)qrow, (long long)t->rows - 1);
                return;
            }
        } else if (json_is_string(jq)) {
            qrow = serve_table_find(t, json_string_value(jq), json_string_length(jq));
            if (qrow < 0) {
                if (t->vocab)
                    serve_error(r, 404, "query: word '%.200s' is not in the vocabulary",
                                json_string_value(jq));
                else
                    serve_error(r, 404, "query: this table has no words (give a row id, 0..%lld)",
                                (long long)t->rows - 1);
                return;
            }
        } else {
            serve_error(r, 400, "'query' must be a word (a string) or a row id (an integer)");
            return;
        }
    }
    int64_t n, iterations;
    if (!serve_get_int(req, "n", 2, ctx->limits.max_map, qrow >= 0 ? 100 : 500, &n, r)) return;
    if (qrow < 0 && n > t->searched) n = t->searched;          /* the first rows */
    if (qrow >= 0 && n > t->searched + 1) n = t->searched + 1; /* the query and its neighbours */
    if (!serve_get_int(req, "iterations", 0, MAPS_MAX_ITERATIONS, 1000, &iterations, r)) return;
    double perplexity = 30;
    json_t *jp = json_object_get(req, "perplexity");
    if (jp && !json_is_null(jp)) {
        if (!json_is_number(jp) || !(json_number_value(jp) >= 1) || json_number_value(jp) > 100) {
            serve_error(r, 400, "'perplexity' must be a number in [1, 100]");
            return;
        }
        perplexity = json_number_value(jp);
    }
    /* fewer points than 3 * perplexity + 1: the perplexity that keeps every point's
     * neighbours within the map */
    if (tsne && perplexity > (double)(n - 1) / 3) perplexity = fmax((double)(n - 1) / 3, 0.5);
    char key[160];
    snprintf(key, sizeof key, "%s|%lld|%lld|%.6g|%lld", method, (long long)n, (long long)qrow,
             perplexity, (long long)iterations);
    if (cache_get(ctx->maps, key, r)) return;

    const int64_t d = t->dim;
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)n);
    float *sim = malloc(sizeof(float) * (size_t)n), *x = malloc(sizeof(float) * (size_t)(n * d));
    float *xy = calloc((size_t)(2 * n), sizeof(float));
    if (!ids || !sim || !x || !xy) {
        serve_error(r, 500, "out of memory");
        goto done;
    }
    if (qrow >= 0) { /* the query, then its n - 1 nearest rows */
        ids[0] = qrow, sim[0] = 1;
        serve_table_row(t, qrow, x);
        emb_tensor tq;
        int64_t qshape[2] = {1, d};
        emb_tensor_init(&tq, EMB_FLOAT32, x, 2, qshape);
        if (n > 1 && emb_knn_search(t->knn, &tq, n - 1, &qrow, 1, ids + 1, sim + 1) != EMB_OK) {
            serve_error(r, 500, "%s", emb_errmsg());
            goto done;
        }
        int64_t m = 1;
        while (m < n && ids[m] >= 0) m++;
        n = m;
    } else {
        for (int64_t i = 0; i < n; i++) ids[i] = i;
    }
    unit_rows(t, ids, n, x);
    emb_tensor tx;
    int64_t xshape[2] = {n, d};
    emb_tensor_init(&tx, EMB_FLOAT32, x, 2, xshape);
    double var[2] = {0, 0}, kl = 0;
    emb_status st;
    if (tsne) {
        emb_tsne_options o = emb_tsne_options_default();
        o.perplexity = perplexity;
        o.iterations = iterations;
        o.exaggeration_iterations = iterations < 250 ? iterations : 250;
        if (o.perplexity >= (double)n) o.perplexity = fmax((double)(n - 1) / 3, 0.5);
        st = n >= 2 ? emb_tsne(&tx, &o, xy, &kl) : EMB_OK;
    } else {
        const int64_t k = d >= 2 ? 2 : 1;
        float *c = k == 2 ? xy : sim; /* d == 1: x only */
        st = emb_pca(&tx, k, c, var);
        if (st == EMB_OK && k == 1)
            for (int64_t i = n - 1; i >= 0; i--) xy[2 * i] = c[i], xy[2 * i + 1] = 0;
    }
    if (st != EMB_OK) {
        serve_error(r, 500, "%s", emb_errmsg());
        goto done;
    }
    json_t *pts = json_array();
    for (int64_t i = 0; pts && i < n; i++) {
        json_t *p = json_pack("{s:I, s:f, s:f}", "id", (json_int_t)ids[i], "x", (double)xy[2 * i],
                              "y", (double)xy[2 * i + 1]);
        const char *w = serve_table_word(t, ids[i]);
        if (p && w) json_object_set_new(p, "word", json_string(w));
        if (p && qrow >= 0 && d >= 2) json_object_set_new(p, "similarity", json_real(sim[i]));
        if (!p || json_array_append_new(pts, p)) json_decref(pts), pts = NULL;
    }
    json_t *res =
        pts ? json_pack("{s:s, s:I, s:o}", "method", method, "n", (json_int_t)n, "points", pts)
            : NULL;
    if (res && qrow >= 0) json_object_set_new(res, "query", json_integer(qrow));
    if (res && tsne) {
        json_object_set_new(res, "perplexity", json_real(perplexity));
        json_object_set_new(res, "kl_divergence", json_real(kl));
    }
    if (res && !tsne) json_object_set_new(res, "variance", json_pack("[f, f]", var[0], var[1]));
    if (!res) {
        serve_error(r, 500, "out of memory");
        goto done;
    }
    serve_json(r, 200, res);
    if (r->status == 200) cache_put(ctx->maps, key, r);
done:
    free(ids), free(sim), free(x), free(xy);
}
