/* bench_embedding: times one table shape's embedding operations and the machine's limits,
 * one JSON line per operation (format in bench_common.h). bench/run.py runs it next to
 * PyTorch and prints ratios; any single case runs from the command line, e.g.
 *   build/bench/bench_embedding --op forward --rows 1000000 --dim 64 --indices 262144 \
 *       --threads 2 --reps 7
 * Operations (--op, comma-separated; default: all):
 *   copy             stream copy bandwidth (256 MiB)
 *   gather_probe     the plain-C random-row gather on this table and these indices
 *   forward          emb_embedding_forward into a caller buffer [N, D]
 *   dense_backward   emb_embedding_backward_overwrite (a fresh [V, D] gradient: every
 *                    element written, as torch's zeros + sums)
 *   sparse_backward  emb_sparse_grad_clear + emb_embedding_backward_sparse (values copied)
 *   sparse_backward_view  the same with emb_embedding_backward_sparse_view (the gradient
 *                    borrows the indices and the output gradient, as torch's views them)
 *   {sgd,adagrad,sparseadam}_unfused  sparse backward + emb_optimizer_step_sparse
 *   {sgd,adagrad,sparseadam}_unfused_view  the same with the borrowing backward
 *   {sgd,adagrad,sparseadam}_fused    emb_optimizer_step_fused (no sparse gradient)
 * The table is N(0,1) (emb_embedding_create), the indices uniform in [0, V) from seed
 * --seed, the output gradient N(0,1). Every emb line also carries the gather probe's time
 * for the same N rows (measured once per run, before the operations). */
#include "bench_common.h"

#define USAGE                                                                                      \
    "usage: bench_embedding [--op LIST] [--rows V] [--dim D] [--indices N] [--threads T]\n"        \
    "                       [--reps R] [--seed S]\n"                                               \
    "ops: copy gather_probe forward dense_backward sparse_backward sparse_backward_view\n"         \
    "     sgd_unfused sgd_unfused_view sgd_fused adagrad_unfused adagrad_unfused_view\n"           \
    "     adagrad_fused sparseadam_unfused sparseadam_unfused_view sparseadam_fused\n"

static const char *const ALL_OPS[] = {"copy",
                                      "gather_probe",
                                      "forward",
                                      "dense_backward",
                                      "sparse_backward",
                                      "sparse_backward_view",
                                      "sgd_unfused",
                                      "sgd_unfused_view",
                                      "sgd_fused",
                                      "adagrad_unfused",
                                      "adagrad_unfused_view",
                                      "adagrad_fused",
                                      "sparseadam_unfused",
                                      "sparseadam_unfused_view",
                                      "sparseadam_fused"};
#define NUM_OPS (sizeof ALL_OPS / sizeof ALL_OPS[0])

typedef struct {
    emb_embedding *e;
    emb_optimizer *opt;
    int param;
    emb_tensor idx, out, g, gw;
    emb_sparse_grad sg;
} ctx_t;

/* The fused step's call in one place (its signature is the optimizer's to change). */
static emb_status fused_step(ctx_t *c) {
    return emb_optimizer_step_fused(c->opt, c->param, c->e, &c->idx, &c->g);
}

static void run_forward(void *p) {
    ctx_t *c = p;
    CHECK(emb_embedding_forward(c->e, &c->idx, &c->out));
}
static void run_dense_backward(void *p) {
    ctx_t *c = p;
    /* a fresh gradient, as torch's (zeros, then the sums): every element written */
    CHECK(emb_embedding_backward_overwrite(c->e, &c->idx, &c->g, &c->gw));
}
static void run_sparse_backward(void *p) {
    ctx_t *c = p;
    emb_sparse_grad_clear(&c->sg);
    CHECK(emb_embedding_backward_sparse(c->e, &c->idx, &c->g, &c->sg));
}
static void run_sparse_backward_view(void *p) {
    ctx_t *c = p;
    emb_sparse_grad_clear(&c->sg);
    CHECK(emb_embedding_backward_sparse_view(c->e, &c->idx, &c->g, &c->sg));
}
static void run_unfused(void *p) {
    ctx_t *c = p;
    emb_sparse_grad_clear(&c->sg);
    CHECK(emb_embedding_backward_sparse(c->e, &c->idx, &c->g, &c->sg));
    CHECK(emb_optimizer_step_sparse(c->opt, c->param, &c->sg));
}
static void run_unfused_view(void *p) {
    ctx_t *c = p;
    emb_sparse_grad_clear(&c->sg);
    CHECK(emb_embedding_backward_sparse_view(c->e, &c->idx, &c->g, &c->sg));
    CHECK(emb_optimizer_step_sparse(c->opt, c->param, &c->sg));
}
static void run_fused(void *p) {
    ctx_t *c = p;
    CHECK(fused_step(c));
}

int main(int argc, char **argv) {
    bench_args a = {"", 1000000, 64, 262144, 0, 1, 7, 1};
    bench_parse(&a, argc, argv, USAGE);
    char all[512] = "";
    if (!a.ops[0]) {
        for (size_t k = 0; k < NUM_OPS; k++) {
            strcat(all, ALL_OPS[k]);
            if (k + 1 < NUM_OPS) strcat(all, ",");
        }
        memcpy(a.ops, all, sizeof all);
    }
    /* refuse unknown operation names */
    for (char *p = a.ops; *p;) {
        char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        int known = 0;
        for (size_t k = 0; k < NUM_OPS; k++)
            known |= strlen(ALL_OPS[k]) == len && !strncmp(ALL_OPS[k], p, len);
        if (!known) {
            fprintf(stderr, "bench_embedding: unknown op '%.*s'\n%s", (int)len, p, USAGE);
            return 2;
        }
        if (!e) break;
        p = e + 1;
    }
    emb_set_num_threads(a.threads);
    if (bench_has_op(a.ops, "copy")) bench_copy_line(&a);

    const int64_t V = a.rows, D = a.dim, N = a.indices;
    ctx_t c;
    memset(&c, 0, sizeof c);
    emb_generator *gen;
    CHECK(emb_generator_create(a.seed, &gen));
    emb_manual_seed(a.seed);
    CHECK(emb_embedding_create(V, D, NULL, &c.e));
    CHECK(emb_tensor_alloc(&c.idx, EMB_INT64, 1, (int64_t[]){N}));
    CHECK(emb_randint_(&c.idx, 0, V, gen));
    CHECK(emb_tensor_alloc(&c.out, EMB_FLOAT32, 2, (int64_t[]){N, D}));
    memset(c.out.data, 0, emb_tensor_nbytes(&c.out));
    CHECK(emb_tensor_alloc(&c.g, EMB_FLOAT32, 2, (int64_t[]){N, D}));
    CHECK(emb_randn_(&c.g, gen));
    CHECK(emb_sparse_grad_init(&c.sg, V, D));
    emb_tensor w;
    CHECK(emb_embedding_weight(c.e, &w));

    int dist = 0;
    double probe = bench_probe(w.data, D, c.idx.data, N, a.threads, a.reps, &dist);
    if (bench_has_op(a.ops, "gather_probe")) bench_probe_line(&a, probe, dist);

    if (bench_has_op(a.ops, "forward"))
        bench_line(&a, "forward", bench_time(run_forward, &c, a.reps), probe);
    if (bench_has_op(a.ops, "dense_backward")) {
        CHECK(emb_tensor_alloc(&c.gw, EMB_FLOAT32, 2, (int64_t[]){V, D}));
        bench_line(&a, "dense_backward", bench_time(run_dense_backward, &c, a.reps), probe);
        emb_tensor_release(&c.gw);
    }
    if (bench_has_op(a.ops, "sparse_backward"))
        bench_line(&a, "sparse_backward", bench_time(run_sparse_backward, &c, a.reps), probe);
    if (bench_has_op(a.ops, "sparse_backward_view"))
        bench_line(&a, "sparse_backward_view", bench_time(run_sparse_backward_view, &c, a.reps),
                   probe);

    static const struct {
        const char *name;
        emb_optimizer_kind kind;
    } optims[] = {{"sgd", EMB_OPTIMIZER_SGD},
                  {"adagrad", EMB_OPTIMIZER_ADAGRAD},
                  {"sparseadam", EMB_OPTIMIZER_SPARSE_ADAM}};
    for (size_t k = 0; k < sizeof optims / sizeof optims[0]; k++)
        for (int fused = 0; fused < 3; fused++) { /* unfused, fused, unfused with the view */
            char name[64];
            snprintf(name, sizeof name, "%s_%s", optims[k].name,
                     fused == 1   ? "fused"
                     : fused == 2 ? "unfused_view"
                                  : "unfused");
            if (!bench_has_op(a.ops, name)) continue;
            emb_optimizer_options oo = emb_optimizer_options_default(optims[k].kind);
            oo.lr = 1e-3;
            CHECK(emb_optimizer_create(&oo, &c.opt));
            CHECK(emb_optimizer_add_param(c.opt, &w, &c.param));
            bench_line(&a, name,
                       bench_time(fused == 1   ? run_fused
                                  : fused == 2 ? run_unfused_view
                                               : run_unfused,
                                  &c, a.reps),
                       probe);
            emb_optimizer_free(c.opt);
            c.opt = NULL;
        }

    emb_sparse_grad_release(&c.sg);
    emb_tensor_release(&c.idx);
    emb_tensor_release(&c.out);
    emb_tensor_release(&c.g);
    emb_embedding_free(c.e);
    emb_generator_free(gen);
    return 0;
}
