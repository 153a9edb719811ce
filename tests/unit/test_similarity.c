/* Unit tests of include/emb/similarity.h beyond what tests/cli/test_similarity.py compares
 * with gensim: the errors (status, message, outputs untouched), rows of norm 0, inputs
 * outside the searched rows, and small cases worked out by hand. */
#include "emb_test.h"

#include <emb/similarity.h>

#include <math.h>

/* Rows: 0 = (1, 0), 1 = (0, 1), 2 = (1, 1), 3 = (0, 0), 4 = (-1, 0), 5 = (2, 0.1) */
static const float table_data[] = {1, 0, 0, 1, 1, 1, 0, 0, -1, 0, 2, 0.1f};

static emb_knn *make_index(int64_t searched) {
    static emb_tensor t;
    emb_tensor_init(&t, EMB_FLOAT32, (void *)table_data, 2, (int64_t[]){6, 2});
    emb_knn *k;
    EMB_OK_OR_FAIL(emb_knn_create(&t, searched, &k));
    return k;
}

static void test_by_hand(void **state) {
    (void)state;
    emb_knn *k = make_index(0);
    double s;
    EMB_OK_OR_FAIL(emb_knn_similarity(k, 0, 2, &s));
    assert_true(fabs(s - sqrt(0.5)) < 1e-12);
    EMB_OK_OR_FAIL(emb_knn_similarity(k, 0, 4, &s));
    assert_true(s == -1.0);
    EMB_OK_OR_FAIL(emb_knn_similarity(k, 0, 3, &s)); /* a zero row: 0, not NaN */
    assert_true(s == 0.0);
    /* n_similarity: means of the vectors as stored: (1,0)+(2,0.1) against (0,1) */
    int64_t a[2] = {0, 5}, b[1] = {1};
    EMB_OK_OR_FAIL(emb_knn_n_similarity(k, a, 2, b, 1, &s));
    assert_true(fabs(s - 0.1 / sqrt(9.01)) < 1e-7);
    /* most_similar: unit(0) - unit(4) = (2, 0): row 5 first, then 2; inputs excluded */
    int64_t pos[1] = {0}, neg[1] = {4}, ids[6];
    float sc[6];
    EMB_OK_OR_FAIL(emb_knn_most_similar(k, pos, 1, neg, 1, 6, ids, sc));
    assert_int_equal(ids[0], 5);
    assert_int_equal(ids[1], 2);
    assert_true(fabsf(sc[1] - sqrtf(0.5f)) < 1e-6f);
    assert_int_equal(ids[4], -1); /* rows 0 and 4 excluded: 4 answers */
    assert_true(isinf(sc[4]) && sc[4] < 0);
    /* a negative row alone: -unit(-1, 0) = (1, 0), row 0 itself */
    EMB_OK_OR_FAIL(emb_knn_most_similar(k, NULL, 0, neg, 1, 1, ids, sc));
    assert_int_equal(ids[0], 0);
    assert_true(sc[0] == 1.0f);
    /* doesnt_match: the odd one out of three almost parallel rows and an orthogonal one */
    int64_t rows[4] = {0, 5, 1, 2}, odd;
    EMB_OK_OR_FAIL(emb_knn_doesnt_match(k, rows, 4, &odd));
    assert_int_equal(odd, 1);
    int64_t one[1] = {3};
    EMB_OK_OR_FAIL(emb_knn_doesnt_match(k, one, 1, &odd));
    assert_int_equal(odd, 3);
    emb_knn_free(k);
}

static void test_restricted_index(void **state) {
    (void)state;
    emb_knn *k = make_index(3); /* answers from rows 0..2; inputs may be any row */
    int64_t pos[1] = {5}, ids[3];
    float sc[3];
    EMB_OK_OR_FAIL(emb_knn_most_similar(k, pos, 1, NULL, 0, 3, ids, sc));
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 2);
    assert_int_equal(ids[2], 1);
    emb_knn_free(k);
}

static void test_errors(void **state) {
    (void)state;
    emb_knn *k = make_index(0);
    int64_t ids[2] = {77, 77}, bad[1] = {6}, neg[1] = {-1}, good[1] = {0};
    float sc[2] = {7, 7};
    double s = 42;
    int64_t odd = 42;
    EMB_EXPECT_ERR(emb_knn_most_similar(NULL, good, 1, NULL, 0, 2, ids, sc), EMB_ERR_NULL, "index");
    EMB_EXPECT_ERR(emb_knn_most_similar(k, bad, 1, NULL, 0, 2, ids, sc), EMB_ERR_INDEX,
                   "positive 0: row 6 is out of range for a table of 6 rows");
    EMB_EXPECT_ERR(emb_knn_most_similar(k, good, 1, neg, 1, 2, ids, sc), EMB_ERR_INDEX,
                   "negative 0: row -1 is out of range");
    EMB_EXPECT_ERR(emb_knn_most_similar(k, NULL, 0, NULL, 0, 2, ids, sc), EMB_ERR_INVALID,
                   "at least one positive or negative row");
    EMB_EXPECT_ERR(emb_knn_most_similar(k, good, 1, NULL, 0, 0, ids, sc), EMB_ERR_INVALID,
                   "k must be");
    EMB_EXPECT_ERR(emb_knn_most_similar(k, good, -1, NULL, 0, 2, ids, sc), EMB_ERR_INVALID,
                   "negative");
    EMB_EXPECT_ERR(emb_knn_most_similar(k, good, 1, NULL, 0, 2, NULL, sc), EMB_ERR_NULL, "ids");
    assert_int_equal(ids[0], 77);
    assert_true(sc[0] == 7);
    EMB_EXPECT_ERR(emb_knn_similarity(k, 0, 6, &s), EMB_ERR_INDEX, "second 0: row 6");
    EMB_EXPECT_ERR(emb_knn_similarity(k, 0, 1, NULL), EMB_ERR_NULL, "out");
    EMB_EXPECT_ERR(emb_knn_n_similarity(k, good, 1, NULL, 0, &s), EMB_ERR_INVALID,
                   "two non-empty sets");
    EMB_EXPECT_ERR(emb_knn_doesnt_match(k, NULL, 0, &odd), EMB_ERR_INVALID, "at least one row");
    EMB_EXPECT_ERR(emb_knn_doesnt_match(k, bad, 1, &odd), EMB_ERR_INDEX, "row 6");
    assert_true(s == 42);
    assert_int_equal(odd, 42);
    emb_knn_free(k);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_by_hand),
        cmocka_unit_test(test_restricted_index),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
