/* Unit tests of what the word2vec trainer reports while it trains (include/emb/word2vec.h,
 * emb_w2v_progress): the epoch, the loss (its definition checked where it can be computed
 * by hand, and that computing it leaves the vectors bit for bit as they are), and the words
 * done by this call after a resume. */
#include "emb_test.h"
#include "emb_test_files.h"

#include <math.h>
#include <unistd.h>

/* Two topics that never share a line, plus a frequent word. */
static const char *topics_corpus(int lines) {
    static char path[512];
    snprintf(path, sizeof path, "%s", tmp("topics.txt"));
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t s = 99;
    const char *a[] = {"red", "green", "blue", "yellow", "purple", "orange"};
    const char *b[] = {"cat", "dog", "horse", "mouse", "sheep", "goat"};
    for (int line = 0; line < lines; line++) {
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

typedef struct {
    int calls;
    int stop_at;               /* cancel at this call (0: never) */
    emb_w2v_progress last;     /* the last report */
    double epoch_end_loss[64]; /* mean loss per example at the last report of each epoch */
    int64_t epoch_end_examples[64];
    int64_t first_here; /* words_done_here and words_done at the first report */
    int64_t first_done;
} recorder;

static int record(const emb_w2v_progress *p, void *user) {
    recorder *r = user;
    if (r->calls == 0) r->first_here = p->words_done_here, r->first_done = p->words_done;
    assert_true(p->epoch >= 0 && p->epoch < 64);
    assert_true(p->words_done_here >= 0 && p->words_done_here <= p->words_done);
    r->epoch_end_loss[p->epoch] = p->loss_examples ? p->loss / (double)p->loss_examples : NAN;
    r->epoch_end_examples[p->epoch] = p->loss_examples;
    r->last = *p;
    return ++r->calls == r->stop_at;
}

/* One word repeated: every negative is the true word and is skipped, so each example is
 * one term; with a learning rate of 1e-30 the rows do not move from their start (output
 * rows zero), every score is 0 and every term is log 2, with and without subwords.
 * Skip-gram with window 1 and no subsampling has 2 (n - 1) examples in a sentence of n
 * tokens; CBOW one per token. */
static void test_loss_by_hand(void **state) {
    (void)state;
    const char *path = tmp("one.txt");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (int line = 0; line < 50; line++) fputs("a a a a a a a a a a\n", f); /* 10 tokens */
    fclose(f);
    for (int variant = 0; variant < 4; variant++) { /* with subwords from variant 2 */
        const int cbow = variant & 1;
        emb_w2v_options o = emb_w2v_options_default(cbow ? EMB_W2V_CBOW : EMB_W2V_SKIPGRAM);
        o.dim = 8, o.min_count = 1, o.threads = 1, o.epochs = 2, o.window = 1, o.sample = 0;
        o.alpha = 1e-30, o.min_alpha = 0, o.compute_loss = true;
        if (variant >= 2) o.minn = 2, o.maxn = 3, o.bucket = 50;
        emb_w2v *w;
        EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, path, &w));
        recorder r = {0};
        EMB_OK_OR_FAIL(emb_w2v_train(w, record, &r));
        int64_t want = cbow ? 50 * 10 : 50 * 2 * 9;
        for (int e = 0; e < 2; e++) {
            assert_int_equal(r.epoch_end_examples[e], want);
            assert_true(fabs(r.epoch_end_loss[e] - log(2.0)) < 1e-12);
        }
        assert_int_equal(r.last.epoch, 1);
        emb_w2v_free(w);
    }
}

static void train_vectors(const char *corpus, emb_w2v_options o, recorder *r, float **out,
                          int64_t *n) {
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
    EMB_OK_OR_FAIL(emb_w2v_train(w, record, r));
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_w2v_vectors(w, &t));
    *n = emb_tensor_numel(&t);
    *out = malloc((size_t)*n * sizeof(float));
    memcpy(*out, t.data, (size_t)*n * sizeof(float));
    emb_w2v_free(w);
}

/* Computing the loss reads the tables only: the same bits with and without it, in every
 * model; the loss falls as the vectors learn the topics; without compute_loss it is 0. */
static void test_loss_leaves_vectors_alone(void **state) {
    (void)state;
    const char *corpus = topics_corpus(400);
    for (int variant = 0; variant < 5; variant++) { /* 3, 4: with subwords */
        const bool cbow = variant == 1 || variant == 4;
        emb_w2v_options o = emb_w2v_options_default(cbow ? EMB_W2V_CBOW : EMB_W2V_SKIPGRAM);
        o.dim = 16, o.min_count = 1, o.threads = 1, o.epochs = 8, o.seed = 3;
        o.shared_negatives = variant == 2;
        if (variant >= 3) o.minn = 2, o.maxn = 4, o.bucket = 200;
        float *a, *b;
        int64_t n;
        recorder ra = {0}, rb = {0};
        train_vectors(corpus, o, &ra, &a, &n);
        assert_int_equal(ra.last.loss_examples, 0);
        assert_true(ra.last.loss == 0);
        o.compute_loss = true;
        train_vectors(corpus, o, &rb, &b, &n);
        assert_memory_equal(a, b, (size_t)n * sizeof(float));
        assert_true(rb.epoch_end_examples[0] > 0 && rb.epoch_end_examples[7] > 0);
        /* the first epoch starts at (K + 1) log 2 per example (zero output rows) and the
         * loss falls from there */
        double first = rb.epoch_end_loss[0], last = rb.epoch_end_loss[7];
        assert_true(first < 6 * log(2.0));
        if (!(last < first))
            fail_msg("variant %d: loss %g in the first epoch, %g in the last", variant, first,
                     last);
        free(a), free(b);
    }
}

/* After a resume, words_done_here counts only the new work, and the epoch is reported. */
static void test_progress_after_resume(void **state) {
    (void)state;
    const char *corpus = topics_corpus(400);
    emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    o.dim = 8, o.min_count = 1, o.threads = 1, o.epochs = 10;
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
    recorder r = {0};
    r.stop_at = 3;
    EMB_EXPECT_ERR(emb_w2v_train(w, record, &r), EMB_ERR_CANCELLED, "cancelled");
    assert_int_equal(r.first_here, r.first_done); /* a fresh run: all of it is this call's */
    int64_t done = emb_w2v_words_done(w);
    const char *ck = tmp("ck");
    EMB_OK_OR_FAIL(emb_w2v_save_checkpoint(w, ck));
    emb_w2v_free(w);
    EMB_OK_OR_FAIL(emb_w2v_resume(&o, corpus, ck, &w));
    recorder r2 = {0};
    EMB_OK_OR_FAIL(emb_w2v_train(w, record, &r2));
    assert_true(r2.first_done > done);
    assert_int_equal(r2.first_here, r2.first_done - done);
    assert_int_equal(r2.last.words_done_here, r2.last.words_done - done);
    assert_int_equal(r2.last.words_done, r2.last.words_total);
    assert_int_equal(r2.last.epoch, o.epochs - 1);
    emb_w2v_free(w);
}

/* Resumes ck with o, checks the lanes and threads in force, trains to the end (every token
 * of every epoch) and, when want is not NULL, compares the vectors with want[0..n). */
static void resume_and_finish(const char *corpus, const char *ck, const emb_w2v_options *o,
                              int lanes, int threads, const float *want, int64_t n) {
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_resume(o, corpus, ck, &w));
    assert_int_equal(emb_w2v_options_of(w).lanes, lanes);
    assert_int_equal(emb_w2v_options_of(w).threads, threads);
    EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
    assert_int_equal(emb_w2v_words_done(w), emb_w2v_corpus_tokens(w) * o->epochs);
    if (want) {
        emb_tensor t;
        EMB_OK_OR_FAIL(emb_w2v_vectors(w, &t));
        assert_memory_equal(t.data, want, (size_t)n * sizeof(float));
    }
    emb_w2v_free(w);
}

/* threads is not part of a checkpoint's identity, its lanes are: a checkpoint of a 2-thread
 * run (8 lanes) resumes on 1, 2 or 3 threads or the default and keeps its lanes; a 1-thread
 * run (one lane) resumed with threads 2 stays on one thread and ends with the vectors of the
 * uninterrupted 1-thread run. */
static void test_resume_with_other_threads(void **state) {
    (void)state;
    const char *corpus = topics_corpus(400);
    const char *ck = tmp("ck_threads");
    for (int saved = 1; saved <= 2; saved++) {
        emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
        o.dim = 8, o.min_count = 1, o.threads = saved, o.epochs = 10, o.seed = 4;
        float *want = NULL;
        int64_t n = 0;
        if (saved == 1) {
            recorder r0 = {0};
            train_vectors(corpus, o, &r0, &want, &n);
        }
        emb_w2v *w;
        EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
        recorder r = {0};
        r.stop_at = 2;
        EMB_EXPECT_ERR(emb_w2v_train(w, record, &r), EMB_ERR_CANCELLED, "cancelled");
        EMB_OK_OR_FAIL(emb_w2v_save_checkpoint(w, ck));
        emb_w2v_free(w);
        const int asked[] = {0, 1, 2, 3};
        for (size_t k = 0; k < 4; k++) {
            emb_w2v_options o2 = o;
            o2.threads = asked[k];
            /* the checkpoint's lanes (1 with one thread, 4 per thread with more), on the
             * threads asked for, at most one per lane */
            const int lanes = saved == 1 ? 1 : 4 * saved,
                      threads = asked[k] ? asked[k] : emb_get_num_threads();
            resume_and_finish(corpus, ck, &o2, lanes, threads < lanes ? threads : lanes,
                              saved == 1 ? want : NULL, n);
        }
        free(want);
    }
}

/* Lanes apart from threads (emb_w2v_options.lanes): one thread over 4 lanes trains them in
 * lane order, so two runs give the same bits, and a checkpoint of it resumed on one thread
 * ends with the uninterrupted run's bits (on 3 threads it finishes every lane); 2 threads over
 * 5 lanes (an uneven share) process every token of every epoch; lanes out of range are
 * refused. */
static void test_lanes(void **state) {
    (void)state;
    const char *corpus = topics_corpus(400);
    const char *ck = tmp("ck_lanes");
    emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    o.dim = 8, o.min_count = 1, o.threads = 1, o.lanes = 4, o.epochs = 10, o.seed = 6;
    float *want = NULL, *again = NULL;
    int64_t n = 0, n2 = 0;
    recorder r0 = {0}, r1 = {0};
    train_vectors(corpus, o, &r0, &want, &n);
    train_vectors(corpus, o, &r1, &again, &n2);
    assert_int_equal(n, n2);
    assert_memory_equal(want, again, (size_t)n * sizeof(float));
    assert_true(r0.calls > 2);
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
    assert_int_equal(emb_w2v_options_of(w).lanes, 4);
    assert_int_equal(emb_w2v_options_of(w).threads, 1);
    recorder r = {0};
    r.stop_at = 2;
    EMB_EXPECT_ERR(emb_w2v_train(w, record, &r), EMB_ERR_CANCELLED, "cancelled");
    EMB_OK_OR_FAIL(emb_w2v_save_checkpoint(w, ck));
    emb_w2v_free(w);
    for (int threads = 1; threads <= 3; threads += 2) {
        emb_w2v_options o2 = o;
        o2.threads = threads, o2.lanes = 0; /* the checkpoint's lanes are taken */
        resume_and_finish(corpus, ck, &o2, 4, threads, threads == 1 ? want : NULL, n);
    }
    free(want), free(again);
    o.threads = 2, o.lanes = 5;
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
    EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
    assert_int_equal(emb_w2v_words_done(w), emb_w2v_corpus_tokens(w) * o.epochs);
    assert_int_equal(emb_w2v_options_of(w).lanes, 5);
    emb_w2v_free(w);
    const int bad[] = {-1, 4097};
    for (int k = 0; k < 2; k++) {
        o.lanes = bad[k];
        w = NULL;
        EMB_EXPECT_ERR(emb_w2v_create_from_file(&o, corpus, &w), EMB_ERR_INVALID,
                       "lanes must be in [0, 4096]");
        assert_null(w);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loss_by_hand),
        cmocka_unit_test(test_loss_leaves_vectors_alone),
        cmocka_unit_test(test_progress_after_resume),
        cmocka_unit_test(test_resume_with_other_threads),
        cmocka_unit_test(test_lanes),
    };
    return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
