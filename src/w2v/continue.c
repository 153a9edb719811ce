/* Training with a vocabulary that does not come from counting the corpus alone: a
 * vocabulary read from a file (the word2vec tool's -read-vocab; emb_w2v_create_with_vocab)
 * and continued training of a saved model on new text (gensim's build_vocab(update=True)
 * then train; emb_w2v_continue). docs/word2vec.md, "Vocabularies and continued training". */
#include "w2v_internal.h"
#include "io/io_face.h" /* a fastText model's tables (src/io/ngrams.h) */

#include <emb/fasttext.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Every word of the corpus (min_count 1, no size limit), sorted by count, and the token
 * ids over that vocabulary. */
static emb_status read_all_words(const emb_w2v_options *opts, const char *const *corpus, size_t n,
                                 emb_vocab **v, emb__w2v_ids *ids) {
    emb_w2v_options o = *opts;
    o.min_count = 1, o.max_vocab = 0;
    int64_t skipped[2] = {0, 0};
    return emb__w2v_read_paths(&o, corpus, n, v, ids, skipped, NULL);
}

static emb_status copy_vocab(const emb_vocab *src, emb_vocab **out) {
    emb_status st = emb_vocab_create(out);
    for (int64_t i = 0; st == EMB_OK && i < emb_vocab_num_words(src); i++) {
        size_t len;
        const char *s = emb_vocab_word(src, i, &len);
        st = emb_vocab_add(*out, s, len, emb_vocab_count(src, i), NULL, NULL);
    }
    if (st) emb_vocab_free(*out), *out = NULL;
    return st;
}

emb_status emb_w2v_create_with_vocab(const emb_w2v_options *opts, const emb_vocab *vocab,
                                     const char *corpus, emb_w2v **out) {
    if (!corpus) return emb__null("corpus");
    return emb_w2v_create_with_vocab_files(opts, vocab, &corpus, 1, out);
}

emb_status emb_w2v_create_with_vocab_files(const emb_w2v_options *opts, const emb_vocab *vocab,
                                           const char *const *paths, size_t n, emb_w2v **out) {
    if (!out) return emb__null("out");
    if (!vocab) return emb__null("vocab");
    if (!paths) return emb__null("paths");
    const char *corpus = n > 0 && paths[0] ? paths[0] : "corpus";
    emb_status st = emb_w2v_options_check(opts);
    if (st || (st = emb__w2v_no_phrases(opts, "a vocabulary given"))) return st;
    for (int64_t i = 0; i < emb_vocab_num_words(vocab); i++)
        if (emb_vocab_count(vocab, i) < 1)
            return emb__error(EMB_ERR_INVALID,
                              "word %" PRId64 " of the vocabulary has count %" PRId64
                              "; training needs counts >= 1",
                              i, emb_vocab_count(vocab, i));
    emb_vocab *target = NULL, *all = NULL;
    int32_t *map = NULL;
    emb__w2v_ids ids;
    bool have_ids = false;
    if ((st = copy_vocab(vocab, &target))) return st;
    /* the word2vec tool: the file's counts decide the order and min_count */
    if ((st = emb_vocab_sort_by_count(target, 0, NULL)) ||
        (st = emb_vocab_prune(target, 0, opts->min_count, opts->max_vocab)))
        goto fail;
    if (emb_vocab_num_words(target) == 0) {
        st = emb__error(EMB_ERR_FORMAT,
                        "no word of the vocabulary has a count of at least %" PRId64 " (min_count)",
                        opts->min_count);
        goto fail;
    }
    if ((st = read_all_words(opts, paths, n, &all, &ids))) goto fail;
    have_ids = true;
    map = malloc((size_t)emb_vocab_num_words(all) * sizeof(int32_t));
    if (!map) {
        st = emb__error(EMB_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int64_t i = 0; i < emb_vocab_num_words(all); i++) {
        size_t len;
        const char *s = emb_vocab_word(all, i, &len);
        map[i] = (int32_t)emb_vocab_find(target, s, len);
    }
    if ((st = emb__w2v_ids_map(&ids, map))) goto fail;
    if (ids.n == 0) {
        st = emb__error(EMB_ERR_FORMAT, "%s: no token of the corpus is a word of the vocabulary",
                        corpus);
        goto fail;
    }
    free(map), emb_vocab_free(all);
    double total = 0; /* as the word2vec tool: frequencies from the file's counts */
    for (int64_t i = 0; i < emb_vocab_num_words(target); i++)
        total += (double)emb_vocab_count(target, i);
    emb_w2v *w;
    if ((st = emb__w2v_setup(opts, target, &ids, &w))) return st;
    for (int64_t i = 0; i < w->V; i++)
        emb__w2v_set_keep(w, i, (double)emb_vocab_count(w->vocab, i), total);
    if ((st = emb__w2v_split_lanes(w))) { /* the lanes' work from these probabilities */
        emb_w2v_free(w);
        return st;
    }
    *out = w;
    return EMB_OK;
fail:
    emb_vocab_free(target), emb_vocab_free(all), free(map);
    if (have_ids) emb__w2v_ids_close(&ids);
    return st;
}

/* A fastText model (.bin, cbow or skipgram with negative sampling) read as a model to continue:
 * what emb__w2v_read_model gives for emb's own (its words are those of its dictionary, "</s>"
 * included, with their counts). */
static emb_status read_fasttext_model(const char *path, int64_t *dim, int64_t sub[3],
                                      emb_vocab **vocab, float **syn0, float **syn1) {
    emb_fasttext *ft = NULL;
    emb_status st = emb_fasttext_read(path, &ft);
    if (st) return st;
    const emb_fasttext_args a = emb_fasttext_args_of(ft);
    const emb_vocab *v = emb_fasttext_vocab(ft);
    const int64_t V = emb_vocab_num_words(v);
    int64_t in_rows = 0, out_rows = 0;
    if (a.model != 1 && a.model != 2)
        st = emb__error(EMB_ERR_UNSUPPORTED,
                        "%s is a supervised fastText model (a classifier): only cbow and skipgram "
                        "models are trained further",
                        path);
    else if (a.loss != 2)
        st = emb__error(EMB_ERR_UNSUPPORTED,
                        "%s was trained with loss %s; emb trains with negative sampling (ns) only",
                        path,
                        a.loss == 1   ? "hs"
                        : a.loss == 3 ? "softmax"
                                      : "ova");
    else if (V < 1 || V >= INT32_MAX)
        st = emb__error(EMB_ERR_FORMAT, "%s holds %" PRId64 " words", path, V);
    else if (a.maxn > 0 && (a.minn < 1 || a.minn > a.maxn || a.maxn > 100 || a.bucket < 1 ||
                            a.bucket >= INT32_MAX))
        st = emb__error(EMB_ERR_FORMAT,
                        "%s: subwords minn %d, maxn %d, bucket %d are outside what emb trains",
                        path, a.minn, a.maxn, a.bucket);
    for (int64_t i = 0; st == EMB_OK && i < V; i++)
        if (emb_vocab_count(v, i) < 1)
            st = emb__error(EMB_ERR_FORMAT, "%s: word %" PRId64 " has count %" PRId64, path, i,
                            emb_vocab_count(v, i));
    if (st == EMB_OK) st = copy_vocab(v, vocab);
    if (st == EMB_OK && (st = emb__fasttext_tables(ft, syn0, &in_rows, syn1, &out_rows)))
        emb_vocab_free(*vocab), *vocab = NULL;
    const size_t n0 = st ? 0 : (size_t)in_rows * (size_t)a.dim,
                 n1 = st ? 0 : (size_t)out_rows * (size_t)a.dim;
    for (size_t k = 0; k < n0 + n1 && st == EMB_OK; k++)
        if (!isfinite(k < n0 ? (*syn0)[k] : (*syn1)[k - n0])) {
            st = emb__error(EMB_ERR_FORMAT, "%s holds NaN or infinite values", path);
            emb_vocab_free(*vocab), *vocab = NULL;
            free(*syn0), free(*syn1), *syn0 = *syn1 = NULL;
        }
    if (st == EMB_OK) {
        *dim = a.dim;
        sub[0] = a.maxn > 0 ? a.minn : 0, sub[1] = a.maxn > 0 ? a.maxn : 0;
        sub[2] = a.maxn > 0 ? a.bucket : 0;
    }
    emb_fasttext_free(ft);
    return st;
}

emb_status emb_w2v_continue(const emb_w2v_options *opts, const char *model, const char *corpus,
                            emb_w2v **out) {
    if (!corpus) return emb__null("corpus");
    return emb_w2v_continue_files(opts, model, &corpus, 1, out);
}

emb_status emb_w2v_continue_files(const emb_w2v_options *opts, const char *model,
                                  const char *const *paths, size_t n, emb_w2v **out) {
    if (!out) return emb__null("out");
    if (!model) return emb__null("model");
    if (!paths) return emb__null("paths");
    const char *corpus = n > 0 && paths[0] ? paths[0] : "corpus";
    emb_status st = emb_w2v_options_check(opts);
    if (st || (st = emb__w2v_no_phrases(opts, "continued training"))) return st;
    emb__file f;
    if ((st = emb__file_open(model, &f, EMB__FILE_READ))) return st;
    int64_t dim = 0, sub[3] = {0, 0, 0};
    emb_vocab *merged = NULL, *all = NULL;
    float *syn0 = NULL, *syn1 = NULL;
    int32_t *map = NULL;
    int64_t *new_count = NULL;
    emb__w2v_ids ids;
    bool have_ids = false;
    /* emb's own model (a checkpoint), or fastText's .bin */
    const bool fasttext = f.size >= 4 && emb__get_u32le(f.data) == EMB__FASTTEXT_MAGIC;
    if (!fasttext)
        st = emb__w2v_read_model(f.data, f.size, model, &dim, sub, &merged, &syn0, &syn1);
    emb__file_close(&f);
    if (fasttext) st = read_fasttext_model(model, &dim, sub, &merged, &syn0, &syn1);
    if (st) return st;
    const int64_t old_v = emb_vocab_num_words(merged);
    emb_w2v_options o = *opts;
    o.dim = dim; /* the model's, and its subwords (or none) */
    o.maxn = (int)sub[1];
    if (sub[1] > 0) o.minn = (int)sub[0], o.bucket = sub[2];
    if ((st = read_all_words(&o, paths, n, &all, &ids))) goto done;
    have_ids = true;
    const int64_t nall = emb_vocab_num_words(all);
    map = malloc((size_t)nall * sizeof(int32_t));
    new_count = calloc((size_t)(old_v + nall), sizeof(int64_t));
    if (!map || !new_count) {
        st = emb__error(EMB_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* gensim's build_vocab(update=True): a known word's count grows by its count in the new
     * text, whatever min_count; a new word seen min_count times is appended (here in order of
     * count, ties by first appearance); rarer new words are dropped. */
    for (int64_t i = 0; i < nall && st == EMB_OK; i++) {
        size_t len;
        const char *s = emb_vocab_word(all, i, &len);
        int64_t c = emb_vocab_count(all, i), j = emb_vocab_find(merged, s, len);
        if (j >= 0) {
            const int64_t had = emb_vocab_count(merged, j);
            if (had > INT64_MAX - c) /* only a forged model file holds such a count */
                st = emb__error(EMB_ERR_FORMAT,
                                "%s: the count of word %" PRId64 " (%" PRId64
                                ") cannot grow by %" PRId64 " without overflowing",
                                model, j, had, c);
            else
                st = emb_vocab_set_count(merged, j, had + c);
        } else if (c >= o.min_count) {
            if (emb_vocab_num_words(merged) >= INT32_MAX - 1) {
                st = emb__error(EMB_ERR_OVERFLOW, "more than 2^31 - 2 words");
                break;
            }
            st = emb_vocab_add(merged, s, len, c, &j, NULL);
        }
        map[i] = (int32_t)j;
        if (j >= 0) new_count[j] = c;
    }
    if (st) goto done;
    if ((st = emb__w2v_ids_map(&ids, map))) goto done;
    if (ids.n == 0) {
        st = emb__error(EMB_ERR_FORMAT,
                        "%s: no token of the corpus is a word of the model or a new word seen "
                        "%" PRId64 " times (min_count)",
                        corpus, o.min_count);
        goto done;
    }
    emb_w2v *w;
    st = emb__w2v_setup(&o, merged, &ids, &w);
    merged = NULL, have_ids = false; /* taken over (or freed) by setup */
    if (st) goto done;
    /* the model's rows as they were; new words: input rows drawn as a fresh run draws them
     * (uniform in [-0.5/dim, 0.5/dim) from the seed), output rows zero */
    memcpy(w->syn0, syn0, (size_t)old_v * (size_t)dim * sizeof(float));
    memcpy(w->syn1, syn1, (size_t)old_v * (size_t)dim * sizeof(float));
    /* with subwords the n-gram bucket rows, after the words' rows of each table: the same
     * hashing gives every n-gram the same bucket, so a word's n-grams keep what they learned */
    if (sub[1] > 0)
        memcpy(w->syn0 + w->V * dim, syn0 + old_v * dim,
               (size_t)sub[2] * (size_t)dim * sizeof(float));
    /* subsampling from the new text's counts (gensim: the raw counts of this update) */
    for (int64_t i = 0; i < w->V; i++)
        emb__w2v_set_keep(w, i, (double)new_count[i], (double)w->tokens);
    if ((st = emb__w2v_split_lanes(w))) { /* the lanes' work from these probabilities */
        emb_w2v_free(w);
        goto done;
    }
    *out = w;
done:
    emb_vocab_free(merged), emb_vocab_free(all);
    if (have_ids) emb__w2v_ids_close(&ids);
    free(map), free(new_count), free(syn0), free(syn1);
    return st;
}
