/* Tables of every storage type over rows emb does not draw, under mpirun at 1, 2 and 4 ranks:
 * rows the caller keeps as an emb_qtable (emb_mpi_table_wrap_qtable) and a table file every
 * rank maps (emb_mpi_table_map_qtable). Their shards, lookups and bags are the single
 * process's emb_qtable of the whole table on the joined batch, bit for bit; SGD steps on
 * wrapped f16/bf16 rows write the caller's memory and equal emb_qtable_sgd_step_bag's; mapped
 * and read-only rows refuse steps and stay as they were. Wrong storage types, row counts and
 * dims are refused on every rank. */
#include "mpi_check.h"

#include <unistd.h>

static char dir_[200];

/* The rows [b, e) rank r holds: as the library places them (mpi.h, emb_mpi_sharding). */
static void rows_of(int r, int64_t V, emb_mpi_sharding sh, int64_t *b, int64_t *e) {
    if (sh == EMB_MPI_ROW_WISE) {
        *b = V * r / size_;
        *e = V * (r + 1) / size_;
    } else {
        *b = *e = 0; /* the last rank holds the table; the others [0, 0) */
        if (r == size_ - 1) *e = V;
    }
}

/* The single process's table: emb_bag_create's rows from `seed`, in storage type qt. */
static emb_qtable *single_table(int64_t V, int64_t D, emb_qtype qt, const emb_bag_options *bo,
                                uint64_t seed) {
    emb_manual_seed(seed);
    emb_bag *b = NULL;
    emb_qtable *q = NULL;
    emb_tensor w;
    OK(emb_bag_create(V, D, bo, &b));
    OK(emb_bag_weight(b, &w));
    OK(emb_qtable_quantize(&w, qt, &q));
    emb_bag_free(b);
    return q;
}

/* A wrapped (mapped == false) or mapped table of qt rows against a single process's table
 * of the same bytes, over three steps of lookups and bags (and SGD on f16/bf16). */
static void run_case(int64_t V, int64_t D, emb_qtype qt, emb_bag_mode mode, bool use_psw,
                     emb_mpi_sharding sh, bool mapped, uint64_t seed) {
    char what[160], path[256];
    snprintf(what, sizeof what, "%s %s V=%" PRId64 " D=%" PRId64 " mode=%d psw=%d sharding=%d",
             mapped ? "mapped" : "wrapped", emb_qtype_name(qt), V, D, (int)mode, use_psw, (int)sh);
    snprintf(path, sizeof path, "%s/table.safetensors", dir_);
    emb_bag_options bo;
    emb_mpi_shard_options so;
    table_options(mode, -1, sh, &bo, &so);
    so.qtype = qt;
    emb_qtable *rq = single_table(V, D, qt, &bo, seed);
    const int64_t rb = emb_qtable_row_nbytes(rq);
    int64_t b0, b1;
    rows_of(rank_, V, sh, &b0, &b1);
    unsigned char *mine = NULL; /* the caller's rows of a wrapped table */
    emb_qtable *lq = NULL;
    emb_mpi_table *t = NULL;
    if (mapped) {
        if (rank_ == 0) OK(emb_qtable_save(path, rq, NULL));
        MPI_Barrier(MPI_COMM_WORLD);
        emb_qtable_free(rq); /* the single process maps the file too */
        rq = NULL;
        OK(emb_qtable_map(path, &rq, NULL));
        OK(emb_mpi_table_map_qtable(MPI_COMM_WORLD, path, &bo, &so, &t));
    } else {
        mine = malloc((size_t)((b1 - b0) * rb + 1));
        memcpy(mine, (const char *)emb_qtable_data(rq) + b0 * rb, (size_t)((b1 - b0) * rb));
        OK(emb_qtable_wrap(qt, b1 - b0, D, b1 > b0 ? mine : NULL, (size_t)((b1 - b0) * rb), NULL,
                           &lq));
        OK(emb_mpi_table_wrap_qtable(MPI_COMM_WORLD, V, lq, &bo, &so, &t));
    }
    if (!t || !rq) {
        emb_mpi_table_free(t);
        emb_qtable_free(lq);
        emb_qtable_free(rq);
        free(mine);
        return;
    }
    int64_t g0, g1;
    emb_mpi_table_rows(t, &g0, &g1);
    CHECK(g0 == b0 && g1 == b1, "%s: rows [%" PRId64 ", %" PRId64 ")", what, g0, g1);
    const emb_qtable *shard = emb_mpi_table_qshard(t);
#define SAME_SHARD(when)                                                                           \
    CHECK(b1 == b0 || (shard && !memcmp(emb_qtable_data(shard),                                    \
                                        (const char *)emb_qtable_data(rq) + b0 * rb,               \
                                        (size_t)((b1 - b0) * rb))),                                \
          "%s: shard bytes differ %s", what, when)
    if (qt != EMB_QTYPE_F32) {
        SAME_SHARD("after creation");
        /* the rows where the caller keeps them: no copy */
        if (!mapped && b1 > b0)
            CHECK(shard && emb_qtable_data(shard) == (const void *)mine, "%s: rows copied", what);
    }
    {
        unsigned char *full = rank_ == 0 ? malloc((size_t)(V * rb)) : NULL;
        int64_t fs[2] = {V, qt == EMB_QTYPE_F32 ? D : rb};
        emb_tensor ft;
        if (rank_ == 0) ft = view(qt == EMB_QTYPE_F32 ? EMB_FLOAT32 : EMB_UINT8, full, 2, fs);
        OK(emb_mpi_table_gather(t, 0, rank_ == 0 ? &ft : NULL));
        if (rank_ == 0)
            CHECK(!memcmp(full, emb_qtable_data(rq), (size_t)(V * rb)), "%s: gathered rows differ",
                  what);
        free(full);
    }
    const bool trainable = qt == EMB_QTYPE_F16 || qt == EMB_QTYPE_BF16;
    const bool train = trainable && mode != EMB_BAG_MAX;
    emb_optimizer_options oo = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    oo.lr = 0.25;
    if (trainable) OK(emb_mpi_table_set_optimizer(t, &oo));
    emb_generator *g = NULL;
    OK(emb_generator_create(seed * 31 + 7, &g));
    for (int step = 0; step < 3; step++) {
        joined j;
        make_joined(&j, g, V, D, -1, use_psw);
        const bool mx = mode == EMB_BAG_MAX;
        OK(emb_qtable_bag_forward(rq, &j.gin, &j.goff, j.rp, &bo, &j.ro, mx ? &j.rm : NULL));
        OK(emb_mpi_table_bag_forward(t, &j.q.input, &j.q.offsets, j.lp, &j.lo, mx ? &j.lm : NULL));
        check_forward(&j, &j.b, mx, what);
        float *lk = malloc((size_t)(j.q.n * D + 1) * sizeof(float));
        float *rk = malloc((size_t)(j.b.npos * D + 1) * sizeof(float));
        const int64_t lks[2] = {j.q.n, D}, rks[2] = {j.b.npos, D};
        emb_tensor lkt = view(EMB_FLOAT32, lk, 2, lks), rkt = view(EMB_FLOAT32, rk, 2, rks);
        OK(emb_qtable_forward(rq, &j.gin, &rkt));
        OK(emb_mpi_table_lookup(t, &j.q.input, &lkt));
        CHECK(same_rows(lk, rk + j.b.pos0[rank_] * D, j.q.n * D), "%s: lookup differs", what);
        if (train && !mapped) {
            OK(emb_qtable_sgd_step_bag(rq, &j.gin, &j.goff, j.rp, &bo, &j.ggo, (float)oo.lr,
                                       EMB_QROUND_NEAREST, NULL));
            OK(emb_mpi_table_bag_step(t, &j.q.input, &j.q.offsets, j.lp, &j.q.gout));
            SAME_SHARD("after a step");
        } else if (train) {
            emb_status st = emb_mpi_table_bag_step(t, &j.q.input, &j.q.offsets, j.lp, &j.q.gout);
            CHECK(st == EMB_ERR_READ_ONLY, "%s: a step on mapped rows gave %d", what, st);
            SAME_SHARD("after a refused step");
        }
        free(lk);
        free(rk);
        free_joined(&j);
    }
#undef SAME_SHARD
    emb_generator_free(g);
    emb_mpi_table_free(t);
    /* free left the caller's rows alone: they hold the trained values */
    if (mine && b1 > b0)
        CHECK(!memcmp(mine, (const char *)emb_qtable_data(rq) + b0 * rb, (size_t)((b1 - b0) * rb)),
              "%s: the caller's rows after free", what);
    emb_qtable_free(lq);
    emb_qtable_free(rq);
    free(mine);
    MPI_Barrier(MPI_COMM_WORLD);
    if (mapped && rank_ == 0) unlink(path);
}

/* Rows the caller keeps read-only: lookups work, steps are refused and change nothing. */
static void run_read_only(void) {
    const int64_t V = 23, D = 6;
    emb_bag_options bo = emb_bag_options_default();
    emb_mpi_shard_options so = emb_mpi_shard_options_default();
    so.qtype = EMB_QTYPE_BF16;
    emb_qtable *rq = single_table(V, D, so.qtype, &bo, 77);
    const int64_t rb = emb_qtable_row_nbytes(rq);
    int64_t b0, b1;
    rows_of(rank_, V, EMB_MPI_ROW_WISE, &b0, &b1);
    const emb_storage ro = {.read_only = true};
    emb_qtable *lq = NULL;
    emb_mpi_table *t = NULL;
    OK(emb_qtable_wrap(so.qtype, b1 - b0, D, (const char *)emb_qtable_data(rq) + b0 * rb,
                       (size_t)((b1 - b0) * rb), &ro, &lq));
    OK(emb_mpi_table_wrap_qtable(MPI_COMM_WORLD, V, lq, &bo, &so, &t));
    emb_optimizer_options oo = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    OK(emb_mpi_table_set_optimizer(t, &oo));
    emb_generator *g = NULL;
    OK(emb_generator_create(5, &g));
    joined j;
    make_joined(&j, g, V, D, -1, false);
    OK(emb_qtable_bag_forward(rq, &j.gin, &j.goff, NULL, &bo, &j.ro, NULL));
    OK(emb_mpi_table_bag_forward(t, &j.q.input, &j.q.offsets, NULL, &j.lo, NULL));
    check_forward(&j, &j.b, false, "read-only rows");
    emb_status st = emb_mpi_table_bag_step(t, &j.q.input, &j.q.offsets, NULL, &j.q.gout);
    CHECK(st == EMB_ERR_READ_ONLY, "a step on read-only rows gave %d", st);
    free_joined(&j);
    emb_generator_free(g);
    emb_mpi_table_free(t);
    emb_qtable_free(lq);
    emb_qtable_free(rq);
}

/* Refusals, on every rank, with what the message names. */
static void refused_on_all(emb_status st, emb_mpi_table *t, emb_status want, const char *words,
                           const char *what) {
    CHECK(st == want && t == NULL, "%s: got %d, expected %d", what, st, want);
    CHECK(words == NULL || strstr(emb_errmsg(), words) != NULL, "%s: message: %s", what,
          emb_errmsg());
    emb_mpi_table_free(t);
}

static void run_refusals(void) {
    const int64_t V = 19, D = 5;
    emb_bag_options bo = emb_bag_options_default();
    emb_mpi_shard_options so = emb_mpi_shard_options_default();
    emb_qtable *rq = single_table(V, D, EMB_QTYPE_F16, &bo, 91);
    const int64_t rb = emb_qtable_row_nbytes(rq);
    char path[256];
    snprintf(path, sizeof path, "%s/f16.safetensors", dir_);
    if (rank_ == 0) OK(emb_qtable_save(path, rq, NULL));
    MPI_Barrier(MPI_COMM_WORLD);
    emb_mpi_table *t = NULL;
    /* a file of f16 rows with the shard options' default (f32), then int8 */
    emb_status st = emb_mpi_table_map_qtable(MPI_COMM_WORLD, path, &bo, &so, &t);
    refused_on_all(st, t, EMB_ERR_DTYPE, "holds f16 rows", "f16 file, f32 options");
    so.qtype = EMB_QTYPE_INT8;
    t = NULL;
    st = emb_mpi_table_map_qtable(MPI_COMM_WORLD, path, &bo, &so, &t);
    refused_on_all(st, t, EMB_ERR_DTYPE, "qtype is int8", "f16 file, int8 options");
    /* a file missing on the last rank only */
    char missing[256];
    snprintf(missing, sizeof missing, "%s/missing.safetensors", dir_);
    so.qtype = EMB_QTYPE_F16;
    t = NULL;
    st =
        emb_mpi_table_map_qtable(MPI_COMM_WORLD, rank_ == size_ - 1 ? missing : path, &bo, &so, &t);
    refused_on_all(st, t, EMB_ERR_IO, rank_ == size_ - 1 ? "missing.safetensors" : "refused",
                   "a file missing on the last rank");
    /* the float32 wrap with f16 options */
    int64_t b0, b1;
    rows_of(rank_, V, EMB_MPI_ROW_WISE, &b0, &b1);
    float *f = calloc((size_t)((b1 - b0) * D + 1), sizeof(float));
    const int64_t fs[2] = {b1 - b0, D};
    emb_tensor ft = view(EMB_FLOAT32, f, 2, fs);
    t = NULL;
    st = emb_mpi_table_wrap(MPI_COMM_WORLD, V, &ft, &bo, &so, &t);
    refused_on_all(st, t, EMB_ERR_DTYPE, "the rows are f32", "float32 rows, f16 options");
    free(f);
    /* one rank's rows of another type, then one rank's rows one too many, then another dim */
    emb_qtable *lq = NULL, *other = NULL;
    OK(emb_qtable_wrap(EMB_QTYPE_F16, b1 - b0, D, (const char *)emb_qtable_data(rq) + b0 * rb,
                       (size_t)((b1 - b0) * rb), NULL, &lq));
    unsigned char *bytes = calloc((size_t)((b1 - b0 + 1) * (D + 2) * 2), 1);
    OK(emb_qtable_wrap(EMB_QTYPE_BF16, b1 - b0, D, bytes, (size_t)((b1 - b0) * rb), NULL, &other));
    t = NULL;
    st = emb_mpi_table_wrap_qtable(MPI_COMM_WORLD, V, rank_ == 0 ? other : lq, &bo, &so, &t);
    refused_on_all(st, t, EMB_ERR_DTYPE, rank_ == 0 ? "the rows are bf16" : NULL,
                   "bf16 rows on rank 0");
    emb_qtable_free(other);
    other = NULL;
    OK(emb_qtable_wrap(EMB_QTYPE_F16, b1 - b0 + 1, D, bytes, (size_t)((b1 - b0 + 1) * rb), NULL,
                       &other));
    t = NULL;
    st =
        emb_mpi_table_wrap_qtable(MPI_COMM_WORLD, V, rank_ == size_ - 1 ? other : lq, &bo, &so, &t);
    refused_on_all(st, t, EMB_ERR_SHAPE, rank_ == size_ - 1 ? "rows" : NULL,
                   "a row too many on the last rank");
    emb_qtable_free(other);
    other = NULL;
    /* rank 0's rows of dim D + 2 (the right count): the dims disagree */
    if (size_ > 1) {
        OK(emb_qtable_wrap(EMB_QTYPE_F16, b1 - b0, D + 2, bytes, (size_t)((b1 - b0) * (D + 2) * 2),
                           NULL, &other));
        t = NULL;
        st = emb_mpi_table_wrap_qtable(MPI_COMM_WORLD, V, rank_ == 0 ? other : lq, &bo, &so, &t);
        refused_on_all(st, t, EMB_ERR_INVALID, "embedding_dim", "dims that differ");
    }
    st = emb_mpi_table_wrap_qtable(MPI_COMM_WORLD, V, NULL, &bo, &so, &t);
    refused_on_all(st, t, EMB_ERR_NULL, NULL, "NULL rows");
    emb_qtable_free(other);
    emb_qtable_free(lq);
    emb_qtable_free(rq);
    free(bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) unlink(path);
}

int main(int argc, char **argv) {
    mpi_check_init(&argc, &argv);
    if (rank_ == 0) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir_, sizeof dir_, "%s/emb_mpi_qsrc_XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir_)) dir_[0] = '\0';
    }
    MPI_Bcast(dir_, (int)sizeof dir_, MPI_CHAR, 0, MPI_COMM_WORLD);
    const emb_qtype qts[5] = {EMB_QTYPE_F16, EMB_QTYPE_BF16, EMB_QTYPE_INT8, EMB_QTYPE_INT4,
                              EMB_QTYPE_F32};
    uint64_t seed = 11;
    for (int mapped = 0; mapped < 2; mapped++)
        for (int qi = 0; qi < 5; qi++)
            for (int sh = 0; sh < 2; sh++)
                for (int mode = 0; mode < 3; mode++)
                    run_case(qi == 3 ? 41 : 37, qi == 3 ? 7 : 6, qts[qi], (emb_bag_mode)mode,
                             mode == EMB_BAG_SUM && qi % 2 == 0, (emb_mpi_sharding)sh, mapped != 0,
                             seed++);
    /* 900 rows of 130 int8 codes: the shards start inside pages of the mapped file */
    run_case(900, 130, EMB_QTYPE_INT8, EMB_BAG_MEAN, false, EMB_MPI_ROW_WISE, true, seed++);
    run_read_only();
    run_refusals();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) rmdir(dir_);
    return mpi_check_finish(NULL);
}
