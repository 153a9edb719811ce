/* The threads' scratch of a word2vec run, their copies of the tables' frequent rows and the
 * merge of the copies between rounds (lanes.h; the training loop is in trainer.c). */
#include "lanes.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Several threads: with every thread updating the output table in place (Hogwild), the
 * rows of the frequent words (most of the negatives) are written by both cores for nearly
 * every pair, and their cache lines travel between the cores on each write: skip-gram on 2
 * threads took half again as long as with copies, and in the phases of a virtual machine
 * where moving a line between the cores costs more, twice as long; CBOW with copies is a
 * little slower in the good phases, a price paid for not being much slower in the bad
 * (docs/PERFORMANCE.md, "Tuning constants"). The input table's frequent rows (the context
 * rows of the frequent words, written at nearly every CBOW window) are copied the same way:
 * on a Zen 5 machine this made 2-thread CBOW 14-16% faster (docs/word2vec.md).
 * So each lane trains its own copy of the output table's most frequent rows, and the copies
 * are merged: a row one lane changed is taken from that lane; a row several lanes changed
 * becomes the starting value plus the sum of the lanes' changes (in lane order); every copy
 * then goes on from the merged rows. The first emb__w2v_hot_rows rows (input:
 * emb__w2v_hot_in_rows) are merged after every round, the other copied rows (up to
 * emb__w2v_copy_rows) after every EMB__W2V_WHOLE_EVERY rounds, at the end of an epoch and before
 * every progress report (a whole merge). A lane sees the others' updates of the first rows one
 * round late, of the others up to EMB__W2V_WHOLE_EVERY rounds late: each of those takes few updates
 * in a round, and updating them in place made both cores fetch them from each other's caches (in
 * the slow phases 12-15% of a 2-thread CBOW run; docs/word2vec.md, "Rare rows merged less often").
 * The rows past the copied ones are updated in place. A run whose output copies would exceed
 * EMB__W2V_COPIES_MAX bytes updates every row in place, and one whose input copies would bring the
 * total above it updates the input rows in place. */
#define EMB__W2V_COPIES_MAX ((int64_t)1 << 30)

/* The output rows merged after every round: the first 2,048 of the vocabulary, which is
 * sorted by count, so the rows most negatives and targets land on (test hook: the unit tests
 * lower it; internal). */
int64_t emb__w2v_hot_rows = 2048;
/* The same for the input table (CBOW and skip-gram without subwords, in one process): the
 * context rows of the frequent words are written by every thread at nearly every window. */
int64_t emb__w2v_hot_in_rows = 2048;
/* The rows of each table a lane keeps its own copy of (at least the ones above; test hook). */
int64_t emb__w2v_copy_rows = 8192;
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
 * its block of 64 rows. from[r] records what phase 1 found. Phase 2 (emb__w2v_take_merged, at the
 * start of the next round on each lane's own thread) copies into the lane's copy the rows another
 * lane changed. Merging on one thread into every copy made the other core fetch each of those
 * rows again in the middle of its next round, one cache miss at a time: on a virtual machine
 * whose cores were 250 ns apart this cost 2-thread CBOW a quarter of its time
 * (docs/word2vec.md, "The merge where the rows are"). The values are the same bits either way. */
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

/* Phase 1 of the merge of one table's first nhot copied rows, share u of nt (one per lane).
 * The lanes' dirty marks are only read here (each lane clears its own in phase 2). */
void emb__w2v_merge_into(const emb_w2v *w, const lane_scratch *ls, int nt, int u, bool input,
                         int32_t *from, int64_t nhot) {
    const int64_t dim = w->o.dim;
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

/* Phase 2 for lane u (on its own thread): of the first nhot rows (those phase 1 merged), the
 * ones another lane changed into its copy, and its dirty marks of them cleared; or every
 * copied row, when `all` (the run's first round, or after a distributed run's merge changed
 * the table). */
void emb__w2v_take_merged(const emb_w2v *w, lane_scratch *s, int u, const int32_t *from, bool all,
                          bool input, int64_t nhot) {
    const int64_t dim = w->o.dim;
    if (all) nhot = input ? s->nhot_in : s->nhot;
    const float *table = input ? w->syn0 : w->syn1;
    float *own = input ? s->own_in : s->own;
    for (int64_t r = 0; r < nhot; r++)
        if (all || (from[r] != FROM_NONE && from[r] != u))
            memcpy(own + r * dim, table + r * dim, (size_t)dim * sizeof(float));
    const uint8_t keep = (uint8_t) ~(input ? DIRTY_IN : DIRTY_OUT);
    for (int64_t r = 0; r < nhot; r++) s->dirty[r] &= keep;
}

/* Test hook (declared in src/mpi/mpi_internal.h, for the distributed tests that link the static
 * libraries): the threads' scratch is allocated for at most this many threads of a training
 * call (one per lane in the distributed tests), the others failing as if out of memory. INT_MAX
 * (the default): no limit. Tests only. */
int emb__w2v_max_scratch_lanes = INT_MAX;

/* Frees the scratch of nl lanes (ls may be NULL). */
void emb__w2v_lanes_free(lane_scratch *ls, int nl) {
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
bool emb__w2v_lane_init(const emb_w2v *w, lane_scratch *s) {
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
int64_t emb__w2v_lanes_copy(const emb_w2v *w, lane_scratch *ls, int nth, int32_t **from) {
    const int64_t want =
        emb__w2v_copy_rows > emb__w2v_hot_rows ? emb__w2v_copy_rows : emb__w2v_hot_rows;
    const int64_t want_in =
        emb__w2v_copy_rows > emb__w2v_hot_in_rows ? emb__w2v_copy_rows : emb__w2v_hot_in_rows;
    const int64_t nhot = lanes_own_rows(w, nth, want, 0);
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
    const int64_t nin = own && !w->sub_off && !w->dist ? lanes_own_rows(w, nth, want_in, nhot) : 0;
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
