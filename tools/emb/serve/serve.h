/* serve.h: what the parts of `emb serve` share (docs/serve.md).
 *
 *   table.c   the served table: any file emb reads, mapped where the format allows, its
 *             words, its search index; words and texts to rows and vectors
 *   api.c     the JSON routes (/v1/embeddings, most_similar, ...): a request body in, a
 *             status and a JSON body out
 *   maps.c    2-D maps of the table for the page (PCA, t-SNE), cached
 *   http.c    the HTTP server (libmicrohttpd): limits, routing, static files, draining
 *   assets.h  the page's files, compiled into the program
 */
#ifndef EMB_TOOLS_SERVE_H
#define EMB_TOOLS_SERVE_H

#include <emb/emb.h>

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* ---- the table ---- */

typedef struct serve_table serve_table;

/* A vector for a word that is not in the vocabulary, written into out[dim]; false when the
 * table cannot make one. This is the hook for subword models: a fastText .bin model sets it
 * (the word's character n-gram rows averaged as fastText does, emb_fasttext_word_vector), and
 * every route that takes words uses it for unseen words. Other tables hold no n-grams and
 * leave it NULL. */
typedef bool (*serve_unseen_fn)(const serve_table *t, const char *word, size_t len, float *out);

struct serve_table {
    char *model; /* the name clients see ("model"): --model, or the file's name */
    const char *path;
    const char *format; /* format name, as emb info prints it */
    emb_qtable *q;      /* the rows, in their storage type (f32 tables too) */
    emb_vectors v;      /* a file read into memory: owns the float32 rows q wraps */
    emb_vocab *vocab;   /* the rows' words, or NULL (tables looked up by id) */
    emb_vocab *fold;    /* lowercased word -> its first row (count = row); NULL without words */
    emb_knn *knn;       /* cosine index over the first `searched` rows */
    int64_t rows, dim, searched;
    bool mapped;            /* the rows are a read-only mapping of the file, shared by processes */
    serve_unseen_fn unseen; /* NULL: unseen words are left out (see above) */
    emb_fasttext *ft;       /* a fastText .bin model's n-grams (the hook's data), or NULL */
};

typedef struct serve_table_options {
    const char *tensor;    /* safetensors: the tensor to read (NULL: emb's default choice) */
    const char *model;     /* NULL: the file's name */
    int64_t restrict_rows; /* search only the first N rows (0: all) */
    bool check_utf8;
} serve_table_options;

/* Opens `path`. On failure returns false with the reason in err. */
bool serve_table_open(const char *path, const serve_table_options *o, serve_table *t, char *err,
                      size_t errsize);
void serve_table_close(serve_table *t);

/* The row of a word: exact, else case-folded (ASCII), else without leading and trailing
 * punctuation (exact, then folded). -1 when none. */
int64_t serve_table_find(const serve_table *t, const char *word, size_t len);

/* The word of a row, or NULL for tables without words. */
const char *serve_table_word(const serve_table *t, int64_t row);

/* Row r as float32 into out[dim]. */
void serve_table_row(const serve_table *t, int64_t r, float *out);

/* ---- the JSON API ---- */

typedef struct serve_limits {
    int64_t max_body;   /* bytes of a request body */
    int64_t max_batch;  /* inputs of one /v1/embeddings or /v1/lookup request */
    int64_t max_topn;   /* results of a search */
    int64_t max_map;    /* points of a map */
    int64_t max_tokens; /* words of one input text */
} serve_limits;

typedef struct serve_maps serve_maps;

typedef struct serve_ctx {
    serve_table *table;
    serve_limits limits;
    serve_maps *maps;
} serve_ctx;

/* A response: HTTP status and a JSON text (malloc'd, the caller frees). */
typedef struct serve_reply {
    unsigned status;
    char *body;
    size_t len;
    const char *allow; /* for 405: the Allow header */
} serve_reply;

/* Answers a request to an API path (`path` starts with "/v1/", "/api/" or is "/health").
 * Returns false when the path is not an API route (the caller serves a file or a 404). */
bool serve_api(serve_ctx *ctx, const char *method, const char *path, const char *body, size_t len,
               serve_reply *out);

/* An error reply {"error": {"message", "type", "code"}} with the status. */
void serve_error(serve_reply *out, unsigned status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* An optional integer field of a request in [lo, hi] (def when absent or null). False after
 * an error reply naming the field and the range. */
bool serve_get_int(json_t *req, const char *key, int64_t lo, int64_t hi, int64_t def, int64_t *out,
                   serve_reply *r);

/* Serialises j (and drops the reference) into out with the status; floats with the 9
 * significant digits that read back as the same float32. */
void serve_json(serve_reply *out, unsigned status, json_t *j);

/* ---- maps ---- */

serve_maps *serve_maps_create(void);
void serve_maps_free(serve_maps *m);

/* The map route: {"method": "pca"|"tsne", "n": points, "query": word or id (optional: the
 * query's neighbourhood instead of the first rows), "perplexity", "iterations"}. */
void serve_map_route(serve_ctx *ctx, json_t *req, serve_reply *out);

/* ---- the server ---- */

typedef struct serve_options {
    const char *host;
    int64_t port;
    int64_t threads;
    int64_t connections;
    int64_t timeout;       /* seconds a connection may stay idle */
    int64_t drain_timeout; /* seconds SIGTERM waits for requests in flight */
    const char *cors;      /* Access-Control-Allow-Origin value, or NULL */
    const char *api_key;   /* required as "Authorization: Bearer KEY" on the API, or NULL */
    bool quiet;
} serve_options;

/* Runs the server until SIGTERM or SIGINT, then drains: stops accepting, waits for the
 * requests in flight (up to drain_timeout), stops. Prints the URL on stdout once listening.
 * Returns the exit status. */
int serve_http_run(serve_ctx *ctx, const serve_options *o);

#endif /* EMB_TOOLS_SERVE_H */
