/* dlrm_mpi: a small recommendation model trained over MPI ranks, equal bit for bit to one
 * process training on the joined batches.
 *
 *   mpirun -np 4 build/examples/dlrm_mpi --out params-4.bin
 *   build/examples/dlrm_mpi --single --out params-1.bin      (no libemb_mpi calls)
 *   cmp params-1.bin params-4.bin
 *
 * Model (DLRM-shaped): three sparse features, each a bag of ids pooled by an EmbeddingBag
 * (table 0 row-wise over every rank, mode sum; tables 1 and 2 whole on one rank each,
 * modes mean and sum), concatenated with 4 dense features into Linear(28, 16), ReLU,
 * Linear(16, 1), binary cross-entropy with logits. Tables: Adagrad; Linear layers: SGD.
 *
 * Data: synthetic clicks, generated from a seed per step. Each step has a joined batch of
 * GLOBAL_BATCH samples; rank r of R takes a contiguous part of it, of uneven size.
 *
 * Distributed: the tables are sharded (emb_mpi_*); each rank pools its own samples' bags,
 * then the rows of the Linear layers' input are gathered in rank order (MPI_Allgatherv) and
 * every rank runs the replicated Linear layers forward and backward on the joined batch
 * (the same calls as the single process, hence the same bits: a sum of per-rank partial
 * weight gradients would change the summation order). Each rank takes its samples' rows of
 * the input gradient for the bags' steps. Rank 0 writes the parameters: the gathered
 * tables, then the Linear layers' weights and biases, as raw float32.
 */
#include <emb/emb.h>
#include <emb/mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NT           3
#define DIM          8
#define NDENSE       4
#define IN           (NDENSE + NT * DIM)
#define HID          16
#define GLOBAL_BATCH 48
#define MAXLEN       3

static const int64_t ROWS[NT] = {50, 20, 8};
static const emb_bag_mode MODES[NT] = {EMB_BAG_SUM, EMB_BAG_MEAN, EMB_BAG_SUM};

static int rank_ = 0, size_ = 1;

#define TRY(call)                                                                                  \
    do {                                                                                           \
        emb_status st_ = (call);                                                                   \
        if (st_) {                                                                                 \
            fprintf(stderr, "rank %d: %s: %s\n", rank_, #call, emb_errmsg());                      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static emb_tensor view(emb_dtype dt, void *data, int ndim, const int64_t *shape) {
    emb_tensor t;
    TRY(emb_tensor_init(&t, dt, data, ndim, shape));
    return t;
}

/* One step's joined batch. */
typedef struct batch {
    float dense[GLOBAL_BATCH][NDENSE];
    float label[GLOBAL_BATCH];
    int64_t ids[NT][GLOBAL_BATCH * MAXLEN];
    int64_t offs[NT][GLOBAL_BATCH + 1]; /* offs[t][s]: first position of sample s */
} batch;

static void make_batch(batch *b, int step) {
    emb_generator *g;
    TRY(emb_generator_create(1000 + (uint64_t)step, &g));
    int64_t ds[2] = {GLOBAL_BATCH, NDENSE};
    emb_tensor dt = view(EMB_FLOAT32, b->dense, 2, ds);
    TRY(emb_randn_(&dt, g));
    for (int t = 0; t < NT; t++) {
        int64_t p = 0;
        for (int s = 0; s < GLOBAL_BATCH; s++) {
            b->offs[t][s] = p;
            int len = 1 + (int)(emb_generator_random(g) % MAXLEN);
            for (int k = 0; k < len; k++) /* skewed: low ids are frequent */
                b->ids[t][p++] = (int64_t)(emb_generator_random(g) % (uint32_t)ROWS[t]) *
                                 (int64_t)(emb_generator_random(g) % 2) % ROWS[t];
        }
        b->offs[t][GLOBAL_BATCH] = p;
    }
    for (int s = 0; s < GLOBAL_BATCH; s++) /* the click depends on a dense feature and an id */
        b->label[s] =
            (b->dense[s][0] + (b->ids[0][b->offs[0][s]] % 3 == 0 ? 1.0f : -0.5f)) > 0 ? 1.0f : 0.0f;
    emb_generator_free(g);
}

/* Rank r's samples [first[r], first[r + 1]): uneven parts (the later ranks get more). */
static void parts(int R, int64_t *first) {
    int64_t wsum = 0, acc = 0;
    for (int r = 0; r < R; r++) wsum += r + 1;
    first[0] = 0;
    for (int r = 0; r < R; r++) {
        acc += r + 1;
        first[r + 1] = GLOBAL_BATCH * acc / wsum;
    }
}

/* The replicated part: Linear layers on the joined input x [B, IN]; returns grad_x and
 * updates the layers. Every rank runs it on the same x with the same calls. */
typedef struct dense_model {
    emb_linear *l1, *l2;
    emb_optimizer *opt;
} dense_model;

static void dense_create(dense_model *m) {
    TRY(emb_linear_create(IN, HID, true, NULL, &m->l1));
    TRY(emb_linear_create(HID, 1, true, NULL, &m->l2));
    emb_optimizer_options o = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    o.lr = 0.1;
    TRY(emb_optimizer_create(&o, &m->opt));
    emb_tensor v;
    TRY(emb_linear_weight(m->l1, &v));
    TRY(emb_optimizer_add_param(m->opt, &v, NULL));
    TRY(emb_linear_bias(m->l1, &v));
    TRY(emb_optimizer_add_param(m->opt, &v, NULL));
    TRY(emb_linear_weight(m->l2, &v));
    TRY(emb_optimizer_add_param(m->opt, &v, NULL));
    TRY(emb_linear_bias(m->l2, &v));
    TRY(emb_optimizer_add_param(m->opt, &v, NULL));
}

static float dense_step(dense_model *m, float *x, const float *label, float *grad_x) {
    static float h[GLOBAL_BATCH * HID], a[GLOBAL_BATCH * HID], y[GLOBAL_BATCH];
    static float gy[GLOBAL_BATCH], ga[GLOBAL_BATCH * HID], gh[GLOBAL_BATCH * HID];
    static float gw1[HID * IN], gb1[HID], gw2[HID], gb2[1];
    int64_t xs[2] = {GLOBAL_BATCH, IN}, hs[2] = {GLOBAL_BATCH, HID}, ys[2] = {GLOBAL_BATCH, 1};
    int64_t w1s[2] = {HID, IN}, b1s[1] = {HID}, w2s[2] = {1, HID}, b2s[1] = {1};
    emb_tensor tx = view(EMB_FLOAT32, x, 2, xs), th = view(EMB_FLOAT32, h, 2, hs),
               ta = view(EMB_FLOAT32, a, 2, hs), ty = view(EMB_FLOAT32, y, 2, ys),
               tl = view(EMB_FLOAT32, (void *)label, 2, ys), tgy = view(EMB_FLOAT32, gy, 2, ys),
               tga = view(EMB_FLOAT32, ga, 2, hs), tgh = view(EMB_FLOAT32, gh, 2, hs),
               tgx = view(EMB_FLOAT32, grad_x, 2, xs), tw1 = view(EMB_FLOAT32, gw1, 2, w1s),
               tb1 = view(EMB_FLOAT32, gb1, 1, b1s), tw2 = view(EMB_FLOAT32, gw2, 2, w2s),
               tb2 = view(EMB_FLOAT32, gb2, 1, b2s);
    TRY(emb_linear_forward(m->l1, &tx, &th));
    for (int i = 0; i < GLOBAL_BATCH * HID; i++) a[i] = h[i] > 0 ? h[i] : 0.0f;
    TRY(emb_linear_forward(m->l2, &ta, &ty));
    float loss = 0, one = 1;
    emb_tensor tloss = view(EMB_FLOAT32, &loss, 0, NULL), tone = view(EMB_FLOAT32, &one, 0, NULL);
    TRY(emb_bce_with_logits_forward(&ty, &tl, NULL, NULL, &tloss));
    TRY(emb_bce_with_logits_backward(&ty, &tl, NULL, NULL, &tone, &tgy));
    memset(gw1, 0, sizeof gw1);
    memset(gb1, 0, sizeof gb1);
    memset(gw2, 0, sizeof gw2);
    memset(gb2, 0, sizeof gb2);
    TRY(emb_linear_backward(m->l2, &ta, &tgy, &tga, &tw2, &tb2));
    for (int i = 0; i < GLOBAL_BATCH * HID; i++) gh[i] = h[i] > 0 ? ga[i] : 0.0f;
    TRY(emb_linear_backward(m->l1, &tx, &tgh, &tgx, &tw1, &tb1));
    TRY(emb_optimizer_step(m->opt, 0, &tw1));
    TRY(emb_optimizer_step(m->opt, 1, &tb1));
    TRY(emb_optimizer_step(m->opt, 2, &tw2));
    TRY(emb_optimizer_step(m->opt, 3, &tb2));
    return loss;
}

/* Writes the replicated layers after the tables (f NULL: nothing written), closes f and
 * frees the layers. */
static void dense_finish(FILE *f, dense_model *m) {
    emb_tensor v;
    emb_linear *ls[2] = {m->l1, m->l2};
    for (int i = 0; f && i < 2; i++) {
        TRY(emb_linear_weight(ls[i], &v));
        fwrite(v.data, 1, emb_tensor_nbytes(&v), f);
        TRY(emb_linear_bias(ls[i], &v));
        fwrite(v.data, 1, emb_tensor_nbytes(&v), f);
    }
    if (f) fclose(f);
    emb_optimizer_free(m->opt);
    emb_linear_free(m->l1);
    emb_linear_free(m->l2);
}

static emb_bag_options bag_opts(int t) {
    emb_bag_options o = emb_bag_options_default();
    o.mode = MODES[t];
    return o;
}

static emb_optimizer_options table_opt(void) {
    emb_optimizer_options o = emb_optimizer_options_default(EMB_OPTIMIZER_ADAGRAD);
    o.lr = 0.05;
    return o;
}

/* This part's bag input of table t for samples [s0, s1) of the joined batch. */
static void bag_part(const batch *b, int t, int64_t s0, int64_t s1, emb_tensor *in, emb_tensor *off,
                     int64_t *offs_buf, int64_t *npos, int64_t *nb) {
    int64_t p0 = b->offs[t][s0];
    *npos = b->offs[t][s1] - p0;
    *nb = s1 - s0;
    for (int64_t s = s0; s < s1; s++) offs_buf[s - s0] = b->offs[t][s] - p0;
    *in = view(EMB_INT64, (void *)(b->ids[t] + p0), 1, npos);
    *off = view(EMB_INT64, offs_buf, 1, nb);
}

static int run_single(int steps, const char *out) {
    emb_manual_seed(7);
    emb_bag *bags[NT];
    emb_optimizer *topt[NT];
    emb_optimizer_options oo = table_opt();
    for (int t = 0; t < NT; t++) {
        emb_bag_options o = bag_opts(t);
        TRY(emb_bag_create(ROWS[t], DIM, &o, &bags[t]));
        emb_tensor w;
        TRY(emb_bag_weight(bags[t], &w));
        TRY(emb_optimizer_create(&oo, &topt[t]));
        TRY(emb_optimizer_add_param(topt[t], &w, NULL));
    }
    dense_model m;
    dense_create(&m);
    static batch b;
    static float x[GLOBAL_BATCH * IN], gx[GLOBAL_BATCH * IN], pooled[GLOBAL_BATCH * DIM],
        gp[GLOBAL_BATCH * DIM];
    int64_t offs[GLOBAL_BATCH], ps[2] = {GLOBAL_BATCH, DIM};
    for (int step = 0; step < steps; step++) {
        make_batch(&b, step);
        for (int s = 0; s < GLOBAL_BATCH; s++) memcpy(x + s * IN, b.dense[s], sizeof b.dense[s]);
        for (int t = 0; t < NT; t++) {
            emb_tensor in, off, tp = view(EMB_FLOAT32, pooled, 2, ps);
            int64_t npos, nb;
            bag_part(&b, t, 0, GLOBAL_BATCH, &in, &off, offs, &npos, &nb);
            TRY(emb_bag_forward(bags[t], &in, &off, NULL, &tp, NULL));
            for (int s = 0; s < GLOBAL_BATCH; s++)
                memcpy(x + s * IN + NDENSE + t * DIM, pooled + s * DIM, DIM * sizeof(float));
        }
        float loss = dense_step(&m, x, b.label, gx);
        for (int t = 0; t < NT; t++) {
            emb_tensor in, off, tg = view(EMB_FLOAT32, gp, 2, ps);
            int64_t npos, nb;
            bag_part(&b, t, 0, GLOBAL_BATCH, &in, &off, offs, &npos, &nb);
            for (int s = 0; s < GLOBAL_BATCH; s++)
                memcpy(gp + s * DIM, gx + s * IN + NDENSE + t * DIM, DIM * sizeof(float));
            TRY(emb_optimizer_step_fused_bag(topt[t], 0, bags[t], &in, &off, NULL, &tg));
        }
        if (step % 10 == 0 || step == steps - 1) printf("step %d loss %.6f\n", step, loss);
    }
    FILE *f = out ? fopen(out, "wb") : NULL;
    for (int t = 0; t < NT; t++) {
        emb_tensor w;
        TRY(emb_bag_weight(bags[t], &w));
        if (f) fwrite(w.data, 1, emb_tensor_nbytes(&w), f);
        emb_optimizer_free(topt[t]);
        emb_bag_free(bags[t]);
    }
    dense_finish(f, &m);
    return 0;
}

static int run_mpi(int steps, const char *out) {
    emb_manual_seed(7);
    emb_mpi_table *tabs[NT];
    emb_optimizer_options oo = table_opt();
    for (int t = 0; t < NT; t++) {
        emb_bag_options o = bag_opts(t);
        emb_mpi_shard_options so = emb_mpi_shard_options_default();
        if (t > 0) { /* whole tables on ranks 1 and 2 (modulo the world) */
            so.sharding = EMB_MPI_TABLE_WISE;
            so.owner = t % size_;
        }
        TRY(emb_mpi_table_create(MPI_COMM_WORLD, ROWS[t], DIM, &o, &so, &tabs[t]));
        TRY(emb_mpi_table_set_optimizer(tabs[t], &oo));
    }
    dense_model m; /* drawn after the tables, as in the single process */
    dense_create(&m);
    int64_t first[65];
    parts(size_, first);
    const int64_t s0 = first[rank_], s1 = first[rank_ + 1], nb = s1 - s0;
    static batch b;
    static float x[GLOBAL_BATCH * IN], gx[GLOBAL_BATCH * IN], pooled[GLOBAL_BATCH * DIM],
        gp[GLOBAL_BATCH * DIM];
    int64_t offs[GLOBAL_BATCH], ps[2] = {nb, DIM};
    int counts[64], displs[64];
    for (int r = 0; r < size_; r++) {
        counts[r] = (int)((first[r + 1] - first[r]) * IN);
        displs[r] = (int)(first[r] * IN);
    }
    uint64_t dense_bytes = 0;
    for (int step = 0; step < steps; step++) {
        make_batch(&b, step); /* every rank makes the joined batch and takes its part */
        float *mine = x + s0 * IN;
        for (int64_t s = s0; s < s1; s++) memcpy(x + s * IN, b.dense[s], sizeof b.dense[s]);
        for (int t = 0; t < NT; t++) {
            emb_tensor in, off, tp = view(EMB_FLOAT32, pooled, 2, ps);
            int64_t npos, k;
            bag_part(&b, t, s0, s1, &in, &off, offs, &npos, &k);
            TRY(emb_mpi_table_bag_forward(tabs[t], &in, &off, NULL, &tp, NULL));
            for (int64_t s = 0; s < nb; s++)
                memcpy(mine + s * IN + NDENSE + t * DIM, pooled + s * DIM, DIM * sizeof(float));
        }
        /* the joined input of the replicated layers, in rank order */
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, counts, displs, MPI_FLOAT,
                       MPI_COMM_WORLD);
        dense_bytes += (uint64_t)(size_ - 1) * (uint64_t)counts[rank_] * sizeof(float);
        float loss = dense_step(&m, x, b.label, gx);
        for (int t = 0; t < NT; t++) {
            emb_tensor in, off, tg = view(EMB_FLOAT32, gp, 2, ps);
            int64_t npos, k;
            bag_part(&b, t, s0, s1, &in, &off, offs, &npos, &k);
            for (int64_t s = 0; s < nb; s++)
                memcpy(gp + s * DIM, gx + (s0 + s) * IN + NDENSE + t * DIM, DIM * sizeof(float));
            TRY(emb_mpi_table_bag_step(tabs[t], &in, &off, NULL, &tg));
        }
        if (rank_ == 0 && (step % 10 == 0 || step == steps - 1))
            printf("step %d loss %.6f\n", step, loss);
    }
    uint64_t table_bytes = 0;
    for (int t = 0; t < NT; t++) table_bytes += emb_mpi_table_stats(tabs[t]).bytes_sent;
    printf("rank %d: %d samples per step of %d; sent %.1f bytes per step for the tables, "
           "%.1f for the replicated layers' input\n",
           rank_, (int)nb, GLOBAL_BATCH, (double)table_bytes / steps, (double)dense_bytes / steps);
    FILE *f = rank_ == 0 && out ? fopen(out, "wb") : NULL;
    for (int t = 0; t < NT; t++) {
        float *full = rank_ == 0 ? malloc((size_t)(ROWS[t] * DIM) * sizeof(float)) : NULL;
        int64_t fs[2] = {ROWS[t], DIM};
        emb_tensor ft;
        if (rank_ == 0) ft = view(EMB_FLOAT32, full, 2, fs);
        TRY(emb_mpi_table_gather(tabs[t], 0, rank_ == 0 ? &ft : NULL));
        if (f) fwrite(full, sizeof(float), (size_t)(ROWS[t] * DIM), f);
        free(full);
        emb_mpi_table_free(tabs[t]);
    }
    dense_finish(f, &m);
    return 0;
}

int main(int argc, char **argv) {
    int steps = 30, single = 0;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--single"))
            single = 1;
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--single] [--steps N] [--out FILE]\n", argv[0]);
            return 2;
        }
    }
    /* One thread: the replicated layers' products then repeat bit for bit on every rank
     * and in the single process (OpenBLAS's results depend on its thread count). */
    emb_set_num_threads(1);
    if (single) return run_single(steps, out);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (size_ > 64) {
        if (rank_ == 0) fprintf(stderr, "at most 64 ranks\n");
        MPI_Finalize();
        return 2;
    }
    int rc = run_mpi(steps, out);
    MPI_Finalize();
    return rc;
}
