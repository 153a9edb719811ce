/* Bigram phrases as gensim's Phrases finds them (include/emb/phrases.h; the functions that
 * read corpus files are in src/w2v/phrased.c, over the corpus reader), and the phrased text
 * as a stream that training reads (src/text/phrases_stream.h). */
#define _GNU_SOURCE /* fopencookie */
#include <emb/phrases.h>
#include <emb/vocab.h>

#include "internal.h"
#include "phrases_stream.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct emb_phrases {
    emb_vocab *vocab; /* tokens and "a<delim>b" pairs with their counts */
    emb_phrases_options o;
    int64_t words; /* tokens counted (gensim's corpus_word_count) */
    char delim[17];
    size_t dlen;
    char *key; /* scratch for a pair's key */
    size_t key_cap;
};

emb_phrases_options emb_phrases_options_default(void) {
    emb_phrases_options o = {5, 10.0, "_", EMB_PHRASES_DEFAULT};
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

/* The tokens of one line [p, le): their starts and lengths, in arrays that grow. */
typedef struct {
    const char **tok;
    size_t *len;
    int64_t n, cap;
} tokens;

static emb_status split_line(tokens *t, const char *p, const char *le, const char *name,
                             int64_t line) {
    t->n = 0;
    for (const char *q = p; q < le;) {
        while (q < le && is_blank((unsigned char)*q)) q++;
        if (q == le) break;
        const char *a = q;
        while (q < le && !is_blank((unsigned char)*q)) q++;
        if (t->n == t->cap) {
            int64_t c = t->cap ? 2 * t->cap : 256;
            const char **nt = realloc(t->tok, (size_t)c * sizeof *t->tok);
            if (nt) t->tok = nt;
            size_t *nlen = nt ? realloc(t->len, (size_t)c * sizeof *t->len) : NULL;
            if (!nt || !nlen)
                return emb__error(EMB_ERR_NOMEM, "%s:%" PRId64 ": out of memory", name, line);
            t->len = nlen, t->cap = c;
        }
        t->tok[t->n] = a, t->len[t->n] = (size_t)(q - a), t->n++;
    }
    return EMB_OK;
}

/* Calls fn for every line of a stream read to its end. */
static emb_status each_line_of(FILE *f, const char *name, line_fn fn, void *ctx) {
    tokens t = {NULL, NULL, 0, 0};
    char *buf = NULL;
    size_t cap = 0;
    int64_t line = 0;
    emb_status st = EMB_OK;
    ssize_t got;
    errno = 0;
    while (st == EMB_OK && (got = getline(&buf, &cap, f)) >= 0) {
        line++;
        const char *le = buf + got - (got > 0 && buf[got - 1] == '\n');
        st = split_line(&t, buf, le, name, line);
        if (st == EMB_OK) st = fn(ctx, line, t.tok, t.len, t.n);
    }
    if (st == EMB_OK && ferror(f))
        st = emb__error(errno == ENOMEM ? EMB_ERR_NOMEM : EMB_ERR_IO, "cannot read %s: %s", name,
                        strerror(errno ? errno : EIO));
    free(t.tok), free(t.len), free(buf);
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
    p->words += n;
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

emb_status emb__phrases_check(const emb_phrases_options *opts) {
    if (opts->min_count < 1)
        return emb__error(EMB_ERR_INVALID, "min_count must be at least 1, got %" PRId64,
                          opts->min_count);
    if (!(opts->threshold == opts->threshold))
        return emb__error(EMB_ERR_INVALID, "threshold must be a number");
    if (opts->scoring != EMB_PHRASES_DEFAULT && opts->scoring != EMB_PHRASES_NPMI)
        return emb__error(EMB_ERR_INVALID,
                          "scoring must be EMB_PHRASES_DEFAULT or EMB_PHRASES_NPMI, got %d",
                          (int)opts->scoring);
    if (opts->scoring == EMB_PHRASES_NPMI && !(opts->threshold >= -1 && opts->threshold <= 1))
        return emb__error(EMB_ERR_INVALID,
                          "threshold must be in [-1, 1] with npmi scoring (a normalised pointwise "
                          "mutual information), got %g",
                          opts->threshold);
    const char *d = opts->delimiter ? opts->delimiter : "_";
    size_t dl = strlen(d);
    if (dl < 1 || dl > 16)
        return emb__error(EMB_ERR_INVALID, "the delimiter must have 1 to 16 bytes, got %zu", dl);
    for (size_t k = 0; k < dl; k++)
        if (is_blank((unsigned char)d[k]) || d[k] == '\n')
            return emb__error(EMB_ERR_INVALID, "the delimiter must not hold whitespace");
    return EMB_OK;
}

/* Checks the options and makes an empty model; the caller counts into it. */
static emb_status learn_begin(const emb_phrases_options *opts, emb_phrases **out) {
    emb_status st = emb__phrases_check(opts);
    if (st) return st;
    const char *d = opts->delimiter ? opts->delimiter : "_";
    const size_t dl = strlen(d);
    emb_phrases *p = calloc(1, sizeof *p);
    if (!p) return emb__error(EMB_ERR_NOMEM, "out of memory");
    p->o = *opts;
    memcpy(p->delim, d, dl + 1);
    p->dlen = dl;
    p->o.delimiter = p->delim;
    if ((st = emb_vocab_create(&p->vocab))) {
        emb_phrases_free(p);
        return st;
    }
    *out = p;
    return EMB_OK;
}

emb_status emb__phrases_learn_stream(FILE *f, const char *name, const emb_phrases_options *opts,
                                     emb_phrases **out) {
    emb_phrases *p = NULL;
    emb_status st = learn_begin(opts, &p);
    if (st) return st;
    learn_ctx c = {p, name};
    if ((st = each_line_of(f, name, learn_line, &c))) {
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
    if (p->o.scoring == EMB_PHRASES_NPMI) {
        /* gensim's npmi_scorer: -inf below min_count, else log(pab / (pa * pb)) / -log(pab),
         * each probability a count over the tokens counted, in float64 */
        if (cab < p->o.min_count) return -INFINITY;
        const double n = (double)p->words, pa = (double)ca / n, pb = (double)cb / n,
                     pab = (double)cab / n, r = pab / (pa * pb);
        if (!(r > 0) || !(pab > 0)) return -INFINITY; /* gensim: a log of 0 is never a phrase */
        return log(r) / -log(pab);
    }
    /* gensim: (bigram_count - min_count) / float(worda_count * wordb_count) * len_vocab, the
     * product exact before its one rounding to float64 */
    const double denom = (double)((unsigned __int128)ca * (unsigned __int128)cb);
    return ((double)cab - (double)p->o.min_count) / denom * (double)emb_vocab_num_words(p->vocab);
}

/* A line's phrased text, built in memory. */
typedef struct {
    char *b;
    size_t n, cap;
    bool nomem;
} text;

static void text_put(text *t, const char *s, size_t n) {
    if (t->nomem) return;
    if (t->n + n > t->cap) {
        size_t c = t->cap ? t->cap : 4096;
        while (c < t->n + n) c *= 2;
        char *b = realloc(t->b, c);
        if (!b) {
            t->nomem = true;
            return;
        }
        t->b = b, t->cap = c;
    }
    memcpy(t->b + t->n, s, n);
    t->n += n;
}

/* Appends the line's tokens, each detected pair joined, separated by one space and ended by
 * a newline (gensim's phrases[sentence]); returns the pairs joined. */
static int64_t phrase_line(const emb_phrases *p, const char **tok, const size_t *len, int64_t n,
                           text *t) {
    int64_t joined = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i > 0) text_put(t, " ", 1);
        text_put(t, tok[i], len[i]);
        if (i + 1 < n &&
            emb_phrases_score(p, tok[i], len[i], tok[i + 1], len[i + 1]) > p->o.threshold) {
            text_put(t, p->delim, p->dlen);
            text_put(t, tok[i + 1], len[i + 1]);
            joined++;
            i++;
        }
    }
    text_put(t, "\n", 1);
    return joined;
}

typedef struct {
    const emb_phrases *p;
    FILE *out;
    int64_t phrases;
    text t;
} apply_ctx;

static emb_status apply_line(void *c, int64_t line, const char **tok, const size_t *len,
                             int64_t n) {
    (void)line;
    apply_ctx *x = c;
    x->t.n = 0;
    x->phrases += phrase_line(x->p, tok, len, n, &x->t);
    if (x->t.nomem) return emb__error(EMB_ERR_NOMEM, "out of memory");
    fwrite(x->t.b, 1, x->t.n, x->out);
    return ferror(x->out)
               ? emb__error(EMB_ERR_IO, "cannot write the phrased text: %s", strerror(errno))
               : EMB_OK;
}

emb_status emb__phrases_apply_stream(const emb_phrases *p, FILE *in, const char *name, FILE *out,
                                     int64_t *n_phrases) {
    apply_ctx c = {p, out, 0, {NULL, 0, 0, false}};
    emb_status st = each_line_of(in, name, apply_line, &c);
    free(c.t.b);
    if (st == EMB_OK && n_phrases) *n_phrases = c.phrases;
    return st;
}

/* ---- the phrased text as a stream (fopencookie) ---- */

typedef struct {
    FILE *src;
    const emb_phrases *p;
    tokens tk;
    char *line;
    size_t line_cap;
    text t;    /* the current line's phrased text */
    size_t at; /* bytes of it already read */
    int err;   /* errno of a failure, reported as a read error */
} reader;

static ssize_t reader_read(void *cookie, char *buf, size_t size) {
    reader *r = cookie;
    while (r->at == r->t.n) {
        if (r->err) {
            errno = r->err;
            return -1;
        }
        ssize_t got = getline(&r->line, &r->line_cap, r->src);
        if (got < 0) {
            if (!ferror(r->src)) return 0;
            errno = r->err = errno ? errno : EIO;
            return -1;
        }
        const char *le = r->line + got - (got > 0 && r->line[got - 1] == '\n');
        r->t.n = r->at = 0;
        if (split_line(&r->tk, r->line, le, "", 0) != EMB_OK) {
            errno = r->err = ENOMEM;
            return -1;
        }
        (void)phrase_line(r->p, r->tk.tok, r->tk.len, r->tk.n, &r->t);
        if (r->t.nomem) {
            errno = r->err = ENOMEM;
            return -1;
        }
    }
    size_t k = r->t.n - r->at < size ? r->t.n - r->at : size;
    memcpy(buf, r->t.b + r->at, k);
    r->at += k;
    return (ssize_t)k;
}

static int reader_close(void *cookie) {
    reader *r = cookie;
    free(r->tk.tok), free(r->tk.len), free(r->line), free(r->t.b);
    free(r);
    return 0;
}

FILE *emb__phrases_reader(FILE *src, const emb_phrases *p) {
    reader *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->src = src, r->p = p;
    cookie_io_functions_t io = {reader_read, NULL, NULL, reader_close};
    FILE *f = fopencookie(r, "r", io);
    if (!f) free(r);
    return f;
}
