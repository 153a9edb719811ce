/* The JSON routes of `emb serve` (docs/serve.md): the embeddings endpoint of the OpenAI /
 * llama.cpp / ollama convention, gensim's KeyedVectors queries, lookups by id, the table's
 * description. Every route checks its request completely before it computes, and answers
 * a malformed one with 400 and a message that names the field. */
#include "serve.h"
#include "../wordvecs.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Replies
 * ------------------------------------------------------------------------------------- */

void serve_json(serve_reply *out, unsigned status, json_t *j) {
    out->status = status;
    out->body = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    if (!out->body) { /* out of memory: a fixed text */
        out->status = 500;
        out->body = strdup(
            "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"code\":500}}");
    }
    out->len = out->body ? strlen(out->body) : 0;
}

static const char *error_type(unsigned status) {
    switch (status) {
    case 400:
        return "invalid_request_error";
    case 404:
        return "not_found_error";
    case 405:
        return "method_not_allowed";
    case 413:
        return "request_too_large";
    case 503:
        return "unavailable";
    default:
        return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

void serve_error(serve_reply *out, unsigned status, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:{s:s, s:s, s:I}}", "error", "message", msg, "type",
                          error_type(status), "code", (json_int_t)status);
    serve_json(out, status, e);
}

/* ---------------------------------------------------------------------------------------
 * Request fields
 * ------------------------------------------------------------------------------------- */

/* An optional integer field in [lo, hi] (def when absent). False after an error reply. */
bool serve_get_int(json_t *req, const char *key, int64_t lo, int64_t hi, int64_t def, int64_t *out,
                   serve_reply *r) {
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return true;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        serve_error(r, 400, "'%s' must be an integer in [%lld, %lld]", key, (long long)lo,
                    (long long)hi);
        return false;
    }
    *out = json_integer_value(v);
    return true;
}

/* "encoding_format": "float" (default) or "base64". */
static bool get_encoding(json_t *req, bool *base64, serve_reply *r) {
    json_t *v = json_object_get(req, "encoding_format");
    *base64 = false;
    if (!v || json_is_null(v)) return true;
    const char *s = json_string_value(v);
    if (s && strcmp(s, "float") == 0) return true;
    if (s && strcmp(s, "base64") == 0) return *base64 = true;
    serve_error(r, 400, "'encoding_format' must be \"float\" or \"base64\"");
    return false;
}

/* A vector as a JSON array of numbers, or (base64) the base64 text of its little-endian
 * float32 bytes, as OpenAI's API encodes it. */
static json_t *vector_json(const float *v, int64_t dim, bool base64) {
    if (!base64) {
        json_t *a = json_array();
        for (int64_t i = 0; a && i < dim; i++)
            if (json_array_append_new(a, json_real((double)v[i]))) {
                json_decref(a);
                return NULL;
            }
        return a;
    }
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t n = (size_t)dim * 4;
    unsigned char *b = malloc(n ? n : 1);
    char *s = malloc(4 * ((n + 2) / 3) + 1);
    if (!b || !s) {
        free(b), free(s);
        return NULL;
    }
    for (int64_t i = 0; i < dim; i++) { /* little-endian, whatever the host */
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) b[4 * i + k] = (unsigned char)(u >> (8 * k));
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) |
                     (i + 2 < n ? b[i + 2] : 0);
        s[o++] = tab[w >> 18 & 63];
        s[o++] = tab[w >> 12 & 63];
        s[o++] = i + 1 < n ? tab[w >> 6 & 63] : '=';
        s[o++] = i + 2 < n ? tab[w & 63] : '=';
    }
    s[o] = 0;
    json_t *j = json_string(s);
    free(b), free(s);
    return j;
}

/* A term of a query: a word (string) or a row id (integer). row >= 0 for rows of the
 * table; row -1 with vec set for an unseen word that the table's unseen-word hook made a
 * vector for. */
typedef struct {
    int64_t row;
    float *vec; /* [dim], owned */
    const char *text;
} term;

/* Resolves one term, naming it `what` in errors (e.g. "positive[2]"). False after an error
 * reply. */
static bool resolve(const serve_table *t, json_t *k, const char *what, term *out, serve_reply *r) {
    out->row = -1;
    out->vec = NULL;
    out->text = NULL;
    if (json_is_integer(k)) {
        json_int_t id = json_integer_value(k);
        if (id < 0 || id >= t->rows) {
            serve_error(r, 404, "%s: row %lld is out of range (the table has rows 0..%lld)", what,
                        (long long)id, (long long)t->rows - 1);
            return false;
        }
        out->row = id;
        return true;
    }
    const char *s = json_string_value(k);
    if (!s) {
        serve_error(r, 400, "%s must be a word (a string) or a row id (an integer)", what);
        return false;
    }
    out->text = s;
    size_t len = json_string_length(k);
    if (!t->vocab) {
        serve_error(r, 404,
                    "%s: '%.200s' is not a row id, and this table has no words (look rows up "
                    "by id, 0..%lld)",
                    what, s, (long long)t->rows - 1);
        return false;
    }
    if ((out->row = serve_table_find(t, s, len)) >= 0) return true;
    if (t->unseen) {
        out->vec = malloc(sizeof(float) * (size_t)t->dim);
        if (out->vec && t->unseen(t, s, len, out->vec)) return true;
        free(out->vec);
        out->vec = NULL;
    }
    serve_error(r, 404, "%s: word '%.200s' is not in the vocabulary", what, s);
    return false;
}

static void vector_of(const serve_table *t, const term *k, float *out) {
    if (k->vec)
        memcpy(out, k->vec, sizeof(float) * (size_t)t->dim);
    else
        serve_table_row(t, k->row, out);
}

/* A list of terms from a string, an integer or an array of them. */
static bool resolve_list(const serve_table *t, json_t *v, const char *name, term **out, size_t *n,
                         size_t max, serve_reply *r) {
    *out = NULL;
    *n = 0;
    if (!v || json_is_null(v)) return true;
    size_t cnt = json_is_array(v) ? json_array_size(v) : 1;
    if (cnt > max) {
        serve_error(r, 400, "'%s' has %zu entries; at most %zu are allowed", name, cnt, max);
        return false;
    }
    term *ts = calloc(cnt ? cnt : 1, sizeof *ts);
    if (!ts) {
        serve_error(r, 500, "out of memory");
        return false;
    }
    for (size_t i = 0; i < cnt; i++) {
        char what[64];
        snprintf(what, sizeof what, json_is_array(v) ? "%s[%zu]" : "%s", name, i);
        if (!resolve(t, json_is_array(v) ? json_array_get(v, i) : v, what, &ts[i], r)) {
            for (size_t j = 0; j < i; j++) free(ts[j].vec);
            free(ts);
            return false;
        }
    }
    *out = ts;
    *n = cnt;
    return true;
}

static void free_terms(term *ts, size_t n) {
    for (size_t i = 0; ts && i < n; i++) free(ts[i].vec);
    free(ts);
}

/* The result list of a search: [{"id", "word", "similarity"}] without the -1 slots. */
static json_t *results_json(const serve_table *t, const int64_t *ids, const float *scores,
                            int64_t k) {
    json_t *a = json_array();
    for (int64_t i = 0; a && i < k && ids[i] >= 0; i++) {
        json_t *o =
            json_pack("{s:I, s:f}", "id", (json_int_t)ids[i], "similarity", (double)scores[i]);
        const char *w = serve_table_word(t, ids[i]);
        if (o && w) json_object_set_new(o, "word", json_string(w));
        if (!o || json_array_append_new(a, o)) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* ---------------------------------------------------------------------------------------
 * Texts to rows: /v1/embeddings
 * ------------------------------------------------------------------------------------- */

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* The EmbeddingBag mean of each input: texts are split at ASCII white space and each word
 * looked up (serve_table_find); token arrays are rows. Unknown words are left out; an
 * input with no known word gets the empty bag's vector, zeros. `tokens` receives the number
 * of words (or ids) of each input. */
typedef struct {
    int64_t *ids, n, cap;
} idlist;

static bool push(idlist *l, int64_t id) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 64;
        int64_t *p = realloc(l->ids, sizeof(int64_t) * (size_t)cap);
        if (!p) return false;
        l->ids = p, l->cap = cap;
    }
    l->ids[l->n++] = id;
    return true;
}

/* Extra vectors of one input made by the unseen-word hook: their sum and count. */
typedef struct {
    float *sum;
    int64_t count;
} extra;

static void embeddings_common(serve_ctx *ctx, json_t *req, serve_reply *r, bool ollama) {
    const serve_table *t = ctx->table;
    json_t *in = json_object_get(req, "input");
    if (!in && ollama) in = json_object_get(req, "prompt"); /* ollama's older field */
    if (!in || !(json_is_string(in) || json_is_array(in))) {
        serve_error(r, 400,
                    "'input' must be a string, an array of strings, an array of row "
                    "ids or an array of arrays of row ids");
        return;
    }
    bool base64 = false;
    if (!ollama && !get_encoding(req, &base64, r)) return;
    /* the inputs: one text, texts, one id array, or id arrays */
    size_t n_in = 1;
    bool single_ids = false;
    if (json_is_array(in)) {
        n_in = json_array_size(in);
        if (n_in == 0) {
            serve_error(r, 400, "'input' is empty");
            return;
        }
        json_t *first = json_array_get(in, 0);
        if (json_is_integer(first)) single_ids = true, n_in = 1;
    }
    if ((int64_t)n_in > ctx->limits.max_batch) {
        serve_error(r, 400, "'input' has %zu entries; at most %lld are allowed per request", n_in,
                    (long long)ctx->limits.max_batch);
        return;
    }
    idlist ids = {NULL, 0, 0};
    int64_t *offsets = malloc(sizeof(int64_t) * n_in), *tokens = calloc(n_in, sizeof(int64_t));
    extra *ex = calloc(n_in, sizeof(extra));
    float *tmp = malloc(sizeof(float) * (size_t)t->dim);
    float *out = malloc(sizeof(float) * (size_t)(n_in * (size_t)t->dim));
    bool ok = offsets && tokens && ex && tmp && out;
    if (!ok) serve_error(r, 500, "out of memory");
    int64_t total_tokens = 0;
    for (size_t b = 0; ok && b < n_in; b++) {
        offsets[b] = ids.n;
        json_t *item = !json_is_array(in) ? in : single_ids ? in : json_array_get(in, b);
        if (json_is_string(item)) {
            const char *s = json_string_value(item);
            size_t len = json_string_length(item), i = 0;
            while (ok && i < len) {
                while (i < len && is_space(s[i])) i++;
                size_t j = i;
                while (j < len && !is_space(s[j])) j++;
                if (j == i) break;
                if (++tokens[b] > ctx->limits.max_tokens) {
                    serve_error(r, 400, "input[%zu] has more than %lld words", b,
                                (long long)ctx->limits.max_tokens);
                    ok = false;
                    break;
                }
                int64_t row = serve_table_find(t, s + i, j - i);
                if (row >= 0) {
                    if (!push(&ids, row)) ok = false, serve_error(r, 500, "out of memory");
                } else if (t->unseen && t->unseen(t, s + i, j - i, tmp)) {
                    if (!ex[b].sum && !(ex[b].sum = calloc((size_t)t->dim, sizeof(float)))) {
                        ok = false, serve_error(r, 500, "out of memory");
                        break;
                    }
                    for (int64_t k = 0; k < t->dim; k++) ex[b].sum[k] += tmp[k];
                    ex[b].count++;
                }
                i = j;
            }
        } else if (json_is_array(item)) {
            size_t m = json_array_size(item);
            if ((int64_t)m > ctx->limits.max_tokens) {
                serve_error(r, 400, "input[%zu] has more than %lld ids", b,
                            (long long)ctx->limits.max_tokens);
                ok = false;
            }
            for (size_t k = 0; ok && k < m; k++) {
                json_t *e = json_array_get(item, k);
                if (!json_is_integer(e) || json_integer_value(e) < 0 ||
                    json_integer_value(e) >= t->rows) {
                    if (json_is_integer(e))
                        serve_error(
                            r, 404,
                            "input%s[%zu]: row %lld is out of range (the table has rows 0..%lld)",
                            single_ids ? "" : "[]", k, (long long)json_integer_value(e),
                            (long long)t->rows - 1);
                    else
                        serve_error(r, 400, "input: an array of ids must hold integers only");
                    ok = false;
                } else if (!push(&ids, json_integer_value(e))) {
                    ok = false, serve_error(r, 500, "out of memory");
                }
            }
            tokens[b] = (int64_t)m;
        } else {
            serve_error(r, 400, "input[%zu] must be a string or an array of row ids", b);
            ok = false;
        }
        total_tokens += tokens[b];
    }
    if (ok) { /* one EmbeddingBag call, mode mean, over all the inputs */
        emb_tensor ti, to, toff;
        int64_t nid = ids.n, nb = (int64_t)n_in, oshape[2] = {nb, t->dim};
        int64_t dummy = 0;
        emb_bag_options bo = emb_bag_options_default();
        bo.mode = EMB_BAG_MEAN;
        emb_tensor_init(&ti, EMB_INT64, ids.ids ? ids.ids : &dummy, 1, &nid);
        emb_tensor_init(&toff, EMB_INT64, offsets, 1, &nb);
        emb_tensor_init(&to, EMB_FLOAT32, out, 2, oshape);
        if (emb_qtable_bag_forward(t->q, &ti, &toff, NULL, &bo, &to, NULL) != EMB_OK) {
            serve_error(r, 500, "%s", emb_errmsg());
            ok = false;
        }
    }
    for (size_t b = 0; ok && b < n_in; b++) { /* fold in the unseen words' vectors */
        if (!ex[b].count) continue;
        int64_t known = (b + 1 < n_in ? offsets[b + 1] : ids.n) - offsets[b];
        float *o = out + b * (size_t)t->dim;
        for (int64_t k = 0; k < t->dim; k++)
            o[k] = (o[k] * (float)known + ex[b].sum[k]) / (float)(known + ex[b].count);
    }
    if (ok) {
        json_t *data = json_array();
        for (size_t b = 0; data && b < n_in; b++) {
            json_t *v = vector_json(out + b * (size_t)t->dim, t->dim, base64);
            json_t *o = ollama ? v
                               : json_pack("{s:s, s:I, s:o}", "object", "embedding", "index",
                                           (json_int_t)b, "embedding", v);
            if (!v || !o || json_array_append_new(data, o)) json_decref(data), data = NULL;
        }
        json_t *res = !data    ? NULL
                      : ollama ? json_pack("{s:s, s:o, s:I}", "model", t->model, "embeddings", data,
                                           "prompt_eval_count", (json_int_t)total_tokens)
                               : json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list",
                                           "data", data, "model", t->model, "usage",
                                           "prompt_tokens", (json_int_t)total_tokens,
                                           "total_tokens", (json_int_t)total_tokens);
        if (res)
            serve_json(r, 200, res);
        else
            serve_error(r, 500, "out of memory");
    }
    for (size_t b = 0; ex && b < n_in; b++) free(ex[b].sum);
    free(ex), free(ids.ids), free(offsets), free(tokens), free(tmp), free(out);
}

static void embeddings(serve_ctx *ctx, json_t *req, serve_reply *r) {
    embeddings_common(ctx, req, r, false);
}

static void ollama_embed(serve_ctx *ctx, json_t *req, serve_reply *r) {
    embeddings_common(ctx, req, r, true);
}

/* ---------------------------------------------------------------------------------------
 * gensim's queries
 * ------------------------------------------------------------------------------------- */

/* unit(x) added with weight w into acc (double), as gensim's unit vectors (float32). */
static void add_unit(double *acc, const float *x, int64_t d, double w) {
    double s = 0;
    for (int64_t i = 0; i < d; i++) s += (double)x[i] * (double)x[i];
    if (!(s > 0)) return;
    float inv = (float)(1 / sqrt(s));
    for (int64_t i = 0; i < d; i++) acc[i] += w * (double)(x[i] * inv);
}

/* The nearest rows to the mean of unit(positive) - unit(negative), without the query's own
 * rows: gensim's most_similar. */
static void search_terms(serve_ctx *ctx, const term *pos, size_t np, const term *neg, size_t nn,
                         int64_t topn, serve_reply *r) {
    const serve_table *t = ctx->table;
    const int64_t d = t->dim;
    double *acc = calloc((size_t)d, sizeof(double));
    float *v = malloc(sizeof(float) * (size_t)d), *q = malloc(sizeof(float) * (size_t)d);
    int64_t *exclude = malloc(sizeof(int64_t) * (np + nn + 1));
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)topn);
    float *sc = malloc(sizeof(float) * (size_t)topn);
    if (!acc || !v || !q || !exclude || !ids || !sc) {
        serve_error(r, 500, "out of memory");
        goto done;
    }
    int64_t nex = 0;
    for (size_t i = 0; i < np + nn; i++) {
        const term *k = i < np ? &pos[i] : &neg[i - np];
        vector_of(t, k, v);
        add_unit(acc, v, d, i < np ? 1.0 : -1.0);
        if (k->row >= 0) exclude[nex++] = k->row;
    }
    for (int64_t i = 0; i < d; i++) q[i] = (float)(acc[i] / (double)(np + nn));
    emb_tensor tq;
    int64_t qshape[2] = {1, d};
    emb_tensor_init(&tq, EMB_FLOAT32, q, 2, qshape);
    if (emb_knn_search(t->knn, &tq, topn, exclude, nex, ids, sc) != EMB_OK) {
        serve_error(r, 500, "%s", emb_errmsg());
        goto done;
    }
    json_t *res = results_json(t, ids, sc, topn);
    if (res)
        serve_json(r, 200, json_pack("{s:o}", "results", res));
    else
        serve_error(r, 500, "out of memory");
done:
    free(acc), free(v), free(q), free(exclude), free(ids), free(sc);
}

static void most_similar(serve_ctx *ctx, json_t *req, serve_reply *r) {
    int64_t topn;
    if (!serve_get_int(req, "topn", 1, ctx->limits.max_topn, 10, &topn, r)) return;
    term *pos, *neg;
    size_t np, nn;
    const size_t max = (size_t)ctx->limits.max_batch;
    if (!resolve_list(ctx->table, json_object_get(req, "positive"), "positive", &pos, &np, max, r))
        return;
    if (!resolve_list(ctx->table, json_object_get(req, "negative"), "negative", &neg, &nn, max,
                      r)) {
        free_terms(pos, np);
        return;
    }
    if (np + nn == 0)
        serve_error(r, 400, "give at least one word or id in 'positive' or 'negative'");
    else
        search_terms(ctx, pos, np, neg, nn, topn, r);
    free_terms(pos, np);
    free_terms(neg, nn);
}

/* "a is to b as c is to ?": most_similar(positive=[b, c], negative=[a]), the word2vec
 * tool's and gensim's 3CosAdd. */
static void analogy(serve_ctx *ctx, json_t *req, serve_reply *r) {
    int64_t topn;
    if (!serve_get_int(req, "topn", 1, ctx->limits.max_topn, 10, &topn, r)) return;
    term abc[3];
    static const char *const names[3] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(req, names[i]);
        if (!v) {
            for (int j = 0; j < i; j++) free(abc[j].vec);
            serve_error(r, 400, "'%s' is missing: give a, b and c (a is to b as c is to ?)",
                        names[i]);
            return;
        }
        if (!resolve(ctx->table, v, names[i], &abc[i], r)) {
            for (int j = 0; j < i; j++) free(abc[j].vec);
            return;
        }
    }
    term pos[2] = {abc[1], abc[2]};
    search_terms(ctx, pos, 2, &abc[0], 1, topn, r);
    for (int i = 0; i < 3; i++) free(abc[i].vec);
}

static void similarity(serve_ctx *ctx, json_t *req, serve_reply *r) {
    const serve_table *t = ctx->table;
    json_t *a = json_object_get(req, "w1"), *b = json_object_get(req, "w2");
    if (!a || !b) {
        serve_error(r, 400, "give the two words (or ids) as 'w1' and 'w2'");
        return;
    }
    term ka, kb;
    if (!resolve(t, a, "w1", &ka, r)) return;
    if (!resolve(t, b, "w2", &kb, r)) {
        free(ka.vec);
        return;
    }
    float *va = malloc(sizeof(float) * (size_t)t->dim),
          *vb = malloc(sizeof(float) * (size_t)t->dim);
    if (va && vb) {
        vector_of(t, &ka, va);
        vector_of(t, &kb, vb);
        serve_json(r, 200, json_pack("{s:f}", "similarity", wordvecs_cosine(va, vb, t->dim)));
    } else {
        serve_error(r, 500, "out of memory");
    }
    free(va), free(vb), free(ka.vec), free(kb.vec);
}

/* gensim's doesnt_match: the word farthest from the mean of the words' unit vectors
 * (lowest cosine; ties to the smaller word), unknown words left out and listed. */
static void doesnt_match(serve_ctx *ctx, json_t *req, serve_reply *r) {
    const serve_table *t = ctx->table;
    json_t *words = json_object_get(req, "words");
    if (!json_is_array(words) || json_array_size(words) == 0) {
        serve_error(r, 400, "'words' must be a non-empty array of words (or ids)");
        return;
    }
    size_t n = json_array_size(words);
    if ((int64_t)n > ctx->limits.max_batch) {
        serve_error(r, 400, "'words' has %zu entries; at most %lld are allowed", n,
                    (long long)ctx->limits.max_batch);
        return;
    }
    const int64_t d = t->dim;
    term *ks = calloc(n, sizeof *ks);
    float *u = malloc(sizeof(float) * n * (size_t)d);
    double *mean = calloc((size_t)d, sizeof(double));
    json_t *ignored = json_array();
    if (!ks || !u || !mean || !ignored) {
        serve_error(r, 500, "out of memory");
        goto done;
    }
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *w = json_array_get(words, i);
        if (!json_is_string(w) && !json_is_integer(w)) {
            serve_error(r, 400, "words[%zu] must be a word (a string) or a row id (an integer)", i);
            goto done;
        }
        char what[32];
        snprintf(what, sizeof what, "words[%zu]", i);
        serve_reply tmp = {0, NULL, 0, NULL};
        if (!resolve(t, w, what, &ks[used], &tmp)) {
            free(tmp.body);
            json_array_append(ignored, w);
            continue;
        }
        float *ui = u + used * (size_t)d;
        vector_of(t, &ks[used], ui);
        double s = 0;
        for (int64_t k = 0; k < d; k++) s += (double)ui[k] * ui[k];
        float inv = s > 0 ? (float)(1 / sqrt(s)) : 0.0f;
        for (int64_t k = 0; k < d; k++) ui[k] *= inv, mean[k] += ui[k];
        used++;
    }
    if (used == 0) {
        serve_error(r, 404, "none of the words is in the vocabulary");
        goto done;
    }
    double mn = 0;
    for (int64_t k = 0; k < d; k++) mn += (mean[k] / (double)used) * (mean[k] / (double)used);
    mn = mn > 0 ? 1 / sqrt(mn) : 0;
    size_t worst = 0;
    double worst_score = INFINITY;
    const char *worst_text = NULL;
    for (size_t i = 0; i < used; i++) {
        double s = 0;
        for (int64_t k = 0; k < d; k++)
            s += (double)u[i * (size_t)d + k] * (mean[k] / (double)used * mn);
        const char *txt = ks[i].row >= 0 && t->vocab ? serve_table_word(t, ks[i].row) : ks[i].text;
        if (s < worst_score ||
            (s == worst_score && txt && worst_text && strcmp(txt, worst_text) < 0))
            worst = i, worst_score = s, worst_text = txt;
    }
    json_t *res = json_pack("{s:o, s:f, s:O}", "id",
                            ks[worst].row >= 0 ? json_integer(ks[worst].row) : json_null(),
                            "similarity", worst_score, "ignored", ignored);
    if (res && worst_text) json_object_set_new(res, "word", json_string(worst_text));
    serve_json(r, 200, res);
done:
    for (size_t i = 0; ks && i < n; i++) free(ks[i].vec);
    free(ks), free(u), free(mean);
    json_decref(ignored);
}

/* Rows by id or word: {"ids": [...]} or {"words": [...]}. */
static void lookup(serve_ctx *ctx, json_t *req, serve_reply *r) {
    const serve_table *t = ctx->table;
    json_t *v = json_object_get(req, "ids");
    const char *name = "ids";
    if (!v) v = json_object_get(req, "words"), name = "words";
    if (!v || !json_is_array(v)) {
        serve_error(r, 400, "give 'ids' (row ids) or 'words' as an array");
        return;
    }
    bool base64;
    if (!get_encoding(req, &base64, r)) return;
    term *ks;
    size_t n;
    if (!resolve_list(t, v, name, &ks, &n, (size_t)ctx->limits.max_batch, r)) return;
    float *buf = malloc(sizeof(float) * (size_t)t->dim);
    json_t *data = json_array();
    for (size_t i = 0; buf && data && i < n; i++) {
        vector_of(t, &ks[i], buf);
        json_t *o = json_pack("{s:I, s:o}", "index", (json_int_t)i, "embedding",
                              vector_json(buf, t->dim, base64));
        if (o) {
            json_object_set_new(o, "id", ks[i].row >= 0 ? json_integer(ks[i].row) : json_null());
            const char *w = ks[i].row >= 0 ? serve_table_word(t, ks[i].row) : ks[i].text;
            if (w) json_object_set_new(o, "word", json_string(w));
        }
        if (!o || json_array_append_new(data, o)) json_decref(data), data = NULL;
    }
    if (buf && data)
        serve_json(r, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
    else
        json_decref(data), serve_error(r, 500, "out of memory");
    free(buf);
    free_terms(ks, n);
}

/* ---------------------------------------------------------------------------------------
 * The table
 * ------------------------------------------------------------------------------------- */

static void models(serve_ctx *ctx, json_t *req, serve_reply *r) {
    (void)req;
    serve_json(r, 200,
               json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id",
                         ctx->table->model, "object", "model", "created", (json_int_t)0, "owned_by",
                         "emb"));
}

static void info(serve_ctx *ctx, json_t *req, serve_reply *r) {
    (void)req;
    const serve_table *t = ctx->table;
    const serve_limits *l = &ctx->limits;
    serve_json(r, 200,
               json_pack("{s:s, s:I, s:I, s:I, s:s, s:s, s:b, s:b, s:b, s:s, "
                         "s:{s:I, s:I, s:I, s:I, s:I}}",
                         "model", t->model, "rows", (json_int_t)t->rows, "dim", (json_int_t)t->dim,
                         "searched_rows", (json_int_t)t->searched, "storage",
                         emb_qtype_name(emb_qtable_qtype(t->q)), "format", t->format, "mapped",
                         t->mapped, "words", t->vocab != NULL, "unseen_words", t->unseen != NULL,
                         "version", emb_version(), "limits", "max_body", (json_int_t)l->max_body,
                         "max_batch", (json_int_t)l->max_batch, "max_topn", (json_int_t)l->max_topn,
                         "max_map", (json_int_t)l->max_map, "max_tokens",
                         (json_int_t)l->max_tokens));
}

static void health(serve_ctx *ctx, json_t *req, serve_reply *r) {
    (void)ctx, (void)req;
    serve_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

static void map_route(serve_ctx *ctx, json_t *req, serve_reply *r) {
    serve_map_route(ctx, req, r);
}

/* ---------------------------------------------------------------------------------------
 * Routing
 * ------------------------------------------------------------------------------------- */

typedef void (*route_fn)(serve_ctx *ctx, json_t *req, serve_reply *r);

static const struct {
    const char *path;
    const char *method; /* "GET" (HEAD too) or "POST" */
    route_fn fn;
} routes[] = {
    {"/v1/embeddings", "POST", embeddings},
    {"/api/embed", "POST", ollama_embed},
    {"/v1/most_similar", "POST", most_similar},
    {"/v1/similarity", "POST", similarity},
    {"/v1/doesnt_match", "POST", doesnt_match},
    {"/v1/analogy", "POST", analogy},
    {"/v1/lookup", "POST", lookup},
    {"/v1/map", "POST", map_route},
    {"/v1/models", "GET", models},
    {"/v1/info", "GET", info},
    {"/health", "GET", health},
};

bool serve_api(serve_ctx *ctx, const char *method, const char *path, const char *body, size_t len,
               serve_reply *out) {
    const bool api = strncmp(path, "/v1/", 4) == 0 || strncmp(path, "/api/", 5) == 0 ||
                     strcmp(path, "/health") == 0;
    if (!api) return false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(path, routes[i].path) != 0) continue;
        const bool get = strcmp(routes[i].method, "GET") == 0;
        if (strcmp(method, routes[i].method) != 0 && !(get && strcmp(method, "HEAD") == 0)) {
            out->allow = get ? "GET, HEAD" : "POST";
            serve_error(out, 405, "%s takes %s requests, not %s", path, routes[i].method, method);
            return true;
        }
        if (get) {
            routes[i].fn(ctx, NULL, out);
            return true;
        }
        json_error_t e;
        json_t *req = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &e);
        if (!req) {
            serve_error(out, 400, "the body is not valid JSON: %s (line %d, column %d)", e.text,
                        e.line, e.column);
            return true;
        }
        if (!json_is_object(req)) {
            json_decref(req);
            serve_error(out, 400, "the body must be a JSON object");
            return true;
        }
        routes[i].fn(ctx, req, out);
        json_decref(req);
        return true;
    }
    serve_error(out, 404, "no route %s (see docs/serve.md)", path);
    return true;
}
