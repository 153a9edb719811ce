/* Unit tests of the merge of the threads' copies of the tables (src/w2v/lanes.c) at 2 and 3
 * threads. Input rows are shared without locks, so runs of several threads vary in
 * general; here each lane's range holds words of its own (six blocks of sentences, each
 * block over its own words, the lanes cut at block boundaries), so the input rows are never
 * shared and only the output rows meet, through the negatives drawn from every block, in the
 * merge (rows one lane changed and rows several changed). Then a thread count must give the
 * same bits run after run, which a merge whose shares raced (overlapping rows, a lane's
 * copy read while another share writes it) would not. This checks determinism only; that
 * the merged values are those of the element-by-element sum was checked against the
 * previous build's vectors on such a corpus (docs/word2vec.md, "Speed").
 *
 * On a corpus of 11 rounds an epoch, with only the first 16 rows of each table merged after
 * every round and the others every 8 rounds: two runs are the same bits, and a run stopped by
 * its first progress report and continued by a second call gives the uninterrupted run's bits
 * (reports come after whole merges, so the tables then hold every thread's updates). */
#include "emb_test.h"

#include "w2v/w2v_internal.h"

enum { BLOCKS = 6, WORDS = 40, LINES = 120, LEN = 20 };

/* The corpus's ids (a sentence end after each line, `lines` lines a block) and its vocabulary
 * with the counts. */
static int32_t *make_corpus(emb_vocab **v, int64_t *n, int lines) {
    *n = (int64_t)BLOCKS * lines * (LEN + 1);
    int32_t *ids = malloc((size_t)*n * sizeof(int32_t));
    int64_t counts[BLOCKS * WORDS] = {0};
    assert_non_null(ids);
    uint64_t s = 99;
    int64_t k = 0;
    for (int b = 0; b < BLOCKS; b++)
        for (int l = 0; l < lines; l++) {
            for (int t = 0; t < LEN; t++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                /* skewed: word j of a block about twice as often as word j + 8 */
                int j = (int)((s >> 33) % WORDS), j2 = (int)((s >> 45) % WORDS);
                int id = b * WORDS + (j < j2 ? j : j2);
                ids[k++] = id;
                counts[id]++;
            }
            ids[k++] = -1;
        }
    EMB_OK_OR_FAIL(emb_vocab_create(v));
    for (int i = 0; i < BLOCKS * WORDS; i++) {
        char w[16];
        int len = snprintf(w, sizeof w, "w%d", i);
        EMB_OK_OR_FAIL(emb_vocab_add(*v, w, (size_t)len, counts[i] ? counts[i] : 1, NULL, NULL));
    }
    return ids;
}

/* Stops training at the first progress report (when *user is non-zero). */
static int stop_first(const emb_w2v_progress *p, void *user) {
    (void)p;
    return *(int *)user;
}

/* One run's input and output tables after training (*size floats each); stopped by its first
 * progress report and continued when `stop`. */
static void run(const emb_vocab *v, const int32_t *ids, int64_t n, int threads, float **syn0,
                float **syn1, int64_t *size, bool stop) {
    emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    o.dim = 12, o.window = 3, o.negative = 4, o.min_count = 1, o.epochs = 2, o.seed = 5;
    o.sample = 0; /* every token weighs the same: the lanes are cut at the blocks */
    o.threads = o.lanes = threads;
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_create_from_ids(&o, v, ids, n, &w));
    /* the lanes start at block boundaries: no input row is shared */
    for (int t = 1; t < threads; t++) assert_int_equal(w->lanes[t].lo, n / threads * t);
    int on = 1;
    if (stop) {
        EMB_EXPECT_ERR(emb_w2v_train(w, stop_first, &on), EMB_ERR_CANCELLED, "cancelled");
        assert_true(emb_w2v_words_done(w) < n * o.epochs);
        on = 0;
    }
    EMB_OK_OR_FAIL(emb_w2v_train(w, stop ? stop_first : NULL, &on));
    *size = w->V * o.dim;
    *syn0 = malloc((size_t)*size * sizeof(float));
    *syn1 = malloc((size_t)*size * sizeof(float));
    assert_non_null(*syn0);
    assert_non_null(*syn1);
    memcpy(*syn0, w->syn0, (size_t)*size * sizeof(float));
    memcpy(*syn1, w->syn1, (size_t)*size * sizeof(float));
    emb_w2v_free(w);
}

static void test_merge_same_bits(void **state) {
    (void)state;
    emb_vocab *v;
    int64_t n;
    int32_t *ids = make_corpus(&v, &n, LINES);
    for (int threads = 2; threads <= 3; threads++) {
        float *a0, *a1, *b0, *b1;
        int64_t size;
        run(v, ids, n, threads, &a0, &a1, &size, false);
        for (int rep = 0; rep < 3; rep++) {
            int64_t size2;
            run(v, ids, n, threads, &b0, &b1, &size2, false);
            assert_int_equal(size, size2);
            emb_assert_close_f32(b0, a0, size, 1, 0, 0, "input vectors, run after run");
            emb_assert_close_f32(b1, a1, size, 1, 0, 0, "output vectors, run after run");
            free(b0), free(b1);
        }
        /* the output rows of every block were trained (negatives cross the lanes) */
        int64_t zero_rows = 0;
        for (int64_t r = 0; r < size / 12; r++) {
            bool zero = true;
            for (int q = 0; q < 12; q++) zero = zero && a1[r * 12 + q] == 0.0f;
            zero_rows += zero;
        }
        assert_int_equal(zero_rows, 0);
        free(a0), free(a1);
    }
    emb_vocab_free(v);
    free(ids);
}

static void test_partial_merges(void **state) {
    (void)state;
    const int64_t hot = emb__w2v_hot_rows, hot_in = emb__w2v_hot_in_rows;
    emb__w2v_hot_rows = emb__w2v_hot_in_rows = 16;
    emb_vocab *v;
    int64_t n;
    /* 2 lanes of about 175,000 tokens: 11 rounds of 16,384 an epoch */
    int32_t *ids = make_corpus(&v, &n, 2780);
    float *a0, *a1, *b0, *b1, *c0, *c1;
    int64_t size, size2, size3;
    run(v, ids, n, 2, &a0, &a1, &size, false);
    run(v, ids, n, 2, &b0, &b1, &size2, false);
    run(v, ids, n, 2, &c0, &c1, &size3, true);
    assert_int_equal(size, size2);
    assert_int_equal(size, size3);
    emb_assert_close_f32(b0, a0, size, 1, 0, 0, "input vectors, run after run");
    emb_assert_close_f32(b1, a1, size, 1, 0, 0, "output vectors, run after run");
    emb_assert_close_f32(c0, a0, size, 1, 0, 0, "input vectors, stopped and continued");
    emb_assert_close_f32(c1, a1, size, 1, 0, 0, "output vectors, stopped and continued");
    free(a0), free(a1), free(b0), free(b1), free(c0), free(c1);
    emb_vocab_free(v);
    free(ids);
    emb__w2v_hot_rows = hot, emb__w2v_hot_in_rows = hot_in;
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_merge_same_bits),
                                       cmocka_unit_test(test_partial_merges)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
