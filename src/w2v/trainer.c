/* word2vec training: the training loop and its threads, rounds and the merge of the lanes'
 * output tables (include/emb/word2vec.h; the method is described in docs/word2vec.md; runs
 * are created in create.c). */
#include "w2v_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
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

static inline uint64_t next_rng(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* The negative that the random number r draws: its high half picks an entry of the alias
 * table, its low half the entry's word or its alias. */
static inline int64_t alias_entry(const emb_w2v *w, uint64_t r) {
    return (int64_t)(((r >> 32) * (uint64_t)w->V) >> 32);
}

static inline int32_t negative_of(const emb_w2v *w, uint64_t r) {
    const int64_t i = alias_entry(w, r);
    emb__w2v_alias a = w->alias[i];
    return (uint32_t)r < a.thr ? (int32_t)i : a.alias; /* thr = UINT32_MAX: alias = i */
}

static inline int32_t sample_negative(const emb_w2v *w, uint64_t *rng) {
    return negative_of(w, next_rng(rng));
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
    int32_t *sen;    /* [max_sentence] kept tokens of the current sentence */
    int32_t *ctx;    /* [2][2 * window]: this window's and the next one's */
    int32_t *tgt;    /* [negative + 1] */
    int32_t *negs;   /* [2][2 * window * negative] */
    uint64_t *draws; /* [3][1 + negative]: random numbers of windows ahead (one set a window) */
    float *scratch;  /* for the kernel */
    float *own;      /* [nhot * dim] the lane's copy of the output table's first rows, or NULL */
    int64_t nhot;    /* rows in own (0: none) */
    float *own_in;   /* [nhot_in * dim] its copy of the input table's first rows, or NULL */
    int64_t nhot_in; /* rows in own_in (0: none) */
    uint8_t *dirty;  /* [V] rows the lane changed this round: DIRTY_OUT, DIRTY_IN bits */
    float *h;        /* [dim] for the loss (CBOW), when it is computed */
    double loss;     /* the current lane round's loss terms and examples (o.compute_loss) */
    int64_t examples;
    bool nonfinite;   /* a score was NaN or infinite this round */
    bool read_failed; /* an id could not be read back: the round stopped */
    int read_errno;
    int32_t *sub; /* with subwords: the input rows of a window (2 * window * sub_max) */
} lane_scratch;

/* Several threads: with every thread updating the output table in place (Hogwild), the
 * rows of the frequent words (most of the negatives) are written by both cores for nearly
 * every pair, and their cache lines travel between the cores on each write: skip-gram on 2
 * threads took half again as long as with copies, and in the phases of a virtual machine
 * where moving a line between the cores costs more, twice as long; CBOW with copies is a
 * little slower in the good phases, a price paid for not being much slower in the bad
 * (docs/PERFORMANCE.md, "Tuning constants"). The input table's frequent rows (the context
 * rows of the frequent words, written at nearly every CBOW window) are copied the same way:
 * on a Zen 5 machine this made 2-thread CBOW 14-16% faster (docs/word2vec.md).
 * So each lane trains its own copy of the output table's most frequent rows for a round, and
 * the copies are merged after it: a row one lane changed is taken from that lane; a row
 * several lanes changed becomes the round's starting value plus the sum of the lanes' changes
 * (in lane order); every copy then starts the next round from the merged rows. A lane sees
 * the others' updates of those rows one round late. The other rows, each written by a lane
 * only now and then, are updated in place: copies of the whole table made the merge read and
 * write most of it every round (negatives reach most rows within a round) and tripled the
 * output table in the caches. A run whose output copies would exceed EMB__W2V_COPIES_MAX
 * bytes updates every row in place, and one whose input copies would bring the total above
 * it updates the input rows in place. */
#define EMB__W2V_COPIES_MAX ((int64_t)1 << 30)

/* The output rows each lane keeps its own copy of: the first 2,048 of the vocabulary, which
 * is sorted by count, so the rows most negatives and targets land on (test hook: the unit
 * tests lower it; internal). */
int64_t emb__w2v_hot_rows = 2048;
/* The same for the input table (CBOW and skip-gram without subwords, in one process): the
 * context rows of the frequent words are written by every thread at nearly every window. */
int64_t emb__w2v_hot_in_rows = 2048;
#define DIRTY_OUT 1
#define DIRTY_IN  2
/* The rows of a table (up to `want`) each of nth threads keeps its own copy of, beside the
 * `taken` rows a thread already copies of the other table: 0 (none, every row in place) when
 * the copies of both would exceed EMB__W2V_COPIES_MAX bytes. */
static int64_t lanes_own_rows(const emb_w2v *w, int nth, int64_t want, int64_t taken) {
    if (nth < 2) return 0;
    const int64_t h = w->V < want ? w->V : want;
    double bytes = (double)nth * (double)(h + taken) * (double)w->o.dim * sizeof(float);
    return bytes <= (double)EMB__W2V_COPIES_MAX ? h : 0;
}

/* The merge after a round, in two phases, so that every core writes only its own copy and
 * reads the others' rows in bulk. Phase 1 (merge_share, one share per lane) writes the shared
 * table's copied rows: a row one lane changed is copied from that lane's copy, by that lane's
 * share (the copy is read where it is cached); a row several lanes changed becomes v + (c_t - v)
 * + ... over the changing lanes t in order (v its value at the round's start), by the share of
 * its block of 64 rows. from[r] records what phase 1 found. Phase 2 (take_merged, at the start
 * of the next round on each lane's own thread) copies into the lane's copy the rows another
 * lane changed. Merging on one thread into every copy made the other core fetch each of those
 * rows again in the middle of its next round, one cache miss at a time: on a virtual machine
 * whose cores were 250 ns apart this cost 2-thread CBOW a quarter of its time
 * (docs/word2vec.md, "The merge where the rows are"). The values are the same bits either way. */
#define FROM_NONE        (-1) /* no lane changed the row */
#define FROM_MANY        (-2) /* several did (else: the share of the one lane that did) */
#define EMB__MERGE_BLOCK 64

/* The sum of a row several lanes changed into the table's row (v on entry): each element
 * becomes v + (c_t - v) + ... over the changing lanes t in order, a block of elements at a
 * time with the lanes outside (the same operations in the same order as element by element,
 * but vectorisable). */
static void merge_sum(float *restrict row, const lane_scratch *ls, int nt, int64_t r, int64_t dim,
                      uint8_t bit, bool input) {
    for (int64_t q0 = 0; q0 < dim; q0 += EMB__MERGE_BLOCK) {
        const int64_t nq = dim - q0 < EMB__MERGE_BLOCK ? dim - q0 : EMB__MERGE_BLOCK;
        float v[EMB__MERGE_BLOCK], sum[EMB__MERGE_BLOCK];
        memcpy(v, row + q0, (size_t)nq * sizeof(float));
        memcpy(sum, v, (size_t)nq * sizeof(float));
        for (int t = 0; t < nt; t++) {
            if (!(ls[t].dirty[r] & bit)) continue;
            const float *c = (input ? ls[t].own_in : ls[t].own) + r * dim + q0;
            for (int64_t q = 0; q < nq; q++) sum[q] = sum[q] + (c[q] - v[q]);
        }
        memcpy(row + q0, sum, (size_t)nq * sizeof(float));
    }
}

/* Phase 1 of the merge of one table's copied rows, share u of nt (one per lane). The lanes'
 * dirty marks are only read here (each lane clears its own in phase 2). */
static void merge_into_table(const emb_w2v *w, const lane_scratch *ls, int nt, int u, bool input,
                             int32_t *from) {
    const int64_t dim = w->o.dim, nhot = input ? ls[0].nhot_in : ls[0].nhot;
    const uint8_t bit = input ? DIRTY_IN : DIRTY_OUT;
    float *table = input ? w->syn0 : w->syn1;
    for (int64_t r = 0; r < nhot; r++) {
        int changed = 0, last = 0;
        for (int t = 0; t < nt; t++)
            if (ls[t].dirty[r] & bit) changed++, last = t;
        const bool block_mine = (r / EMB__MERGE_BLOCK) % nt == u;
        float *row = table + r * dim;
        if (changed == 1 && last == u) {
            memcpy(row, (input ? ls[u].own_in : ls[u].own) + r * dim, (size_t)dim * sizeof(float));
            from[r] = u;
        } else if (changed == 0 && block_mine) {
            from[r] = FROM_NONE;
        } else if (changed > 1 && block_mine) {
            if (nt == 2) { /* both lanes changed it: one pass over the three rows */
                const float *restrict a = (input ? ls[0].own_in : ls[0].own) + r * dim;
                const float *restrict b = (input ? ls[1].own_in : ls[1].own) + r * dim;
                for (int64_t q = 0; q < dim; q++) {
                    float v = row[q], sum = v + (a[q] - v);
                    row[q] = sum + (b[q] - v);
                }
            } else {
                merge_sum(row, ls, nt, r, dim, bit, input);
            }
            from[r] = FROM_MANY;
        }
    }
}

/* Phase 2 for lane u (on its own thread): the merged rows another lane changed (every row when
 * `all`: the round's first, or after a distributed run's merge changed the table) into its
 * copy; its dirty marks cleared. */
static void take_merged(const emb_w2v *w, lane_scratch *s, int u, const int32_t *from, bool all,
                        bool input) {
    const int64_t dim = w->o.dim, nhot = input ? s->nhot_in : s->nhot;
    const float *table = input ? w->syn0 : w->syn1;
    float *own = input ? s->own_in : s->own;
    for (int64_t r = 0; r < nhot; r++)
        if (all || (from[r] != FROM_NONE && from[r] != u))
            memcpy(own + r * dim, table + r * dim, (size_t)dim * sizeof(float));
    const uint8_t keep = (uint8_t) ~(input ? DIRTY_IN : DIRTY_OUT);
    for (int64_t r = 0; r < nhot; r++) s->dirty[r] &= keep;
}

/* One window with subwords (fastText's update): each input is the mean of a word's subword
 * rows and the gradient goes to every one of them (the kernel's CBOW form). Skip-gram: one
 * update per context word, its subword rows against the centre and fresh negatives (or the
 * window's shared ones); CBOW: the subword rows of all context words together. */
static void subword_window(const emb_w2v *w, emb__w2v_lane *l, lane_scratch *s,
                           const emb__sgns_rows *out, int m, float alpha, emb__sgns_step_fn step) {
    const emb_w2v_options *o = &w->o;
    const int K = o->negative;
    const bool cbow = o->model == EMB_W2V_CBOW, draw_once = cbow || o->shared_negatives;
    int n = 0;
    /* a distributed run saves the n-gram rows a round changes as they were (src/mpi/mpi_w2v.c) */
    void (*touch)(void *, const int32_t *, int) = w->dist ? w->dist->touch : NULL;
    const emb__sgns_rows in = {w->syn0, NULL, 0}; /* the n-gram rows in place */
    for (int c = 0; c < m; c++) {
        if (c == 0 || !draw_once) {
            for (int k = 1; k <= K; k++) s->tgt[k] = sample_negative(w, &l->rng);
            if (s->dirty)
                for (int k = 1; k <= K; k++) s->dirty[s->tgt[k]] |= DIRTY_OUT;
        }
        if (!cbow) n = 0;
        for (int64_t q = w->sub_off[s->ctx[c]]; q < w->sub_off[s->ctx[c] + 1]; q++)
            s->sub[n++] = w->sub_rows[q];
        if (cbow) continue;
        if (o->compute_loss) { /* the input is the mean of the word's subword rows */
            s->loss +=
                emb__w2v_step_loss(&in, out, o->dim, s->sub, n, s->tgt, K + 1, true, true, s->h);
            s->examples++;
        }
        if (touch) touch(w->dist->ctx, s->sub, n);
        if (!step(&in, out, o->dim, s->sub, n, s->tgt, K + 1, alpha, true, true, w->sigmoid,
                  s->scratch))
            s->nonfinite = true;
    }
    if (!cbow) return;
    if (o->compute_loss) {
        s->loss += emb__w2v_step_loss(&in, out, o->dim, s->sub, n, s->tgt, K + 1, true,
                                      o->cbow_mean, s->h);
        s->examples++;
    }
    if (touch) touch(w->dist->ctx, s->sub, n);
    if (!step(&in, out, o->dim, s->sub, n, s->tgt, K + 1, alpha, true, o->cbow_mean, w->sigmoid,
              s->scratch))
        s->nonfinite = true;
}

/* The random draws of window i of the sentence sen[0..n), in the order the trainer has
 * always made them: the reduced window, then (when the window has a context, and negs is
 * not NULL) the negatives: one set for the window (CBOW, shared negatives) or one per
 * context word, each set in context order. The contexts go to ctx; returns their count. pre,
 * when not NULL (one set of negatives a window), holds the window's random numbers taken from
 * rng earlier, in that order (the window's, then the K negatives'). */
static int draw_window(const emb_w2v *w, uint64_t *rng, const uint64_t *pre, const int32_t *sen,
                       int n, int i, int32_t *ctx, int32_t *negs, uint8_t *d1, bool mark_in) {
    const emb_w2v_options *o = &w->o;
    const uint64_t r0 = pre ? pre[0] : next_rng(rng);
    int win = o->window - (int)(r0 % (uint64_t)o->window), m = 0;
    int lo = i - win < 0 ? 0 : i - win, hi = i + win >= n ? n - 1 : i + win;
    for (int j = lo; j <= hi; j++)
        if (j != i) ctx[m++] = sen[j];
    if (m == 0) return 0;
    if (d1) d1[sen[i]] |= DIRTY_OUT;
    if (mark_in)
        for (int q = 0; q < m; q++) d1[ctx[q]] |= DIRTY_IN;
    if (!negs) return m;
    int draws = o->negative * (o->model == EMB_W2V_CBOW || o->shared_negatives ? 1 : m);
    for (int c = 0; c < draws; c++)
        negs[c] = pre ? negative_of(w, pre[1 + c]) : sample_negative(w, rng);
    if (d1)
        for (int c = 0; c < draws; c++) d1[negs[c]] |= DIRTY_OUT;
    return m;
}

static inline void prefetch_row(const float *row, int64_t dim) {
    const int64_t bytes = dim * (int64_t)sizeof(float);
    for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch((const char *)row + off, 1, 3);
}

/* Prefetches the rows ids[0..c) of a table (a thread's copy or the shared rows). */
static inline void prefetch_rows(const emb__sgns_rows *t, const int32_t *ids, int c, int64_t dim) {
    for (int q = 0; q < c; q++) prefetch_row(emb__sgns_row(t, ids[q], dim), dim);
}

/* One sentence's windows. Each window's draws are made one window ahead (the same random
 * numbers in the same order), so that the rows of the next example are fetched from memory
 * while this one is computed: with negatives per pair, the next pair's (and the first pair
 * of the next window with its centre); with one set per window, the next window's. With one
 * set per window the random numbers themselves are taken two windows further ahead (every
 * window of a sentence of two or more tokens takes 1 + K of them, in window order), and the
 * alias-table entries they pick are fetched then. */
static inline void take_draws(const emb_w2v *w, uint64_t *rng, uint64_t *set, int K) {
    set[0] = next_rng(rng);
    for (int q = 1; q <= K; q++) {
        set[q] = next_rng(rng);
        __builtin_prefetch(&w->alias[alias_entry(w, set[q])]);
    }
}

static void train_sentence(const emb_w2v *w, uint64_t *rng, lane_scratch *s,
                           const emb__sgns_rows *in, const emb__sgns_rows *out, int n, float alpha,
                           emb__sgns_step_fn step) {
    const emb_w2v_options *o = &w->o;
    const int K = o->negative, W2 = 2 * o->window;
    const int64_t dim = o->dim;
    const bool cbow = o->model == EMB_W2V_CBOW, once = cbow || o->shared_negatives;
    const bool mark_in = s->own_in != NULL;
    /* each set of negatives has a slot before it for the window's target: with one set a
     * window, the set and its target are the step's targets as they are (no copy) */
    int32_t *cx[2] = {s->ctx, s->ctx + W2}, *ng[2] = {s->negs + 1, s->negs + W2 * K + 2};
    int mm[2] = {0, 0};
    /* sets of random numbers of windows j (slot j % 3), taken up to three windows ahead */
    const bool ahead = once && n >= 2;
    uint64_t *set[3] = {s->draws, s->draws + (K + 1), s->draws + 2 * (K + 1)};
    for (int j = 0; ahead && j < 3 && j < n; j++) take_draws(w, rng, set[j], K);
    if (n > 0)
        mm[0] = draw_window(w, rng, ahead ? set[0] : NULL, s->sen, n, 0, cx[0], ng[0], s->dirty,
                            mark_in);
    if (ahead && 3 < n) take_draws(w, rng, set[0], K);
    if (mm[0] > 0) { /* the first window's first example, fetched just before it */
        prefetch_rows(in, cx[0], once ? mm[0] : 1, dim);
        prefetch_rows(out, ng[0], K, dim);
        prefetch_rows(out, s->sen, 1, dim);
    }
    for (int i = 0; i < n; i++) {
        const int cur = i & 1, nx = cur ^ 1, m = mm[cur];
        int32_t *ctx = cx[cur], *negs = ng[cur];
        mm[nx] = 0;
        if (i + 1 < n) {
            mm[nx] = draw_window(w, rng, ahead ? set[(i + 1) % 3] : NULL, s->sen, n, i + 1, cx[nx],
                                 ng[nx], s->dirty, mark_in);
            if (ahead && i + 4 < n) take_draws(w, rng, set[(i + 1) % 3], K);
        }
        if (m == 0) continue;
        if (once) {
            if (mm[nx] > 0) {
                prefetch_rows(out, ng[nx], K, dim);
                prefetch_rows(out, s->sen + i + 1, 1, dim);
            }
            /* Input rows: the next window's contexts were contexts of the windows before it,
             * except those entering it on the right; those are fetched two windows ahead
             * (prefetching every context of the next window spent the time on rows already
             * in the cache, and one window ahead was too late for CBOW's short step). */
            for (int d = 1; d <= 2 && i + d + o->window < n; d++)
                prefetch_rows(in, s->sen + i + d + o->window, 1, dim);
            int32_t *tgt = negs - 1;
            tgt[0] = s->sen[i];
            if (o->compute_loss) {
                s->loss +=
                    emb__w2v_step_loss(in, out, dim, ctx, m, tgt, K + 1, cbow, o->cbow_mean, s->h);
                s->examples += cbow ? 1 : m;
            }
            if (!step(in, out, dim, ctx, m, tgt, K + 1, alpha, cbow, o->cbow_mean, w->sigmoid,
                      s->scratch))
                s->nonfinite = true;
            continue;
        }
        for (int c = 0; c < m; c++) {
            if (c + 1 < m) {
                prefetch_rows(in, ctx + c + 1, 1, dim);
                prefetch_rows(out, negs + (c + 1) * K, K, dim);
            } else if (mm[nx] > 0) {
                prefetch_rows(in, cx[nx], 1, dim);
                prefetch_rows(out, ng[nx], K, dim);
                prefetch_rows(out, s->sen + i + 1, 1, dim);
            }
            s->tgt[0] = s->sen[i];
            memcpy(s->tgt + 1, negs + c * K, (size_t)K * sizeof(int32_t));
            if (o->compute_loss) {
                s->loss +=
                    emb__w2v_step_loss(in, out, dim, ctx + c, 1, s->tgt, K + 1, false, false, NULL);
                s->examples++;
            }
            if (!step(in, out, dim, ctx + c, 1, s->tgt, K + 1, alpha, false, false, w->sigmoid,
                      s->scratch))
                s->nonfinite = true;
        }
    }
}

/* Trains lane t for one round: whole sentences from its position until the tokens processed
 * weigh at least EMB__W2V_ROUND (a distributed run's round_tokens) times the corpus's mean
 * keep probability, each token weighing its own, or its range ends. done0 is the global count
 * at the start of the round; the lane extrapolates the global progress as its own count times
 * the ids over its range's. Returns tokens processed. */
static int64_t train_round(emb_w2v *w, int t, int64_t done0, emb__sgns_step_fn step,
                           lane_scratch *s, emb__w2v_cursor *cur, double round) {
    /* The lane's state lives in this thread's own copy while it works: the lanes' structs
     * share cache lines, and the random state changes several times per token. */
    emb__w2v_lane lane = w->lanes[t], *l = &lane;
    const emb_w2v_options *o = &w->o;
    const emb__sgns_rows out = {w->syn1, s->own, s->own ? s->nhot : 0};
    const emb__sgns_rows in = {w->syn0, s->own_in, s->own_in ? s->nhot_in : 0};
    uint8_t *d1 = s->dirty;
    const double total = (double)w->tokens * o->epochs;
    int64_t processed = 0;
    double work = 0;
    /* The run's progress is extrapolated from the lane's: its range is share of the ids, and
     * all the lanes go through theirs at the same pace (1 with one lane). */
    const double share = l->hi > l->lo ? (double)w->n_ids / (double)(l->hi - l->lo) : w->nt;
    while (l->pos < l->hi && work < round) {
        /* one sentence: up to max_sentence tokens, or to the next -1 */
        double frac = ((double)done0 + (double)processed * share) / total;
        if (frac > 1) frac = 1;
        float alpha = (float)(o->alpha - (o->alpha - o->min_alpha) * frac);
        int n = 0;
        int64_t seen = 0;
        while (l->pos < l->hi && seen < o->max_sentence) {
            int32_t id = emb__w2v_id_at(cur, l->pos);
            if (id == INT32_MIN) { /* the run stops with an error */
                s->read_failed = true;
                s->read_errno = errno;
                return 0;
            }
            l->pos++;
            if (id < 0) break;
            seen++;
            work += emb__w2v_keep_weight(w, id);
            if (!w->keep_all[id] && (uint32_t)(next_rng(&l->rng) >> 32) >= w->keep[id]) continue;
            s->sen[n++] = id;
        }
        processed += seen;
        if (w->sub_off)
            for (int i = 0; i < n; i++) {
                int m = draw_window(w, &l->rng, NULL, s->sen, n, i, s->ctx, NULL, d1, false);
                if (m == 0) continue;
                s->tgt[0] = s->sen[i];
                subword_window(w, l, s, &out, m, alpha, step);
            }
        else
            train_sentence(w, &l->rng, s, &in, &out, n, alpha, step);
    }
    w->lanes[t] = lane;
    return processed;
}

/* One round of every lane of this process (lane lane0 + t is share t), then the merge of the
 * lanes' output rows in blocks of 64 rows split between the shares. */
typedef struct round_ctx {
    emb_w2v *w;
    int lane0, nl, nth;
    int64_t done0;
    emb__sgns_step_fn step;
    lane_scratch *ls;     /* [nth] */
    emb__w2v_cursor *cur; /* [nl] */
    int64_t *done;        /* [nl] */
    double *loss;         /* [nl] */
    int64_t *examples;    /* [nl] */
    double round;
    emb__counter next;
    int32_t *from_out, *from_in; /* [nhot], [nhot_in]: what the last merge found (phase 1) */
    bool take_all;               /* the lanes take every copied row from the tables first */
} round_ctx;

static void round_share(void *p, int t, int nt) {
    round_ctx *r = p;
    lane_scratch *s = &r->ls[t];
    if (s->own) { /* phase 2 of the last merge */
        take_merged(r->w, s, t, r->from_out, r->take_all, false);
        if (s->own_in) take_merged(r->w, s, t, r->from_in, r->take_all, true);
    }
    /* lane t first, then the lanes past the first nt as the threads come for them: with a
     * lane per thread, each thread trains its own (the same work at every run) */
    for (int64_t k = t; k < r->nl; k = nt + emb__claim(&r->next)) {
        r->done[k] =
            train_round(r->w, r->lane0 + (int)k, r->done0, r->step, s, &r->cur[k], r->round);
        r->loss[k] = s->loss, r->examples[k] = s->examples;
        s->loss = 0, s->examples = 0;
    }
}

/* Share t of phase 1 of the merge (merge_into_table). */
static void merge_share(void *p, int t, int nt) {
    const round_ctx *r = p;
    merge_into_table(r->w, r->ls, nt, t, false, r->from_out);
    if (r->ls[0].own_in) merge_into_table(r->w, r->ls, nt, t, true, r->from_in);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Test hook (declared in src/mpi/mpi_internal.h, for the distributed tests that link the static
 * libraries): the threads' scratch is allocated for at most this many threads of a training
 * call (one per lane in the distributed tests), the others failing as if out of memory. INT_MAX
 * (the default): no limit. Tests only. */
int emb__w2v_max_scratch_lanes = INT_MAX;

/* Frees the scratch of nl lanes (ls may be NULL). */
static void lanes_scratch_free(lane_scratch *ls, int nl) {
    for (int t = 0; ls && t < nl; t++) {
        emb__free(ls[t].sen), emb__free(ls[t].ctx), emb__free(ls[t].tgt), emb__free(ls[t].negs);
        emb__free(ls[t].draws);
        emb__free(ls[t].scratch), emb__free(ls[t].h), emb__free(ls[t].sub);
        emb__free(ls[t].own), emb__free(ls[t].own_in), emb__free(ls[t].dirty);
    }
    free(ls);
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
    s->ctx = emb__malloc((size_t)(2 * m) * sizeof(int32_t)); /* two windows */
    s->tgt = emb__malloc((size_t)n * sizeof(int32_t));
    s->negs = emb__malloc((size_t)(2 * m * o->negative + 2) * sizeof(int32_t));
    s->draws = emb__malloc((size_t)(3 * n) * sizeof(uint64_t));
    s->scratch = emb__malloc(scratch_floats * sizeof(float));
    s->h = emb__malloc((size_t)o->dim * sizeof(float));
    bool ok = s->sen && s->ctx && s->tgt && s->negs && s->draws && s->scratch && s->h;
    if (w->sub_off) ok = ok && (s->sub = emb__malloc((size_t)(m * w->sub_max) * sizeof(int32_t)));
    return ok;
}

/* Gives each of the nth threads its copy of the output table's first rows (lanes_own_rows),
 * and *from the merge's record of them (of the output rows, then of the input rows): their
 * count, or 0 when there are none (one thread, or no memory for them: the shared table is then
 * updated in place). The copies are filled by the first round's phase 2, each on its thread. */
static int64_t threads_copy_rows(const emb_w2v *w, lane_scratch *ls, int nth, int32_t **from) {
    const int64_t nhot = lanes_own_rows(w, nth, emb__w2v_hot_rows, 0);
    bool own = nhot > 0;
    const size_t hot_floats = (size_t)nhot * (size_t)w->o.dim;
    for (int t = 0; own && t < nth; t++) {
        ls[t].own = emb__malloc(hot_floats * sizeof(float));
        ls[t].dirty = emb__malloc((size_t)w->V);
        ls[t].nhot = nhot;
        own = ls[t].own && ls[t].dirty;
        if (ls[t].dirty) memset(ls[t].dirty, 0, (size_t)w->V);
    }
    /* the input table's first rows too, with the same dirty marks (not with subwords, whose
     * input rows are n-gram buckets, nor in a distributed run, which merges in place): when
     * they cannot be allocated, the input table is updated in place */
    const int64_t nin =
        own && !w->sub_off && !w->dist ? lanes_own_rows(w, nth, emb__w2v_hot_in_rows, nhot) : 0;
    *from = own ? emb__malloc((size_t)(nhot + nin) * sizeof(int32_t)) : NULL;
    own = own && *from;
    if (!own) {
        for (int t = 0; t < nth; t++) {
            emb__free(ls[t].own), emb__free(ls[t].dirty);
            ls[t].own = NULL, ls[t].dirty = NULL, ls[t].nhot = 0;
        }
        return 0;
    }
    const size_t in_floats = (size_t)nin * (size_t)w->o.dim;
    bool own_in = nin > 0;
    for (int t = 0; own_in && t < nth; t++) {
        ls[t].own_in = emb__malloc(in_floats * sizeof(float));
        ls[t].nhot_in = nin;
        own_in = ls[t].own_in != NULL;
    }
    if (!own_in)
        for (int t = 0; t < nth; t++)
            emb__free(ls[t].own_in), ls[t].own_in = NULL, ls[t].nhot_in = 0;
    return nhot;
}

emb_status emb_w2v_train(emb_w2v *w, emb_w2v_progress_fn progress, void *user) {
    if (!w) return emb__null("w2v");
    if (w->diverged) return diverged_error(w);
    const emb_w2v_options *o = &w->o;
    emb__w2v_dist *dist = w->dist;
    /* the lanes this process trains (all of them, unless a distributed run shares them) */
    const int nt = w->nt, lane0 = dist ? dist->lane0 : 0, nl = dist ? dist->nlocal : nt;
    int nth = (int)((int64_t)nl * o->threads / nt);
    nth = nth < 1 ? 1 : nth > nl ? nl : nth;
    lane_scratch *ls = calloc((size_t)nth, sizeof *ls);
    int64_t *done = calloc((size_t)nl, sizeof(int64_t));
    emb__w2v_cursor *cur = calloc((size_t)nl, sizeof *cur);
    double *lloss = calloc((size_t)nl, sizeof(double));
    int64_t *lex = calloc((size_t)nl, sizeof(int64_t));
    bool ok = ls && done && cur && lloss && lex;
    for (int t = 0; ls && t < nth; t++)
        ok = t < emb__w2v_max_scratch_lanes && lane_scratch_init(w, &ls[t]) && ok;
    for (int k = 0; cur && k < nl; k++) ok = emb__w2v_cursor_init(&cur[k], &w->ids) == EMB_OK && ok;
    int32_t *from = NULL;
    const int64_t nhot = ok ? threads_copy_rows(w, ls, nth, &from) : 0;
    const bool own = nhot > 0;
    emb_status st = EMB_OK;
    if (!ok) st = emb__error(EMB_ERR_NOMEM, "cannot allocate training scratch");
    /* the processes of a distributed run agree on the start: none trains unless all can (a
     * process that could not waits in no round for the others) */
    if (dist && dist->agree(dist->ctx, !ok) && ok)
        st = emb__error(EMB_ERR_NOMEM, "%s of the run cannot allocate its training scratch",
                        dist->msg);
    emb__sgns_step_fn step = emb__sgns_step();
    double t0 = now_seconds();
    const int64_t done_start = w->words_done;
    bool take_all = true; /* the copies are filled by the first round */
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
        round_ctx rc = {w,       lane0, nl,  nth,  w->words_done,
                        step,    ls,    cur, done, lloss,
                        lex,     0,     {0}, from, from ? from + nhot : NULL,
                        take_all};
        /* The round's work per lane, in expected kept tokens (each token weighs its keep
         * probability): the lanes' rounds then take the same time whatever part of the
         * corpus they are in. */
        rc.round = (dist && dist->round_tokens > 0 ? (double)dist->round_tokens
                                                   : (double)EMB__W2V_ROUND * nth / nl) *
                   w->keep_mean;
        for (int t = 0; t < nth; t++) ls[t].nonfinite = false;
        emb__parallel(nth, round_share, &rc);
        /* the lanes' copies merged into the tables (phase 2 starts the next round) */
        if (own) emb__parallel(nth, merge_share, &rc);
        take_all = dist != NULL; /* a distributed run's merge changes the tables' rows */
        emb__w2v_round sum = {0, 0.0, 0, 0, 0, 0};
        for (int k = 0; k < nl; k++) { /* in lane order: the same sum at every run */
            sum.done += done[k];
            sum.loss += lloss[k], sum.examples += lex[k];
        }
        for (int t = 0; t < nth; t++) {
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
        if (dist && dist->partial) continue; /* every process alike */
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
    lanes_scratch_free(ls, nth);
    emb__free(from);
    for (int k = 0; cur && k < nl; k++) emb__w2v_cursor_free(&cur[k]);
    free(cur), free(done), free(lloss), free(lex);
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
