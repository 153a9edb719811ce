/* word2vec training: the training loop, its threads and rounds (include/emb/word2vec.h; the
 * method is described in docs/word2vec.md; runs are created in create.c, the threads' copies
 * of the frequent rows and their merge are in lanes.c). */
#include "lanes.h"

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
    int64_t take_out, take_in;   /* else the rows the last merge merged */
    int64_t merge_out, merge_in; /* the rows this round's merge merges */
} round_ctx;

static void round_share(void *p, int t, int nt) {
    round_ctx *r = p;
    lane_scratch *s = &r->ls[t];
    if (s->own) { /* phase 2 of the last merge */
        emb__w2v_take_merged(r->w, s, t, r->from_out, r->take_all, false, r->take_out);
        if (s->own_in) emb__w2v_take_merged(r->w, s, t, r->from_in, r->take_all, true, r->take_in);
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

/* Share t of phase 1 of the merge (emb__w2v_merge_into). */
static void merge_share(void *p, int t, int nt) {
    const round_ctx *r = p;
    emb__w2v_merge_into(r->w, r->ls, nt, t, false, r->from_out, r->merge_out);
    if (r->ls[0].own_in) emb__w2v_merge_into(r->w, r->ls, nt, t, true, r->from_in, r->merge_in);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Whether the merge after this round is whole (`always`, or every EMB__W2V_WHOLE_EVERY rounds
 * as *since counts them, at the end of an epoch, or when the round failed: the error reads
 * the tables). */
static bool merge_whole(const emb_w2v *w, const lane_scratch *ls, int nth, bool always,
                        int *since) {
    bool whole = always || ++*since >= EMB__W2V_WHOLE_EVERY, at_end = true;
    for (int t = 0; t < w->nt; t++) at_end = at_end && w->lanes[t].pos >= w->lanes[t].hi;
    whole = whole || at_end;
    for (int t = 0; t < nth; t++) whole = whole || ls[t].read_failed || ls[t].nonfinite;
    if (whole) *since = 0;
    return whole;
}

/* The progress report after a round: progress's answer (non-zero: stop). */
static int report(const emb_w2v *w, emb_w2v_progress_fn progress, void *user, double seconds,
                  int64_t done_start) {
    const emb_w2v_options *o = &w->o;
    emb_w2v_progress p;
    p.words_done = w->words_done;
    p.words_total = w->tokens * o->epochs;
    p.epoch = w->lanes[0].epoch;
    double frac = (double)w->words_done / (double)p.words_total;
    p.alpha = o->alpha - (o->alpha - o->min_alpha) * (frac > 1 ? 1 : frac);
    p.seconds = seconds;
    p.words_done_here = w->words_done - done_start;
    p.loss = w->epoch_loss;
    p.loss_examples = w->epoch_examples;
    return progress(&p, user);
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
        ok = t < emb__w2v_max_scratch_lanes && emb__w2v_lane_init(w, &ls[t]) && ok;
    for (int k = 0; cur && k < nl; k++) ok = emb__w2v_cursor_init(&cur[k], &w->ids) == EMB_OK && ok;
    int32_t *from = NULL;
    const int64_t nhot = ok ? emb__w2v_lanes_copy(w, ls, nth, &from) : 0;
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
    int64_t take_out = 0, take_in = 0;
    int since_whole = 0;
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
        round_ctx rc = {w,        lane0,    nl,      nth,  w->words_done,
                        step,     ls,       cur,     done, lloss,
                        lex,      0,        {0},     from, from ? from + nhot : NULL,
                        take_all, take_out, take_in, 0,    0};
        /* The round's work per lane, in expected kept tokens (each token weighs its keep
         * probability): the lanes' rounds then take the same time whatever part of the
         * corpus they are in. */
        rc.round = (dist && dist->round_tokens > 0 ? (double)dist->round_tokens
                                                   : (double)EMB__W2V_ROUND * nth / nl) *
                   w->keep_mean;
        for (int t = 0; t < nth; t++) ls[t].nonfinite = false;
        emb__parallel(nth, round_share, &rc);
        /* The lanes' copies merged into the tables (phase 2 starts the next round): the first
         * rows, or every copied row (a whole merge) every EMB__W2V_WHOLE_EVERY rounds, at the
         * end of an epoch, when the round failed (the error reads the tables) and in a
         * distributed run (whose merge reads them after every round). */
        const bool whole = merge_whole(w, ls, nth, !own || dist, &since_whole);
        const int64_t nin = ls[0].nhot_in;
        rc.merge_out = whole || nhot < emb__w2v_hot_rows ? nhot : emb__w2v_hot_rows;
        rc.merge_in = whole || nin < emb__w2v_hot_in_rows ? nin : emb__w2v_hot_in_rows;
        if (own) emb__parallel(nth, merge_share, &rc);
        take_all = dist != NULL; /* a distributed run's merge changes the tables' rows */
        take_out = rc.merge_out, take_in = rc.merge_in;
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
        if (!whole) continue; /* reports see whole tables (a checkpoint may be written) */
        if (progress) {
            int stop = report(w, progress, user, now_seconds() - t0, done_start);
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
    emb__w2v_lanes_free(ls, nth);
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
