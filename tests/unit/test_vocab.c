/* emb_vocab: add-or-increment, lookup, sort, prune, UTF-8 validation, error paths. */
#include "emb_test.h"
#include "internal.h" /* emb__utf8_valid */

static void test_add_find(void **state) {
    (void)state;
    emb_vocab *v;
    EMB_OK_OR_FAIL(emb_vocab_create(&v));
    assert_int_equal(emb_vocab_num_words(v), 0);
    int64_t id;
    bool added;
    EMB_OK_OR_FAIL(emb_vocab_add(v, "the", 3, 1, &id, &added));
    assert_int_equal(id, 0);
    assert_true(added);
    EMB_OK_OR_FAIL(emb_vocab_add(v, "cat", 3, 2, &id, &added));
    assert_int_equal(id, 1);
    EMB_OK_OR_FAIL(emb_vocab_add(v, "the", 3, 5, &id, &added));
    assert_int_equal(id, 0);
    assert_false(added);
    assert_int_equal(emb_vocab_count(v, 0), 6);
    assert_int_equal(emb_vocab_find(v, "cat", 3), 1);
    assert_int_equal(emb_vocab_find(v, "ca", 2), -1);
    assert_int_equal(emb_vocab_find(v, "dog", 3), -1);
    /* bytes-exact: a NUL inside and non-ASCII bytes */
    EMB_OK_OR_FAIL(emb_vocab_add(v, "a\0b", 3, 0, &id, NULL));
    assert_int_equal(emb_vocab_find(v, "a\0b", 3), id);
    assert_int_equal(emb_vocab_find(v, "a", 1), -1);
    size_t n;
    const char *w = emb_vocab_word(v, 1, &n);
    assert_string_equal(w, "cat");
    assert_int_equal(n, 3);
    assert_null(emb_vocab_word(v, 3, NULL));
    assert_null(emb_vocab_word(v, -1, NULL));
    assert_int_equal(emb_vocab_count(v, 9), -1);
    emb_vocab_free(v);
    emb_vocab_free(NULL);
}

static void test_many_words(void **state) {
    (void)state;
    emb_vocab *v;
    EMB_OK_OR_FAIL(emb_vocab_create(&v));
    EMB_OK_OR_FAIL(emb_vocab_reserve(v, 50000));
    EMB_OK_OR_FAIL(emb_vocab_reserve(v, 10)); /* never shrinks */
    char buf[32];
    for (int i = 0; i < 100000; i++) {
        int n = snprintf(buf, sizeof buf, "w%d", i);
        int64_t id;
        EMB_OK_OR_FAIL(emb_vocab_add(v, buf, (size_t)n, i % 7, &id, NULL));
        assert_int_equal(id, i);
    }
    for (int i = 0; i < 100000; i += 997) {
        int n = snprintf(buf, sizeof buf, "w%d", i);
        assert_int_equal(emb_vocab_find(v, buf, (size_t)n), i);
    }
    assert_int_equal(emb_vocab_num_words(v), 100000);
    emb_vocab_free(v);
}

static void test_sort_prune(void **state) {
    (void)state;
    emb_vocab *v;
    EMB_OK_OR_FAIL(emb_vocab_create(&v));
    const char *words[] = {"</s>", "a", "b", "c", "d", "e"};
    int64_t counts[] = {1, 3, 9, 3, 1, 9};
    for (int i = 0; i < 6; i++)
        EMB_OK_OR_FAIL(emb_vocab_add(v, words[i], strlen(words[i]), counts[i], NULL, NULL));
    assert_true(emb_vocab_has_counts(v));
    int64_t perm[6];
    EMB_OK_OR_FAIL(emb_vocab_sort_by_count(v, 1, perm));
    /* </s> stays first; ties keep their order: b e a c d */
    const char *want[] = {"</s>", "b", "e", "a", "c", "d"};
    int64_t wperm[] = {0, 2, 5, 1, 3, 4};
    for (int i = 0; i < 6; i++) {
        assert_string_equal(emb_vocab_word(v, i, NULL), want[i]);
        assert_int_equal(perm[i], wperm[i]);
        assert_int_equal(emb_vocab_find(v, want[i], strlen(want[i])), i);
    }
    EMB_OK_OR_FAIL(emb_vocab_prune(v, 1, 3, 0));
    assert_int_equal(emb_vocab_num_words(v), 5); /* d (count 1) dropped; </s> kept */
    assert_int_equal(emb_vocab_find(v, "d", 1), -1);
    EMB_OK_OR_FAIL(emb_vocab_prune(v, 1, 0, 3));
    assert_int_equal(emb_vocab_num_words(v), 3);
    assert_string_equal(emb_vocab_word(v, 2, NULL), "e");
    assert_int_equal(emb_vocab_find(v, "a", 1), -1);
    /* adding after pruning still works */
    int64_t id;
    EMB_OK_OR_FAIL(emb_vocab_add(v, "z", 1, 1, &id, NULL));
    assert_int_equal(id, 3);
    EMB_OK_OR_FAIL(emb_vocab_set_count(v, 3, 0));
    assert_int_equal(emb_vocab_count(v, 3), 0);
    emb_vocab_free(v);
}

static void test_errors(void **state) {
    (void)state;
    emb_vocab *v;
    EMB_EXPECT_ERR(emb_vocab_create(NULL), EMB_ERR_NULL, "out");
    EMB_OK_OR_FAIL(emb_vocab_create(&v));
    EMB_OK_OR_FAIL(emb_vocab_add(v, "x", 1, 1, NULL, NULL));
    EMB_EXPECT_ERR(emb_vocab_add(NULL, "x", 1, 1, NULL, NULL), EMB_ERR_NULL, "vocab");
    EMB_EXPECT_ERR(emb_vocab_add(v, NULL, 1, 1, NULL, NULL), EMB_ERR_NULL, "word");
    EMB_EXPECT_ERR(emb_vocab_add(v, "", 0, 1, NULL, NULL), EMB_ERR_INVALID, "empty word");
    EMB_EXPECT_ERR(emb_vocab_add(v, "y", 1, -1, NULL, NULL), EMB_ERR_INVALID, "negative");
    EMB_EXPECT_ERR(emb_vocab_add(v, "y", (size_t)EMB_VOCAB_MAX_WORD + 1, 1, NULL, NULL),
                   EMB_ERR_INVALID, "longer");
    EMB_EXPECT_ERR(emb_vocab_set_count(v, 5, 1), EMB_ERR_INDEX, "out of range");
    EMB_EXPECT_ERR(emb_vocab_reserve(v, -1), EMB_ERR_INVALID, "negative");
    EMB_EXPECT_ERR(emb_vocab_reserve(NULL, 1), EMB_ERR_NULL, "vocab");
    EMB_EXPECT_ERR(emb_vocab_set_count(v, 0, -1), EMB_ERR_INVALID, "negative");
    EMB_EXPECT_ERR(emb_vocab_sort_by_count(v, -1, NULL), EMB_ERR_INVALID, "keep_first");
    EMB_EXPECT_ERR(emb_vocab_prune(v, 0, -1, 0), EMB_ERR_INVALID, "negative");
    /* nothing changed */
    assert_int_equal(emb_vocab_num_words(v), 1);
    assert_int_equal(emb_vocab_count(v, 0), 1);
    assert_int_equal(emb_vocab_find(v, "y", 1), -1);
    emb_vocab_free(v);
}

static void test_utf8(void **state) {
    (void)state;
    assert_true(emb__utf8_valid("", 0));
    assert_true(emb__utf8_valid("hello world, long ascii run", 27));
    assert_true(emb__utf8_valid("\xd0\xb2 \xe2\x82\xac \xf0\x9f\x98\x80", 11));
    assert_false(emb__utf8_valid("\xff", 1));
    assert_false(emb__utf8_valid("\xc3(", 2));
    assert_false(emb__utf8_valid("\xc0\x80", 2));         /* overlong */
    assert_false(emb__utf8_valid("\xe0\x80\x80", 3));     /* overlong */
    assert_false(emb__utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    assert_false(emb__utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    assert_false(emb__utf8_valid("\xe2\x82", 2));         /* truncated */
    assert_false(emb__utf8_valid("abcdefgh\xd0", 9));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_find),   cmocka_unit_test(test_many_words),
        cmocka_unit_test(test_sort_prune), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
