/* Bigram phrases as gensim's Phrases finds them (include/emb/phrases.h). */
#include <emb/phrases.h>
#include <emb/vocab.h>

#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct emb_phrases {
    emb_vocab *vocab; /* tokens and "a<delim>b" pairs with their counts */
    emb_phrases_options o;
    char delim[17];
    size_t dlen;
    char *key; /* scratch for a pair's key */
    size_t key_cap;
};

emb_phrases_options emb_phrases_options_default(void) {
    emb_phrases_options o = {5, 10.0, "_"};
    return o;
}

static bool is_blank(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* The pair's key a<delim>b in p->key; false when it would be longer than a word may be. */
static bool pair_key(emb_phrases *p, const char *a, size_t na, const char *b, size_t nb,
                     size_t *len) {
    size_t n = na + p->dlen + nb;
    if (n > EMB_VOCAB_MAX_WORD) return false;
    if (n > p->key_cap) {
        char *k = realloc(p->key, n);
        if (!k) return false;
        p->key = k, p->key_cap = n;
    }
    memcpy(p->key, a, na);
    memcpy(p->key + na, p->delim, p->dlen);
    memcpy(p->key + na + p->dlen, b, nb);
    *len = n;
    return true;
}

/* Calls fn(ctx, line_number, tokens' starts, their lengths, count) for every line. */
typedef emb_status (*line_fn)(void *ctx, int64_t line, const char **tok, const size_t *len,
                              int64_t n);

static emb_status each_line(const char *path, line_fn fn, void *ctx) {
    emb__file f;
    emb_status st =
        emb__file_open(strcmp(path, "-") == 0 ? "/dev/stdin" : path, &f, EMB__FILE_READ);
    if (st) return st;
    const char *p = (const char *)f.data, *end = f.size ? p + f.size : p;
    const char **tok = NULL;
    size_t *len = NULL;
    int64_t cap = 0, line = 0;
    while (p < end && st == EMB_OK) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *le = nl ? nl : end;
        line++;
        int64_t n = 0;
        for (const char *q = p; q < le;) {
            while (q < le && is_blank((unsigned char)*q)) q++;
            if (q == le) break;
            const char *t = q;
            while (q < le && !is_blank((unsigned char)*q)) q++;
            if (n == cap) {
                int64_t c = cap ? 2 * cap : 256;
                const char **nt = realloc(tok, (size_t)c * sizeof *tok);
                if (nt) tok = nt;
                size_t *nlen = nt ? realloc(len, (size_t)c * sizeof *len) : NULL;
                if (!nt || !nlen) {
                    st = emb__error(EMB_ERR_NOMEM, "%s:%" PRId64 ": out of memory", path, line);
                    break;
                }
                len = nlen, cap = c;
            }
            tok[n] = t, len[n] = (size_t)(q - t), n++;
        }
        if (st == EMB_OK) st = fn(ctx, line, tok, len, n);
        p = nl ? nl + 1 : end;
    }
    free(tok), free(len);
    emb__file_close(&f);
    return st;
}

typedef struct {
    emb_phrases *p;
    const char *path;
} learn_ctx;

static emb_status learn_line(void *c, int64_t line, const char **tok, const size_t *len,
                             int64_t n) {
    learn_ctx *x = c;
    emb_phrases *p = x->p;
    for (int64_t i = 0; i < n; i++) {
        if (len[i] > EMB_VOCAB_MAX_WORD)
            return emb__error(EMB_ERR_FORMAT,
                              "%s:%" PRId64 ": a token of %zu bytes (the limit is %d)", x->path,
                              line, len[i], EMB_VOCAB_MAX_WORD);
        emb_status st = emb_vocab_add(p->vocab, tok[i], len[i], 1, NULL, NULL);
        if (st) return st;
        if (i == 0) continue;
        size_t kl;
        if (!pair_key(p, tok[i - 1], len[i - 1], tok[i], len[i], &kl))
            return emb__error(EMB_ERR_FORMAT,
                              "%s:%" PRId64 ": a pair of tokens longer than %d bytes", x->path,
                              line, EMB_VOCAB_MAX_WORD);
        if ((st = emb_vocab_add(p->vocab, p->key, kl, 1, NULL, NULL))) return st;
    }
    return EMB_OK;
}

void emb_phrases_free(emb_phrases *p) {
    if (!p) return;
    emb_vocab_free(p->vocab);
    free(p->key);
    free(p);
}

emb_status emb_phrases_learn(const char *path, const emb_phrases_options *opts, emb_phrases **out) {
    if (!path) return emb__null("path");
    if (!opts) return emb__null("options");
    if (!out) return emb__null("out");
    if (opts->min_count < 1)
        return emb__error(EMB_ERR_INVALID, "min_count must be at least 1, got %" PRId64,
                          opts->min_count);
    if (!(opts->threshold == opts->threshold))
        return emb__error(EMB_ERR_INVALID, "threshold must be a number");
    const char *d = opts->delimiter ? opts->delimiter : "_";
    size_t dl = strlen(d);
    if (dl < 1 || dl > 16)
        return emb__error(EMB_ERR_INVALID, "the delimiter must have 1 to 16 bytes, got %zu", dl);
    for (size_t k = 0; k < dl; k++)
        if (is_blank((unsigned char)d[k]) || d[k] == '\n')
            return emb__error(EMB_ERR_INVALID, "the delimiter must not hold whitespace");
    emb_phrases *p = calloc(1, sizeof *p);
    if (!p) return emb__error(EMB_ERR_NOMEM, "out of memory");
    p->o = *opts;
    memcpy(p->delim, d, dl + 1);
    p->dlen = dl;
    p->o.delimiter = p->delim;
    emb_status st = emb_vocab_create(&p->vocab);
    learn_ctx c = {p, path};
    if (st == EMB_OK) st = each_line(path, learn_line, &c);
    if (st) {
        emb_phrases_free(p);
        return st;
    }
    *out = p;
    return EMB_OK;
}

double emb_phrases_score(const emb_phrases *cp, const char *a, size_t na, const char *b,
                         size_t nb) {
    emb_phrases *p = (emb_phrases *)cp; /* the key scratch only */
    if (!p || !a || !b) return -INFINITY;
    int64_t ia = emb_vocab_find(p->vocab, a, na), ib = emb_vocab_find(p->vocab, b, nb);
    size_t kl;
    if (ia < 0 || ib < 0 || !pair_key(p, a, na, b, nb, &kl)) return -INFINITY;
    int64_t iab = emb_vocab_find(p->vocab, p->key, kl);
    if (iab < 0) return -INFINITY;
    const int64_t ca = emb_vocab_count(p->vocab, ia), cb = emb_vocab_count(p->vocab, ib),
                  cab = emb_vocab_count(p->vocab, iab);
    /* gensim: (bigram_count - min_count) / float(worda_count * wordb_count) * len_vocab, the
     * product exact before its one rounding to float64 */
    const double denom = (double)((unsigned __int128)ca * (unsigned __int128)cb);
    return ((double)cab - (double)p->o.min_count) / denom * (double)emb_vocab_num_words(p->vocab);
}

typedef struct {
    const emb_phrases *p;
    FILE *out;
    int64_t phrases;
    bool err;
} apply_ctx;

static emb_status apply_line(void *c, int64_t line, const char **tok, const size_t *len,
                             int64_t n) {
    (void)line;
    apply_ctx *x = c;
    const emb_phrases *p = x->p;
    bool first = true;
    for (int64_t i = 0; i < n; i++) {
        if (!first) fputc(' ', x->out);
        first = false;
        fwrite(tok[i], 1, len[i], x->out);
        if (i + 1 < n &&
            emb_phrases_score(p, tok[i], len[i], tok[i + 1], len[i + 1]) > p->o.threshold) {
            fwrite(p->delim, 1, p->dlen, x->out);
            fwrite(tok[i + 1], 1, len[i + 1], x->out);
            x->phrases++;
            i++;
        }
    }
    fputc('\n', x->out);
    return ferror(x->out)
               ? emb__error(EMB_ERR_IO, "cannot write the phrased text: %s", strerror(errno))
               : EMB_OK;
}

emb_status emb_phrases_apply(const emb_phrases *p, const char *path, FILE *out,
                             int64_t *n_phrases) {
    if (!p) return emb__null("phrases");
    if (!path) return emb__null("path");
    if (!out) return emb__null("out");
    apply_ctx c = {p, out, 0, false};
    emb_status st = each_line(path, apply_line, &c);
    if (st == EMB_OK && n_phrases) *n_phrases = c.phrases;
    return st;
}
