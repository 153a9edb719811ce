/* bench_w2v_read: the time word2vec takes to read a corpus before training (the pass over the
 * text, the vocabulary's sort and the renumbering of the token ids, the tables' setup).
 *   bench_w2v_read CORPUS [THREADS] [REPS]
 * creates a skip-gram run (min_count 5, dim 100, the defaults otherwise) from CORPUS with
 * THREADS threads (default 1) REPS times (default 3) and prints one line per repetition:
 *   "threads=T wall_s=W cpu_s=C words=V tokens=N"
 * wall_s is the wall time of emb_w2v_create_from_file, cpu_s the process's user + system CPU
 * time over the same call (all threads): on a busy machine the CPU time is the steadier. */
#include <emb/emb.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: bench_w2v_read CORPUS [THREADS] [REPS]\n");
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 1, reps = argc > 3 ? atoi(argv[3]) : 3;
    emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    o.min_count = 5;
    o.dim = 100;
    o.threads = threads;
    for (int r = 0; r < reps; r++) {
        emb_w2v *w = NULL;
        double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        if (emb_w2v_create_from_file(&o, argv[1], &w) != EMB_OK) {
            fprintf(stderr, "bench_w2v_read: %s\n", emb_errmsg());
            return 1;
        }
        double w1 = clock_s(CLOCK_MONOTONIC), c1 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        printf("threads=%d wall_s=%.4f cpu_s=%.4f words=%lld tokens=%lld\n", threads, w1 - w0,
               c1 - c0, (long long)emb_vocab_num_words(emb_w2v_vocab(w)),
               (long long)emb_w2v_corpus_tokens(w));
        emb_w2v_free(w);
    }
    return 0;
}
