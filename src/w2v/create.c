/* word2vec runs created: the options checked, the corpus read (or token ids taken), the
 * vocabulary and sampling tables, the tables initialised and the corpus cut into lanes;
 * and a run freed (include/emb/word2vec.h; training itself is in trainer.c). */
#include "w2v_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- setup ---- */

static void w2v_free_parts(emb_w2v *w) {
    emb_vocab_free(w->vocab);
    emb__w2v_ids_close(&w->ids);
    emb_embedding_free(w->in);
    emb_embedding_free(w->out);
    free(w->keep), free(w->keep_all), free(w->weight), free(w->alias), free(w->lanes);
    free(w->sub_off), free(w->sub_rows);
    emb__corpus_files_free(&w->files);
}

void emb_w2v_free(emb_w2v *w) {
    if (!w) return;
    w2v_free_parts(w);
    free(w);
}

/* One pass over the ids: the tokens (ids that are not sentence ends) and the corpus's
 * fingerprint. */
static emb_status count_ids(emb_w2v *w) {
    emb__w2v_cursor c;
    emb_status st = emb__w2v_cursor_init(&c, &w->ids);
    if (st) return st;
    uint64_t h = 1469598103934665603ull ^ (uint64_t)w->V;
    int64_t tokens = 0, n = w->n_ids;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = emb__w2v_id_at(&c, i);
        if (id == INT32_MIN) {
            st = emb__error(EMB_ERR_IO, "cannot read back the corpus's token ids: %s",
                            strerror(errno));
            break;
        }
        tokens += id >= 0;
        h = (h ^ (uint32_t)id) * 1099511628211ull;
    }
    emb__w2v_cursor_free(&c);
    w->tokens = tokens;
    w->fingerprint = h ^ (uint64_t)n;
    return st;
}

/* Where the sentence that starts at position s of the ids ends, i.e. where the next one
 * starts, as train_round reads sentences: after a sentence end (-1) or after max_sentence
 * tokens, whichever comes first. */
static int64_t next_sentence(const emb_w2v *w, emb__w2v_cursor *c, int64_t s) {
    int64_t seen = 0;
    while (s < w->n_ids && seen < w->o.max_sentence) {
        int32_t id = emb__w2v_id_at(c, s++);
        if (id == INT32_MIN) return -1;
        if (id < 0) break;
        seen++;
    }
    return s;
}

/* Whether lanes[0..nt) cut the ids as emb__w2v_split_lanes may (contiguous, from 0 to the
 * end, every boundary where one thread starts a sentence): the ranges a checkpoint holds,
 * which an earlier build may have cut elsewhere. *ok is set; errors: the ids unreadable. */
emb_status emb__w2v_lanes_valid(const emb_w2v *w, const emb__w2v_lane *lanes, bool *ok) {
    *ok = lanes[0].lo == 0 && lanes[w->nt - 1].hi == w->n_ids;
    for (int t = 0; t < w->nt && *ok; t++)
        *ok = lanes[t].lo <= lanes[t].hi && (t == 0 || lanes[t].lo == lanes[t - 1].hi);
    if (!*ok) return EMB_OK;
    emb__w2v_cursor c;
    emb_status st = emb__w2v_cursor_init(&c, &w->ids);
    if (st) return st;
    int64_t b = 0;
    for (int t = 1; t < w->nt && *ok && b >= 0; t++) {
        while (b >= 0 && b < lanes[t].lo) b = next_sentence(w, &c, b);
        *ok = b == lanes[t].lo;
    }
    emb__w2v_cursor_free(&c);
    if (b < 0)
        return emb__error(EMB_ERR_IO, "cannot read back the corpus's token ids: %s",
                          strerror(errno));
    return EMB_OK;
}

/* Splits the ids into nt contiguous lanes of equal expected work: each boundary at the first
 * place where one thread reading from the start would begin a sentence (after a line end, or
 * every max_sentence tokens within a long line) once the tokens before it hold at least t/nt
 * of the corpus's summed keep probabilities. Every lane trains exactly the sentences one
 * thread trains, and a corpus that is one long line is shared too. Also sets keep_mean. */
emb_status emb__w2v_split_lanes(emb_w2v *w) {
    emb__w2v_cursor c;
    emb_status st = emb__w2v_cursor_init(&c, &w->ids);
    if (st) return st;
    double total = 0;
    bool failed = false;
    for (int64_t i = 0; i < w->n_ids && !failed;) { /* a buffer of ids at a time */
        failed = emb__w2v_id_at(&c, i) == INT32_MIN;
        const int64_t end = failed ? i : c.lo + c.len;
        for (const int32_t *p = c.buf + (i - c.lo); i < end; i++, p++)
            if (*p >= 0) total += emb__w2v_keep_weight(w, *p);
    }
    w->keep_mean = w->tokens > 0 && total > 0 ? total / (double)w->tokens : 1.0;
    int64_t b = 0, seen = 0;
    double sum = 0;
    w->lanes[0].lo = 0;
    for (int t = 1; t < w->nt && !failed; t++) {
        const double even = total * t / w->nt;
        /* to the end of the sentence that reaches the even share (as train_round reads it) */
        while (!failed && b < w->n_ids && (sum < even || seen > 0)) {
            int32_t id = emb__w2v_id_at(&c, b++);
            failed = id == INT32_MIN;
            if (id < 0) {
                seen = 0;
                continue;
            }
            sum += emb__w2v_keep_weight(w, id);
            if (++seen == w->o.max_sentence) seen = 0;
        }
        w->lanes[t].lo = b;
        w->lanes[t - 1].hi = b;
    }
    emb__w2v_cursor_free(&c);
    if (failed)
        return emb__error(EMB_ERR_IO, "cannot read back the corpus's token ids: %s",
                          strerror(errno));
    w->lanes[w->nt - 1].hi = w->n_ids;
    uint64_t s = w->o.seed;
    for (int t = 0; t < w->nt; t++) {
        w->lanes[t].pos = w->lanes[t].lo;
        w->lanes[t].epoch = 0;
        w->lanes[t].rng = splitmix64(&s) | 1;
    }
    return EMB_OK;
}

void emb__w2v_set_keep(emb_w2v *w, int64_t i, double count, double total) {
    /* Subsampling: keep with probability (sqrt(f / sample) + 1) * sample / f. */
    double keep = 1.0;
    if (w->o.sample > 0 && count > 0) {
        double t = w->o.sample * total;
        keep = (sqrt(count / t) + 1) * t / count;
    }
    w->keep_all[i] = keep >= 1.0;
    w->keep[i] = keep >= 1.0 ? UINT32_MAX : (uint32_t)(keep * 4294967296.0);
    /* what subsampling keeps of a token in expectation: 1, or the 32-bit threshold's share */
    w->weight[i] = keep >= 1.0 ? 1.0 : (double)w->keep[i] * (1.0 / 4294967296.0);
}

/* Builds everything from a vocabulary and final ids (both taken over by w). */
emb_status emb__w2v_setup(const emb_w2v_options *o, emb_vocab *vocab, emb__w2v_ids *ids,
                          emb_w2v **out);
emb_status emb__w2v_setup(const emb_w2v_options *o, emb_vocab *vocab, emb__w2v_ids *ids,
                          emb_w2v **out) {
    emb_w2v *w = calloc(1, sizeof *w);
    if (!w) {
        emb_vocab_free(vocab), emb__w2v_ids_close(ids);
        return emb__error(EMB_ERR_NOMEM, "cannot allocate a word2vec run");
    }
    w->o = *o;
    w->vocab = vocab;
    w->ids = *ids;
    w->n_ids = ids->n;
    w->V = emb_vocab_num_words(vocab);
    emb_status st = count_ids(w);
    if (st) {
        emb_w2v_free(w);
        return st;
    }
    if (w->tokens > INT64_MAX / o->epochs) { /* words_total = tokens x epochs */
        int64_t tokens = w->tokens;
        emb_w2v_free(w);
        return emb__error(EMB_ERR_OVERFLOW, "%" PRId64 " tokens x %d epochs do not fit in 64 bits",
                          tokens, o->epochs);
    }
    w->o.threads = o->threads > 0 ? o->threads : emb_get_num_threads();
    if (w->o.threads < 1) w->o.threads = 1;
    w->nt = o->lanes > 0       ? o->lanes
            : w->o.threads > 1 ? EMB__W2V_LANES_PER_THREAD * w->o.threads
                               : 1;
    w->o.lanes = w->nt;
    if (w->o.threads > w->nt) w->o.threads = w->nt; /* a thread per lane at most */
    size_t V = (size_t)w->V;
    w->keep = malloc(V * sizeof(uint32_t));
    w->keep_all = malloc(V * sizeof(bool));
    w->weight = malloc(V * sizeof(double));
    w->alias = malloc(V * sizeof(emb__w2v_alias));
    w->lanes = calloc((size_t)w->nt, sizeof(emb__w2v_lane));
    if (!w->keep || !w->keep_all || !w->weight || !w->alias || !w->lanes) {
        emb_w2v_free(w);
        return emb__error(EMB_ERR_NOMEM, "cannot allocate sampling tables for %" PRId64 " words",
                          (int64_t)V);
    }
    /* Tables: emb embeddings, input uniform in [-0.5/dim, 0.5/dim), output zero. */
    emb_generator *gen = NULL;
    st = emb_generator_create(o->seed, &gen);
    emb_embedding_options eo = emb_embedding_options_default();
    eo.generator = gen;
    eo.sparse = true;
    /* with subwords the input table also holds the n-gram buckets, after the words */
    if (st == EMB_OK && o->maxn > 0) st = emb__w2v_subword_setup(w);
    if (st == EMB_OK)
        st = emb_embedding_create(w->V + (o->maxn > 0 ? o->bucket : 0), o->dim, &eo, &w->in);
    if (st == EMB_OK) st = emb_embedding_create(w->V, o->dim, &eo, &w->out);
    emb_tensor view;
    if (st == EMB_OK) st = emb_embedding_weight(w->in, &view);
    if (st == EMB_OK) {
        w->syn0 = view.data;
        st = emb_uniform_(&view, -0.5 / (double)o->dim, 0.5 / (double)o->dim, gen);
    }
    if (st == EMB_OK) st = emb_embedding_weight(w->out, &view);
    if (st == EMB_OK) {
        w->syn1 = view.data;
        memset(w->syn1, 0, V * (size_t)o->dim * sizeof(float));
    }
    emb_generator_free(gen);
    if (st) {
        emb_w2v_free(w);
        return st;
    }
    double total = (double)w->tokens;
    for (size_t i = 0; i < V; i++)
        emb__w2v_set_keep(w, (int64_t)i, (double)emb_vocab_count(vocab, (int64_t)i), total);
    st = emb__w2v_build_alias(w);
    emb__sgns_sigmoid_table(w->sigmoid);
    if (!st) st = emb__w2v_split_lanes(w);
    if (st) {
        emb_w2v_free(w);
        return st;
    }
    *out = w;
    return EMB_OK;
}

/* A run over what read gives: src (when not NULL) or the paths. */
static emb_status create_read(const emb_w2v_options *opts, emb__corpus_src *src, const char *name,
                              const char *const *paths, size_t n, emb_w2v **out) {
    emb_status st = emb_w2v_options_check(opts);
    if (st) return st;
    emb_vocab *v;
    emb__w2v_ids ids;
    int64_t skipped[2] = {0, 0};
    emb__corpus_files files = {NULL, 0};
    st = src ? emb__w2v_read_corpus(opts, src, name, &v, &ids, skipped)
             : emb__w2v_read_paths(opts, paths, n, &v, &ids, skipped, &files);
    if (st) return st;
    if (src) emb__corpus_take_files(src, &files);
    st = emb__w2v_setup(opts, v, &ids, out);
    if (st == EMB_OK) {
        (*out)->skipped_invalid = skipped[0], (*out)->skipped_long = skipped[1];
        (*out)->files = files;
    } else {
        emb__corpus_files_free(&files);
    }
    return st;
}

emb_status emb_w2v_create_from_stream(const emb_w2v_options *opts, FILE *f, const char *name,
                                      emb_w2v **out) {
    if (opts && opts->phrases > 0)
        return emb__error(EMB_ERR_INVALID, "phrases read the corpus more than once, and an open "
                                           "stream cannot be read twice: give it as a path "
                                           "(emb_w2v_create_from_files, \"-\" for stdin)");
    return emb__w2v_create_stream(opts, f, name, out);
}

emb_status emb__w2v_create_stream(const emb_w2v_options *opts, FILE *f, const char *name,
                                  emb_w2v **out) {
    if (!out) return emb__null("out");
    if (!f) return emb__null("stream");
    emb__corpus_src *src;
    emb_status st = emb__corpus_open_stream(&src, f, name ? name : "corpus");
    if (st) return st;
    st = create_read(opts, src, name ? name : "corpus", NULL, 0, out);
    emb__corpus_close(src);
    return st;
}

emb_status emb_w2v_create_from_files(const emb_w2v_options *opts, const char *const *paths,
                                     size_t n, emb_w2v **out) {
    if (!out) return emb__null("out");
    if (!paths) return emb__null("paths");
    if (opts && opts->phrases > 0) { /* the corpus read once per pass, then through them */
        emb_status st = emb_w2v_options_check(opts);
        return st ? st : emb__w2v_create_phrased(opts, paths, n, out);
    }
    return create_read(opts, NULL, NULL, paths, n, out);
}

emb_status emb_w2v_create_from_file(const emb_w2v_options *opts, const char *path, emb_w2v **out) {
    if (!out) return emb__null("out");
    if (!path) return emb__null("path");
    return emb_w2v_create_from_files(opts, &path, 1, out);
}

emb_status emb_w2v_create_from_ids(const emb_w2v_options *opts, const emb_vocab *vocab,
                                   const int32_t *ids, int64_t n, emb_w2v **out) {
    if (!out) return emb__null("out");
    if (!vocab) return emb__null("vocab");
    if (n < 0) return emb__error(EMB_ERR_INVALID, "n must be >= 0, got %" PRId64, n);
    if (n > 0 && !ids) return emb__null("ids");
    emb_status st = emb_w2v_options_check(opts);
    if (st || (st = emb__w2v_no_phrases(opts, "a run from token ids"))) return st;
    int64_t V = emb_vocab_num_words(vocab), tokens = 0;
    if (V < 1) return emb__error(EMB_ERR_INVALID, "the vocabulary is empty");
    if (V >= INT32_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "a vocabulary of %" PRId64 " words is too large", V);
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < -1 || ids[i] >= V)
            return emb__error(EMB_ERR_INDEX,
                              "token id %" PRId32 " at position %" PRId64
                              " is out of range for a vocabulary of %" PRId64
                              " words (valid: [0, %" PRId64 ") or -1)",
                              ids[i], i, V, V);
        tokens += ids[i] >= 0;
    }
    if (tokens == 0) return emb__error(EMB_ERR_INVALID, "the corpus is empty (no tokens)");
    for (int64_t i = 0; i < V; i++)
        if (emb_vocab_count(vocab, i) < 1)
            return emb__error(EMB_ERR_INVALID,
                              "word %" PRId64 " has count %" PRId64 "; training needs counts >= 1",
                              i, emb_vocab_count(vocab, i));
    emb_vocab *copy;
    if ((st = emb_vocab_create(&copy))) return st;
    for (int64_t i = 0; i < V && st == EMB_OK; i++) {
        size_t len;
        const char *s = emb_vocab_word(vocab, i, &len);
        st = emb_vocab_add(copy, s, len, emb_vocab_count(vocab, i), NULL, NULL);
    }
    int32_t *ids2 = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (st || !ids2) {
        emb_vocab_free(copy), free(ids2);
        return st ? st : emb__error(EMB_ERR_NOMEM, "cannot copy %" PRId64 " token ids", n);
    }
    if (n) memcpy(ids2, ids, (size_t)n * sizeof(int32_t));
    emb__w2v_ids store;
    emb__w2v_ids_use_memory(&store, ids2, n);
    return emb__w2v_setup(opts, copy, &store, out);
}
