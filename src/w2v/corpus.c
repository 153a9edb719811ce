/* Reading a corpus for word2vec training in one streaming pass: tokens, the vocabulary and
 * the token ids (see include/emb/word2vec.h, emb_w2v_create_from_stream). */
#include "w2v_internal.h"

#include "parallel.h"
#include "text/casefold.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* The bytes buf[0, n) through the reader: a token ends at whitespace, a line end ends the
 * sentence (*line_has_tokens: the open sentence has tokens). */
static emb_status scan(reader *r, const char *buf, size_t n, bool *line_has_tokens) {
    emb_status st = EMB_OK;
    for (size_t i = 0; i < n && st == EMB_OK; i++) {
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
    return st;
}

/* The tokens of the current file of src; a file ends a sentence (*line_has_tokens tells
 * whether the open sentence has tokens). */
static emb_status read_file(reader *r, emb__corpus_src *src, block *b, bool *line_has_tokens) {
    emb_status st = EMB_OK;
    for (bool first = true; st == EMB_OK; first = false) {
        size_t got;
        if ((st = emb__corpus_read(src, b->p, b->cap, &got)) || got == 0) break;
        size_t i0 = 0;
        /* a UTF-8 byte-order mark at the start is not part of the first word */
        if (first && got >= 3 && memcmp(b->p, "\xEF\xBB\xBF", 3) == 0) i0 = 3;
        st = scan(r, b->p + i0, got - i0, line_has_tokens);
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

/* ---- a plain file read by several threads ----
 *
 * The file's bytes are cut into ranges at whitespace bytes (which never occur inside a UTF-8
 * sequence nor a token), so every token lies whole in one range. Each thread reads its range
 * with its own reader: its own vocabulary (ids in order of first appearance in the range)
 * and its own store of those ids. Then, in range order, each range's words are added to the
 * whole vocabulary with their counts (a word's first appearance in the file is in the first
 * range that has it, at its place there: the vocabulary's order is the one reading alone
 * gives) and its ids are appended, translated. A range marks a line end at its start as a
 * sentence end even when the line's tokens were in the range before: the renumbering
 * (emb__w2v_ids_map) drops a sentence end that follows another or starts the ids, so the
 * final ids are those of reading alone. Anything that goes wrong in a range (a token that is
 * not UTF-8, too long, out of memory, ...) drops the ranges' work, and the file is read
 * again by one thread from its start, which gives that error (or count) exactly as it is
 * without threads. */

size_t emb__w2v_range_min = (size_t)1 << 20;
void (*emb__w2v_ranges_read)(const char *name);

typedef struct {
    reader r;
    emb__w2v_ids ids;
    uint64_t lo, hi; /* the range's bytes in the file */
    emb_status st;
} range_part;

typedef struct {
    const reader *parent;
    int fd;
    range_part *parts;
} ranges_ctx;

/* Reads bytes [at, at + n) of fd; false on an error or a short file. */
static bool pread_all(int fd, char *p, size_t n, uint64_t at) {
    while (n > 0) {
        ssize_t k = pread(fd, p, n, (off_t)at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k, n -= (size_t)k, at += (uint64_t)k;
    }
    return true;
}

/* The first whitespace byte at or after `from` (size when there is none before the end):
 * true, or false when none is within a longest token's length (or on a read error). */
static bool next_space(int fd, uint64_t size, uint64_t from, char *buf, size_t cap, uint64_t *at) {
    uint64_t limit = from + (uint64_t)EMB_VOCAB_MAX_WORD + 1;
    while (from < size && from < limit) {
        size_t k = size - from < cap ? (size_t)(size - from) : cap;
        if (!pread_all(fd, buf, k, from)) return false;
        for (size_t i = 0; i < k; i++)
            if (is_space((unsigned char)buf[i])) {
                *at = from + i;
                return true;
            }
        from += k;
    }
    *at = size;
    return from >= size;
}

static void read_range(void *p, int ith, int nth) {
    (void)nth;
    const ranges_ctx *c = p;
    range_part *q = &c->parts[ith];
    reader *r = &q->r;
    r->o = c->parent->o, r->name = c->parent->name, r->line = 1, r->ids = &q->ids;
    emb_status st = emb_vocab_create(&r->vocab);
    if (st == EMB_OK) st = emb__w2v_ids_open_file(&q->ids, r->name);
    /* a block, or the whole range when it is shorter (a small file's ranges need no more) */
    const size_t cap =
        q->hi - q->lo < EMB__CORPUS_BLOCK ? (size_t)(q->hi - q->lo) + 1 : EMB__CORPUS_BLOCK;
    char *buf = st == EMB_OK ? malloc(cap) : NULL;
    if (st == EMB_OK && !buf) st = EMB_ERR_NOMEM;
    bool line_has_tokens = true; /* see above: an extra sentence end is dropped later */
    for (uint64_t at = q->lo; st == EMB_OK && at < q->hi;) {
        size_t k = q->hi - at < cap ? (size_t)(q->hi - at) : cap;
        if (!pread_all(c->fd, buf, k, at)) st = EMB_ERR_IO;
        if (st == EMB_OK) st = scan(r, buf, k, &line_has_tokens);
        at += k;
    }
    if (st == EMB_OK) st = end_token(r);
    if (st == EMB_OK) st = emb__w2v_ids_flush(&q->ids);
    free(buf);
    q->st = st;
}

/* Range part's words into r's vocabulary, and its ids, translated, into r's store. */
static emb_status append_range(reader *r, range_part *q) {
    int64_t nw = emb_vocab_num_words(q->r.vocab);
    int32_t *map = malloc((size_t)(nw > 0 ? nw : 1) * sizeof(int32_t));
    if (!map) return emb__error(EMB_ERR_NOMEM, "%s: out of memory merging the vocabulary", r->name);
    emb_status st = EMB_OK;
    for (int64_t i = 0; i < nw && st == EMB_OK; i++) {
        size_t len;
        const char *wd = emb_vocab_word(q->r.vocab, i, &len);
        int64_t id;
        st = emb_vocab_add(r->vocab, wd, len, emb_vocab_count(q->r.vocab, i), &id, NULL);
        if (st == EMB_OK && id >= INT32_MAX)
            st = emb__error(EMB_ERR_OVERFLOW, "%s: more than %d distinct words", r->name,
                            INT32_MAX - 1);
        map[i] = (int32_t)id;
    }
    emb__w2v_cursor cur;
    if (st == EMB_OK) st = emb__w2v_cursor_init(&cur, &q->ids);
    if (st == EMB_OK) {
        for (int64_t i = 0; i < q->ids.n && st == EMB_OK; i++) {
            int32_t id = emb__w2v_id_at(&cur, i);
            if (id == INT32_MIN)
                st = emb__error(EMB_ERR_IO, "cannot read back the corpus's token ids: %s",
                                strerror(errno));
            else
                st = emb__w2v_ids_push(r->ids, id < 0 ? -1 : map[id]);
        }
        emb__w2v_cursor_free(&cur);
    }
    free(map);
    return st;
}

/* The current file of src by ranges on several threads when it is a plain file large enough
 * (*done true), else nothing (*done false: the caller reads it alone). */
static emb_status read_file_ranges(reader *r, emb__corpus_src *src, block *b, bool *line_has_tokens,
                                   bool *done) {
    *done = false;
    int nt = r->o->threads > 0 ? r->o->threads : emb_get_num_threads(), fd;
    uint64_t size;
    if (nt < 2 || !emb__corpus_plain_file(src, &fd, &size)) return EMB_OK;
    uint64_t min = emb__w2v_range_min > 0 ? emb__w2v_range_min : 1;
    int nr = size / min < (uint64_t)nt ? (int)(size / min) : nt;
    if (nr < 2) return EMB_OK;
    range_part *parts = calloc((size_t)nr, sizeof *parts);
    if (!parts) return EMB_OK; /* read alone */
    for (int t = 0; t < nr; t++) parts[t].ids.fd = -1;
    char bom[3];
    uint64_t lo = size >= 3 && pread_all(fd, bom, 3, 0) && memcmp(bom, "\xEF\xBB\xBF", 3) == 0;
    bool ok = true;
    lo *= 3;
    for (int t = 0; t < nr && ok; t++) {
        uint64_t hi = size;
        if (t + 1 < nr) {
            uint64_t even = size / (uint64_t)nr * (uint64_t)(t + 1);
            ok = next_space(fd, size, even > lo ? even : lo, b->p, b->cap, &hi);
        }
        parts[t].lo = lo, parts[t].hi = hi;
        lo = hi;
    }
    if (ok) {
        ranges_ctx c = {r, fd, parts};
        emb__parallel(nr, read_range, &c);
        for (int t = 0; t < nr; t++) ok = ok && parts[t].st == EMB_OK;
    }
    emb_status st = EMB_OK;
    if (ok) {
        for (int t = 0; t < nr && st == EMB_OK; t++) {
            st = append_range(r, &parts[t]);
            emb__w2v_ids_close(&parts[t].ids); /* its disk back at once */
            r->tokens += parts[t].r.tokens;
            r->skipped[0] += parts[t].r.skipped[0], r->skipped[1] += parts[t].r.skipped[1];
        }
        /* the file's text into its record (the corpus's fingerprint), read as one reads it;
         * a file that grew or shrank since the ranges were cut is refused, so the fingerprint
         * covers exactly the bytes trained on */
        if (emb__w2v_ranges_read) emb__w2v_ranges_read(r->name);
        size_t got = 1;
        uint64_t seen = 0;
        while (st == EMB_OK && got > 0) {
            st = emb__corpus_read(src, b->p, b->cap, &got);
            seen += got;
        }
        if (st == EMB_OK && seen != size)
            st = emb__error(EMB_ERR_IO,
                            "%s changed while it was read (%" PRIu64 " bytes, then %" PRIu64
                            "): give a file that nothing writes to during training",
                            r->name, size, seen);
        *line_has_tokens = true, *done = true;
    }
    for (int t = 0; t < nr; t++) {
        emb_vocab_free(parts[t].r.vocab);
        free(parts[t].r.tok), free(parts[t].r.low);
        emb__w2v_ids_close(&parts[t].ids);
    }
    free(parts);
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
        bool done = false;
        if (st == EMB_OK) st = read_file_ranges(&r, src, &buf, &line_has_tokens, &done);
        if (st == EMB_OK && !done) st = read_file(&r, src, &buf, &line_has_tokens);
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
