/* The two functions of libemb that libemb_mpi is built on: emb_set_error (a library over
 * emb reports through emb_errmsg) and emb_sparse_grad_coalesce_order (the order coalesce()
 * sums duplicates in, so that an owner of some rows can sum them in that order). */
#include "emb_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_set_error(void **state) {
    (void)state;
    emb_clear_error();
    assert_int_equal(emb_set_error(EMB_ERR_INDEX, "rank %d refused: %s", 3, "why"), EMB_ERR_INDEX);
    assert_string_equal(emb_errmsg(), "rank 3 refused: why");
}

/* Summing each row's entries in the given order (the first copied, later ones added) gives
 * emb_sparse_grad_coalesce's values bit for bit. The rows repeat many times in a gradient
 * longer than 16 entries, where torch's sort (an introsort) is not stable: the order then
 * differs from the entries' own order and the sums differ in their last bits. */
static void test_coalesce_order(void **state) {
    (void)state;
    enum { N = 400, D = 3, ROWS = 7 };
    int64_t rows[N], perm[N];
    float vals[N * D];
    emb_generator *g = NULL;
    assert_int_equal(emb_generator_create(11, &g), EMB_OK);
    for (int i = 0; i < N; i++) rows[i] = emb_generator_random(g) % ROWS;
    int64_t vs[2] = {N, D}, n = N;
    emb_tensor tv, tr, tp;
    assert_int_equal(emb_tensor_init(&tv, EMB_FLOAT32, vals, 2, vs), EMB_OK);
    assert_int_equal(emb_randn_(&tv, g), EMB_OK);
    assert_int_equal(emb_tensor_init(&tr, EMB_INT64, rows, 1, &n), EMB_OK);
    assert_int_equal(emb_tensor_init(&tp, EMB_INT64, perm, 1, &n), EMB_OK);
    assert_int_equal(emb_sparse_grad_coalesce_order(&tr, &tp), EMB_OK);
    emb_sparse_grad sg;
    assert_int_equal(emb_sparse_grad_from_rows(&sg, ROWS, D, &tr, &tv), EMB_OK);
    assert_int_equal(emb_sparse_grad_coalesce(&sg), EMB_OK);
    assert_int_equal(sg.nnz, ROWS);
    float by_perm[ROWS * D], in_order[ROWS * D];
    bool seen[ROWS] = {false}, seen2[ROWS] = {false};
    int64_t prev = -1;
    for (int j = 0; j < N; j++) {
        const int64_t e = perm[j], r = rows[e];
        assert_true(r >= prev); /* ascending rows */
        prev = r;
        for (int d = 0; d < D; d++)
            by_perm[r * D + d] = seen[r] ? by_perm[r * D + d] + vals[e * D + d] : vals[e * D + d];
        seen[r] = true;
    }
    for (int e = 0; e < N; e++) {
        const int64_t r = rows[e];
        for (int d = 0; d < D; d++)
            in_order[r * D + d] =
                seen2[r] ? in_order[r * D + d] + vals[e * D + d] : vals[e * D + d];
        seen2[r] = true;
    }
    assert_memory_equal(by_perm, sg.values, sizeof by_perm);
    /* the order matters: the entries' own order gives other bits */
    assert_true(memcmp(in_order, sg.values, sizeof in_order) != 0);
    emb_sparse_grad_release(&sg);
    /* refusals */
    int32_t r32[2] = {0, 1};
    int64_t two = 2, p2[2];
    emb_tensor t32, tp2;
    assert_int_equal(emb_tensor_init(&t32, EMB_INT32, r32, 1, &two), EMB_OK);
    assert_int_equal(emb_tensor_init(&tp2, EMB_INT64, p2, 1, &two), EMB_OK);
    assert_int_equal(emb_sparse_grad_coalesce_order(&t32, &tp2), EMB_ERR_DTYPE);
    assert_int_equal(emb_sparse_grad_coalesce_order(&tr, &tp2), EMB_ERR_SHAPE);
    assert_int_equal(emb_sparse_grad_coalesce_order(&tr, &tr), EMB_ERR_INVALID);
    assert_int_equal(emb_sparse_grad_coalesce_order(NULL, &tp2), EMB_ERR_NULL);
    emb_generator_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_error),
        cmocka_unit_test(test_coalesce_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
