/* Training with fastText's subwords (include/emb/word2vec.h; the n-grams: src/io/ngrams.h). */
#include "w2v_internal.h"
#include "io/io_face.h"

#include <emb/fasttext.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

emb_status emb__w2v_subword_check(const emb_w2v_options *o) {
    if (o->maxn < 0 || o->maxn > 100)
        return emb__error(EMB_ERR_INVALID, "maxn must be in [0, 100] (0: no subwords), got %d",
                          o->maxn);
    if (o->maxn == 0) return EMB_OK;
    if (o->minn < 1 || o->minn > o->maxn)
        return emb__error(EMB_ERR_INVALID, "minn must be in [1, maxn = %d], got %d", o->maxn,
                          o->minn);
    if (o->bucket < 1 || o->bucket >= INT32_MAX)
        return emb__error(EMB_ERR_INVALID,
                          "bucket must be in [1, 2147483646] with subwords, got %" PRId64,
                          o->bucket);
    return EMB_OK;
}

emb_status emb__w2v_subword_setup(emb_w2v *w) {
    const emb_w2v_options *o = &w->o;
    const int64_t V = w->V;
    if (V + o->bucket >= INT32_MAX)
        return emb__error(EMB_ERR_INVALID,
                          "%" PRId64 " words and %" PRId64
                          " buckets: fastText's row ids are 32-bit (at most "
                          "2147483646 rows)",
                          V, o->bucket);
    int64_t total = 0, most = 0;
    for (int64_t i = 0; i < V; i++) {
        size_t len;
        const char *s = emb_vocab_word(w->vocab, i, &len);
        int64_t n =
            1 + emb__subword_ngrams(s, len, o->minn, o->maxn, (uint32_t)o->bucket, V, NULL, 0);
        total += n;
        if (n > most) most = n;
    }
    /* a window gathers up to 2 * window words' rows for one kernel call (an int count) */
    if (most * 2 * (int64_t)o->window >= INT32_MAX)
        return emb__error(EMB_ERR_INVALID,
                          "a word of %" PRId64 " subwords is too long for a window of %d", most,
                          o->window);
    w->sub_off = malloc((size_t)(V + 1) * sizeof(int64_t));
    w->sub_rows = malloc((size_t)total * sizeof(int32_t));
    int64_t *tmp = malloc((size_t)most * sizeof(int64_t));
    if (!w->sub_off || !w->sub_rows || !tmp) {
        free(tmp);
        return emb__error(EMB_ERR_NOMEM, "cannot allocate the subword rows of %" PRId64 " words",
                          V);
    }
    int64_t at = 0;
    for (int64_t i = 0; i < V; i++) {
        size_t len;
        const char *s = emb_vocab_word(w->vocab, i, &len);
        w->sub_off[i] = at;
        w->sub_rows[at++] = (int32_t)i;
        int64_t n =
            emb__subword_ngrams(s, len, o->minn, o->maxn, (uint32_t)o->bucket, V, tmp, most);
        for (int64_t k = 0; k < n; k++) w->sub_rows[at++] = (int32_t)tmp[k];
    }
    w->sub_off[V] = at;
    w->sub_max = most;
    free(tmp);
    return EMB_OK;
}

/* The mean of rows[0..n) of table as fastText computes it: summed in order in float32, then
 * multiplied by float(1.0 / n). */
static void mean_of_rows(const float *table, int64_t dim, const int64_t *rows, int64_t n,
                         float *out) {
    for (int64_t j = 0; j < dim; j++) out[j] = 0.0f;
    for (int64_t k = 0; k < n; k++) {
        const float *r = table + rows[k] * dim;
        for (int64_t j = 0; j < dim; j++) out[j] += r[j];
    }
    if (n > 0) {
        const float s = (float)(1.0 / (double)n);
        for (int64_t j = 0; j < dim; j++) out[j] *= s;
    }
}

emb_status emb_w2v_word_vector(const emb_w2v *w, const char *word, size_t len, float *out) {
    if (!w) return emb__null("w2v");
    if (!word && len) return emb__null("word");
    if (!out) return emb__null("out");
    const emb_w2v_options *o = &w->o;
    int64_t id = len ? emb_vocab_find(w->vocab, word, len) : -1;
    if (o->maxn == 0) {
        if (id < 0)
            return emb__error(EMB_ERR_INVALID,
                              "'%.*s' is not in the vocabulary (and the model has no subwords)",
                              (int)(len > 200 ? 200 : len), word);
        memcpy(out, w->syn0 + id * o->dim, (size_t)o->dim * sizeof(float));
        return EMB_OK;
    }
    int64_t small[256], *rows = small, n = 0;
    int64_t k =
        emb__subword_ngrams(word, len, o->minn, o->maxn, (uint32_t)o->bucket, w->V, NULL, 0) + 1;
    if (k > 256 && !(rows = malloc((size_t)k * sizeof(int64_t))))
        return emb__error(EMB_ERR_NOMEM, "cannot allocate %" PRId64 " n-gram rows", k);
    if (id >= 0) rows[n++] = id;
    if (!(len == 4 && !memcmp(word, "</s>", 4)))
        n += emb__subword_ngrams(word, len, o->minn, o->maxn, (uint32_t)o->bucket, w->V, rows + n,
                                 k - n);
    mean_of_rows(w->syn0, o->dim, rows, n, out);
    if (rows != small) free(rows);
    return EMB_OK;
}

emb_status emb_w2v_word_vectors(const emb_w2v *w, emb_tensor *out) {
    if (!w) return emb__null("w2v");
    if (!out) return emb__null("out");
    emb_tensor t;
    emb_status st = emb_tensor_alloc(&t, EMB_FLOAT32, 2, (int64_t[]){w->V, w->o.dim});
    if (st) return st;
    float *d = t.data;
    int64_t rows[4096];
    for (int64_t i = 0; i < w->V && st == EMB_OK; i++) {
        const int64_t b = w->o.maxn > 0 ? w->sub_off[i] : i,
                      e = w->o.maxn > 0 ? w->sub_off[i + 1] : i + 1;
        if (e - b <= 4096) {
            for (int64_t q = b; q < e; q++) rows[q - b] = w->o.maxn > 0 ? w->sub_rows[q] : i;
            mean_of_rows(w->syn0, w->o.dim, rows, e - b, d + i * w->o.dim);
        } else {
            size_t len;
            const char *s = emb_vocab_word(w->vocab, i, &len);
            st = emb_w2v_word_vector(w, s, len, d + i * w->o.dim);
        }
    }
    if (st) {
        emb_tensor_release(&t);
        return st;
    }
    *out = t;
    return EMB_OK;
}

/* The model's options as fastText's arguments (emb_w2v_save_fasttext, emb_fasttext_from_w2v). */
static emb_fasttext_args fasttext_args(const emb_w2v_options *o) {
    const bool sub = o->maxn > 0;
    emb_fasttext_args a;
    memset(&a, 0, sizeof a);
    a.dim = (int32_t)o->dim;
    a.ws = o->window;
    a.epoch = o->epochs;
    a.min_count = o->min_count > INT32_MAX ? INT32_MAX : (int32_t)o->min_count;
    a.neg = o->negative;
    a.word_ngrams = 1;
    a.loss = 2; /* negative sampling */
    a.model = o->model == EMB_W2V_CBOW ? 1 : 2;
    a.bucket = sub ? (int32_t)o->bucket : 0;
    a.minn = sub ? o->minn : 0;
    a.maxn = o->maxn;
    a.lr_update_rate = 100;
    a.t = o->sample;
    return a;
}

emb_status emb_w2v_save_fasttext(const emb_w2v *w, const char *path) {
    if (!w) return emb__null("w2v");
    if (!path) return emb__null("path");
    const emb_fasttext_args a = fasttext_args(&w->o);
    return emb__fasttext_write(path, &a, w->vocab, w->tokens, w->syn0, w->V + a.bucket, w->syn1,
                               w->V, false);
}

emb_status emb_fasttext_from_w2v(const emb_w2v *w, emb_fasttext **out) {
    if (!w) return emb__null("w2v");
    if (!out) return emb__null("out");
    const emb_fasttext_args a = fasttext_args(&w->o);
    return emb__fasttext_from_tables(&a, w->vocab, w->tokens, w->syn0, w->syn1, out);
}

emb_status emb_fasttext_take_w2v(emb_w2v *w, emb_fasttext **out) {
    if (!w) return emb__null("w2v");
    if (!out) return emb__null("out");
    const emb_fasttext_args a = fasttext_args(&w->o);
    emb_status st = emb__fasttext_adopt_tables(&a, w->vocab, w->tokens, w->in, w->out, out);
    if (st) return st;
    w->in = w->out = NULL, w->syn0 = w->syn1 = NULL; /* the model's now */
    emb_w2v_free(w);
    return EMB_OK;
}
