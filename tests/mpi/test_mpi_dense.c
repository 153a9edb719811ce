/* Dense gradients of sharded tables, checked under mpirun at 1, 2 and 4 ranks: every rank
 * also runs the single-process library on the joined batch B0‖…‖B(R-1) and compares its
 * rows of the dense gradient (EmbeddingBag sum, mean with and without scale_grad_by_freq,
 * weighted sum, max; lookups) and, after each dense optimizer step (SGD with momentum and
 * weight decay, Nesterov, Adagrad, Adam, AdamW with amsgrad), its shard, bit for bit. Then
 * refusals on one rank refused on every rank with nothing changed. */
#include "mpi_check.h"

static float *zeroed(int64_t n) {
    return calloc((size_t)(n > 0 ? n : 1), sizeof(float));
}

/* This rank's rows of the single process's gradient. */
static void check_grad(emb_mpi_table *t, const float *lg, const float *rg, const char *what,
                       const char *which) {
    int64_t b0, b1;
    emb_mpi_table_rows(t, &b0, &b1);
    const int64_t D = emb_mpi_table_dim(t);
    CHECK(same_rows(lg, rg + b0 * D, (b1 - b0) * D),
          "%s: %s gradient rows [%" PRId64 ", %" PRId64 ") differ", what, which, b0, b1);
}

static emb_optimizer_options dense_options(int k) {
    static const emb_optimizer_kind kinds[5] = {EMB_OPTIMIZER_SGD, EMB_OPTIMIZER_SGD,
                                                EMB_OPTIMIZER_ADAGRAD, EMB_OPTIMIZER_ADAM,
                                                EMB_OPTIMIZER_ADAMW};
    emb_optimizer_options o = emb_optimizer_options_default(kinds[k]);
    o.lr = 0.05;
    if (k == 0) { /* momentum, dampening, weight decay */
        o.momentum = 0.9;
        o.dampening = 0.1;
        o.weight_decay = 0.01;
    }
    if (k == 1) {
        o.momentum = 0.8;
        o.nesterov = true;
        o.maximize = true;
    }
    if (k == 2) o.weight_decay = 0.02;
    if (k == 4) o.amsgrad = true;
    return o;
}

static void run_case(int64_t V, int64_t D, emb_bag_mode mode, int64_t pad, bool use_psw, bool freq,
                     emb_mpi_sharding sharding, uint64_t seed) {
    char what[160];
    snprintf(what, sizeof what,
             "V=%" PRId64 " D=%" PRId64 " mode=%d pad=%" PRId64 " psw=%d freq=%d sharding=%d", V, D,
             (int)mode, pad, use_psw, freq, (int)sharding);
    emb_bag_options bo;
    emb_mpi_shard_options so;
    table_options(mode, pad, sharding, &bo, &so);
    bo.scale_grad_by_freq = freq;
    emb_mpi_table *t = NULL;
    emb_bag *ref = NULL;
    make_twins(V, D, &bo, &so, seed, &t, &ref);
    if (!t) {
        emb_bag_free(ref);
        return;
    }
    int64_t b0, b1;
    emb_mpi_table_rows(t, &b0, &b1);
    const int64_t ls[2] = {b1 - b0, D}, rs[2] = {V, D};
    emb_generator *g = NULL;
    OK(emb_generator_create(seed * 17 + 3, &g));
    for (int k = 0; k < 5; k++) {
        emb_optimizer_options oo = dense_options(k);
        emb_optimizer *ropt = NULL;
        emb_tensor rw;
        OK(emb_bag_weight(ref, &rw));
        OK(emb_optimizer_create(&oo, &ropt));
        OK(emb_optimizer_add_param(ropt, &rw, NULL));
        OK(emb_mpi_table_set_optimizer_dense(t, &oo));
        for (int step = 0; step < 3; step++) {
            joined j;
            make_joined(&j, g, V, D, pad, use_psw);
            const bool mx = mode == EMB_BAG_MAX;
            OK(emb_bag_forward(ref, &j.gin, &j.goff, j.rp, &j.ro, mx ? &j.rm : NULL));
            OK(emb_mpi_table_bag_forward(t, &j.q.input, &j.q.offsets, j.lp, &j.lo,
                                         mx ? &j.lm : NULL));
            check_forward(&j, &j.b, mx, what);
            float *lg = zeroed((b1 - b0) * D), *rg = zeroed(V * D);
            emb_tensor lgt = view(EMB_FLOAT32, b1 > b0 ? lg : NULL, 2, ls),
                       rgt = view(EMB_FLOAT32, rg, 2, rs);
            OK(emb_bag_backward(ref, &j.gin, &j.goff, j.rp, mx ? &j.rm : NULL, &j.ggo, &rgt));
            OK(emb_mpi_table_bag_backward_dense(t, &j.q.input, &j.q.offsets, j.lp,
                                                mx ? &j.lm : NULL, &j.q.gout, &lgt));
            check_grad(t, lg, rg, what, "bag");
            /* a lookup's gradient of the same ids, added to it */
            const int64_t n = j.b.npos;
            float *pg = malloc((size_t)(n * D + 1) * sizeof(float));
            const int64_t ps[2] = {n, D}, lps[2] = {j.q.n, D};
            emb_tensor pgt = view(EMB_FLOAT32, pg, 2, ps);
            if (n) emb_randn_(&pgt, g);
            emb_tensor lpg = view(EMB_FLOAT32, pg + j.b.pos0[rank_] * D, 2, lps);
            OK(emb_embedding_backward(emb_bag_embedding(ref), &j.gin, &pgt, &rgt));
            OK(emb_mpi_table_lookup_backward_dense(t, &j.q.input, &lpg, &lgt));
            check_grad(t, lg, rg, what, "bag + lookup");
            /* the dense step with the summed gradient */
            OK(emb_optimizer_step(ropt, 0, &rgt));
            OK(emb_mpi_table_step_dense(t, &lgt));
            check_shard(t, ref, "after a dense step");
            free(pg);
            free(lg);
            free(rg);
            free_joined(&j);
        }
        emb_optimizer_free(ropt);
    }
    emb_generator_free(g);
    emb_bag_free(ref);
    emb_mpi_table_free(t);
}

/* A batch of thousands of bags per rank (rank r: 1500 + 250 r bags of 12 positions over
 * rows that repeat often), so that libemb's sort and backward use their threads. */
static void make_large(batch *b, emb_generator *g, int64_t V, int64_t D) {
    memset(b, 0, sizeof *b);
    for (int r = 0; r < size_; r++) b->bag0[r + 1] = b->bag0[r] + 1500 + 250 * r;
    b->nbags = b->bag0[size_];
    b->npos = 12 * b->nbags;
    b->input = malloc((size_t)b->npos * sizeof *b->input);
    b->offsets = malloc((size_t)b->nbags * sizeof *b->offsets);
    b->psw = malloc((size_t)b->npos * sizeof *b->psw);
    b->gout = malloc((size_t)(b->nbags * D) * sizeof *b->gout);
    for (int64_t i = 0; i < b->nbags; i++) b->offsets[i] = 12 * i;
    for (int64_t p = 0; p < b->npos; p++) {
        const uint32_t u = emb_generator_random(g);
        b->input[p] = u % 3 ? (int64_t)(u / 3 % 40) : (int64_t)(u / 3 % (uint32_t)V);
        b->psw[p] = (float)(emb_generator_random(g) % 1000) / 250.0f - 2.0f;
    }
    const int64_t gs[2] = {b->nbags, D};
    emb_tensor gt = view(EMB_FLOAT32, b->gout, 2, gs);
    emb_randn_(&gt, g);
    for (int r = 0; r <= size_; r++) b->pos0[r] = 12 * b->bag0[r];
}

/* Large batches with 1 or 2 threads per rank: the bits do not depend on the thread count. */
static void run_large(emb_bag_mode mode, bool use_psw, bool freq, uint64_t seed) {
    const int64_t V = 3000, D = 16;
    char what[96];
    snprintf(what, sizeof what, "large mode=%d psw=%d freq=%d threads=%d", (int)mode, use_psw, freq,
             1 + rank_ % 2);
    emb_set_num_threads(1 + rank_ % 2);
    emb_bag_options bo = emb_bag_options_default();
    bo.mode = mode;
    bo.scale_grad_by_freq = freq;
    emb_mpi_table *t = NULL;
    emb_bag *ref = NULL;
    make_twins(V, D, &bo, NULL, seed, &t, &ref);
    emb_generator *g = NULL;
    OK(emb_generator_create(seed, &g));
    batch b;
    part q;
    make_large(&b, g, V, D);
    make_part(&q, &b, D);
    int64_t b0, b1;
    emb_mpi_table_rows(t, &b0, &b1);
    const int64_t ls[2] = {b1 - b0, D}, rs[2] = {V, D}, os[2] = {b.nbags, D}, qs[2] = {q.nb, D};
    float *lg = zeroed((b1 - b0) * D), *rg = zeroed(V * D);
    int64_t *rm = malloc((size_t)(b.nbags * D) * sizeof *rm),
            *lm = malloc((size_t)(q.nb * D + 1) * sizeof *lm);
    float *ro = malloc((size_t)(b.nbags * D) * sizeof *ro),
          *lo = malloc((size_t)(q.nb * D + 1) * sizeof *lo);
    emb_tensor lgt = view(EMB_FLOAT32, lg, 2, ls), rgt = view(EMB_FLOAT32, rg, 2, rs);
    emb_tensor gin = view(EMB_INT64, b.input, 1, &b.npos),
               goff = view(EMB_INT64, b.offsets, 1, &b.nbags),
               gpsw = view(EMB_FLOAT32, b.psw, 1, &b.npos), ggo = view(EMB_FLOAT32, b.gout, 2, os);
    emb_tensor rmt = view(EMB_INT64, rm, 2, os), lmt = view(EMB_INT64, lm, 2, qs),
               rot = view(EMB_FLOAT32, ro, 2, os), lot = view(EMB_FLOAT32, lo, 2, qs);
    const bool mx = mode == EMB_BAG_MAX;
    if (t && ref) {
        OK(emb_bag_forward(ref, &gin, &goff, use_psw ? &gpsw : NULL, &rot, mx ? &rmt : NULL));
        OK(emb_mpi_table_bag_forward(t, &q.input, &q.offsets, use_psw ? &q.psw : NULL, &lot,
                                     mx ? &lmt : NULL));
        OK(emb_bag_backward(ref, &gin, &goff, use_psw ? &gpsw : NULL, mx ? &rmt : NULL, &ggo,
                            &rgt));
        OK(emb_mpi_table_bag_backward_dense(t, &q.input, &q.offsets, use_psw ? &q.psw : NULL,
                                            mx ? &lmt : NULL, &q.gout, &lgt));
        check_grad(t, lg, rg, what, "bag");
    }
    free(lg);
    free(rg);
    free(rm);
    free(lm);
    free(ro);
    free(lo);
    free(q.offs);
    free_batch(&b);
    emb_generator_free(g);
    emb_bag_free(ref);
    emb_mpi_table_free(t);
    emb_set_num_threads(1);
}

/* Refusals on one rank are refused on every rank; nothing changes. */
static void run_refusals(void) {
    emb_bag_options bo = emb_bag_options_default();
    bo.mode = EMB_BAG_MAX;
    emb_mpi_table *t = NULL;
    OK(emb_mpi_table_create(MPI_COMM_WORLD, 10, 4, &bo, NULL, &t));
    if (!t) return;
    int64_t b0, b1;
    emb_mpi_table_rows(t, &b0, &b1);
    const int64_t ls[2] = {b1 - b0, 4};
    float *lg = zeroed((b1 - b0) * 4), *keep = zeroed((b1 - b0) * 4);
    for (int64_t i = 0; i < (b1 - b0) * 4; i++) lg[i] = keep[i] = (float)i + 0.5f;
    emb_tensor lgt = view(EMB_FLOAT32, b1 > b0 ? lg : NULL, 2, ls);
    int64_t ids[3] = {1, 9, 2}, n = 3, offs[1] = {0}, nb = 1, mi[4] = {1, 9, 2, 2};
    float go[4] = {1, 2, 3, 4};
    int64_t gs[2] = {1, 4};
    emb_tensor in = view(EMB_INT64, ids, 1, &n), of = view(EMB_INT64, offs, 1, &nb),
               gt = view(EMB_FLOAT32, go, 2, gs), mt = view(EMB_INT64, mi, 2, gs);
    const size_t bytes = (size_t)((b1 - b0) * 4) * sizeof(float);
    /* a max_indices value out of range on the last rank */
    if (rank_ == size_ - 1) mi[3] = 10;
    emb_status st = emb_mpi_table_bag_backward_dense(t, &in, &of, NULL, &mt, &gt, &lgt);
    CHECK(st == EMB_ERR_INDEX, "max_indices out of range on rank %d gave %d", size_ - 1, st);
    if (rank_ != size_ - 1)
        CHECK(strstr(emb_errmsg(), "refused") && strstr(emb_errmsg(), "max_indices"), "message: %s",
              emb_errmsg());
    CHECK(!memcmp(lg, keep, bytes), "a refused backward changed the gradient");
    mi[3] = 2;
    /* no max_indices in mode max */
    st = emb_mpi_table_bag_backward_dense(t, &in, &of, NULL, NULL, &gt, &lgt);
    CHECK(st == EMB_ERR_NULL, "mode max without max_indices gave %d", st);
    /* an id out of range on rank 0 (a lookup) */
    if (rank_ == 0) ids[1] = 10;
    float pg[12] = {0};
    int64_t ps[2] = {3, 4};
    emb_tensor pgt = view(EMB_FLOAT32, pg, 2, ps);
    st = emb_mpi_table_lookup_backward_dense(t, &in, &pgt, &lgt);
    CHECK(st == EMB_ERR_INDEX, "an id out of range on rank 0 gave %d", st);
    CHECK(!memcmp(lg, keep, bytes), "a refused backward changed the gradient");
    ids[1] = 9;
    /* a gradient of the wrong shape on the last rank */
    const int64_t bad[2] = {b1 - b0 + (rank_ == size_ - 1), 4};
    float *big = zeroed((b1 - b0 + 1) * 4);
    emb_tensor badt = view(EMB_FLOAT32, big, 2, bad);
    st = emb_mpi_table_lookup_backward_dense(t, &in, &pgt, rank_ == size_ - 1 ? &badt : &lgt);
    CHECK(st == EMB_ERR_SHAPE, "a wrong grad_shard shape on rank %d gave %d", size_ - 1, st);
    CHECK(!memcmp(lg, keep, bytes), "a refused backward changed the gradient");
    /* steps: no dense optimizer; a sparse step under a dense optimizer */
    emb_tensor s;
    OK(emb_mpi_table_shard(t, &s));
    float *before = zeroed((b1 - b0) * 4);
    if (bytes) memcpy(before, s.data, bytes);
    st = emb_mpi_table_step_dense(t, &lgt);
    CHECK(st == EMB_ERR_STATE, "a dense step without an optimizer gave %d", st);
    emb_mpi_table_free(t);
    bo.mode = EMB_BAG_SUM;
    OK(emb_mpi_table_create(MPI_COMM_WORLD, 10, 4, &bo, NULL, &t));
    emb_optimizer_options oo = emb_optimizer_options_default(EMB_OPTIMIZER_ADAM);
    OK(emb_mpi_table_set_optimizer_dense(t, &oo));
    OK(emb_mpi_table_shard(t, &s));
    if (bytes) memcpy(before, s.data, bytes);
    st = emb_mpi_table_bag_step(t, &in, &of, NULL, &gt);
    CHECK(st == EMB_ERR_STATE, "a sparse step under a dense optimizer gave %d", st);
    st = emb_mpi_table_step_dense(t, rank_ == size_ - 1 ? &badt : &lgt);
    CHECK(st == EMB_ERR_SHAPE, "a dense step with a wrong shape on one rank gave %d", st);
    CHECK(!bytes || !memcmp(before, s.data, bytes), "a refused step changed the shard");
    if (emb_mpi_table_optimizer(t))
        CHECK(emb_optimizer_param_steps(emb_mpi_table_optimizer(t), 0) <= 0,
              "a refused step counted a step");
    /* options that differ between ranks */
    oo.lr = rank_ == 0 ? 0.5 : 0.25;
    st = emb_mpi_table_set_optimizer_dense(t, &oo);
    CHECK(size_ == 1 ? st == EMB_OK : st == EMB_ERR_INVALID, "differing lr gave %d", st);
    emb_mpi_table_free(t);
    /* a table of f16 rows has no dense optimizer (its gradients work) */
    emb_mpi_shard_options so = emb_mpi_shard_options_default();
    so.qtype = EMB_QTYPE_F16;
    OK(emb_mpi_table_create(MPI_COMM_WORLD, 10, 4, &bo, &so, &t));
    st = emb_mpi_table_set_optimizer_dense(t, &oo);
    CHECK(st == EMB_ERR_UNSUPPORTED, "a dense optimizer on f16 rows gave %d", st);
    OK(emb_mpi_table_bag_backward_dense(t, &in, &of, NULL, NULL, &gt, &lgt));
    emb_mpi_table_free(t);
    free(before);
    free(big);
    free(lg);
    free(keep);
}

int main(int argc, char **argv) {
    mpi_check_init(&argc, &argv);
    uint64_t seed = 1;
    const int64_t shapes[][2] = {{37, 5}, {64, 16}, {9, 3}};
    for (int si = 0; si < 3; si++) {
        const int64_t V = shapes[si][0], D = shapes[si][1];
        if (V < size_) continue;
        for (int sh = 0; sh < 2; sh++)
            for (int mode = 0; mode < 3; mode++)
                for (int padc = 0; padc < 2; padc++)
                    for (int w = 0; w < (mode == EMB_BAG_SUM ? 2 : 1); w++)
                        for (int freq = 0; freq < (mode == EMB_BAG_MAX ? 1 : 2); freq++)
                            run_case(V, D, (emb_bag_mode)mode, padc ? V / 3 : -1, w, freq,
                                     (emb_mpi_sharding)sh, seed++);
    }
    run_large(EMB_BAG_SUM, true, false, seed++);
    run_large(EMB_BAG_MEAN, false, true, seed++);
    run_large(EMB_BAG_MAX, false, false, seed++);
    run_refusals();
    return mpi_check_finish(NULL);
}
