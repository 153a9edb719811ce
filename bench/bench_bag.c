/* bench_bag: times emb's EmbeddingBag forward and forward+backward (dense weight gradient
 * written whole into a buffer, and sparse gradient) for modes sum, mean and max, with and
 * without per_sample_weights (sum only, as PyTorch), on bags of --bag positions given by
 * offsets. One JSON line per operation (format in bench_common.h; --indices counts
 * positions, so there are indices / bag bags). bench/run.py runs it next to PyTorch's
 * F.embedding_bag; a single case runs from the command line, e.g.
 *   build/bench/bench_bag --op bag_sum_fwd --rows 1000000 --dim 64 --indices 40960 --bag 20
 * Operations (--op, comma-separated; default: all):
 *   bag_{sum,sum_psw,mean,max}_fwd      forward into a caller buffer [B, D]
 *   bag_{sum,sum_psw,mean,max}_fwd_bwd  forward, emb_bag_backward_overwrite (a fresh [V, D]
 *                                       gradient, every element written)
 *   bag_{sum,sum_psw,mean}_sparse       forward, emb_bag_backward_sparse into a cleared
 *                                       sparse gradient
 * Every line carries the gather probe's time for the same positions' rows. */
#include "bench_common.h"

#define USAGE                                                                                      \
    "usage: bench_bag [--op LIST] [--rows V] [--dim D] [--indices N] [--bag B]\n"                  \
    "                 [--threads T] [--reps R] [--seed S]\n"                                       \
    "ops: bag_{sum,sum_psw,mean,max}_{fwd,fwd_bwd}, bag_{sum,sum_psw,mean}_sparse\n"

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

static void run_fwd_bwd(void *p) {
    ctx_t *c = p;
    run_forward(c);
    /* a fresh gradient, as torch's (zeros, then the sums): every element written */
    CHECK(emb_bag_backward_overwrite(c->bag, &c->idx, &c->off, c->p, c->m, &c->g, &c->gw));
}

static void run_sparse(void *p) {
    ctx_t *c = p;
    run_forward(c);
    emb_sparse_grad_clear(&c->sg);
    CHECK(emb_bag_backward_sparse(c->bag, &c->idx, &c->off, c->p, &c->g, &c->sg));
}

int main(int argc, char **argv) {
    bench_args a = {"", 1000000, 64, 2048 * 20, 20, 1, 7, 1};
    bench_parse(&a, argc, argv, USAGE);
    if (a.bag < 1 || a.indices % a.bag) {
        fprintf(stderr, "bench_bag: --indices must be a multiple of --bag (>= 1)\n");
        return 2;
    }
    static const char *const modes[] = {"sum", "mean", "max"};
    static const char *const kinds[] = {"fwd", "fwd_bwd", "sparse"};
    int any = 0;
    /* refuse unknown operation names */
    for (char *p = a.ops; *p;) {
        char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        int known = 0;
        for (int m = 0; m < 3; m++)
            for (int w = 0; w < (m == 0 ? 2 : 1); w++)
                for (int k = 0; k < (m == 2 ? 2 : 3); k++) {
                    char name[64];
                    snprintf(name, sizeof name, "bag_%s%s_%s", modes[m], w ? "_psw" : "", kinds[k]);
                    known |= strlen(name) == len && !strncmp(name, p, len);
                }
        if (!known) {
            fprintf(stderr, "bench_bag: unknown op '%.*s'\n%s", (int)len, p, USAGE);
            return 2;
        }
        if (!e) break;
        p = e + 1;
    }
    emb_set_num_threads(a.threads);
    const int64_t V = a.rows, D = a.dim, N = a.indices, B = N / a.bag;
    emb_generator *gen;
    CHECK(emb_generator_create(a.seed, &gen));
    emb_tensor w, idx, off, psw, out, mi, gw, g;
    CHECK(emb_tensor_alloc(&w, EMB_FLOAT32, 2, (int64_t[]){V, D}));
    CHECK(emb_randn_(&w, gen));
    CHECK(emb_tensor_alloc(&idx, EMB_INT64, 1, (int64_t[]){N}));
    CHECK(emb_randint_(&idx, 0, V, gen));
    CHECK(emb_tensor_alloc(&off, EMB_INT64, 1, (int64_t[]){B}));
    for (int64_t b = 0; b < B; b++) ((int64_t *)off.data)[b] = b * a.bag;
    CHECK(emb_tensor_alloc(&psw, EMB_FLOAT32, 1, (int64_t[]){N}));
    CHECK(emb_randn_(&psw, gen));
    CHECK(emb_tensor_alloc(&out, EMB_FLOAT32, 2, (int64_t[]){B, D}));
    memset(out.data, 0, emb_tensor_nbytes(&out));
    CHECK(emb_tensor_alloc(&mi, EMB_INT64, 2, (int64_t[]){B, D}));
    CHECK(emb_tensor_alloc(&gw, EMB_FLOAT32, 2, (int64_t[]){V, D}));
    CHECK(emb_tensor_alloc(&g, EMB_FLOAT32, 2, (int64_t[]){B, D}));
    CHECK(emb_randn_(&g, gen));

    int dist = 0;
    double probe = bench_probe(w.data, D, idx.data, N, a.threads, a.reps, &dist);

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
            static const bench_fn fns[] = {run_forward, run_fwd_bwd, run_sparse};
            for (int k = 0; k < (mode == 2 ? 2 : 3); k++) {
                char name[64];
                snprintf(name, sizeof name, "bag_%s%s_%s", modes[mode], weighted ? "_psw" : "",
                         kinds[k]);
                if (a.ops[0] && !bench_has_op(a.ops, name)) continue;
                bench_line(&a, name, bench_time(fns[k], &c, a.reps), probe);
                any = 1;
            }
            emb_sparse_grad_release(&c.sg);
            emb_bag_free(c.bag);
        }
    emb_tensor_release(&w);
    emb_tensor_release(&idx);
    emb_tensor_release(&off);
    emb_tensor_release(&psw);
    emb_tensor_release(&out);
    emb_tensor_release(&mi);
    emb_tensor_release(&gw);
    emb_tensor_release(&g);
    emb_generator_free(gen);
    return any ? 0 : 2;
}
