/* Unit tests of emb_knn_* and emb_spearman: every error path (status, message, outputs
 * unchanged) and small cases whose answers are worked out by hand. Random cases against a
 * float64 reference and gensim live in tests/parity/test_search.py. */
#include "emb_test.h"

static float table6[6][2] = {{1, 0}, {0, 1}, {-1, 0}, {0.8f, 0.6f}, {0, 0}, {3, 4}};

static emb_knn *make_index(int64_t rows) {
    emb_tensor t = emb_test_view(EMB_FLOAT32, table6, 2, SHP(6, 2));
    emb_knn *k = NULL;
    EMB_OK_OR_FAIL(emb_knn_create(&t, rows, &k));
    return k;
}

static void test_create_errors(void **state) {
    (void)state;
    emb_knn *k = (emb_knn *)0x1;
    emb_tensor t = emb_test_view(EMB_FLOAT32, table6, 2, SHP(6, 2));
    EMB_EXPECT_ERR(emb_knn_create(&t, 0, NULL), EMB_ERR_NULL, "out must not be NULL");
    EMB_EXPECT_ERR(emb_knn_create(NULL, 0, &k), EMB_ERR_NULL, "table");
    EMB_EXPECT_ERR(emb_knn_create(&t, 7, &k), EMB_ERR_INVALID, "num_rows must be in [0, 6]");
    EMB_EXPECT_ERR(emb_knn_create(&t, -1, &k), EMB_ERR_INVALID, "num_rows");
    emb_tensor i64 = emb_test_view(EMB_INT64, table6, 2, SHP(6, 1));
    EMB_EXPECT_ERR(emb_knn_create(&i64, 0, &k), EMB_ERR_DTYPE, "float32");
    emb_tensor one = emb_test_view(EMB_FLOAT32, table6, 1, SHP(12));
    EMB_EXPECT_ERR(emb_knn_create(&one, 0, &k), EMB_ERR_SHAPE, "2-D");
    emb_tensor empty = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(0, 2));
    EMB_EXPECT_ERR(emb_knn_create(&empty, 0, &k), EMB_ERR_SHAPE, "at least one row");
    assert_ptr_equal(k, (emb_knn *)0x1);
    emb_knn_free(NULL);
}

static void test_search_by_hand(void **state) {
    (void)state;
    emb_knn *k = make_index(0);
    assert_int_equal(emb_knn_num_rows(k), 6);
    assert_int_equal(emb_knn_dim(k), 2);
    float q[2] = {2, 0}; /* direction (1, 0) */
    emb_tensor tq = emb_test_view(EMB_FLOAT32, q, 2, SHP(1, 2));
    int64_t ids[6];
    float sc[6];
    EMB_OK_OR_FAIL(emb_knn_search(k, &tq, 6, NULL, 0, ids, sc));
    /* cosines: row0 1, row3 0.8, row5 0.6, row1 0, row4 (zero row) 0, row2 -1; equal
     * scores ordered by row */
    int64_t want[6] = {0, 3, 5, 1, 4, 2};
    for (int i = 0; i < 6; i++) assert_int_equal(ids[i], want[i]);
    assert_true(sc[0] == 1.0f && sc[5] == -1.0f && sc[3] == 0.0f && sc[4] == 0.0f);
    assert_true(fabsf(sc[1] - 0.8f) < 1e-6f && fabsf(sc[2] - 0.6f) < 1e-6f);
    /* exclusions, -1 ignored, and k beyond what remains */
    int64_t ex[3] = {0, -1, 3};
    int64_t ids8[8];
    float sc8[8];
    EMB_OK_OR_FAIL(emb_knn_search(k, &tq, 8, ex, 3, ids8, sc8));
    int64_t want8[8] = {5, 1, 4, 2, -1, -1, -1, -1};
    for (int i = 0; i < 8; i++) assert_int_equal(ids8[i], want8[i]);
    assert_true(isinf(sc8[7]) && sc8[7] < 0);
    emb_knn_free(k);
    /* only the first 2 rows searched */
    k = make_index(2);
    EMB_OK_OR_FAIL(emb_knn_search(k, &tq, 3, NULL, 0, ids, sc));
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 1);
    assert_int_equal(ids[2], -1);
    emb_knn_free(k);
}

static void test_search_errors(void **state) {
    (void)state;
    emb_knn *k = make_index(0);
    float q[4] = {1, 0, 0, 1};
    emb_tensor tq = emb_test_view(EMB_FLOAT32, q, 2, SHP(2, 2));
    int64_t ids[4] = {9, 9, 9, 9};
    float sc[4] = {9, 9, 9, 9};
    EMB_EXPECT_ERR(emb_knn_search(NULL, &tq, 2, NULL, 0, ids, sc), EMB_ERR_NULL, "index");
    EMB_EXPECT_ERR(emb_knn_search(k, NULL, 2, NULL, 0, ids, sc), EMB_ERR_NULL, "queries");
    EMB_EXPECT_ERR(emb_knn_search(k, &tq, 0, NULL, 0, ids, sc), EMB_ERR_INVALID,
                   "k must be at least 1");
    EMB_EXPECT_ERR(emb_knn_search(k, &tq, 2, NULL, -1, ids, sc), EMB_ERR_INVALID, "n_exclude");
    EMB_EXPECT_ERR(emb_knn_search(k, &tq, 2, NULL, 1, ids, sc), EMB_ERR_NULL, "exclude");
    EMB_EXPECT_ERR(emb_knn_search(k, &tq, 2, NULL, 0, NULL, sc), EMB_ERR_NULL, "ids");
    EMB_EXPECT_ERR(emb_knn_search(k, &tq, 2, NULL, 0, ids, NULL), EMB_ERR_NULL, "scores");
    EMB_EXPECT_ERR(emb_knn_search(k, &tq, INT64_MAX, NULL, 0, ids, sc), EMB_ERR_OVERFLOW,
                   "do not fit");
    emb_tensor bad = emb_test_view(EMB_FLOAT32, q, 2, SHP(1, 4));
    EMB_EXPECT_ERR(emb_knn_search(k, &bad, 2, NULL, 0, ids, sc), EMB_ERR_SHAPE,
                   "queries must be [Q, 2], got [1, 4]");
    emb_tensor f64 = emb_test_view(EMB_FLOAT64, q, 2, SHP(1, 2));
    EMB_EXPECT_ERR(emb_knn_search(k, &f64, 2, NULL, 0, ids, sc), EMB_ERR_DTYPE, "float32");
    for (int i = 0; i < 4; i++) assert_true(ids[i] == 9 && sc[i] == 9);
    /* zero queries: nothing to write, NULL outputs allowed */
    emb_tensor none = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(0, 2));
    EMB_OK_OR_FAIL(emb_knn_search(k, &none, 3, NULL, 0, NULL, NULL));
    emb_knn_free(k);
}

static void test_analogy(void **state) {
    (void)state;
    emb_knn *k = make_index(0);
    /* b - a + c with a = row1 (0,1), b = row0 (1,0), c = row3 (.8,.6): (1.8, -0.4) */
    int64_t abc[3] = {1, 0, 3};
    int64_t ids[2] = {9, 9};
    float sc[2] = {9, 9};
    EMB_OK_OR_FAIL(emb_knn_analogy(k, abc, 1, 2, ids, sc));
    /* candidates: row2 (-1,0), row4 (zero), row5 (.6,.8): cos with (1.8,-0.4)/|.| */
    double n = sqrt(1.8 * 1.8 + 0.4 * 0.4);
    double c5 = (0.6 * 1.8 - 0.8 * 0.4) / n;
    assert_int_equal(ids[0], 5);
    assert_true(fabs(sc[0] - c5) < 1e-6);
    assert_int_equal(ids[1], 4); /* zero row: 0 beats row2's negative cosine */
    int64_t bad[3] = {1, 6, 0};
    ids[0] = 9;
    EMB_EXPECT_ERR(emb_knn_analogy(k, bad, 1, 2, ids, sc), EMB_ERR_INDEX,
                   "analogy 0: row 6 is out of range for a table with 6 rows (valid: [0, 6))");
    assert_int_equal(ids[0], 9);
    EMB_EXPECT_ERR(emb_knn_analogy(k, abc, -1, 2, ids, sc), EMB_ERR_INVALID, "n_questions");
    EMB_EXPECT_ERR(emb_knn_analogy(k, abc, 1, 0, ids, sc), EMB_ERR_INVALID, "k must");
    EMB_EXPECT_ERR(emb_knn_analogy(k, NULL, 1, 2, ids, sc), EMB_ERR_NULL, "abc");
    EMB_EXPECT_ERR(emb_knn_analogy(NULL, abc, 1, 2, ids, sc), EMB_ERR_NULL, "index");
    emb_knn_free(k);
}

static void test_spearman(void **state) {
    (void)state;
    double x[5] = {1, 2, 3, 4, 5}, y[5] = {5, 6, 7, 8, 7}, rho = 42;
    EMB_OK_OR_FAIL(emb_spearman(x, x, 5, &rho));
    assert_true(fabs(rho - 1.0) < 1e-15);
    /* ranks of y with ties: 1 2 3.5 5 3.5; Pearson with 1..5 = 0.8207826816681233 */
    EMB_OK_OR_FAIL(emb_spearman(x, y, 5, &rho));
    assert_true(fabs(rho - 0.8207826816681233) < 1e-12);
    double c[3] = {1, 1, 1};
    EMB_OK_OR_FAIL(emb_spearman(x, c, 3, &rho));
    assert_true(isnan(rho));
    rho = 42;
    EMB_EXPECT_ERR(emb_spearman(x, y, 1, &rho), EMB_ERR_INVALID, "at least 2");
    double nanv[2] = {1, NAN};
    EMB_EXPECT_ERR(emb_spearman(x, nanv, 2, &rho), EMB_ERR_INVALID, "pair 1 has a NaN");
    EMB_EXPECT_ERR(emb_spearman(NULL, y, 2, &rho), EMB_ERR_NULL, "x");
    EMB_EXPECT_ERR(emb_spearman(x, y, 2, NULL), EMB_ERR_NULL, "rho");
    assert_true(rho == 42);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_errors), cmocka_unit_test(test_search_by_hand),
        cmocka_unit_test(test_search_errors), cmocka_unit_test(test_analogy),
        cmocka_unit_test(test_spearman),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
