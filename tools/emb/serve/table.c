/* The served table: see serve.h. */
#include "serve.h"

#include "../wordvecs.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool fail(char *err, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return false;
}

/* A safetensors table mapped read-only as it is stored (any storage type, emb_qtable_map):
 * true on success; false (error cleared) when the file is not one emb_qtable_map takes, so
 * that the caller reads it into memory instead. */
static bool try_map(const char *path, serve_table *t) {
    emb_format f;
    if (emb_format_sniff(path, &f) != EMB_OK || f != EMB_FORMAT_SAFETENSORS) {
        emb_clear_error();
        return false;
    }
    if (emb_qtable_map(path, &t->q, &t->vocab) != EMB_OK) {
        emb_clear_error();
        return false;
    }
    t->mapped = true;
    t->format = emb_format_name(EMB_FORMAT_SAFETENSORS);
    return true;
}

/* The unseen-word hook of a fastText model: false for a word without n-grams. */
static bool fasttext_unseen(const serve_table *t, const char *word, size_t len, float *out) {
    if (emb_fasttext_subword_rows(t->ft, word, len, NULL, 0) <= 0) return false;
    if (emb_fasttext_word_vector(t->ft, word, len, out) != EMB_OK) {
        emb_clear_error();
        return false;
    }
    return true;
}

static char *model_name(const char *path, const char *given) {
    if (given) return strdup(given);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strdup(base);
}

bool serve_table_open(const char *path, const serve_table_options *o, serve_table *t, char *err,
                      size_t errsize) {
    memset(t, 0, sizeof *t);
    t->path = path;
    if (o->tensor || !try_map(path, t)) {
        emb_vectors_read_options ro = emb_vectors_read_options_default();
        ro.tensor = o->tensor;
        ro.check_utf8 = o->check_utf8;
        if (wordvecs_read(path, &ro, &t->v, &t->ft) != EMB_OK)
            return fail(err, errsize, "%s", emb_errmsg());
        const int64_t r = t->v.weight.shape[0], d = t->v.weight.shape[1];
        if (emb_qtable_wrap(EMB_QTYPE_F32, r, d, t->v.weight.data, (size_t)(r * d) * sizeof(float),
                            NULL, &t->q) != EMB_OK) {
            fail(err, errsize, "%s: %s", path, emb_errmsg());
            emb_vectors_release(&t->v);
            emb_fasttext_free(t->ft);
            t->ft = NULL;
            return false;
        }
        t->vocab = t->v.vocab;
        t->format = emb_format_name(t->v.format);
        /* the rows are the words' vectors; the model itself answers unseen words */
        if (t->ft) t->unseen = fasttext_unseen;
    }
    t->rows = emb_qtable_num_rows(t->q);
    t->dim = emb_qtable_dim(t->q);
    t->searched = o->restrict_rows > 0 && o->restrict_rows < t->rows ? o->restrict_rows : t->rows;
    t->model = model_name(path, o->model);
    emb_status st;
    if (emb_qtable_qtype(t->q) == EMB_QTYPE_F32) {
        /* float32 rows are searched in place (the score kernel reads the mapping) */
        emb_tensor view;
        int64_t shape[2] = {t->rows, t->dim};
        st = emb_tensor_init(&view, EMB_FLOAT32, (void *)emb_qtable_data(t->q), 2, shape);
        if (st == EMB_OK) st = emb_knn_create(&view, t->searched, &t->knn);
    } else {
        st = emb_knn_create_from_qtable(t->q, t->searched, &t->knn);
    }
    if (st == EMB_OK && t->vocab) st = wordvecs_fold(t->vocab, t->searched, &t->fold);
    if (st != EMB_OK || !t->model) {
        fail(err, errsize, "%s: %s", path, t->model ? emb_errmsg() : "out of memory");
        serve_table_close(t);
        return false;
    }
    return true;
}

void serve_table_close(serve_table *t) {
    emb_knn_free(t->knn);
    emb_fasttext_free(t->ft);
    emb_vocab_free(t->fold);
    emb_qtable_free(t->q);
    if (t->v.weight.data || t->v.vocab)
        emb_vectors_release(&t->v); /* its vocab is t->vocab */
    else
        emb_vocab_free(t->vocab); /* the mapped file's */
    free(t->model);
    memset(t, 0, sizeof *t);
}

const char *serve_table_word(const serve_table *t, int64_t row) {
    return t->vocab ? emb_vocab_word(t->vocab, row, NULL) : NULL;
}

void serve_table_row(const serve_table *t, int64_t r, float *out) {
    emb_qtable_dequantize(t->q, r, 1, out);
}

int64_t serve_table_find(const serve_table *t, const char *word, size_t len) {
    if (!t->vocab || len == 0) return -1;
    int64_t r = emb_vocab_find(t->vocab, word, len);
    if (r >= 0) return r;
    if ((r = wordvecs_fold_find(t->fold, word, len)) >= 0) return r;
    size_t a = 0, b = len;
    while (a < b && ispunct((unsigned char)word[a])) a++;
    while (b > a && ispunct((unsigned char)word[b - 1])) b--;
    if (a == b || (a == 0 && b == len)) return -1;
    if ((r = emb_vocab_find(t->vocab, word + a, b - a)) >= 0) return r;
    return wordvecs_fold_find(t->fold, word + a, b - a);
}
