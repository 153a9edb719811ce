/* The text formats' writer (word2vec text and GloVe) formats its rows on the threads: the
 * file must be the same bytes at every thread count, and those bytes are the rows as printf
 * writes them (emb__format_float_printf, the reference of test_format_float.c), built here
 * line by line. Tables of a few rows (written on one thread), of many chunks of rows (more
 * batches than threads, a last batch cut short), of rows wider than a chunk, words of
 * several lengths and non-ASCII, special values, both precisions and the trailing space. */
#include "emb_test.h"
#include "emb_test_files.h"

#include "io/io_internal.h"

#include <math.h>

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* A value as tables hold them, now and then a special one. */
static float value(void) {
    static const float special[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e-30f, 3.4e38f, 0.5f};
    if (next() % 50 == 0) return special[next() % 8];
    double u = (double)(int64_t)(next() >> 11) / 9007199254740992.0 * 4 - 2;
    return (float)(u * pow(10.0, (int)(next() % 8) - 5));
}

/* The file the writer must give: the header (not for GloVe), then per row the word, each
 * value after a space, the optional trailing space and the line end. */
static char *expected(const float *w, int64_t rows, int64_t dim, const emb_vocab *v,
                      const emb_vectors_write_options *o, size_t *len) {
    size_t cap = 64, n = 0;
    for (int64_t i = 0; i < rows; i++) {
        size_t wl;
        emb_vocab_word(v, i, &wl);
        cap += wl + (size_t)dim * 32 + 4;
    }
    char *b = malloc(cap);
    assert_non_null(b);
    if (o->format != EMB_FORMAT_GLOVE)
        n += (size_t)snprintf(b, cap, "%lld %lld\n", (long long)rows, (long long)dim);
    for (int64_t i = 0; i < rows; i++) {
        size_t wl;
        const char *word = emb_vocab_word(v, i, &wl);
        memcpy(b + n, word, wl), n += wl;
        for (int64_t k = 0; k < dim; k++) {
            b[n++] = ' ';
            n += (size_t)emb__format_float_printf(b + n, w[i * dim + k], o->precision);
        }
        if (o->trailing_space) b[n++] = ' ';
        b[n++] = '\n';
    }
    *len = n;
    return b;
}

static void check_table(int64_t rows, int64_t dim) {
    float *w = malloc((size_t)(rows * dim) * sizeof(float));
    assert_non_null(w);
    for (int64_t i = 0; i < rows * dim; i++) w[i] = value();
    emb_vocab *v = NULL;
    EMB_OK_OR_FAIL(emb_vocab_create(&v));
    for (int64_t i = 0; i < rows; i++) {
        char word[64];
        /* lengths 2 to 40, some non-ASCII */
        int n = snprintf(word, sizeof word, "%s%lld%.*s", i % 7 == 0 ? "\xc3\xa9t\xc3\xa9" : "w",
                         (long long)i, (int)(next() % 30), "abcdefghijklmnopqrstuvwxyzabcd");
        EMB_OK_OR_FAIL(emb_vocab_add(v, word, (size_t)n, 1, NULL, NULL));
    }
    emb_tensor t = emb_test_view(EMB_FLOAT32, w, 2, SHP(rows, dim));
    const int before = emb_get_num_threads();
    for (int form = 0; form < 4; form++) {
        emb_vectors_write_options o = emb_vectors_write_options_default();
        o.precision = form & 1 ? 5 : 0;
        o.trailing_space = form == 1;
        if (form == 3) o.format = EMB_FORMAT_GLOVE;
        size_t want_n;
        char *want = expected(w, rows, dim, v, &o, &want_n);
        for (int threads = 1; threads <= 3; threads++) {
            emb_set_num_threads(threads);
            EMB_OK_OR_FAIL(emb_vectors_write(tmp("t.vec"), &t, v, &o));
            size_t got_n;
            char *got = slurp(tmp("t.vec"), &got_n);
            assert_non_null(got);
            if (got_n != want_n || memcmp(got, want, want_n) != 0) {
                size_t at = 0;
                while (at < got_n && at < want_n && got[at] == want[at]) at++;
                fail_msg("%lld x %lld, form %d, %d threads: %zu bytes, expected %zu; first "
                         "difference at byte %zu",
                         (long long)rows, (long long)dim, form, threads, got_n, want_n, at);
            }
            free(got);
        }
        free(want);
    }
    emb_set_num_threads(before);
    emb_vocab_free(v);
    free(w);
}

static void test_small_tables(void **state) {
    (void)state;
    check_table(1, 1);
    check_table(3, 7);
    check_table(40, 50);
}

/* 16,384 values a chunk: dim 100 gives 163 rows a chunk, 4,000 rows 25 chunks (batches of
 * 2, 4 and 6 chunks at 1 to 3 threads, the last one short). */
static void test_many_chunks(void **state) {
    (void)state;
    check_table(4000, 100);
    check_table(1237, 3);
}

/* Rows wider than a chunk: one row a chunk. */
static void test_wide_rows(void **state) {
    (void)state;
    check_table(13, 20000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_tables),
        cmocka_unit_test(test_many_chunks),
        cmocka_unit_test(test_wide_rows),
    };
    return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
