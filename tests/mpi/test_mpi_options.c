/* The bag and optimizer options of a sharded table beyond the plain ones, under mpirun at
 * 1, 2 and 4 ranks against the single-process library on the joined batch: max_norm (the
 * owners renormalise the rows of the joined batch, each once, before the rows are sent),
 * and the combinations libemb's sparse step refuses (SGD or Adagrad with weight_decay,
 * scale_grad_by_freq, mode max), which a sharded table refuses with libemb's own status and
 * message; timeout_ms's checks. */
#include "mpi_check.h"

#include <math.h>

/* max_norm: bag forwards, lookups and steps in turn; the shard rows after each. */
static void run_renorm(int64_t V, int64_t D, emb_bag_mode mode, int64_t pad, double norm_type,
                       emb_mpi_sharding sharding, uint64_t seed) {
    char what[160];
    snprintf(what, sizeof what,
             "max_norm V=%" PRId64 " D=%" PRId64 " mode=%d pad=%" PRId64 " p=%g sharding=%d", V, D,
             (int)mode, pad, norm_type, (int)sharding);
    emb_bag_options bo;
    emb_mpi_shard_options so;
    table_options(mode, pad, sharding, &bo, &so);
    bo.max_norm = 1.25;
    bo.norm_type = norm_type;
    emb_manual_seed(seed);
    emb_mpi_table *t = NULL;
    OK(emb_mpi_table_create(MPI_COMM_WORLD, V, D, &bo, &so, &t));
    if (!t) return;
    emb_manual_seed(seed);
    emb_bag *ref = NULL;
    OK(emb_bag_create(V, D, &bo, &ref));
    emb_optimizer_options oo = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    oo.lr = 0.5; /* rows grow again between the forwards */
    emb_optimizer *ropt = NULL;
    emb_tensor rw;
    OK(emb_bag_weight(ref, &rw));
    OK(emb_optimizer_create(&oo, &ropt));
    OK(emb_optimizer_add_param(ropt, &rw, NULL));
    const bool mx = mode == EMB_BAG_MAX;
    if (!mx) OK(emb_mpi_table_set_optimizer(t, &oo));
    emb_generator *g = NULL;
    OK(emb_generator_create(seed * 13 + 5, &g));
    int64_t renormed = 0; /* rows the single process changed: the check can fail */
    for (int step = 0; step < 3; step++) {
        joined j;
        make_joined(&j, g, V, D, pad, false);
        const batch b = j.b;
        const part q = j.q;
        float *before = malloc((size_t)(V * D) * sizeof(float));
        memcpy(before, rw.data, (size_t)(V * D) * sizeof(float));
        OK(emb_bag_forward(ref, &j.gin, &j.goff, NULL, &j.ro, mx ? &j.rm : NULL));
        OK(emb_mpi_table_bag_forward(t, &q.input, &q.offsets, NULL, &j.lo, mx ? &j.lm : NULL));
        for (int64_t r = 0; r < V; r++)
            renormed += !same_rows(before + r * D, (const float *)rw.data + r * D, D);
        free(before);
        check_forward(&j, &b, mx, what);
        check_shard(t, ref, "after a renormalising bag forward");
        /* a lookup of the same ids renormalises again (rows grown by the step below) */
        float *lk = malloc((size_t)(q.n * D + 1) * sizeof(float));
        float *rk = malloc((size_t)(b.npos * D + 1) * sizeof(float));
        int64_t lks[2] = {q.n, D}, rks[2] = {b.npos, D};
        emb_tensor lkt = view(EMB_FLOAT32, lk, 2, lks), rkt = view(EMB_FLOAT32, rk, 2, rks);
        if (!mx) {
            OK(emb_optimizer_step_fused_bag(ropt, 0, ref, &j.gin, &j.goff, NULL, &j.ggo));
            OK(emb_mpi_table_bag_step(t, &q.input, &q.offsets, NULL, &q.gout));
        }
        OK(emb_embedding_forward(emb_bag_embedding(ref), &j.gin, &rkt));
        OK(emb_mpi_table_lookup(t, &q.input, &lkt));
        CHECK(same_rows(lk, rk + b.pos0[rank_] * D, q.n * D), "%s: lookup differs", what);
        check_shard(t, ref, "after a renormalising lookup");
        free(lk);
        free(rk);
        free_joined(&j);
    }
    CHECK(renormed > 0, "%s: no row was renormalised", what);
    emb_generator_free(g);
    emb_optimizer_free(ropt);
    emb_bag_free(ref);
    emb_mpi_table_free(t);
}

/* A small batch of every rank: one bag of ids {1, 2, 1}, its gradient. */
typedef struct small {
    int64_t ids[3], offs[1], n, nb, gs[2];
    float go[8];
    emb_tensor in, of, gt;
} small;

static void make_small(small *s, int64_t D) {
    memset(s, 0, sizeof *s);
    s->ids[0] = 1;
    s->ids[1] = 2;
    s->ids[2] = 1;
    s->n = 3;
    s->nb = 1;
    s->gs[0] = 1;
    s->gs[1] = D;
    for (int64_t d = 0; d < D; d++) s->go[d] = 0.5f + (float)d;
    s->in = view(EMB_INT64, s->ids, 1, &s->n);
    s->of = view(EMB_INT64, s->offs, 1, &s->nb);
    s->gt = view(EMB_FLOAT32, s->go, 2, s->gs);
}

/* What libemb's fused sparse step says of these options on one process: its status, and
 * its message copied to msg. */
static emb_status single_step(const emb_bag_options *bo, const emb_optimizer_options *oo, char *msg,
                              size_t cap) {
    emb_bag *ref = NULL;
    emb_optimizer *opt = NULL;
    emb_tensor w;
    small s;
    make_small(&s, 4);
    emb_manual_seed(3);
    OK(emb_bag_create(10, 4, bo, &ref));
    OK(emb_bag_weight(ref, &w));
    OK(emb_optimizer_create(oo, &opt));
    OK(emb_optimizer_add_param(opt, &w, NULL));
    emb_status st = emb_optimizer_step_fused_bag(opt, 0, ref, &s.in, &s.of, NULL, &s.gt);
    snprintf(msg, cap, "%s", st ? emb_errmsg() : "");
    emb_optimizer_free(opt);
    emb_bag_free(ref);
    return st;
}

/* The shard's rows, for checking that a refused call changed nothing. */
static float *shard_copy(emb_mpi_table *t, size_t *bytes) {
    emb_tensor s;
    OK(emb_mpi_table_shard(t, &s));
    *bytes = emb_tensor_nbytes(&s);
    float *c = malloc(*bytes + 1);
    if (*bytes) memcpy(c, s.data, *bytes);
    return c;
}

static void check_unchanged(emb_mpi_table *t, const float *before, size_t bytes, const char *what) {
    emb_tensor s;
    OK(emb_mpi_table_shard(t, &s));
    CHECK(bytes == 0 || !memcmp(before, s.data, bytes), "%s changed the shard", what);
}

static void run_libemb_refusals(void) {
    char want[512];
    /* weight_decay with SGD and Adagrad: refused when the optimizer is set */
    const emb_optimizer_kind kinds[2] = {EMB_OPTIMIZER_SGD, EMB_OPTIMIZER_ADAGRAD};
    for (int k = 0; k < 2; k++) {
        emb_optimizer_options oo = emb_optimizer_options_default(kinds[k]);
        oo.weight_decay = 0.01;
        emb_status ref = single_step(NULL, &oo, want, sizeof want);
        CHECK(ref == EMB_ERR_UNSUPPORTED, "libemb took weight_decay with kind %d", (int)kinds[k]);
        emb_mpi_table *t = NULL;
        OK(emb_mpi_table_create(MPI_COMM_WORLD, 10, 4, NULL, NULL, &t));
        emb_status st = emb_mpi_table_set_optimizer(t, &oo);
        CHECK(st == ref && strstr(emb_errmsg(), want) != NULL,
              "weight_decay with kind %d: %d \"%s\", libemb: %d \"%s\"", (int)kinds[k], st,
              emb_errmsg(), ref, want);
        emb_mpi_table_free(t);
    }
    /* scale_grad_by_freq (sum, mean) and mode max: the forward is the single process's,
     * the sparse backward and step are refused as libemb's */
    for (int c = 0; c < 3; c++) {
        emb_bag_options bo = emb_bag_options_default();
        bo.mode = c == 0 ? EMB_BAG_SUM : c == 1 ? EMB_BAG_MEAN : EMB_BAG_MAX;
        bo.scale_grad_by_freq = c < 2;
        emb_optimizer_options oo = emb_optimizer_options_default(EMB_OPTIMIZER_ADAGRAD);
        emb_status ref = single_step(&bo, &oo, want, sizeof want);
        CHECK(ref == EMB_ERR_UNSUPPORTED, "libemb stepped case %d", c);
        emb_manual_seed(3);
        emb_mpi_table *t = NULL;
        OK(emb_mpi_table_create(MPI_COMM_WORLD, 10, 4, &bo, NULL, &t));
        if (!t) continue;
        OK(emb_mpi_table_set_optimizer(t, &oo));
        emb_manual_seed(3);
        emb_bag *single = NULL;
        OK(emb_bag_create(10, 4, &bo, &single));
        small s;
        make_small(&s, 4);
        float o1[4], o2[4];
        emb_tensor t1 = view(EMB_FLOAT32, o1, 2, s.gs), t2 = view(EMB_FLOAT32, o2, 2, s.gs);
        OK(emb_bag_forward(single, &s.in, &s.of, NULL, &t1, NULL));
        OK(emb_mpi_table_bag_forward(t, &s.in, &s.of, NULL, &t2, NULL));
        CHECK(same_rows(o1, o2, 4), "case %d: forward differs", c);
        size_t bytes;
        float *before = shard_copy(t, &bytes);
        emb_status st = emb_mpi_table_bag_step(t, &s.in, &s.of, NULL, &s.gt);
        CHECK(st == ref && strstr(emb_errmsg(), want) != NULL,
              "case %d: step gave %d \"%s\", libemb %d \"%s\"", c, st, emb_errmsg(), ref, want);
        emb_sparse_grad gr;
        memset(&gr, 0, sizeof gr);
        st = emb_mpi_table_bag_backward_sparse(t, &s.in, &s.of, NULL, &s.gt, &gr);
        CHECK(st == ref && strstr(emb_errmsg(), want) != NULL,
              "case %d: backward gave %d \"%s\", libemb %d \"%s\"", c, st, emb_errmsg(), ref, want);
        check_unchanged(t, before, bytes, "a refused step");
        free(before);
        emb_bag_free(single);
        emb_mpi_table_free(t);
    }
    /* a max_norm or norm_type that differs between ranks */
    emb_bag_options bo = emb_bag_options_default();
    bo.max_norm = 2.0;
    bo.norm_type = rank_ == size_ - 1 ? 1.0 : 2.0;
    emb_mpi_table *u = NULL;
    emb_status st = emb_mpi_table_create(MPI_COMM_WORLD, 10, 4, &bo, NULL, &u);
    CHECK(size_ == 1 ? st == EMB_OK : st == EMB_ERR_INVALID && strstr(emb_errmsg(), "norm_type"),
          "a differing norm_type gave %d", st);
    emb_mpi_table_free(u);
    /* tables of other storage types are not renormalised */
    emb_mpi_shard_options so = emb_mpi_shard_options_default();
    so.qtype = EMB_QTYPE_F16;
    bo.norm_type = 2.0;
    u = NULL;
    st = emb_mpi_table_create(MPI_COMM_WORLD, 10, 4, &bo, &so, &u);
    CHECK(st == EMB_ERR_UNSUPPORTED && u == NULL, "max_norm on f16 rows gave %d", st);
    /* f16 rows train with SGD without momentum */
    bo.max_norm = INFINITY;
    OK(emb_mpi_table_create(MPI_COMM_WORLD, 10, 4, &bo, &so, &u));
    emb_optimizer_options mo = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    mo.momentum = 0.5;
    st = emb_mpi_table_set_optimizer(u, &mo);
    CHECK(st == EMB_ERR_UNSUPPORTED, "SGD with momentum on f16 rows gave %d", st);
    emb_mpi_table_free(u);
    u = NULL;
    /* a negative timeout_ms, and one that differs between ranks */
    so = emb_mpi_shard_options_default();
    CHECK(so.timeout_ms == EMB_MPI_TIMEOUT_MS_DEFAULT, "default timeout_ms %" PRId64,
          so.timeout_ms);
    so.timeout_ms = -1;
    st = emb_mpi_table_create(MPI_COMM_WORLD, 10, 4, NULL, &so, &u);
    CHECK(st == EMB_ERR_INVALID && u == NULL && strstr(emb_errmsg(), "timeout_ms"),
          "timeout_ms -1 gave %d", st);
    so.timeout_ms = rank_ == 0 ? 1000 : 2000;
    st = emb_mpi_table_create(MPI_COMM_WORLD, 10, 4, NULL, &so, &u);
    CHECK(size_ == 1 ? st == EMB_OK : st == EMB_ERR_INVALID && strstr(emb_errmsg(), "timeout_ms"),
          "a differing timeout_ms gave %d", st);
    emb_mpi_table_free(u);
}

int main(int argc, char **argv) {
    mpi_check_init(&argc, &argv);
    uint64_t seed = 100;
    const int64_t shapes[][2] = {{37, 5}, {9, 3}};
    for (int si = 0; si < 2; si++)
        for (int sh = 0; sh < 2; sh++)
            for (int mode = 0; mode < 3; mode++)
                for (int padc = 0; padc < 2; padc++)
                    run_renorm(shapes[si][0], shapes[si][1], (emb_bag_mode)mode,
                               padc ? shapes[si][0] / 3 : -1, (mode + padc) % 2 ? 1.0 : 2.0,
                               (emb_mpi_sharding)sh, seed++);
    run_libemb_refusals();
    return mpi_check_finish(NULL);
}
