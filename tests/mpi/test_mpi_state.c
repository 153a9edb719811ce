/* The gathered optimizer state of sharded tables, under mpirun at 1, 2 and 4 ranks: after k
 * steps the state a table saves is byte for byte the single process's
 * emb_optimizer_save_state of the whole table (SGD's sparse momentum buffer included, with
 * its step count); loaded into a fresh sharded table holding the same rows, training goes on
 * exactly as the uninterrupted run and the single process. Loads refused on one rank change
 * nothing anywhere. */
#include "mpi_check.h"

enum { SGD_MOM, SGD_NESTEROV, ADAGRAD, SPARSE_ADAM, DENSE_ADAM, DENSE_SGD_MOM, NCASES };

static bool dense_case(int c) {
    return c >= DENSE_ADAM;
}

static emb_optimizer_options case_options(int c) {
    static const emb_optimizer_kind kinds[NCASES] = {
        EMB_OPTIMIZER_SGD,         EMB_OPTIMIZER_SGD,  EMB_OPTIMIZER_ADAGRAD,
        EMB_OPTIMIZER_SPARSE_ADAM, EMB_OPTIMIZER_ADAM, EMB_OPTIMIZER_SGD};
    emb_optimizer_options o = emb_optimizer_options_default(kinds[c]);
    o.lr = 0.1;
    if (c == SGD_MOM || c == DENSE_SGD_MOM) {
        o.momentum = 0.9;
        o.dampening = 0.25;
    }
    if (c == SGD_NESTEROV) {
        o.momentum = 0.8;
        o.nesterov = true;
    }
    if (c == DENSE_ADAM) o.amsgrad = true;
    return o;
}

/* One step of the case on the single process and on each table of ts (NULL skipped). */
static void step(int c, emb_bag *ref, emb_optimizer *ropt, emb_mpi_table **ts, int nt,
                 emb_generator *g, int64_t V, int64_t D) {
    joined j;
    make_joined(&j, g, V, D, -1, false);
    if (!dense_case(c)) {
        OK(emb_optimizer_step_fused_bag(ropt, 0, ref, &j.gin, &j.goff, NULL, &j.ggo));
        for (int i = 0; i < nt; i++)
            if (ts[i]) OK(emb_mpi_table_bag_step(ts[i], &j.q.input, &j.q.offsets, NULL, &j.q.gout));
    } else {
        float *rg = calloc((size_t)(V * D), sizeof(float));
        const int64_t rs[2] = {V, D};
        emb_tensor rgt = view(EMB_FLOAT32, rg, 2, rs);
        OK(emb_bag_backward(ref, &j.gin, &j.goff, NULL, NULL, &j.ggo, &rgt));
        OK(emb_optimizer_step(ropt, 0, &rgt));
        free(rg);
        for (int i = 0; i < nt; i++) {
            if (!ts[i]) continue;
            int64_t b0, b1;
            emb_mpi_table_rows(ts[i], &b0, &b1);
            float *lg = calloc((size_t)((b1 - b0) * D + 1), sizeof(float));
            const int64_t ls[2] = {b1 - b0, D};
            emb_tensor lgt = view(EMB_FLOAT32, b1 > b0 ? lg : NULL, 2, ls);
            OK(emb_mpi_table_bag_backward_dense(ts[i], &j.q.input, &j.q.offsets, NULL, NULL,
                                                &j.q.gout, &lgt));
            OK(emb_mpi_table_step_dense(ts[i], &lgt));
            free(lg);
        }
    }
    free_joined(&j);
}

static void set_opt(emb_mpi_table *t, int c) {
    emb_optimizer_options o = case_options(c);
    if (dense_case(c))
        OK(emb_mpi_table_set_optimizer_dense(t, &o));
    else
        OK(emb_mpi_table_set_optimizer(t, &o));
}

static void run_case(int c, int64_t V, int64_t D, emb_mpi_sharding sharding, uint64_t seed) {
    char what[96];
    snprintf(what, sizeof what, "case %d V=%" PRId64 " D=%" PRId64 " sharding=%d", c, V, D,
             (int)sharding);
    emb_mpi_shard_options so = emb_mpi_shard_options_default();
    so.sharding = sharding;
    so.owner = size_ - 1;
    emb_mpi_table *t = NULL, *t2 = NULL;
    emb_bag *ref = NULL;
    make_twins(V, D, NULL, &so, seed, &t, &ref);
    emb_optimizer_options oo = case_options(c);
    emb_optimizer *ropt = NULL;
    emb_tensor rw;
    OK(emb_bag_weight(ref, &rw));
    OK(emb_optimizer_create(&oo, &ropt));
    OK(emb_optimizer_add_param(ropt, &rw, NULL));
    if (!t || !ref || !ropt) return;
    set_opt(t, c);
    emb_generator *g = NULL;
    OK(emb_generator_create(seed * 5 + 1, &g));
    emb_mpi_table *ts[2] = {t, NULL};
    for (int k = 0; k < 3; k++) step(c, ref, ropt, ts, 1, g, V, D);
    if (emb_mpi_table_optimizer(t))
        CHECK(emb_optimizer_param_steps(emb_mpi_table_optimizer(t), 0) == 3,
              "%s: the shard's optimizer counted %" PRId64 " steps", what,
              emb_optimizer_param_steps(emb_mpi_table_optimizer(t), 0));
    /* the gathered state: the single process's bytes */
    const int root = size_ - 1;
    size_t n = 0;
    OK(emb_mpi_table_optimizer_state_nbytes(t, &n));
    const size_t rn = emb_optimizer_state_nbytes(ropt);
    CHECK(n == rn, "%s: the state takes %zu bytes, the single process's %zu", what, n, rn);
    unsigned char *st = malloc(n + 1), *rst = malloc(rn + 1);
    OK(emb_optimizer_save_state(ropt, rst, rn));
    OK(emb_mpi_table_save_optimizer_state(t, root, rank_ == root ? st : NULL, n));
    MPI_Bcast(st, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
    CHECK(n == rn && !memcmp(st, rst, n),
          "%s: the gathered state differs from the single "
          "process's",
          what);
    /* a fresh table holding the same rows, its state loaded */
    emb_manual_seed(seed + 1000);
    OK(emb_mpi_table_create(MPI_COMM_WORLD, V, D, NULL, &so, &t2));
    if (t2) {
        emb_tensor a, b;
        OK(emb_mpi_table_shard(t, &a));
        OK(emb_mpi_table_shard(t2, &b));
        if (emb_tensor_nbytes(&a)) memcpy(b.data, a.data, emb_tensor_nbytes(&a));
        set_opt(t2, c);
        OK(emb_mpi_table_load_optimizer_state(t2, st, n));
        /* refusals leave it alone: bytes differing on the last rank, a bad checksum */
        if (size_ > 1) {
            unsigned char *bad = malloc(n);
            memcpy(bad, st, n);
            if (rank_ == size_ - 1) bad[n - 20] ^= 1;
            emb_status s = emb_mpi_table_load_optimizer_state(t2, bad, n);
            CHECK(s == EMB_ERR_INVALID, "%s: bytes differing on one rank gave %d", what, s);
            free(bad);
        }
        unsigned char *bad = malloc(n);
        memcpy(bad, st, n);
        bad[n - 20] ^= 1;
        emb_status s = emb_mpi_table_load_optimizer_state(t2, bad, n);
        CHECK(s == EMB_ERR_FORMAT, "%s: a bad checksum gave %d", what, s);
        s = emb_mpi_table_load_optimizer_state(t2, st, n - 1);
        CHECK(s == EMB_ERR_FORMAT, "%s: a truncated state gave %d", what, s);
        free(bad);
        if (emb_mpi_table_optimizer(t2))
            CHECK(emb_optimizer_param_steps(emb_mpi_table_optimizer(t2), 0) == 3,
                  "%s: the loaded optimizer has %" PRId64 " steps", what,
                  emb_optimizer_param_steps(emb_mpi_table_optimizer(t2), 0));
    }
    /* on: the uninterrupted table, the restored one and the single process */
    ts[1] = t2;
    for (int k = 0; k < 3; k++) step(c, ref, ropt, ts, 2, g, V, D);
    check_shard(t, ref, "uninterrupted");
    if (t2) check_shard(t2, ref, "restored");
    /* and the state after, once more */
    OK(emb_mpi_table_optimizer_state_nbytes(t2, &n));
    unsigned char *st2 = malloc(n + 1);
    OK(emb_mpi_table_save_optimizer_state(t2, 0, rank_ == 0 ? st2 : NULL, n));
    const size_t rn2 = emb_optimizer_state_nbytes(ropt);
    unsigned char *rst2 = malloc(rn2 + 1);
    OK(emb_optimizer_save_state(ropt, rst2, rn2));
    if (rank_ == 0)
        CHECK(n == rn2 && !memcmp(st2, rst2, n), "%s: the restored table's state differs", what);
    free(st2);
    free(rst2);
    free(st);
    free(rst);
    emb_generator_free(g);
    emb_optimizer_free(ropt);
    emb_bag_free(ref);
    emb_mpi_table_free(t);
    emb_mpi_table_free(t2);
}

/* A learning rate set on the shard's optimizer (on every rank holding rows, as a schedule
 * would) is the rate of the next steps, SGD with momentum included. */
static void run_lr(emb_mpi_sharding sh, uint64_t seed) {
    const int64_t V = 23, D = 4;
    emb_mpi_shard_options so = emb_mpi_shard_options_default();
    so.sharding = sh;
    so.owner = size_ - 1;
    for (int c = SGD_MOM; c <= ADAGRAD; c++) {
        emb_mpi_table *t = NULL;
        emb_bag *ref = NULL;
        make_twins(V, D, NULL, &so, seed, &t, &ref);
        emb_optimizer_options oo = case_options(c);
        emb_optimizer *ropt = NULL;
        emb_tensor rw;
        OK(emb_bag_weight(ref, &rw));
        OK(emb_optimizer_create(&oo, &ropt));
        OK(emb_optimizer_add_param(ropt, &rw, NULL));
        if (!t || !ropt) return;
        set_opt(t, c);
        emb_generator *g = NULL;
        OK(emb_generator_create(seed, &g));
        emb_mpi_table *ts[1] = {t};
        step(c, ref, ropt, ts, 1, g, V, D);
        OK(emb_optimizer_set_lr(ropt, 0.025));
        if (emb_mpi_table_optimizer(t)) OK(emb_optimizer_set_lr(emb_mpi_table_optimizer(t), 0.025));
        step(c, ref, ropt, ts, 1, g, V, D);
        step(c, ref, ropt, ts, 1, g, V, D);
        char what[64];
        snprintf(what, sizeof what, "after a new learning rate (case %d)", c);
        check_shard(t, ref, what);
        emb_generator_free(g);
        emb_optimizer_free(ropt);
        emb_bag_free(ref);
        emb_mpi_table_free(t);
    }
}

static void run_refusals(void) {
    emb_mpi_table *t = NULL;
    OK(emb_mpi_table_create(MPI_COMM_WORLD, 10, 4, NULL, NULL, &t));
    size_t n = 0;
    CHECK(emb_mpi_table_optimizer_state_nbytes(t, &n) == EMB_ERR_STATE,
          "a state without an optimizer");
    emb_optimizer_options o = case_options(SGD_MOM);
    OK(emb_mpi_table_set_optimizer(t, &o));
    OK(emb_mpi_table_optimizer_state_nbytes(t, &n));
    unsigned char *b = malloc(n);
    CHECK(emb_mpi_table_save_optimizer_state(t, size_, b, n) == EMB_ERR_INVALID, "root %d", size_);
    CHECK(emb_mpi_table_save_optimizer_state(t, 0, b, rank_ == 0 ? n - 1 : n) == EMB_ERR_INVALID,
          "a short buffer on root");
    OK(emb_mpi_table_save_optimizer_state(t, 0, b, n));
    MPI_Bcast(b, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
    /* options the sparse step refuses (weight decay with SGD): refused as set_optimizer does */
    {
        emb_optimizer_options wd = o;
        wd.weight_decay = 0.5;
        emb_tensor w1;
        float x[40] = {0};
        const int64_t s1[2] = {10, 4};
        w1 = view(EMB_FLOAT32, x, 2, s1);
        emb_optimizer *p = NULL;
        OK(emb_optimizer_create(&wd, &p));
        OK(emb_optimizer_add_param(p, &w1, NULL));
        size_t pn = emb_optimizer_state_nbytes(p);
        unsigned char *pb = malloc(pn);
        OK(emb_optimizer_save_state(p, pb, pn));
        emb_status s = emb_mpi_table_load_optimizer_state(t, pb, pn);
        CHECK(s == EMB_ERR_UNSUPPORTED && strstr(emb_errmsg(), "weight_decay") != NULL,
              "a state with weight decay for sparse steps gave %d", s);
        free(pb);
        emb_optimizer_free(p);
    }
    /* a state of SGD with momentum into Adagrad; into a table of another shape */
    emb_optimizer_options a = case_options(ADAGRAD);
    OK(emb_mpi_table_set_optimizer(t, &a));
    emb_status s = emb_mpi_table_load_optimizer_state(t, b, n);
    CHECK(s == EMB_ERR_FORMAT, "a state of another kind gave %d", s);
    emb_mpi_table *u = NULL;
    OK(emb_mpi_table_create(MPI_COMM_WORLD, 11, 4, NULL, NULL, &u));
    OK(emb_mpi_table_set_optimizer(u, &o));
    s = emb_mpi_table_load_optimizer_state(u, b, n);
    CHECK(s == EMB_ERR_FORMAT, "a state of another shape gave %d", s);
    free(b);
    emb_mpi_table_free(t);
    emb_mpi_table_free(u);
}

int main(int argc, char **argv) {
    mpi_check_init(&argc, &argv);
    uint64_t seed = 1;
    const int64_t shapes[][2] = {{37, 5}, {9, 3}};
    for (int si = 0; si < 2; si++)
        for (int sh = 0; sh < 2; sh++)
            for (int c = 0; c < NCASES; c++)
                run_case(c, shapes[si][0], shapes[si][1], (emb_mpi_sharding)sh, seed++);
    run_lr(EMB_MPI_ROW_WISE, seed++);
    run_lr(EMB_MPI_TABLE_WISE, seed++);
    run_refusals();
    return mpi_check_finish(NULL);
}
