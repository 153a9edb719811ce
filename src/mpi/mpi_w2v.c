/* src/mpi/mpi_w2v.c: data-parallel word2vec over the ranks of a communicator (include/emb/mpi.h,
 * docs/DISTRIBUTED.md, "Word vectors"). Every rank holds the whole run (the same corpus,
 * vocabulary and tables); the run's lanes are dealt out over the ranks, and after each round
 * the ranks' changes to both tables are merged in rank order, so that every rank holds the same
 * tables again (the most frequent words' rows also after each of the round's sub-rounds). The
 * trainer itself is libemb's emb_w2v_train: this file installs the hook it calls between rounds
 * (src/w2v/w2v_internal.h, struct emb__w2v_dist). */
#include "mpi_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "w2v/w2v_state.h"

/* Tokens per lane and round: the single process's (shorter rounds did not keep 4 ranks from
 * diverging with a summing merge, nor made the mean train faster). A round is made of
 * sub-rounds of EMB__MPI_W2V_SUB tokens per lane; after each, the rows of the
 * EMB__MPI_W2V_TOP most frequent words (input and output; at most an eighth of the
 * vocabulary, which bounds the traffic of small ones) are merged, the others after the
 * round's last (pWord2Vec's idea: the few rows that take most updates are merged more often;
 * on State of the Union at 4 ranks this closed most of the gap to one process). */
#define EMB__MPI_W2V_ROUND 16384
#define EMB__MPI_W2V_SUB   2048
#define EMB__MPI_W2V_TOP   512

/* H of the merge's rule (merge below): measured on State of the Union at 4 ranks, skip-gram
 * (one seed), where 0.1-0.15 gave the best accuracy (6.1%; one process: 6.6%), 0.03 and less
 * diverged as the sum does and 0.3-1 lost points as the mean does. */
#define EMB__MPI_W2V_SATURATION 0.125

/* Saved n-gram bucket rows per block (the blocks are kept from round to round). */
#define EMB__MPI_W2V_BLOCK 1024

struct emb_mpi_w2v {
    MPI_Comm comm; /* the run's own duplicate */
    MPI_Datatype row_type;
    int rank, size;
    emb_w2v *w;
    emb__w2v_dist dist;
    float *base;    /* [2 V, dim]: both tables' words as the round began (input, then output) */
    int32_t *count; /* [2 V + B]: ranks that changed a row this round (0 between rounds) */
    int64_t *ids;   /* this rank's changed rows, then every rank's (ids: see table_row) */
    float *rows;    /* their values */
    int64_t cap;    /* rows that ids and rows hold */
    double *rate;   /* [2 V + B]: expected updates of a row per token a rank trains */
    /* With subwords, the B n-gram bucket rows of the input table as the round began are saved
     * when a lane first changes them in the round (touch below), not copied whole; they are
     * merged with the rare words' rows, so their saved starts last until the whole merge: */
    int32_t *slot; /* [B]: SLOT_FREE, SLOT_BUSY (being saved), SLOT_LOST, or its slot */
    float **block; /* [nblocks]: slots' rows (BLOCK rows of dim), then their buckets */
    int64_t nblocks;
    int64_t saved; /* slots taken since the last whole merge */
    int lost;      /* a row could not be saved (out of memory): the round fails */
    int *counts, *displs;
    struct round_head *heads; /* [size]: what each rank tells the others after a round */
    uint64_t *sent;           /* [size]: bytes each rank handed to MPI for the merges so far */
    uint64_t all_bytes;       /* their sum */
    int64_t rounds;           /* merges so far */
    bool failed;              /* a merge failed on every rank: the replicas differ */
    int64_t top; /* words whose rows are merged after every sub-round (the most frequent) */
    int every;   /* sub-rounds per round: the other rows are merged after the last one */
    int sub;     /* sub-rounds since the last whole merge */
    double period, period_alpha; /* tokens per rank since then; the learning rate then */
};

/* What a rank tells the others after a round: its lanes' sums and how many rows it changed. */
struct round_head {
    emb__w2v_round r;
    int64_t frequent, rare; /* changed rows of the frequent words (listed first) and the others */
    int64_t at_end;         /* its lanes are at the end of their ranges */
    int64_t nomem;          /* it cannot list (or lost the start of) the rows it changed */
};
typedef struct round_head round_head;

/* Test hooks (mpi_internal.h): a merge buffer of more rows than this is not allocated; nor a
 * block of saved n-gram rows beyond this many. */
int64_t emb__mpi_w2v_max_rows = INT64_MAX;
int64_t emb__mpi_w2v_max_slots = INT64_MAX;

/* Row ids of the merge: [0, V) the input table's words, [V, 2 V) the output table's rows,
 * 2 V + b the input table's n-gram bucket b (its row V + b). */
static float *table_row(const emb_w2v *w, int64_t id) {
    if (id >= 2 * w->V) return w->syn0 + (id - w->V) * w->o.dim;
    return id < w->V ? w->syn0 + id * w->o.dim : w->syn1 + (id - w->V) * w->o.dim;
}

static int64_t buckets(const emb_w2v *w) {
    return w->sub_off ? w->o.bucket : 0;
}

enum { SLOT_FREE = -1, SLOT_BUSY = -2, SLOT_LOST = -3 };

/* Slot k's saved row, its block allocated on first use (NULL when out of memory). */
static float *slot_row(emb_mpi_w2v *d, int64_t k) {
    const int64_t dim = d->w->o.dim, at = k / EMB__MPI_W2V_BLOCK;
    float *b = __atomic_load_n(&d->block[at], __ATOMIC_ACQUIRE);
    if (!b) { /* lanes may race for a new block: the first one's stays */
        if ((at + 1) * EMB__MPI_W2V_BLOCK > emb__mpi_w2v_max_slots) return NULL;
        float *mine = malloc((size_t)EMB__MPI_W2V_BLOCK * ((size_t)dim * sizeof(float) + 4));
        if (!mine) return NULL;
        if (__atomic_compare_exchange_n(&d->block[at], &b, mine, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            b = mine;
        else
            free(mine);
    }
    return b + (k % EMB__MPI_W2V_BLOCK) * dim;
}

static int32_t *slot_bucket(const emb_mpi_w2v *d, int64_t k) {
    float *b = d->block[k / EMB__MPI_W2V_BLOCK];
    return (int32_t *)(b + EMB__MPI_W2V_BLOCK * d->w->o.dim) + k % EMB__MPI_W2V_BLOCK;
}

/* Saves bucket row b as it is now, unless it was saved this round; returns when the saved
 * copy is complete (another lane may be making it). Lanes call it before they change the row. */
static void save_bucket(emb_mpi_w2v *d, int32_t b) {
    int32_t s = __atomic_load_n(&d->slot[b], __ATOMIC_ACQUIRE);
    if (s == SLOT_FREE && __atomic_compare_exchange_n(&d->slot[b], &s, SLOT_BUSY, false,
                                                      __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        const int64_t k = __atomic_fetch_add(&d->saved, 1, __ATOMIC_RELAXED);
        float *row = slot_row(d, k);
        if (row) {
            memcpy(row, d->w->syn0 + (d->w->V + b) * d->w->o.dim,
                   (size_t)d->w->o.dim * sizeof(float));
            *slot_bucket(d, k) = b;
        } else {
            __atomic_store_n(&d->lost, 1, __ATOMIC_RELAXED);
        }
        __atomic_store_n(&d->slot[b], row ? (int32_t)k : SLOT_LOST, __ATOMIC_RELEASE);
        return;
    }
    while (s == SLOT_BUSY) s = __atomic_load_n(&d->slot[b], __ATOMIC_ACQUIRE);
}

/* The hook the trainer calls before a step changes the input rows rows[0..n). */
static void on_touch(void *ctx, const int32_t *rows, int n) {
    emb_mpi_w2v *d = ctx;
    const int64_t V = d->w->V;
    for (int k = 0; k < n; k++)
        if (rows[k] >= V) save_bucket(d, (int32_t)(rows[k] - V));
}

/* Row id's value as the round began. */
static const float *base_row(emb_mpi_w2v *d, int64_t id) {
    const int64_t V = d->w->V;
    if (id < 2 * V) return d->base + id * d->w->o.dim;
    const int32_t s = d->slot[id - 2 * V];
    return s >= 0 ? slot_row(d, s) : table_row(d->w, id); /* unchanged here: as it began */
}

static emb_status grow(emb_mpi_w2v *d, int64_t n) {
    if (n <= d->cap) return EMB_OK;
    const int64_t dim = d->w->o.dim;
    const bool room = n <= emb__mpi_w2v_max_rows;
    int64_t *ids = room ? realloc(d->ids, (size_t)n * sizeof *ids) : NULL;
    if (ids) d->ids = ids;
    float *rows = room ? realloc(d->rows, (size_t)n * (size_t)dim * sizeof *rows) : NULL;
    if (rows) d->rows = rows;
    if (!ids || !rows)
        return emb_set_error(EMB_ERR_NOMEM, "cannot allocate %" PRId64 " rows to merge", n);
    d->cap = n;
    return EMB_OK;
}

/* Sets the message the trainer reports, and returns st. */
static emb_status round_fail(emb_mpi_w2v *d, emb_status st) {
    snprintf(d->dist.msg, sizeof d->dist.msg, "%s", emb_errmsg());
    return st;
}

static bool frequent(const emb_mpi_w2v *d, int64_t id) {
    return id < d->top || (id >= d->w->V && id < d->w->V + d->top);
}

/* Counts the ranks that changed each listed row, and saves the start of the n-gram rows that
 * several ranks changed and this one did not (its table holds their start); returns
 * EMB_ERR_NOMEM here when such a row cannot be saved (the merge is then not made). */
static emb_status count_rows(emb_mpi_w2v *d, int64_t total) {
    const int64_t V2 = 2 * d->w->V;
    for (int64_t k = 0; k < total; k++) d->count[d->ids[k]]++;
    for (int64_t k = 0; k < total && !d->lost; k++)
        if (d->ids[k] >= V2 && d->count[d->ids[k]] > 1) save_bucket(d, (int32_t)(d->ids[k] - V2));
    if (d->lost)
        return emb_set_error(EMB_ERR_NOMEM, "cannot allocate the copies of the n-gram rows a "
                                            "distributed run merges");
    return EMB_OK;
}

/* The merge (every rank computes it alike from the same data): a row that one rank changed is
 * taken from that rank; a row that k > 1 ranks changed becomes the round's starting value plus
 * f times the sum of their changes (summed in rank order), with
 *
 *     f = (1 + x) / (1 + k x),   x = H * alpha * (the row's expected updates on one rank),
 *
 * alpha the learning rate as the round began. A row that takes few updates per round moves
 * almost linearly, so the ranks' changes add up as if one process had made them all (f near
 * 1, the sum); a row that takes many is pulled most of the way to where each rank's data
 * wants it, and the sum of k such moves would overshoot k times (skip-gram on 4 ranks
 * diverged with it), so f tends to 1/k (the mean). (1 + x) / (1 + k x) is the ratio of the
 * saturating move n / (n + c) of k n updates to k times that of n. H was measured
 * (docs/DISTRIBUTED.md, "The merge"). */
static void merge(emb_mpi_w2v *d, int64_t total, double scale, double scale_rare) {
    emb_w2v *w = d->w;
    const int64_t dim = w->o.dim;
    const size_t row_bytes = (size_t)dim * sizeof(float);
    /* this rank's own entries: a row only it changed holds its value already */
    const int64_t own0 = d->displs[d->rank], own1 = own0 + d->counts[d->rank];
    for (int64_t k = 0; k < total; k++) /* rows several ranks changed: their sum starts at 0 */
        if (d->count[d->ids[k]] > 1) memset(table_row(w, d->ids[k]), 0, row_bytes);
    for (int64_t k = 0; k < total; k++) { /* in rank order: the ranks' lists are in it */
        int64_t id = d->ids[k];
        float *x = table_row(w, id);
        const float *v = d->rows + k * dim, *b = base_row(d, id);
        if (d->count[id] == 1) {
            if (k < own0 || k >= own1) memcpy(x, v, row_bytes);
        } else
            for (int64_t q = 0; q < dim; q++) x[q] = x[q] + (v[q] - b[q]);
    }
    for (int64_t k = 0; k < total; k++) {
        int64_t id = d->ids[k];
        float *x = table_row(w, id);
        const float *b = base_row(d, id);
        if (d->count[id] > 1) {
            const double s = d->rate[id] * (frequent(d, id) ? scale : scale_rare);
            const float f = (float)((1 + s) / (1 + (double)d->count[id] * s));
            for (int64_t q = 0; q < dim; q++) x[q] = b[q] + x[q] * f;
        }
        d->count[id] = -1; /* done: a row appears once per rank that changed it */
    }
    for (int64_t k = 0; k < total; k++) {
        if (d->ids[k] < 2 * w->V)
            memcpy(d->base + d->ids[k] * dim, table_row(w, d->ids[k]), row_bytes);
        d->count[d->ids[k]] = 0;
    }
}

/* After a whole merge: the n-gram rows' saved starts are free for the next round's. */
static void free_slots(emb_mpi_w2v *d) {
    for (int64_t k = 0; k < d->saved; k++) d->slot[*slot_bucket(d, k)] = SLOT_FREE;
    d->saved = 0;
}

/* This rank's changed rows (any bit) into d->ids: the frequent words' first (input table
 * first), then the other words', then the n-gram rows (all of them rare: saved since the last
 * whole merge). Also whether its lanes are at the end of their ranges. */
static void changed_rows(emb_mpi_w2v *d, round_head *mine) {
    const emb_w2v *w = d->w;
    const int64_t dim = w->o.dim;
    const size_t row_bytes = (size_t)dim * sizeof(float);
    int64_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t id = 0; id < 2 * w->V; id++)
            if (frequent(d, id) == (pass == 0) &&
                memcmp(table_row(w, id), d->base + id * dim, row_bytes) != 0)
                d->ids[n++] = id;
        if (pass == 0) mine->frequent = n;
    }
    for (int64_t k = 0; k < d->saved; k++) {
        const int64_t id = 2 * w->V + *slot_bucket(d, k);
        if (memcmp(table_row(w, id), slot_row(d, k), row_bytes) != 0) d->ids[n++] = id;
    }
    mine->rare = n - mine->frequent;
    mine->at_end = 1;
    for (int t = d->dist.lane0; t < d->dist.lane0 + d->dist.nlocal; t++)
        mine->at_end &= w->lanes[t].pos >= w->lanes[t].hi;
}

static emb_status on_round(void *ctx, emb_w2v *w, emb__w2v_round *r) {
    emb_mpi_w2v *d = ctx;
    if (d->size == 1) { /* one rank: the single process's run */
        d->rounds++;
        return EMB_OK;
    }
    if (d->failed)
        return round_fail(d, emb_set_error(EMB_ERR_STATE,
                                           "a merge of this distributed run failed on every "
                                           "rank; the ranks' tables differ since: resume from a "
                                           "checkpoint in a new run"));
    const int64_t dim = w->o.dim;
    const size_t row_bytes = (size_t)dim * sizeof(float);
    /* with subwords a rank's list may hold more than the 2 V rows made room for at creation,
     * and a lane may have failed to save an n-gram row's start: such a rank says so in its
     * head, so that every rank fails the same round */
    emb_status listed =
        d->lost ? emb_set_error(EMB_ERR_NOMEM, "cannot allocate the copies of the n-gram rows a "
                                               "distributed run merges")
                : grow(d, 2 * w->V + d->saved);
    round_head mine = {*r, 0, 0, 0, listed != EMB_OK}, *heads = d->heads;
    if (!listed) changed_rows(d, &mine);
    int rc = emb__mpi_allgather(EMB_MPI_TIMEOUT_MS_DEFAULT, &mine, (int)sizeof mine, MPI_BYTE,
                                heads, (int)sizeof mine, MPI_BYTE, d->comm);
    emb_status st = rc == MPI_SUCCESS ? EMB_OK : emb__mpi_fail(rc, "MPI_Allgather");
    for (int q = 0; q < d->size && !st; q++)
        if (heads[q].nomem)
            st = q == d->rank ? listed
                              : emb_set_error(EMB_ERR_NOMEM,
                                              "rank %d refused the merge: it cannot allocate the "
                                              "rows it changed",
                                              q);
    /* a whole merge after `every` sub-rounds and when every lane is at its range's end (the
     * end of an epoch); between them, the frequent words' rows only */
    bool whole = ++d->sub >= d->every;
    int64_t at_end = 1;
    for (int q = 0; q < d->size && !st; q++) at_end &= heads[q].at_end;
    whole = whole || at_end;
    int64_t total = 0;
    emb__w2v_round sum = {0, 0.0, 0, 0, 0, 0};
    for (int q = 0; q < d->size && !st; q++) { /* in rank order: the same sums on every rank */
        const emb__w2v_round *h = &heads[q].r;
        const int64_t nq = heads[q].frequent + (whole ? heads[q].rare : 0);
        d->counts[q] = (int)nq;
        d->displs[q] = (int)total;
        total += nq;
        sum.done += h->done, sum.loss += h->loss, sum.examples += h->examples;
        if (h->read_failed && !sum.read_failed) sum.read_failed = 1, sum.read_errno = h->read_errno;
        sum.nonfinite |= h->nonfinite;
    }
    const int64_t n = st ? 0 : d->counts[d->rank]; /* the rows this rank sends */
    for (int64_t k = 0; k < n; k++) memcpy(d->rows + k * dim, table_row(w, d->ids[k]), row_bytes);
    /* Every rank knows total and the buffers' size (the same on every rank), so all of them
     * agree on whether any rank could not make room, before the gathers that need it. */
    bool agreed = false;
    if (!st && total > d->cap) {
        st = emb__mpi_agree_comm(d->comm, EMB_MPI_TIMEOUT_MS_DEFAULT, grow(d, total), "the merge");
        agreed = true;
    }
    /* this rank's rows move to their place in the gathered lists */
    if (!st && d->displs[d->rank] > 0) {
        memmove(d->ids + d->displs[d->rank], d->ids, (size_t)n * sizeof *d->ids);
        memmove(d->rows + d->displs[d->rank] * dim, d->rows, (size_t)n * row_bytes);
    }
    if (!st && (rc = emb__mpi_allgatherv(EMB_MPI_TIMEOUT_MS_DEFAULT, MPI_IN_PLACE, 0,
                                         MPI_DATATYPE_NULL, d->ids, d->counts, d->displs,
                                         MPI_INT64_T, d->comm)) != MPI_SUCCESS)
        st = emb__mpi_fail(rc, "MPI_Allgatherv");
    if (!st && (rc = emb__mpi_allgatherv(EMB_MPI_TIMEOUT_MS_DEFAULT, MPI_IN_PLACE, 0,
                                         MPI_DATATYPE_NULL, d->rows, d->counts, d->displs,
                                         d->row_type, d->comm)) != MPI_SUCCESS)
        st = emb__mpi_fail(rc, "MPI_Allgatherv");
    /* every lane's position and random state, so that every rank holds the whole run */
    const int lane_bytes = d->dist.nlocal * (int)sizeof(emb__w2v_lane);
    if (!st &&
        (rc = emb__mpi_allgather(EMB_MPI_TIMEOUT_MS_DEFAULT, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL,
                                 w->lanes, lane_bytes, MPI_BYTE, d->comm)) != MPI_SUCCESS)
        st = emb__mpi_fail(rc, "MPI_Allgather");
    /* the starts of the n-gram rows that other ranks changed and this one did not are saved
     * now; every rank knows whether the list holds n-gram rows (a whole merge with subwords),
     * and then all agree on whether any rank could not save them */
    const bool counted = !st, saves_agreed = counted && whole && d->slot;
    if (counted) st = count_rows(d, total);
    if (saves_agreed)
        st = emb__mpi_agree_comm(d->comm, EMB_MPI_TIMEOUT_MS_DEFAULT, st, "the merge");
    if (st) {
        for (int64_t k = 0; counted && k < total; k++) d->count[d->ids[k]] = 0;
        d->failed = true;
        return round_fail(d, st);
    }
    /* every rank counts every rank's part (the same counts everywhere): its head, changed rows
     * and lanes, and after a whole merge the int of the stop agreement that follows it */
    for (int q = 0; q < d->size; q++) {
        uint64_t b = sizeof mine + (uint64_t)d->counts[q] * (sizeof(int64_t) + row_bytes) +
                     (uint64_t)lane_bytes + (whole ? sizeof(int) : 0) + (agreed ? sizeof(int) : 0) +
                     (saves_agreed ? sizeof(int) : 0);
        d->sent[q] += b, d->all_bytes += b;
    }
    const emb_w2v_options *o = &w->o;
    double frac = (double)w->words_done / ((double)w->tokens * (double)o->epochs);
    const double alpha = o->alpha - (o->alpha - o->min_alpha) * (frac > 1 ? 1 : frac);
    if (d->sub == 1) d->period = 0, d->period_alpha = alpha;
    const double tokens = (double)(sum.done / d->size);
    d->period += tokens;
    /* the frequent rows changed since the last sub-round, the others since the last whole
     * merge */
    merge(d, total, EMB__MPI_W2V_SATURATION * alpha * tokens,
          EMB__MPI_W2V_SATURATION * d->period_alpha * d->period);
    if (whole) free_slots(d); /* the n-gram rows are merged with the other words' only */
    d->dist.partial = !whole;
    if (whole) d->rounds++, d->sub = 0;
    *r = sum;
    return EMB_OK;
}

/* The trainer's agreement (after a progress report, and before the first round on whether
 * every rank could allocate its training scratch): non-zero on every rank when stop was
 * non-zero on any, and then dist.msg names the lowest such rank ("rank r"), for the trainer's
 * message. */
static int on_agree(void *ctx, int stop) {
    emb_mpi_w2v *d = ctx;
    int first = stop ? d->rank : d->size;
    if (d->size > 1) {
        int rc = emb__mpi_allreduce(EMB_MPI_TIMEOUT_MS_DEFAULT, MPI_IN_PLACE, &first, 1, MPI_INT,
                                    MPI_MIN, d->comm);
        if (rc != MPI_SUCCESS) {
            emb__mpi_fail(rc, "MPI_Allreduce");
            snprintf(d->dist.msg, sizeof d->dist.msg, "a rank that did not answer (%s)",
                     emb_errmsg());
            return 1;
        }
    }
    if (first < d->size) snprintf(d->dist.msg, sizeof d->dist.msg, "rank %d", first);
    return first < d->size;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

/* What must be equal on every rank, each with its name. */
enum { ID_FIELDS = 8 };
static const char *const id_names[ID_FIELDS] = {
    "corpus fingerprint", "vocabulary", "options",    "thread count (lanes)",
    "words done",         "tables",     "lane state", "training state (diverged)"};

static void identity(const emb_w2v *w, uint64_t id[ID_FIELDS]) {
    const emb_w2v_options *o = &w->o;
    id[0] = w->fingerprint ^ (uint64_t)w->n_ids * 31u;
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < w->V; i++) {
        size_t len;
        const char *s = emb_vocab_word(w->vocab, i, &len);
        int64_t c = emb_vocab_count(w->vocab, i);
        h = fnv(fnv(fnv(h, s, len), &len, sizeof len), &c, sizeof c);
    }
    id[1] = h;
    h = 1469598103934665603ull;
    int64_t iv[] = {o->model,
                    o->dim,
                    o->window,
                    o->negative,
                    o->min_count,
                    o->max_vocab,
                    o->epochs,
                    o->cbow_mean,
                    (int64_t)o->seed,
                    o->lowercase,
                    o->strip_punct,
                    o->max_sentence,
                    o->shared_negatives,
                    o->lenient,
                    o->compute_loss,
                    o->maxn,
                    o->minn,
                    o->bucket};
    double dv[] = {o->sample, o->alpha, o->min_alpha};
    id[2] = fnv(fnv(h, iv, sizeof iv), dv, sizeof dv);
    id[3] = (uint64_t)w->nt;
    id[4] = (uint64_t)w->words_done;
    size_t tb = (size_t)w->V * (size_t)o->dim * sizeof(float),
           t0 = (size_t)(w->V + buckets(w)) * (size_t)o->dim * sizeof(float);
    id[5] = fnv(fnv(1469598103934665603ull, w->syn0, t0), w->syn1, tb);
    id[6] = fnv(1469598103934665603ull, w->lanes, (size_t)w->nt * sizeof *w->lanes);
    id[7] = w->diverged;
}

/* Local checks of the run before the collective ones. */
static emb_status check_local(const emb_w2v *w, int size) {
    if (!w) return emb_set_error(EMB_ERR_NULL, "w2v must not be NULL");
    if (w->dist) return emb_set_error(EMB_ERR_STATE, "the run is already distributed");
    if (w->nt % size != 0)
        return emb_set_error(EMB_ERR_INVALID,
                             "the run has %d lanes (parts of the corpus; one per thread over all "
                             "ranks when `emb train` starts the run), which %d ranks do "
                             "not share evenly; a run resumed from a checkpoint keeps the lanes "
                             "of the run that wrote it: use a number of ranks that divides %d",
                             w->nt, size, w->nt);
    if (2 * w->V + buckets(w) > INT32_MAX / size)
        return emb_set_error(EMB_ERR_UNSUPPORTED,
                             "%" PRId64 " words and %" PRId64
                             " n-gram buckets are too many to merge over %d ranks",
                             w->V, buckets(w), size);
    return EMB_OK;
}

static emb_status check_equal(emb_mpi_w2v *d) {
    uint64_t mine[ID_FIELDS], *all = malloc((size_t)d->size * sizeof mine);
    emb_status st = all ? EMB_OK : emb_set_error(EMB_ERR_NOMEM, "out of memory");
    st = emb__mpi_agree_comm(d->comm, EMB_MPI_TIMEOUT_MS_DEFAULT, st, "the distributed run");
    if (st) {
        free(all);
        return st;
    }
    identity(d->w, mine);
    int rc = emb__mpi_allgather(EMB_MPI_TIMEOUT_MS_DEFAULT, mine, (int)sizeof mine, MPI_BYTE, all,
                                (int)sizeof mine, MPI_BYTE, d->comm);
    if (rc != MPI_SUCCESS) st = emb__mpi_fail(rc, "MPI_Allgather");
    for (int q = 1; q < d->size && !st; q++)
        for (int f = 0; f < ID_FIELDS && !st; f++)
            if (all[q * ID_FIELDS + f] != all[f])
                st = emb_set_error(EMB_ERR_INVALID,
                                   "rank %d's run differs from rank 0's in its %s: every rank "
                                   "must read the same corpus with the same options (and the "
                                   "same checkpoint)",
                                   q, id_names[f]);
    free(all);
    return st; /* the same verdict on every rank: all ranks saw the same table */
}

void emb_mpi_w2v_free(emb_mpi_w2v *d) {
    if (!d) return;
    if (d->w && d->w->dist == &d->dist) d->w->dist = NULL;
    if (d->row_type != MPI_DATATYPE_NULL) MPI_Type_free(&d->row_type);
    if (d->comm != MPI_COMM_NULL) MPI_Comm_free(&d->comm);
    free(d->base), free(d->count), free(d->ids), free(d->rows), free(d->counts), free(d->displs);
    free(d->rate), free(d->sent), free(d->heads), free(d->slot);
    for (int64_t b = 0; d->block && b < d->nblocks; b++) free(d->block[b]);
    free(d->block);
    free(d);
}

/* Expected updates of each row per token a rank trains, from the vocabulary's counts and the
 * subsampling: a kept occurrence of a word is a context of about window + 1 centres (the
 * dynamic window's mean); its output row is a target once per pair (skip-gram) or window
 * (CBOW), and a negative K times per such update in proportion to count^0.75. Only +, *, /
 * and sqrt: the same bits on every CPU. */
static void rates(emb_mpi_w2v *d) {
    const emb_w2v *w = d->w;
    const emb_w2v_options *o = &w->o;
    const double N = w->tokens > 0 ? (double)w->tokens : 1, m = (double)o->window + 1;
    double kept = 0, qsum = 0;
    for (int64_t i = 0; i < w->V; i++) {
        double c = (double)emb_vocab_count(w->vocab, i);
        double p = w->weight[i];
        d->rate[i] = c * p / N; /* kept occurrences per token */
        kept += d->rate[i];
        qsum += sqrt(c) * sqrt(sqrt(c));
    }
    const bool sg = o->model != EMB_W2V_CBOW;
    const double targets = sg ? kept * m : kept; /* output-row updates as targets per token */
    for (int64_t i = 0; i < w->V; i++) {
        double c = (double)emb_vocab_count(w->vocab, i);
        double q = qsum > 0 ? sqrt(c) * sqrt(sqrt(c)) / qsum : 0;
        double pos = sg ? d->rate[i] * m : d->rate[i];
        d->rate[w->V + i] = pos + targets * (double)o->negative * q;
        d->rate[i] *= m;
    }
    /* an n-gram bucket row is updated with every input row of a word that holds it; the
     * word's input is the mean of its r rows, so a move of one of them moves the input 1/r as
     * far, and the row saturates (the rule's x) r times later: each update counts 1/r */
    const int64_t B = buckets(w);
    for (int64_t b = 0; b < B; b++) d->rate[2 * w->V + b] = 0;
    for (int64_t i = 0; i < w->V && B > 0; i++) {
        const double r = (double)(w->sub_off[i + 1] - w->sub_off[i]);
        for (int64_t q = w->sub_off[i] + 1; q < w->sub_off[i + 1]; q++)
            d->rate[w->V + w->sub_rows[q]] += d->rate[i] / r;
    }
}

static emb_status setup(emb_mpi_w2v *d) {
    emb_w2v *w = d->w;
    const int64_t dim = w->o.dim;
    const size_t table_floats = (size_t)w->V * (size_t)dim;
    int rc = MPI_Type_contiguous((int)dim, MPI_FLOAT, &d->row_type);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&d->row_type);
    if (rc != MPI_SUCCESS) return emb__mpi_fail(rc, "MPI_Type_contiguous");
    d->counts = calloc((size_t)d->size, sizeof(int));
    d->displs = calloc((size_t)d->size, sizeof(int));
    d->sent = calloc((size_t)d->size, sizeof(uint64_t));
    d->heads = malloc((size_t)d->size * sizeof *d->heads);
    if (!d->counts || !d->displs || !d->sent || !d->heads)
        return emb_set_error(EMB_ERR_NOMEM, "out of memory");
    if (d->size > 1) { /* one rank merges nothing */
        d->base = malloc(2 * table_floats * sizeof(float));
        const int64_t B = buckets(w);
        d->count = calloc(2 * (size_t)w->V + (size_t)B, sizeof(int32_t));
        if (!d->base || !d->count || grow(d, 2 * w->V))
            return emb_set_error(EMB_ERR_NOMEM,
                                 "cannot allocate the copies of the tables a distributed run "
                                 "merges (%" PRId64 " words, dim %" PRId64 ")",
                                 w->V, dim);
        d->rate = malloc((2 * (size_t)w->V + (size_t)B) * sizeof(double));
        if (!d->rate) return emb_set_error(EMB_ERR_NOMEM, "out of memory");
        if (B > 0) { /* n-gram rows: saved as lanes first change them in a round */
            d->nblocks = (B + EMB__MPI_W2V_BLOCK - 1) / EMB__MPI_W2V_BLOCK;
            d->slot = malloc((size_t)B * sizeof(int32_t));
            d->block = calloc((size_t)d->nblocks, sizeof(float *));
            if (!d->slot || !d->block) return emb_set_error(EMB_ERR_NOMEM, "out of memory");
            for (int64_t b = 0; b < B; b++) d->slot[b] = SLOT_FREE;
        }
        rates(d);
        memcpy(d->base, w->syn0, table_floats * sizeof(float));
        memcpy(d->base + table_floats, w->syn1, table_floats * sizeof(float));
    }
    return EMB_OK;
}

emb_status emb_mpi_w2v_create(MPI_Comm comm, emb_w2v *w, emb_mpi_w2v **out) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin) return emb_set_error(EMB_ERR_STATE, "MPI is not initialised (or finalised)");
    int size, rank;
    if (MPI_Comm_size(comm, &size) != MPI_SUCCESS || MPI_Comm_rank(comm, &rank) != MPI_SUCCESS)
        return emb_set_error(EMB_ERR_INVALID, "not a valid communicator");
    emb_status st =
        out ? check_local(w, size) : emb_set_error(EMB_ERR_NULL, "out must not be NULL");
    emb_mpi_w2v *d = NULL;
    if (!st && !(d = calloc(1, sizeof *d))) st = emb_set_error(EMB_ERR_NOMEM, "out of memory");
    if ((st = emb__mpi_agree_comm(comm, EMB_MPI_TIMEOUT_MS_DEFAULT, st, "the distributed run"))) {
        free(d);
        return st;
    }
    d->comm = MPI_COMM_NULL;
    d->row_type = MPI_DATATYPE_NULL;
    int rc = MPI_Comm_dup(comm, &d->comm);
    if (rc != MPI_SUCCESS) {
        free(d);
        return emb__mpi_fail(rc, "MPI_Comm_dup");
    }
    d->rank = rank, d->size = size, d->w = w;
    st = emb__mpi_agree_comm(d->comm, EMB_MPI_TIMEOUT_MS_DEFAULT, setup(d), "the distributed run");
    if (!st) st = check_equal(d);
    if (st) {
        d->w = NULL;
        emb_mpi_w2v_free(d);
        return st;
    }
    d->dist.nlocal = w->nt / size;
    d->dist.round_tokens = EMB__MPI_W2V_ROUND;
    d->top = 0, d->every = 1;
    if (size > 1) { /* one rank: the single process's rounds */
        d->top = w->V / 8 < EMB__MPI_W2V_TOP ? w->V / 8 : EMB__MPI_W2V_TOP;
        /* with subwords every sub-round ends in a whole merge: the n-gram rows of frequent
         * words take updates as often as the words' own rows (docs/DISTRIBUTED.md, "Subwords") */
        d->every = d->slot ? 1 : EMB__MPI_W2V_ROUND / EMB__MPI_W2V_SUB;
        d->dist.round_tokens = EMB__MPI_W2V_SUB;
    }
    d->dist.lane0 = rank * d->dist.nlocal;
    d->dist.ctx = d;
    d->dist.round = on_round;
    d->dist.agree = on_agree;
    d->dist.touch = d->slot ? on_touch : NULL;
    w->dist = &d->dist;
    *out = d;
    return EMB_OK;
}

uint64_t emb_mpi_w2v_bytes_sent(const emb_mpi_w2v *d) {
    return d ? d->sent[d->rank] : 0;
}

emb_status emb_mpi_w2v_traffic(const emb_mpi_w2v *d, int rank, emb_mpi_w2v_bytes *out) {
    if (!d || !out) return emb_set_error(EMB_ERR_NULL, "d and out must not be NULL");
    if (rank < 0 || rank >= d->size)
        return emb_set_error(EMB_ERR_INVALID, "rank %d is not one of the run's %d ranks", rank,
                             d->size);
    out->sent = d->sent[rank];
    out->received = d->all_bytes - d->sent[rank];
    out->rounds = d->rounds;
    return EMB_OK;
}
