/* Reading a corpus for word2vec training in one streaming pass: tokens, the vocabulary and
 * the token ids (see include/emb/word2vec.h, emb_w2v_create_from_stream). */
#include "w2v_internal.h"

#include "text/casefold.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* The read buffer starts at EMB__CORPUS_BLOCK_MIN bytes and doubles, up to EMB__CORPUS_BLOCK,
 * each time a read fills it: a small corpus costs no large allocation, a large one is read
 * in 1 MiB blocks. Tokens do not depend on the block size (the reader keeps its state from
 * one byte to the next). */
#define EMB__CORPUS_BLOCK     (1 << 20)
#define EMB__CORPUS_BLOCK_MIN (1 << 16)

typedef struct {
    char *p;
    size_t cap;
} block;

static bool is_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool is_punct(unsigned char c) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
}

typedef struct {
    const emb_w2v_options *o;
    const char *name;
    emb_vocab *vocab;
    emb__w2v_ids *ids;
    int64_t line;
    int64_t tokens; /* tokens read (before min_count) */
    char *tok;
    size_t tok_len, tok_cap;
    bool too_long;      /* lenient: the current token is too long and is being skipped */
    int64_t skipped[2]; /* lenient: tokens skipped, not UTF-8 and too long */
    char *low;          /* a lowercased token that is not ASCII */
    size_t low_cap;
} reader;

/* Lowercases s[0, *n) as Python's str.lower(): ASCII in place; a token with other
 * characters into r->low (*s then points there). */
static emb_status lowercase(reader *r, char **s, size_t *n) {
    char *t = *s;
    size_t i = 0;
    for (; i < *n && (unsigned char)t[i] < 0x80; i++)
        if (t[i] >= 'A' && t[i] <= 'Z') t[i] = (char)(t[i] - 'A' + 'a');
    if (i == *n) return EMB_OK;
    size_t need = EMB__LOWER_MAX(*n);
    if (need > r->low_cap) {
        char *p = realloc(r->low, need);
        if (!p) return emb__error(EMB_ERR_NOMEM, "%s: out of memory lowercasing a token", r->name);
        r->low = p, r->low_cap = need;
    }
    *n = emb__utf8_lower(t, *n, r->low);
    *s = r->low;
    return EMB_OK;
}

/* Ends the current token: normalise it, add it to the vocabulary, record its id. */
static emb_status end_token(reader *r) {
    if (r->too_long) {
        r->too_long = false, r->tok_len = 0;
        r->skipped[1]++;
        return EMB_OK;
    }
    if (r->tok_len == 0) return EMB_OK;
    char *s = r->tok;
    size_t n = r->tok_len;
    r->tok_len = 0;
    if (!emb__utf8_valid(s, n)) {
        if (r->o->lenient) {
            r->skipped[0]++;
            return EMB_OK;
        }
        return emb__error(EMB_ERR_FORMAT,
                          "%s:%" PRId64 ": invalid UTF-8 in a token (the corpus must be UTF-8 "
                          "text; lenient mode skips such tokens)",
                          r->name, r->line);
    }
    if (r->o->strip_punct) {
        while (n > 0 && is_punct((unsigned char)s[0])) s++, n--;
        while (n > 0 && is_punct((unsigned char)s[n - 1])) n--;
        if (n == 0) return EMB_OK;
    }
    emb_status st;
    if (r->o->lowercase && (st = lowercase(r, &s, &n))) return st;
    int64_t id;
    st = emb_vocab_add(r->vocab, s, n, 1, &id, NULL);
    if (st) return st;
    if (id >= INT32_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "%s: more than %d distinct words", r->name,
                          INT32_MAX - 1);
    r->tokens++;
    return emb__w2v_ids_push(r->ids, (int32_t)id);
}

static emb_status push_char(reader *r, char c) {
    if (r->too_long) return EMB_OK;
    if (r->tok_len == r->tok_cap) {
        if (r->tok_cap >= EMB_VOCAB_MAX_WORD && r->o->lenient) {
            r->too_long = true; /* skipped to its end, in constant memory */
            return EMB_OK;
        }
        if (r->tok_cap >=
            EMB_VOCAB_MAX_WORD) /* at once: an endless token must not be read to its end */
            return emb__error(EMB_ERR_FORMAT, "%s:%" PRId64 ": a token is longer than %d bytes",
                              r->name, r->line, EMB_VOCAB_MAX_WORD);
        size_t cap = r->tok_cap ? r->tok_cap * 2 : 256;
        char *p = realloc(r->tok, cap);
        if (!p) return emb__error(EMB_ERR_NOMEM, "%s: out of memory reading a token", r->name);
        r->tok = p, r->tok_cap = cap;
    }
    r->tok[r->tok_len++] = c;
    return EMB_OK;
}

/* The tokens of the current file of src; a file ends a sentence (*line_has_tokens tells
 * whether the open sentence has tokens). */
static emb_status read_file(reader *r, emb__corpus_src *src, block *b, bool *line_has_tokens) {
    emb_status st = EMB_OK;
    for (bool first = true; st == EMB_OK; first = false) {
        size_t got;
        if ((st = emb__corpus_read(src, b->p, b->cap, &got)) || got == 0) break;
        const char *buf = b->p;
        size_t i0 = 0;
        /* a UTF-8 byte-order mark at the start is not part of the first word */
        if (first && got >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) i0 = 3;
        for (size_t i = i0; i < got && st == EMB_OK; i++) {
            unsigned char c = (unsigned char)buf[i];
            if (is_space(c)) {
                int64_t before = r->tokens;
                st = end_token(r);
                if (r->tokens > before) *line_has_tokens = true;
                if (c == '\n') {
                    if (st == EMB_OK && *line_has_tokens) st = emb__w2v_ids_push(r->ids, -1);
                    *line_has_tokens = false;
                    r->line++;
                }
            } else {
                st = push_char(r, (char)c);
            }
        }
        if (got == b->cap && b->cap < EMB__CORPUS_BLOCK) { /* a larger input: larger reads */
            char *p = realloc(b->p, b->cap * 2);
            if (p) b->p = p, b->cap *= 2; /* else the blocks stay small */
        }
    }
    if (st == EMB_OK) {
        int64_t before = r->tokens;
        st = end_token(r);
        if (r->tokens > before) *line_has_tokens = true;
    }
    return st;
}

/* One pass over src: vocabulary with counts (first-appearance order) into *vocab_out, and
 * provisional ids (-1 for a line end) into the store ids. */
static emb_status read_tokens(const emb_w2v_options *o, emb__corpus_src *src, emb_vocab **vocab_out,
                              emb__w2v_ids *ids, int64_t *tokens_out, int64_t skipped[2]) {
    reader r;
    memset(&r, 0, sizeof r);
    r.o = o, r.line = 1, r.ids = ids;
    emb_status st = emb_vocab_create(&r.vocab);
    if (st) return st;
    block buf = {malloc(EMB__CORPUS_BLOCK_MIN), EMB__CORPUS_BLOCK_MIN};
    if (!buf.p) {
        emb_vocab_free(r.vocab);
        return emb__error(EMB_ERR_NOMEM, "cannot allocate a read buffer");
    }
    bool line_has_tokens = false, have;
    while (st == EMB_OK && (st = emb__corpus_next_file(src, &have)) == EMB_OK && have) {
        /* a new file starts a new sentence */
        if (line_has_tokens) st = emb__w2v_ids_push(ids, -1);
        line_has_tokens = false;
        r.name = emb__corpus_name(src), r.line = 1;
        if (st == EMB_OK) st = read_file(&r, src, &buf, &line_has_tokens);
    }
    if (st == EMB_OK) st = emb__w2v_ids_flush(ids);
    free(buf.p);
    free(r.tok);
    free(r.low);
    if (st) {
        emb_vocab_free(r.vocab);
        return st;
    }
    *vocab_out = r.vocab;
    *tokens_out = r.tokens;
    skipped[0] = r.skipped[0], skipped[1] = r.skipped[1];
    return EMB_OK;
}

emb_status emb__w2v_read_corpus(const emb_w2v_options *o, emb__corpus_src *src, const char *name,
                                emb_vocab **vocab_out, emb__w2v_ids *ids, int64_t skipped[2]) {
    emb_status st = emb__w2v_ids_open_file(ids, name);
    if (st) return st;
    emb_vocab *v = NULL;
    int64_t tokens = 0;
    st = read_tokens(o, src, &v, ids, &tokens, skipped);
    if (st) {
        emb__w2v_ids_close(ids);
        return st;
    }
    int64_t nv = emb_vocab_num_words(v);
    if (tokens == 0) {
        emb_vocab_free(v), emb__w2v_ids_close(ids);
        return emb__error(EMB_ERR_FORMAT, "%s: the corpus is empty (no tokens)", name);
    }
    int64_t *perm = malloc((size_t)nv * sizeof(int64_t));
    int32_t *map = malloc((size_t)nv * sizeof(int32_t));
    if (!perm || !map) {
        free(perm), free(map), emb_vocab_free(v), emb__w2v_ids_close(ids);
        return emb__error(EMB_ERR_NOMEM, "%s: out of memory sorting the vocabulary", name);
    }
    st = emb_vocab_sort_by_count(v, 0, perm);
    if (st == EMB_OK) st = emb_vocab_prune(v, 0, o->min_count, o->max_vocab);
    int64_t kept = st == EMB_OK ? emb_vocab_num_words(v) : 0;
    if (st == EMB_OK && kept == 0)
        st = emb__error(EMB_ERR_FORMAT,
                        "%s: no word occurs at least %" PRId64 " times (min_count); %" PRId64
                        " distinct words in %" PRId64 " tokens",
                        name, o->min_count, nv, tokens);
    if (st == EMB_OK) {
        /* After the sort, the kept words are a prefix of the sorted order. */
        for (int64_t i = 0; i < nv; i++) map[i] = -2;
        for (int64_t i = 0; i < kept; i++) map[perm[i]] = (int32_t)i;
        st = emb__w2v_ids_map(ids, map);
    }
    free(perm), free(map);
    if (st) {
        emb_vocab_free(v), emb__w2v_ids_close(ids);
        return st;
    }
    *vocab_out = v;
    return EMB_OK;
}

void emb__corpus_label(const char *const *paths, size_t n, char *buf, size_t size) {
    const char *first = strcmp(paths[0], "-") == 0 ? "<stdin>" : paths[0];
    if (n == 1)
        snprintf(buf, size, "%s", first);
    else
        snprintf(buf, size, "%.200s and %zu more", first, n - 1);
}

emb_status emb__w2v_read_paths(const emb_w2v_options *o, const char *const *paths, size_t n,
                               emb_vocab **vocab, emb__w2v_ids *ids, int64_t skipped[2],
                               emb__corpus_files *files) {
    emb__corpus_src *src;
    emb_status st = emb__corpus_open_paths(&src, paths, n);
    if (st) return st;
    char name[256];
    emb__corpus_label(paths, n, name, sizeof name);
    st = emb__w2v_read_corpus(o, src, name, vocab, ids, skipped);
    if (st == EMB_OK && files) emb__corpus_take_files(src, files);
    emb__corpus_close(src);
    return st;
}
