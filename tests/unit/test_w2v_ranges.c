/* Unit tests of the word2vec corpus read by several threads (src/w2v/corpus.c, a plain file
 * cut into byte ranges at whitespace): the vocabulary (words, counts, order), the token ids,
 * the lenient counts, the files' fingerprints and the errors must be those of one thread
 * reading the file, whatever the cuts. The ranges' minimum size is lowered to one byte so
 * that small crafted files are cut, and every thread count from 2 to 7 moves the cuts. */
#include "emb_test.h"
#include "emb_test_files.h"

#include <unistd.h>

#include "w2v/w2v_internal.h"

/* the group's teardown: the scratch folder, and the ranges' default size back */
static int teardown_dir(void **state) {
    emb__w2v_range_min = (size_t)1 << 20;
    return tmp_teardown(state);
}

/* What one read gave: its status and message, or its vocabulary, ids and counts. */
typedef struct {
    emb_status st;
    char msg[512];
    emb_vocab *v;
    int32_t *ids;
    int64_t n;
    int64_t skipped[2];
    emb__corpus_files files;
} outcome;

static outcome read_with(const emb_w2v_options *base, int threads, const char *const *paths,
                         size_t np) {
    emb_w2v_options o = *base;
    o.threads = threads;
    outcome r;
    memset(&r, 0, sizeof r);
    emb__w2v_ids ids;
    emb_clear_error();
    r.st = emb__w2v_read_paths(&o, paths, np, &r.v, &ids, r.skipped, &r.files);
    snprintf(r.msg, sizeof r.msg, "%s", emb_errmsg());
    if (r.st) return r;
    r.n = ids.n;
    r.ids = malloc((size_t)(ids.n > 0 ? ids.n : 1) * sizeof(int32_t));
    assert_non_null(r.ids);
    emb__w2v_cursor c;
    EMB_OK_OR_FAIL(emb__w2v_cursor_init(&c, &ids));
    for (int64_t i = 0; i < ids.n; i++) {
        r.ids[i] = emb__w2v_id_at(&c, i);
        assert_true(r.ids[i] != INT32_MIN);
    }
    emb__w2v_cursor_free(&c);
    emb__w2v_ids_close(&ids);
    return r;
}

static void outcome_free(outcome *r) {
    emb_vocab_free(r->v);
    free(r->ids);
    emb__corpus_files_free(&r->files);
}

static void expect_same(const outcome *a, const outcome *b, const char *what, int threads) {
    if (a->st != b->st || strcmp(a->msg, b->msg) != 0)
        fail_msg("%s, %d threads: status %d \"%s\", alone %d \"%s\"", what, threads, b->st, b->msg,
                 a->st, a->msg);
    if (a->st) return;
    int64_t nv = emb_vocab_num_words(a->v);
    if (emb_vocab_num_words(b->v) != nv)
        fail_msg("%s, %d threads: %lld words, alone %lld", what, threads,
                 (long long)emb_vocab_num_words(b->v), (long long)nv);
    for (int64_t i = 0; i < nv; i++) {
        size_t la, lb;
        const char *wa = emb_vocab_word(a->v, i, &la), *wb = emb_vocab_word(b->v, i, &lb);
        if (la != lb || memcmp(wa, wb, la) != 0 ||
            emb_vocab_count(a->v, i) != emb_vocab_count(b->v, i))
            fail_msg("%s, %d threads: word %lld differs", what, threads, (long long)i);
    }
    if (a->n != b->n)
        fail_msg("%s, %d threads: %lld ids, alone %lld", what, threads, (long long)b->n,
                 (long long)a->n);
    for (int64_t i = 0; i < a->n; i++)
        if (a->ids[i] != b->ids[i])
            fail_msg("%s, %d threads: id %lld is %d, alone %d", what, threads, (long long)i,
                     b->ids[i], a->ids[i]);
    assert_int_equal(a->skipped[0], b->skipped[0]);
    assert_int_equal(a->skipped[1], b->skipped[1]);
    assert_int_equal(a->files.n, b->files.n);
    for (size_t i = 0; i < a->files.n; i++) {
        assert_string_equal(a->files.v[i].name, b->files.v[i].name);
        assert_int_equal(a->files.v[i].bytes, b->files.v[i].bytes);
        assert_int_equal(a->files.v[i].hash, b->files.v[i].hash);
    }
}

/* Reads paths alone and with 2..7 threads (ranges of one byte and up), and checks they
 * agree; returns how many of the threaded reads succeeded. */
static int check_paths(const emb_w2v_options *o, const char *const *paths, size_t np,
                       const char *what) {
    emb__w2v_range_min = 1;
    outcome alone = read_with(o, 1, paths, np);
    int ok = 0;
    for (int t = 2; t <= 7; t++) {
        outcome par = read_with(o, t, paths, np);
        expect_same(&alone, &par, what, t);
        ok += par.st == EMB_OK;
        outcome_free(&par);
    }
    outcome_free(&alone);
    return ok;
}

static int check_text(const emb_w2v_options *o, const char *text, size_t n, const char *what) {
    const char *p = tmp("corpus.txt");
    put(p, text, n);
    return check_paths(o, &p, 1, what);
}

static emb_w2v_options opts(void) {
    emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    o.min_count = 1;
    return o;
}

/* Crafted texts: multi-byte characters, line ends and tokens at every place a cut can fall
 * (thread counts 2..7 over texts of a few dozen bytes put a cut at most offsets). */
static void test_crafted(void **state) {
    (void)state;
    static const char *const texts[] = {
        "ab cd\nef gh\n",
        "\xEF\xBB\xBF"
        "first word\nsecond line\n",
        "\xEF\xBB\xBF"
        "x",
        "  \n\n  one\n\n\ntwo three\n  \n",
        "\xC3\x89t\xC3\xA9 \xC3\xA9t\xC3\xA9 \xE2\x82\xAC\xE2\x82\xAC \xF0\x9F\x98\x80x "
        "\xC3\x89T\xC3\x89\n",
        "ALPHA Beta gamma\tDELTA\r\nalpha beta\vGAMMA\fdelta\n",
        "\"quoted,\" (paren) --- ... end.\nnew-line! ?? x\n",
        "averyveryverylongtokenwithoutanyspaceatallthatcrossesseveralcuts",
        "a b c d e f g h i j k l m n o p q r s t u v w x y z a b c\n",
        "word\n",
        "\n",
        "one line without an end",
    };
    emb_w2v_options plain = opts(), low = opts();
    low.lowercase = true, low.strip_punct = true;
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        char what[64];
        snprintf(what, sizeof what, "text %zu", i);
        bool has_token = strspn(texts[i], " \n\r\t\v\f") < strlen(texts[i]);
        if (has_token) assert_int_equal(check_text(&plain, texts[i], strlen(texts[i]), what), 6);
        /* lowercased and stripped: "..." alone is no token, the counts change, still equal */
        check_text(&low, texts[i], strlen(texts[i]), what);
    }
}

/* Tokens that are not UTF-8 (a lone continuation byte, a sequence cut short by a space):
 * the same error naming the same line, or with lenient the same count skipped. */
static void test_invalid_utf8(void **state) {
    (void)state;
    static const char text[] = "good words here\nmore good \xC3 words\nbad \x80token x\n"
                               "\xE2\x82 tail\n";
    emb_w2v_options o = opts();
    assert_int_equal(check_text(&o, text, sizeof text - 1, "strict"), 0);
    o.lenient = true;
    assert_int_equal(check_text(&o, text, sizeof text - 1, "lenient"), 6);
    /* only the last range has the bad token: the error still names its line */
    static const char late[] = "a b c d e f g h i j k l m n o p q r s t u v w x y z\n"
                               "a b c d e f g h i j k l m n o p q r s t u v w x y z\n\xFF\n";
    o.lenient = false;
    assert_int_equal(check_text(&o, late, sizeof late - 1, "late"), 0);
}

/* A token longer than EMB_VOCAB_MAX_WORD across the cuts: the same error, or with lenient
 * the same count skipped and the same other tokens. */
static void test_too_long(void **state) {
    (void)state;
    size_t n = (size_t)EMB_VOCAB_MAX_WORD + 4096;
    char *text = malloc(n + 64);
    assert_non_null(text);
    int at = snprintf(text, 64, "head words\nline two ");
    memset(text + at, 'q', n);
    memcpy(text + at + n, " tail end\n", 10);
    size_t len = (size_t)at + n + 10;
    emb_w2v_options o = opts();
    assert_int_equal(check_text(&o, text, len, "strict"), 0);
    o.lenient = true;
    assert_int_equal(check_text(&o, text, len, "lenient"), 6);
    free(text);
}

/* Pseudo-random texts over an alphabet of spaces, line ends, punctuation, capitals and
 * multi-byte characters, with words pruned by min_count: every thread count agrees. */
static void test_random_texts(void **state) {
    (void)state;
    static const char *const pieces[] = {"a",
                                         "b",
                                         "C",
                                         "dd",
                                         " ",
                                         " ",
                                         "\n",
                                         "\n\n",
                                         "\t",
                                         ".",
                                         "\xC3\xA9",
                                         "\xC3\x89",
                                         "\xE2\x82\xAC",
                                         "x\xF0\x9F\x98\x80",
                                         "\r\n",
                                         "Zz"};
    uint64_t s = 12345;
    char text[2048];
    for (int round = 0; round < 40; round++) {
        size_t n = 0;
        int pieces_n = 20 + round * 10;
        for (int k = 0; k < pieces_n; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const char *p = pieces[(s >> 33) % (sizeof pieces / sizeof *pieces)];
            size_t l = strlen(p);
            if (n + l >= sizeof text) break;
            memcpy(text + n, p, l), n += l;
        }
        emb_w2v_options o = opts();
        o.lowercase = round % 2 == 1;
        o.strip_punct = round % 3 == 0;
        o.min_count = 1 + round % 3;
        char what[64];
        snprintf(what, sizeof what, "random text %d", round);
        check_text(&o, text, n, what);
    }
}

/* Several files, plain and compressed (read alone) and empty: sentence ends between files,
 * first appearances across files, and each file's fingerprint. */
static void test_several_files(void **state) {
    (void)state;
    put(tmp("f1.txt"), "one two three\nfour", 18);
    put(tmp("f2.txt"), "", 0);
    put(tmp("f3.txt"),
        "\xEF\xBB\xBF"
        "four five\n\none six\n",
        22);
    put(tmp("f4.txt"), "seven one\n", 10);
    const char *paths[] = {tmp("f1.txt"), tmp("f2.txt"), tmp("f3.txt"), tmp("f4.txt")};
    emb_w2v_options o = opts();
    assert_int_equal(check_paths(&o, paths, 4, "four files"), 6);
#ifdef EMB_HAVE_ZLIB
    /* a gzip file between plain ones is read alone */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "printf 'gz words one\\ntwo\\n' | gzip -c > '%s'", tmp("g.gz"));
    assert_int_equal(system(cmd), 0);
    const char *mixed[] = {tmp("f1.txt"), tmp("g.gz"), tmp("f4.txt")};
    assert_int_equal(check_paths(&o, mixed, 3, "with gzip"), 6);
#endif
}

/* The default minimum range size (1 MiB) keeps small files with one thread, and a file of
 * two ranges is read by two with the same result. */
static void test_default_size(void **state) {
    (void)state;
    size_t n = ((size_t)1 << 21) + 100;
    char *text = malloc(n);
    assert_non_null(text);
    for (size_t i = 0; i < n; i++) text[i] = "abc de\nfgh i jk\xC3\xA9 "[i % 19];
    const char *p = tmp("big.txt");
    put(p, text, n);
    free(text);
    emb_w2v_options o = opts();
    outcome alone = read_with(&o, 1, &p, 1);
    emb__w2v_range_min = (size_t)1 << 20;
    outcome par = read_with(&o, 2, &p, 1);
    expect_same(&alone, &par, "2 MiB", 2);
    outcome_free(&alone), outcome_free(&par);
}

/* A file that grows after its ranges were read and before its fingerprint is taken is
 * refused (the fingerprint would cover bytes no range read), and nothing is returned. */
static void append_words(const char *name) {
    FILE *f = fopen(name, "ab");
    assert_non_null(f);
    fputs("late words\n", f);
    assert_int_equal(fclose(f), 0);
}

static void test_file_grows(void **state) {
    (void)state;
    emb__w2v_range_min = 1;
    const char *path = tmp("grows.txt");
    /* larger than the stream's first read, which would otherwise hold the whole file */
    const size_t n = (size_t)1 << 20;
    char *text = malloc(n);
    assert_non_null(text);
    for (size_t i = 0; i < n; i++)
        text[i] = i % 8 == 7 ? (i % 64 == 63 ? '\n' : ' ') : 'a' + (char)(i % 8);
    put(path, text, n);
    free(text);
    emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    o.min_count = 1;
    const char *paths[] = {path};
    emb__w2v_ranges_read = append_words;
    outcome r = read_with(&o, 2, paths, 1);
    emb__w2v_ranges_read = NULL;
    if (r.st != EMB_ERR_IO) fail_msg("status %d: %s", r.st, r.msg);
    assert_non_null(strstr(r.msg, "changed while it was read"));
    assert_non_null(strstr(r.msg, "grows.txt"));
    assert_null(r.v);
    outcome_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crafted),       cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_too_long),      cmocka_unit_test(test_random_texts),
        cmocka_unit_test(test_several_files), cmocka_unit_test(test_default_size),
        cmocka_unit_test(test_file_grows),
    };
    return cmocka_run_group_tests(tests, tmp_setup, teardown_dir);
}
