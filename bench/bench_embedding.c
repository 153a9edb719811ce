/* bench_embedding: times emb's embedding forward, dense backward and sparse backward, and
 * the machine's memory copy bandwidth, on a few (V, D, N) shapes, from a small table to a
 * large batch. Prints one line per case: "name V D N seconds_per_call". bench/run.py runs
 * it next to PyTorch and prints ratios. Usage: bench_embedding [threads] */
#include <emb/emb.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CHECK(call)                                                                   \
    do {                                                                              \
        if ((call) != EMB_OK) {                                                       \
            fprintf(stderr, "bench: %s failed: %s\n", #call, emb_errmsg());           \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

/* Runs fn until at least min_time has passed (and at least 3 times); returns the best
 * time per call over 5 rounds. */
typedef void (*bench_fn)(void *ctx);
static double time_it(bench_fn fn, void *ctx) {
    fn(ctx); /* warm up */
    double best = 1e30;
    for (int round = 0; round < 5; round++) {
        int reps = 0;
        double t0 = now(), t1;
        do {
            fn(ctx);
            reps++;
            t1 = now();
        } while (t1 - t0 < 0.05 || reps < 3);
        double per = (t1 - t0) / reps;
        if (per < best) best = per;
    }
    return best;
}

typedef struct {
    emb_embedding *e;
    emb_optimizer *opt;
    int param;
    emb_tensor idx, out, gw;
    emb_sparse_grad sg;
    size_t copy_bytes;
    char *src, *dst;
} ctx_t;

static void run_forward(void *p) {
    ctx_t *c = p;
    CHECK(emb_embedding_forward(c->e, &c->idx, &c->out));
}
/* Zeroes the gradient on as many threads as emb uses, as PyTorch's zeros() does. */
static void zero_parallel(void *data, size_t nbytes) {
    const size_t chunk = (size_t)1 << 20;
    const long n = (long)((nbytes + chunk - 1) / chunk);
#pragma omp parallel for num_threads(emb_get_num_threads()) schedule(static)
    for (long i = 0; i < n; i++) {
        size_t b = (size_t)i * chunk, e = b + chunk < nbytes ? b + chunk : nbytes;
        memset((char *)data + b, 0, e - b);
    }
}

static void run_dense_backward(void *p) {
    ctx_t *c = p;
    zero_parallel(c->gw.data, emb_tensor_nbytes(&c->gw)); /* PyTorch allocates zeros too */
    CHECK(emb_embedding_backward(c->e, &c->idx, &c->out, &c->gw));
}
static void run_sparse(void *p) {
    ctx_t *c = p;
    emb_sparse_grad_clear(&c->sg);
    CHECK(emb_embedding_forward(c->e, &c->idx, &c->out));
    CHECK(emb_embedding_backward_sparse(c->e, &c->idx, &c->out, &c->sg));
}
/* One sparse SGD training step as a user writes it: the lookup, then the update straight
 * from the output gradient (here: the output itself stands in for dL/dout). */
static void run_train_step(void *p) {
    ctx_t *c = p;
    CHECK(emb_embedding_forward(c->e, &c->idx, &c->out));
    CHECK(emb_optimizer_step_fused(c->opt, c->param, c->e, &c->idx, &c->out));
}
static void run_copy(void *p) {
    ctx_t *c = p;
    memcpy(c->dst, c->src, c->copy_bytes);
}

int main(int argc, char **argv) {
    if (argc > 1) emb_set_num_threads(atoi(argv[1]));
    static const int64_t cases[][3] = {{50000, 128, 32768}, {1000, 64, 4096}, {100000, 16, 100000}};
    ctx_t c;
    memset(&c, 0, sizeof c);
    c.copy_bytes = (size_t)256 << 20;
    c.src = malloc(c.copy_bytes);
    c.dst = malloc(c.copy_bytes);
    if (!c.src || !c.dst) return 1;
    memset(c.src, 1, c.copy_bytes);
    memset(c.dst, 2, c.copy_bytes);
    double tc = time_it(run_copy, &c);
    /* a copy reads and writes each byte */
    printf("memcpy_GBps 0 0 %zu %.6f\n", c.copy_bytes, 2.0 * c.copy_bytes / tc / 1e9);
    free(c.src);
    free(c.dst);

    srand(1);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int64_t V = cases[k][0], D = cases[k][1], N = cases[k][2];
        emb_manual_seed(0);
        CHECK(emb_embedding_create(V, D, NULL, &c.e));
        CHECK(emb_tensor_alloc(&c.idx, EMB_INT64, 1, (int64_t[]){N}));
        int64_t *ix = c.idx.data;
        for (int64_t i = 0; i < N; i++) ix[i] = (int64_t)(((uint64_t)rand() * RAND_MAX + rand()) % (uint64_t)V);
        CHECK(emb_tensor_alloc(&c.out, EMB_FLOAT32, 2, (int64_t[]){N, D}));
        CHECK(emb_tensor_alloc(&c.gw, EMB_FLOAT32, 2, (int64_t[]){V, D}));
        CHECK(emb_sparse_grad_init(&c.sg, V, D));
        emb_optim_options oo = emb_optim_options_default(EMB_OPTIM_SGD);
        oo.lr = 1e-3;
        CHECK(emb_optimizer_create(&oo, &c.opt));
        emb_tensor w;
        CHECK(emb_embedding_weight(c.e, &w));
        CHECK(emb_optimizer_add_param(c.opt, &w, &c.param));
        printf("forward %lld %lld %lld %.9f\n", (long long)V, (long long)D, (long long)N,
               time_it(run_forward, &c));
        printf("dense_backward %lld %lld %lld %.9f\n", (long long)V, (long long)D,
               (long long)N, time_it(run_dense_backward, &c));
        printf("sparse_fwd_bwd %lld %lld %lld %.9f\n", (long long)V, (long long)D,
               (long long)N, time_it(run_sparse, &c));
        printf("sgd_sparse_step %lld %lld %lld %.9f\n", (long long)V, (long long)D,
               (long long)N, time_it(run_train_step, &c));
        fflush(stdout);
        emb_optimizer_free(c.opt);
        emb_sparse_grad_free(&c.sg);
        emb_tensor_free(&c.idx);
        emb_tensor_free(&c.out);
        emb_tensor_free(&c.gw);
        emb_embedding_free(c.e);
    }
    return 0;
}
