/* word2vec training: options, setup (tables, sampling tables), the training loop and its
 * threads (include/emb/word2vec.h; the method is described in docs/word2vec.md). */
#include "w2v_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kernels/dispatch.h"

/* Tokens each lane processes per round (whole sentences; the round ends at the first
 * sentence end past this many tokens). Progress reports and checkpoints happen between
 * rounds, and with several lanes the lanes' copies of the output table are merged after
 * each (see lanes_own_output). On State of the Union at 2 threads (four seeds), rounds of 65,536
 * tokens lost about half an analogy point against updates in place (6.45% mean against
 * 7.00%); rounds of 16,384 and 4,096 were level with them (6.92%, 6.82%), and 4,096 took
 * 10% longer. */
#define EMB__W2V_ROUND 16384

/* ---- random numbers: xorshift64* per lane, seeded by splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t next_rng(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* ---- setup ---- */

static void w2v_free_parts(emb_w2v *w) {
    emb_vocab_free(w->vocab);
    emb__w2v_ids_close(&w->ids);
    emb_embedding_free(w->in);
    emb_embedding_free(w->out);
    free(w->keep), free(w->keep_all), free(w->alias), free(w->lanes);
    free(w->sub_off), free(w->sub_rows);
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

static inline int32_t sample_negative(const emb_w2v *w, uint64_t *rng) {
    uint64_t r = next_rng(rng);
    int64_t i = (int64_t)(((r >> 32) * (uint64_t)w->V) >> 32);
    emb__w2v_alias a = w->alias[i];
    return (uint32_t)r < a.thr ? (int32_t)i : a.alias; /* thr = UINT32_MAX: alias = i */
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

/* Splits the ids into nt contiguous lanes, each boundary at the first position at or past
 * the even split where one thread reading from the start would begin a sentence (after a
 * line end, or every max_sentence tokens within a long line): every lane trains exactly the
 * sentences one thread trains, and a corpus that is one long line is shared too. */
static emb_status split_lanes(emb_w2v *w) {
    emb__w2v_cursor c;
    emb_status st = emb__w2v_cursor_init(&c, &w->ids);
    if (st) return st;
    int64_t b = 0;
    w->lanes[0].lo = 0;
    for (int t = 1; t < w->nt && b >= 0; t++) {
        int64_t even = w->n_ids * t / w->nt;
        while (b >= 0 && b < even) b = next_sentence(w, &c, b);
        w->lanes[t].lo = b;
        w->lanes[t - 1].hi = b;
    }
    emb__w2v_cursor_free(&c);
    if (b < 0)
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
    w->nt = o->threads > 0 ? o->threads : emb_get_num_threads();
    if (w->nt < 1) w->nt = 1;
    w->o.threads = w->nt;
    size_t V = (size_t)w->V;
    w->keep = malloc(V * sizeof(uint32_t));
    w->keep_all = malloc(V * sizeof(bool));
    w->alias = malloc(V * sizeof(emb__w2v_alias));
    w->lanes = calloc((size_t)w->nt, sizeof(emb__w2v_lane));
    if (!w->keep || !w->keep_all || !w->alias || !w->lanes) {
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
    if (!st) st = split_lanes(w);
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
    st = src ? emb__w2v_read_corpus(opts, src, name, &v, &ids, skipped)
             : emb__w2v_read_paths(opts, paths, n, &v, &ids, skipped);
    if (st) return st;
    st = emb__w2v_setup(opts, v, &ids, out);
    if (st == EMB_OK) (*out)->skipped_invalid = skipped[0], (*out)->skipped_long = skipped[1];
    return st;
}

emb_status emb_w2v_create_from_stream(const emb_w2v_options *opts, FILE *f, const char *name,
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
    if (st) return st;
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

/* ---- training ---- */

bool emb__w2v_find_nonfinite(const emb_w2v *w, int *table, int64_t *row) {
    const int64_t dim = w->o.dim;
    for (int t = 0; t < 2; t++) {
        const float *x = t ? w->syn1 : w->syn0;
        for (int64_t r = 0; r < w->V; r++) {
            const float *v = x + r * dim;
            float acc = 0.0f;
            for (int64_t k = 0; k < dim; k++)
                acc += v[k] - v[k]; /* NaN iff a value is not finite */
            if (acc != 0.0f) {
                *table = t;
                *row = r;
                return true;
            }
        }
    }
    return false;
}

/* The error of a run whose vectors diverged (w->diverged set), naming what diverged. */
static emb_status diverged_error(const emb_w2v *w) {
    const emb_w2v_options *o = &w->o;
    char what[400];
    int table;
    int64_t row;
    if (emb__w2v_find_nonfinite(w, &table, &row)) {
        snprintf(what, sizeof what,
                 "the %s vector of \"%.200s\" (row %" PRId64 ") became NaN or infinite",
                 table ? "output" : "input", emb_vocab_word(w->vocab, row, NULL), row);
    } else { /* finite values whose dot products overflow: name the largest */
        float big = -1.0f;
        int64_t at = 0;
        for (int64_t i = 0; i < w->V * o->dim; i++)
            if (fabsf(w->syn0[i]) > big) big = fabsf(w->syn0[i]), at = i / o->dim;
        snprintf(what, sizeof what,
                 "dot products of the vectors overflowed (the input vector of \"%.200s\" "
                 "holds %g)",
                 emb_vocab_word(w->vocab, at, NULL), (double)big);
    }
    double total = (double)w->tokens * o->epochs;
    return emb__error(
        EMB_ERR_NUMERIC,
        "training diverged at epoch %d of %d (%.1f%% of the words): %s; alpha %g is too "
        "large for this corpus and these settings, try a smaller one",
        w->lanes[0].epoch + 1 > o->epochs ? o->epochs : w->lanes[0].epoch + 1, o->epochs,
        100.0 * (double)w->words_done / (total > 0 ? total : 1), what, o->alpha);
}

typedef struct {
    int32_t *sen;   /* [max_sentence] kept tokens of the current sentence */
    int32_t *ctx;   /* [2 * window] */
    int32_t *tgt;   /* [negative + 1] */
    int32_t *negs;  /* [2 * window * negative] */
    float *scratch; /* for the kernel */
    float *own;     /* [V * dim] the lane's copy of the output table, or NULL */
    uint8_t *dirty; /* [V] rows of the copy the lane changed this round */
    float *h;       /* [dim] for the loss (CBOW), when it is computed */
    double loss;    /* this round's loss terms and examples (o.compute_loss) */
    int64_t examples;
    bool nonfinite;      /* a score was NaN or infinite this round */
    emb__w2v_cursor cur; /* the lane's window on the token ids */
    bool read_failed;    /* an id could not be read back: the round stopped */
    int read_errno;
    int32_t *sub; /* with subwords: the input rows of a window (2 * window * sub_max) */
} lane_scratch;

/* Several threads: with every thread updating the output table in place (Hogwild), the
 * rows of the frequent words (most of the negatives) are written by both cores for nearly
 * every pair, and their cache lines travel between the cores on each write: skip-gram on 2
 * threads took half again as long as with copies, and in the phases of a virtual machine
 * where moving a line between the cores costs more, twice as long; CBOW with copies is a
 * little slower in the good phases, a price paid for not being much slower in the bad
 * (docs/PERFORMANCE.md, "Tuning constants"; the input table gained nothing from copies:
 * context rows are spread out by subsampling).
 * So each lane trains its own copy of the output table for a round, and the copies are
 * merged after it: a row one lane changed is taken from that lane; a row several lanes
 * changed becomes the round's starting value plus the sum of the lanes' changes (in lane
 * order); every copy then starts the next round from the merged table. A lane sees the
 * others' output-row updates one round late. A run whose copies would exceed
 * EMB__W2V_COPIES_MAX bytes updates the shared table in place. */
#define EMB__W2V_COPIES_MAX ((int64_t)1 << 30)

static bool lanes_own_output(const emb_w2v *w, int nl) {
    if (nl < 2) return false;
    double bytes = (double)nl * (double)w->V * (double)w->o.dim * sizeof(float);
    return bytes <= (double)EMB__W2V_COPIES_MAX;
}

/* Merges output rows [r0, r1) from the nt lanes' copies into the shared table and back into
 * every copy. */
static void merge_rows(const emb_w2v *w, const lane_scratch *ls, int nt, int64_t r0, int64_t r1) {
    const int64_t dim = w->o.dim;
    for (int64_t r = r0; r < r1; r++) {
        int changed = 0, last = 0;
        for (int t = 0; t < nt; t++)
            if (ls[t].dirty[r]) changed++, last = t;
        if (changed == 0) continue;
        float *row = w->syn1 + r * dim;
        if (changed == 1) {
            memcpy(row, ls[last].own + r * dim, (size_t)dim * sizeof(float));
        } else {
            for (int64_t q = 0; q < dim; q++) {
                float v = row[q], sum = v;
                for (int t = 0; t < nt; t++)
                    if (ls[t].dirty[r]) sum = sum + (ls[t].own[r * dim + q] - v);
                row[q] = sum;
            }
        }
        for (int t = 0; t < nt; t++) {
            if (t != last || changed > 1)
                memcpy(ls[t].own + r * dim, row, (size_t)dim * sizeof(float));
            ls[t].dirty[r] = 0;
        }
    }
}

/* One window with subwords (fastText's update): each input is the mean of a word's subword
 * rows and the gradient goes to every one of them (the kernel's CBOW form). Skip-gram: one
 * update per context word, its subword rows against the centre and fresh negatives (or the
 * window's shared ones); CBOW: the subword rows of all context words together. */
static void subword_window(const emb_w2v *w, emb__w2v_lane *l, lane_scratch *s, float *syn1, int m,
                           float alpha, emb__sgns_step_fn step) {
    const emb_w2v_options *o = &w->o;
    const int K = o->negative;
    const bool cbow = o->model == EMB_W2V_CBOW, draw_once = cbow || o->shared_negatives;
    int n = 0;
    for (int c = 0; c < m; c++) {
        if (c == 0 || !draw_once) {
            for (int k = 1; k <= K; k++) s->tgt[k] = sample_negative(w, &l->rng);
            if (s->dirty)
                for (int k = 1; k <= K; k++) s->dirty[s->tgt[k]] = 1;
        }
        if (!cbow) n = 0;
        for (int64_t q = w->sub_off[s->ctx[c]]; q < w->sub_off[s->ctx[c] + 1]; q++)
            s->sub[n++] = w->sub_rows[q];
        if (!cbow && !step(w->syn0, syn1, o->dim, s->sub, n, s->tgt, K + 1, alpha, true, true,
                           w->sigmoid, s->scratch))
            s->nonfinite = true;
    }
    if (cbow && !step(w->syn0, syn1, o->dim, s->sub, n, s->tgt, K + 1, alpha, true, o->cbow_mean,
                      w->sigmoid, s->scratch))
        s->nonfinite = true;
}

/* Trains lane t for one round: whole sentences from its position until at least
 * EMB__W2V_ROUND tokens (a distributed run's round_tokens) were processed or its range ends. alpha0
 * is the learning rate at words_done0 (the global count at the start of the round); the lane
 * extrapolates the global progress as its own count times the number of lanes. Returns tokens
 * processed. */
static int64_t train_round(emb_w2v *w, int t, int64_t done0, emb__sgns_step_fn step,
                           lane_scratch *s) {
    /* The lane's state lives in this thread's own copy while it works: the lanes' structs
     * share cache lines, and the random state changes several times per token. */
    emb__w2v_lane lane = w->lanes[t], *l = &lane;
    s->nonfinite = false;
    const emb_w2v_options *o = &w->o;
    float *syn0 = w->syn0, *syn1 = s->own ? s->own : w->syn1;
    uint8_t *d1 = s->dirty;
    const double total = (double)w->tokens * o->epochs;
    const bool cbow = o->model == EMB_W2V_CBOW;
    int64_t processed = 0;
    const int64_t round =
        w->dist && w->dist->round_tokens > 0 ? w->dist->round_tokens : EMB__W2V_ROUND;
    while (l->pos < l->hi && processed < round) {
        /* one sentence: up to max_sentence tokens, or to the next -1 */
        double frac = ((double)done0 + (double)processed * w->nt) / total;
        if (frac > 1) frac = 1;
        float alpha = (float)(o->alpha - (o->alpha - o->min_alpha) * frac);
        int n = 0;
        int64_t seen = 0;
        while (l->pos < l->hi && seen < o->max_sentence) {
            int32_t id = emb__w2v_id_at(&s->cur, l->pos);
            if (id == INT32_MIN) { /* the run stops with an error */
                s->read_failed = true;
                s->read_errno = errno;
                return 0;
            }
            l->pos++;
            if (id < 0) break;
            seen++;
            if (!w->keep_all[id] && (uint32_t)(next_rng(&l->rng) >> 32) >= w->keep[id]) continue;
            s->sen[n++] = id;
        }
        processed += seen;
        for (int i = 0; i < n; i++) {
            int b = (int)(next_rng(&l->rng) % (uint64_t)o->window);
            int win = o->window - b, m = 0;
            int lo = i - win < 0 ? 0 : i - win, hi = i + win >= n ? n - 1 : i + win;
            for (int j = lo; j <= hi; j++)
                if (j != i) s->ctx[m++] = s->sen[j];
            if (m == 0) continue;
            s->tgt[0] = s->sen[i];
            if (d1) d1[s->tgt[0]] = 1;
            if (w->sub_off) {
                subword_window(w, l, s, syn1, m, alpha, step);
                continue;
            }
            if (cbow || o->shared_negatives) {
                for (int k = 1; k <= o->negative; k++) s->tgt[k] = sample_negative(w, &l->rng);
                if (d1)
                    for (int k = 1; k <= o->negative; k++) d1[s->tgt[k]] = 1;
                if (o->compute_loss) {
                    s->loss += emb__w2v_step_loss(syn0, syn1, o->dim, s->ctx, m, s->tgt,
                                                  o->negative + 1, cbow, o->cbow_mean, s->h);
                    s->examples += cbow ? 1 : m;
                }
                if (!step(syn0, syn1, o->dim, s->ctx, m, s->tgt, o->negative + 1, alpha, cbow,
                          o->cbow_mean, w->sigmoid, s->scratch))
                    s->nonfinite = true;
                continue;
            }
            /* A fresh draw of negatives for every pair, all drawn first (the same random
             * numbers in the same order) so that the next pair's rows can be fetched from
             * memory while this pair is computed. */
            const int K = o->negative;
            int32_t *negs = s->negs;
            for (int c = 0; c < m * K; c++) negs[c] = sample_negative(w, &l->rng);
            if (d1)
                for (int c = 0; c < m * K; c++) d1[negs[c]] = 1;
            const int64_t row_bytes = o->dim * (int64_t)sizeof(float);
            for (int c = -1; c < m; c++) {
                if (c + 1 < m) {
                    const char *x = (const char *)(syn0 + (int64_t)s->ctx[c + 1] * o->dim);
                    for (int64_t off = 0; off < row_bytes; off += 64)
                        __builtin_prefetch(x + off, 1, 3);
                    for (int k = 0; k < K; k++) {
                        const char *y =
                            (const char *)(syn1 + (int64_t)negs[(c + 1) * K + k] * o->dim);
                        for (int64_t off = 0; off < row_bytes; off += 64)
                            __builtin_prefetch(y + off, 1, 3);
                    }
                }
                if (c < 0) {
                    /* the centre's output row, the same for every pair of this window */
                    const char *y = (const char *)(syn1 + (int64_t)s->tgt[0] * o->dim);
                    for (int64_t off = 0; off < row_bytes; off += 64)
                        __builtin_prefetch(y + off, 1, 3);
                    continue;
                }
                memcpy(s->tgt + 1, negs + c * K, (size_t)K * sizeof(int32_t));
                if (o->compute_loss) {
                    s->loss += emb__w2v_step_loss(syn0, syn1, o->dim, s->ctx + c, 1, s->tgt, K + 1,
                                                  false, false, NULL);
                    s->examples++;
                }
                if (!step(syn0, syn1, o->dim, s->ctx + c, 1, s->tgt, K + 1, alpha, false, false,
                          w->sigmoid, s->scratch))
                    s->nonfinite = true;
            }
        }
    }
    w->lanes[t] = lane;
    return processed;
}

/* One round of every lane of this process (lane lane0 + t is share t), then the merge of the
 * lanes' output rows in blocks of 64 rows split between the shares. */
typedef struct round_ctx {
    emb_w2v *w;
    int lane0, nl;
    int64_t done0;
    emb__sgns_step_fn step;
    lane_scratch *ls;
    int64_t *done;
} round_ctx;

static void round_share(void *p, int t, int nt) {
    (void)nt;
    const round_ctx *r = p;
    r->done[t] = train_round(r->w, r->lane0 + t, r->done0, r->step, &r->ls[t]);
}

static void merge_share(void *p, int64_t b0, int64_t b1, int ith) {
    (void)ith;
    const round_ctx *r = p;
    for (int64_t b = b0; b < b1; b++) {
        int64_t r0 = b * 64, r1 = r0 + 64 < r->w->V ? r0 + 64 : r->w->V;
        merge_rows(r->w, r->ls, r->nl, r0, r1);
    }
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Allocates a lane's scratch (its own output copy aside); false when out of memory (what was
 * allocated is freed with the rest). */
static bool lane_scratch_init(const emb_w2v *w, lane_scratch *s) {
    const emb_w2v_options *o = &w->o;
    int64_t m = 2 * (int64_t)o->window, n = o->negative + 1;
    size_t scratch_floats = (size_t)((m + n + 2) * o->dim + m * n);
    /* Each lane's small arrays in their own cache lines (emb__malloc: 64-byte blocks): the
     * lanes write them for every pair, and neighbouring malloc blocks would share lines
     * between threads. */
    /* a sentence is at most max_sentence tokens, and never longer than the corpus */
    int64_t longest = o->max_sentence < w->n_ids ? o->max_sentence : (w->n_ids > 0 ? w->n_ids : 1);
    s->sen = emb__malloc((size_t)longest * sizeof(int32_t));
    s->ctx = emb__malloc((size_t)m * sizeof(int32_t));
    s->tgt = emb__malloc((size_t)n * sizeof(int32_t));
    s->negs = emb__malloc((size_t)(m * o->negative) * sizeof(int32_t));
    s->scratch = emb__malloc(scratch_floats * sizeof(float));
    s->h = emb__malloc((size_t)o->dim * sizeof(float));
    bool ok = s->sen && s->ctx && s->tgt && s->negs && s->scratch && s->h &&
              emb__w2v_cursor_init(&s->cur, &w->ids) == EMB_OK;
    if (w->sub_off) ok = ok && (s->sub = emb__malloc((size_t)(m * w->sub_max) * sizeof(int32_t)));
    return ok;
}

emb_status emb_w2v_train(emb_w2v *w, emb_w2v_progress_fn progress, void *user) {
    if (!w) return emb__null("w2v");
    if (w->diverged) return diverged_error(w);
    const emb_w2v_options *o = &w->o;
    emb__w2v_dist *dist = w->dist;
    /* the lanes this process trains (all of them, unless a distributed run shares them) */
    const int nt = w->nt, lane0 = dist ? dist->lane0 : 0, nl = dist ? dist->nlocal : nt;
    lane_scratch *ls = calloc((size_t)nl, sizeof *ls);
    if (!ls) return emb__error(EMB_ERR_NOMEM, "cannot allocate training scratch");
    bool ok = true;
    for (int t = 0; t < nl; t++) ok = lane_scratch_init(w, &ls[t]) && ok;
    bool own = ok && lanes_own_output(w, nl);
    const size_t table_floats = (size_t)w->V * (size_t)o->dim;
    for (int t = 0; own && t < nl; t++) {
        ls[t].own = emb__malloc(table_floats * sizeof(float));
        ls[t].dirty = emb__malloc((size_t)w->V);
        own = ls[t].own && ls[t].dirty;
        if (ls[t].own) memcpy(ls[t].own, w->syn1, table_floats * sizeof(float));
        if (ls[t].dirty) memset(ls[t].dirty, 0, (size_t)w->V);
    }
    if (!own) /* no memory for the copies (or not wanted): update the shared table in place */
        for (int t = 0; t < nl; t++) {
            emb__free(ls[t].own), emb__free(ls[t].dirty);
            ls[t].own = NULL, ls[t].dirty = NULL;
        }
    emb_status st = EMB_OK;
    if (!ok) st = emb__error(EMB_ERR_NOMEM, "cannot allocate training scratch");
    emb__sgns_step_fn step = emb__sgns_step();
    double t0 = now_seconds();
    const int64_t done_start = w->words_done;
    int64_t *done = calloc((size_t)nl, sizeof(int64_t));
    if (!done && !st) st = emb__error(EMB_ERR_NOMEM, "cannot allocate training scratch");
    while (st == EMB_OK) {
        if (w->lanes[0].epoch >= o->epochs) break; /* lanes share the epoch */
        /* advance epochs: when every lane is at the end of its range in the same epoch */
        bool all_end = true;
        for (int t = 0; t < nt; t++) all_end = all_end && w->lanes[t].pos >= w->lanes[t].hi;
        if (all_end) {
            for (int t = 0; t < nt; t++) {
                w->lanes[t].epoch++;
                w->lanes[t].pos = w->lanes[t].lo;
            }
            w->epoch_loss = 0, w->epoch_examples = 0;
            continue;
        }
        round_ctx rc = {w, lane0, nl, w->words_done, step, ls, done};
        emb__parallel(nl, round_share, &rc);
        if (own) emb__parallel_for(nl, (w->V + 63) / 64, merge_share, &rc);
        emb__w2v_round sum = {0, 0.0, 0, 0, 0, 0};
        for (int t = 0; t < nl; t++) { /* in lane order: the same sum at every run */
            sum.done += done[t];
            sum.loss += ls[t].loss, sum.examples += ls[t].examples;
            ls[t].loss = 0, ls[t].examples = 0;
            if (ls[t].read_failed && !sum.read_failed)
                sum.read_failed = 1, sum.read_errno = ls[t].read_errno;
            sum.nonfinite |= ls[t].nonfinite;
        }
        if (dist && (st = dist->round(dist->ctx, w, &sum)) != EMB_OK) {
            st = emb__error(st, "%s", dist->msg);
            break;
        }
        w->words_done += sum.done;
        w->epoch_loss += sum.loss, w->epoch_examples += sum.examples;
        if (sum.read_failed) {
            st = emb__error(EMB_ERR_IO, "cannot read back the corpus's token ids: %s",
                            sum.read_errno ? strerror(sum.read_errno)
                                           : "the temporary file is shorter");
            break;
        }
        w->diverged |= sum.nonfinite != 0;
        if (w->diverged) {
            st = diverged_error(w);
            break;
        }
        if (progress) {
            emb_w2v_progress p;
            p.words_done = w->words_done;
            p.words_total = w->tokens * o->epochs;
            p.epoch = w->lanes[0].epoch;
            double frac = (double)w->words_done / (double)p.words_total;
            p.alpha = o->alpha - (o->alpha - o->min_alpha) * (frac > 1 ? 1 : frac);
            p.seconds = now_seconds() - t0;
            p.words_done_here = w->words_done - done_start;
            p.loss = w->epoch_loss;
            p.loss_examples = w->epoch_examples;
            int stop = progress(&p, user);
            if (dist) stop = dist->agree(dist->ctx, stop); /* every process stops, or none */
            if (stop) st = emb__error(EMB_ERR_CANCELLED, "training was cancelled");
        } else if (dist) {
            dist->agree(dist->ctx, 0); /* the same calls on every process */
        }
    }
    /* A value may have become infinite in a last update that no score has seen yet. */
    int table;
    int64_t row;
    if (st == EMB_OK && emb__w2v_find_nonfinite(w, &table, &row)) {
        w->diverged = true;
        st = diverged_error(w);
    }
    for (int t = 0; t < nl; t++) {
        emb__free(ls[t].sen), emb__free(ls[t].ctx), emb__free(ls[t].tgt), emb__free(ls[t].negs);
        emb__free(ls[t].scratch), emb__free(ls[t].h), emb__free(ls[t].sub);
        emb__free(ls[t].own), emb__free(ls[t].dirty);
        emb__w2v_cursor_free(&ls[t].cur);
    }
    free(ls);
    free(done);
    return st;
}

/* ---- accessors ---- */

const emb_vocab *emb_w2v_vocab(const emb_w2v *w) {
    return w ? w->vocab : NULL;
}

emb_status emb_w2v_vectors(const emb_w2v *w, emb_tensor *view) {
    if (!w) return emb__null("w2v");
    if (!view) return emb__null("view");
    emb_status st = emb_embedding_weight(w->in, view);
    if (st == EMB_OK) view->shape[0] = w->V; /* the words' rows (then the n-gram buckets) */
    return st;
}

emb_embedding *emb_w2v_input_embedding(const emb_w2v *w) {
    return w ? w->in : NULL;
}
emb_embedding *emb_w2v_output_embedding(const emb_w2v *w) {
    return w ? w->out : NULL;
}
int64_t emb_w2v_corpus_tokens(const emb_w2v *w) {
    return w ? w->tokens : 0;
}
void emb_w2v_skipped(const emb_w2v *w, int64_t *invalid, int64_t *too_long) {
    if (invalid) *invalid = w ? w->skipped_invalid : 0;
    if (too_long) *too_long = w ? w->skipped_long : 0;
}
int64_t emb_w2v_words_done(const emb_w2v *w) {
    return w ? w->words_done : 0;
}
emb_w2v_options emb_w2v_options_of(const emb_w2v *w) {
    return w ? w->o : emb_w2v_options_default(EMB_W2V_SKIPGRAM);
}
