/* src/w2v/w2v_state.h: the layout of a word2vec run (struct emb_w2v) and of the hook a
 * distributed run installs in it. Types only, no function: libemb_mpi (src/mpi/mpi_w2v.c),
 * which sees libemb's public symbols only, reads a run's tables, lanes and progress through
 * it; it is built from the same sources as libemb. */
#ifndef EMB_W2V_STATE_H
#define EMB_W2V_STATE_H

#include <emb/embedding.h>
#include <emb/vocab.h>
#include <emb/word2vec.h>

#include "kernels/sgns.h"

/* The corpus's token ids (-1 at sentence ends), n of them: in memory (mem: the array given
 * to emb_w2v_create_from_ids, or a corpus read from text whose ids never filled the write
 * buffer, 16,384 ids), or in an unlinked temporary file in TMPDIR (default /tmp) that is read
 * back through small buffers (src/w2v/idstore.c). */
typedef struct emb__w2v_ids {
    int32_t *mem;
    int fd;
    int64_t n;
    int32_t *wbuf; /* while the file is written: ids not yet written */
    int64_t wn;
    char *name; /* the corpus, for messages (owned; NULL: "the corpus") */
} emb__w2v_ids;

/* One training thread's place in the corpus. Thread t owns the token range
 * [lo, hi) of the id array; it trains that range once per epoch. */
typedef struct emb__w2v_lane {
    int64_t lo, hi;
    int64_t pos;   /* next token of the current epoch, in [lo, hi] */
    int32_t epoch; /* epochs this lane has finished */
    uint64_t rng;  /* its random state */
} emb__w2v_lane;

/* One entry of the alias table: a draw that picks entry i returns i when 32 random bits
 * are below thr, else alias (thr = UINT32_MAX entries have alias = i). Side by side, so
 * that a draw reads one cache line. */
typedef struct emb__w2v_alias {
    uint32_t thr;
    int32_t alias;
} emb__w2v_alias;

/* What one process's lanes did in a round (summed in lane order): tokens processed, loss terms
 * and examples, and whether an id could not be read back or a score was not finite. */
typedef struct emb__w2v_round {
    int64_t done;
    double loss;
    int64_t examples;
    int32_t read_failed, read_errno, nonfinite;
} emb__w2v_round;

/* A run whose lanes are spread over several processes (src/mpi/mpi_w2v.c, libemb_mpi): this
 * process trains lanes [lane0, lane0 + nlocal) of the nt; every process holds all of the run's
 * state (tables, lanes, progress) and keeps it equal to the others'. After each round,
 * round() makes the tables and lanes of every process the same (the merged ones) and replaces
 * *r with the sums over all processes; after each progress report, agree() returns non-zero on
 * every process when stop was non-zero on any. A non-zero status from round() stops the run
 * with that status and msg. touch(), when not NULL, is called (from any of this process's
 * threads) before a step with subwords changes the input rows rows[0..n). Set and cleared by
 * libemb_mpi through this struct's layout (it is built from the same sources), never by libemb
 * itself. */
typedef struct emb__w2v_dist {
    int lane0, nlocal;
    int64_t round_tokens; /* tokens per lane and round (0: the single process's 16,384) */
    bool partial;         /* set by round(): it merged part of the tables only, so the processes'
                             tables still differ; no progress report and no agreement follow it */
    void *ctx;
    emb_status (*round)(void *ctx, emb_w2v *w, emb__w2v_round *r);
    int (*agree)(void *ctx, int stop);
    void (*touch)(void *ctx, const int32_t *rows, int n);
    char msg[512];
} emb__w2v_dist;

/* What the corpus reader read, file by file: the name (the path, "<stdin>", or a stream's
 * name), the bytes of its text (decompressed) and a fingerprint of them; kept by a run so
 * that a checkpoint can name the file a resume gives differently (src/w2v/checkpoint.c). */
typedef struct emb__corpus_file {
    char *name;
    uint64_t bytes, hash;
} emb__corpus_file;

typedef struct emb__corpus_files {
    emb__corpus_file *v;
    size_t n;
} emb__corpus_files;

struct emb_w2v {
    emb_w2v_options o;
    emb_vocab *vocab;
    emb__w2v_ids ids;                      /* the token ids, -1 at sentence ends */
    int64_t n_ids;                         /* ids.n */
    int64_t tokens;                        /* ids that are not sentence ends */
    int64_t skipped_invalid, skipped_long; /* tokens a lenient read skipped */
    uint64_t fingerprint;
    emb__corpus_files files; /* the corpus files read (none for a run from ids) */
    emb_embedding *in, *out; /* [V, dim] */
    float *syn0, *syn1;      /* their weights */
    int64_t V;
    /* sampling tables */
    uint32_t *keep;   /* [V]: keep a token when 32 random bits < keep[w] (UINT32_MAX+: always) */
    bool *keep_all;   /* [V] */
    double *weight;   /* [V]: the keep probability as a double (emb__w2v_keep_weight) */
    double keep_mean; /* the mean keep probability of the corpus's tokens (round sizes) */
    emb__w2v_alias *alias; /* [V] Walker's alias table of the negatives */
    float sigmoid[EMB__SGNS_TABLE + 1];
    /* progress */
    int nt;
    emb__w2v_lane *lanes; /* [nt] */
    int64_t words_done;   /* tokens processed over all epochs */
    double epoch_loss;    /* loss terms of the current epoch (o.compute_loss), since it began
                             or since the run was resumed */
    int64_t epoch_examples;
    bool diverged; /* a score or a vector became NaN or infinite: no more training */
    /* subwords (o.maxn > 0): word i's input rows are sub_rows[sub_off[i] .. sub_off[i+1]):
     * i itself, then its n-grams' rows V + hash % bucket; NULL without subwords */
    int64_t *sub_off; /* [V + 1] */
    int32_t *sub_rows;
    int64_t sub_max;     /* the most rows of one word */
    emb__w2v_dist *dist; /* NULL unless a distributed run (libemb_mpi) is training w */
};

#endif /* EMB_W2V_STATE_H */
