/* fastText model files (.bin): the reader, word vectors from subwords (include/emb/fasttext.h;
 * layout in docs/file-formats.md). */
#include "io_internal.h"
#include "ngrams.h"

#include <emb/embedding.h>
#include <emb/fasttext.h>

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FT_MAGIC   EMB__FASTTEXT_MAGIC
#define FT_VERSION 12

struct emb_fasttext {
    emb_fasttext_args a;
    int32_t version;
    emb_vocab *vocab; /* the nwords words */
    int64_t nwords, nlabels, ntokens;
    int64_t in_rows; /* nwords + bucket */
    int64_t out_rows;
    emb__file file; /* the file, read into memory (or the caller's, not owned) */
    bool owns_file;
    const unsigned char *in, *out; /* the matrices' float32 data inside the file (unaligned) */
    void *tables; /* a model made from tables (emb__fasttext_from_tables): in and out, owned */
    emb_embedding *own_in, *own_out; /* or adopted (emb__fasttext_adopt_tables), owned */
    bool qout; /* the file's output quantization flag (1 with a dense input: dense, kept) */
};

/* ---- n-grams (ngrams.h) ---- */

int64_t emb__subword_ngrams(const char *word, size_t len, int minn, int maxn, uint32_t bucket,
                            int64_t nwords, int64_t *rows, int64_t cap) {
    if (maxn < 1 || minn > maxn || bucket == 0) return 0;
    /* The bracketed word "<word>" without building it: byte k of it. */
    const size_t L = len + 2;
#define AT(k)                                                                                      \
    ((k) == 0 ? (unsigned char)'<' : (k) == L - 1 ? (unsigned char)'>' : (unsigned char)word[(k)-1])
    int64_t count = 0;
    for (size_t i = 0; i < L; i++) {
        if ((AT(i) & 0xC0) == 0x80) continue; /* not the first byte of a character */
        uint32_t h = EMB__FNV1A_INIT;
        size_t j = i;
        for (int n = 1; j < L && n <= maxn; n++) {
            h = emb__fnv1a_byte(h, AT(j));
            j++;
            while (j < L && (AT(j) & 0xC0) == 0x80) h = emb__fnv1a_byte(h, AT(j)), j++;
            if (n >= minn && !(n == 1 && (i == 0 || j == L))) {
                if (count < cap) rows[count] = nwords + (int64_t)(h % bucket);
                count++;
            }
        }
    }
#undef AT
    return count;
}

/* ---- a cursor over the file's bytes ---- */

typedef struct {
    const unsigned char *d;
    size_t n, p;
    const char *path;
} cursor;

static emb_status bad(const cursor *c, size_t at, const char *what) {
    return emb__error(EMB_ERR_FORMAT, "%s: offset %zu: %s", c->path, at, what);
}

static emb_status need(const cursor *c, size_t k, const char *what) {
    if (c->n - c->p >= k) return EMB_OK;
    return emb__error(EMB_ERR_FORMAT,
                      "%s: offset %zu: the file ends inside %s (%zu bytes left, %zu needed)",
                      c->path, c->p, what, c->n - c->p, k);
}

static emb_status get(cursor *c, void *dst, size_t k, const char *what) {
    emb_status rc = need(c, k, what);
    if (rc) return rc;
    memcpy(dst, c->d + c->p, k);
    c->p += k;
    return EMB_OK;
}

/* ---- reading ---- */

static emb_status read_args(cursor *c, emb_fasttext *ft) {
    int32_t v[12];
    size_t at = c->p;
    emb_status rc = get(c, v, sizeof v, "the arguments block");
    if (!rc) rc = get(c, &ft->a.t, sizeof(double), "the arguments block");
    if (rc) return rc;
    emb_fasttext_args *a = &ft->a;
    a->dim = v[0], a->ws = v[1], a->epoch = v[2], a->min_count = v[3], a->neg = v[4];
    a->word_ngrams = v[5], a->loss = v[6], a->model = v[7], a->bucket = v[8], a->minn = v[9];
    a->maxn = v[10], a->lr_update_rate = v[11];
    char msg[160];
    if (a->dim < 1 || a->dim > (1 << 20))
        snprintf(msg, sizeof msg, "dim %" PRId32 " is not in [1, 1048576]", a->dim);
    else if (a->loss < 1 || a->loss > 4)
        snprintf(msg, sizeof msg, "loss %" PRId32 " is not one of fastText's (1..4)", a->loss);
    else if (a->model < 1 || a->model > 3)
        snprintf(msg, sizeof msg,
                 "model %" PRId32 " is not one of fastText's (1 cbow, 2 skipgram, 3 supervised)",
                 a->model);
    else if (a->bucket < 0 || a->minn < 0 || a->maxn < 0)
        snprintf(msg, sizeof msg,
                 "bucket %" PRId32 ", minn %" PRId32 ", maxn %" PRId32 ": negative", a->bucket,
                 a->minn, a->maxn);
    else if (a->maxn > 0 && a->minn <= a->maxn && a->bucket == 0)
        snprintf(msg, sizeof msg, "n-grams of %" PRId32 "..%" PRId32 " characters with 0 buckets",
                 a->minn, a->maxn);
    else
        return EMB_OK;
    return bad(c, at, msg);
}

static emb_status read_dictionary(cursor *c, emb_fasttext *ft, bool *pruned) {
    int32_t size, nwords, nlabels;
    int64_t ntokens, pruneidx_size;
    size_t at = c->p;
    emb_status rc = get(c, &size, 4, "the dictionary header");
    if (!rc) rc = get(c, &nwords, 4, "the dictionary header");
    if (!rc) rc = get(c, &nlabels, 4, "the dictionary header");
    if (!rc) rc = get(c, &ntokens, 8, "the dictionary header");
    if (!rc) rc = get(c, &pruneidx_size, 8, "the dictionary header");
    if (rc) return rc;
    char msg[200];
    /* each entry takes at least 10 bytes: one byte of word, its NUL, count, type */
    if (size < 0 || nwords < 0 || nlabels < 0 || (int64_t)nwords + nlabels != size) {
        snprintf(msg, sizeof msg,
                 "dictionary of %" PRId32 " entries with %" PRId32 " words and %" PRId32 " labels",
                 size, nwords, nlabels);
        return bad(c, at, msg);
    }
    if ((uint64_t)size > (c->n - c->p) / 10) {
        snprintf(msg, sizeof msg,
                 "the dictionary claims %" PRId32 " entries; the %zu bytes left hold at most %zu",
                 size, c->n - c->p, (c->n - c->p) / 10);
        return bad(c, at, msg);
    }
    if (ntokens < 0) return bad(c, at + 12, "negative token count");
    ft->nwords = nwords, ft->nlabels = nlabels, ft->ntokens = ntokens;
    if ((rc = emb_vocab_create(&ft->vocab)) || (rc = emb_vocab_reserve(ft->vocab, nwords)))
        return rc;
    for (int32_t i = 0; i < size; i++) {
        size_t w0 = c->p;
        const unsigned char *z = memchr(c->d + c->p, 0, c->n - c->p);
        if (!z) return bad(c, w0, "a word without its terminating NUL byte");
        size_t len = (size_t)(z - (c->d + c->p));
        if (len == 0) return bad(c, w0, "an empty word");
        if (len > EMB_VOCAB_MAX_WORD) return bad(c, w0, "a word longer than 1 MiB");
        c->p += len + 1;
        int64_t count;
        int8_t type;
        if ((rc = get(c, &count, 8, "a dictionary entry")) ||
            (rc = get(c, &type, 1, "a dictionary entry")))
            return rc;
        if (count < 0) return bad(c, c->p - 9, "a negative word count");
        if (type != (i < nwords ? 0 : 1))
            return bad(
                c, c->p - 1,
                i < nwords
                    ? "a label among the words (entries 0..nwords-1 must be words, type 0)"
                    : "a word among the labels (entries after the words must be labels, type 1)");
        if (i >= nwords) continue;
        bool added;
        if ((rc = emb_vocab_add(ft->vocab, (const char *)c->d + w0, len, count, NULL, &added)))
            return rc;
        if (!added) return bad(c, w0, "a word that is already in the dictionary");
    }
    if (pruneidx_size > 0) {
        /* only quantized models are pruned: the pairs are skipped, the quantization flag
         * that follows refuses the model */
        if ((uint64_t)pruneidx_size > (c->n - c->p) / 8)
            return bad(c, at + 20, "the pruned index is longer than the file");
        c->p += (size_t)pruneidx_size * 8;
    }
    *pruned = pruneidx_size >= 0; /* fastText writes -1 when nothing was pruned */
    return EMB_OK;
}

/* A matrix header and its rows x cols float32 values; *data points at them in the file. */
static emb_status read_matrix(cursor *c, const char *which, int64_t rows, int64_t cols,
                              const unsigned char **data) {
    int64_t m, n;
    size_t at = c->p;
    emb_status rc = get(c, &m, 8, which);
    if (!rc) rc = get(c, &n, 8, which);
    if (rc) return rc;
    char msg[200];
    if (m != rows || n != cols) {
        snprintf(msg, sizeof msg,
                 "the %s is %" PRId64 " x %" PRId64 "; the dictionary and arguments need %" PRId64
                 " x %" PRId64,
                 which, m, n, rows, cols);
        return bad(c, at, msg);
    }
    int64_t bytes;
    if (!emb__mul_i64(m, n, &bytes) || !emb__mul_i64(bytes, 4, &bytes) ||
        (uint64_t)bytes > c->n - c->p) {
        snprintf(msg, sizeof msg,
                 "the %s's %" PRId64 " x %" PRId64 " floats do not fit in the %zu bytes left",
                 which, m, n, c->n - c->p);
        return bad(c, at, msg);
    }
    *data = c->d + c->p;
    c->p += (size_t)bytes;
    return EMB_OK;
}

void emb_fasttext_free(emb_fasttext *ft) {
    if (!ft) return;
    emb_vocab_free(ft->vocab);
    if (ft->owns_file) emb__file_close(&ft->file);
    free(ft->tables);
    emb_embedding_free(ft->own_in);
    emb_embedding_free(ft->own_out);
    free(ft);
}

/* Parses ft->file; on failure frees ft. */
static emb_status parse(const char *path, emb_fasttext *ft, emb_fasttext **out);

emb_status emb_fasttext_read(const char *path, emb_fasttext **out) {
    if (!path) return emb__null("path");
    if (!out) return emb__null("out");
    emb_fasttext *ft = calloc(1, sizeof *ft);
    if (!ft) return emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
    /* read into memory, not mapped: the model's rows are read long after it is opened, and
     * a file that shrinks meanwhile must not become a SIGBUS */
    emb_status rc = emb__file_open(path, &ft->file, EMB__FILE_READ);
    if (rc) {
        free(ft);
        return rc;
    }
    ft->owns_file = true;
    return parse(path, ft, out);
}

static emb_status parse(const char *path, emb_fasttext *ft, emb_fasttext **out) {
    emb_status rc;
    cursor c = {ft->file.data, ft->file.size, 0, path};
    int32_t magic = 0;
    if ((rc = get(&c, &magic, 4, "the magic number")) ||
        (rc = get(&c, &ft->version, 4, "the version")))
        goto fail;
    if (magic != FT_MAGIC) {
        rc = bad(&c, 0, "not a fastText model (no magic number 793712314)");
        goto fail;
    }
    if (ft->version != 11 && ft->version != FT_VERSION) {
        char msg[96];
        snprintf(msg, sizeof msg, "fastText model version %" PRId32 " (emb reads 11 and 12)",
                 ft->version);
        rc = bad(&c, 4, msg);
        goto fail;
    }
    if ((rc = read_args(&c, ft))) goto fail;
    /* fastText's own rule: version-11 supervised models have no character n-grams */
    if (ft->version == 11 && ft->a.model == 3) ft->a.maxn = 0;
    bool pruned = false;
    if ((rc = read_dictionary(&c, ft, &pruned))) goto fail;
    uint8_t quant;
    if ((rc = get(&c, &quant, 1, "the input matrix's quantization flag"))) goto fail;
    if (quant > 1) {
        rc = bad(&c, c.p - 1, "a quantization flag that is neither 0 nor 1");
        goto fail;
    }
    if (quant) {
        rc = emb__error(EMB_ERR_UNSUPPORTED,
                        "%s: a quantized fastText model (.ftz), which emb does not read", path);
        goto fail;
    }
    if (pruned) {
        rc = bad(&c, c.p - 1,
                 "a pruned dictionary without quantization (fastText refuses such files too)");
        goto fail;
    }
    ft->in_rows = ft->nwords + ft->a.bucket;
    if ((rc = read_matrix(&c, "input matrix", ft->in_rows, ft->a.dim, &ft->in))) goto fail;
    uint8_t qout;
    if ((rc = get(&c, &qout, 1, "the output matrix's quantization flag"))) goto fail;
    if (qout > 1) {
        rc = bad(&c, c.p - 1, "a quantization flag that is neither 0 nor 1");
        goto fail;
    }
    ft->qout = qout;
    ft->out_rows = ft->a.model == 3 ? ft->nlabels : ft->nwords;
    if ((rc = read_matrix(&c, "output matrix", ft->out_rows, ft->a.dim, &ft->out))) goto fail;
    if (c.p != c.n) {
        char msg[96];
        snprintf(msg, sizeof msg, "%zu bytes after the output matrix", c.n - c.p);
        rc = bad(&c, c.p, msg);
        goto fail;
    }
    *out = ft;
    return EMB_OK;
fail:
    emb_fasttext_free(ft);
    return rc;
}

/* ---- queries ---- */

emb_status emb__fasttext_tables(const emb_fasttext *ft, float **in, int64_t *in_rows, float **out,
                                int64_t *out_rows) {
    if (!ft || !in || !out || !in_rows || !out_rows) return emb__null("ft");
    /* the sizes were checked against the file's bytes when it was read */
    const size_t dim = (size_t)ft->a.dim, ni = (size_t)ft->in_rows * dim,
                 no = (size_t)ft->out_rows * dim;
    float *a = malloc(ni ? ni * sizeof(float) : 1), *b = malloc(no ? no * sizeof(float) : 1);
    if (!a || !b) {
        free(a), free(b);
        return emb__error(EMB_ERR_NOMEM, "cannot allocate the model's tables (%zu floats)",
                          ni + no);
    }
    memcpy(a, ft->in, ni * sizeof(float)); /* unaligned in the file */
    memcpy(b, ft->out, no * sizeof(float));
    *in = a, *out = b, *in_rows = ft->in_rows, *out_rows = ft->out_rows;
    return EMB_OK;
}

emb_fasttext_args emb_fasttext_args_of(const emb_fasttext *ft) {
    emb_fasttext_args a;
    if (ft) return ft->a;
    memset(&a, 0, sizeof a);
    return a;
}

const emb_vocab *emb_fasttext_vocab(const emb_fasttext *ft) {
    return ft ? ft->vocab : NULL;
}
int64_t emb_fasttext_dim(const emb_fasttext *ft) {
    return ft ? ft->a.dim : 0;
}

int64_t emb_fasttext_subword_rows(const emb_fasttext *ft, const char *word, size_t len,
                                  int64_t *rows, int64_t cap) {
    if (!ft || (len && !word)) return -1;
    if (cap < 0 || !rows) cap = 0;
    int64_t id = len ? emb_vocab_find(ft->vocab, word, len) : -1, n = 0;
    if (id >= 0) {
        if (cap > 0) rows[0] = id;
        n = 1;
    }
    if (len == 4 && !memcmp(word, "</s>", 4))
        return n; /* fastText gives its end-of-sentence token no n-grams */
    return n + emb__subword_ngrams(word, len, ft->a.minn, ft->a.maxn, (uint32_t)ft->a.bucket,
                                   ft->nwords, rows ? rows + n : NULL, cap > n ? cap - n : 0);
}

/* The mean of rows[0..n) of an input matrix stored as unaligned little-endian float32, as
 * fastText computes it: summed in order, then scaled by float(1.0 / n). */
static void mean_rows(const unsigned char *m, int64_t dim, const int64_t *rows, int64_t n,
                      float *out) {
    for (int64_t j = 0; j < dim; j++) out[j] = 0.0f;
    for (int64_t k = 0; k < n; k++) {
        const unsigned char *r = m + (size_t)rows[k] * (size_t)dim * 4;
        for (int64_t j = 0; j < dim; j++) {
            float x;
            memcpy(&x, r + (size_t)j * 4, 4);
            out[j] += x;
        }
    }
    if (n > 0) {
        const float s = (float)(1.0 / (double)n);
        for (int64_t j = 0; j < dim; j++) out[j] *= s;
    }
}

emb_status emb_fasttext_word_vector(const emb_fasttext *ft, const char *word, size_t len,
                                    float *out) {
    if (!ft) return emb__null("model");
    if (!word && len) return emb__null("word");
    if (!out) return emb__null("out");
    int64_t small[256], *rows = small;
    int64_t n = emb_fasttext_subword_rows(ft, word, len, small, 256);
    if (n > 256) {
        if (!(rows = malloc((size_t)n * sizeof *rows)))
            return emb__error(EMB_ERR_NOMEM, "cannot allocate %" PRId64 " n-gram rows", n);
        emb_fasttext_subword_rows(ft, word, len, rows, n);
    }
    mean_rows(ft->in, ft->a.dim, rows, n, out);
    if (rows != small) free(rows);
    return EMB_OK;
}

/* emb_vectors_read of a .bin: the first `limit` words (0: all) and their vectors. */
/* The table of the first `limit` words (0: all) of a model: each word's vector as
 * emb_fasttext_word_vector gives it. With steal, ft's vocabulary moves into the table when
 * every word is kept (ft is freed by the caller either way). */
static emb_status model_vectors(const char *name, emb_fasttext *ft, bool steal, int64_t limit,
                                bool check_utf8, emb_vectors *out) {
    int64_t rows = ft->nwords;
    if (limit > 0 && limit < rows) rows = limit;
    for (int64_t i = 0; check_utf8 && i < rows; i++) {
        size_t n;
        const char *s = emb_vocab_word(ft->vocab, i, &n);
        if (!emb__utf8_valid(s, n))
            return emb__error(EMB_ERR_FORMAT, "%s%sword %" PRId64 " is not valid UTF-8",
                              name ? name : "", name ? ": " : "", i);
    }
    emb_status rc = EMB_OK;
    emb_vocab *v = NULL;
    if (rows < ft->nwords || !steal) {
        if (!(rc = emb_vocab_create(&v))) rc = emb_vocab_reserve(v, rows);
        for (int64_t i = 0; !rc && i < rows; i++) {
            size_t n;
            const char *s = emb_vocab_word(ft->vocab, i, &n);
            rc = emb_vocab_add(v, s, n, emb_vocab_count(ft->vocab, i), NULL, NULL);
        }
    }
    if (!rc) rc = emb__alloc_table(&out->weight, rows, ft->a.dim);
    for (int64_t i = 0; !rc && i < rows; i++) {
        size_t n;
        const char *s = emb_vocab_word(ft->vocab, i, &n);
        rc = emb_fasttext_word_vector(ft, s, n, (float *)out->weight.data + i * ft->a.dim);
    }
    if (rc) {
        emb_vocab_free(v);
        emb_tensor_release(&out->weight);
        return rc;
    }
    if (!v) v = ft->vocab, ft->vocab = NULL;
    out->vocab = v;
    out->format = EMB_FORMAT_FASTTEXT_BIN;
    out->file_dtype = EMB_FLOAT32;
    out->file_rows = ft->nwords;
    const float *w = out->weight.data;
    for (int64_t k = 0; k < rows * ft->a.dim; k++) out->nonfinite += !isfinite(w[k]);
    return EMB_OK;
}

emb_status emb__read_fasttext_vectors(const char *path, const emb__file *f,
                                      const emb_vectors_read_options *o, emb_vectors *out) {
    emb_fasttext *ft = calloc(1, sizeof *ft);
    if (!ft) return emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
    ft->file = *f; /* the caller's open file, read within this call */
    emb_status rc = parse(path, ft, &ft);
    if (rc) return rc;
    rc = model_vectors(path, ft, true, o->limit, o->check_utf8, out);
    emb_fasttext_free(ft);
    return rc;
}

emb_status emb_fasttext_vectors(const emb_fasttext *ft, int64_t limit, emb_vectors *out) {
    if (!ft) return emb__null("ft");
    if (!out) return emb__null("out");
    if (limit < 0) return emb__error(EMB_ERR_INVALID, "limit must be >= 0, got %" PRId64, limit);
    emb_vectors v;
    memset(&v, 0, sizeof v);
    emb_status rc = model_vectors(NULL, (emb_fasttext *)ft, false, limit, true, &v);
    if (rc) return rc; /* model_vectors freed what it made */
    *out = v;
    return EMB_OK;
}

/* ---- a model from a trainer's tables (emb_fasttext_from_w2v) ---- */

/* A model of a's arguments and copies of vocab's words and counts (row i is word i), whose
 * tables the caller sets. */
static emb_status model_shell(const emb_fasttext_args *a, const emb_vocab *vocab, int64_t ntokens,
                              emb_fasttext **res) {
    const int64_t V = emb_vocab_num_words(vocab);
    emb_fasttext *ft = calloc(1, sizeof *ft);
    if (!ft) return emb__error(EMB_ERR_NOMEM, "cannot allocate a fastText model");
    ft->a = *a;
    ft->version = FT_VERSION;
    ft->nwords = V, ft->ntokens = ntokens;
    ft->in_rows = V + a->bucket, ft->out_rows = V;
    emb_status rc;
    if ((rc = emb_vocab_create(&ft->vocab)) || (rc = emb_vocab_reserve(ft->vocab, V))) goto fail;
    for (int64_t i = 0; i < V && !rc; i++) {
        size_t n;
        const char *s = emb_vocab_word(vocab, i, &n);
        rc = emb_vocab_add(ft->vocab, s, n, emb_vocab_count(vocab, i), NULL, NULL);
    }
    if (rc) goto fail;
    *res = ft;
    return EMB_OK;
fail:
    emb_fasttext_free(ft);
    return rc;
}

emb_status emb__fasttext_from_tables(const emb_fasttext_args *a, const emb_vocab *vocab,
                                     int64_t ntokens, const float *in, const float *out,
                                     emb_fasttext **res) {
    if (!a || !vocab || !in || !out || !res) return emb__null("fasttext tables");
    emb_fasttext *ft;
    emb_status rc = model_shell(a, vocab, ntokens, &ft);
    if (rc) return rc;
    const size_t ni = (size_t)ft->in_rows * (size_t)a->dim,
                 no = (size_t)ft->out_rows * (size_t)a->dim;
    float *t = malloc((ni + no) * sizeof(float) + 1);
    if (!t) {
        emb_fasttext_free(ft);
        return emb__error(EMB_ERR_NOMEM, "cannot allocate the model's tables (%zu floats)",
                          ni + no);
    }
    memcpy(t, in, ni * sizeof(float));
    memcpy(t + ni, out, no * sizeof(float));
    ft->tables = t;
    ft->in = (const unsigned char *)t, ft->out = (const unsigned char *)(t + ni);
    *res = ft;
    return EMB_OK;
}

emb_status emb__fasttext_adopt_tables(const emb_fasttext_args *a, const emb_vocab *vocab,
                                      int64_t ntokens, emb_embedding *in, emb_embedding *out,
                                      emb_fasttext **res) {
    if (!a || !vocab || !in || !out || !res) return emb__null("fasttext tables");
    emb_tensor ti, to;
    emb_status rc;
    if ((rc = emb_embedding_weight(in, &ti)) || (rc = emb_embedding_weight(out, &to))) return rc;
    const int64_t V = emb_vocab_num_words(vocab);
    if (ti.dtype != EMB_FLOAT32 || to.dtype != EMB_FLOAT32 || ti.shape[0] != V + a->bucket ||
        to.shape[0] != V || ti.shape[1] != a->dim || to.shape[1] != a->dim)
        return emb__error(EMB_ERR_INVALID,
                          "the tables (%" PRId64 " and %" PRId64
                          " rows) are not a model of %" PRId64
                          " words, %d buckets and dimension %d",
                          ti.shape[0], to.shape[0], V, (int)a->bucket, (int)a->dim);
    emb_fasttext *ft;
    if ((rc = model_shell(a, vocab, ntokens, &ft))) return rc;
    ft->own_in = in, ft->own_out = out;
    ft->in = (const unsigned char *)ti.data, ft->out = (const unsigned char *)to.data;
    *res = ft;
    return EMB_OK;
}

/* ---- writing (emb_fasttext_save, emb_w2v_save_fasttext) ---- */

emb_status emb_fasttext_save(const emb_fasttext *ft, const char *path) {
    if (!ft) return emb__null("ft");
    if (!path) return emb__null("path");
    if (ft->a.model == 3 || ft->nlabels > 0)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "%s: a supervised fastText model (classifier), whose labels emb does "
                          "not keep, cannot be written",
                          path);
    return emb__fasttext_write(path, &ft->a, ft->vocab, ft->ntokens, ft->in, ft->in_rows, ft->out,
                               ft->out_rows, ft->qout);
}

/* ---- writing (emb_w2v_save_fasttext) ---- */

emb_status emb__fasttext_write(const char *path, const emb_fasttext_args *a, const emb_vocab *vocab,
                               int64_t ntokens, const void *in, int64_t in_rows, const void *out,
                               int64_t out_rows, bool qout) {
    const int64_t V = emb_vocab_num_words(vocab);
    if (V > INT32_MAX)
        return emb__error(EMB_ERR_INVALID,
                          "%s: fastText holds at most 2^31 - 1 words, not %" PRId64, path, V);
    for (int64_t i = 0; i < V; i++) {
        size_t n;
        const char *s = emb_vocab_word(vocab, i, &n);
        if (memchr(s, 0, n))
            return emb__error(EMB_ERR_INVALID,
                              "%s: word %" PRId64
                              " holds a NUL byte, which fastText's format cannot store",
                              path, i);
    }
    emb__writer w;
    emb_status rc = emb__writer_open(&w, path);
    if (rc) return rc;
    const int32_t head[2] = {FT_MAGIC, FT_VERSION};
    const int32_t args[12] = {a->dim,    a->ws,          a->epoch, a->min_count,
                              a->neg,    a->word_ngrams, a->loss,  a->model,
                              a->bucket, a->minn,        a->maxn,  a->lr_update_rate};
    emb__writer_put(&w, head, sizeof head);
    emb__writer_put(&w, args, sizeof args);
    emb__writer_put(&w, &a->t, sizeof(double));
    const int32_t size = (int32_t)V, nlabels = 0;
    const int64_t prune = -1;
    emb__writer_put(&w, &size, 4);
    emb__writer_put(&w, &size, 4);
    emb__writer_put(&w, &nlabels, 4);
    emb__writer_put(&w, &ntokens, 8);
    emb__writer_put(&w, &prune, 8);
    for (int64_t i = 0; i < V; i++) {
        size_t n;
        const char *s = emb_vocab_word(vocab, i, &n);
        const int64_t count = emb_vocab_count(vocab, i);
        emb__writer_put(&w, s, n + 1); /* the word and its NUL */
        emb__writer_put(&w, &count, 8);
        emb__writer_put(&w, "\0", 1); /* a word, not a label */
    }
    const int64_t dim = a->dim;
    emb__writer_put(&w, "\0", 1); /* not quantized */
    emb__writer_put(&w, &in_rows, 8);
    emb__writer_put(&w, &dim, 8);
    emb__writer_put(&w, in, (size_t)in_rows * (size_t)dim * sizeof(float));
    const uint8_t qflag = qout; /* fastText's own rule: a dense input means a dense output */
    emb__writer_put(&w, &qflag, 1);
    emb__writer_put(&w, &out_rows, 8);
    emb__writer_put(&w, &dim, 8);
    emb__writer_put(&w, out, (size_t)out_rows * (size_t)dim * sizeof(float));
    if (w.status) {
        rc = w.status;
        emb__writer_abort(&w);
        return rc;
    }
    return emb__writer_commit(&w);
}
