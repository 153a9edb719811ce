/* The exact rule of libemb_mpi, checked under mpirun at 1, 2 and 4 ranks: every rank also
 * runs the single-process library on the joined batch B0‖…‖B(R-1) and compares its part
 * (outputs, gradients, shard rows after each optimizer step) bit for bit. Then refusals:
 * an id out of range on one rank, settings that differ between ranks. */
#include "mpi_check.h"

static void run_case(int64_t V, int64_t D, emb_bag_mode mode, int64_t pad, bool use_psw,
                     emb_mpi_sharding sharding, uint64_t seed) {
    char what[160];
    snprintf(what, sizeof what,
             "V=%" PRId64 " D=%" PRId64 " mode=%d pad=%" PRId64 " psw=%d sharding=%d", V, D,
             (int)mode, pad, use_psw, (int)sharding);
    emb_bag_options bo;
    emb_mpi_shard_options so;
    table_options(mode, pad, sharding, &bo, &so);

    /* creation: the single process's rows, and the generator where it would be */
    emb_manual_seed(seed);
    emb_mpi_table *t = NULL;
    OK(emb_mpi_table_create(MPI_COMM_WORLD, V, D, &bo, &so, &t));
    if (!t) return;
    uint32_t after_sharded = emb_generator_random(NULL);
    emb_manual_seed(seed);
    emb_bag *ref = NULL;
    OK(emb_bag_create(V, D, &bo, &ref));
    uint32_t after_single = emb_generator_random(NULL);
    CHECK(after_sharded == after_single, "%s: generator state after creation differs", what);
    check_shard(t, ref, "after creation");
    {
        float *full = rank_ == 0 ? malloc((size_t)(V * D) * sizeof(float)) : NULL;
        int64_t fs[2] = {V, D};
        emb_tensor ft;
        if (rank_ == 0) ft = view(EMB_FLOAT32, full, 2, fs);
        OK(emb_mpi_table_gather(t, 0, rank_ == 0 ? &ft : NULL));
        emb_tensor w;
        OK(emb_bag_weight(ref, &w));
        if (rank_ == 0) CHECK(same_rows(full, w.data, V * D), "%s: gathered table differs", what);
        free(full);
    }

    emb_generator *g = NULL;
    OK(emb_generator_create(seed * 31 + 7, &g));
    /* SGD, Adagrad, SparseAdam; SGD with momentum (with dampening and maximize; Nesterov):
     * the buffer grows by merges of the whole joined batch's entry lists */
    const emb_optimizer_kind kinds[5] = {EMB_OPTIMIZER_SGD, EMB_OPTIMIZER_ADAGRAD,
                                         EMB_OPTIMIZER_SPARSE_ADAM, EMB_OPTIMIZER_SGD,
                                         EMB_OPTIMIZER_SGD};
    for (int ki = 0; ki < (mode == EMB_BAG_MAX ? 1 : 5); ki++) {
        emb_optimizer_options oo = emb_optimizer_options_default(kinds[ki]);
        oo.lr = 0.1;
        oo.momentum = ki < 3 ? 0.0 : 0.9;
        oo.dampening = ki == 3 ? 0.25 : 0.0;
        oo.maximize = ki == 3;
        oo.nesterov = ki == 4;
        emb_optimizer *ropt = NULL;
        emb_tensor rw;
        OK(emb_bag_weight(ref, &rw));
        OK(emb_optimizer_create(&oo, &ropt));
        OK(emb_optimizer_add_param(ropt, &rw, NULL));
        if (mode != EMB_BAG_MAX) OK(emb_mpi_table_set_optimizer(t, &oo));
        for (int step = 0; step < 3; step++) {
            joined j;
            make_joined(&j, g, V, D, pad, use_psw);
            const batch b = j.b;
            const part q = j.q;
            emb_tensor gin = j.gin, goff = j.goff, ggo = j.ggo;
            const emb_tensor *rp = j.rp, *lp = j.lp;
            /* forward */
            const bool mx = mode == EMB_BAG_MAX;
            OK(emb_bag_forward(ref, &gin, &goff, rp, &j.ro, mx ? &j.rm : NULL));
            OK(emb_mpi_table_bag_forward(t, &q.input, &q.offsets, lp, &j.lo, mx ? &j.lm : NULL));
            check_forward(&j, &b, mx, what);
            /* lookup of the same ids */
            {
                float *lk = malloc((size_t)(q.n * D + 1) * sizeof(float));
                float *rk = malloc((size_t)(b.npos * D + 1) * sizeof(float));
                int64_t lks[2] = {q.n, D}, rks[2] = {b.npos, D};
                emb_tensor lkt = view(EMB_FLOAT32, lk, 2, lks), rkt = view(EMB_FLOAT32, rk, 2, rks);
                OK(emb_embedding_forward(emb_bag_embedding(ref), &gin, &rkt));
                OK(emb_mpi_table_lookup(t, &q.input, &lkt));
                CHECK(same_rows(lk, rk + b.pos0[rank_] * D, q.n * D), "%s: lookup differs", what);
                free(lk);
                free(rk);
            }
            if (use_psw) { /* the gradient of the per_sample_weights */
                float *lg = malloc((size_t)(q.n + 1) * sizeof(float));
                float *rg = malloc((size_t)(b.npos + 1) * sizeof(float));
                emb_tensor lgt = view(EMB_FLOAT32, lg, 1, &q.n),
                           rgt = view(EMB_FLOAT32, rg, 1, &b.npos);
                OK(emb_bag_backward_per_sample_weights(ref, &gin, &goff, &ggo, &rgt));
                OK(emb_mpi_table_bag_backward_per_sample_weights(t, &q.input, &q.offsets, &q.gout,
                                                                 &lgt));
                CHECK(same_rows(lg, rg + b.pos0[rank_], q.n), "%s: psw gradient differs", what);
                free(lg);
                free(rg);
            }
            if (!mx) {
                /* the shard's gradient: the single process's coalesced gradient's rows */
                emb_sparse_grad rg, lg;
                memset(&lg, 0, sizeof lg);
                OK(emb_sparse_grad_init(&rg, V, D));
                OK(emb_bag_backward_sparse(ref, &gin, &goff, rp, &ggo, &rg));
                OK(emb_sparse_grad_coalesce(&rg));
                OK(emb_mpi_table_bag_backward_sparse(t, &q.input, &q.offsets, lp, &q.gout, &lg));
                int64_t b0, b1, k = 0;
                emb_mpi_table_rows(t, &b0, &b1);
                CHECK(lg.coalesced, "%s: shard gradient not coalesced", what);
                for (int64_t e = 0; e < rg.nnz; e++) {
                    if (rg.indices[e] < b0 || rg.indices[e] >= b1) continue;
                    CHECK(k < lg.nnz && lg.indices[k] + b0 == rg.indices[e] &&
                              same_rows(lg.values + k * D, rg.values + e * D, D),
                          "%s: shard gradient entry %" PRId64 " differs", what, k);
                    k++;
                }
                CHECK(k == lg.nnz, "%s: shard gradient has %" PRId64 " entries, expected %" PRId64,
                      what, lg.nnz, k);
                emb_sparse_grad_release(&rg);
                emb_sparse_grad_release(&lg);
                /* the optimizer step */
                OK(emb_optimizer_step_fused_bag(ropt, 0, ref, &gin, &goff, rp, &ggo));
                OK(emb_mpi_table_bag_step(t, &q.input, &q.offsets, lp, &q.gout));
                check_shard(t, ref, "after a bag step");
                /* and a lookup step with per-position gradients */
                float *pg = malloc((size_t)(b.npos * D + 1) * sizeof(float));
                int64_t ps[2] = {b.npos, D}, lps[2] = {q.n, D};
                emb_tensor pgt = view(EMB_FLOAT32, pg, 2, ps);
                if (b.npos) emb_randn_(&pgt, g);
                emb_tensor lpg = view(EMB_FLOAT32, pg + b.pos0[rank_] * D, 2, lps);
                OK(emb_optimizer_step_fused(ropt, 0, emb_bag_embedding(ref), &gin, &pgt));
                OK(emb_mpi_table_lookup_step(t, &q.input, &lpg));
                check_shard(t, ref, "after a lookup step");
                free(pg);
            }
            free_joined(&j);
        }
        emb_optimizer_free(ropt);
    }
    emb_generator_free(g);
    emb_bag_free(ref);
    emb_mpi_table_free(t);
}

/* Tables of f16/bf16/int8/int4 rows: the shard's bytes are those of emb_qtable_quantize
 * of the single process's table; lookups and bags are emb_qtable_forward's and
 * emb_qtable_bag_forward's on the joined batch; f16/bf16 SGD steps are emb_qtable_sgd_step_bag's.
 */
static void run_qcase(int64_t V, int64_t D, emb_qtype qt, emb_bag_mode mode, int64_t pad,
                      bool use_psw, emb_mpi_sharding sharding, uint64_t seed) {
    char what[160];
    snprintf(what, sizeof what,
             "%s V=%" PRId64 " D=%" PRId64 " mode=%d pad=%" PRId64 " psw=%d sharding=%d",
             emb_qtype_name(qt), V, D, (int)mode, pad, use_psw, (int)sharding);
    emb_bag_options bo;
    emb_mpi_shard_options so;
    table_options(mode, pad, sharding, &bo, &so);
    so.qtype = qt;
    emb_manual_seed(seed);
    emb_mpi_table *t = NULL;
    OK(emb_mpi_table_create(MPI_COMM_WORLD, V, D, &bo, &so, &t));
    if (!t) return;
    emb_manual_seed(seed);
    emb_bag *ref = NULL;
    emb_qtable *rq = NULL;
    emb_tensor w;
    OK(emb_bag_create(V, D, &bo, &ref));
    OK(emb_bag_weight(ref, &w));
    OK(emb_qtable_quantize(&w, qt, &rq));
    const int64_t rb = emb_qtable_row_nbytes(rq);
    int64_t b0, b1;
    emb_mpi_table_rows(t, &b0, &b1);
    emb_tensor fview;
    CHECK(emb_mpi_table_shard(t, &fview) == EMB_ERR_UNSUPPORTED, "%s: float view given", what);
#define SAME_SHARD(when)                                                                           \
    CHECK(b1 == b0 ||                                                                              \
              !memcmp(emb_qtable_data(emb_mpi_table_qshard(t)),                                    \
                      (const char *)emb_qtable_data(rq) + b0 * rb, (size_t)((b1 - b0) * rb)),      \
          "%s: shard bytes differ %s", what, when)
    SAME_SHARD("after creation");
    {
        unsigned char *full = rank_ == 0 ? malloc((size_t)(V * rb)) : NULL;
        int64_t fs[2] = {V, rb};
        emb_tensor ft;
        if (rank_ == 0) ft = view(EMB_UINT8, full, 2, fs);
        OK(emb_mpi_table_gather(t, 0, rank_ == 0 ? &ft : NULL));
        if (rank_ == 0)
            CHECK(!memcmp(full, emb_qtable_data(rq), (size_t)(V * rb)), "%s: gathered rows differ",
                  what);
        free(full);
    }
    const bool train = (qt == EMB_QTYPE_F16 || qt == EMB_QTYPE_BF16) && mode != EMB_BAG_MAX;
    emb_optimizer_options oo = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    oo.lr = 0.1;
    emb_status st = emb_mpi_table_set_optimizer(t, &oo);
    CHECK(qt == EMB_QTYPE_F16 || qt == EMB_QTYPE_BF16 ? st == EMB_OK : st == EMB_ERR_UNSUPPORTED,
          "%s: set_optimizer gave %d", what, st);
    emb_generator *g = NULL;
    OK(emb_generator_create(seed * 17 + 3, &g));
    for (int step = 0; step < 3; step++) {
        joined j;
        make_joined(&j, g, V, D, pad, use_psw);
        const batch b = j.b;
        const part q = j.q;
        emb_tensor gin = j.gin, goff = j.goff, ggo = j.ggo;
        const emb_tensor *rp = j.rp, *lp = j.lp;
        const bool mx = mode == EMB_BAG_MAX;
        OK(emb_qtable_bag_forward(rq, &gin, &goff, rp, &bo, &j.ro, mx ? &j.rm : NULL));
        OK(emb_mpi_table_bag_forward(t, &q.input, &q.offsets, lp, &j.lo, mx ? &j.lm : NULL));
        check_forward(&j, &b, mx, what);
        float *lk = malloc((size_t)(q.n * D + 1) * sizeof(float));
        float *rk = malloc((size_t)(b.npos * D + 1) * sizeof(float));
        int64_t lks[2] = {q.n, D}, rks[2] = {b.npos, D};
        emb_tensor lkt = view(EMB_FLOAT32, lk, 2, lks), rkt = view(EMB_FLOAT32, rk, 2, rks);
        OK(emb_qtable_forward(rq, &gin, &rkt));
        OK(emb_mpi_table_lookup(t, &q.input, &lkt));
        CHECK(same_rows(lk, rk + b.pos0[rank_] * D, q.n * D), "%s: lookup differs", what);
        if (train) {
            OK(emb_qtable_sgd_step_bag(rq, &gin, &goff, rp, &bo, &ggo, (float)oo.lr,
                                       EMB_QROUND_NEAREST, NULL));
            OK(emb_mpi_table_bag_step(t, &q.input, &q.offsets, lp, &q.gout));
            SAME_SHARD("after a step");
        }
        free(lk);
        free(rk);
        free_joined(&j);
    }
#undef SAME_SHARD
    emb_generator_free(g);
    emb_qtable_free(rq);
    emb_bag_free(ref);
    emb_mpi_table_free(t);
}

/* Other input forms: 2-D bags [B, 3] (no offsets), int32 ids, include_last_offset, and a
 * lookup of a 2-D int32 batch; ranks' parts joined along the first dimension. */
static void run_forms(uint64_t seed) {
    const int64_t V = 23, D = 4, W = 3;
    for (int last = 0; last < 2; last++) {
        emb_bag_options bo = emb_bag_options_default();
        bo.mode = EMB_BAG_MEAN;
        bo.padding_idx = 5;
        bo.include_last_offset = last;
        emb_manual_seed(seed);
        emb_mpi_table *t = NULL;
        OK(emb_mpi_table_create(MPI_COMM_WORLD, V, D, &bo, NULL, &t));
        emb_manual_seed(seed);
        emb_bag *ref = NULL;
        OK(emb_bag_create(V, D, &bo, &ref));
        emb_optimizer_options oo = emb_optimizer_options_default(EMB_OPTIMIZER_SPARSE_ADAM);
        OK(emb_mpi_table_set_optimizer(t, &oo));
        emb_optimizer *ropt = NULL;
        emb_tensor rw;
        OK(emb_bag_weight(ref, &rw));
        OK(emb_optimizer_create(&oo, &ropt));
        OK(emb_optimizer_add_param(ropt, &rw, NULL));
        /* rank r has r + 2 rows of W ids; row i of the joined batch holds ids (7 i + k) % V */
        int64_t first[65] = {0};
        for (int r = 0; r < size_; r++) first[r + 1] = first[r] + r + 2;
        const int64_t B = first[size_], mine = first[rank_ + 1] - first[rank_];
        int32_t *ids = malloc((size_t)(B * W) * sizeof *ids);
        for (int64_t i = 0; i < B * W; i++) ids[i] = (int32_t)((7 * (i / W) + (i % W) * 5) % V);
        float *go = malloc((size_t)(B * D) * sizeof *go);
        for (int64_t i = 0; i < B * D; i++) go[i] = (float)((i * 37) % 11) / 7.0f - 0.6f;
        int64_t gs2[2] = {B, W}, ls2[2] = {mine, W}, gos[2] = {B, D}, los[2] = {mine, D};
        emb_tensor gin, lin, goff, loff;
        int64_t *goffs = malloc((size_t)(B + 1) * sizeof *goffs);
        int64_t *loffs = malloc((size_t)(mine + 1) * sizeof *loffs);
        const emb_tensor *gop = NULL, *lop = NULL;
        if (!last) { /* 2-D */
            gin = view(EMB_INT32, ids, 2, gs2);
            lin = view(EMB_INT32, ids + first[rank_] * W, 2, ls2);
        } else { /* 1-D with offsets holding the end */
            int64_t gn = B * W, ln = mine * W, gk = B + 1, lk = mine + 1;
            for (int64_t i = 0; i <= B; i++) goffs[i] = i * W;
            for (int64_t i = 0; i <= mine; i++) loffs[i] = i * W;
            gin = view(EMB_INT32, ids, 1, &gn);
            lin = view(EMB_INT32, ids + first[rank_] * W, 1, &ln);
            goff = view(EMB_INT64, goffs, 1, &gk);
            loff = view(EMB_INT64, loffs, 1, &lk);
            gop = &goff;
            lop = &loff;
        }
        float *rout = malloc((size_t)(B * D) * sizeof(float)),
              *lout = malloc((size_t)(mine * D + 1) * sizeof(float));
        emb_tensor ro = view(EMB_FLOAT32, rout, 2, gos), lo = view(EMB_FLOAT32, lout, 2, los);
        emb_tensor ggo = view(EMB_FLOAT32, go, 2, gos),
                   lgo = view(EMB_FLOAT32, go + first[rank_] * D, 2, los);
        for (int step = 0; step < 2; step++) {
            OK(emb_bag_forward(ref, &gin, gop, NULL, &ro, NULL));
            OK(emb_mpi_table_bag_forward(t, &lin, lop, NULL, &lo, NULL));
            CHECK(same_rows(lout, rout + first[rank_] * D, mine * D),
                  "forms last=%d: forward differs", last);
            OK(emb_optimizer_step_fused_bag(ropt, 0, ref, &gin, gop, NULL, &ggo));
            OK(emb_mpi_table_bag_step(t, &lin, lop, NULL, &lgo));
            check_shard(t, ref, "after a step of 2-D or include_last_offset bags");
        }
        /* a 2-D int32 lookup */
        float *rk = malloc((size_t)(B * W * D) * sizeof(float)),
              *lk = malloc((size_t)(mine * W * D + 1) * sizeof(float));
        int64_t rks[3] = {B, W, D}, lks[3] = {mine, W, D};
        emb_tensor g2 = view(EMB_INT32, ids, 2, gs2),
                   l2 = view(EMB_INT32, ids + first[rank_] * W, 2, ls2);
        emb_tensor rkt = view(EMB_FLOAT32, rk, 3, rks), lkt = view(EMB_FLOAT32, lk, 3, lks);
        OK(emb_embedding_forward(emb_bag_embedding(ref), &g2, &rkt));
        OK(emb_mpi_table_lookup(t, &l2, &lkt));
        CHECK(same_rows(lk, rk + first[rank_] * W * D, mine * W * D), "2-D int32 lookup differs");
        free(rk);
        free(lk);
        free(rout);
        free(lout);
        free(goffs);
        free(loffs);
        free(ids);
        free(go);
        emb_optimizer_free(ropt);
        emb_bag_free(ref);
        emb_mpi_table_free(t);
    }
}

/* An id out of range on the last rank: every rank refuses, nothing changes anywhere. */
static void run_refusals(void) {
    emb_manual_seed(5);
    emb_mpi_table *t = NULL;
    OK(emb_mpi_table_create(MPI_COMM_WORLD, 10, 4, NULL, NULL, &t));
    emb_optimizer_options oo = emb_optimizer_options_default(EMB_OPTIMIZER_ADAGRAD);
    OK(emb_mpi_table_set_optimizer(t, &oo));
    emb_tensor s;
    OK(emb_mpi_table_shard(t, &s));
    size_t bytes = emb_tensor_nbytes(&s);
    float *before = malloc(bytes + 1);
    if (bytes) memcpy(before, s.data, bytes);
    int64_t ids[3] = {1, 9, rank_ == size_ - 1 ? 10 : 2}, n = 3, offs[1] = {0}, nb = 1;
    float go[4] = {1, 2, 3, 4};
    int64_t gs[2] = {1, 4};
    emb_tensor in = view(EMB_INT64, ids, 1, &n), of = view(EMB_INT64, offs, 1, &nb),
               gt = view(EMB_FLOAT32, go, 2, gs);
    emb_status st = emb_mpi_table_bag_step(t, &in, &of, NULL, &gt);
    CHECK(st == EMB_ERR_INDEX, "a step with an id out of range on rank %d gave %d", size_ - 1, st);
    if (rank_ == size_ - 1)
        CHECK(strstr(emb_errmsg(), "index 10 at position 2") != NULL, "message: %s", emb_errmsg());
    else
        CHECK(strstr(emb_errmsg(), "refused") != NULL && strstr(emb_errmsg(), "index 10") != NULL,
              "message: %s", emb_errmsg());
    CHECK(bytes == 0 || !memcmp(before, s.data, bytes), "a refused step changed the shard");
    CHECK(emb_optimizer_param_steps(emb_mpi_table_optimizer(t), 0) <= 0,
          "a refused step counted a step");
    float out[4];
    emb_tensor ot = view(EMB_FLOAT32, out, 2, gs);
    st = emb_mpi_table_bag_forward(t, &in, &of, NULL, &ot, NULL);
    CHECK(st == EMB_ERR_INDEX, "a forward with an id out of range gave %d", st);
    /* a wrong grad_output shape on rank 0 only */
    int64_t bad[2] = {rank_ == 0 ? 2 : 1, 4};
    float go2[8] = {0};
    emb_tensor gt2 = view(EMB_FLOAT32, go2, 2, bad);
    ids[2] = 2;
    st = emb_mpi_table_bag_step(t, &in, &of, NULL, &gt2);
    CHECK(st == EMB_ERR_SHAPE, "a step with a wrong grad_output shape on rank 0 gave %d", st);
    CHECK(bytes == 0 || !memcmp(before, s.data, bytes), "a refused step changed the shard");
    free(before);
    emb_mpi_table_free(t);

    /* settings that differ between ranks: an error on every rank, no table */
    emb_mpi_table *u = NULL;
    st = emb_mpi_table_create(MPI_COMM_WORLD, rank_ == size_ - 1 ? 12 : 10, 4, NULL, NULL, &u);
    if (size_ > 1) {
        CHECK(st == EMB_ERR_INVALID && u == NULL, "differing num_embeddings gave %d", st);
        CHECK(strstr(emb_errmsg(), "num_embeddings") != NULL, "message: %s", emb_errmsg());
    } else {
        CHECK(st == EMB_OK, "one rank cannot disagree with itself: %d", st);
        emb_mpi_table_free(u);
    }
    /* optimizer options that differ */
    OK(emb_mpi_table_create(MPI_COMM_WORLD, 10, 4, NULL, NULL, &u));
    emb_optimizer_options o2 = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    o2.lr = rank_ == 0 ? 0.5 : 0.25;
    st = emb_mpi_table_set_optimizer(u, &o2);
    CHECK(size_ == 1 ? st == EMB_OK : st == EMB_ERR_INVALID, "differing lr gave %d", st);
    emb_mpi_table_free(u);
    /* a row-wise table of fewer rows than ranks */
    st = emb_mpi_table_create(MPI_COMM_WORLD, size_ - 1 > 0 ? size_ - 1 : 0, 4, NULL, NULL, &u);
    CHECK(st == EMB_ERR_INVALID, "a table smaller than the communicator gave %d", st);
}

int main(int argc, char **argv) {
    mpi_check_init(&argc, &argv);
    uint64_t seed = 1;
    const int64_t shapes[][2] = {{37, 5}, {64, 16}, {5, 2}, {9, 3}};
    for (int si = 0; si < 4; si++) {
        const int64_t V = shapes[si][0], D = shapes[si][1];
        if (V < size_) continue;
        for (int sh = 0; sh < 2; sh++)
            for (int mode = 0; mode < 3; mode++)
                for (int padc = 0; padc < 2; padc++)
                    for (int w = 0; w < (mode == EMB_BAG_SUM ? 2 : 1); w++)
                        run_case(V, D, (emb_bag_mode)mode, padc ? V / 3 : -1, w,
                                 (emb_mpi_sharding)sh, seed++);
    }
    const emb_qtype qts[4] = {EMB_QTYPE_F16, EMB_QTYPE_BF16, EMB_QTYPE_INT8, EMB_QTYPE_INT4};
    for (int qi = 0; qi < 4; qi++)
        for (int sh = 0; sh < 2; sh++)
            for (int mode = 0; mode < 3; mode++)
                for (int w = 0; w < (mode == EMB_BAG_SUM ? 2 : 1); w++)
                    run_qcase(37, qi == 3 ? 7 : 6, qts[qi], (emb_bag_mode)mode,
                              (mode + qi) % 2 ? 12 : -1, w, (emb_mpi_sharding)sh, seed++);
    run_forms(seed++);
    run_refusals();
    return mpi_check_finish(NULL);
}
