/* bench_io: file-format speed, driven by bench/io.py.
 *   bench_io gen PATH ROWS DIM      writes a random table as word2vec text (6 significant
 *                                   digits, like GloVe/fastText files) to PATH
 *   bench_io load PATH [REPS]       best wall time of emb_vectors_read(PATH) over REPS runs
 *   bench_io raw PATH [REPS]        best time of read()ing PATH into new memory of its size
 * Prints one line: "seconds=S bytes=B rows=R dim=D". */
#define _GNU_SOURCE
#include <emb/emb.h>

#include "internal.h" /* emb__malloc: the allocation a loaded table gets */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long long file_size(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 ? (long long)sb.st_size : -1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_io gen PATH ROWS DIM | load PATH [REPS] | raw PATH [REPS]\n");
        return 2;
    }
    const char *mode = argv[1], *path = argv[2];
    if (!strcmp(mode, "gen") && argc == 5) {
        int64_t rows = atoll(argv[3]), dim = atoll(argv[4]);
        emb_tensor w;
        int64_t shape[2] = {rows, dim};
        emb_vocab *v;
        if (emb_tensor_alloc(&w, EMB_FLOAT32, 2, shape) || emb_vocab_create(&v))
            return fprintf(stderr, "%s\n", emb_errmsg()), 1;
        emb_manual_seed(0);
        float *d = w.data;
        uint64_t s = 0x9E3779B97F4A7C15ull;
        for (int64_t i = 0; i < rows * dim; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            d[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) * 1.6f;
        }
        char word[32];
        for (int64_t i = 0; i < rows; i++) {
            int n = snprintf(word, sizeof word, "w%lld", (long long)i);
            if (emb_vocab_add(v, word, (size_t)n, 0, NULL, NULL))
                return fprintf(stderr, "%s\n", emb_errmsg()), 1;
        }
        emb_vectors_write_options o = emb_vectors_write_options_default();
        o.format = EMB_FORMAT_W2V_TEXT;
        o.precision = 6;
        double t0 = now();
        if (emb_vectors_write(path, &w, v, &o)) return fprintf(stderr, "%s\n", emb_errmsg()), 1;
        printf("seconds=%.3f bytes=%lld rows=%lld dim=%lld\n", now() - t0, file_size(path),
               (long long)rows, (long long)dim);
        emb_tensor_release(&w);
        emb_vocab_free(v);
        return 0;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    double best = 1e30;
    int64_t rows = 0, dim = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        if (!strcmp(mode, "load")) {
            emb_vectors v;
            if (emb_vectors_read(path, NULL, &v)) return fprintf(stderr, "%s\n", emb_errmsg()), 1;
            rows = v.weight.shape[0], dim = v.weight.shape[1];
            emb_vectors_release(&v);
        } else if (!strcmp(mode, "raw")) {
            /* the bytes into new memory of the file's size, as a loaded table needs */
            int fd = open(path, O_RDONLY);
            if (fd < 0) return perror(path), 1;
            size_t cap = (size_t)file_size(path) + 1, got = 0;
            char *buf = emb__malloc(cap);
            ssize_t n;
            while ((n = read(fd, buf + got, cap - got)) > 0) got += (size_t)n;
            emb__free(buf);
            close(fd);
        } else {
            fprintf(stderr, "unknown mode %s\n", mode);
            return 2;
        }
        double t = now() - t0;
        if (t < best) best = t;
    }
    printf("seconds=%.3f bytes=%lld rows=%lld dim=%lld\n", best, file_size(path), (long long)rows,
           (long long)dim);
    return 0;
}
