/* bench_temporaries: times the two ways the dense backward buckets a batch's positions by
 * row, and the two ways max_norm renorm lists a batch's distinct rows, on the same inputs:
 *   table: counting sort over the V rows (V + 2 offsets) / a V-bit bitmap: O(V + n)
 *   batch: radix sort of the n (row, position) keys / of the n indices:    O(n)
 * Both give the same bits (tests/unit/test_backward.c and test_embedding.c check it); the
 * library picks the batch form when V / ratio > n (EMB__BATCH_BUCKETS_RATIO in
 * src/nn/embedding_backward.c, EMB__RENORM_SORT_RATIO in src/nn/embedding.c), from these
 * numbers. Prints one line per case:
 *   op threads V D n table_us batch_us table/batch
 * Usage: bench_temporaries [threads...]   (default: 1 2)
 *
 * Measured on the 2-core reference VM, shared with other jobs (load average 5-18, so single
 * ratios are noisy by +-30%; the trends are not), `./build/bench/bench_temporaries 1 2`
 * after `make bench` or `cmake --build build --target bench_temporaries`. table/batch time,
 * > 1 when sorting the batch is faster; each cell lists the three tables
 * (V, D) = (1e4, 64), (1e5, 64), (1e6, 16):
 *
 *   V / n            256             64              16             4              1 1/4 backward
 * 1T  54   37   51    8.6  9.6 11.4   3.0  1.9  4.6   1.12 1.17 1.04  0.85 1.63 0.83  1.06 0.92
 * 0.73 backward 2T  28   38   78    7.8  9.4 16.5   2.2  2.2  2.8   1.12 1.09 1.37  0.89 0.85
 * 0.71  1.00 0.83 0.90 renorm   1T  0.78 1.10 1.49  0.98 1.33 1.00  0.75 0.99 0.71  0.72 1.24 0.84
 * 0.83 0.58 0.51  0.44 0.29 0.19 renorm   2T  0.86 0.98 1.61  1.27 1.02 1.65  0.88 0.33 1.05
 * 0.73 1.44 0.93  0.51 0.98 0.51  0.42 0.46 0.23
 *
 * Chosen crossovers: the backward sorts the batch when V > 4n (from V/n = 4 up it is never
 * slower: the counting sort's O(V) passes over V + 2 offsets and over every row dominate;
 * at V/n = 1 and below counting is up to 1.4x faster); the renorm sorts when V > 64n (at
 * 64 and above the two are even or the sort wins: a renorm's time is mostly the norms of
 * its rows, and the bitmap is then at most one word per index; below 16 the sort loses up
 * to 5x on large batches). Absolute times for one case, V = 1e6, D = 16, n = 3906, one
 * thread: backward 6149 us counting, 120 us sorting; renorm 165 us bitmap, 111 us sorting.
 * The path is switched through the library's private hook emb__set_temp_mode (declared
 * below; the bench links the static library). Indices are uniform over [0, V). */
#include <emb/emb.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void emb__set_temp_mode(int mode); /* src/nn/embedding_internal.h */
enum { TEMP_AUTO = 0, TEMP_TABLE = 1, TEMP_BATCH = 2 };

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != EMB_OK) {                                                                    \
            fprintf(stderr, "bench: %s failed: %s\n", #call, emb_errmsg());                        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    emb_embedding *e;
    emb_tensor idx, go, gw, w;
} ctx_t;

static void run_backward(ctx_t *c) {
    CHECK(emb_embedding_backward(c->e, &c->idx, &c->go, &c->gw));
}
static void run_renorm(ctx_t *c) {
    CHECK(emb_embedding_renorm_(&c->w, &c->idx, 1e30, 2.0));
}

/* Best time per call over 5 rounds of at least 20 ms each. */
static double time_it(void (*fn)(ctx_t *), ctx_t *c) {
    fn(c);
    double best = 1e30;
    for (int round = 0; round < 5; round++) {
        int reps = 0;
        double t0 = now(), t1;
        do {
            fn(c);
            reps++;
            t1 = now();
        } while (t1 - t0 < 0.02 || reps < 3);
        if ((t1 - t0) / reps < best) best = (t1 - t0) / reps;
    }
    return best;
}

static uint64_t rng_state = 12345;
static uint64_t next_u64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void run_case(int threads, int64_t V, int64_t D, int64_t n) {
    ctx_t c;
    CHECK(emb_tensor_alloc(&c.w, EMB_FLOAT32, 2, (int64_t[]){V, D}));
    for (int64_t i = 0; i < V * D; i++) ((float *)c.w.data)[i] = (float)(i % 7) - 3.0f;
    CHECK(emb_embedding_wrap(&c.w, NULL, false, NULL, &c.e));
    CHECK(emb_tensor_alloc(&c.idx, EMB_INT64, 1, (int64_t[]){n}));
    for (int64_t i = 0; i < n; i++)
        ((int64_t *)c.idx.data)[i] = (int64_t)(next_u64() % (uint64_t)V);
    CHECK(emb_tensor_alloc(&c.go, EMB_FLOAT32, 2, (int64_t[]){n, D}));
    for (int64_t i = 0; i < n * D; i++) ((float *)c.go.data)[i] = 1e-3f * (float)(i % 11);
    CHECK(emb_tensor_alloc(&c.gw, EMB_FLOAT32, 2, (int64_t[]){V, D}));
    emb_set_num_threads(threads);
    static const struct {
        const char *name;
        void (*fn)(ctx_t *);
    } ops[2] = {{"backward", run_backward}, {"renorm", run_renorm}};
    for (int k = 0; k < 2; k++) {
        emb__set_temp_mode(TEMP_TABLE);
        double table = time_it(ops[k].fn, &c);
        emb__set_temp_mode(TEMP_BATCH);
        double batch = time_it(ops[k].fn, &c);
        emb__set_temp_mode(TEMP_AUTO);
        printf("%-8s %d %8lld %4lld %8lld %10.1f %10.1f %6.2f\n", ops[k].name, threads,
               (long long)V, (long long)D, (long long)n, table * 1e6, batch * 1e6, table / batch);
        fflush(stdout);
    }
    emb_embedding_free(c.e);
    emb_tensor_release(&c.w);
    emb_tensor_release(&c.idx);
    emb_tensor_release(&c.go);
    emb_tensor_release(&c.gw);
}

int main(int argc, char **argv) {
    int threads[8] = {1, 2}, nthreads = 2;
    if (argc > 1) {
        nthreads = 0;
        for (int i = 1; i < argc && nthreads < 8; i++) threads[nthreads++] = atoi(argv[i]);
    }
    /* (V, D) tables, and batches of V/256 ... 4V positions */
    static const int64_t tables[][2] = {{10000, 64}, {100000, 64}, {1000000, 16}};
    static const int64_t ratios[] = {256, 64, 16, 4, 1}; /* V / n */
    printf("op       T        V    D        n   table_us   batch_us  table/batch\n");
    for (int t = 0; t < nthreads; t++)
        for (size_t k = 0; k < sizeof tables / sizeof tables[0]; k++) {
            for (size_t r = 0; r < sizeof ratios / sizeof ratios[0]; r++)
                run_case(threads[t], tables[k][0], tables[k][1], tables[k][0] / ratios[r]);
            run_case(threads[t], tables[k][0], tables[k][1], tables[k][0] * 4);
        }
    return 0;
}
