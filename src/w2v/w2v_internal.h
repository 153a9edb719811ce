/* src/w2v/w2v_internal.h: the emb_w2v struct, shared by the word2vec sources. */
#ifndef EMB_W2V_INTERNAL_H
#define EMB_W2V_INTERNAL_H

#include <emb/embedding.h>
#include <emb/random.h>
#include <emb/vocab.h>
#include <emb/word2vec.h>

#include "internal.h"
#include "kernels/sgns.h"

/* One training thread's place in the corpus. Thread t owns the token range
 * [lo, hi) of the id array; it trains that range once per epoch. */
typedef struct emb__w2v_lane {
    int64_t lo, hi;
    int64_t pos;      /* next token of the current epoch, in [lo, hi] */
    int32_t epoch;    /* epochs this lane has finished */
    uint64_t rng;     /* its random state */
} emb__w2v_lane;

struct emb_w2v {
    emb_w2v_options o;
    emb_vocab *vocab;
    int32_t *ids; /* [n_ids]: token ids, -1 at sentence ends */
    int64_t n_ids;
    int64_t tokens; /* ids that are not sentence ends */
    uint64_t fingerprint;
    emb_embedding *in, *out; /* [V, dim] */
    float *syn0, *syn1;      /* their weights */
    int64_t V;
    /* sampling tables */
    uint32_t *keep;      /* [V]: keep a token when 32 random bits < keep[w] (UINT32_MAX+: always) */
    bool *keep_all;      /* [V] */
    uint32_t *alias_thr; /* [V] */
    int32_t *alias;      /* [V] */
    float sigmoid[EMB__SGNS_TABLE + 1];
    /* progress */
    int nt;
    emb__w2v_lane *lanes; /* [nt] */
    int64_t words_done;   /* tokens processed over all epochs */
    double epoch_loss;    /* loss terms of the current epoch (o.compute_loss), since it began
                             or since the run was resumed */
    int64_t epoch_examples;
    bool diverged;        /* a score or a vector became NaN or infinite: no more training */
};

/* The first row of the input (*table 0) or else the output (*table 1) vectors that holds
 * NaN or an infinity: true with *table and *row set; false when every value is finite. */
bool emb__w2v_find_nonfinite(const emb_w2v *w, int *table, int64_t *row);

/* The loss terms of one step (see emb__sgns_step_fn for its arguments) from the rows as they
 * are before it: the sum over inputs and trained targets of -log sigmoid(+-score)
 * (src/w2v/loss.c). h: dim floats of scratch (CBOW). */
double emb__w2v_step_loss(const float *syn0, const float *syn1, int64_t dim, const int32_t *ctx,
                          int m, const int32_t *tgt, int n, bool cbow, bool cbow_mean, float *h);

/* A checkpoint (or --save-model file) read as a model: its dim, words with counts, and both
 * tables (malloc'd [V, dim] each). Sizes checked before allocating (src/w2v/checkpoint.c). */
emb_status emb__w2v_read_model(const unsigned char *data, size_t n, const char *path, int64_t *dim,
                               emb_vocab **vocab, float **syn0, float **syn1);

/* Word i's subsampling threshold for a word seen `count` times in `total` tokens. */
void emb__w2v_set_keep(emb_w2v *w, int64_t i, double count, double total);

/* Builds everything from a vocabulary and final ids (both taken over; src/w2v/trainer.c). */
emb_status emb__w2v_setup(const emb_w2v_options *o, emb_vocab *vocab, int32_t *ids, int64_t n,
                          emb_w2v **out);

/* Reads and tokenises a corpus, builds the sorted, pruned vocabulary and the final ids
 * (dropped words removed, -1 at line ends, no two -1 in a row). */
emb_status emb__w2v_read_corpus(const emb_w2v_options *o, FILE *f, const char *name,
                                emb_vocab **vocab, int32_t **ids, int64_t *n);

#endif /* EMB_W2V_INTERNAL_H */
