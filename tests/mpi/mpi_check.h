/* tests/mpi/mpi_check.h: what the tests of libemb_mpi share: the start and end of a test
 * program (MPI, this rank's place, the verdict over all ranks), checks that count failures
 * per rank, a batch for all ranks at once (every rank makes the same one) and each rank's
 * part of it, the single process's arguments and outputs beside this rank's. */
#ifndef EMB_TESTS_MPI_CHECK_H
#define EMB_TESTS_MPI_CHECK_H

#include <emb/emb.h>
#include <emb/mpi.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank_, size_, failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", rank_, __FILE__, __LINE__,       \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, " (%s)\n", emb_errmsg());                                              \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define OK(call) CHECK((call) == EMB_OK, "%s", #call)

static const char *test_name_ = "test";

/* The start of a test's main: MPI_Init, and this rank's place in MPI_COMM_WORLD (rank_,
 * size_); the program's name (argv[0] without its folder) names the test in its verdict. */
static inline void mpi_check_init(int *argc, char ***argv) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (*argc > 0 && (*argv)[0]) {
        const char *slash = strrchr((*argv)[0], '/');
        test_name_ = slash ? slash + 1 : (*argv)[0];
    }
}

/* The end of a test's main (collective): the failed checks of all ranks summed, rank 0 prints
 * "<test> at R ranks: <detail; >N failed checks" (detail may be NULL), MPI_Finalize; returns
 * the program's exit status, 1 when any check failed on any rank. */
static inline int mpi_check_finish(const char *detail) {
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0)
        printf("%s at %d ranks: %s%s%d failed checks\n", test_name_, size_, detail ? detail : "",
               detail ? "; " : "", all);
    MPI_Finalize();
    return all ? 1 : 0;
}

static inline emb_tensor view(emb_dtype dt, void *data, int ndim, const int64_t *shape) {
    emb_tensor t;
    if (emb_tensor_init(&t, dt, data, ndim, shape)) abort();
    return t;
}

/* A table's options for a case: bag options of `mode` with padding row `pad` (-1: none), shard
 * options of `sharding` (a table-wise table on the last rank). */
static inline void table_options(emb_bag_mode mode, int64_t pad, emb_mpi_sharding sharding,
                                 emb_bag_options *bo, emb_mpi_shard_options *so) {
    *bo = emb_bag_options_default();
    bo->mode = mode;
    bo->padding_idx = pad >= 0 ? pad : EMB_PADDING_NONE;
    *so = emb_mpi_shard_options_default();
    so->sharding = sharding;
    so->owner = size_ - 1;
}

/* A batch for all ranks at once (every rank makes the same one), and each rank's part. */
typedef struct batch {
    int64_t nbags, npos;
    int64_t *input, *offsets;   /* joined: [npos], [nbags] */
    float *psw, *gout;          /* [npos], [nbags, dim] */
    int64_t bag0[64], pos0[64]; /* rank r's bags [bag0[r], bag0[r+1]), positions likewise */
} batch;

static inline void make_batch(batch *b, emb_generator *g, int64_t V, int64_t D, int64_t pad) {
    memset(b, 0, sizeof *b);
    int64_t per[64];
    for (int r = 0; r < size_; r++) /* uneven sizes; rank 2 of 4 has no bag at all */
        per[r] = (size_ == 4 && r == 2) ? 0 : 2 + (int64_t)(emb_generator_random(g) % 5);
    for (int r = 0; r < size_; r++) b->bag0[r + 1] = b->bag0[r] + per[r];
    b->nbags = b->bag0[size_];
    int64_t *len = malloc((size_t)(b->nbags + 1) * sizeof *len);
    for (int64_t i = 0; i < b->nbags; i++) b->npos += len[i] = emb_generator_random(g) % 6;
    b->input = malloc((size_t)(b->npos + 1) * sizeof *b->input);
    b->offsets = malloc((size_t)(b->nbags + 1) * sizeof *b->offsets);
    b->psw = malloc((size_t)(b->npos + 1) * sizeof *b->psw);
    b->gout = malloc((size_t)(b->nbags * D + 1) * sizeof *b->gout);
    int64_t p = 0;
    for (int64_t i = 0; i < b->nbags; i++) {
        b->offsets[i] = p;
        for (int64_t k = 0; k < len[i]; k++, p++) {
            uint32_t u = emb_generator_random(g);
            /* few distinct rows, so that rows repeat within and across ranks */
            b->input[p] = (pad >= 0 && u % 7 == 0) ? pad
                                                   : (int64_t)(u / 7 % (uint32_t)(V < 9 ? V : 9)) *
                                                         (V / 9 > 0 ? V / 9 : 1) % V;
            b->psw[p] = (float)(emb_generator_random(g) % 1000) / 250.0f - 2.0f;
        }
    }
    int64_t gs[2] = {b->nbags, D};
    emb_tensor gt = view(EMB_FLOAT32, b->gout, 2, gs);
    if (b->nbags) emb_randn_(&gt, g);
    for (int r = 0; r <= size_; r++)
        b->pos0[r] =
            r < size_ ? (b->bag0[r] < b->nbags ? b->offsets[b->bag0[r]] : b->npos) : b->npos;
    /* a rank without bags starts where the next one does */
    for (int r = size_ - 1; r >= 0; r--)
        if (b->bag0[r] == b->bag0[r + 1]) b->pos0[r] = b->pos0[r + 1];
    free(len);
}

static inline void free_batch(batch *b) {
    free(b->input);
    free(b->offsets);
    free(b->psw);
    free(b->gout);
}

/* This rank's part: input, offsets (shifted), psw, gout. */
typedef struct part {
    int64_t n, nb, *offs;
    emb_tensor input, offsets, psw, gout;
} part;

static inline void make_part(part *q, const batch *b, int64_t D) {
    const int r = rank_;
    q->n = b->pos0[r + 1] - b->pos0[r];
    q->nb = b->bag0[r + 1] - b->bag0[r];
    q->offs = malloc((size_t)(q->nb + 1) * sizeof *q->offs);
    for (int64_t i = 0; i < q->nb; i++) q->offs[i] = b->offsets[b->bag0[r] + i] - b->pos0[r];
    int64_t gs[2] = {q->nb, D};
    q->input = view(EMB_INT64, b->input + b->pos0[r], 1, &q->n);
    q->offsets = view(EMB_INT64, q->offs, 1, &q->nb);
    q->psw = view(EMB_FLOAT32, b->psw + b->pos0[r], 1, &q->n);
    q->gout = view(EMB_FLOAT32, b->gout + b->bag0[r] * D, 2, gs);
}

static inline bool same_rows(const float *a, const float *b, int64_t n) {
    return n == 0 || memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

/* A step's batch, this rank's part, the joined batch's views (the single process's
 * arguments), and the outputs of a bag forward: the single process's (r) and this rank's (l). */
typedef struct joined {
    batch b;
    part q;
    int64_t os[2], ls[2];
    emb_tensor gin, goff, gpsw, ggo;
    const emb_tensor *rp, *lp; /* per_sample_weights or NULL */
    float *rout, *lout;
    int64_t *rmax, *lmax;
    emb_tensor ro, lo, rm, lm;
} joined;

static inline void make_joined(joined *j, emb_generator *g, int64_t V, int64_t D, int64_t pad,
                               bool use_psw) {
    batch *b = &j->b;
    part *q = &j->q;
    make_batch(b, g, V, D, pad);
    make_part(q, b, D);
    j->os[0] = b->nbags;
    j->ls[0] = q->nb;
    j->os[1] = j->ls[1] = D;
    j->gin = view(EMB_INT64, b->input, 1, &b->npos);
    j->goff = view(EMB_INT64, b->offsets, 1, &b->nbags);
    j->gpsw = view(EMB_FLOAT32, b->psw, 1, &b->npos);
    j->ggo = view(EMB_FLOAT32, b->gout, 2, j->os);
    j->rp = use_psw ? &j->gpsw : NULL;
    j->lp = use_psw ? &q->psw : NULL;
    j->rout = malloc((size_t)(b->nbags * D + 1) * sizeof(float));
    j->lout = malloc((size_t)(q->nb * D + 1) * sizeof(float));
    j->rmax = malloc((size_t)(b->nbags * D + 1) * sizeof(int64_t));
    j->lmax = malloc((size_t)(q->nb * D + 1) * sizeof(int64_t));
    j->ro = view(EMB_FLOAT32, j->rout, 2, j->os);
    j->lo = view(EMB_FLOAT32, j->lout, 2, j->ls);
    j->rm = view(EMB_INT64, j->rmax, 2, j->os);
    j->lm = view(EMB_INT64, j->lmax, 2, j->ls);
}

/* This rank's pooled rows (and max_indices) against its part of the single process's. */
static inline void check_forward(const joined *j, const batch *b, bool mx, const char *what) {
    const int64_t D = j->os[1], nb = j->ls[0], b0 = b->bag0[rank_];
    CHECK(same_rows(j->lout, j->rout + b0 * D, nb * D), "%s: bag forward differs", what);
    if (mx)
        CHECK(nb == 0 || !memcmp(j->lmax, j->rmax + b0 * D, (size_t)(nb * D) * sizeof(int64_t)),
              "%s: max_indices differ", what);
}

static inline void free_joined(joined *j) {
    free(j->q.offs);
    free_batch(&j->b);
    free(j->rout);
    free(j->lout);
    free(j->rmax);
    free(j->lmax);
}

/* The shard's rows against the single-process table's. */
/* A sharded table and the single process's bag, both created from `seed` (the generator is
   seeded again before each, so both hold the same rows). */
static inline void make_twins(int64_t V, int64_t D, const emb_bag_options *bo,
                              const emb_mpi_shard_options *so, uint64_t seed, emb_mpi_table **t,
                              emb_bag **ref) {
    emb_manual_seed(seed);
    OK(emb_mpi_table_create(MPI_COMM_WORLD, V, D, bo, so, t));
    emb_manual_seed(seed);
    OK(emb_bag_create(V, D, bo, ref));
}

static inline void check_shard(emb_mpi_table *t, emb_bag *ref, const char *when) {
    emb_tensor s, w;
    int64_t b0, b1;
    emb_mpi_table_rows(t, &b0, &b1);
    OK(emb_mpi_table_shard(t, &s));
    OK(emb_bag_weight(ref, &w));
    const int64_t D = emb_mpi_table_dim(t);
    CHECK(same_rows(s.data, (float *)w.data + b0 * D, (b1 - b0) * D),
          "shard rows [%" PRId64 ", %" PRId64 ") differ from the single process's %s", b0, b1,
          when);
}

#endif /* EMB_TESTS_MPI_CHECK_H */
