/* Unit tests of the word2vec step with one set of negatives per window (skip-gram,
 * --shared-negatives: m context rows against n targets) and of the trainer's loop that draws
 * each window's random numbers one window ahead: the AVX2 variant's register-blocked window
 * kernel gives the reference's bits, and whole 1-thread runs give the same bits under the
 * reference kernels and the fastest ones. */
#include "emb_test.h"

#include "kernels/dispatch.h"

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* m in [2, 40] (the blocked path takes up to 32), n in [1, 18] (up to 16), every tail
 * length of dim, repeated contexts, repeated negatives, negatives equal to the true word,
 * and values large enough that scores saturate (a zero gradient, which both skip). */
static void test_window_kernel_blocked(void **state) {
    (void)state;
    emb__sgns_step_fn fast = emb__sgns_step();
    float sig[EMB__SGNS_TABLE + 1];
    emb__sgns_sigmoid_table(sig);
    int blocked = 0, saturated = 0;
    for (int trial = 0; trial < 800; trial++) {
        uint64_t s = (uint64_t)trial * 2654435761u + 11;
        int64_t dim = 1 + trial % 43 + (trial % 5 == 0 ? 96 : 0);
        int m = 2 + (int)(lcg(&s) % 39), n = 1 + (int)(lcg(&s) % 18), V = 24 + trial % 40;
        size_t sz = (size_t)V * (size_t)dim;
        float *a0 = malloc(sz * 4), *a1 = malloc(sz * 4), *b0 = malloc(sz * 4),
              *b1 = malloc(sz * 4);
        float *scratch = malloc(((size_t)(m + n + 2) * (size_t)dim + (size_t)(m * n)) * 4);
        assert_true(a0 && a1 && b0 && b1 && scratch);
        float scale = trial % 3 == 0 ? 6.0f : 0.5f;
        for (size_t i = 0; i < sz; i++) {
            a0[i] = a1[i] = ((float)lcg(&s) / 2147483648.0f - 0.5f) * scale;
            b0[i] = b1[i] = ((float)lcg(&s) / 2147483648.0f - 0.5f) * scale;
        }
        int32_t ctx[40], tgt[18];
        int range = trial % 4 == 0 ? 4 : V; /* few distinct rows: many repeats */
        for (int i = 0; i < m; i++) ctx[i] = (int32_t)(lcg(&s) % (uint64_t)range);
        for (int j = 0; j < n; j++) tgt[j] = (int32_t)(lcg(&s) % (uint64_t)range);
        if (trial % 6 == 1 && n > 2) tgt[n - 1] = tgt[0];
        blocked += m <= 32 && n <= 16;
        float alpha = trial % 7 == 0 ? 1.0f : 0.025f;
        /* every other trial, the fast kernel sees the first nhot output rows in a separate
         * copy (a thread's own rows, emb__sgns_rows), and every third the first nin input
         * rows: the same results once copied back */
        const int64_t nhot = trial % 2 ? 1 + (int64_t)(lcg(&s) % (uint64_t)V) : 0;
        const int64_t nin = trial % 3 == 2 ? 1 + (int64_t)(lcg(&s) % (uint64_t)V) : 0;
        float *hot = nhot ? malloc((size_t)nhot * (size_t)dim * 4) : NULL;
        float *hot_in = nin ? malloc((size_t)nin * (size_t)dim * 4) : NULL;
        if (nhot) {
            assert_non_null(hot);
            memcpy(hot, b1, (size_t)nhot * (size_t)dim * 4);
            memset(b1, 0xff, (size_t)nhot * (size_t)dim * 4); /* NaN: must not be read */
        }
        if (nin) {
            assert_non_null(hot_in);
            memcpy(hot_in, a1, (size_t)nin * (size_t)dim * 4);
            memset(a1, 0xff, (size_t)nin * (size_t)dim * 4);
        }
        bool fin0 =
            emb__sgns_step_ref(&(emb__sgns_rows){a0, NULL, 0}, &(emb__sgns_rows){b0, NULL, 0}, dim,
                               ctx, m, tgt, n, alpha, false, false, sig, scratch);
        /* the reference leaves G (m x n) after the rows it copied: count zero gradients */
        const float *G = scratch + (size_t)(m + n) * (size_t)dim;
        for (int q = 0; q < m * n; q++) saturated += G[q] == 0.0f;
        bool fin1 = fast(&(emb__sgns_rows){a1, hot_in, nin}, &(emb__sgns_rows){b1, hot, nhot}, dim,
                         ctx, m, tgt, n, alpha, false, false, sig, scratch);
        if (nhot) memcpy(b1, hot, (size_t)nhot * (size_t)dim * 4);
        if (nin) memcpy(a1, hot_in, (size_t)nin * (size_t)dim * 4);
        free(hot), free(hot_in);
        assert_true(fin0 == fin1);
        emb_assert_close_f32(a1, a0, (int64_t)sz, 1, 0, 0, "syn0 (window)");
        emb_assert_close_f32(b1, b0, (int64_t)sz, 1, 0, 0, "syn1 (window)");
        free(a0), free(a1), free(b0), free(b1), free(scratch);
    }
    assert_true(blocked > 400);
    assert_true(saturated > 1000);
}

/* Skip-gram with negatives per pair and per window, and CBOW, at 1 thread: the vectors under
 * the reference kernels equal those under the fastest ones, bit for bit (the trainer's loop
 * is the same for both; a difference is a kernel's). */
static void test_trainer_tiers(void **state) {
    (void)state;
    emb_vocab *v;
    EMB_OK_OR_FAIL(emb_vocab_create(&v));
    const int V = 60;
    for (int i = 0; i < V; i++) {
        char word[16];
        int len = snprintf(word, sizeof word, "w%d", i);
        EMB_OK_OR_FAIL(emb_vocab_add(v, word, (size_t)len, 1000 / (i + 1) + 1, NULL, NULL));
    }
    enum { N = 6000 };
    int32_t *ids = malloc(N * sizeof(int32_t));
    assert_non_null(ids);
    uint64_t s = 99;
    for (int i = 0; i < N; i++) /* Zipf-like ids, sentence ends now and then */
        ids[i] = i % 700 == 699 ? -1 : (int32_t)((lcg(&s) % (uint64_t)V) * (lcg(&s) % 64) / 64);
    for (int variant = 0; variant < 3; variant++) {
        emb_w2v_options o = emb_w2v_options_default(variant == 2 ? EMB_W2V_CBOW : EMB_W2V_SKIPGRAM);
        o.dim = 20 + variant * 7; /* 20, 27, 34: tails of 4, 3 and 2 */
        o.min_count = 1;
        o.threads = 1;
        o.epochs = 2;
        o.shared_negatives = variant == 1;
        float *vec[2];
        for (int tier = 0; tier < 2; tier++) {
            emb_set_kernel_mode(tier ? EMB_KERNELS_AUTO : EMB_KERNELS_REF);
            emb_w2v *w;
            EMB_OK_OR_FAIL(emb_w2v_create_from_ids(&o, v, ids, N, &w));
            EMB_OK_OR_FAIL(emb_w2v_train(w, NULL, NULL));
            emb_tensor t;
            EMB_OK_OR_FAIL(emb_w2v_vectors(w, &t));
            size_t bytes = (size_t)emb_tensor_numel(&t) * sizeof(float);
            vec[tier] = malloc(bytes);
            assert_non_null(vec[tier]);
            memcpy(vec[tier], t.data, bytes);
            emb_w2v_free(w);
        }
        emb_set_kernel_mode(EMB_KERNELS_AUTO);
        emb_assert_close_f32(vec[1], vec[0], (int64_t)V * o.dim, 1, 0, 0,
                             variant == 1 ? "shared negatives" : "per-pair negatives or CBOW");
        free(vec[0]), free(vec[1]);
    }
    free(ids);
    emb_vocab_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_kernel_blocked),
        cmocka_unit_test(test_trainer_tiers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
