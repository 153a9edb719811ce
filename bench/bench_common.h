/* bench_common.h: what bench_embedding.c and bench_bag.c share: the command line of one
 * case, median timing, the machine's limits (stream copy bandwidth and a random-row gather
 * probe over the same table and indices) and the JSON line each case prints.
 *
 * Command line (every field optional):
 *   --op NAME[,NAME...]  operations to time (the program's usage lists them)
 *   --rows V --dim D --indices N --bag B --threads T --reps R --seed S
 * Each operation prints one JSON line:
 *   {"lib":"emb","op":...,"rows":V,"dim":D,"indices":N,"bag":B,"threads":T,"reps":R,
 *    "calls":K,"median_s":...,"min_s":...,"probe_s":...,"probe_fraction":...}
 * median_s / min_s: per call, over R repetitions of K calls each (K chosen so that one
 * repetition takes about 20 ms, at least 1). probe_s: the gather probe's median time to fetch
 * the same N rows (of the same table, same indices, same thread count) into a buffer;
 * probe_fraction = probe_s / median_s, the fraction of the machine's random-row fetch rate
 * the operation reaches (1.0: as fast as the probe fetches its rows). */
#ifndef EMB_BENCH_COMMON_H
#define EMB_BENCH_COMMON_H

#include <emb/emb.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != EMB_OK) {                                                                    \
            fprintf(stderr, "bench: %s failed: %s\n", #call, emb_errmsg());                        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct bench_args {
    char ops[512];
    int64_t rows, dim, indices, bag;
    int threads, reps;
    uint64_t seed;
} bench_args;

static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int64_t bench_parse_int(const char *flag, const char *s) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0) {
        fprintf(stderr, "bench: %s wants a non-negative integer, got '%s'\n", flag, s);
        exit(2);
    }
    return (int64_t)v;
}

/* Parses argv into a (defaults already filled in). Exits with status 2 on a bad flag. */
static inline void bench_parse(bench_args *a, int argc, char **argv, const char *usage) {
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            fputs(usage, stdout);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench: %s needs a value\n%s", f, usage);
            exit(2);
        }
        const char *v = argv[++i];
        if (!strcmp(f, "--op")) {
            snprintf(a->ops, sizeof a->ops, "%s", v);
        } else if (!strcmp(f, "--rows")) {
            a->rows = bench_parse_int(f, v);
        } else if (!strcmp(f, "--dim")) {
            a->dim = bench_parse_int(f, v);
        } else if (!strcmp(f, "--indices")) {
            a->indices = bench_parse_int(f, v);
        } else if (!strcmp(f, "--bag")) {
            a->bag = bench_parse_int(f, v);
        } else if (!strcmp(f, "--threads")) {
            a->threads = (int)bench_parse_int(f, v);
        } else if (!strcmp(f, "--reps")) {
            a->reps = (int)bench_parse_int(f, v);
        } else if (!strcmp(f, "--seed")) {
            a->seed = (uint64_t)bench_parse_int(f, v);
        } else {
            fprintf(stderr, "bench: unknown option %s\n%s", f, usage);
            exit(2);
        }
    }
    if (a->rows < 1 || a->dim < 1 || a->indices < 1 || a->threads < 1 || a->reps < 1) {
        fprintf(stderr, "bench: rows, dim, indices, threads and reps must be >= 1\n");
        exit(2);
    }
}

typedef void (*bench_fn)(void *ctx);

static inline int bench_cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* Times fn: one warm-up call, then `reps` repetitions of `calls` calls each (calls chosen
 * from the warm-up so that a repetition takes about 20 ms). Per-call median and minimum. */
typedef struct bench_result {
    double median, min;
    int calls;
} bench_result;

static inline bench_result bench_time(bench_fn fn, void *ctx, int reps) {
    double t0 = bench_now();
    fn(ctx);
    double once = bench_now() - t0;
    int calls = once >= 0.02 ? 1 : (int)(0.02 / (once > 1e-7 ? once : 1e-7)) + 1;
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!t) exit(1);
    for (int r = 0; r < reps; r++) {
        double s = bench_now();
        for (int k = 0; k < calls; k++) fn(ctx);
        t[r] = (bench_now() - s) / calls;
    }
    qsort(t, (size_t)reps, sizeof(double), bench_cmp_double);
    bench_result res = {reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]), t[0],
                        calls};
    free(t);
    return res;
}

/* ---- the machine's limits ---------------------------------------------------------- */

/* Random-row gather probe: out[i] = w[ix[i]] for i in [0, n), rows of d floats, plain C.
 * Each thread takes a contiguous range of output rows (OpenMP static schedule, as emb's
 * forward does), copies rows 4 at a time, and prefetches the rows `dist` positions ahead
 * (dist 0: no prefetch). */
typedef struct probe_ctx {
    const float *w;
    const int64_t *ix;
    float *out;
    int64_t n, d;
    int threads, dist;
} probe_ctx;

static inline void bench_gather_probe(void *p) {
    const probe_ctx *c = p;
    const float *w = c->w;
    const int64_t *ix = c->ix;
    float *out = c->out;
    const int64_t n = c->n, d = c->d, dist = c->dist;
    const size_t row = (size_t)d * sizeof(float);
#pragma omp parallel num_threads(c->threads)
    {
        int64_t lo = 0, hi = n;
#ifdef _OPENMP
        {
            int nt = omp_get_num_threads(), t = omp_get_thread_num();
            lo = n * t / nt;
            hi = n * (t + 1) / nt;
        }
#endif
        int64_t i = lo;
        for (; i + 4 <= hi; i += 4) {
            if (dist > 0) {
                for (int64_t k = 0; k < 4; k++) {
                    int64_t j = i + k + dist;
                    if (j < hi) {
                        const char *r = (const char *)(w + ix[j] * d);
                        for (size_t b = 0; b < row; b += 64) __builtin_prefetch(r + b, 0, 0);
                    }
                }
            }
            memcpy(out + (i + 0) * d, w + ix[i + 0] * d, row);
            memcpy(out + (i + 1) * d, w + ix[i + 1] * d, row);
            memcpy(out + (i + 2) * d, w + ix[i + 2] * d, row);
            memcpy(out + (i + 3) * d, w + ix[i + 3] * d, row);
        }
        for (; i < hi; i++) memcpy(out + i * d, w + ix[i] * d, row);
    }
}

/* The probe's best median over prefetch distances 0, 4, 8, 16 and 32 rows: the fastest
 * random-row fetch this code finds on this machine. *best_dist receives the distance. */
static inline double bench_probe(const float *w, int64_t d, const int64_t *ix, int64_t n,
                                 int threads, int reps, int *best_dist) {
    static const int dists[] = {0, 4, 8, 16, 32};
    float *out = malloc((size_t)n * (size_t)d * sizeof(float));
    if (!out) exit(1);
    memset(out, 0, (size_t)n * (size_t)d * sizeof(float));
    double best = 1e30;
    for (size_t k = 0; k < sizeof dists / sizeof dists[0]; k++) {
        probe_ctx c = {w, ix, out, n, d, threads, dists[k]};
        bench_result r = bench_time(bench_gather_probe, &c, reps);
        if (r.median < best) {
            best = r.median;
            *best_dist = dists[k];
        }
    }
    free(out);
    return best;
}

/* Stream copy: dst = src over `bytes` bytes, each thread copying a contiguous slice. */
typedef struct copy_ctx {
    char *src, *dst;
    size_t bytes;
    int threads;
} copy_ctx;

static inline void bench_copy(void *p) {
    const copy_ctx *c = p;
    const long parts = 64;
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (long i = 0; i < parts; i++) {
        size_t lo = c->bytes * (size_t)i / (size_t)parts;
        size_t hi = c->bytes * (size_t)(i + 1) / (size_t)parts;
        memcpy(c->dst + lo, c->src + lo, hi - lo);
    }
}

/* Prints {"lib":"emb","op":"copy",...,"gbps":...}: bytes read + written per second of a
 * 256 MiB copy (larger than any cache here). */
static inline void bench_copy_line(const bench_args *a) {
    copy_ctx c = {NULL, NULL, (size_t)256 << 20, a->threads};
    c.src = malloc(c.bytes);
    c.dst = malloc(c.bytes);
    if (!c.src || !c.dst) exit(1);
    memset(c.src, 1, c.bytes);
    memset(c.dst, 2, c.bytes);
    bench_result r = bench_time(bench_copy, &c, a->reps);
    printf("{\"lib\":\"machine\",\"op\":\"copy\",\"bytes\":%zu,\"threads\":%d,\"reps\":%d,"
           "\"median_s\":%.9g,\"min_s\":%.9g,\"gbps\":%.4g}\n",
           c.bytes, a->threads, a->reps, r.median, r.min, 2.0 * (double)c.bytes / r.median / 1e9);
    fflush(stdout);
    free(c.src);
    free(c.dst);
}

static inline void bench_probe_line(const bench_args *a, double probe, int dist) {
    printf("{\"lib\":\"machine\",\"op\":\"gather_probe\",\"rows\":%lld,\"dim\":%lld,"
           "\"indices\":%lld,\"threads\":%d,\"reps\":%d,\"median_s\":%.9g,"
           "\"prefetch_rows\":%d,\"rows_per_s\":%.4g}\n",
           (long long)a->rows, (long long)a->dim, (long long)a->indices, a->threads, a->reps, probe,
           dist, (double)a->indices / probe);
    fflush(stdout);
}

static inline void bench_line(const bench_args *a, const char *op, bench_result r, double probe) {
    printf("{\"lib\":\"emb\",\"op\":\"%s\",\"rows\":%lld,\"dim\":%lld,\"indices\":%lld,"
           "\"bag\":%lld,\"threads\":%d,\"reps\":%d,\"calls\":%d,\"median_s\":%.9g,"
           "\"min_s\":%.9g,\"probe_s\":%.9g,\"probe_fraction\":%.4f}\n",
           op, (long long)a->rows, (long long)a->dim, (long long)a->indices, (long long)a->bag,
           a->threads, a->reps, r.calls, r.median, r.min, probe, probe / r.median);
    fflush(stdout);
}

/* Whether `op` is in the comma-separated list `ops`. */
static inline int bench_has_op(const char *ops, const char *op) {
    size_t n = strlen(op);
    for (const char *p = ops; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, op, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

#endif /* EMB_BENCH_COMMON_H */
