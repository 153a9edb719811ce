/* word2vec text and binary, fastText .vec, GloVe text: readers and writers.
 *
 * Reading works on the mapped file in one pass. Row counts claimed by a header are checked
 * against the bytes the file holds before anything is allocated (a text row needs at least
 * 2*dim+1 bytes, a binary row 4*dim+2), so a lying header cannot cause a huge allocation. */
#include "io_internal.h"
#include "parallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct w2v_ctx {
    const char *path;
    const unsigned char *p, *end, *base;
    int64_t line; /* 1-based line of p (text) */
} w2v_ctx;

static inline bool is_sep(unsigned char c) {
    return c == ' ' || c == '\t';
}

static emb_status w2v_err(const w2v_ctx *c, const unsigned char *at, const char *fmt, ...)
    EMB__PRINTF(3, 4);
static emb_status w2v_err(const w2v_ctx *c, const unsigned char *at, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return emb__error(EMB_ERR_FORMAT, "%s: line %lld (byte offset %lld): %s", c->path,
                      (long long)c->line, (long long)(at - c->base), msg);
}

/* Parses "rows dim" and the end of that line. */
static emb_status parse_header(w2v_ctx *c, int64_t *rows, int64_t *dim) {
    const unsigned char *p = c->p;
    int64_t v[2];
    for (int k = 0; k < 2; k++) {
        while (p < c->end && is_sep(*p)) p++;
        if (p < c->end && *p == '-' && p + 1 < c->end && (unsigned)(p[1] - '0') < 10)
            return w2v_err(c, p, "the header's %s is negative", k == 0 ? "row count" : "dimension");
        if (p == c->end || (unsigned)(*p - '0') >= 10)
            return w2v_err(c, p, "expected a header \"<rows> <dim>\"");
        int64_t x = 0;
        while (p < c->end && (unsigned)(*p - '0') < 10) {
            if (x > (INT64_MAX - 9) / 10) return w2v_err(c, p, "header number is too large");
            x = x * 10 + (*p++ - '0');
        }
        v[k] = x;
    }
    while (p < c->end && (is_sep(*p) || *p == '\r')) p++;
    if (p < c->end && *p != '\n')
        return w2v_err(c, p, "expected a header \"<rows> <dim>\" alone on the first line");
    if (p < c->end) p++;
    if (v[1] < 1)
        return w2v_err(c, c->p, "dimension %lld in the header must be at least 1", (long long)v[1]);
    if (v[1] > (1 << 24))
        return w2v_err(c, c->p, "dimension %lld in the header is absurd (more than %d)",
                       (long long)v[1], 1 << 24);
    *rows = v[0];
    *dim = v[1];
    c->p = p;
    c->line = 2;
    return EMB_OK;
}

/* Allocates the table for `rows` rows after checking the file can hold them. */
static emb_status alloc_rows(w2v_ctx *c, int64_t rows, int64_t dim, int64_t min_row_bytes,
                             emb_tensor *w) {
    int64_t need;
    int64_t avail = (int64_t)(c->end - c->p);
    if (!emb__mul_i64(rows, min_row_bytes, &need) || need > avail + 1)
        return emb__error(EMB_ERR_FORMAT,
                          "%s: the header claims %lld rows of dimension %lld, which need at least "
                          "%lld bytes, but only %lld bytes follow the header",
                          c->path, (long long)rows, (long long)dim,
                          emb__mul_i64(rows, min_row_bytes, &need) ? (long long)need
                                                                   : (long long)INT64_MAX,
                          (long long)avail);
    return emb__alloc_table(w, rows, dim);
}

static emb_status add_word(w2v_ctx *c, emb_vocab *v, const unsigned char *w, size_t n, bool utf8,
                           bool *dup) {
    if (n == 0) return w2v_err(c, w, "empty word");
    if (n > EMB_VOCAB_MAX_WORD)
        return w2v_err(c, w, "word of %zu bytes is too long (limit %d)", n, EMB_VOCAB_MAX_WORD);
    if (utf8 && !emb__utf8_valid((const char *)w, n))
        return w2v_err(c, w,
                       "word is not valid UTF-8 (read with check_utf8 off to accept raw bytes)");
    bool added;
    emb_status st = emb_vocab_add(v, (const char *)w, n, 0, NULL, &added);
    if (st) return st;
    *dup = !added;
    return EMB_OK;
}

/* Parses `dim` numbers from the fields of [p, e) into row; fails when the count differs. */
static emb_status parse_numbers(w2v_ctx *c, const unsigned char *p, const unsigned char *e,
                                int64_t dim, float *row, int64_t *nonfinite) {
    for (int64_t k = 0; k < dim; k++) {
        while (p < e && is_sep(*p)) p++;
        if (p == e)
            return w2v_err(c, p, "expected %lld numbers after the word, found %lld", (long long)dim,
                           (long long)k);
        const unsigned char *t = p;
        while (p < e && !is_sep(*p)) p++;
        if (!emb__parse_float((const char *)t, (size_t)(p - t), &row[k])) {
            int n = (int)(p - t) > 40 ? 40 : (int)(p - t);
            return w2v_err(c, t, "\"%.*s\" is not a number (value %lld of the row)", n,
                           (const char *)t, (long long)k + 1);
        }
        if (!isfinite(row[k])) (*nonfinite)++;
    }
    while (p < e && is_sep(*p)) p++;
    if (p != e) return w2v_err(c, p, "more than %lld numbers after the word", (long long)dim);
    return EMB_OK;
}

/* The number of blank-separated fields of [p, e). */
static int64_t count_fields(const unsigned char *p, const unsigned char *e) {
    int64_t n = 0;
    while (p < e) {
        while (p < e && is_sep(*p)) p++;
        if (p == e) break;
        n++;
        while (p < e && !is_sep(*p)) p++;
    }
    return n;
}

/* One text line [ls, le) (no newline, trailing blanks removed) into row. GloVe words may
 * contain spaces (". . ."): the last dim fields are the numbers, and the fields before them
 * are the word, unless one of those is a number too (then the line has more numbers than
 * the table's dimension: "of 0.4 0.1 0.2" in a table of dimension 2 is an error, not the
 * word "of 0.4"). */
static emb_status parse_text_row(w2v_ctx *c, const unsigned char *ls, const unsigned char *le,
                                 int64_t dim, bool glove, float *row,
                                 const unsigned char **word_end, int64_t *nonfinite) {
    const unsigned char *p = ls;
    while (p < le && !is_sep(*p)) p++;
    *word_end = p;
    if (!glove) return parse_numbers(c, p, le, dim, row, nonfinite);
    int64_t fields = count_fields(ls, le);
    if (fields != dim + 1) {
        /* A word of several fields is fine as long as none of its later fields is a number. */
        bool extra_number = false;
        const unsigned char *q = p;
        for (int64_t k = 1; k < fields - dim && !extra_number; k++) {
            while (q < le && is_sep(*q)) q++;
            const unsigned char *t = q;
            while (q < le && !is_sep(*q)) q++;
            float x;
            extra_number = emb__parse_float((const char *)t, (size_t)(q - t), &x);
        }
        if (fields < dim + 1 || extra_number)
            return w2v_err(c, ls, "expected a word and %lld numbers, found %lld field%s",
                           (long long)dim, (long long)fields, fields == 1 ? "" : "s");
    }
    /* Count fields from the right to find where the numbers start. */
    const unsigned char *q = le;
    for (int64_t k = 0; k < dim; k++) {
        while (q > ls && !is_sep(q[-1])) q--;
        while (q > ls && is_sep(q[-1])) q--;
    }
    *word_end = q;
    return parse_numbers(c, q, le, dim, row, nonfinite);
}

static emb_status read_text(w2v_ctx *c, bool header, const emb_vectors_read_options *o,
                            emb_vectors *out) {
    int64_t rows = -1, dim = 0;
    emb_status st;
    if (header && (st = parse_header(c, &rows, &dim))) return st;
    if (!header) {
        /* GloVe: the dimension from the first non-blank line (fields - 1); an upper bound on
         * the rows from the number of lines. */
        const unsigned char *p = c->p;
        while (p < c->end && (*p == '\n' || *p == '\r' || is_sep(*p))) p++;
        if (p == c->end) return emb__error(EMB_ERR_FORMAT, "%s: no vectors in the file", c->path);
        const unsigned char *le = memchr(p, '\n', (size_t)(c->end - p));
        if (!le) le = c->end;
        int64_t fields = 0, numeric = 0; /* numeric: how many trailing fields are numbers */
        for (const unsigned char *q = p; q < le;) {
            while (q < le && (is_sep(*q) || *q == '\r')) q++;
            if (q == le) break;
            fields++;
            const unsigned char *t = q;
            while (q < le && !is_sep(*q) && *q != '\r') q++;
            float x;
            numeric = emb__parse_float((const char *)t, (size_t)(q - t), &x) ? numeric + 1 : 0;
        }
        if (fields < 2)
            return emb__error(EMB_ERR_FORMAT,
                              "%s: line 1: expected a word and numbers, found %lld field(s)",
                              c->path, (long long)fields);
        /* The word may contain spaces (". . ."): the numbers are the trailing numeric fields,
         * at most fields - 1 (a word that looks like a number is still the word). */
        dim = numeric >= 1 && numeric < fields ? numeric : fields - 1;
        int64_t lines = 1;
        for (const unsigned char *q = c->p; (q = memchr(q, '\n', (size_t)(c->end - q))); q++)
            lines++;
        /* Every row holds at least 2*dim+1 bytes: a long first line followed by many short
         * ones must not make the table's allocation larger than the file can fill. */
        int64_t by_size = (int64_t)(c->end - p) / (2 * dim + 1) + 1;
        rows = lines < by_size ? lines : by_size;
    }
    int64_t want = rows;
    if (o->limit > 0 && o->limit < want) want = o->limit;
    if (header) {
        if ((st = alloc_rows(c, want, dim, 2 * dim + 1, &out->weight))) return st;
    } else {
        if ((st = emb__alloc_table(&out->weight, want, dim))) return st;
    }
    if ((st = emb_vocab_create(&out->vocab)) || (st = emb_vocab_reserve(out->vocab, want)))
        return st;
    float *w = out->weight.data;
    int64_t r = 0, seen = 0;
    const unsigned char *p = c->p;
    while (seen < want) {
        if (p >= c->end) break;
        const unsigned char *nl = memchr(p, '\n', (size_t)(c->end - p));
        const unsigned char *le = nl ? nl : c->end, *next = nl ? nl + 1 : c->end;
        while (le > p && (le[-1] == '\r' || is_sep(le[-1]))) le--;
        const unsigned char *ls = p;
        while (ls < le && is_sep(*ls)) ls++;
        if (ls == le) { /* blank line */
            p = next;
            c->line++;
            continue;
        }
        const unsigned char *we;
        if ((st = parse_text_row(c, ls, le, dim, !header, w + r * dim, &we, &out->nonfinite)))
            return st;
        bool dup;
        if ((st = add_word(c, out->vocab, ls, (size_t)(we - ls), o->check_utf8, &dup))) return st;
        if (dup)
            out->duplicates++;
        else
            r++;
        seen++;
        p = next;
        c->line++;
    }
    if (header) {
        if (seen < want)
            return emb__error(
                EMB_ERR_FORMAT,
                "%s: truncated: the header says %lld rows but the file ends after %lld", c->path,
                (long long)rows, (long long)seen);
        if (want == rows) {
            while (p < c->end && (is_sep(*p) || *p == '\n' || *p == '\r')) {
                if (*p == '\n') c->line++;
                p++;
            }
            if (p < c->end)
                return w2v_err(c, p, "more rows than the %lld the header declares",
                               (long long)rows);
        }
        out->file_rows = rows;
    } else {
        out->file_rows = seen;
    }
    out->weight.shape[0] = r;
    return EMB_OK;
}

static emb_status read_binary(w2v_ctx *c, const emb_vectors_read_options *o, emb_vectors *out) {
    int64_t rows, dim;
    emb_status st = parse_header(c, &rows, &dim);
    if (st) return st;
    int64_t want = rows;
    if (o->limit > 0 && o->limit < want) want = o->limit;
    if ((st = alloc_rows(c, want, dim, 4 * dim + 2, &out->weight))) return st;
    if ((st = emb_vocab_create(&out->vocab)) || (st = emb_vocab_reserve(out->vocab, want)))
        return st;
    float *w = out->weight.data;
    size_t vec_bytes = (size_t)dim * 4;
    const unsigned char *p = c->p;
    int64_t r = 0;
    for (int64_t seen = 0; seen < want; seen++) {
        while (p < c->end && (*p == '\n' || *p == '\r')) p++;
        const unsigned char *ws = p;
        size_t scan = (size_t)(c->end - p);
        if (scan > EMB_VOCAB_MAX_WORD + 1) scan = EMB_VOCAB_MAX_WORD + 1;
        const unsigned char *sp = memchr(p, ' ', scan);
        if (!sp) {
            if (scan == (size_t)(c->end - p))
                return emb__error(EMB_ERR_FORMAT,
                                  "%s: truncated: row %lld of %lld (byte offset %lld) has no word "
                                  "followed by a space",
                                  c->path, (long long)seen + 1, (long long)rows,
                                  (long long)(p - c->base));
            return emb__error(EMB_ERR_FORMAT,
                              "%s: row %lld (byte offset %lld): word longer than %d bytes", c->path,
                              (long long)seen + 1, (long long)(p - c->base), EMB_VOCAB_MAX_WORD);
        }
        if (memchr(ws, '\n', (size_t)(sp - ws)))
            return emb__error(EMB_ERR_FORMAT,
                              "%s: row %lld (byte offset %lld): newline inside a word (a text file "
                              "read as binary?)",
                              c->path, (long long)seen + 1, (long long)(ws - c->base));
        p = sp + 1;
        if ((size_t)(c->end - p) < vec_bytes)
            return emb__error(EMB_ERR_FORMAT,
                              "%s: truncated: row %lld of %lld needs %zu bytes of vector at byte "
                              "offset %lld but the file ends at %zu",
                              c->path, (long long)seen + 1, (long long)rows, vec_bytes,
                              (long long)(p - c->base), (size_t)(c->end - c->base));
        c->line = seen + 2;
        bool dup;
        if ((st = add_word(c, out->vocab, ws, (size_t)(sp - ws), o->check_utf8, &dup))) {
            /* binary rows are not lines: restate the position */
            if (st == EMB_ERR_FORMAT) {
                char msg[700];
                snprintf(msg, sizeof msg, "%s", emb_errmsg());
                const char *tail = strstr(msg, "): ");
                return emb__error(st, "%s: row %lld (byte offset %lld): %s", c->path,
                                  (long long)seen + 1, (long long)(ws - c->base),
                                  tail ? tail + 3 : msg);
            }
            return st;
        }
        if (dup) {
            out->duplicates++;
        } else {
            float *row = w + r * dim;
            memcpy(row, p, vec_bytes);
            for (int64_t k = 0; k < dim; k++) out->nonfinite += !isfinite(row[k]);
            r++;
        }
        p += vec_bytes;
    }
    if (want == rows) {
        while (p < c->end && (*p == '\n' || *p == '\r' || *p == ' ')) p++;
        if (p < c->end)
            return emb__error(EMB_ERR_FORMAT,
                              "%s: %zu bytes of trailing data at byte offset %lld after the %lld "
                              "rows the header declares",
                              c->path, (size_t)(c->end - p), (long long)(p - c->base),
                              (long long)rows);
    }
    out->file_rows = rows;
    out->weight.shape[0] = r;
    return EMB_OK;
}

emb_status emb__read_w2v(const char *path, const emb__file *f, emb_format fmt,
                         const emb_vectors_read_options *o, emb_vectors *out) {
    out->file_dtype = EMB_FLOAT32;
    if (f->size == 0) return emb__error(EMB_ERR_FORMAT, "%s: empty file", path);
    w2v_ctx c = {path, f->data, f->data + f->size, f->data, 1};
    if (fmt == EMB_FORMAT_W2V_BINARY) return read_binary(&c, o, out);
    return read_text(&c, fmt == EMB_FORMAT_W2V_TEXT, o, out);
}

/* ---------------------------------------------------------------------------------------
 * Writing
 * ------------------------------------------------------------------------------------- */

static emb_status check_words(const char *path, const emb_vocab *v, int64_t rows, emb_format fmt) {
    if (!v)
        return emb__error(EMB_ERR_INVALID,
                          "%s: the %s format needs the words of the rows (vocab is NULL)", path,
                          emb_format_name(fmt));
    if (emb_vocab_num_words(v) != rows)
        return emb__error(EMB_ERR_INVALID,
                          "%s: the vocabulary has %lld words but the table has %lld rows", path,
                          (long long)emb_vocab_num_words(v), (long long)rows);
    for (int64_t i = 0; i < rows; i++) {
        size_t n;
        const char *w = emb_vocab_word(v, i, &n);
        for (size_t k = 0; k < n; k++) {
            unsigned char ch = (unsigned char)w[k];
            if (ch == '\n' || ch == '\r' || ch == '\t' || (ch == ' ' && fmt != EMB_FORMAT_GLOVE) ||
                (ch == ' ' && (k == 0 || k + 1 == n)))
                return emb__error(
                    EMB_ERR_INVALID,
                    "%s: word %lld (\"%.40s\") contains a %s, which the %s format cannot hold",
                    path, (long long)i, w,
                    ch == ' '    ? "space"
                    : ch == '\t' ? "tab"
                                 : "line break",
                    emb_format_name(fmt));
        }
    }
    return EMB_OK;
}

/* ---- the text formats' rows, formatted on the threads ---- */

/* The rows are formatted in chunks of about EMB__TEXT_VALUES values (whole rows), each
 * chunk into a block of its own, a batch of 2 x nth chunks at a time, the threads claiming
 * the batch's chunks as they come; share 0 first writes the blocks of the batch before in
 * chunk order, so the file is the same bytes at every thread count, and the writing
 * overlaps the formatting (share 0 runs on the calling thread, src/core/parallel.h, whose
 * error message a failed write sets). */
#define EMB__TEXT_VALUES 16384
/* the longest value's text with its space ("-1.2345678901234567e-38" at precision 17) */
#define EMB__TEXT_VALUE 26

typedef struct {
    const float *data;
    int64_t rows, dim, per; /* per: rows a chunk */
    const emb_vocab *v;
    const emb_vectors_write_options *o;
    emb__writer *w;
    int chunks;        /* a batch's */
    int64_t batch;     /* the batch being formatted */
    char **buf[2];     /* [chunks] blocks of the even and the odd batches */
    size_t *len[2];    /* their bytes; SIZE_MAX: a block that could not be allocated */
    emb__counter next; /* the batch's next chunk */
} text_rows;

/* The text of row i (its word, its values, the line end) at b; returns its length. */
static size_t text_row(const text_rows *c, int64_t i, char *b) {
    size_t n;
    const char *word = emb_vocab_word(c->v, i, &n);
    memcpy(b, word, n);
    char *p = b + n;
    const float *row = c->data + i * c->dim;
    for (int64_t k = 0; k < c->dim; k++) {
        *p++ = ' ';
        p += emb__format_float(p, row[k], c->o->precision);
    }
    if (c->o->trailing_space) *p++ = ' ';
    *p++ = '\n';
    return (size_t)(p - b);
}

/* Writes the blocks of batch b (its parity's set), in order, and empties them. */
static void text_put(text_rows *c, int64_t b) {
    for (int k = 0; k < c->chunks; k++) {
        size_t *len = &c->len[b & 1][k];
        if (*len == SIZE_MAX && !c->w->status)
            c->w->status = emb__error(EMB_ERR_NOMEM, "out of memory formatting the rows");
        else if (*len > 0)
            emb__writer_put(c->w, c->buf[b & 1][k], *len);
        *len = 0;
    }
}

static void text_share(void *p, int ith, int nth) {
    (void)nth;
    text_rows *c = p;
    const int set = (int)(c->batch & 1);
    if (ith == 0 && c->batch > 0) text_put(c, c->batch - 1);
    for (int64_t k; (k = emb__claim(&c->next)) < c->chunks;) {
        int64_t lo = (c->batch * c->chunks + k) * c->per, hi = lo + c->per;
        if (hi > c->rows) hi = c->rows;
        size_t need = 0, at = 0, n;
        for (int64_t i = lo; i < hi; i++)
            emb_vocab_word(c->v, i, &n), need += n + (size_t)c->dim * EMB__TEXT_VALUE + 2;
        char *b = need ? realloc(c->buf[set][k], need) : c->buf[set][k];
        if (need && !b) {
            c->len[set][k] = SIZE_MAX;
            continue;
        }
        c->buf[set][k] = b;
        for (int64_t i = lo; i < hi; i++) at += text_row(c, i, b + at);
        c->len[set][k] = at;
    }
}

/* Every row as text into w, on the threads (on this one alone, formatting straight into the
 * writer, for a small table, when one thread is allowed, or without memory for the blocks). */
static void write_text_rows(emb__writer *w, const float *data, int64_t rows, int64_t dim,
                            const emb_vocab *v, const emb_vectors_write_options *o) {
    text_rows c = {data, rows, dim, 0, v, o, w, 0, 0, {NULL, NULL}, {NULL, NULL}, {0}};
    c.per = dim < EMB__TEXT_VALUES ? EMB__TEXT_VALUES / dim : 1;
    const int64_t chunks = (rows + c.per - 1) / c.per;
    int nth = emb__threads_for(chunks, 4); /* a table of a few chunks is not worth threads */
    c.chunks = 2 * nth;
    for (int s = 0; s < 2 && nth > 1; s++) {
        c.buf[s] = calloc((size_t)c.chunks, sizeof(char *));
        c.len[s] = calloc((size_t)c.chunks, sizeof(size_t));
        if (!c.buf[s] || !c.len[s]) nth = 1;
    }
    const int64_t batches = (chunks + c.chunks - 1) / c.chunks;
    for (c.batch = 0; nth > 1 && c.batch < batches && !w->status; c.batch++) {
        c.next.next = 0;
        emb__parallel(nth, text_share, &c);
    }
    if (nth > 1 && c.batch > 0) text_put(&c, c.batch - 1); /* the last batch */
    for (int s = 0; s < 2; s++) {
        for (int k = 0; c.buf[s] && k < c.chunks; k++) free(c.buf[s][k]);
        free(c.buf[s]), free(c.len[s]);
    }
    if (nth > 1) return;
    for (int64_t i = 0; i < rows && !w->status; i++) { /* a value at a time: any dimension */
        size_t n;
        const char *word = emb_vocab_word(v, i, &n);
        emb__writer_put(w, word, n);
        const float *row = data + i * dim;
        for (int64_t k = 0; k < dim; k++) {
            unsigned char *b = emb__writer_reserve(w, EMB__TEXT_VALUE + 1);
            if (!b) break;
            b[0] = ' ';
            emb__writer_advance(w,
                                (size_t)emb__format_float((char *)b + 1, row[k], o->precision) + 1);
        }
        emb__writer_put(w, o->trailing_space ? " \n" : "\n", o->trailing_space ? 2 : 1);
    }
}

emb_status emb__write_w2v(const char *path, const emb_tensor *wt, const emb_vocab *v,
                          emb_format fmt, const emb_vectors_write_options *o) {
    int64_t rows = wt->shape[0], dim = wt->shape[1];
    if (dim < 1) /* what emb writes it reads: the readers refuse dimension 0 */
        return emb__error(EMB_ERR_SHAPE,
                          "%s: a table of dimension 0 cannot be written as %s (its rows need at "
                          "least one value)",
                          path, emb_format_name(fmt));
    emb_status st = check_words(path, v, rows, fmt);
    if (st) return st;
    if (o->precision < 0 || o->precision > 17)
        return emb__error(EMB_ERR_INVALID, "%s: precision %d is not in 0..17", path, o->precision);
    emb__writer w;
    if ((st = emb__writer_open(&w, path))) return st;
    char hdr[64];
    if (fmt != EMB_FORMAT_GLOVE) {
        int n = snprintf(hdr, sizeof hdr, "%lld %lld\n", (long long)rows, (long long)dim);
        emb__writer_put(&w, hdr, (size_t)n);
    }
    const float *data = wt->data;
    if (fmt == EMB_FORMAT_W2V_BINARY)
        for (int64_t i = 0; i < rows && !w.status; i++) {
            size_t n;
            const char *word = emb_vocab_word(v, i, &n);
            emb__writer_put(&w, word, n);
            emb__writer_put(&w, " ", 1);
            emb__writer_put(&w, data + i * dim, (size_t)dim * 4);
            if (o->binary_newline) emb__writer_put(&w, "\n", 1);
        }
    else
        write_text_rows(&w, data, rows, dim, v, o);
    if (w.status) {
        st = w.status;
        emb__writer_abort(&w);
        return st;
    }
    return emb__writer_commit(&w);
}
