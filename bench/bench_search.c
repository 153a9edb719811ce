/* bench_search.c: the score step of the k-NN search (src/search/knn.c), emb's own score
 * kernel (src/kernels/score.h) against OpenBLAS's sgemm on the same tiles, and the whole
 * emb_knn_search, on one machine in one run.
 *
 *   bench_search [--rows V] [--dim D] [--queries Q] [--k K] [--threads T] [--reps R]
 *
 * Each operation prints one JSON line
 *   {"op":...,"rows":V,"dim":D,"queries":Q,"threads":T,"median_s":...,"gflops":...}
 * (gflops: 2*Q*V*D / median_s / 1e9). The operations:
 *   score_emb   all Q x V scores in 64 x 2048 tiles, query blocks spread over T threads,
 *               through the kernel emb__kernels() picks (EMB_KERNELS=ref/avx2 to choose);
 *   score_blas  the same tiles through cblas_sgemm, called as the search called it before
 *               it had its own kernel: inside a parallel region of T threads, so that with
 *               T = 1 OpenBLAS splits each product over its own threads (as many as
 *               OMP_NUM_THREADS allows; "blas_threads" in the line) and with T > 1 each call
 *               runs on one thread (only in a build with CBLAS);
 *   knn_search  emb_knn_search with k = K on T threads (scores, heaps and all).
 * A last line gives the ratios score_blas / score_emb and knn_search / score_emb. */
#include "bench_common.h"
#include "kernels/dispatch.h"

#ifdef BENCH_HAVE_CBLAS
#include <cblas.h>
#endif

enum { QB = 64, RB = 2048 }; /* the search's block sizes */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct run {
    const float *table, *queries;
    int64_t v, d, q, k;
    int threads;
    float *tiles;   /* [threads][QB * RB] */
    float *scratch; /* [threads][score scratch] */
    size_t scratch_floats;
    int64_t *ids;
    float *scores;
} run;

/* Every score of every query block against every row block; which = 0: emb's kernel, 1:
 * cblas_sgemm. The scores land in per-thread tiles (overwritten, as in the search). */
static void score_all(const run *r, int which) {
    const int64_t nblocks = (r->q + QB - 1) / QB;
    const emb__score_tile_fn score = emb__kernels()->score_tile;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(r->threads)
#endif
    for (int64_t b = 0; b < nblocks; b++) {
#ifdef _OPENMP
        const int t = omp_get_thread_num();
#else
        const int t = 0;
#endif
        const int64_t q0 = b * QB, qb = r->q - q0 < QB ? r->q - q0 : QB;
        float *tile = r->tiles + (size_t)t * QB * RB;
        for (int64_t r0 = 0; r0 < r->v; r0 += RB) {
            const int64_t rb = r->v - r0 < RB ? r->v - r0 : RB;
            const float *qs = r->queries + q0 * r->d, *rows = r->table + r0 * r->d;
            if (which == 0) {
                score(tile, rb, qs, qb, rows, rb, r->d, r->scratch + (size_t)t * r->scratch_floats);
            } else {
#ifdef BENCH_HAVE_CBLAS
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)qb, (int)rb, (int)r->d,
                            1.0f, qs, (int)r->d, rows, (int)r->d, 0.0f, tile, (int)rb);
#endif
            }
        }
    }
}

static double time_op(const run *r, const char *op, int reps, emb_knn *index) {
    double *t = malloc((size_t)reps * sizeof(double));
    emb_tensor qt;
    int64_t qshape[2] = {r->q, r->d};
    emb_tensor_init(&qt, EMB_FLOAT32, (void *)r->queries, 2, qshape);
    for (int i = -1; i < reps; i++) { /* one warm-up */
        double t0 = bench_now();
        if (strcmp(op, "knn_search") == 0) {
            if (emb_knn_search(index, &qt, r->k, NULL, 0, r->ids, r->scores) != EMB_OK) {
                fprintf(stderr, "bench_search: %s\n", emb_errmsg());
                exit(1);
            }
        } else {
            score_all(r, strcmp(op, "score_blas") == 0);
        }
        if (i >= 0) t[i] = bench_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    double med = t[reps / 2];
    free(t);
    int blas_threads = 1;
#ifdef _OPENMP
    if (strcmp(op, "score_blas") == 0 && r->threads == 1) blas_threads = omp_get_max_threads();
#endif
    printf("{\"op\":\"%s\",\"kernels\":\"%s\",\"rows\":%lld,\"dim\":%lld,\"queries\":%lld,"
           "\"threads\":%d,\"blas_threads\":%d,\"reps\":%d,\"median_s\":%.6g,\"gflops\":%.2f}\n",
           op, strcmp(op, "score_blas") == 0 ? "openblas" : emb__kernels()->name, (long long)r->v,
           (long long)r->d, (long long)r->q, r->threads,
           strcmp(op, "score_blas") == 0 ? blas_threads : 0, reps, med,
           2.0 * (double)r->q * (double)r->v * (double)r->d / med * 1e-9);
    fflush(stdout);
    return med;
}

/* A positive integer option (bench_parse_int accepts 0). */
static int64_t arg_int(const char *flag, const char *s) {
    const int64_t v = bench_parse_int(flag, s);
    if (v < 1) {
        fprintf(stderr, "bench_search: %s must be at least 1\n", flag);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    int64_t v = 30000, d = 100, q = 1000, k = 10, threads = 1, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_search: %s needs a value\n", argv[i]);
            return 2;
        }
        const char *f = argv[i], *val = argv[++i];
        if (!strcmp(f, "--rows"))
            v = arg_int(f, val);
        else if (!strcmp(f, "--dim"))
            d = arg_int(f, val);
        else if (!strcmp(f, "--queries"))
            q = arg_int(f, val);
        else if (!strcmp(f, "--k"))
            k = arg_int(f, val);
        else if (!strcmp(f, "--threads"))
            threads = arg_int(f, val);
        else if (!strcmp(f, "--reps"))
            reps = arg_int(f, val);
        else {
            fprintf(stderr, "usage: bench_search [--rows V] [--dim D] [--queries Q] [--k K] "
                            "[--threads T] [--reps R]\n");
            return 2;
        }
    }
    run r = {0};
    r.v = v, r.d = d, r.q = q, r.k = k, r.threads = (int)threads;
    float *table = malloc((size_t)(v * d) * sizeof(float));
    float *queries = malloc((size_t)(q * d) * sizeof(float));
    r.scratch_floats = emb__score_scratch_floats(QB, d);
    r.tiles = malloc((size_t)threads * QB * RB * sizeof(float));
    r.scratch = malloc((size_t)threads * r.scratch_floats * sizeof(float));
    r.ids = malloc((size_t)(q * k) * sizeof(int64_t));
    r.scores = malloc((size_t)(q * k) * sizeof(float));
    if (!table || !queries || !r.tiles || !r.scratch || !r.ids || !r.scores) {
        fprintf(stderr, "bench_search: out of memory\n");
        return 1;
    }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < v * d; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        table[i] = (float)(s >> 40) / (float)(1 << 24) - 0.5f;
    }
    for (int64_t i = 0; i < q * d; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        queries[i] = (float)(s >> 40) / (float)(1 << 24) - 0.5f;
    }
    r.table = table, r.queries = queries;
    emb_set_num_threads((int)threads);
    emb_knn *index;
    emb_tensor tt;
    int64_t tshape[2] = {v, d};
    emb_tensor_init(&tt, EMB_FLOAT32, table, 2, tshape);
    if (emb_knn_create(&tt, 0, &index) != EMB_OK) {
        fprintf(stderr, "bench_search: %s\n", emb_errmsg());
        return 1;
    }
    double te = time_op(&r, "score_emb", (int)reps, index);
    double tb = 0;
#ifdef BENCH_HAVE_CBLAS
    tb = time_op(&r, "score_blas", (int)reps, index);
#endif
    double tk = time_op(&r, "knn_search", (int)reps, index);
    printf("{\"op\":\"ratios\",\"rows\":%lld,\"dim\":%lld,\"threads\":%d,"
           "\"blas_over_emb\":%.3f,\"search_over_score\":%.3f}\n",
           (long long)v, (long long)d, r.threads, tb > 0 ? tb / te : 0.0, tk / te);
    emb_knn_free(index);
    free(table), free(queries), free(r.tiles), free(r.scratch), free(r.ids), free(r.scores);
    return 0;
}
