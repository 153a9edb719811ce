/* bench_large.c: tables larger than memory (docs/PERFORMANCE.md, "Tables larger than
 * memory"). Two commands:
 *
 *   bench_large create --qtype Q --rows V --dim D --out FILE [--seed S]
 *     Writes a V x D table drawn from N(0, 1) (emb's generator, in batches of rows: the
 *     float32 table is never held in memory) as a safetensors file of storage type Q
 *     (f32, f16, bf16, int8, int4) with emb_qtable_writer. One JSON line: seconds, bytes,
 *     the quantization error, peak RSS.
 *
 *   bench_large run --file FILE [--indices N] [--bag B] [--threads T] [--reps R]
 *                   [--seed S] [--api qtable|embedding]
 *     Maps the file read-only (emb_qtable_map; --api embedding: emb_embedding_map_safetensors,
 *     float32 files only) and times, on N random rows (uniform over the table):
 *       probe     plain C: copy the N rows' stored bytes into a buffer (the machine's rate
 *                 of fetching those rows from this mapping)
 *       forward   emb_qtable_forward (or emb_embedding_forward) into a float32 buffer
 *       bag_sum   emb_qtable_bag_forward (or emb_bag_forward on the mapped table), bags of B
 *       prefetch_forward  emb_qtable_prefetch of the rows, then emb_qtable_forward (qtable)
 *     each first cold (the file dropped from the page cache just before, with
 *     posix_fadvise(POSIX_FADV_DONTNEED), which needs no privilege; "cold_dropped" says
 *     whether the kernel reported success), then warm (median of R calls on the same rows).
 *     One JSON line per operation, with peak RSS after it. */
#define _GNU_SOURCE
#include <emb/emb.h>

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != EMB_OK) {                                                                    \
            fprintf(stderr, "bench_large: %s failed: %s\n", #call, emb_errmsg());                  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const char USAGE[] =
    "usage: bench_large create --qtype Q --rows V --dim D --out FILE [--seed S]\n"
    "       bench_large run --file FILE [--indices N] [--bag B] [--threads T] [--reps R]\n"
    "                       [--seed S] [--api qtable|embedding]\n";

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

typedef struct args {
    const char *qtype, *out, *file, *api;
    int64_t rows, dim, indices, bag;
    int threads, reps;
    uint64_t seed;
} args;

static int64_t num(const char *flag, const char *s) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || v < 0) {
        fprintf(stderr, "bench_large: %s wants a non-negative integer, got '%s'\n", flag, s);
        exit(2);
    }
    return v;
}

static void parse(args *a, int argc, char **argv) {
    for (int i = 2; i < argc; i++) {
        const char *f = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_large: %s needs a value\n%s", f, USAGE);
            exit(2);
        }
        const char *v = argv[++i];
        if (!strcmp(f, "--qtype"))
            a->qtype = v;
        else if (!strcmp(f, "--out"))
            a->out = v;
        else if (!strcmp(f, "--file"))
            a->file = v;
        else if (!strcmp(f, "--api"))
            a->api = v;
        else if (!strcmp(f, "--rows"))
            a->rows = num(f, v);
        else if (!strcmp(f, "--dim"))
            a->dim = num(f, v);
        else if (!strcmp(f, "--indices"))
            a->indices = num(f, v);
        else if (!strcmp(f, "--bag"))
            a->bag = num(f, v);
        else if (!strcmp(f, "--threads"))
            a->threads = (int)num(f, v);
        else if (!strcmp(f, "--reps"))
            a->reps = (int)num(f, v);
        else if (!strcmp(f, "--seed"))
            a->seed = (uint64_t)num(f, v);
        else {
            fprintf(stderr, "bench_large: unknown option %s\n%s", f, USAGE);
            exit(2);
        }
    }
}

static int create(const args *a) {
    emb_qtype q;
    if (!a->qtype || !a->out || a->rows < 1 || a->dim < 1) {
        fprintf(stderr, "%s", USAGE);
        return 2;
    }
    CHECK(emb_qtype_parse(a->qtype, &q));
    emb_generator *g;
    CHECK(emb_generator_create(a->seed, &g));
    const int64_t batch = (int64_t)(1 << 24) / a->dim + 1; /* 64 MiB of float32 */
    float *buf = malloc(sizeof(float) * (size_t)(batch * a->dim));
    if (!buf) return 1;
    double t0 = now(), gen_s = 0;
    emb_qtable_writer *w;
    CHECK(emb_qtable_writer_open(a->out, q, a->rows, a->dim, NULL, &w));
    for (int64_t r = 0; r < a->rows; r += batch) {
        int64_t n = a->rows - r < batch ? a->rows - r : batch;
        emb_tensor t;
        CHECK(emb_tensor_init(&t, EMB_FLOAT32, buf, 2, (int64_t[]){n, a->dim}));
        double g0 = now();
        CHECK(emb_normal_(&t, 0.0, 1.0, g));
        gen_s += now() - g0;
        CHECK(emb_qtable_writer_append(w, buf, n));
    }
    emb_qerror e;
    CHECK(emb_qtable_writer_commit(w, &e));
    emb_qtable_writer_free(w);
    double secs = now() - t0;
    int64_t rb;
    CHECK(emb_qtype_row_nbytes(q, a->dim, &rb));
    printf("{\"lib\":\"emb\",\"op\":\"create\",\"qtype\":\"%s\",\"rows\":%lld,\"dim\":%lld,"
           "\"bytes\":%lld,\"seconds\":%.3f,\"draw_seconds\":%.3f,\"max_abs\":%.6g,"
           "\"mean_abs\":%.6g,\"mean_cosine\":%.9f,\"peak_rss_mb\":%.1f}\n",
           emb_qtype_name(q), (long long)a->rows, (long long)a->dim, (long long)(a->rows * rb),
           secs, gen_s, e.max_abs, e.mean_abs, e.mean_cosine, peak_rss_mb());
    free(buf);
    emb_generator_free(g);
    return 0;
}

/* ---- run ---------------------------------------------------------------------------- */

typedef struct ctx {
    const char *op;
    emb_qtable *q;             /* --api qtable */
    emb_embedding *e;          /* --api embedding */
    emb_bag *bagh;             /* --api embedding, bag_sum */
    const unsigned char *rows; /* the stored rows (probe) */
    int64_t rb, D, n, B;
    int threads;
    emb_tensor idx, off, out, bag_out;
    unsigned char *probe_buf;
} ctx;

static void run_once(ctx *c) {
    if (!strcmp(c->op, "probe")) {
        const int64_t *ix = c->idx.data;
        const int64_t n = c->n, rb = c->rb;
        const unsigned char *w = c->rows;
        unsigned char *o = c->probe_buf;
#ifdef _OPENMP
#pragma omp parallel for num_threads(c->threads) schedule(static)
#endif
        for (int64_t i = 0; i < n; i++) memcpy(o + i * rb, w + ix[i] * rb, (size_t)rb);
    } else if (!strcmp(c->op, "prefetch_forward")) {
        CHECK(emb_qtable_prefetch(c->q, &c->idx));
        CHECK(emb_qtable_forward(c->q, &c->idx, &c->out));
    } else if (!strcmp(c->op, "forward")) {
        if (c->q)
            CHECK(emb_qtable_forward(c->q, &c->idx, &c->out));
        else
            CHECK(emb_embedding_forward(c->e, &c->idx, &c->out));
    } else {
        emb_bag_options o = emb_bag_options_default();
        o.mode = EMB_BAG_SUM;
        if (c->q)
            CHECK(emb_qtable_bag_forward(c->q, &c->idx, &c->off, NULL, &o, &c->bag_out, NULL));
        else
            CHECK(emb_bag_forward(c->bagh, &c->idx, &c->off, NULL, &c->bag_out, NULL));
    }
}

static int drop_cache(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    int r = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return r == 0;
}

/* Maps the file (emb_qtable_map, or emb_embedding_map_safetensors + a bag over the same
 * rows for --api embedding). */
static void open_table(ctx *c, const char *file, bool use_emb, emb_qtype *qt, int64_t *V) {
    if (use_emb) {
        emb_embedding_options eo = emb_embedding_options_default();
        CHECK(emb_embedding_map_safetensors(file, NULL, &eo, &c->e));
        emb_tensor wv;
        CHECK(emb_embedding_weight_const(c->e, &wv));
        *V = wv.shape[0];
        c->D = wv.shape[1];
        c->rb = c->D * 4;
        c->rows = wv.data;
        emb_bag_options bo = emb_bag_options_default();
        bo.mode = EMB_BAG_SUM;
        emb_storage s = {.read_only = true};
        CHECK(emb_bag_wrap(&wv, &s, true, &bo, &c->bagh));
        *qt = EMB_QTYPE_F32;
    } else {
        CHECK(emb_qtable_map(file, &c->q, NULL));
        *qt = emb_qtable_qtype(c->q);
        *V = emb_qtable_num_rows(c->q);
        c->D = emb_qtable_dim(c->q);
        c->rb = emb_qtable_row_nbytes(c->q);
        c->rows = emb_qtable_data(c->q);
    }
}

static void close_table(ctx *c) {
    emb_bag_free(c->bagh);
    emb_embedding_free(c->e);
    emb_qtable_free(c->q);
    c->bagh = NULL;
    c->e = NULL;
    c->q = NULL;
}

static int run(const args *a) {
    if (!a->file) {
        fprintf(stderr, "%s", USAGE);
        return 2;
    }
    const bool use_emb = a->api && !strcmp(a->api, "embedding");
    emb_set_num_threads(a->threads);
    ctx c = {0};
    c.threads = a->threads;
    emb_qtype qt;
    int64_t V;
    open_table(&c, a->file, use_emb, &qt, &V);
    close_table(&c);
    c.n = a->indices;
    c.B = a->indices / (a->bag > 0 ? a->bag : 1);
    int64_t *ix = malloc(sizeof(int64_t) * (size_t)c.n);
    int64_t *off = malloc(sizeof(int64_t) * (size_t)c.B);
    float *out = malloc(sizeof(float) * (size_t)(c.n * c.D));
    float *bag_out = malloc(sizeof(float) * (size_t)(c.B * c.D));
    c.probe_buf = malloc((size_t)(c.n * c.rb));
    if (!ix || !off || !out || !bag_out || !c.probe_buf) return 1;
    uint64_t s = a->seed * 0x9E3779B97F4A7C15ull + 12345;
    for (int64_t i = 0; i < c.n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        ix[i] = (int64_t)(s % (uint64_t)V);
    }
    for (int64_t b = 0; b < c.B; b++) off[b] = b * (a->bag > 0 ? a->bag : 1);
    /* the buffers are touched once so that page faults on them are not timed */
    memset(out, 0, sizeof(float) * (size_t)(c.n * c.D));
    memset(bag_out, 0, sizeof(float) * (size_t)(c.B * c.D));
    memset(c.probe_buf, 0, (size_t)(c.n * c.rb));
    CHECK(emb_tensor_init(&c.idx, EMB_INT64, ix, 1, (int64_t[]){c.n}));
    CHECK(emb_tensor_init(&c.off, EMB_INT64, off, 1, (int64_t[]){c.B}));
    CHECK(emb_tensor_init(&c.out, EMB_FLOAT32, out, 2, (int64_t[]){c.n, c.D}));
    CHECK(emb_tensor_init(&c.bag_out, EMB_FLOAT32, bag_out, 2, (int64_t[]){c.B, c.D}));
    const char *ops[4] = {"probe", "forward", "bag_sum", "prefetch_forward"};
    const int nops = use_emb ? 3 : 4;
    double *t = malloc(sizeof(double) * (size_t)a->reps);
    double probe_warm = 0, probe_cold = 0;
    for (int k = 0; k < nops; k++) {
        c.op = ops[k];
        /* a fresh mapping each time: pages mapped by this process cannot be dropped */
        int dropped = drop_cache(a->file);
        open_table(&c, a->file, use_emb, &qt, &V);
        double t0 = now();
        run_once(&c);
        double cold = now() - t0;
        for (int r = 0; r < a->reps; r++) {
            double s0 = now();
            run_once(&c);
            t[r] = now() - s0;
        }
        close_table(&c);
        qsort(t, (size_t)a->reps, sizeof(double), cmp_double);
        double warm = a->reps % 2 ? t[a->reps / 2] : 0.5 * (t[a->reps / 2 - 1] + t[a->reps / 2]);
        if (k == 0) {
            probe_warm = warm;
            probe_cold = cold;
        }
        printf("{\"lib\":\"emb\",\"op\":\"%s\",\"api\":\"%s\",\"qtype\":\"%s\",\"rows\":%lld,"
               "\"dim\":%lld,\"row_bytes\":%lld,\"file_gb\":%.2f,\"indices\":%lld,\"bag\":%lld,"
               "\"threads\":%d,\"reps\":%d,\"cold_s\":%.6f,\"cold_dropped\":%s,"
               "\"warm_median_s\":%.6f,\"warm_min_s\":%.6f,\"rows_per_s_warm\":%.4g,"
               "\"rows_per_s_cold\":%.4g,\"probe_fraction_warm\":%.3f,"
               "\"probe_fraction_cold\":%.3f,\"peak_rss_mb\":%.1f}\n",
               c.op, use_emb ? "embedding" : "qtable", emb_qtype_name(qt), (long long)V,
               (long long)c.D, (long long)c.rb, (double)V * (double)c.rb / 1e9, (long long)c.n,
               (long long)a->bag, a->threads, a->reps, cold, dropped ? "true" : "false", warm, t[0],
               (double)c.n / warm, (double)c.n / cold, probe_warm / warm, probe_cold / cold,
               peak_rss_mb());
        fflush(stdout);
    }
    free(t);
    free(ix);
    free(off);
    free(out);
    free(bag_out);
    free(c.probe_buf);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    args a = {.indices = 262144, .bag = 20, .threads = 1, .reps = 7, .seed = 1};
    parse(&a, argc, argv);
    if (a.threads < 1 || a.reps < 1 || a.indices < 1) {
        fprintf(stderr, "bench_large: threads, reps and indices must be >= 1\n");
        return 2;
    }
    if (!strcmp(argv[1], "create")) return create(&a);
    if (!strcmp(argv[1], "run")) return run(&a);
    fprintf(stderr, "bench_large: unknown command %s\n%s", argv[1], USAGE);
    return 2;
}
