/* bench_bag: times emb's EmbeddingBag forward and forward+backward (dense weight gradient
 * into a freshly zeroed buffer, and sparse gradient) for modes sum, mean and max, with and
 * without per_sample_weights, on bags of 20 given by offsets. Prints one line per case:
 * "name V D N seconds_per_call" (N: positions). bench/run.py runs it next to PyTorch's
 * F.embedding_bag and prints ratios. Usage: bench_bag [threads] */
#include <emb/emb.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BAG 20

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CHECK(call)                                                                   \
    do {                                                                              \
        if ((call) != EMB_OK) {                                                       \
            fprintf(stderr, "bench_bag: %s failed: %s\n", #call, emb_errmsg());       \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

typedef void (*bench_fn)(void *ctx);
static double time_it(bench_fn fn, void *ctx) {
    fn(ctx);
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
    emb_bag *bag;
    emb_tensor idx, off, psw, out, mi, gw, g;
    const emb_tensor *p, *m;
    emb_sparse_grad sg;
} ctx_t;

static void run_forward(void *p) {
    ctx_t *c = p;
    CHECK(emb_bag_forward(c->bag, &c->idx, &c->off, c->p, &c->out, (emb_tensor *)c->m));
}

/* Zeroes the gradient on as many threads as emb uses, as PyTorch's zeros() does. */
static void zero_parallel(void *data, size_t nbytes) {
    const size_t chunk = (size_t)1 << 20;
    const long n = (long)((nbytes + chunk - 1) / chunk);
#pragma omp parallel for num_threads(emb_get_num_threads()) schedule(static)
    for (long i = 0; i < n; i++) {
        size_t lo = (size_t)i * chunk, len = lo + chunk < nbytes ? chunk : nbytes - lo;
        memset((char *)data + lo, 0, len);
    }
}

static void run_fwd_bwd(void *p) {
    ctx_t *c = p;
    run_forward(c);
    zero_parallel(c->gw.data, emb_tensor_nbytes(&c->gw));
    CHECK(emb_bag_backward(c->bag, &c->idx, &c->off, c->p, c->m, &c->g, &c->gw));
}

static void run_sparse(void *p) {
    ctx_t *c = p;
    run_forward(c);
    emb_sparse_grad_clear(&c->sg);
    CHECK(emb_bag_backward_sparse(c->bag, &c->idx, &c->off, c->p, &c->g, &c->sg));
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    emb_set_num_threads(threads);
    static const int64_t cases[][3] = {{1000000, 64, 2048 * BAG}, {50000, 128, 2048 * BAG}};
    static const char *modes[] = {"sum", "mean", "max"};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int64_t V = cases[k][0], D = cases[k][1], N = cases[k][2], B = N / BAG;
        emb_generator *gen;
        CHECK(emb_generator_create(0, &gen));
        emb_tensor w, idx, off, psw, out, mi, gw, g;
        CHECK(emb_tensor_alloc(&w, EMB_FLOAT32, 2, (int64_t[]){V, D}));
        CHECK(emb_randn_(&w, gen));
        CHECK(emb_tensor_alloc(&idx, EMB_INT64, 1, (int64_t[]){N}));
        CHECK(emb_randint_(&idx, 0, V, gen));
        CHECK(emb_tensor_alloc(&off, EMB_INT64, 1, (int64_t[]){B}));
        for (int64_t b = 0; b < B; b++) ((int64_t *)off.data)[b] = b * BAG;
        CHECK(emb_tensor_alloc(&psw, EMB_FLOAT32, 1, (int64_t[]){N}));
        CHECK(emb_randn_(&psw, gen));
        CHECK(emb_tensor_alloc(&out, EMB_FLOAT32, 2, (int64_t[]){B, D}));
        CHECK(emb_tensor_alloc(&mi, EMB_INT64, 2, (int64_t[]){B, D}));
        CHECK(emb_tensor_alloc(&gw, EMB_FLOAT32, 2, (int64_t[]){V, D}));
        CHECK(emb_tensor_alloc(&g, EMB_FLOAT32, 2, (int64_t[]){B, D}));
        CHECK(emb_randn_(&g, gen));
        for (int mode = 0; mode < 3; mode++)
            for (int weighted = 0; weighted < (mode == 0 ? 2 : 1); weighted++) {
                ctx_t c;
                memset(&c, 0, sizeof c);
                emb_bag_options o = emb_bag_options_default();
                o.mode = (emb_bag_mode)mode;
                CHECK(emb_bag_from_pretrained(&w, false, &o, &c.bag));
                c.idx = idx;
                c.off = off;
                c.psw = psw;
                c.out = out;
                c.mi = mi;
                c.gw = gw;
                c.g = g;
                c.p = weighted ? &c.psw : NULL;
                c.m = mode == 2 ? &c.mi : NULL;
                CHECK(emb_sparse_grad_init(&c.sg, V, D));
                char name[64];
                snprintf(name, sizeof name, "%s%s", modes[mode], weighted ? "_psw" : "");
                printf("%s_fwd %lld %lld %lld %.9f\n", name, (long long)V, (long long)D,
                       (long long)N, time_it(run_forward, &c));
                printf("%s_fwd_bwd %lld %lld %lld %.9f\n", name, (long long)V, (long long)D,
                       (long long)N, time_it(run_fwd_bwd, &c));
                if (mode != 2)
                    printf("%s_sparse %lld %lld %lld %.9f\n", name, (long long)V,
                           (long long)D, (long long)N, time_it(run_sparse, &c));
                fflush(stdout);
                emb_sparse_grad_free(&c.sg);
                emb_bag_free(c.bag);
            }
        emb_tensor_free(&w);
        emb_tensor_free(&idx);
        emb_tensor_free(&off);
        emb_tensor_free(&psw);
        emb_tensor_free(&out);
        emb_tensor_free(&mi);
        emb_tensor_free(&gw);
        emb_tensor_free(&g);
        emb_generator_free(gen);
    }
    return 0;
}
