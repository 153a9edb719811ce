/* fastText .bin models: a well-formed model read back, word vectors as the mean of the
 * subword rows, and hostile files (lies about sizes, truncation, bad fields) refused with
 * the file name and the byte offset. Parity with the fasttext program itself:
 * tests/cli/test_fasttext.py. */
#include "emb_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char tmpdir[256];

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/emb-test-fasttext-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- a model file built field by field ---- */

typedef struct {
    unsigned char b[1 << 16];
    size_t n;
} buf;

static void put(buf *f, const void *p, size_t n) {
    assert_true(f->n + n <= sizeof f->b);
    memcpy(f->b + f->n, p, n);
    f->n += n;
}
static void put_i32(buf *f, int32_t v) {
    put(f, &v, 4);
}
static void put_i64(buf *f, int64_t v) {
    put(f, &v, 8);
}

typedef struct {
    int32_t dim, bucket, minn, maxn, model;
    const char *const *words;
    int32_t nwords;
} spec;

/* Offsets of the parts, for the tests that damage them. */
typedef struct {
    size_t args, dict, quant, input, output;
} layout;

static layout build(buf *f, const spec *s) {
    layout L;
    f->n = 0;
    put_i32(f, 793712314);
    put_i32(f, 12);
    L.args = f->n;
    int32_t args[12] = {s->dim, 5, 5, 1, 5, 1, 2, s->model, s->bucket, s->minn, s->maxn, 100};
    put(f, args, sizeof args);
    double t = 1e-4;
    put(f, &t, 8);
    L.dict = f->n;
    put_i32(f, s->nwords);
    put_i32(f, s->nwords);
    put_i32(f, 0);
    put_i64(f, 1000);
    put_i64(f, -1);
    for (int32_t i = 0; i < s->nwords; i++) {
        put(f, s->words[i], strlen(s->words[i]) + 1);
        put_i64(f, 100 - i);
        put(f, "\0", 1);
    }
    L.quant = f->n;
    put(f, "\0", 1);
    L.input = f->n;
    int64_t rows = s->nwords + s->bucket;
    put_i64(f, rows);
    put_i64(f, s->dim);
    for (int64_t k = 0; k < rows * s->dim; k++) {
        float x = (float)(k % 97) * 0.01f - 0.3f;
        put(f, &x, 4);
    }
    put(f, "\0", 1);
    L.output = f->n;
    put_i64(f, s->nwords);
    put_i64(f, s->dim);
    for (int64_t k = 0; k < (int64_t)s->nwords * s->dim; k++) {
        float x = 0.5f;
        put(f, &x, 4);
    }
    return L;
}

static const char *save(const buf *f, const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(f->b, 1, f->n, fp), f->n);
    fclose(fp);
    return path;
}

static const char *const WORDS[] = {"</s>", "the", "über", "cat"};
static const spec SPEC = {4, 50, 2, 4, 2, WORDS, 4};

static void test_read_and_vectors(void **state) {
    (void)state;
    static buf f;
    build(&f, &SPEC);
    const char *path = save(&f, "ok.bin");
    emb_fasttext *ft;
    EMB_OK_OR_FAIL(emb_fasttext_read(path, &ft));
    assert_int_equal(emb_fasttext_dim(ft), 4);
    emb_fasttext_args a = emb_fasttext_args_of(ft);
    assert_int_equal(a.bucket, 50);
    assert_int_equal(a.minn, 2);
    assert_int_equal(a.maxn, 4);
    assert_int_equal(a.model, 2);
    const emb_vocab *v = emb_fasttext_vocab(ft);
    assert_int_equal(emb_vocab_num_words(v), 4);
    assert_int_equal(emb_vocab_find(v, "über", strlen("über")), 2);
    assert_int_equal(emb_vocab_count(v, 1), 99);

    /* a vocabulary word: its own row first, then n-gram rows in [nwords, nwords + bucket) */
    int64_t rows[64];
    int64_t n = emb_fasttext_subword_rows(ft, "the", 3, rows, 64);
    /* "<the>" has 5 characters: n-grams of 2..4 characters, "<" and ">" alone excluded:
     * 4 of length 2, 3 of length 3, 2 of length 4 */
    assert_int_equal(n, 1 + 4 + 3 + 2);
    assert_int_equal(rows[0], 1);
    for (int64_t k = 1; k < n; k++) assert_true(rows[k] >= 4 && rows[k] < 54);
    /* characters, not bytes: "über" is 4 characters as "uber" is */
    assert_int_equal(emb_fasttext_subword_rows(ft, "über", strlen("über"), NULL, 0),
                     emb_fasttext_subword_rows(ft, "uber", 4, NULL, 0) + 1);
    /* the end-of-sentence token has no n-grams; an unseen word only n-grams */
    assert_int_equal(emb_fasttext_subword_rows(ft, "</s>", 4, rows, 64), 1);
    assert_int_equal(emb_fasttext_subword_rows(ft, "dog", 3, NULL, 0), 9);
    /* the vector is the float32 mean of those rows, summed in order */
    float got[4], want[4] = {0, 0, 0, 0};
    n = emb_fasttext_subword_rows(ft, "dog", 3, rows, 64);
    EMB_OK_OR_FAIL(emb_fasttext_word_vector(ft, "dog", 3, got));
    for (int64_t k = 0; k < n; k++)
        for (int j = 0; j < 4; j++) want[j] += (float)((rows[k] * 4 + j) % 97) * 0.01f - 0.3f;
    for (int j = 0; j < 4; j++) want[j] *= (float)(1.0 / (double)n);
    EMB_ASSERT_EXACT(got, want, 4, "vector of an unseen word");
    /* the empty word is "<>": one n-gram of 2 characters */
    assert_int_equal(emb_fasttext_subword_rows(ft, "", 0, NULL, 0), 1);
    /* a word of more n-grams than the stack buffer holds */
    char longw[400];
    memset(longw, 'a', sizeof longw);
    EMB_OK_OR_FAIL(emb_fasttext_word_vector(ft, longw, sizeof longw, got));
    EMB_EXPECT_ERR(emb_fasttext_word_vector(NULL, "a", 1, got), EMB_ERR_NULL, "must not be NULL");

    /* emb_vectors_read: the words and their vectors, as fastText's .vec */
    emb_vectors vec;
    EMB_OK_OR_FAIL(emb_vectors_read(path, NULL, &vec));
    assert_int_equal(vec.format, EMB_FORMAT_FASTTEXT_BIN);
    assert_int_equal(vec.weight.shape[0], 4);
    EMB_OK_OR_FAIL(emb_fasttext_word_vector(ft, "cat", 3, got));
    EMB_ASSERT_EXACT((const float *)vec.weight.data + 3 * 4, got, 4, "row of cat");
    emb_vectors_release(&vec);
    emb_vectors_read_options ro = emb_vectors_read_options_default();
    ro.limit = 2;
    EMB_OK_OR_FAIL(emb_vectors_read(path, &ro, &vec));
    assert_int_equal(vec.weight.shape[0], 2);
    assert_int_equal(emb_vocab_num_words(vec.vocab), 2);
    assert_int_equal(vec.file_rows, 4);
    emb_vectors_release(&vec);
    /* emb_fasttext_vectors: the same table from the model already read, all rows or a limit;
     * the model keeps its vocabulary */
    for (int64_t lim = 0; lim <= 5; lim += 2) {
        emb_vectors fromfile, frommodel;
        ro.limit = lim;
        EMB_OK_OR_FAIL(emb_vectors_read(path, &ro, &fromfile));
        EMB_OK_OR_FAIL(emb_fasttext_vectors(ft, lim, &frommodel));
        assert_int_equal(frommodel.format, EMB_FORMAT_FASTTEXT_BIN);
        assert_int_equal(frommodel.file_rows, fromfile.file_rows);
        assert_int_equal(frommodel.nonfinite, fromfile.nonfinite);
        assert_int_equal(frommodel.weight.shape[0], fromfile.weight.shape[0]);
        EMB_ASSERT_EXACT(frommodel.weight.data, fromfile.weight.data,
                         emb_tensor_numel(&fromfile.weight), "table from the model");
        const int64_t nw = emb_vocab_num_words(fromfile.vocab);
        assert_int_equal(emb_vocab_num_words(frommodel.vocab), nw);
        for (int64_t i = 0; i < nw; i++) {
            size_t la, lb;
            const char *wa = emb_vocab_word(fromfile.vocab, i, &la);
            const char *wb = emb_vocab_word(frommodel.vocab, i, &lb);
            assert_int_equal(la, lb);
            assert_memory_equal(wa, wb, la);
            assert_int_equal(emb_vocab_count(fromfile.vocab, i),
                             emb_vocab_count(frommodel.vocab, i));
        }
        emb_vectors_release(&fromfile);
        emb_vectors_release(&frommodel);
    }
    assert_int_equal(emb_vocab_num_words(emb_fasttext_vocab(ft)), 4);
    EMB_EXPECT_ERR(emb_fasttext_vectors(NULL, 0, &vec), EMB_ERR_NULL, "must not be NULL");
    EMB_EXPECT_ERR(emb_fasttext_vectors(ft, -1, &vec), EMB_ERR_INVALID, "limit");
    emb_fasttext_free(ft);
    emb_fasttext_free(NULL);
    /* a model is not written as a table */
    emb_tensor w = emb_test_view(EMB_FLOAT32, want, 2, SHP(1, 4));
    emb_vectors_write_options wo = emb_vectors_write_options_default();
    wo.format = EMB_FORMAT_FASTTEXT_BIN;
    EMB_EXPECT_ERR(emb_vectors_write(path, &w, NULL, &wo), EMB_ERR_UNSUPPORTED, "written as .vec");
}

/* Each damage gives its status and a message naming the file and, for format errors, the
 * byte offset of the bad field; *out stays untouched. */
static void expect_bad(const buf *f, emb_status status, const char *needle) {
    const char *path = save(f, "bad.bin");
    emb_fasttext *ft = (emb_fasttext *)(uintptr_t)0x1234;
    EMB_EXPECT_ERR(emb_fasttext_read(path, &ft), status, needle);
    assert_true(ft == (emb_fasttext *)(uintptr_t)0x1234);
    if (!strstr(emb_errmsg(), path))
        fail_msg("message \"%s\" does not name %s", emb_errmsg(), path);
    if (status == EMB_ERR_FORMAT && !strstr(emb_errmsg(), ": offset "))
        fail_msg("message \"%s\" does not name the offset", emb_errmsg());
}

static void set_i32(buf *f, size_t at, int32_t v) {
    memcpy(f->b + at, &v, 4);
}
static void set_i64(buf *f, size_t at, int64_t v) {
    memcpy(f->b + at, &v, 8);
}

static void test_hostile(void **state) {
    (void)state;
    static buf f;
    layout L = build(&f, &SPEC);
    const size_t full = f.n;
    /* every truncation is refused */
    for (size_t cut = 0; cut < full; cut += (cut < L.input + 16 ? 1 : 37)) {
        f.n = cut;
        expect_bad(&f, EMB_ERR_FORMAT, ""); /* any message with the file and the offset */
    }
    f.n = full;
    build(&f, &SPEC);
    set_i32(&f, 0, 793712315);
    expect_bad(&f, EMB_ERR_FORMAT, "offset 0: not a fastText model");
    build(&f, &SPEC);
    set_i32(&f, 4, 13);
    expect_bad(&f, EMB_ERR_FORMAT, "offset 4: fastText model version 13");
    build(&f, &SPEC);
    set_i32(&f, L.args, 0);
    expect_bad(&f, EMB_ERR_FORMAT, "dim 0");
    build(&f, &SPEC);
    set_i32(&f, L.args + 8 * 4, 0); /* bucket 0 with n-grams */
    expect_bad(&f, EMB_ERR_FORMAT, "with 0 buckets");
    /* a dictionary that claims more entries than the file can hold: refused before any
     * allocation (2^31 - 1 entries would need gigabytes) */
    build(&f, &SPEC);
    set_i32(&f, L.dict, INT32_MAX - 1);
    set_i32(&f, L.dict + 4, INT32_MAX - 1);
    char needle[64];
    snprintf(needle, sizeof needle, "offset %zu: the dictionary claims 2147483646 entries", L.dict);
    expect_bad(&f, EMB_ERR_FORMAT, needle);
    build(&f, &SPEC);
    set_i32(&f, L.dict + 4, 3); /* words + labels != size */
    expect_bad(&f, EMB_ERR_FORMAT, "dictionary of 4 entries with 3 words and 0 labels");
    build(&f, &SPEC);
    set_i64(&f, L.dict + 12, -5);
    expect_bad(&f, EMB_ERR_FORMAT, "negative token count");
    static const char *const twice[] = {"</s>", "the", "cat", "the"};
    spec dup = SPEC;
    dup.words = twice;
    build(&f, &dup);
    expect_bad(&f, EMB_ERR_FORMAT, "a word that is already in the dictionary");
    /* the input matrix: rows that do not match nwords + bucket, or more floats than the file */
    build(&f, &SPEC);
    set_i64(&f, L.input, 55);
    expect_bad(&f, EMB_ERR_FORMAT,
               "the input matrix is 55 x 4; the dictionary and arguments need 54 x 4");
    build(&f, &SPEC);
    set_i32(&f, L.args + 8 * 4, 1000000000);
    set_i64(&f, L.input, 4 + 1000000000);
    expect_bad(&f, EMB_ERR_FORMAT, "the input matrix's 1000000004 x 4 floats do not fit");
    build(&f, &SPEC);
    set_i64(&f, L.input + 8, INT64_MAX / 2); /* dim mismatch, and an overflowing size */
    expect_bad(&f, EMB_ERR_FORMAT, "the input matrix is 54 x 4611686018427387903");
    build(&f, &SPEC);
    set_i64(&f, L.output, 3);
    expect_bad(&f, EMB_ERR_FORMAT, "the output matrix is 3 x 4");
    /* flags, quantized and pruned models */
    build(&f, &SPEC);
    f.b[L.quant] = 2;
    expect_bad(&f, EMB_ERR_FORMAT, "neither 0 nor 1");
    build(&f, &SPEC);
    f.b[L.quant] = 1;
    expect_bad(&f, EMB_ERR_UNSUPPORTED, "a quantized fastText model (.ftz)");
    build(&f, &SPEC);
    set_i64(&f, L.dict + 20, 0);
    expect_bad(&f, EMB_ERR_FORMAT, "a pruned dictionary without quantization");
    /* trailing bytes */
    build(&f, &SPEC);
    put(&f, "x", 1);
    expect_bad(&f, EMB_ERR_FORMAT, "1 bytes after the output matrix");
    /* entries: a label among the words, a negative count */
    build(&f, &SPEC);
    f.b[L.dict + 28 + 5 + 8] = 1; /* type of "</s>" */
    expect_bad(&f, EMB_ERR_FORMAT, "a label among the words");
    build(&f, &SPEC);
    set_i64(&f, L.dict + 28 + 5, -1);
    expect_bad(&f, EMB_ERR_FORMAT, "a negative word count");
    /* emb_vectors_read gives the same errors */
    emb_vectors v;
    EMB_EXPECT_ERR(emb_vectors_read(save(&f, "bad2.bin"), NULL, &v), EMB_ERR_FORMAT,
                   "a negative word count");
    EMB_EXPECT_ERR(emb_fasttext_read(NULL, NULL), EMB_ERR_NULL, "must not be NULL");
}

/* A corpus of words with disjoint n-grams (3 characters exactly) for subword training. */
static emb_w2v *train_small(emb_w2v_model model, int maxn, int epochs, emb_tensor *before) {
    static const char *const words[] = {"abc", "xyz", "pqr", "klm"};
    emb_vocab *v;
    EMB_OK_OR_FAIL(emb_vocab_create(&v));
    int32_t ids[400];
    int64_t counts[4] = {0, 0, 0, 0};
    uint64_t r = 7;
    for (int i = 0; i < 400; i++) {
        ids[i] = i % 20 == 19 ? -1 : (int32_t)(emb_test_next_u64(&r) % 4);
        if (ids[i] >= 0) counts[ids[i]]++;
    }
    for (int k = 0; k < 4; k++)
        EMB_OK_OR_FAIL(emb_vocab_add(v, words[k], 3, counts[k], NULL, NULL));
    emb_w2v_options o = emb_w2v_options_default(model);
    o.dim = 8, o.window = 2, o.negative = 2, o.sample = 0, o.min_count = 1, o.epochs = epochs,
    o.threads = 1;
    o.minn = 3, o.maxn = maxn, o.bucket = 1000003;
    emb_w2v *w;
    EMB_OK_OR_FAIL(emb_w2v_create_from_ids(&o, v, ids, 400, &w));
    emb_vocab_free(v);
    if (before) {
        emb_tensor in;
        EMB_OK_OR_FAIL(emb_embedding_weight(emb_w2v_input_embedding(w), &in));
        EMB_OK_OR_FAIL(emb_tensor_alloc(before, EMB_FLOAT32, 2, in.shape));
        memcpy(before->data, in.data, (size_t)emb_tensor_numel(&in) * sizeof(float));
    }
    EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
    return w;
}

/* Training with subwords: each update of a word's input reaches its own row and every one
 * of its n-gram rows by the same amount (fastText's update), no other row changes; the
 * model emb writes reads back with the same vector for seen and unseen words, bit for bit;
 * two 1-thread runs are identical. */
static void test_train_subwords(void **state) {
    (void)state;
    for (int model = 0; model < 2; model++) {
        emb_tensor before;
        emb_w2v *w = train_small((emb_w2v_model)model, 3, 2, &before);
        emb_tensor in;
        EMB_OK_OR_FAIL(emb_embedding_weight(emb_w2v_input_embedding(w), &in));
        assert_int_equal(in.shape[0], 4 + 1000003);
        emb_tensor view;
        EMB_OK_OR_FAIL(emb_w2v_vectors(w, &view));
        assert_int_equal(view.shape[0], 4);
        const float *a = in.data, *b = before.data;
        const char *path = save(&(buf){.n = 0}, "trained.bin");
        EMB_OK_OR_FAIL(emb_w2v_save_fasttext(w, path));
        emb_fasttext *ft;
        EMB_OK_OR_FAIL(emb_fasttext_read(path, &ft));
        int64_t changed = 0;
        for (int64_t wd = 0; wd < 4; wd++) {
            size_t len;
            const char *word = emb_vocab_word(emb_w2v_vocab(w), wd, &len);
            int64_t rows[16];
            int64_t n = emb_fasttext_subword_rows(ft, word, len, rows, 16);
            assert_int_equal(n, 1 + 3); /* the word, "<ab", "abc", "bc>" */
            assert_int_equal(rows[0], wd);
            float d0[8];
            for (int j = 0; j < 8; j++) d0[j] = a[rows[0] * 8 + j] - b[rows[0] * 8 + j];
            bool moved = false;
            for (int j = 0; j < 8; j++) moved = moved || d0[j] != 0.0f;
            assert_true(moved);
            for (int64_t k = 1; k < n; k++) {
                float dk[8];
                for (int j = 0; j < 8; j++) dk[j] = a[rows[k] * 8 + j] - b[rows[k] * 8 + j];
                /* the same sum of updates, added to differently initialised rows: equal up to
                 * the rounding of each addition */
                EMB_ASSERT_CLOSE(dk, d0, 8, "an n-gram row's change equals its word row's");
            }
            changed += n;
            /* seen: the trainer's and the reader's vectors agree bit for bit */
            float x[8], y[8];
            EMB_OK_OR_FAIL(emb_w2v_word_vector(w, word, len, x));
            EMB_OK_OR_FAIL(emb_fasttext_word_vector(ft, word, len, y));
            EMB_ASSERT_EXACT(x, y, 8, "vector of a trained word");
        }
        /* no other row changed */
        int64_t diff = 0;
        for (int64_t r = 0; r < in.shape[0]; r++)
            diff += memcmp(a + r * 8, b + r * 8, 8 * sizeof(float)) != 0;
        assert_int_equal(diff, changed);
        /* unseen words: the same vector from the trainer and the file */
        const char *unseen[] = {"abcxyz", "zz", "pq\xc3\xa9r"};
        for (int k = 0; k < 3; k++) {
            float x[8], y[8];
            EMB_OK_OR_FAIL(emb_w2v_word_vector(w, unseen[k], strlen(unseen[k]), x));
            EMB_OK_OR_FAIL(emb_fasttext_word_vector(ft, unseen[k], strlen(unseen[k]), y));
            EMB_ASSERT_EXACT(x, y, 8, "vector of an unseen word");
        }
        /* the table of word vectors is emb_w2v_word_vector of each word */
        emb_tensor all;
        EMB_OK_OR_FAIL(emb_w2v_word_vectors(w, &all));
        for (int64_t wd = 0; wd < 4; wd++) {
            size_t len;
            const char *word = emb_vocab_word(emb_w2v_vocab(w), wd, &len);
            float x[8];
            EMB_OK_OR_FAIL(emb_w2v_word_vector(w, word, len, x));
            EMB_ASSERT_EXACT((const float *)all.data + wd * 8, x, 8, "row of the word vectors");
        }
        /* a second 1-thread run is identical */
        emb_w2v *w2 = train_small((emb_w2v_model)model, 3, 2, NULL);
        emb_tensor in2;
        EMB_OK_OR_FAIL(emb_embedding_weight(emb_w2v_input_embedding(w2), &in2));
        assert_memory_equal(in.data, in2.data, (size_t)emb_tensor_numel(&in) * sizeof(float));
        emb_w2v_free(w2);
        emb_tensor_release(&all);
        emb_tensor_release(&before);
        emb_fasttext_free(ft);
        emb_w2v_free(w);
    }
    /* without subwords the word vector is the row, and an unseen word has none */
    emb_w2v *w = train_small(EMB_W2V_SKIPGRAM, 0, 1, NULL);
    float x[8];
    emb_tensor view;
    EMB_OK_OR_FAIL(emb_w2v_vectors(w, &view));
    EMB_OK_OR_FAIL(emb_w2v_word_vector(w, "xyz", 3, x));
    EMB_ASSERT_EXACT(x, (const float *)view.data + emb_vocab_find(emb_w2v_vocab(w), "xyz", 3) * 8,
                     8, "row");
    EMB_EXPECT_ERR(emb_w2v_word_vector(w, "zzz", 3, x), EMB_ERR_INVALID, "not in the vocabulary");
    emb_w2v_free(w);
    /* options */
    emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    assert_int_equal(o.maxn, 0);
    assert_int_equal(o.minn, 3);
    assert_int_equal(o.bucket, 2000000);
    o.maxn = 6, o.minn = 7;
    EMB_EXPECT_ERR(emb_w2v_options_check(&o), EMB_ERR_INVALID,
                   "minn must be in [1, maxn = 6], got 7");
    o.minn = 3, o.bucket = 0;
    EMB_EXPECT_ERR(emb_w2v_options_check(&o), EMB_ERR_INVALID, "bucket must be in [1, 2147483646]");
    o.bucket = 10, o.maxn = 101;
    EMB_EXPECT_ERR(emb_w2v_options_check(&o), EMB_ERR_INVALID, "maxn must be in [0, 100]");
}

/* A corpus file for the checkpoint test: words sharing n-grams ("cat", "cats", "catalog"),
 * 600 lines. */
static const char *subword_corpus(void) {
    static char path[512];
    snprintf(path, sizeof path, "%s/subword-corpus.txt", tmpdir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    static const char *const words[] = {"cat", "cats", "catalog", "dog",  "dogs",   "doghouse",
                                        "the", "red",  "reddish", "blue", "bluish", "house"};
    uint64_t r = 11;
    for (int line = 0; line < 600; line++)
        for (int i = 0; i < 14; i++)
            fprintf(f, "%s%c", words[emb_test_next_u64(&r) % 12], i == 13 ? '\n' : ' ');
    fclose(f);
    return path;
}

/* Copies of both tables, the input one with its n-gram buckets. */
static void tables_of(const emb_w2v *w, emb_tensor *in, emb_tensor *out) {
    emb_tensor a, b;
    EMB_OK_OR_FAIL(emb_embedding_weight(emb_w2v_input_embedding(w), &a));
    EMB_OK_OR_FAIL(emb_embedding_weight(emb_w2v_output_embedding(w), &b));
    EMB_OK_OR_FAIL(emb_tensor_alloc(in, EMB_FLOAT32, 2, a.shape));
    EMB_OK_OR_FAIL(emb_tensor_alloc(out, EMB_FLOAT32, 2, b.shape));
    memcpy(in->data, a.data, (size_t)emb_tensor_numel(&a) * sizeof(float));
    memcpy(out->data, b.data, (size_t)emb_tensor_numel(&b) * sizeof(float));
}

static int cancel_at(const emb_w2v_progress *p, void *user) {
    (void)p;
    return --*(int *)user == 0;
}

/* Checkpoints of subword runs: a 1-thread run cancelled through the progress callback,
 * checkpointed and resumed in a new emb_w2v ends with the uninterrupted run's tables bit for
 * bit, the n-gram buckets included (skip-gram and CBOW); the subword options are part of
 * the checkpoint's identity; a checkpoint without subwords does not resume a subword run;
 * a subword model cannot be continued. */
static void test_checkpoint_subwords(void **state) {
    (void)state;
    const char *corpus = subword_corpus();
    char ck[600], plain[600];
    snprintf(ck, sizeof ck, "%s/sub.ckpt", tmpdir);
    snprintf(plain, sizeof plain, "%s/plain.ckpt", tmpdir);
    for (int model = 0; model < 2; model++) {
        emb_w2v_options o = emb_w2v_options_default((emb_w2v_model)model);
        o.dim = 8, o.min_count = 1, o.epochs = 30, o.threads = 1, o.seed = 5;
        o.minn = 2, o.maxn = 4, o.bucket = 5003;
        emb_w2v *w;
        EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
        EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
        emb_tensor want_in, want_out;
        tables_of(w, &want_in, &want_out);
        assert_int_equal(want_in.shape[0], emb_vocab_num_words(emb_w2v_vocab(w)) + 5003);
        emb_w2v_free(w);
        /* cancelled after 3 rounds, checkpointed, resumed in a new run */
        EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
        int calls = 3;
        EMB_EXPECT_ERR(emb_w2v_train(w, cancel_at, &calls), EMB_ERR_CANCELLED, "cancelled");
        const int64_t done = emb_w2v_words_done(w);
        assert_true(done > 0 && done < emb_w2v_corpus_tokens(w) * o.epochs);
        EMB_OK_OR_FAIL(emb_w2v_save_checkpoint(w, ck));
        emb_w2v_free(w);
        EMB_OK_OR_FAIL(emb_w2v_resume(&o, corpus, ck, &w));
        assert_int_equal(emb_w2v_words_done(w), done);
        EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
        emb_tensor got_in, got_out;
        tables_of(w, &got_in, &got_out);
        assert_int_equal(emb_tensor_numel(&got_in), emb_tensor_numel(&want_in));
        assert_memory_equal(got_in.data, want_in.data,
                            (size_t)emb_tensor_numel(&want_in) * sizeof(float));
        assert_memory_equal(got_out.data, want_out.data,
                            (size_t)emb_tensor_numel(&want_out) * sizeof(float));
        emb_w2v_free(w);
        emb_tensor_release(&got_in), emb_tensor_release(&got_out);
        emb_tensor_release(&want_in), emb_tensor_release(&want_out);
        /* the subword options are part of the identity */
        emb_w2v_options o2 = o;
        o2.bucket = 5009;
        EMB_EXPECT_ERR(emb_w2v_resume(&o2, corpus, ck, &w), EMB_ERR_FORMAT,
                       "was written with bucket 5003, but this run has bucket 5009");
        o2 = o, o2.minn = 3;
        EMB_EXPECT_ERR(emb_w2v_resume(&o2, corpus, ck, &w), EMB_ERR_FORMAT,
                       "was written with minn 2, but this run has minn 3");
        o2 = o, o2.maxn = 0;
        EMB_EXPECT_ERR(emb_w2v_resume(&o2, corpus, ck, &w), EMB_ERR_FORMAT,
                       "was written with maxn 4, but this run has maxn 0");
        /* a checkpoint of a run without subwords, asked to resume with them */
        EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o2, corpus, &w));
        EMB_OK_OR_FAIL(emb_w2v_save_checkpoint(w, plain));
        emb_w2v_free(w);
        EMB_EXPECT_ERR(emb_w2v_resume(&o, corpus, plain, &w), EMB_ERR_FORMAT,
                       "was written with maxn 0, but this run has maxn 4");
    }
}

/* Continued training of a subword model (emb_w2v_continue): the run takes the model's minn,
 * maxn and bucket whatever its own options say, keeps the words' rows and the n-gram bucket
 * rows as they were (so an unseen word's vector is the model's), adds the new words, and
 * trains them; a model without subwords continues without them. */
static void test_continue_subwords(void **state) {
    (void)state;
    const char *corpus = subword_corpus();
    char ck[600], more[600];
    snprintf(ck, sizeof ck, "%s/sub-model.ckpt", tmpdir);
    snprintf(more, sizeof more, "%s/more.txt", tmpdir);
    FILE *f = fopen(more, "wb");
    assert_non_null(f);
    for (int line = 0; line < 200; line++) /* "catnip" is new; "dogs" and "red" are known */
        fprintf(f, "%s\n", line % 2 ? "catnip dogs red catnip" : "red catnip the cats");
    fclose(f);
    const char unseen[] = "doggish";
    emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    o.dim = 8, o.min_count = 1, o.epochs = 5, o.threads = 1, o.seed = 5;
    o.minn = 2, o.maxn = 4, o.bucket = 5003;
    emb_w2v *w, *c;
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
    EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
    EMB_OK_OR_FAIL(emb_w2v_save_checkpoint(w, ck));
    emb_tensor old_in, old_out;
    tables_of(w, &old_in, &old_out);
    const int64_t V0 = emb_vocab_num_words(emb_w2v_vocab(w)), B = 5003, D = 8;
    float want_unseen[8], got_unseen[8], before[8], after[8];
    EMB_OK_OR_FAIL(emb_w2v_word_vector(w, unseen, strlen(unseen), want_unseen));
    emb_w2v_free(w);
    /* this run asks for no subwords and another dim: the model's are used */
    emb_w2v_options o2 = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    o2.dim = 32, o2.min_count = 5, o2.epochs = 3, o2.threads = 1, o2.seed = 9;
    EMB_OK_OR_FAIL(emb_w2v_continue(&o2, ck, more, &c));
    const emb_w2v_options got = emb_w2v_options_of(c);
    assert_int_equal(got.dim, 8);
    assert_int_equal(got.minn, 2);
    assert_int_equal(got.maxn, 4);
    assert_int_equal(got.bucket, 5003);
    const emb_vocab *v = emb_w2v_vocab(c);
    const int64_t V1 = emb_vocab_num_words(v), cat = emb_vocab_find(v, "catnip", 6);
    assert_int_equal(V1, V0 + 1);
    assert_int_equal(cat, V0); /* the new word after the model's */
    emb_tensor in, out;
    tables_of(c, &in, &out);
    assert_int_equal(in.shape[0], V1 + B);
    const float *a = in.data, *b = old_in.data;
    /* the words' rows, then the buckets, as the model had them; the output rows too */
    assert_memory_equal(a, b, (size_t)(V0 * D) * sizeof(float));
    assert_memory_equal(a + V1 * D, b + V0 * D, (size_t)(B * D) * sizeof(float));
    assert_memory_equal(out.data, old_out.data, (size_t)(V0 * D) * sizeof(float));
    for (int64_t k = 0; k < D; k++) {
        assert_true(fabsf(a[cat * D + k]) <= 0.5f / 8);           /* drawn as a fresh run's */
        assert_true(((const float *)out.data)[cat * D + k] == 0); /* output rows start at 0 */
    }
    /* an unseen word is the mean of its n-grams' rows: the model's vector, bit for bit */
    EMB_OK_OR_FAIL(emb_w2v_word_vector(c, unseen, strlen(unseen), got_unseen));
    assert_memory_equal(got_unseen, want_unseen, sizeof want_unseen);
    EMB_OK_OR_FAIL(emb_w2v_word_vector(c, "catnip", 6, before));
    EMB_OK_OR_FAIL(emb_w2v_train(c, NULL, NULL));
    EMB_OK_OR_FAIL(emb_w2v_word_vector(c, "catnip", 6, after));
    bool moved = false;
    for (int k = 0; k < 8; k++) {
        assert_true(isfinite(after[k]));
        moved |= after[k] != before[k];
    }
    assert_true(moved);
    emb_w2v_free(c);
    emb_tensor_release(&in), emb_tensor_release(&out);
    emb_tensor_release(&old_in), emb_tensor_release(&old_out);
    /* a model without subwords continues without them, whatever this run asks */
    o.maxn = 0;
    EMB_OK_OR_FAIL(emb_w2v_create_from_file(&o, corpus, &w));
    EMB_OK_OR_FAIL(emb_w2v_save_checkpoint(w, ck));
    emb_w2v_free(w);
    o2.maxn = 6, o2.minn = 3;
    EMB_OK_OR_FAIL(emb_w2v_continue(&o2, ck, more, &c));
    assert_int_equal(emb_w2v_options_of(c).maxn, 0);
    tables_of(c, &in, &out);
    assert_int_equal(in.shape[0], emb_vocab_num_words(emb_w2v_vocab(c)));
    emb_tensor_release(&in), emb_tensor_release(&out);
    emb_w2v_free(c);
}

/* emb_fasttext_from_w2v and emb_fasttext_take_w2v: the model in memory is what the file
 * emb_w2v_save_fasttext writes reads back as (arguments, vocabulary with counts, n-gram rows,
 * vectors of seen and unseen words, bit for bit), and it outlives the trainer; with and
 * without subwords. The model that took the trainer's tables writes that file again, byte
 * for byte; a failed take leaves the trainer as it was. */
static void test_w2v_as_model(void **state) {
    (void)state;
    for (int run = 0; run < 4; run++) {
        const int maxn = run % 2 ? 4 : 0, take = run >= 2;
        emb_w2v *w = train_small(EMB_W2V_SKIPGRAM, maxn, 2, NULL);
        const char *path = save(&(buf){.n = 0}, "as_model.bin");
        EMB_OK_OR_FAIL(emb_w2v_save_fasttext(w, path));
        emb_fasttext *file, *mem = (emb_fasttext *)0x1;
        EMB_OK_OR_FAIL(emb_fasttext_read(path, &file));
        if (take) {
            EMB_EXPECT_ERR(emb_fasttext_take_w2v(w, NULL), EMB_ERR_NULL, "out");
            emb_tensor t;
            EMB_OK_OR_FAIL(emb_w2v_vectors(w, &t));         /* still whole */
            EMB_OK_OR_FAIL(emb_fasttext_take_w2v(w, &mem)); /* w is gone */
            char again[600], cmd[1300];
            snprintf(again, sizeof again, "%s/taken.bin", tmpdir);
            EMB_OK_OR_FAIL(emb_fasttext_save(mem, again));
            snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", path, again);
            assert_int_equal(system(cmd), 0);
        } else {
            EMB_OK_OR_FAIL(emb_fasttext_from_w2v(w, &mem));
            emb_w2v_free(w);
        }
        emb_fasttext_args a = emb_fasttext_args_of(file), b = emb_fasttext_args_of(mem);
        assert_memory_equal(&a, &b, sizeof a);
        assert_int_equal(b.maxn, maxn);
        const emb_vocab *va = emb_fasttext_vocab(file), *vb = emb_fasttext_vocab(mem);
        assert_int_equal(emb_vocab_num_words(va), 4);
        assert_int_equal(emb_vocab_num_words(vb), 4);
        const char *words[] = {"abc", "xyz", "pqr", "klm", "abcxyz", "zz", "pq\xc3\xa9r"};
        for (int k = 0; k < 7; k++) {
            size_t n = strlen(words[k]);
            if (k < 4) {
                size_t la, lb;
                const char *x = emb_vocab_word(va, k, &la), *y = emb_vocab_word(vb, k, &lb);
                assert_int_equal(la, lb);
                assert_memory_equal(x, y, la);
                assert_int_equal(emb_vocab_count(va, k), emb_vocab_count(vb, k));
            }
            int64_t ra[32], rb[32];
            int64_t na = emb_fasttext_subword_rows(file, words[k], n, ra, 32),
                    nb = emb_fasttext_subword_rows(mem, words[k], n, rb, 32);
            assert_int_equal(na, nb);
            if (na) assert_memory_equal(ra, rb, (size_t)na * sizeof(int64_t));
            float x[8], y[8];
            EMB_OK_OR_FAIL(emb_fasttext_word_vector(file, words[k], n, x));
            EMB_OK_OR_FAIL(emb_fasttext_word_vector(mem, words[k], n, y));
            EMB_ASSERT_EXACT(x, y, 8, "a word's vector from memory and from the file");
        }
        emb_vectors ta, tb;
        EMB_OK_OR_FAIL(emb_fasttext_vectors(file, 0, &ta));
        EMB_OK_OR_FAIL(emb_fasttext_vectors(mem, 0, &tb));
        assert_int_equal(emb_tensor_numel(&ta.weight), emb_tensor_numel(&tb.weight));
        assert_memory_equal(ta.weight.data, tb.weight.data,
                            (size_t)emb_tensor_numel(&ta.weight) * sizeof(float));
        emb_vectors_release(&ta);
        emb_vectors_release(&tb);
        emb_fasttext_free(file);
        emb_fasttext_free(mem);
    }
    assert_int_equal(emb_fasttext_from_w2v(NULL, NULL), EMB_ERR_NULL);
    emb_fasttext *ft = (emb_fasttext *)0x1;
    EMB_EXPECT_ERR(emb_fasttext_take_w2v(NULL, &ft), EMB_ERR_NULL, "w2v");
    assert_ptr_equal(ft, (emb_fasttext *)0x1);
}

/* emb_fasttext_save writes back what it read byte for byte (the layout fastText 0.9.2
 * writes), and what it writes reads back; a model emb trained writes as emb_w2v_save_fasttext
 * writes it. */
static void test_save_model(void **state) {
    (void)state;
    static buf f, g;
    layout L = build(&f, &SPEC);
    emb_fasttext *ft;
    char again[600];
    snprintf(again, sizeof again, "%s/again.bin", tmpdir);
    /* and with the output's quantization flag set after a dense input (fastText then reads
     * the output dense, and writes the flag back as it read it) */
    for (int qout = 0; qout < 2; qout++) {
        f.b[L.output - 1] = (unsigned char)qout;
        EMB_OK_OR_FAIL(emb_fasttext_read(save(&f, "orig.bin"), &ft));
        EMB_OK_OR_FAIL(emb_fasttext_save(ft, again));
        FILE *fp = fopen(again, "rb");
        assert_non_null(fp);
        g.n = fread(g.b, 1, sizeof g.b, fp);
        fclose(fp);
        assert_int_equal(g.n, f.n);
        assert_memory_equal(g.b, f.b, f.n);
        emb_fasttext_free(ft);
    }
    EMB_EXPECT_ERR(emb_fasttext_save(NULL, again), EMB_ERR_NULL, "ft");
    /* a trained model, in memory (emb_fasttext_from_w2v), saved: the trainer's own file */
    emb_w2v *w = train_small(EMB_W2V_CBOW, 4, 1, NULL);
    char mine[600];
    snprintf(mine, sizeof mine, "%s/trainer.bin", tmpdir);
    EMB_OK_OR_FAIL(emb_w2v_save_fasttext(w, mine));
    EMB_OK_OR_FAIL(emb_fasttext_from_w2v(w, &ft));
    emb_w2v_free(w);
    EMB_OK_OR_FAIL(emb_fasttext_save(ft, again));
    emb_fasttext_free(ft);
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", mine, again);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_and_vectors),  cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_train_subwords),    cmocka_unit_test(test_checkpoint_subwords),
        cmocka_unit_test(test_continue_subwords), cmocka_unit_test(test_w2v_as_model),
        cmocka_unit_test(test_save_model),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
