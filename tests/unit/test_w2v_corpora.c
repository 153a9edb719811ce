/* Unit tests of the word2vec corpus entry points over several paths (include/emb/word2vec.h,
 * emb_w2v_create_from_files and its _resume/_with_vocab/_continue siblings): arguments,
 * a directory against the list of its files and against the concatenated text, gzip data
 * recognised by content, truncated data, and checkpoints over a list. The expected results
 * are those of the same run over the plain concatenated file. */
#include "emb_test.h"

#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

static int setup_dir(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/emb_w2v_corpora_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp(const char *name) {
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void put_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    assert_true(len > 0);
    rewind(f);
    char *p = malloc((size_t)len);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* the gzip data (python3: gzip.compress(TEXT, mtime=0)) of TEXT */
#define TEXT                                                                                       \
    "the cat sat\nthe dog sat\nthe cat ran\nthe cat sat\nthe dog sat\nthe cat ran\n"               \
    "the cat sat\nthe dog sat\nthe cat ran\n"
static const unsigned char text_gz[] = {
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x2b, 0xc9, 0x48, 0x55, 0x48, 0x4e,
    0x2c, 0x51, 0x28, 0x4e, 0x2c, 0xe1, 0x2a, 0x01, 0xb2, 0x53, 0xf2, 0xd3, 0xe1, 0x6c, 0x90, 0x78,
    0x51, 0x62, 0x1e, 0x9c, 0x4d, 0xa9, 0x1a, 0x00, 0x68, 0x43, 0x98, 0x84, 0x6c, 0x00, 0x00, 0x00};

static emb_w2v_options opts(void) {
    emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    o.dim = 6, o.min_count = 1, o.threads = 1, o.epochs = 3, o.window = 2, o.seed = 11;
    return o;
}

/* The trained vectors of a run over paths (malloc'd), and its vocabulary size. */
static float *train_paths(const char *const *paths, size_t n, int64_t *V) {
    emb_w2v_options o = opts();
    emb_w2v *w = NULL;
    EMB_OK_OR_FAIL(emb_w2v_create_from_files(&o, paths, n, &w));
    EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_w2v_vectors(w, &t));
    *V = t.shape[0];
    size_t nb = emb_tensor_nbytes(&t);
    float *x = malloc(nb);
    assert_non_null(x);
    memcpy(x, t.data, nb);
    emb_w2v_free(w);
    return x;
}

static void test_arguments(void **state) {
    (void)state;
    emb_w2v_options o = opts();
    emb_w2v *w = (emb_w2v *)0x1;
    put_file(tmp("a.txt"), TEXT, sizeof TEXT - 1);
    const char *none[1] = {NULL};
    const char *a = tmp("a.txt");
    const char *twice[3] = {"-", a, "-"};
    EMB_EXPECT_ERR(emb_w2v_create_from_files(&o, NULL, 1, &w), EMB_ERR_NULL, "paths");
    EMB_EXPECT_ERR(emb_w2v_create_from_files(&o, &a, 0, &w), EMB_ERR_INVALID, "no corpus file");
    EMB_EXPECT_ERR(emb_w2v_create_from_files(&o, none, 1, &w), EMB_ERR_NULL, "paths");
    EMB_EXPECT_ERR(emb_w2v_create_from_files(&o, twice, 3, &w), EMB_ERR_INVALID, "given twice");
    mkdir(tmp("empty"), 0700);
    put_file(tmp("empty/.hidden"), TEXT, sizeof TEXT - 1);
    const char *empty = tmp("empty");
    EMB_EXPECT_ERR(emb_w2v_create_from_files(&o, &empty, 1, &w), EMB_ERR_IO,
                   "a directory without files");
    assert_ptr_equal(w, (emb_w2v *)0x1);
}

static void test_directory_is_its_files(void **state) {
    (void)state;
    /* one file of the text, and the text in three files of a directory (one cut mid-line,
     * which the file's end turns into a line end), plus a hidden file that is skipped */
    const char *whole = "the cat sat\nthe dog\nthe cat ran\nsat\n";
    put_file(tmp("whole.txt"), whole, strlen(whole));
    mkdir(tmp("d"), 0700);
    mkdir(tmp("d/sub"), 0700);
    put_file(tmp("d/1.txt"), "the cat sat\nthe dog", 19);
    put_file(tmp("d/sub/x"), "sat\n", 4);
    put_file(tmp("d/2.txt"), "", 0);
    put_file(tmp("d/3.txt"), "the cat ran\n", 12); /* "d/3.txt" < "d/sub/x" */
    put_file(tmp("d/.seen-not"), "hidden hidden\n", 14);
    int64_t V1, V2, V3;
    const char *p1[1] = {tmp("whole.txt")};
    const char *p2[1] = {tmp("d")};
    const char *p3[4] = {tmp("d/1.txt"), tmp("d/2.txt"), tmp("d/3.txt"), tmp("d/sub/x")};
    float *want = train_paths(p1, 1, &V1);
    float *dir = train_paths(p2, 1, &V2);
    float *list = train_paths(p3, 4, &V3);
    assert_int_equal(V1, 5);
    assert_int_equal(V2, V1);
    assert_int_equal(V3, V1);
    assert_memory_equal(dir, want, (size_t)V1 * 6 * sizeof(float));
    assert_memory_equal(list, want, (size_t)V1 * 6 * sizeof(float));
    free(want), free(dir), free(list);
}

static void test_gzip_by_content(void **state) {
    (void)state;
    put_file(tmp("plain"), TEXT, sizeof TEXT - 1);
    put_file(tmp("gz-named.txt"), text_gz, sizeof text_gz);
    int64_t V1, V2;
    const char *plain = tmp("plain"), *gz = tmp("gz-named.txt");
    float *want = train_paths(&plain, 1, &V1);
    emb_w2v_options o = opts();
    emb_w2v *w = (emb_w2v *)0x1;
#ifdef EMB_HAVE_ZLIB
    float *got = train_paths(&gz, 1, &V2);
    assert_int_equal(V1, V2);
    assert_memory_equal(got, want, (size_t)V1 * 6 * sizeof(float));
    free(got);
    /* at 2 threads the work is split on the token ids, so identically: the untrained runs'
     * checkpoints (options, each thread's range and random state, vocabulary, tables) are the
     * same bytes */
    o.threads = 2;
    const char *ck[2] = {tmp("plain.ckpt"), tmp("gz.ckpt")};
    const char *src[2] = {plain, gz};
    for (int i = 0; i < 2; i++) {
        emb_w2v *r;
        EMB_OK_OR_FAIL(emb_w2v_create_from_files(&o, &src[i], 1, &r));
        assert_int_equal(emb_w2v_options_of(r).threads, 2);
        EMB_OK_OR_FAIL(emb_w2v_save_checkpoint(r, ck[i]));
        emb_w2v_free(r);
    }
    size_t n0, n1;
    char *c0 = read_all(ck[0], &n0), *c1 = read_all(ck[1], &n1);
    /* but for the file's name in the list of corpus files (docs/word2vec.md, version 4):
     * magic, version, 17 options and 64 bytes of subword and phrase options, then the list
     * (one file: its name's length and name, its text's bytes and fingerprint), then the
     * rest; the checksum differs with the name */
    const size_t head = 16 + 17 * 8 + 64, l0 = strlen(plain), l1 = strlen(gz);
    assert_int_equal(n0 - l0, n1 - l1);
    assert_memory_equal(c0, c1, head);
    assert_int_equal(c0[head], 1);
    uint64_t len0, len1; /* little-endian on the machines emb runs on */
    memcpy(&len0, c0 + head + 8, 8), memcpy(&len1, c1 + head + 8, 8);
    assert_int_equal(len0, l0);
    assert_int_equal(len1, l1);
    assert_memory_equal(c0 + head + 16 + l0, c1 + head + 16 + l1, 16); /* bytes, fingerprint */
    assert_memory_equal(c0 + head + 32 + l0, c1 + head + 32 + l1, n0 - head - 32 - l0 - 8);
    free(c0), free(c1);
    put_file(tmp("cut.gz"), text_gz, sizeof text_gz - 5);
    const char *cut = tmp("cut.gz");
    EMB_EXPECT_ERR(emb_w2v_create_from_files(&o, &cut, 1, &w), EMB_ERR_FORMAT,
                   "gzip data is truncated: the file ends at byte 43");
#else
    (void)V2;
    EMB_EXPECT_ERR(emb_w2v_create_from_files(&o, &gz, 1, &w), EMB_ERR_UNSUPPORTED,
                   "built without zlib");
#endif
    assert_ptr_equal(w, (emb_w2v *)0x1);
    free(want);
}

static void test_list_checkpoint_and_siblings(void **state) {
    (void)state;
    put_file(tmp("p.txt"), "the cat sat\nthe dog sat\n", 24);
    put_file(tmp("q.txt"), "the cat ran\na dog ran\n", 22);
    const char *pq[2] = {tmp("p.txt"), tmp("q.txt")};
    const char *qp[2] = {tmp("q.txt"), tmp("p.txt")};
    emb_w2v_options o = opts();
    emb_w2v *w = NULL, *r = NULL;
    EMB_OK_OR_FAIL(emb_w2v_create_from_files(&o, pq, 2, &w));
    assert_int_equal(emb_w2v_corpus_tokens(w), 12);
    const char *ck = tmp("run.ckpt");
    EMB_OK_OR_FAIL(emb_w2v_save_checkpoint(w, ck));
    EMB_OK_OR_FAIL(emb_w2v_resume_files(&o, pq, 2, ck, &r));
    emb_w2v_free(r);
    r = (emb_w2v *)0x1;
    EMB_EXPECT_ERR(emb_w2v_resume_files(&o, qp, 2, ck, &r), EMB_ERR_FORMAT,
                   "written for another corpus");
    assert_ptr_equal(r, (emb_w2v *)0x1);
    /* a vocabulary given: the list's tokens that are in it */
    emb_vocab *v;
    EMB_OK_OR_FAIL(emb_vocab_create(&v));
    EMB_OK_OR_FAIL(emb_vocab_add(v, "cat", 3, 5, NULL, NULL));
    EMB_OK_OR_FAIL(emb_vocab_add(v, "ran", 3, 2, NULL, NULL));
    EMB_OK_OR_FAIL(emb_w2v_create_with_vocab_files(&o, v, pq, 2, &r));
    assert_int_equal(emb_w2v_corpus_tokens(r), 4);
    emb_w2v_free(r);
    emb_vocab_free(v);
    /* continued training on a list grows the vocabulary by its new words */
    EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
    EMB_OK_OR_FAIL(emb_w2v_save_checkpoint(w, ck));
    put_file(tmp("new.txt"), "a bird sat\n", 11);
    const char *more[2] = {tmp("q.txt"), tmp("new.txt")};
    EMB_OK_OR_FAIL(emb_w2v_continue_files(&o, ck, more, 2, &r));
    assert_int_equal(emb_vocab_num_words(emb_w2v_vocab(r)), 7); /* + bird */
    assert_int_equal(emb_w2v_corpus_tokens(r), 9);
    emb_w2v_free(r);
    emb_w2v_free(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_directory_is_its_files),
        cmocka_unit_test(test_gzip_by_content),
        cmocka_unit_test(test_list_checkpoint_and_siblings),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
