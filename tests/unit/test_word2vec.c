/* Unit tests of the word2vec trainer (include/emb/word2vec.h): option and corpus errors
 * (status, message, nothing created), reproducibility, checkpoints and cancellation, and
 * the kernel's variants against the reference. */
#include "emb_test.h"
#include "emb_test_files.h"

#include "kernels/dispatch.h"
#include "w2v/w2v_internal.h"

#include <inttypes.h>
#include <unistd.h>

/* A small synthetic corpus with structure: words of two "topics" co-occur. */
static const char *synthetic_corpus(void) {
    static char path[512];
    snprintf(path, sizeof path, "%s", tmp("corpus.txt"));
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t s = 12345;
    const char *a[] = {"red", "green", "blue", "yellow", "purple", "orange"};
    const char *b[] = {"cat", "dog", "horse", "mouse", "sheep", "goat"};
    for (int line = 0; line < 400; line++) {
        const char **t = (line % 2) ? a : b;
        for (int i = 0; i < 20; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            fprintf(f, "%s%s", i ? " " : "", t[(s >> 33) % 6]);
            if (((s >> 20) & 7) == 0) fprintf(f, " the");
        }
        fprintf(f, "\n");
    }
    fclose(f);
    return path;
}

static emb_w2v_options small_opts(emb_w2v_model m) {
    emb_w2v_options o = emb_w2v_options_default(m);
    o.dim = 16;
    o.min_count = 1;
    o.threads = 1;
    o.epochs = 3;
    o.seed = 7;
    return o;
}

static void test_options(void **state) {
    (void)state;
    emb_w2v_options d = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    assert_int_equal(d.dim, 100);
    assert_int_equal(d.window, 5);
    assert_int_equal(d.negative, 5);
    assert_true(d.sample == 1e-3 && d.alpha == 0.025 && d.min_count == 5 && d.epochs == 5);
    assert_true(emb_w2v_options_default(EMB_W2V_CBOW).alpha == 0.05);
    /* skip-gram shares a window's negatives by default; CBOW draws once a window anyway */
    assert_true(d.shared_negatives);
    assert_false(emb_w2v_options_default(EMB_W2V_CBOW).shared_negatives);
    EMB_OK_OR_FAIL(emb_w2v_options_check(&d));
    emb_w2v_options o;
#define BAD(stmt, needle)                                                                          \
    do {                                                                                           \
        o = d;                                                                                     \
        stmt;                                                                                      \
        EMB_EXPECT_ERR(emb_w2v_options_check(&o), EMB_ERR_INVALID, needle);                        \
    } while (0)
    BAD(o.model = 7, "model must be");
    BAD(o.dim = 0, "dim must be in [1, 1048576], got 0");
    BAD(o.window = 0, "window must be");
    BAD(o.negative = 0, "negative must be in [1, 1000], got 0");
    BAD(o.sample = -1, "sample must be");
    BAD(o.sample = NAN, "sample must be");
    BAD(o.min_count = 0, "min_count must be at least 1");
    BAD(o.max_vocab = -1, "max_vocab");
    BAD(o.epochs = 0, "epochs must be at least 1");
    BAD(o.alpha = 0, "alpha must be");
    BAD(o.alpha = INFINITY, "alpha must be");
    BAD(o.min_alpha = 1, "min_alpha must be in [0, alpha");
    BAD(o.threads = -1, "threads must be");
    BAD(o.max_sentence = 0, "max_sentence");
    /* a learning rate that can only diverge; sentence buffers whose size would wrap */
    BAD(o.alpha = 1.5, "alpha must be in (0, 1], got 1.5");
    BAD(o.alpha = 1e300, "alpha must be in (0, 1]");
    BAD(o.max_sentence = (int64_t)INT32_MAX + 1, "max_sentence must be in [1, 2147483647]");
    BAD(o.max_sentence = (int64_t)1 << 62, "max_sentence must be in [1, 2147483647]");
    o = d;
    o.alpha = 1;
    EMB_OK_OR_FAIL(emb_w2v_options_check(&o));
    EMB_EXPECT_ERR(emb_w2v_options_check(NULL), EMB_ERR_NULL, "options");
}

static void test_corpus_errors(void **state) {
    (void)state;
    emb_w2v_options o = small_opts(EMB_W2V_SKIPGRAM);
    emb_w2v *w = (emb_w2v *)0x1;
    EMB_EXPECT_ERR(emb_w2v_create_from_file(&o, tmp("missing.txt"), &w), EMB_ERR_IO, "cannot open");
    put(tmp("empty.txt"), " \n\n \t\n", 6);
    EMB_EXPECT_ERR(emb_w2v_create_from_file(&o, tmp("empty.txt"), &w), EMB_ERR_FORMAT,
                   "the corpus is empty");
    put(tmp("bad.txt"), "good words\nhere \xff\xfe bad\n", 24);
    EMB_EXPECT_ERR(emb_w2v_create_from_file(&o, tmp("bad.txt"), &w), EMB_ERR_FORMAT,
                   "bad.txt:2: invalid UTF-8");
    put(tmp("rare.txt"), "a b c d a\n", 10);
    o.min_count = 3;
    EMB_EXPECT_ERR(emb_w2v_create_from_file(&o, tmp("rare.txt"), &w), EMB_ERR_FORMAT,
                   "no word occurs at least 3 times (min_count); 4 distinct words in 5 tokens");
    o.min_count = 0;
    EMB_EXPECT_ERR(emb_w2v_create_from_file(&o, tmp("rare.txt"), &w), EMB_ERR_INVALID, "min_count");
    assert_ptr_equal(w, (emb_w2v *)0x1);
    EMB_EXPECT_ERR(emb_w2v_create_from_file(&o, NULL, &w), EMB_ERR_NULL, "path");
    EMB_EXPECT_ERR(emb_w2v_create_from_file(&o, "x", NULL), EMB_ERR_NULL, "out");
    emb_w2v_free(NULL);
}

static void test_vocab_and_tokens(void **state) {
    (void)state;
    emb_w2v_options o = small_opts(EMB_W2V_SKIPGRAM);
    o.min_count = 2;
    o.lowercase = true;
    o.strip_punct = true;
    put(tmp("v.txt"), "The cat, the DOG.\n\"dog\" (cat) the a\nz\n", 38);
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, tmp("v.txt"), &w));
    const emb_vocab *v = emb_w2v_vocab(w);
    /* counts: the 3, cat 2, dog 2 (ties in order of first appearance); a, z dropped */
    assert_int_equal(emb_vocab_num_words(v), 3);
    assert_string_equal(emb_vocab_word(v, 0, NULL), "the");
    assert_string_equal(emb_vocab_word(v, 1, NULL), "cat");
    assert_string_equal(emb_vocab_word(v, 2, NULL), "dog");
    assert_int_equal(emb_vocab_count(v, 0), 3);
    assert_int_equal(emb_w2v_corpus_tokens(w), 7);
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_w2v_vectors(w, &t));
    assert_int_equal(t.shape[0], 3);
    assert_int_equal(t.shape[1], 16);
    const float *x = t.data;
    for (int i = 0; i < 48; i++) assert_true(x[i] >= -0.5f / 16 && x[i] < 0.5f / 16);
    emb_w2v_free(w);
}

static void train_file(const char *corpus, emb_w2v_options o, float **out, int64_t *n) {
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
    EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_w2v_vectors(w, &t));
    *n = emb_tensor_numel(&t);
    *out = malloc((size_t)*n * sizeof(float));
    memcpy(*out, t.data, (size_t)*n * sizeof(float));
    emb_w2v_free(w);
}

/* Mean cosine similarity of same-topic pairs minus that of cross-topic pairs. */
static double topic_margin(const char *corpus, emb_w2v_options o) {
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
    EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_w2v_vectors(w, &t));
    const emb_vocab *v = emb_w2v_vocab(w);
    const char *a[] = {"red", "green", "blue", "yellow", "purple", "orange"};
    const char *b[] = {"cat", "dog", "horse", "mouse", "sheep", "goat"};
    int64_t ids[12];
    for (int i = 0; i < 6; i++) {
        ids[i] = emb_vocab_find(v, a[i], strlen(a[i]));
        ids[6 + i] = emb_vocab_find(v, b[i], strlen(b[i]));
        assert_true(ids[i] >= 0 && ids[6 + i] >= 0);
    }
    const float *x = t.data;
    int64_t d = t.shape[1];
    double same = 0, cross = 0;
    int ns = 0, nc = 0;
    for (int i = 0; i < 12; i++)
        for (int j = i + 1; j < 12; j++) {
            double dot = 0, ni = 0, nj = 0;
            for (int64_t k = 0; k < d; k++) {
                dot += x[ids[i] * d + k] * x[ids[j] * d + k];
                ni += x[ids[i] * d + k] * x[ids[i] * d + k];
                nj += x[ids[j] * d + k] * x[ids[j] * d + k];
            }
            double c = dot / sqrt(ni * nj);
            if ((i < 6) == (j < 6))
                same += c, ns++;
            else
                cross += c, nc++;
        }
    emb_w2v_free(w);
    return same / ns - cross / nc;
}

static void test_learns_topics(void **state) {
    (void)state;
    const char *corpus = synthetic_corpus();
    for (int m = 0; m < 2; m++) {
        emb_w2v_options o = small_opts(m ? EMB_W2V_CBOW : EMB_W2V_SKIPGRAM);
        o.epochs = 5;
        o.window = 3;
        o.sample = 0;
        double margin = topic_margin(corpus, o);
        /* words of one topic end up closer to each other than to the other topic's */
        if (!(margin > 0.3))
            fail_msg("model %d: same-topic minus cross-topic cosine %.3f", m, margin);
        /* With 2 threads each lane trains its own copy of the output table, merged every
         * round, and the input rows are updated in place without locks, so the result still
         * depends on thread timing. When both tables were updated in place the rows of this
         * 13-word vocabulary collided all the time: over 85 runs the skip-gram margin ranged
         * from 0.10 to 0.98. With the copies, 40 runs gave 0.94-1.00 (skip-gram) and
         * 0.82-0.93 (CBOW); one thread gives 0.94, so 2 threads must learn as well. */
        o.threads = 2;
        margin = topic_margin(corpus, o);
        if (getenv("EMB_TEST_PRINT_MARGIN")) print_message("margin2 %d %.3f\n", m, margin);
        if (!(margin > 0.3)) fail_msg("model %d, 2 threads: margin %.3f", m, margin);
    }
}

/* 2 threads with only the 6 most frequent rows of each table copied per thread, of which the
 * 4 most frequent output rows and 3 most frequent input rows are merged after every round
 * (the rest of the 13 words' rows updated in place, as the rows past the first 8,192 of a
 * large vocabulary are): every word's output row is trained (the output table starts at
 * zero), every input row moves, all stay finite, and the topics are learnt as with the
 * copies. */
static void test_hot_rows(void **state) {
    (void)state;
    const char *corpus = synthetic_corpus();
    const int64_t keep = emb__w2v_hot_rows, keep_in = emb__w2v_hot_in_rows;
    const int64_t keep_copy = emb__w2v_copy_rows;
    emb__w2v_hot_rows = 4, emb__w2v_hot_in_rows = 3, emb__w2v_copy_rows = 6;
    for (int m = 0; m < 2; m++) {
        emb_w2v_options o = small_opts(m ? EMB_W2V_CBOW : EMB_W2V_SKIPGRAM);
        o.epochs = 5, o.window = 3, o.sample = 0, o.threads = 2;
        emb_w2v *w;
        EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
        EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
        const int64_t V = emb_vocab_num_words(emb_w2v_vocab(w)), dim = o.dim;
        assert_true(V > 4);
        for (int64_t r = 0; r < V; r++) {
            double sq = 0;
            for (int64_t k = 0; k < dim; k++)
                sq += (double)w->syn1[r * dim + k] * w->syn1[r * dim + k];
            if (!(sq > 0 && isfinite(sq)))
                fail_msg("model %d: output row %lld: %g", m, (long long)r, sq);
        }
        /* every input row moved from its initial value (the copied ones through the merge) */
        emb_w2v *w0; /* created, not trained: the initial rows */
        EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w0));
        for (int64_t r = 0; r < V; r++) {
            int moved = 0;
            for (int64_t k = 0; k < dim; k++) {
                const float x = w->syn0[r * dim + k];
                if (!isfinite(x)) fail_msg("model %d: input row %lld not finite", m, (long long)r);
                moved += x != w0->syn0[r * dim + k];
            }
            if (!moved) fail_msg("model %d: input row %lld never trained", m, (long long)r);
        }
        emb_w2v_free(w0);
        emb_w2v_free(w);
        double margin = topic_margin(corpus, o);
        if (getenv("EMB_TEST_PRINT_MARGIN")) print_message("margin hot %d %.3f\n", m, margin);
        if (!(margin > 0.3)) fail_msg("model %d, 2 threads, 4 rows copied: margin %.3f", m, margin);
    }
    emb__w2v_hot_rows = keep, emb__w2v_hot_in_rows = keep_in, emb__w2v_copy_rows = keep_copy;
}

static void test_reproducible(void **state) {
    (void)state;
    const char *corpus = synthetic_corpus();
    for (int m = 0; m < 2; m++) {
        emb_w2v_options o = small_opts(m ? EMB_W2V_CBOW : EMB_W2V_SKIPGRAM);
        float *a, *b;
        int64_t na, nb;
        train_file(corpus, o, &a, &na);
        train_file(corpus, o, &b, &nb);
        assert_int_equal(na, nb);
        emb_assert_close_f32(a, b, na, 1, 0, 0, "two 1-thread runs");
        /* a different seed gives different vectors */
        o.seed = 8;
        free(b);
        train_file(corpus, o, &b, &nb);
        assert_true(memcmp(a, b, (size_t)na * sizeof(float)) != 0);
        free(a), free(b);
    }
}

typedef struct {
    int calls, stop_at;
} cancel_ctx;

static int cancel_cb(const emb_w2v_progress *p, void *user) {
    cancel_ctx *c = user;
    assert_true(p->words_done <= p->words_total);
    return ++c->calls == c->stop_at;
}

static void test_checkpoint_resume(void **state) {
    (void)state;
    const char *corpus = synthetic_corpus();
    for (int threads = 1; threads <= 2; threads++) {
        emb_w2v_options o = small_opts(EMB_W2V_SKIPGRAM);
        o.threads = threads;
        o.epochs = 20; /* 20 x 8400 tokens: several rounds */
        float *want = NULL;
        int64_t n = 0;
        if (threads == 1) train_file(corpus, o, &want, &n);
        /* cancel after 2 rounds, checkpoint, resume in a new run, finish */
        emb_w2v *w;
        EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
        cancel_ctx c = {0, 2};
        EMB_EXPECT_ERR(emb_w2v_train(w, cancel_cb, &c), EMB_ERR_CANCELLED, "cancelled");
        int64_t done = emb_w2v_words_done(w);
        assert_true(done > 0 && done < emb_w2v_corpus_tokens(w) * o.epochs);
        const char *ck = tmp("ck.bin");
        EMB_OK_OR_FAIL(emb_w2v_save_checkpoint(w, ck));
        emb_w2v_free(w);
        EMB_OK_OR_FAIL(emb_w2v_resume(&o, corpus, ck, &w));
        assert_int_equal(emb_w2v_words_done(w), done);
        EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
        assert_int_equal(emb_w2v_words_done(w), emb_w2v_corpus_tokens(w) * o.epochs);
        if (threads == 1) {
            emb_tensor t;
            EMB_OK_OR_FAIL(emb_w2v_vectors(w, &t));
            emb_assert_close_f32(t.data, want, n, 1, 0, 0, "resumed vs uninterrupted");
        }
        emb_w2v_free(w);
        free(want);
        /* different settings, another corpus, a corrupt file */
        emb_w2v_options o2 = o;
        o2.window = 4;
        EMB_EXPECT_ERR(emb_w2v_resume(&o2, corpus, ck, &w), EMB_ERR_FORMAT,
                       "was written with window 5, but this run has window 4");
        put(tmp("other.txt"), "red green blue\n", 15);
        EMB_EXPECT_ERR(emb_w2v_resume(&o, tmp("other.txt"), ck, &w), EMB_ERR_FORMAT,
                       "another corpus");
        FILE *f = fopen(ck, "r+b");
        assert_non_null(f);
        fseek(f, 200, SEEK_SET);
        fputc(0x5a, f);
        fclose(f);
        EMB_EXPECT_ERR(emb_w2v_resume(&o, corpus, ck, &w), EMB_ERR_FORMAT, "corrupt");
        put(ck, "EMBW2VCK", 8);
        EMB_EXPECT_ERR(emb_w2v_resume(&o, corpus, ck, &w), EMB_ERR_FORMAT, "");
        put(ck, "hello world", 11);
        EMB_EXPECT_ERR(emb_w2v_resume(&o, corpus, ck, &w), EMB_ERR_FORMAT,
                       "not an emb word2vec checkpoint");
        EMB_EXPECT_ERR(emb_w2v_resume(&o, corpus, tmp("nope"), &w), EMB_ERR_IO, "cannot open");
    }
}

/* A checkpoint's lanes are kept when they cut the ids where one thread starts a sentence,
 * even where this build would cut them (an earlier build cut at an even share of the ids);
 * a cut inside a sentence is refused. */
static void test_checkpoint_lanes(void **state) {
    (void)state;
    const char *corpus = synthetic_corpus(), *ck = tmp("ck-lanes.bin");
    emb_w2v_options o = small_opts(EMB_W2V_SKIPGRAM);
    o.threads = o.lanes = 2;
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
    const int64_t n = w->n_ids, cut = w->lanes[1].lo;
    assert_true(cut > 0 && cut < n);
    /* everything to the first lane: a valid cut that is not this build's */
    w->lanes[0].hi = w->lanes[1].lo = w->lanes[1].pos = n;
    EMB_OK_OR_FAIL(emb_w2v_save_checkpoint(w, ck));
    emb_w2v_free(w);
    EMB_OK_OR_FAIL(emb_w2v_resume(&o, corpus, ck, &w));
    assert_int_equal(w->lanes[0].hi, n);
    assert_int_equal(w->lanes[1].lo, n);
    EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
    assert_int_equal(emb_w2v_words_done(w), emb_w2v_corpus_tokens(w) * o.epochs);
    emb_w2v_free(w);
    /* one token past a sentence start: inside a sentence */
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
    w->lanes[0].hi = w->lanes[1].lo = w->lanes[1].pos = cut + 1;
    EMB_OK_OR_FAIL(emb_w2v_save_checkpoint(w, ck));
    emb_w2v_free(w);
    EMB_EXPECT_ERR(emb_w2v_resume(&o, corpus, ck, &w), EMB_ERR_FORMAT,
                   "a lane's range of tokens is out of range");
}

/* FNV-1a 64 (docs/file-formats.md: offset basis 0xcbf29ce484222325, prime 0x100000001b3),
 * stored little-endian: a checkpoint's checksum, recomputed for a file edited by hand. */
static void put_fnv64(unsigned char *at, const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    for (int k = 0; k < 8; k++) at[k] = (unsigned char)(h >> (8 * k));
}

/* A checkpoint of version 1 (tests/data/legacy/w2v-v1.ckpt, written by emb before version
 * 2 over w2v-corpus.txt: skip-gram, dim 8, 1 thread, 10 epochs, seed 7, cancelled after 2
 * rounds) still resumes; the run then finishes exactly like an uninterrupted one, and saving
 * it again writes version 4: the same bytes but for the version, the 64 bytes of subword and
 * phrase fields after the 17 options (all 0 without subwords and phrases), the list of corpus
 * files after them (one: the corpus's path), and the checksum. A version 3 file (version 4
 * without the list) and a version 2 file (version 3 without the 64 bytes) resume too. */
static void test_checkpoint_version1_resumes(void **state) {
    (void)state;
    const char *corpus = emb_test_data("legacy/w2v-corpus.txt"),
               *ck = emb_test_data("legacy/w2v-v1.ckpt");
    emb_w2v_options o = small_opts(EMB_W2V_SKIPGRAM); /* min_count 1, 1 thread, seed 7 */
    o.dim = 8;
    o.epochs = 10;
    o.shared_negatives = false; /* the default when the file was written */
    size_t n1, n2;
    unsigned char *v1 = emb_test_read(ck, &n1);
    uint64_t version;
    memcpy(&version, v1 + 8, 8);
    assert_true(version == 1);
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_resume(&o, corpus, ck, &w));
    const int64_t done = emb_w2v_words_done(w);
    assert_true(done > 0 && done < emb_w2v_corpus_tokens(w) * o.epochs);
    const char *again = tmp("again.ckpt");
    EMB_OK_OR_FAIL(emb_w2v_save_checkpoint(w, again));
    unsigned char *v2 = emb_test_read(again, &n2);
    const size_t opts_end = 16 + 17 * 8;             /* magic, version, the 17 options */
    const size_t list = 8 + 8 + strlen(corpus) + 16; /* one file: name, bytes, fingerprint */
    assert_int_equal(n1 + 64 + list, n2);
    assert_memory_equal(v1, v2, 8); /* magic */
    assert_int_equal(v2[8], 4);     /* version 4, little-endian */
    assert_memory_equal(v1 + 9, v2 + 9, 7);
    assert_memory_equal(v1 + 16, v2 + 16, opts_end - 16);
    for (size_t k = 0; k < 64; k++) assert_int_equal(v2[opts_end + k], 0); /* none */
    const unsigned char *files = v2 + opts_end + 64;
    assert_int_equal(files[0], 1); /* one file, its name's length, its name */
    assert_int_equal(files[8], strlen(corpus));
    assert_memory_equal(files + 16, corpus, strlen(corpus));
    assert_memory_equal(v1 + opts_end, v2 + opts_end + 64 + list, n1 - 8 - opts_end); /* rest */
    /* version 3: version 4's bytes without the list, with its own checksum */
    unsigned char *v3file = malloc(n2 - list);
    assert_non_null(v3file);
    memcpy(v3file, v2, opts_end + 64);
    memcpy(v3file + opts_end + 64, v2 + opts_end + 64 + list, n2 - opts_end - 64 - list);
    v3file[8] = 3;
    put_fnv64(v3file + n2 - list - 8, v3file + 8, n2 - list - 16);
    put(tmp("v3.ckpt"), (const char *)v3file, n2 - list);
    free(v3file);
    /* version 2: version 3's bytes without the subword fields, with its own checksum */
    unsigned char *v2file = malloc(n1);
    assert_non_null(v2file);
    memcpy(v2file, v1, n1);
    v2file[8] = 2;
    put_fnv64(v2file + n1 - 8, v2file + 8, n1 - 16);
    put(tmp("v2.ckpt"), (const char *)v2file, n1);
    free(v2file);
    EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_w2v_vectors(w, &t));
    float *want;
    int64_t n;
    train_file(corpus, o, &want, &n);
    assert_int_equal(n, emb_tensor_numel(&t));
    emb_assert_close_f32(t.data, want, n, 1, 0, 0, "resumed from version 1 vs uninterrupted");
    emb_w2v_free(w);
    /* and the version 4, 3 and 2 files resume too */
    EMB_OK_OR_FAIL(emb_w2v_resume(&o, corpus, again, &w));
    assert_int_equal(emb_w2v_words_done(w), done);
    emb_w2v_free(w);
    EMB_OK_OR_FAIL(emb_w2v_resume(&o, corpus, tmp("v3.ckpt"), &w));
    assert_int_equal(emb_w2v_words_done(w), done);
    emb_w2v_free(w);
    EMB_OK_OR_FAIL(emb_w2v_resume(&o, corpus, tmp("v2.ckpt"), &w));
    assert_int_equal(emb_w2v_words_done(w), done);
    emb_w2v_free(w);
    /* a version from the future is refused by name */
    v2[8] = 5;
    put(again, (const char *)v2, n2);
    EMB_EXPECT_ERR(emb_w2v_resume(&o, corpus, again, &w), EMB_ERR_FORMAT,
                   "checkpoint version 5 (this emb reads 1 to 4)");
    free(want);
    free(v1);
    free(v2);
}

static void test_create_from_ids(void **state) {
    (void)state;
    emb_vocab *v;
    EMB_OK_OR_FAIL(emb_vocab_create(&v));
    EMB_OK_OR_FAIL(emb_vocab_add(v, "a", 1, 3, NULL, NULL));
    EMB_OK_OR_FAIL(emb_vocab_add(v, "b", 1, 2, NULL, NULL));
    int32_t ids[6] = {0, 1, 0, -1, 0, 1};
    emb_w2v_options o = small_opts(EMB_W2V_CBOW);
    emb_w2v *w = (emb_w2v *)0x1;
    int32_t bad[2] = {0, 2};
    EMB_EXPECT_ERR(emb_w2v_create_from_ids(&o, v, bad, 2, &w), EMB_ERR_INDEX,
                   "token id 2 at position 1 is out of range for a vocabulary of 2 words");
    int32_t ends[2] = {-1, -1};
    EMB_EXPECT_ERR(emb_w2v_create_from_ids(&o, v, ends, 2, &w), EMB_ERR_INVALID, "empty");
    assert_ptr_equal(w, (emb_w2v *)0x1);
    EMB_OK_OR_FAIL(emb_w2v_create_from_ids(&o, v, ids, 6, &w));
    assert_int_equal(emb_w2v_corpus_tokens(w), 5);
    EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
    assert_non_null(emb_w2v_input_embedding(w));
    assert_int_equal(emb_embedding_num_embeddings(emb_w2v_output_embedding(w)), 2);
    emb_w2v_free(w);
    emb_vocab_free(v);
}

/* Threads share the corpus at the places where one thread starts a sentence: after a line
 * end, and every max_sentence tokens inside a long line. A corpus that is one line (text8,
 * or any text without newlines) must be shared too, not given whole to the first thread.
 * Each lane gets an equal share of the expected work, the summed keep probabilities of its
 * tokens (subsampling): a boundary is the first sentence start at or past t/threads of the
 * corpus's sum. starts(p) says whether one thread reading from 0 begins a sentence at p;
 * word i of the 5 words has counts[i]. */
static void check_lanes(const int32_t *ids, int64_t n, int threads, bool (*starts)(int64_t),
                        const int64_t *counts) {
    emb_vocab *v;
    EMB_OK_OR_FAIL(emb_vocab_create(&v));
    for (int i = 0; i < 5; i++)
        EMB_OK_OR_FAIL(emb_vocab_add(v, (const char[]){(char)('a' + i)}, 1, counts[i], NULL, NULL));
    emb_w2v_options o = small_opts(EMB_W2V_SKIPGRAM);
    o.threads = o.lanes = threads;
    o.epochs = 2;
    o.dim = 8;
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_create_from_ids(&o, v, ids, n, &w));
    /* before[p]: the summed keep probabilities of the tokens before position p */
    double *before = malloc((size_t)(n + 1) * sizeof(double));
    assert_non_null(before);
    before[0] = 0;
    for (int64_t p = 0; p < n; p++) {
        double k = ids[p] < 0 ? 0 : w->keep_all[ids[p]] ? 1.0 : w->keep[ids[p]] / 4294967296.0;
        before[p + 1] = before[p] + k;
    }
    int64_t next = 0;
    for (int t = 0; t < threads; t++) {
        const emb__w2v_lane *l = &w->lanes[t];
        if (l->lo != next)
            fail_msg("%d threads: lane %d starts at %" PRId64 ", not %" PRId64, threads, t, l->lo,
                     next);
        if (!(l->hi > l->lo))
            fail_msg("%d threads: lane %d is empty [%" PRId64 ", %" PRId64 ")", threads, t, l->lo,
                     l->hi);
        if (!starts(l->lo))
            fail_msg("%d threads: lane %d starts inside a sentence (%" PRId64 ")", threads, t,
                     l->lo);
        const double even = before[n] * t / threads;
        if (t > 0 && before[l->lo] < even)
            fail_msg("%d threads: lane %d starts before its share (%g < %g)", threads, t,
                     before[l->lo], even);
        /* no earlier sentence start reaches the share */
        for (int64_t p = 0; t > 0 && p < l->lo; p++)
            if (starts(p) && before[p] >= even)
                fail_msg("%d threads: lane %d could start at %" PRId64, threads, t, p);
        next = l->hi;
    }
    assert_int_equal(next, n);
    free(before);
    EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
    for (int t = 0; t < threads; t++) assert_int_equal(w->lanes[t].epoch, o.epochs);
    assert_int_equal(emb_w2v_words_done(w), emb_w2v_corpus_tokens(w) * o.epochs);
    emb_w2v_free(w);
    emb_vocab_free(v);
}

static bool starts_one_line(int64_t p) {
    return p % 1000 == 0;
}
/* lines of 2500 tokens, then a line end: 2501 ids a line */
static bool starts_long_lines(int64_t p) {
    int64_t q = p % 2501;
    return q == 0 || q == 1000 || q == 2000;
}

static void test_split_long_lines(void **state) {
    (void)state;
    int64_t n = 12007;
    int32_t *ids = malloc((size_t)n * sizeof(int32_t));
    assert_non_null(ids);
    uint64_t s = 99;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((s >> 33) % 5);
    }
    const int64_t counts[5] = {100, 100, 100, 100, 100};
    for (int t = 2; t <= 4; t++) check_lanes(ids, n, t, starts_one_line, counts);
    for (int64_t i = 2500; i < n; i += 2501) ids[i] = -1;
    for (int t = 2; t <= 4; t++) check_lanes(ids, n, t, starts_long_lines, counts);
    free(ids);
}

/* A corpus whose first half is one very frequent word (subsampling keeps a few percent of
 * it) and whose second half is rare words (all kept): an even cut of the tokens gives the
 * second lane nearly all the work; the lanes must get equal shares of the expected work,
 * which puts the boundary three quarters into the corpus at 2 threads. */
static void test_split_balanced(void **state) {
    (void)state;
    int64_t n = 12000;
    int32_t *ids = malloc((size_t)n * sizeof(int32_t));
    assert_non_null(ids);
    for (int64_t i = 0; i < n; i++) ids[i] = i < n / 2 ? 0 : 1 + (int32_t)(i % 4);
    const int64_t counts[5] = {60000, 10, 10, 10, 10};
    for (int t = 2; t <= 4; t++) check_lanes(ids, n, t, starts_one_line, counts);
    free(ids);
}

/* A checkpoint keeps the lanes it was written with, when they cut the ids at sentence
 * starts (an earlier build cut them at an even share of the ids); other cuts are refused. */
static void test_lanes_valid(void **state) {
    (void)state;
    int64_t n = 5003;
    int32_t *ids = malloc((size_t)n * sizeof(int32_t));
    assert_non_null(ids);
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)(i % 3);
    ids[2500] = -1; /* sentences start at 0, 1000, 2000, 2501, 3501, 4501 */
    emb_vocab *v;
    EMB_OK_OR_FAIL(emb_vocab_create(&v));
    for (int i = 0; i < 3; i++)
        EMB_OK_OR_FAIL(emb_vocab_add(v, (const char[]){(char)('a' + i)}, 1, 100, NULL, NULL));
    emb_w2v_options o = small_opts(EMB_W2V_SKIPGRAM);
    o.threads = o.lanes = 3;
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_create_from_ids(&o, v, ids, n, &w));
    bool ok = false;
    EMB_OK_OR_FAIL(emb__w2v_lanes_valid(w, w->lanes, &ok));
    assert_true(ok);
    struct {
        int64_t b1, b2;
        bool ok;
    } cuts[] = {{1000, 2501, true}, {2000, 3501, true},  {0, 4501, true},
                {2501, 2501, true}, {1000, 5003, true},  {1000, 2500, false},
                {999, 2501, false}, {2501, 1000, false}, {1000, 5004, false}};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        emb__w2v_lane l[3] = {{0, cuts[c].b1, 0, 0, 1},
                              {cuts[c].b1, cuts[c].b2, cuts[c].b1, 0, 1},
                              {cuts[c].b2, n, cuts[c].b2, 0, 1}};
        EMB_OK_OR_FAIL(emb__w2v_lanes_valid(w, l, &ok));
        if (ok != cuts[c].ok)
            fail_msg("cut %" PRId64 ", %" PRId64 ": %s, expected %s", cuts[c].b1, cuts[c].b2,
                     ok ? "valid" : "refused", cuts[c].ok ? "valid" : "refused");
    }
    emb_w2v_free(w);
    emb_vocab_free(v);
    free(ids);
}

/* A corpus read from a file keeps its token ids in a temporary file and reads them back in
 * small pieces while training; the result must be that of the same ids given in memory
 * (emb_w2v_create_from_ids), bit for bit at 1 thread, with the same threads' ranges at 3.
 * The corpus is larger than the read buffers, has words below min_count, empty lines, lines
 * of dropped words only, and lines longer than max_sentence. */
static void test_ids_file_equals_memory(void **state) {
    (void)state;
    const char *path = tmp("stream.txt");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    int64_t cap = 1 << 17, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof(int32_t));
    assert_non_null(ids);
    uint64_t s = 4242;
    int64_t total = 0;
    for (int line = 0; total < 70000; line++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int len = line % 37 == 5 ? 3000 : line % 11 == 3 ? 0 : (int)((s >> 40) % 40);
        for (int i = 0; i < len; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t r = s >> 33;
            /* mostly 200 frequent words; sometimes a word seen once (dropped at min_count 2) */
            int wid = (r & 15) == 0 ? 1000 + (int)(total % 90000) : (int)((r >> 4) % 200);
            if (line % 41 == 7) wid = 1000 + (int)(total % 90000); /* a line of rare words */
            fprintf(f, "%sw%d", i ? " " : "", wid);
            total++;
        }
        fprintf(f, "\n");
    }
    fclose(f);
    emb_w2v_options o = small_opts(EMB_W2V_SKIPGRAM);
    o.min_count = 2;
    o.max_sentence = 100;
    o.epochs = 2;
    emb_w2v *wf;
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, path, &wf));
    const emb_vocab *v = emb_w2v_vocab(wf);
    /* the ids as documented: the kept words of each line, then -1 after a line with any */
    f = fopen(path, "rb");
    assert_non_null(f);
    char buf[65536];
    bool any = false;
    int c, k = 0;
    while ((c = fgetc(f)) != EOF) {
        if (c == ' ' || c == '\n') {
            if (k > 0) {
                int64_t id = emb_vocab_find(v, buf, (size_t)k);
                if (id >= 0) {
                    assert_true(n < cap);
                    ids[n++] = (int32_t)id, any = true;
                }
            }
            k = 0;
            if (c == '\n' && any) ids[n++] = -1, any = false;
        } else {
            buf[k++] = (char)c;
        }
    }
    fclose(f);
    assert_true(n > 40000);
    emb_w2v *wm;
    EMB_OK_OR_FAIL(emb_w2v_create_from_ids(&o, v, ids, n, &wm));
    assert_int_equal(wf->n_ids, wm->n_ids);
    assert_int_equal(emb_w2v_corpus_tokens(wf), emb_w2v_corpus_tokens(wm));
    assert_true(wf->fingerprint == wm->fingerprint);
    assert_non_null(wm->ids.mem);
    assert_null(wf->ids.mem); /* the file's ids are not in memory */
    EMB_OK_OR_FAIL(emb_w2v_train(wf, NULL, NULL));
    EMB_OK_OR_FAIL(emb_w2v_train(wm, NULL, NULL));
    emb_tensor a, b;
    EMB_OK_OR_FAIL(emb_w2v_vectors(wf, &a));
    EMB_OK_OR_FAIL(emb_w2v_vectors(wm, &b));
    assert_int_equal(emb_tensor_numel(&a), emb_tensor_numel(&b));
    emb_assert_close_f32(a.data, b.data, emb_tensor_numel(&a), 1, 0, 0, "file vs memory ids");
    emb_w2v_free(wf), emb_w2v_free(wm);
    o.threads = o.lanes = 3;
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, path, &wf));
    EMB_OK_OR_FAIL(emb_w2v_create_from_ids(&o, emb_w2v_vocab(wf), ids, n, &wm));
    for (int t = 0; t < 3; t++) {
        assert_int_equal(wf->lanes[t].lo, wm->lanes[t].lo);
        assert_int_equal(wf->lanes[t].hi, wm->lanes[t].hi);
    }
    emb_w2v_free(wf), emb_w2v_free(wm);
    /* no folder for the temporary file: an error that says where, nothing created */
    const char *old = getenv("TMPDIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("TMPDIR", tmp("no-such-folder"), 1);
    wf = (emb_w2v *)0x1;
    EMB_EXPECT_ERR(emb_w2v_create_from_file(&o, path, &wf), EMB_ERR_IO, "(TMPDIR)");
    assert_non_null(strstr(emb_errmsg(), path)); /* and which corpus */
    assert_ptr_equal(wf, (emb_w2v *)0x1);
    if (saved)
        setenv("TMPDIR", saved, 1), free(saved);
    else
        unsetenv("TMPDIR");
    free(ids);
}

/* A corpus whose ids never fill the write buffer (16,384 ids) keeps them in memory and makes
 * no temporary file (it trains with TMPDIR pointing nowhere); one id more spills them to the
 * file, which then must be made. Both train as create_from_ids on the same ids, bit for bit. */
static void test_small_corpus_ids_in_memory(void **state) {
    (void)state;
    const char *old = getenv("TMPDIR");
    char *saved = old ? strdup(old) : NULL;
    for (int extra = 0; extra < 2; extra++) {
        /* k tokens on one line: k ids and the line's end */
        const int k = 16383 - 1 + extra;
        const char *path = tmp("small_ids.txt");
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        int32_t *ids = malloc((size_t)(k + 1) * sizeof(int32_t));
        assert_non_null(ids);
        for (int i = 0; i < k; i++) fprintf(f, "%sw%d", i ? " " : "", (i * 7) % 13);
        fprintf(f, "\n");
        fclose(f);
        emb_w2v_options o = small_opts(EMB_W2V_SKIPGRAM);
        o.max_sentence = 100000, o.epochs = 1;
        setenv("TMPDIR", tmp("no-such-folder"), 1);
        emb_w2v *wf = (emb_w2v *)0x1;
        emb_status st = emb_w2v_create_from_file(&o, path, &wf);
        if (saved)
            setenv("TMPDIR", saved, 1);
        else
            unsetenv("TMPDIR");
        if (extra) { /* 16,384 ids: the file is needed, and cannot be made */
            assert_int_equal(st, EMB_ERR_IO);
            assert_non_null(strstr(emb_errmsg(), "(TMPDIR)"));
            assert_non_null(strstr(emb_errmsg(), path)); /* and which corpus */
            assert_ptr_equal(wf, (emb_w2v *)0x1);
            EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, path, &wf));
            assert_null(wf->ids.mem);
        } else {
            EMB_OK_OR_FAIL(st);
            assert_non_null(wf->ids.mem);
        }
        assert_int_equal(wf->n_ids, k + 1);
        const emb_vocab *v = emb_w2v_vocab(wf);
        for (int i = 0; i < k; i++) {
            char word[16];
            snprintf(word, sizeof word, "w%d", (i * 7) % 13);
            ids[i] = (int32_t)emb_vocab_find(v, word, strlen(word));
        }
        ids[k] = -1;
        emb_w2v *wm;
        EMB_OK_OR_FAIL(emb_w2v_create_from_ids(&o, v, ids, k + 1, &wm));
        EMB_OK_OR_FAIL(emb_w2v_train(wf, NULL, NULL));
        EMB_OK_OR_FAIL(emb_w2v_train(wm, NULL, NULL));
        emb_tensor a, b;
        EMB_OK_OR_FAIL(emb_w2v_vectors(wf, &a));
        EMB_OK_OR_FAIL(emb_w2v_vectors(wm, &b));
        assert_memory_equal(a.data, b.data, emb_tensor_nbytes(&a));
        emb_w2v_free(wf), emb_w2v_free(wm);
        free(ids);
    }
    free(saved);
}

/* The negatives' alias table: each word's probability (sum over the entries of what each
 * gives it) is count^0.75 / sum of count^0.75, and an entry that always keeps its own word
 * (thr = UINT32_MAX) names itself as its alias, which the draw relies on. Counts that make
 * some probabilities exactly 1/V (equal counts) as well as skewed ones. */
static void test_alias_table(void **state) {
    (void)state;
    const int64_t sets[3][6] = {{7, 7, 7, 7, 7, 7}, {1000, 300, 40, 9, 2, 1}, {5, 5, 5, 1, 1, 1}};
    for (int c = 0; c < 3; c++) {
        emb_vocab *v;
        EMB_OK_OR_FAIL(emb_vocab_create(&v));
        for (int i = 0; i < 6; i++)
            EMB_OK_OR_FAIL(
                emb_vocab_add(v, (const char[]){(char)('a' + i)}, 1, sets[c][i], NULL, NULL));
        int32_t ids[6] = {0, 1, 2, 3, 4, 5};
        emb_w2v_options o = small_opts(EMB_W2V_SKIPGRAM);
        emb_w2v *w;
        EMB_OK_OR_FAIL(emb_w2v_create_from_ids(&o, v, ids, 6, &w));
        double total = 0, got[6] = {0};
        for (int i = 0; i < 6; i++) total += pow((double)sets[c][i], 0.75);
        for (int i = 0; i < 6; i++) {
            const emb__w2v_alias a = w->alias[i];
            if (a.thr == UINT32_MAX) assert_int_equal(a.alias, i);
            assert_true(a.alias >= 0 && a.alias < 6);
            double keep = a.thr == UINT32_MAX ? 1.0 : (double)a.thr / 4294967296.0;
            got[i] += keep / 6, got[a.alias] += (1 - keep) / 6;
        }
        for (int i = 0; i < 6; i++)
            if (fabs(got[i] - pow((double)sets[c][i], 0.75) / total) > 1e-8)
                fail_msg("set %d, word %d: probability %.10f, want %.10f", c, i, got[i],
                         pow((double)sets[c][i], 0.75) / total);
        emb_w2v_free(w);
        emb_vocab_free(v);
    }
}

/* Trains on text (written to a file) and returns the vectors; *vocab_size, the skipped
 * counts. */
static float *train_text(const char *text, size_t len, emb_w2v_options o, int64_t *nv,
                         int64_t skipped[2]) {
    const char *path = tmp("text.txt");
    put(path, text, len);
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, path, &w));
    emb_w2v_skipped(w, &skipped[0], &skipped[1]);
    EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_w2v_vectors(w, &t));
    *nv = emb_vocab_num_words(emb_w2v_vocab(w));
    assert_string_equal(emb_vocab_word(emb_w2v_vocab(w), 0, NULL), "hello");
    float *x = malloc((size_t)emb_tensor_numel(&t) * sizeof(float));
    memcpy(x, t.data, (size_t)emb_tensor_numel(&t) * sizeof(float));
    emb_w2v_free(w);
    return x;
}

/* A UTF-8 byte-order mark is not part of the first word; lenient mode skips (and counts)
 * tokens that are not UTF-8 or are too long, and gives what the text without them gives. */
static void test_bom_and_lenient(void **state) {
    (void)state;
    emb_w2v_options o = small_opts(EMB_W2V_SKIPGRAM);
    const char plain[] = "hello world hello\nworld hello there\n";
    int64_t nv0, nv1, sk[2];
    float *want = train_text(plain, sizeof plain - 1, o, &nv0, sk);
    assert_int_equal(nv0, 3);
    const char bom[] = "\xEF\xBB\xBFhello world hello\nworld hello there\n";
    float *got = train_text(bom, sizeof bom - 1, o, &nv1, sk);
    assert_int_equal(nv1, nv0);
    emb_assert_close_f32(got, want, nv0 * o.dim, 1, 0, 0, "with a byte-order mark");
    free(got);
    /* an invalid token and one of EMB_VOCAB_MAX_WORD + 1 bytes */
    size_t big = EMB_VOCAB_MAX_WORD + 1, n = 0;
    char *text = malloc(big + 100);
    assert_non_null(text);
    const char *head = "hello world \xff\xfe hello\nworld ";
    memcpy(text, head, strlen(head)), n += strlen(head);
    memset(text + n, 'a', big), n += big;
    const char *tail = " hello there\n";
    memcpy(text + n, tail, strlen(tail)), n += strlen(tail);
    put(tmp("text.txt"), text, n);
    emb_w2v *w = (emb_w2v *)0x1;
    EMB_EXPECT_ERR(emb_w2v_create_from_file(&o, tmp("text.txt"), &w), EMB_ERR_FORMAT,
                   "invalid UTF-8");
    text[12] = 'x', text[13] = 'y'; /* valid now: the long token is next */
    put(tmp("text.txt"), text, n);
    EMB_EXPECT_ERR(emb_w2v_create_from_file(&o, tmp("text.txt"), &w), EMB_ERR_FORMAT,
                   "longer than");
    assert_ptr_equal(w, (emb_w2v *)0x1);
    text[12] = '\xff', text[13] = '\xfe';
    o.lenient = true;
    got = train_text(text, n, o, &nv1, sk);
    assert_int_equal(sk[0], 1);
    assert_int_equal(sk[1], 1);
    assert_int_equal(nv1, nv0);
    emb_assert_close_f32(got, want, nv0 * o.dim, 1, 0, 0, "lenient, tokens skipped");
    free(got), free(want), free(text);
}

/* Every variant of the kernel equals the reference bit for bit. */
static void test_kernel_variants(void **state) {
    (void)state;
    emb__sgns_step_fn fast = emb__sgns_step();
    float sig[EMB__SGNS_TABLE + 1];
    emb__sgns_sigmoid_table(sig);
    for (int trial = 0; trial < 200; trial++) {
        int64_t dim = 1 + trial % 37 + (trial % 5 == 0 ? 100 : 0);
        int V = 20, m = 1 + trial % 10, n = 1 + trial % 7;
        size_t sz = (size_t)V * (size_t)dim;
        float *a0 = malloc(sz * 4), *a1 = malloc(sz * 4), *b0 = malloc(sz * 4),
              *b1 = malloc(sz * 4);
        float *scratch = malloc(((size_t)(m + n + 2) * dim + (size_t)(m * n)) * 4);
        uint64_t s = (uint64_t)trial * 7919 + 1;
        for (size_t i = 0; i < sz; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            a0[i] = a1[i] = ((float)(s >> 40) / (float)(1 << 24) - 0.5f);
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            b0[i] = b1[i] = ((float)(s >> 40) / (float)(1 << 24) - 0.5f);
        }
        int32_t ctx[10], tgt[7];
        for (int i = 0; i < m; i++) ctx[i] = (int32_t)((s >> (i * 3)) % (uint64_t)V);
        for (int j = 0; j < n; j++) tgt[j] = (int32_t)((s >> (j * 5 + 1)) % (uint64_t)V);
        bool cbow = trial % 2;
        emb__sgns_step_ref(&(emb__sgns_rows){a0, NULL, 0}, &(emb__sgns_rows){b0, NULL, 0}, dim, ctx,
                           m, tgt, n, 0.025f, cbow, trial % 4 < 2, sig, scratch);
        fast(&(emb__sgns_rows){a1, NULL, 0}, &(emb__sgns_rows){b1, NULL, 0}, dim, ctx, m, tgt, n,
             0.025f, cbow, trial % 4 < 2, sig, scratch);
        emb_assert_close_f32(a1, a0, (int64_t)sz, 1, 0, 0, "syn0");
        emb_assert_close_f32(b1, b0, (int64_t)sz, 1, 0, 0, "syn1");
        free(a0), free(a1), free(b0), free(b1), free(scratch);
    }
}

/* One (center, context) pair, the default skip-gram step, and the CBOW step: the AVX2
 * variant scores the targets first and updates them in one pass when they are distinct
 * rows; that must give the bits of the reference's in-place loop, one target after
 * another, with distinct targets, repeated negatives, negatives equal to the true word,
 * more targets than the batched path takes (17 and more), and every tail length. */
static void test_pair_step_batched(void **state) {
    (void)state;
    emb__sgns_step_fn fast = emb__sgns_step();
    float sig[EMB__SGNS_TABLE + 1];
    emb__sgns_sigmoid_table(sig);
    int batched = 0;
    for (int trial = 0; trial < 600; trial++) {
        int64_t dim = 1 + trial % 41 + (trial % 7 == 0 ? 96 : 0);
        int V = 40, n = 1 + trial % 20;
        size_t sz = (size_t)V * (size_t)dim;
        float *a0 = malloc(sz * 4), *a1 = malloc(sz * 4), *b0 = malloc(sz * 4),
              *b1 = malloc(sz * 4);
        bool cbow = trial % 2;
        int m = cbow ? 1 + trial % 6 : 1;
        float *scratch = malloc(((size_t)(m + n + 2) * dim + (size_t)(m * n)) * 4);
        uint64_t s = (uint64_t)trial * 104729 + 3;
        for (size_t i = 0; i < sz; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            /* large enough that scores reach the saturated ends of the sigmoid too */
            a0[i] = a1[i] =
                ((float)(s >> 40) / (float)(1 << 24) - 0.5f) * (trial % 3 ? 1.0f : 8.0f);
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            b0[i] = b1[i] = ((float)(s >> 40) / (float)(1 << 24) - 0.5f);
        }
        int32_t ctx[6], tgt[20];
        for (int i = 0; i < m; i++) ctx[i] = (int32_t)((s >> (i * 5)) % (uint64_t)V);
        bool distinct = trial % 4 != 3;
        for (int j = 0; j < n; j++)
            tgt[j] = distinct
                         ? (int32_t)((s + (uint64_t)j * 7) % (uint64_t)V) /* 7 and 40 coprime */
                         : (int32_t)((s >> (j * 3)) % 5);
        if (trial % 8 == 5 && n > 2) tgt[2] = tgt[0]; /* a negative equal to the true word */
        batched += distinct && n <= 16;
        emb__sgns_step_ref(&(emb__sgns_rows){a0, NULL, 0}, &(emb__sgns_rows){b0, NULL, 0}, dim, ctx,
                           m, tgt, n, 0.05f, cbow, trial % 4 == 1, sig, scratch);
        fast(&(emb__sgns_rows){a1, NULL, 0}, &(emb__sgns_rows){b1, NULL, 0}, dim, ctx, m, tgt, n,
             0.05f, cbow, trial % 4 == 1, sig, scratch);
        emb_assert_close_f32(a1, a0, (int64_t)sz, 1, 0, 0, "syn0 (pair)");
        emb_assert_close_f32(b1, b0, (int64_t)sz, 1, 0, 0, "syn1 (pair)");
        free(a0), free(a1), free(b0), free(b1), free(scratch);
    }
    assert_true(batched > 250);
}

/* A NaN in the vectors (here put there; alpha 1 without subsampling gets there by itself,
 * tests/cli/test_hostile.py) made the sigmoid table be read at (int)NaN: far out of bounds.
 * Training stops with an error that names a diverged vector, and stays stopped. */
static void test_divergence_stops_training(void **state) {
    (void)state;
    const char *corpus = synthetic_corpus();
    for (int variant = 0; variant < 6; variant++) {
        emb_w2v_options o = small_opts(variant % 2 ? EMB_W2V_CBOW : EMB_W2V_SKIPGRAM);
        o.threads = 1 + variant / 4;
        o.shared_negatives = variant / 2 == 1;
        emb_w2v *w;
        EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
        emb_tensor t;
        EMB_OK_OR_FAIL(emb_w2v_vectors(w, &t));
        int64_t cat = emb_vocab_find(emb_w2v_vocab(w), "cat", 3);
        assert_true(cat >= 0);
        ((float *)t.data)[cat * o.dim + 3] = NAN;
        EMB_EXPECT_ERR(emb_w2v_train(w, NULL, NULL), EMB_ERR_NUMERIC,
                       "training diverged at epoch 1 of 3");
        assert_non_null(strstr(emb_errmsg(), "vector of \""));
        assert_non_null(strstr(emb_errmsg(), "became NaN or infinite"));
        EMB_EXPECT_ERR(emb_w2v_train(w, NULL, NULL), EMB_ERR_NUMERIC, "training diverged");
        EMB_EXPECT_ERR(emb_w2v_save_checkpoint(w, tmp("d.ckpt")), EMB_ERR_STATE, "diverged");
        assert_int_equal(access(tmp("d.ckpt"), F_OK), -1);
        emb_w2v_free(w);
    }
    /* an infinity that no score has seen yet is found at the end */
    emb_w2v_options o = small_opts(EMB_W2V_SKIPGRAM);
    emb_vocab *v;
    EMB_OK_OR_FAIL(emb_vocab_create(&v));
    EMB_OK_OR_FAIL(emb_vocab_add(v, "a", 1, 2, NULL, NULL));
    EMB_OK_OR_FAIL(emb_vocab_add(v, "lonely", 6, 1, NULL, NULL));
    int32_t ids[3] = {0, -1, 0};
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_create_from_ids(&o, v, ids, 3, &w));
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_w2v_vectors(w, &t));
    ((float *)t.data)[1 * o.dim] = INFINITY;
    EMB_EXPECT_ERR(emb_w2v_train(w, NULL, NULL), EMB_ERR_NUMERIC,
                   "the input vector of \"lonely\" (row 1) became NaN or infinite");
    emb_w2v_free(w);
    emb_vocab_free(v);
}

/* The kernels with scores that are NaN, infinite, or the largest float below the saturation
 * point (whose table index is the one past the 1000 entries the tool fills). */
static void test_kernel_nonfinite_scores(void **state) {
    (void)state;
    float sig[EMB__SGNS_TABLE + 1];
    sig[EMB__SGNS_TABLE] = NAN;
    emb__sgns_sigmoid_table(sig);
    assert_true(fabsf(sig[EMB__SGNS_TABLE] - (float)(1 / (1 + exp(-6.0)))) < 1e-7f);
    emb__sgns_step_fn fns[2] = {emb__sgns_step_ref, emb__sgns_step()};
    for (int f = 0; f < 2; f++)
        for (int kind = 0; kind < 4; kind++)
            for (int cbow = 0; cbow < 2; cbow++) {
                const float below = nextafterf((float)EMB__SGNS_MAX_EXP, 0.0f);
                float syn0[2] = {kind == 0   ? NAN
                                 : kind == 1 ? INFINITY
                                 : kind == 2 ? -INFINITY
                                             : below,
                                 0.5f};
                float syn1[2] = {1.0f, 0.25f}, scratch[64];
                int32_t ctx[1] = {0}, tgt[2] = {0, 1};
                bool finite =
                    fns[f](&(emb__sgns_rows){syn0, NULL, 0}, &(emb__sgns_rows){syn1, NULL, 0}, 1,
                           ctx, 1, tgt, 2, 0.5f, cbow, false, sig, scratch);
                assert_int_equal(finite, kind == 3);
                if (kind == 3) {
                    /* the true word's update used sigmoid(6) from the table's last entry */
                    float g = (1.0f - sig[EMB__SGNS_TABLE]) * 0.5f;
                    assert_true(isfinite(syn0[0]) && isfinite(syn1[0]));
                    assert_true(syn1[0] == fmaf(g, below, 1.0f));
                }
            }
}

/* The largest max_sentence trains with buffers the size of the corpus, not 8 GiB. */
static void test_longest_sentences(void **state) {
    (void)state;
    emb_w2v_options o = small_opts(EMB_W2V_SKIPGRAM);
    o.max_sentence = INT32_MAX;
    o.epochs = 1;
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, synthetic_corpus(), &w));
    EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
    emb_w2v_free(w);
}

/* Standard input is copied once to be read twice, up to a bound: longer input is refused
 * with the bound named and nothing of the copy kept; input within it reads back whole, twice.
 * (The bound is 64 GiB in use; the test gives a smaller one.) */
static void spool_of(size_t bytes, uint64_t max, emb_status want) {
    const char *path = tmp("stdin.txt");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < bytes; i++) fputc(i % 7 == 6 ? ' ' : 'a' + (int)(i % 5), f);
    fclose(f);
    assert_non_null(freopen(path, "rb", stdin));
    const char *dash = "-";
    emb__corpus_src *s;
    EMB_OK_OR_FAIL(emb__corpus_open_paths(&s, &dash, 1));
    emb_status st = emb__corpus_spool_stdin_max(s, max);
    assert_int_equal(st, want);
    if (st) {
        char msg[64];
        snprintf(msg, sizeof msg, "longer than %" PRIu64 " bytes", max);
        assert_non_null(strstr(emb_errmsg(), msg));
        assert_non_null(strstr(emb_errmsg(), "give the corpus as a file"));
    } else {
        char *buf = malloc(bytes + 1);
        assert_non_null(buf);
        for (int pass = 0; pass < 2; pass++) {
            if (pass) EMB_OK_OR_FAIL(emb__corpus_rewind(s));
            bool have;
            EMB_OK_OR_FAIL(emb__corpus_next_file(s, &have));
            assert_true(have);
            size_t n = 0, got;
            do {
                EMB_OK_OR_FAIL(emb__corpus_read(s, buf + n, bytes + 1 - n, &got));
                n += got;
            } while (got > 0 && n <= bytes);
            assert_int_equal(n, bytes);
        }
        free(buf);
    }
    emb__corpus_close(s);
    assert_non_null(freopen("/dev/null", "rb", stdin));
}

static void test_stdin_spool_bound(void **state) {
    (void)state;
    spool_of(3u << 20, 1u << 20, EMB_ERR_UNSUPPORTED);
    spool_of(1u << 20, 1u << 20, EMB_OK); /* exactly the bound */
    spool_of(1000, 1u << 20, EMB_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_divergence_stops_training),
        cmocka_unit_test(test_kernel_nonfinite_scores),
        cmocka_unit_test(test_longest_sentences),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_corpus_errors),
        cmocka_unit_test(test_vocab_and_tokens),
        cmocka_unit_test(test_learns_topics),
        cmocka_unit_test(test_reproducible),
        cmocka_unit_test(test_checkpoint_resume),
        cmocka_unit_test(test_checkpoint_version1_resumes),
        cmocka_unit_test(test_create_from_ids),
        cmocka_unit_test(test_kernel_variants),
        cmocka_unit_test(test_pair_step_batched),
        cmocka_unit_test(test_split_long_lines),
        cmocka_unit_test(test_split_balanced),
        cmocka_unit_test(test_hot_rows),
        cmocka_unit_test(test_lanes_valid),
        cmocka_unit_test(test_checkpoint_lanes),
        cmocka_unit_test(test_ids_file_equals_memory),
        cmocka_unit_test(test_small_corpus_ids_in_memory),
        cmocka_unit_test(test_alias_table),
        cmocka_unit_test(test_bom_and_lenient),
        cmocka_unit_test(test_stdin_spool_bound),
    };
    return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
