/* src/w2v/lanes.h: the threads' scratch of a word2vec run and their copies of the tables'
 * frequent rows, merged between rounds (lanes.c; the training loop is trainer.c). Internal. */
#ifndef EMB_W2V_LANES_H
#define EMB_W2V_LANES_H

#include "w2v_internal.h"

typedef struct emb__w2v_lane_scratch {
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

/* A thread's dirty marks: the rows of its copies it changed since they were last merged. */
#define DIRTY_OUT 1
#define DIRTY_IN  2
/* What phase 1 of a merge found for a copied row (the merge's `from` record): no lane changed
 * it, several did, or (>= 0) the share of the one lane that did. */
#define FROM_NONE (-1)
#define FROM_MANY (-2)
/* Rounds between whole merges (every copied row; the first rows are merged every round). */
#define EMB__W2V_WHOLE_EVERY 8

/* The threads whose scratch a training call allocates before the others fail as if out of
 * memory (a test hook of the distributed tests; INT_MAX by default: lanes.c). */
extern int emb__w2v_max_scratch_lanes;

/* Allocates a thread's scratch (its copies aside); false when out of memory (what was
 * allocated is freed with the rest). */
bool emb__w2v_lane_init(const emb_w2v *w, lane_scratch *s);
/* Frees the scratch of nl threads (ls may be NULL). */
void emb__w2v_lanes_free(lane_scratch *ls, int nl);
/* Gives each of the nth threads its copies of the tables' first rows and *from the merge's
 * record of them (of the output rows, then of the input rows): the output rows copied, or 0
 * when none are (one thread, or no memory: the tables are then updated in place). The copies
 * are filled by the first round's phase 2, each on its thread. */
int64_t emb__w2v_lanes_copy(const emb_w2v *w, lane_scratch *ls, int nth, int32_t **from);
/* Phase 1 of a merge: share u of nt writes its part of the table's first nhot copied rows
 * (input: the input table's) from the threads' copies, and records them in from. */
void emb__w2v_merge_into(const emb_w2v *w, const lane_scratch *ls, int nt, int u, bool input,
                         int32_t *from, int64_t nhot);
/* Phase 2, on thread u: the rows of the first nhot that another thread changed into its copy,
 * its dirty marks of them cleared; or every copied row when `all`. */
void emb__w2v_take_merged(const emb_w2v *w, lane_scratch *s, int u, const int32_t *from, bool all,
                          bool input, int64_t nhot);

#endif /* EMB_W2V_LANES_H */
