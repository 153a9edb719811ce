/* Reading a corpus for word2vec training in one streaming pass: tokens, the vocabulary and
 * the token ids (see include/emb/word2vec.h, emb_w2v_create_from_stream). */
#include "w2v_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define EMB__CORPUS_BLOCK (1 << 20)

static bool is_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool is_punct(unsigned char c) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
}

/* A growable int32 array. */
typedef struct {
    int32_t *a;
    int64_t n, cap;
} ids_buf;

static bool ids_push(ids_buf *b, int32_t v) {
    if (b->n == b->cap) {
        int64_t cap = b->cap ? b->cap * 2 : 1 << 16;
        if ((uint64_t)cap > SIZE_MAX / sizeof(int32_t)) return false;
        int32_t *p = realloc(b->a, (size_t)cap * sizeof(int32_t));
        if (!p) return false;
        b->a = p, b->cap = cap;
    }
    b->a[b->n++] = v;
    return true;
}

typedef struct {
    const emb_w2v_options *o;
    const char *name;
    emb_vocab *vocab;
    ids_buf ids;
    int64_t line;
    int64_t tokens; /* tokens read (before min_count) */
    char *tok;
    size_t tok_len, tok_cap;
} reader;

/* Ends the current token: normalise it, add it to the vocabulary, record its id. */
static emb_status end_token(reader *r) {
    if (r->tok_len == 0) return EMB_OK;
    char *s = r->tok;
    size_t n = r->tok_len;
    r->tok_len = 0;
    if (!emb_utf8_valid(s, n))
        return emb__error(EMB_ERR_FORMAT,
                          "%s:%" PRId64 ": invalid UTF-8 in a token (the corpus must be UTF-8 "
                          "text)",
                          r->name, r->line);
    if (r->o->strip_punct) {
        while (n > 0 && is_punct((unsigned char)s[0])) s++, n--;
        while (n > 0 && is_punct((unsigned char)s[n - 1])) n--;
        if (n == 0) return EMB_OK;
    }
    if (r->o->lowercase)
        for (size_t i = 0; i < n; i++)
            if (s[i] >= 'A' && s[i] <= 'Z') s[i] = (char)(s[i] - 'A' + 'a');
    int64_t id;
    emb_status st = emb_vocab_add(r->vocab, s, n, 1, &id, NULL);
    if (st) return st;
    if (id >= INT32_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "%s: more than %d distinct words", r->name,
                          INT32_MAX - 1);
    r->tokens++;
    if (!ids_push(&r->ids, (int32_t)id))
        return emb__error(EMB_ERR_NOMEM, "%s: cannot store %" PRId64 " token ids", r->name,
                          r->ids.n + 1);
    return EMB_OK;
}

static emb_status push_char(reader *r, char c) {
    if (r->tok_len == r->tok_cap) {
        if (r->tok_cap >= EMB_VOCAB_MAX_WORD) /* at once: an endless token must not be read to its end */
            return emb__error(EMB_ERR_FORMAT, "%s:%" PRId64 ": a token is longer than %d bytes", r->name,
                              r->line, EMB_VOCAB_MAX_WORD);
        size_t cap = r->tok_cap ? r->tok_cap * 2 : 256;
        char *p = realloc(r->tok, cap);
        if (!p) return emb__error(EMB_ERR_NOMEM, "%s: out of memory reading a token", r->name);
        r->tok = p, r->tok_cap = cap;
    }
    r->tok[r->tok_len++] = c;
    return EMB_OK;
}

/* One pass over f: vocabulary with counts (first-appearance order) and provisional ids
 * (-1 for a line end), into *vocab_out / *ids_out / *n_out. */
static emb_status read_tokens(const emb_w2v_options *o, FILE *f, const char *name,
                              emb_vocab **vocab_out, int32_t **ids_out, int64_t *n_out,
                              int64_t *tokens_out) {
    reader r;
    memset(&r, 0, sizeof r);
    r.o = o, r.name = name, r.line = 1;
    emb_status st = emb_vocab_create(&r.vocab);
    if (st) return st;
    char *buf = malloc(EMB__CORPUS_BLOCK);
    if (!buf) {
        emb_vocab_free(r.vocab);
        return emb__error(EMB_ERR_NOMEM, "%s: cannot allocate a read buffer", name);
    }
    bool line_has_tokens = false;
    for (;;) {
        size_t got = fread(buf, 1, EMB__CORPUS_BLOCK, f);
        for (size_t i = 0; i < got && st == EMB_OK; i++) {
            unsigned char c = (unsigned char)buf[i];
            if (is_space(c)) {
                int64_t before = r.ids.n;
                st = end_token(&r);
                if (r.ids.n > before) line_has_tokens = true;
                if (c == '\n') {
                    if (st == EMB_OK && line_has_tokens && !ids_push(&r.ids, -1))
                        st = emb__error(EMB_ERR_NOMEM, "%s: cannot store the token ids", name);
                    line_has_tokens = false;
                    r.line++;
                }
            } else {
                st = push_char(&r, (char)c);
            }
        }
        if (st) break;
        if (got < EMB__CORPUS_BLOCK) {
            if (ferror(f))
                st = emb__error(EMB_ERR_IO, "%s: read error: %s", name, strerror(errno));
            break;
        }
    }
    if (st == EMB_OK) st = end_token(&r);
    free(buf);
    free(r.tok);
    if (st) {
        emb_vocab_free(r.vocab);
        free(r.ids.a);
        return st;
    }
    *vocab_out = r.vocab;
    *ids_out = r.ids.a;
    *n_out = r.ids.n;
    *tokens_out = r.tokens;
    return EMB_OK;
}

emb_status emb__w2v_read_corpus(const emb_w2v_options *o, FILE *f, const char *name,
                                emb_vocab **vocab_out, int32_t **ids_out, int64_t *n_out) {
    emb_vocab *v = NULL;
    int32_t *ids = NULL;
    int64_t n = 0, tokens = 0;
    emb_status st = read_tokens(o, f, name, &v, &ids, &n, &tokens);
    if (st) return st;
    int64_t nv = emb_vocab_size(v);
    if (tokens == 0) {
        emb_vocab_free(v), free(ids);
        return emb__error(EMB_ERR_FORMAT, "%s: the corpus is empty (no tokens)", name);
    }
    int64_t *perm = malloc((size_t)nv * sizeof(int64_t));
    int32_t *map = malloc((size_t)nv * sizeof(int32_t));
    if (!perm || !map) {
        free(perm), free(map), emb_vocab_free(v), free(ids);
        return emb__error(EMB_ERR_NOMEM, "%s: out of memory sorting the vocabulary", name);
    }
    st = emb_vocab_sort_by_count(v, 0, perm);
    if (st == EMB_OK) st = emb_vocab_prune(v, 0, o->min_count, o->max_vocab);
    if (st) {
        free(perm), free(map), emb_vocab_free(v), free(ids);
        return st;
    }
    int64_t kept = emb_vocab_size(v);
    if (kept == 0) {
        free(perm), free(map), emb_vocab_free(v), free(ids);
        return emb__error(EMB_ERR_FORMAT,
                          "%s: no word occurs at least %" PRId64
                          " times (min_count); %" PRId64 " distinct words in %" PRId64
                          " tokens",
                          name, o->min_count, nv, tokens);
    }
    /* After the sort, the kept words are a prefix of the sorted order. */
    for (int64_t i = 0; i < nv; i++) map[i] = -2;
    for (int64_t i = 0; i < kept; i++) map[perm[i]] = (int32_t)i;
    int64_t w = 0;
    bool last_end = true;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0) {
            if (!last_end) ids[w++] = -1;
            last_end = true;
            continue;
        }
        int32_t nid = map[id];
        if (nid < 0) continue;
        ids[w++] = nid;
        last_end = false;
    }
    free(perm), free(map);
    *vocab_out = v;
    *ids_out = ids;
    *n_out = w;
    return EMB_OK;
}
