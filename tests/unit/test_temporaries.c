/* Unit tests of the batch-sized temporaries (src/kernels/radix_sort.c, and their use in
 * src/nn/embedding_backward.c and src/nn/embedding.c): the radix sort against a stable
 * reference sort; the dense backward and the max_norm renorm give the same bits with the
 * table-sized temporaries (counting sort over V rows, V-bit bitmap) and with the batch-sized
 * ones (radix sort of the batch), for int32/int64 indices, padding, scale_grad_by_freq,
 * accumulation into a non-zero gradient and 1 to 3 threads, whichever path the automatic
 * choice takes. Against torch: tests/parity/test_backward.py and test_embedding.py. */
#include "emb_test.h"

#include <stdlib.h>

#include "kernels/radix.h"
#include "nn/embedding_internal.h"

#if defined(__SANITIZE_ADDRESS__)
/* Let the NOMEM tests see NULL from a huge allocation instead of an ASan report. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "allocator_may_return_null=1";
}
#endif

static uint64_t rng_state = 777;

static float next_float(void) { /* spread over magnitudes so that summation order matters */
    int e = (int)(emb_test_next_u64(&rng_state) % 16) - 8;
    float m = (float)(emb_test_next_u64(&rng_state) >> 40) / (float)(1 << 24) - 0.5f;
    return ldexpf(m, e);
}

/* ---- the radix sort kernel ------------------------------------------------------------ */

typedef struct {
    uint64_t key, pos;
    uint64_t mask;
} keyed;

static int cmp_keyed(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    uint64_t kx = x->key & x->mask, ky = y->key & y->mask;
    if (kx != ky) return kx < ky ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos; /* stable: input order breaks ties */
}

static void test_radix_sort_stable(void **state) {
    (void)state;
    const int64_t sizes[] = {0, 1, 2, 7, 100, 5000};
    const int ranges[][2] = {{0, 0},  {0, 1},   {0, 7},  {0, 14},  {0, 22},
                             {5, 17}, {20, 64}, {0, 64}, {63, 64}, {3, 47}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
            const int64_t n = sizes[s];
            const int lo = ranges[r][0], hi = ranges[r][1];
            const uint64_t mask = hi - lo == 64
                                      ? UINT64_MAX
                                      : (hi == lo ? 0 : ((UINT64_C(1) << (hi - lo)) - 1) << lo);
            uint64_t *keys = malloc((size_t)(n + 1) * sizeof(uint64_t));
            uint64_t *tmp = malloc((size_t)(n + 1) * sizeof(uint64_t));
            keyed *ref = malloc((size_t)(n + 1) * sizeof(keyed));
            assert_true(keys && tmp && ref);
            for (int64_t i = 0; i < n; i++) {
                uint64_t k = emb_test_next_u64(&rng_state);
                if (i % 3 == 1) k = keys[i - 1] ^ (~mask & emb_test_next_u64(&rng_state));
                keys[i] = k; /* every third key ties with its neighbour inside the range */
                ref[i] = (keyed){k, (uint64_t)i, mask};
            }
            qsort(ref, (size_t)n, sizeof(keyed), cmp_keyed);
            uint64_t *out = emb__radix_sort_u64(keys, tmp, n, lo, hi);
            assert_true(out == keys || out == tmp);
            for (int64_t i = 0; i < n; i++)
                if (out[i] != ref[i].key)
                    fail_msg("n=%lld bits [%d, %d): position %lld differs", (long long)n, lo, hi,
                             (long long)i);
            free(keys);
            free(tmp);
            free(ref);
        }
    assert_int_equal(emb__bit_width_u64(0), 0);
    assert_int_equal(emb__bit_width_u64(1), 1);
    assert_int_equal(emb__bit_width_u64(1023), 10);
    assert_int_equal(emb__bit_width_u64(1024), 11);
    assert_int_equal(emb__bit_width_u64(UINT64_MAX), 64);
}

/* ---- dense backward: table-sized vs batch-sized buckets --------------------------------- */

typedef emb_status (*dense_backward_fn)(const emb_embedding *, const emb_tensor *,
                                        const emb_tensor *, emb_tensor *);

/* Runs a dense backward form into gw[V*D] in `mode` with `threads` threads. */
static void run_in_mode(dense_backward_fn fn, emb_embedding *e, const emb_tensor *idx,
                        const emb_tensor *g, float *gw, int mode, int threads) {
    const int64_t V = emb_embedding_num_embeddings(e), D = emb_embedding_embedding_dim(e);
    emb_tensor tw = emb_test_view(EMB_FLOAT32, gw, 2, SHP(V, D));
    emb__set_temp_mode(mode);
    emb_set_num_threads(threads);
    emb_status st = fn(e, idx, g, &tw);
    emb_set_num_threads(0);
    emb__set_temp_mode(EMB__TEMP_AUTO);
    EMB_OK_OR_FAIL(st);
}

/* Runs the dense backward in `mode` with `threads` threads into a copy of start[V*D]. */
static float *backward_in_mode(emb_embedding *e, const emb_tensor *idx, const emb_tensor *g,
                               const float *start, int mode, int threads) {
    const int64_t V = emb_embedding_num_embeddings(e), D = emb_embedding_embedding_dim(e);
    float *gw = malloc((size_t)(V * D) * sizeof(float));
    assert_non_null(gw);
    memcpy(gw, start, (size_t)(V * D) * sizeof(float));
    run_in_mode(emb_embedding_backward, e, idx, g, gw, mode, threads);
    return gw;
}

/* emb_embedding_backward_overwrite in `mode` with `threads` threads into a buffer full of
 * NaNs that starts `skew` floats past a 64-byte boundary (0: the streaming stores; 1: the
 * plain ones). Returns the buffer (the gradient starts at base + skew). */
static float *overwrite_in_mode(emb_embedding *e, const emb_tensor *idx, const emb_tensor *g,
                                int mode, int threads, int skew) {
    const int64_t V = emb_embedding_num_embeddings(e), D = emb_embedding_embedding_dim(e);
    size_t bytes = ((size_t)(V * D + skew) * sizeof(float) + 63) / 64 * 64;
    float *base = aligned_alloc(64, bytes ? bytes : 64);
    assert_non_null(base);
    for (int64_t i = 0; i < V * D + skew; i++) base[i] = NAN;
    run_in_mode(emb_embedding_backward_overwrite, e, idx, g, base + skew, mode, threads);
    return base;
}

typedef struct {
    int64_t V, D, n;
    int64_t pad; /* EMB_PADDING_NONE, or a row */
    bool scale, i32, accumulate;
    int hot; /* 0: uniform indices; k: most indices among k rows (heavy duplicates) */
} bw_case;

static void check_backward_case(const bw_case *c) {
    const int64_t V = c->V, D = c->D, n = c->n;
    float *w = calloc((size_t)(V * D), sizeof(float));
    assert_non_null(w);
    emb_embedding_options o = emb_embedding_options_default();
    o.padding_idx = c->pad;
    o.scale_grad_by_freq = c->scale;
    emb_embedding *e = NULL;
    emb_tensor wt = emb_test_view(EMB_FLOAT32, w, 2, SHP(V, D));
    EMB_OK_OR_FAIL(emb_embedding_wrap(&wt, NULL, false, &o, &e));
    void *idx = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    float *g = malloc((size_t)(n * D + 1) * sizeof(float));
    float *start = malloc((size_t)(V * D) * sizeof(float));
    assert_true(idx && g && start);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = emb_test_next_u64(&rng_state);
        int64_t v = (int64_t)(r % (uint64_t)V);
        if (c->hot && r % 4 != 0) v = (int64_t)((r >> 20) % (uint64_t)c->hot) * (V / c->hot);
        if (c->pad != EMB_PADDING_NONE && r % 7 == 0) v = c->pad;
        if (c->i32)
            ((int32_t *)idx)[i] = (int32_t)v;
        else
            ((int64_t *)idx)[i] = v;
    }
    for (int64_t i = 0; i < n * D; i++) g[i] = next_float();
    for (int64_t i = 0; i < V * D; i++) start[i] = c->accumulate ? next_float() : 0.0f;
    emb_tensor ti = emb_test_view(c->i32 ? EMB_INT32 : EMB_INT64, idx, 1, SHP(n));
    emb_tensor tg = emb_test_view(EMB_FLOAT32, g, 2, SHP(n, D));
    float *ref = backward_in_mode(e, &ti, &tg, start, EMB__TEMP_TABLE, 1);
    char what[160];
    for (int threads = 1; threads <= 3; threads++)
        for (int mode = EMB__TEMP_AUTO; mode <= EMB__TEMP_ACC; mode++) {
            float *got = backward_in_mode(e, &ti, &tg, start, mode, threads);
            snprintf(what, sizeof what,
                     "V=%lld D=%lld n=%lld pad=%lld scale=%d i32=%d acc=%d hot=%d mode=%d "
                     "threads=%d",
                     (long long)V, (long long)D, (long long)n, (long long)c->pad, c->scale, c->i32,
                     c->accumulate, c->hot, mode, threads);
            EMB_ASSERT_EXACT(got, ref, V * D, what);
            free(got);
        }
    /* the padding row got nothing; a row the batch did not name is untouched */
    if (c->pad != EMB_PADDING_NONE)
        EMB_ASSERT_EXACT(ref + c->pad * D, start + c->pad * D, D, "padding row");
    /* the overwriting backward gives the bits of zeroing, then accumulating, on every path */
    float *zeros = calloc((size_t)(V * D) + 1, sizeof(float));
    assert_non_null(zeros);
    float *fresh = backward_in_mode(e, &ti, &tg, zeros, EMB__TEMP_TABLE, 1);
    for (int threads = 1; threads <= 3; threads++)
        for (int mode = EMB__TEMP_AUTO; mode <= EMB__TEMP_ACC; mode++)
            for (int skew = 0; skew < 2; skew++) {
                float *base = overwrite_in_mode(e, &ti, &tg, mode, threads, skew);
                snprintf(what, sizeof what,
                         "overwrite V=%lld D=%lld n=%lld pad=%lld scale=%d i32=%d hot=%d "
                         "mode=%d threads=%d skew=%d",
                         (long long)V, (long long)D, (long long)n, (long long)c->pad, c->scale,
                         c->i32, c->hot, mode, threads, skew);
                EMB_ASSERT_EXACT(base + skew, fresh, V * D, what);
                if (skew) assert_true(isnan(base[0]));
                free(base);
            }
    free(fresh);
    free(zeros);
    free(ref);
    free(start);
    free(g);
    free(idx);
    emb_embedding_free(e);
    free(w);
}

static void test_backward_buckets_agree(void **state) {
    (void)state;
    const bw_case cases[] = {
        /* large table, small batch: the automatic choice sorts the batch */
        {100000, 8, 300, EMB_PADDING_NONE, false, false, false, 0},
        {100000, 8, 300, 4242, true, true, true, 0},
        {100000, 5, 2000, 0, true, false, true, 3},
        {1 << 20, 3, 1000, EMB_PADDING_NONE, false, true, false, 7},
        /* enough work for 2 and 3 threads (m * D above 2^18 per thread) on either path */
        {150000, 64, 20001, 17, false, false, false, 0},
        {150000, 64, 20001, EMB_PADDING_NONE, true, true, true, 50},
        /* small table, large batch: counting over the rows */
        {1000, 64, 30001, EMB_PADDING_NONE, false, false, false, 0},
        {1000, 16, 200000, 3, true, true, true, 5},
        /* counting over the rows with 4.8M floats: the overwriting form streams its rows */
        {300000, 16, 100000, 9, false, true, false, 0},
        /* the table of sums zeroed and added back by 2 and 3 threads (V * D >= 2 * 2^18),
         * int32 indices, a padding row, a gradient that already holds values */
        {600, 1024, 5000, 5, false, true, true, 0},
        /* edge sizes: one row, one position, V a power of two, every index the padding */
        {1, 4, 50, EMB_PADDING_NONE, true, false, false, 0},
        {1, 4, 50, 0, false, false, true, 0},
        {50, 4, 1, EMB_PADDING_NONE, false, true, false, 0},
        {64, 3, 64, EMB_PADDING_NONE, true, false, false, 0},
        {65, 3, 2, 64, false, false, false, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) check_backward_case(&cases[k]);
}

/* ---- renorm: bitmap vs sorted batch ------------------------------------------------------ */

static void test_renorm_row_lists_agree(void **state) {
    (void)state;
    const struct {
        int64_t V, D, n;
        double max_norm, p;
        bool i32;
    } cases[] = {
        {300000, 16, 500, 1.0, 2.0, false}, /* automatic: sorted batch */
        {60000, 48, 2100, 0.5, 1.0, true},  /* 3 threads can share it */
        {2000, 96, 9001, 0.7, 2.0, false},  /* automatic: bitmap, several threads */
        {2000, 5, 40, 1.5, INFINITY, true}, {1, 3, 10, 0.1, 2.0, false},
        {64, 7, 1, 0.1, 3.0, true},         {129, 2, 300, 0.2, 2.0, false},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int64_t V = cases[k].V, D = cases[k].D, n = cases[k].n;
        float *w0 = malloc((size_t)(V * D) * sizeof(float));
        float *ref = malloc((size_t)(V * D) * sizeof(float));
        float *got = malloc((size_t)(V * D) * sizeof(float));
        void *idx = malloc((size_t)n * sizeof(int64_t));
        assert_true(w0 && ref && got && idx);
        for (int64_t i = 0; i < V * D; i++) w0[i] = next_float() * 4.0f;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = (int64_t)(emb_test_next_u64(&rng_state) % (uint64_t)V);
            if (i % 5 == 4) v = cases[k].i32 ? ((int32_t *)idx)[i - 2] : ((int64_t *)idx)[i - 2];
            if (cases[k].i32)
                ((int32_t *)idx)[i] = (int32_t)v;
            else
                ((int64_t *)idx)[i] = v;
        }
        emb_tensor ti = emb_test_view(cases[k].i32 ? EMB_INT32 : EMB_INT64, idx, 1, SHP(n));
        memcpy(ref, w0, (size_t)(V * D) * sizeof(float));
        emb_tensor tr = emb_test_view(EMB_FLOAT32, ref, 2, SHP(V, D));
        emb__set_temp_mode(EMB__TEMP_TABLE);
        emb_set_num_threads(1);
        EMB_OK_OR_FAIL(emb_embedding_renorm_(&tr, &ti, cases[k].max_norm, cases[k].p));
        assert_memory_not_equal(ref, w0, (size_t)(V * D) * sizeof(float));
        for (int threads = 1; threads <= 3; threads++)
            for (int mode = EMB__TEMP_AUTO; mode <= EMB__TEMP_ACC; mode++) {
                memcpy(got, w0, (size_t)(V * D) * sizeof(float));
                emb_tensor tg = emb_test_view(EMB_FLOAT32, got, 2, SHP(V, D));
                emb__set_temp_mode(mode);
                emb_set_num_threads(threads);
                EMB_OK_OR_FAIL(emb_embedding_renorm_(&tg, &ti, cases[k].max_norm, cases[k].p));
                char what[96];
                snprintf(what, sizeof what, "renorm case %zu mode %d threads %d", k, mode, threads);
                EMB_ASSERT_EXACT(got, ref, V * D, what);
            }
        emb__set_temp_mode(EMB__TEMP_AUTO);
        emb_set_num_threads(0);
        free(w0);
        free(ref);
        free(got);
        free(idx);
    }
}

/* ---- a table of 2^58 rows --------------------------------------------------------------- */

/* The weight and the gradient are borrowed views of 2-row buffers: only the rows a batch
 * names are ever touched, and the automatic choice allocates for the batch, so a lookup
 * with max_norm and a dense backward work on a table whose row counters alone would need
 * 2^61 bytes. Forcing the table-sized temporaries fails cleanly (EMB_ERR_NOMEM, nothing
 * changed), which also checks those error paths. */
static void test_huge_table_batch_sized(void **state) {
    (void)state;
    const int64_t V = INT64_C(1) << 58, D = 2;
    float w[4] = {3.0f, 4.0f, 0.3f, 0.4f}; /* row norms 5 and 0.5 */
    emb_tensor wt = emb_test_view(EMB_FLOAT32, w, 2, SHP(V, D));
    emb_embedding_options o = emb_embedding_options_default();
    o.max_norm = 1.0;
    emb_embedding *e = NULL;
    EMB_OK_OR_FAIL(emb_embedding_wrap(&wt, NULL, false, &o, &e));
    int64_t ids[3] = {1, 0, 1};
    emb_tensor ti = emb_test_view(EMB_INT64, ids, 1, SHP(3));
    float out[6], g[6] = {1, 2, 3, 4, 5, 6}, gw[4] = {0, 0, 0, 0};
    emb_tensor to = emb_test_view(EMB_FLOAT32, out, 2, SHP(3, D));
    emb_tensor tg = emb_test_view(EMB_FLOAT32, g, 2, SHP(3, D));
    emb_tensor tw = emb_test_view(EMB_FLOAT32, gw, 2, SHP(V, D));

    /* table-sized temporaries: a 2^55-byte bitmap, 2^61 bytes of row offsets */
    emb__set_temp_mode(EMB__TEMP_TABLE);
    emb_test_fill(out, 6, -1.0f);
    EMB_EXPECT_ERR(emb_embedding_forward(e, &ti, &to), EMB_ERR_NOMEM,
                   "cannot allocate 3 row numbers and a 288230376151711744-row bitmap for "
                   "max_norm");
    emb_test_assert_all(out, 6, -1.0f, "out");
    assert_true(w[0] == 3.0f && w[1] == 4.0f && w[2] == 0.3f && w[3] == 0.4f);
    EMB_EXPECT_ERR(emb_embedding_backward(e, &ti, &tg, &tw), EMB_ERR_NOMEM,
                   "embedding_backward: cannot allocate");
    emb_test_assert_all(gw, 4, 0.0f, "grad_weight");
    emb__set_temp_mode(EMB__TEMP_AUTO);

    /* the automatic choice: batch-sized */
    EMB_OK_OR_FAIL(emb_embedding_forward(e, &ti, &to));
    const float s = (float)(1.0 / (5.0 + 1e-7));
    assert_true(w[0] == 3.0f * s && w[1] == 4.0f * s); /* renormalised in the caller's buffer */
    assert_true(w[2] == 0.3f && w[3] == 0.4f);         /* norm 0.5: kept */
    EMB_ASSERT_EXACT(out, w + 2, 2, "row 1");
    EMB_ASSERT_EXACT(out + 2, w, 2, "row 0");
    EMB_ASSERT_EXACT(out + 4, w + 2, 2, "row 1 again");
    EMB_OK_OR_FAIL(emb_embedding_backward(e, &ti, &tg, &tw));
    const float want[4] = {3, 4, 0.0f + 1 + 5, 0.0f + 2 + 6};
    EMB_ASSERT_EXACT(gw, want, 4, "grad_weight");
    emb_embedding_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_radix_sort_stable),
        cmocka_unit_test(test_backward_buckets_agree),
        cmocka_unit_test(test_renorm_row_lists_agree),
        cmocka_unit_test(test_huge_table_batch_sized),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
