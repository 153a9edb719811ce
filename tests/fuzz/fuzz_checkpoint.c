/* libFuzzer harness: word2vec checkpoints (emb_w2v_resume) and the training that continues
 * from them. The input is a checkpoint file; the harness re-seals its checksum (the FNV-1a 64
 * of everything between the magic and the last 8 bytes) so that mutations reach the checks
 * behind it, and resumes it against a fixed tiny corpus with fixed options, except the
 * thread count, which is taken from the checkpoint's own field (1 to 3) so that files of
 * several lanes are reachable, and, in a file of version 3 or later, subwords (minn 2, maxn 3, 61
 * buckets) when its maxn field is not 0 and phrases (one pass, min_count 1, threshold 1)
 * when its phrase passes field is not 0, so that the n-gram bucket rows and the phrase
 * fields are reached. Oracles, besides the sanitizers: a refused checkpoint leaves
 * *out alone with a message; an accepted one has its progress within the run
 * (words done <= corpus tokens x epochs) and finite vectors; training it to the end finishes
 * with exactly corpus tokens x epochs words done and finite vectors (or stops with
 * EMB_ERR_NUMERIC naming a diverged vector); a checkpoint of the finished run resumes. The
 * same file is also read as a model to continue training from (emb_w2v_continue).
 *
 * Seeds (tests/fuzz/corpus/fuzz_checkpoint) are checkpoints this harness's setup writes at
 * several moments of runs at 1, 2 and 3 threads, plain, with subwords and with phrases:
 *     EMB_FUZZ_WRITE_SEEDS=DIR build-fuzz/fuzz/fuzz_checkpoint -runs=0
 */
#include "fuzz_read_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* 14 lines of a tiny two-topic corpus: 130 tokens, 15 words. */
static const char CORPUS[] = "red green blue red green the blue red\n"
                             "cat dog horse cat the dog horse cat dog\n"
                             "green blue yellow red the green yellow\n"
                             "dog horse mouse dog cat the mouse horse\n"
                             "blue yellow red green the blue yellow red green\n"
                             "horse mouse cat dog the horse mouse cat\n"
                             "yellow red green blue the yellow red\n"
                             "mouse cat dog horse the mouse cat dog horse\n"
                             "red red green green the blue blue\n"
                             "cat cat dog dog the horse horse\n"
                             "the the red cat green dog blue horse\n"
                             "purple orange purple orange the purple\n"
                             "sheep goat sheep goat the sheep goat\n"
                             "purple sheep orange goat the\n";

static const char *corpus_path(void) {
    return fz_corpus(CORPUS, sizeof CORPUS - 1);
}

/* The kinds of run a checkpoint asks for (version 3 and later: subword and phrase fields). */
enum { KIND_SUBWORDS = 1, KIND_PHRASES = 2 };

static emb_w2v_options options_of(int threads, int kind);

static emb_w2v_options options(int threads) {
    return options_of(threads, 0);
}

static emb_w2v_options options_of(int threads, int kind) {
    emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    o.dim = 4;
    o.window = 2;
    o.negative = 2;
    o.min_count = 1;
    o.epochs = 4;
    o.sample = 0;
    o.seed = 3;
    o.threads = threads;
    o.max_sentence = 5;         /* several sentences per line: more positions to resume at */
    o.shared_negatives = false; /* negatives per pair, as the seed checkpoints were written */
    if (kind & KIND_SUBWORDS) o.minn = 2, o.maxn = 3, o.bucket = 61;
    if (kind & KIND_PHRASES) o.phrases = 1, o.phrases_min_count = 1, o.phrases_threshold = 1.0;
    return o;
}

/* The kind of run a checkpoint of version 3 or later declares: its maxn field (the 19th option
 * field) and its phrase passes field (the 21st). */
static int kind_of(const uint8_t *d, size_t n) {
    uint64_t version, maxn, passes;
    if (n < 8 + 8 + 21 * 8) return 0;
    memcpy(&version, d + 8, 8);
    memcpy(&maxn, d + 8 + 8 + 18 * 8, 8);
    memcpy(&passes, d + 8 + 8 + 20 * 8, 8);
    if (version < 3) return 0;
    return (maxn ? KIND_SUBWORDS : 0) | (passes ? KIND_PHRASES : 0);
}

/* The thread count a checkpoint declares (the 12th option field), or 0. */
static int threads_of(const uint8_t *d, size_t n) {
    const size_t at = 8 + 8 + 11 * 8; /* magic, version, 11 option fields */
    if (n < at + 8) return 0;
    uint64_t t;
    memcpy(&t, d + at, 8);
    return t >= 1 && t <= 3 ? (int)t : 0;
}

/* The checksum of the bytes between the magic and the checksum (docs/word2vec.md): FNV-1a
 * 64 from FNV's offset basis, or, in a version 1 checkpoint, from the value version 1 used. */
static uint64_t checksum(const uint8_t *p, size_t n) {
    uint64_t version = 0;
    if (n >= 8) memcpy(&version, p, 8);
    uint64_t h = version == 1 ? 1469598103934665603ull : 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void check_finite(const emb_w2v *w, const char *what) {
    emb_tensor t; /* every input row, the n-gram buckets included */
    if (emb_embedding_weight(emb_w2v_input_embedding(w), &t)) FINDING("%s: no vectors", what);
    const float *x = t.data;
    for (int64_t i = 0; i < emb_tensor_numel(&t); i++)
        if (!isfinite(x[i])) FINDING("%s: input value %lld is not finite", what, (long long)i);
    if (emb_embedding_weight(emb_w2v_output_embedding(w), &t))
        FINDING("%s: no output vectors", what);
    x = t.data;
    for (int64_t i = 0; i < emb_tensor_numel(&t); i++)
        if (!isfinite(x[i])) FINDING("%s: output value %lld is not finite", what, (long long)i);
}

static int stop_after;
static int progress_stop(const emb_w2v_progress *p, void *user) {
    (void)p;
    (void)user;
    return --stop_after <= 0;
}

/* Seeds: the checkpoints of runs cancelled after 1, 2, ... rounds, at 1-3 threads, plain
 * ("t2-r1.ckpt"), with subwords ("sub-t1-r1.ckpt") and with phrases ("phr-t1-r1.ckpt"). */
static void write_seeds(const char *dir) {
    static const char *const prefix[] = {"", "sub-", "phr-"};
    int n = 0;
    for (int kind = 0; kind <= KIND_PHRASES; kind++)
        for (int threads = 1; threads <= (kind ? 2 : 3); threads++)
            for (int rounds = 1; rounds <= 6; rounds++) {
                emb_w2v_options o = options_of(threads, kind);
                emb_w2v *w;
                if (emb_w2v_create_from_file(&o, corpus_path(), &w))
                    FINDING("seed run: %s", emb_errmsg());
                stop_after = rounds;
                emb_status st = emb_w2v_train(w, progress_stop, NULL);
                char path[1024];
                snprintf(path, sizeof path, "%s/%st%d-r%d.ckpt", dir, prefix[kind], threads,
                         rounds);
                if (emb_w2v_save_checkpoint(w, path)) FINDING("seed checkpoint: %s", emb_errmsg());
                emb_w2v_free(w);
                n++;
                if (st == EMB_OK) break; /* the run finished: later rounds give the same file */
            }
    fprintf(stderr, "fuzz_checkpoint: wrote %d seed checkpoints to %s\n", n, dir);
    exit(0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *dir = getenv("EMB_FUZZ_WRITE_SEEDS");
    if (dir) write_seeds(dir);
    return 0;
}

/* The same file as a model to continue training from (emb_w2v_continue, which reads it
 * without the corpus it was trained on): refused with a message and *out untouched, or a
 * run over the tiny corpus that trains to its end with finite vectors. */
static void fuzz_continue(const char *model) {
    emb_w2v_options o = options(1);
    emb_w2v *w = (emb_w2v *)0x1;
    emb_clear_error();
    emb_status rc = emb_w2v_continue(&o, model, corpus_path(), &w);
    if (rc) {
        fz_check_error(rc, "emb_w2v_continue");
        if (w != (emb_w2v *)0x1) FINDING("emb_w2v_continue changed *out on failure");
        return;
    }
    check_finite(w, "continued");
    rc = emb_w2v_train(w, NULL, NULL);
    if (rc == EMB_ERR_NUMERIC) {
        emb_w2v_free(w);
        return;
    }
    if (rc) FINDING("training a continued run failed: %s", emb_errmsg());
    if (emb_w2v_words_done(w) != emb_w2v_corpus_tokens(w) * o.epochs)
        FINDING("a continued run stopped early");
    check_finite(w, "continued and trained");
    emb_w2v_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1 << 16)) return 0; /* the seeds are about 2 KB */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) FINDING("out of memory");
    if (size) memcpy(buf, data, size);
    if (size >= 16) {
        uint64_t h = checksum(buf + 8, size - 16);
        memcpy(buf + size - 8, &h, 8);
    }
    const int threads = threads_of(buf, size);
    emb_w2v_options o = options_of(threads ? threads : 1, kind_of(buf, size));
    const char *ck = fz_input_path(buf, size);
    free(buf);
    fuzz_continue(ck);
    emb_w2v *w = (emb_w2v *)0x1;
    emb_clear_error();
    emb_status rc = emb_w2v_resume(&o, corpus_path(), ck, &w);
    if (rc) {
        fz_check_error(rc, "emb_w2v_resume");
        if (w != (emb_w2v *)0x1) FINDING("emb_w2v_resume changed *out on failure");
        return 0;
    }
    const int64_t total = emb_w2v_corpus_tokens(w) * o.epochs;
    const int64_t done0 = emb_w2v_words_done(w);
    if (done0 < 0 || done0 > total)
        FINDING("resumed with %lld words done of %lld", (long long)done0, (long long)total);
    check_finite(w, "resumed");
    emb_clear_error();
    rc = emb_w2v_train(w, NULL, NULL);
    if (rc == EMB_ERR_NUMERIC) {
        if (!strstr(emb_errmsg(), "training diverged"))
            FINDING("divergence without its message: %s", emb_errmsg());
        emb_w2v_free(w);
        return 0;
    }
    if (rc) FINDING("training a resumed run failed: %s", emb_errmsg());
    if (emb_w2v_words_done(w) != total)
        FINDING("finished with %lld words done of %lld", (long long)emb_w2v_words_done(w),
                (long long)total);
    check_finite(w, "trained");
    const char *out = fz_scratch("again.ckpt");
    if (emb_w2v_save_checkpoint(w, out))
        FINDING("cannot checkpoint the finished run: %s", emb_errmsg());
    emb_w2v *r = NULL;
    if (emb_w2v_resume(&o, corpus_path(), out, &r))
        FINDING("cannot resume what emb saved: %s", emb_errmsg());
    if (emb_w2v_words_done(r) != total) FINDING("the saved run resumes elsewhere");
    emb_w2v_free(r);
    emb_w2v_free(w);
    return 0;
}
