/* The exact rule of libemb_mpi, checked under mpirun at 1, 2 and 4 ranks: every rank also
 * runs the single-process library on the joined batch B0‖…‖B(R-1) and compares its part
 * (outputs, gradients, shard rows after each optimizer step) bit for bit. Then refusals:
 * an id out of range on one rank, settings that differ between ranks. */
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

static emb_tensor view(emb_dtype dt, void *data, int ndim, const int64_t *shape) {
    emb_tensor t;
    if (emb_tensor_init(&t, dt, data, ndim, shape)) abort();
    return t;
}

/* A batch for all ranks at once (every rank makes the same one), and each rank's part. */
typedef struct batch {
    int64_t nbags, npos;
    int64_t *input, *offsets;   /* joined: [npos], [nbags] */
    float *psw, *gout;          /* [npos], [nbags, dim] */
    int64_t bag0[64], pos0[64]; /* rank r's bags [bag0[r], bag0[r+1]), positions likewise */
} batch;

static void make_batch(batch *b, emb_generator *g, int64_t V, int64_t D, int64_t pad) {
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

static void free_batch(batch *b) {
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

static void make_part(part *q, const batch *b, int64_t D) {
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

static bool same_rows(const float *a, const float *b, int64_t n) {
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

static void make_joined(joined *j, emb_generator *g, int64_t V, int64_t D, int64_t pad,
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
static void check_forward(const joined *j, const batch *b, bool mx, const char *what) {
    const int64_t D = j->os[1], nb = j->ls[0], b0 = b->bag0[rank_];
    CHECK(same_rows(j->lout, j->rout + b0 * D, nb * D), "%s: bag forward differs", what);
    if (mx)
        CHECK(nb == 0 || !memcmp(j->lmax, j->rmax + b0 * D, (size_t)(nb * D) * sizeof(int64_t)),
              "%s: max_indices differ", what);
}

static void free_joined(joined *j) {
    free(j->q.offs);
    free_batch(&j->b);
    free(j->rout);
    free(j->lout);
    free(j->rmax);
    free(j->lmax);
}

/* The shard's rows against the single-process table's. */
static void check_shard(emb_mpi_table *t, emb_bag *ref, const char *when) {
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

static void run_case(int64_t V, int64_t D, emb_bag_mode mode, int64_t pad, bool use_psw,
                     emb_mpi_sharding sharding, uint64_t seed) {
    char what[160];
    snprintf(what, sizeof what,
             "V=%" PRId64 " D=%" PRId64 " mode=%d pad=%" PRId64 " psw=%d sharding=%d", V, D,
             (int)mode, pad, use_psw, (int)sharding);
    emb_bag_options bo = emb_bag_options_default();
    bo.mode = mode;
    bo.padding_idx = pad >= 0 ? pad : EMB_PADDING_NONE;
    emb_mpi_shard_options so = emb_mpi_shard_options_default();
    so.sharding = sharding;
    so.owner = size_ - 1;

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
    const emb_optimizer_kind kinds[3] = {EMB_OPTIMIZER_SGD, EMB_OPTIMIZER_ADAGRAD,
                                         EMB_OPTIMIZER_SPARSE_ADAM};
    for (int ki = 0; ki < (mode == EMB_BAG_MAX ? 1 : 3); ki++) {
        emb_optimizer_options oo = emb_optimizer_options_default(kinds[ki]);
        oo.lr = 0.1;
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
    emb_bag_options bo = emb_bag_options_default();
    bo.mode = mode;
    bo.padding_idx = pad >= 0 ? pad : EMB_PADDING_NONE;
    emb_mpi_shard_options so = emb_mpi_shard_options_default();
    so.sharding = sharding;
    so.owner = size_ - 1;
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
    o2.lr = 0.1;
    o2.momentum = 0.9;
    st = emb_mpi_table_set_optimizer(u, &o2);
    CHECK(st == EMB_ERR_UNSUPPORTED, "SGD with momentum gave %d", st);
    emb_mpi_table_free(u);
    /* a row-wise table of fewer rows than ranks */
    st = emb_mpi_table_create(MPI_COMM_WORLD, size_ - 1 > 0 ? size_ - 1 : 0, 4, NULL, NULL, &u);
    CHECK(st == EMB_ERR_INVALID, "a table smaller than the communicator gave %d", st);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
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
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0) printf("test_mpi_exact at %d ranks: %d failed checks\n", size_, all);
    MPI_Finalize();
    return all ? 1 : 0;
}
