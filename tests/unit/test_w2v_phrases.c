/* Training on phrases (emb_w2v_options.phrases): the run's vocabulary, token stream and
 * vectors are those of training on the text emb_phrases_apply writes (applied twice for two
 * passes), bit for bit at 1 thread; a phrases run resumes from a checkpoint with its phrase
 * options part of the checkpoint's identity; what cannot take phrases says so. gensim's
 * Phrases as the oracle of the joined pairs: tests/cli/test_phrases.py. */
#include "emb_test.h"
#include "emb_test_files.h"

#include <emb/phrases.h>

#include <math.h>
#include <sys/stat.h>

/* 2400 lines of words w0 .. w2999 drawn by a Zipf-like law (log-uniform ranks), with planted
 * pairs rare enough to score above gensim's threshold: "new york" (then "new_york city" in a
 * second pass), "ice cream", "prime minister". */
static const char *phrase_corpus(void) {
    const char *path = tmp("corpus.txt");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t r = 2024;
    for (int line = 0; line < 2400; line++) {
        int n = 6 + (int)(emb_test_next_u64(&r) % 14);
        for (int i = 0; i < n; i++) {
            uint64_t x = emb_test_next_u64(&r) % 1000;
            if (i) fputc(' ', f);
            if (x < 10)
                fputs("new york city", f);
            else if (x < 20)
                fputs("new york", f);
            else if (x < 30)
                fputs("ice cream", f);
            else if (x < 36)
                fputs("prime minister", f);
            else
                fprintf(f, "w%d", (int)pow(3000.0, emb_test_urand(&r)) - 1);
        }
        fputc('\n', f);
    }
    fclose(f);
    return path;
}

static emb_w2v_options phrase_opts(emb_w2v_model m, int passes) {
    emb_w2v_options o = emb_w2v_options_default(m);
    o.dim = 8, o.epochs = 3, o.threads = 1, o.seed = 3;
    o.phrases = passes;
    return o;
}

/* The corpus written through `passes` rounds of emb_phrases_learn + emb_phrases_apply. */
static const char *phrased_file(const char *corpus, int passes) {
    const char *in = corpus;
    static char out[2][512];
    for (int k = 0; k < passes; k++) {
        snprintf(out[k], sizeof out[k], "%s/phrased%d.txt", tmpdir, k);
        emb_phrases_options po = emb_phrases_options_default();
        emb_phrases *p;
        EMB_OK_OR_FAIL(emb_phrases_learn(in, &po, &p));
        FILE *f = fopen(out[k], "wb");
        assert_non_null(f);
        int64_t joined = 0;
        EMB_OK_OR_FAIL(emb_phrases_apply(p, in, f, &joined));
        assert_true(joined > 0);
        fclose(f);
        emb_phrases_free(p);
        in = out[k];
    }
    return in;
}

static void assert_same_run(emb_w2v *a, emb_w2v *b) {
    const emb_vocab *va = emb_w2v_vocab(a), *vb = emb_w2v_vocab(b);
    assert_int_equal(emb_vocab_num_words(va), emb_vocab_num_words(vb));
    for (int64_t i = 0; i < emb_vocab_num_words(va); i++) {
        size_t la, lb;
        const char *sa = emb_vocab_word(va, i, &la), *sb = emb_vocab_word(vb, i, &lb);
        assert_int_equal(la, lb);
        assert_memory_equal(sa, sb, la);
        assert_int_equal(emb_vocab_count(va, i), emb_vocab_count(vb, i));
    }
    assert_int_equal(emb_w2v_corpus_tokens(a), emb_w2v_corpus_tokens(b));
    emb_tensor ta, tb;
    EMB_OK_OR_FAIL(emb_w2v_vectors(a, &ta));
    EMB_OK_OR_FAIL(emb_w2v_vectors(b, &tb));
    assert_int_equal(emb_tensor_numel(&ta), emb_tensor_numel(&tb));
    assert_memory_equal(ta.data, tb.data, (size_t)emb_tensor_numel(&ta) * sizeof(float));
}

static void test_same_as_phrased_text(void **state) {
    (void)state;
    const char *corpus = phrase_corpus();
    for (int passes = 1; passes <= 2; passes++) {
        const char *ref = phrased_file(corpus, passes);
        size_t n;
        char *text = slurp(ref, &n);
        assert_non_null(strstr(text, passes == 2 ? "new_york_city" : "new_york"));
        free(text);
        for (int m = 0; m < 2; m++) {
            emb_w2v_options o = phrase_opts((emb_w2v_model)m, passes), plain = o;
            plain.phrases = 0;
            emb_w2v *a, *b;
            EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &a));
            EMB_OK_OR_FAIL(emb_w2v_create_from_file(&plain, ref, &b));
            EMB_OK_OR_FAIL(emb_w2v_train(a, NULL, NULL));
            EMB_OK_OR_FAIL(emb_w2v_train(b, NULL, NULL));
            assert_same_run(a, b);
            const emb_vocab *v = emb_w2v_vocab(a);
            assert_true(emb_vocab_find(v, "new_york", 8) >= 0 || passes == 2);
            assert_true(emb_vocab_find(v, "ice_cream", 9) >= 0);
            if (passes == 2) assert_true(emb_vocab_find(v, "new_york_city", 13) >= 0);
            assert_int_equal(emb_w2v_options_of(a).phrases, passes);
            emb_w2v_free(a), emb_w2v_free(b);
        }
    }
}

static int cancel_at(const emb_w2v_progress *p, void *user) {
    (void)p;
    return --*(int *)user == 0;
}

static void test_checkpoint_of_phrases(void **state) {
    (void)state;
    const char *corpus = phrase_corpus(), *ck = tmp("ph.ckpt");
    emb_w2v_options o = phrase_opts(EMB_W2V_SKIPGRAM, 2);
    o.epochs = 12;
    emb_w2v *want, *w;
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &want));
    EMB_OK_OR_FAIL(emb_w2v_train(want, NULL, NULL));
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
    int calls = 2;
    EMB_EXPECT_ERR(emb_w2v_train(w, cancel_at, &calls), EMB_ERR_CANCELLED, "cancelled");
    const int64_t done = emb_w2v_words_done(w);
    assert_true(done > 0 && done < emb_w2v_corpus_tokens(w) * o.epochs);
    EMB_OK_OR_FAIL(emb_w2v_save_checkpoint(w, ck));
    emb_w2v_free(w);
    EMB_OK_OR_FAIL(emb_w2v_resume(&o, corpus, ck, &w));
    assert_int_equal(emb_w2v_words_done(w), done);
    EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
    assert_same_run(w, want);
    emb_w2v_free(w), emb_w2v_free(want);
    /* the phrase options are part of the identity */
    emb_w2v_options o2 = o;
    o2.phrases_threshold = 20;
    EMB_EXPECT_ERR(emb_w2v_resume(&o2, corpus, ck, &w), EMB_ERR_FORMAT,
                   "was written with phrases_threshold 10, but this run has phrases_threshold 20");
    o2 = o, o2.phrases = 1;
    EMB_EXPECT_ERR(emb_w2v_resume(&o2, corpus, ck, &w), EMB_ERR_FORMAT,
                   "was written with phrases 2, but this run has phrases 1");
    o2 = o, strcpy(o2.phrases_delimiter, "--");
    EMB_EXPECT_ERR(emb_w2v_resume(&o2, corpus, ck, &w), EMB_ERR_FORMAT,
                   "was written with phrases_delimiter \"_\", but this run has phrases_delimiter "
                   "\"--\"");
    o2 = o, o2.phrases_min_count = 4;
    EMB_EXPECT_ERR(emb_w2v_resume(&o2, corpus, ck, &w), EMB_ERR_FORMAT,
                   "was written with phrases_min_count 5, but this run has phrases_min_count 4");
}

static void test_phrases_refused(void **state) {
    (void)state;
    const char *corpus = phrase_corpus();
    emb_w2v_options o = phrase_opts(EMB_W2V_CBOW, 1);
    emb_w2v *w = NULL;
    FILE *f = fopen(corpus, "rb");
    assert_non_null(f);
    EMB_EXPECT_ERR(emb_w2v_create_from_stream(&o, f, "c", &w), EMB_ERR_INVALID,
                   "an open stream cannot be read twice: give it as a path");
    fclose(f);
    emb_vocab *v;
    EMB_OK_OR_FAIL(emb_vocab_create(&v));
    EMB_OK_OR_FAIL(emb_vocab_add(v, "a", 1, 1, NULL, NULL));
    const int32_t ids[2] = {0, 0};
    EMB_EXPECT_ERR(emb_w2v_create_from_ids(&o, v, ids, 2, &w), EMB_ERR_INVALID,
                   "not provided with a run from token ids");
    EMB_EXPECT_ERR(emb_w2v_create_with_vocab(&o, v, corpus, &w), EMB_ERR_INVALID,
                   "not provided with a vocabulary given");
    emb_vocab_free(v);
    EMB_EXPECT_ERR(emb_w2v_continue(&o, tmp("model.ckpt"), corpus, &w), EMB_ERR_INVALID,
                   "not provided with continued training");
    EMB_EXPECT_ERR(emb_w2v_create_from_file(&o, tmp("missing.txt"), &w), EMB_ERR_IO, "missing.txt");
    char empty[600];
    snprintf(empty, sizeof empty, "%s/no-files", tmpdir);
    assert_int_equal(mkdir(empty, 0700), 0);
    EMB_EXPECT_ERR(emb_w2v_create_from_file(&o, empty, &w), EMB_ERR_IO,
                   "a directory without files");
    put(tmp("empty.txt"), " \n\n", 3);
    EMB_EXPECT_ERR(emb_w2v_create_from_file(&o, tmp("empty.txt"), &w), EMB_ERR_FORMAT,
                   "corpus is empty");
    assert_null(w);
    emb_w2v_options bad = o;
    bad.phrases = 9;
    EMB_EXPECT_ERR(emb_w2v_options_check(&bad), EMB_ERR_INVALID, "phrases must be in [0, 8]");
    bad = o, strcpy(bad.phrases_delimiter, "a b");
    EMB_EXPECT_ERR(emb_w2v_options_check(&bad), EMB_ERR_INVALID, "phrases: the delimiter");
    bad = o, bad.phrases_min_count = 0;
    EMB_EXPECT_ERR(emb_w2v_options_check(&bad), EMB_ERR_INVALID, "phrases: min_count");
    bad = o, memset(bad.phrases_delimiter, 'x', sizeof bad.phrases_delimiter);
    EMB_EXPECT_ERR(emb_w2v_options_check(&bad), EMB_ERR_INVALID, "must end with a 0 byte");
    /* phrase fields are ignored when phrases is 0 */
    bad.phrases = 0;
    EMB_OK_OR_FAIL(emb_w2v_options_check(&bad));
}

/* The functions over several paths read them as the concatenation (a line end between two
 * files); npmi's options are checked; a bad list is refused and changes nothing. */
static void test_phrases_over_files(void **state) {
    (void)state;
    char cpath[600]; /* tmp()'s buffers are reused */
    snprintf(cpath, sizeof cpath, "%s", phrase_corpus());
    const char *corpus = cpath;
    size_t n;
    char *text = (char *)emb_test_read(corpus, &n);
    size_t half = n / 2;
    while (text[half - 1] != '\n') half++;
    put(tmp("half1.txt"), text, half);
    put(tmp("half2.txt"), text + half, n - half);
    char h1[600], h2[600];
    snprintf(h1, sizeof h1, "%s", tmp("half1.txt"));
    snprintf(h2, sizeof h2, "%s", tmp("half2.txt"));
    const char *halves[2] = {h1, h2};
    for (int scoring = 0; scoring < 2; scoring++) {
        emb_phrases_options o = emb_phrases_options_default();
        if (scoring) o.scoring = EMB_PHRASES_NPMI, o.threshold = 0.5;
        char *out[2];
        size_t len[2];
        int64_t joined[2];
        for (int k = 0; k < 2; k++) {
            FILE *f = open_memstream(&out[k], &len[k]);
            assert_non_null(f);
            if (k == 0) {
                EMB_OK_OR_FAIL(emb_phrases_rewrite_files(&corpus, 1, &o, f, &joined[k]));
            } else {
                emb_phrases *p = NULL;
                EMB_OK_OR_FAIL(emb_phrases_learn_files(halves, 2, &o, &p));
                EMB_OK_OR_FAIL(emb_phrases_apply_files(p, halves, 2, f, &joined[k]));
                emb_phrases_free(p);
            }
            fclose(f);
        }
        assert_true(joined[0] > 0);
        assert_int_equal(joined[0], joined[1]);
        assert_int_equal(len[0], len[1]);
        assert_memory_equal(out[0], out[1], len[0]);
        free(out[0]), free(out[1]);
    }
    free(text);
    emb_phrases_options o = emb_phrases_options_default();
    emb_phrases *p = (emb_phrases *)0x1;
    o.scoring = EMB_PHRASES_NPMI; /* gensim's default threshold 10 is outside [-1, 1] */
    EMB_EXPECT_ERR(emb_phrases_learn(corpus, &o, &p), EMB_ERR_INVALID,
                   "threshold must be in [-1, 1] with npmi scoring");
    o.threshold = -1.5;
    EMB_EXPECT_ERR(emb_phrases_learn(corpus, &o, &p), EMB_ERR_INVALID, "got -1.5");
    o.threshold = 1, o.scoring = (emb_phrases_scoring)7;
    EMB_EXPECT_ERR(emb_phrases_learn(corpus, &o, &p), EMB_ERR_INVALID, "scoring must be");
    o = emb_phrases_options_default();
    const char *twice[2] = {"-", "-"};
    EMB_EXPECT_ERR(emb_phrases_learn_files(twice, 2, &o, &p), EMB_ERR_INVALID, "given twice");
    EMB_EXPECT_ERR(emb_phrases_learn_files(halves, 0, &o, &p), EMB_ERR_INVALID, "no corpus file");
    EMB_EXPECT_ERR(emb_phrases_rewrite_files(NULL, 1, &o, stdout, NULL), EMB_ERR_NULL, "paths");
    assert_true(p == (emb_phrases *)0x1);
    emb_w2v_options w = phrase_opts(EMB_W2V_SKIPGRAM, 1);
    w.phrases_scoring = EMB_PHRASES_NPMI;
    EMB_EXPECT_ERR(emb_w2v_options_check(&w), EMB_ERR_INVALID,
                   "phrases: threshold must be in [-1, 1] with npmi");
    w.phrases_threshold = 0.5;
    EMB_OK_OR_FAIL(emb_w2v_options_check(&w));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_phrased_text),
        cmocka_unit_test(test_checkpoint_of_phrases),
        cmocka_unit_test(test_phrases_refused),
        cmocka_unit_test(test_phrases_over_files),
    };
    return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
