/* Unit tests of nn.Embedding construction and forward (src/nn/embedding.c, src/kernels/
 * lookup_ref.c): options, create/from_pretrained, accessors, shapes from 0-d to 8-d, int32
 * and int64 indices, max_norm/renorm_, thread-count independence, and every error path
 * (status, message, and that the weight and the output are unchanged). Bit-exactness with
 * PyTorch is checked by tests/parity/test_embedding.py. */
#include "emb_test.h"

#include <stdlib.h>

#include "kernels/lookup.h"

#if defined(__SANITIZE_ADDRESS__)
/* Let the NOMEM test see NULL from a huge allocation instead of an ASan report. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "allocator_may_return_null=1";
}
#endif

/* ---- helpers ------------------------------------------------------------------------ */

/* A [V, D] table with distinct values w[i] = 0.25*i - 3 (no randomness). */
static emb_embedding *make_table(int64_t V, int64_t D, const emb_embedding_options *o,
                                 bool freeze) {
    float *w = malloc((size_t)(V * D) * sizeof(float));
    assert_non_null(w);
    for (int64_t i = 0; i < V * D; i++) w[i] = 0.25f * (float)i - 3.0f;
    emb_tensor t;
    int64_t shape[2] = {V, D};
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, w, 2, shape));
    emb_embedding *e = NULL;
    EMB_OK_OR_FAIL(emb_embedding_from_pretrained(&t, freeze, o, &e));
    free(w);
    return e;
}

static float *weight_of(emb_embedding *e) {
    emb_tensor v;
    EMB_OK_OR_FAIL(emb_embedding_weight(e, &v));
    return v.data;
}

/* A malloc'ed copy of the weight, to check later that nothing changed. */
static float *snapshot(emb_embedding *e) {
    int64_t n = emb_embedding_num_embeddings(e) * emb_embedding_embedding_dim(e);
    float *s = malloc((size_t)n * sizeof(float));
    assert_non_null(s);
    memcpy(s, weight_of(e), (size_t)n * sizeof(float));
    return s;
}

static void assert_weight_is(emb_embedding *e, const float *snap) {
    int64_t n = emb_embedding_num_embeddings(e) * emb_embedding_embedding_dim(e);
    EMB_ASSERT_EXACT(weight_of(e), snap, n, "weight");
}

static void fill_nan(float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = NAN;
}

static void assert_all_nan(const float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isnan(p[i])) fail_msg("out[%lld] was written (%g)", (long long)i, p[i]);
}

/* The next 4 raw draws of the default generator, compared with those of a fresh seed. */
static void assert_default_generator_at_seed(uint64_t seed) {
    uint32_t got[4], want[4];
    for (int i = 0; i < 4; i++) got[i] = emb_generator_random(NULL);
    emb_generator *g = NULL;
    EMB_OK_OR_FAIL(emb_generator_create(seed, &g));
    for (int i = 0; i < 4; i++) want[i] = emb_generator_random(g);
    emb_generator_free(g);
    assert_memory_equal(got, want, sizeof got);
}

/* ---- options and construction -------------------------------------------------------- */

static void test_options_default(void **state) {
    (void)state;
    emb_embedding_options o = emb_embedding_options_default();
    assert_true(o.padding_idx == EMB_PADDING_NONE);
    assert_true(isinf(o.max_norm) && o.max_norm > 0);
    assert_true(o.norm_type == 2.0);
    assert_false(o.scale_grad_by_freq);
    assert_false(o.sparse);
    assert_null(o.generator);
}

static void test_create_accessors(void **state) {
    (void)state;
    emb_embedding_options o = emb_embedding_options_default();
    o.padding_idx = -2;
    o.max_norm = 1.5;
    o.norm_type = 3.0;
    o.scale_grad_by_freq = true;
    o.sparse = true;
    emb_embedding *e = NULL;
    EMB_OK_OR_FAIL(emb_embedding_create(7, 5, &o, &e));
    assert_int_equal(emb_embedding_num_embeddings(e), 7);
    assert_int_equal(emb_embedding_embedding_dim(e), 5);
    assert_int_equal(emb_embedding_padding_idx(e), 5); /* -2 normalised */
    assert_true(emb_embedding_max_norm(e) == 1.5);
    assert_true(emb_embedding_norm_type(e) == 3.0);
    assert_true(emb_embedding_scale_grad_by_freq(e));
    assert_true(emb_embedding_is_sparse(e));
    assert_true(emb_embedding_requires_grad(e));
    emb_embedding_set_requires_grad(e, false);
    assert_false(emb_embedding_requires_grad(e));
    emb_embedding_set_requires_grad(e, true);
    assert_true(emb_embedding_requires_grad(e));
    emb_tensor v;
    EMB_OK_OR_FAIL(emb_embedding_weight(e, &v));
    assert_int_equal(v.dtype, EMB_FLOAT32);
    assert_int_equal(v.ndim, 2);
    assert_int_equal(v.shape[0], 7);
    assert_int_equal(v.shape[1], 5);
    assert_ptr_equal(v.data, weight_of(e));
    emb_embedding_free(e);

    /* defaults with opts NULL */
    EMB_OK_OR_FAIL(emb_embedding_create(3, 2, NULL, &e));
    assert_true(emb_embedding_padding_idx(e) == EMB_PADDING_NONE);
    assert_true(isinf(emb_embedding_max_norm(e)));
    assert_true(emb_embedding_norm_type(e) == 2.0);
    assert_false(emb_embedding_scale_grad_by_freq(e));
    assert_false(emb_embedding_is_sparse(e));
    emb_embedding_free(e);

    /* NULL handles: neutral values, no crash */
    assert_int_equal(emb_embedding_num_embeddings(NULL), 0);
    assert_int_equal(emb_embedding_embedding_dim(NULL), 0);
    assert_true(emb_embedding_padding_idx(NULL) == EMB_PADDING_NONE);
    assert_true(isnan(emb_embedding_max_norm(NULL)));
    assert_true(isnan(emb_embedding_norm_type(NULL)));
    assert_false(emb_embedding_scale_grad_by_freq(NULL));
    assert_false(emb_embedding_is_sparse(NULL));
    assert_false(emb_embedding_requires_grad(NULL));
    emb_embedding_set_requires_grad(NULL, true);
    emb_embedding_free(NULL);
}

static void test_create_padding_row_zeroed(void **state) {
    (void)state;
    /* same seed with and without padding: only the padding row differs, and it is +0 */
    for (int64_t pad = -4; pad < 4; pad++) {
        emb_embedding *a = NULL, *b = NULL;
        emb_manual_seed(42);
        EMB_OK_OR_FAIL(emb_embedding_create(4, 6, NULL, &a));
        emb_embedding_options o = emb_embedding_options_default();
        o.padding_idx = pad;
        emb_manual_seed(42);
        EMB_OK_OR_FAIL(emb_embedding_create(4, 6, &o, &b));
        int64_t p = pad < 0 ? pad + 4 : pad;
        assert_int_equal(emb_embedding_padding_idx(b), p);
        const float *wa = weight_of(a), *wb = weight_of(b);
        for (int64_t r = 0; r < 4; r++) {
            if (r == p) {
                const float zero[6] = {0};
                EMB_ASSERT_EXACT(wb + r * 6, zero, 6, "padding row");
                bool any = false;
                for (int j = 0; j < 6; j++) any |= wa[r * 6 + j] != 0;
                assert_true(any);
            } else {
                EMB_ASSERT_EXACT(wb + r * 6, wa + r * 6, 6, "other rows");
            }
        }
        emb_embedding_free(a);
        emb_embedding_free(b);
    }
}

static void test_create_uses_generator(void **state) {
    (void)state;
    emb_generator *g = NULL;
    EMB_OK_OR_FAIL(emb_generator_create(7, &g));
    emb_embedding_options o = emb_embedding_options_default();
    o.generator = g;
    emb_manual_seed(99);
    emb_embedding *a = NULL, *b = NULL;
    EMB_OK_OR_FAIL(emb_embedding_create(5, 4, &o, &a));
    assert_default_generator_at_seed(99); /* the default generator was not used */
    emb_manual_seed(7);
    EMB_OK_OR_FAIL(emb_embedding_create(5, 4, NULL, &b));
    EMB_ASSERT_EXACT(weight_of(a), weight_of(b), 20, "generator vs default with same seed");
    emb_embedding_free(a);
    emb_embedding_free(b);
    emb_generator_free(g);
}

static void test_from_pretrained(void **state) {
    (void)state;
    float w[3][2] = {{1, 2}, {3, 4}, {-0.0f, NAN}};
    emb_tensor t;
    int64_t shape[2] = {3, 2};
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, w, 2, shape));
    emb_embedding_options o = emb_embedding_options_default();
    o.padding_idx = 1;
    emb_manual_seed(5);
    emb_embedding *e = NULL;
    EMB_OK_OR_FAIL(emb_embedding_from_pretrained(&t, true, &o, &e));
    assert_default_generator_at_seed(5);          /* nothing drawn */
    assert_false(emb_embedding_requires_grad(e)); /* freeze */
    assert_int_equal(emb_embedding_padding_idx(e), 1);
    /* a bitwise copy, padding row not zeroed, storage owned */
    assert_memory_equal(weight_of(e), w, sizeof w);
    assert_ptr_not_equal(weight_of(e), &w[0][0]);
    w[0][0] = 100;
    assert_true(weight_of(e)[0] == 1.0f);
    emb_embedding_free(e);
    EMB_OK_OR_FAIL(emb_embedding_from_pretrained(&t, false, NULL, &e));
    assert_true(emb_embedding_requires_grad(e));
    emb_embedding_free(e);
}

/* Every create/from_pretrained error: status, message, *out untouched, no draws. */
static void test_create_errors(void **state) {
    (void)state;
    emb_embedding *sentinel = (emb_embedding *)(uintptr_t)0x1234;
    emb_embedding *e = sentinel;
    emb_embedding_options o = emb_embedding_options_default();
    emb_manual_seed(123);

    EMB_EXPECT_ERR(emb_embedding_create(3, 2, NULL, NULL), EMB_ERR_NULL, "out must not be NULL");
    EMB_EXPECT_ERR(emb_embedding_create(0, 2, NULL, &e), EMB_ERR_INVALID,
                   "num_embeddings must be at least 1, got 0");
    EMB_EXPECT_ERR(emb_embedding_create(-1, 2, NULL, &e), EMB_ERR_INVALID,
                   "num_embeddings must be at least 1, got -1");
    EMB_EXPECT_ERR(emb_embedding_create(3, 0, NULL, &e), EMB_ERR_INVALID,
                   "embedding_dim must be at least 1, got 0");
    EMB_EXPECT_ERR(emb_embedding_create(3, -5, NULL, &e), EMB_ERR_INVALID,
                   "embedding_dim must be at least 1, got -5");
    o.padding_idx = 3;
    EMB_EXPECT_ERR(emb_embedding_create(3, 2, &o, &e), EMB_ERR_INVALID,
                   "Padding_idx must be within num_embeddings: got padding_idx=3, valid: [-3, 3)");
    o.padding_idx = -4;
    EMB_EXPECT_ERR(emb_embedding_create(3, 2, &o, &e), EMB_ERR_INVALID,
                   "Padding_idx must be within num_embeddings: got padding_idx=-4, valid: [-3, 3)");
    o.padding_idx = INT64_MAX;
    EMB_EXPECT_ERR(emb_embedding_create(3, 2, &o, &e), EMB_ERR_INVALID,
                   "Padding_idx must be within num_embeddings");
    o = emb_embedding_options_default();
    const double bad_max[] = {0.0, -0.0, -1.0, -INFINITY, NAN};
    for (size_t i = 0; i < sizeof bad_max / sizeof bad_max[0]; i++) {
        o.max_norm = bad_max[i];
        EMB_EXPECT_ERR(emb_embedding_create(3, 2, &o, &e), EMB_ERR_INVALID,
                       "max_norm must be > 0 (INFINITY for none), got ");
    }
    o = emb_embedding_options_default();
    o.norm_type = NAN;
    EMB_EXPECT_ERR(emb_embedding_create(3, 2, &o, &e), EMB_ERR_INVALID,
                   "norm_type must not be NaN");
    EMB_EXPECT_ERR(emb_embedding_create(INT64_MAX, 2, NULL, &e), EMB_ERR_OVERFLOW, "does not fit");
    EMB_EXPECT_ERR(emb_embedding_create(INT64_C(1) << 31, INT64_C(1) << 31, NULL, &e),
                   EMB_ERR_OVERFLOW, "a weight of 2147483648 x 2147483648 float32 values");
    /* fits in int64 bytes, but no machine has 2^62 bytes */
    EMB_EXPECT_ERR(emb_embedding_create(INT64_C(1) << 40, INT64_C(1) << 20, NULL, &e),
                   EMB_ERR_NOMEM, "cannot allocate");
    assert_ptr_equal(e, sentinel);
    assert_default_generator_at_seed(123); /* no error drew from the generator */

    /* from_pretrained */
    float w[6] = {1, 2, 3, 4, 5, 6};
    emb_tensor t;
    int64_t s2[2] = {3, 2};
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, w, 2, s2));
    EMB_EXPECT_ERR(emb_embedding_from_pretrained(NULL, true, NULL, &e), EMB_ERR_NULL,
                   "weights must not be NULL");
    EMB_EXPECT_ERR(emb_embedding_from_pretrained(&t, true, NULL, NULL), EMB_ERR_NULL,
                   "out must not be NULL");
    emb_tensor bad = t;
    bad.ndim = 1;
    bad.shape[0] = 6;
    EMB_EXPECT_ERR(emb_embedding_from_pretrained(&bad, true, NULL, &e), EMB_ERR_SHAPE,
                   "Embeddings parameter is expected to be 2-dimensional, got 1");
    bad = t;
    bad.ndim = 3;
    bad.shape[2] = 1;
    EMB_EXPECT_ERR(emb_embedding_from_pretrained(&bad, true, NULL, &e), EMB_ERR_SHAPE,
                   "Embeddings parameter is expected to be 2-dimensional");
    bad = t;
    bad.dtype = EMB_FLOAT64;
    bad.shape[0] = 1;
    EMB_EXPECT_ERR(emb_embedding_from_pretrained(&bad, true, NULL, &e), EMB_ERR_DTYPE,
                   "weights must be float32, got float64");
    bad = t;
    bad.data = NULL;
    EMB_EXPECT_ERR(emb_embedding_from_pretrained(&bad, true, NULL, &e), EMB_ERR_NULL,
                   "weights has 6 elements but its data is NULL");
    bad = t;
    bad.shape[1] = -2;
    EMB_EXPECT_ERR(emb_embedding_from_pretrained(&bad, true, NULL, &e), EMB_ERR_SHAPE,
                   "negative dimension");
    bad = t;
    bad.shape[0] = 0;
    bad.data = NULL;
    EMB_EXPECT_ERR(emb_embedding_from_pretrained(&bad, true, NULL, &e), EMB_ERR_INVALID,
                   "num_embeddings must be at least 1, got 0");
    bad = t;
    bad.shape[1] = 0;
    bad.data = NULL;
    EMB_EXPECT_ERR(emb_embedding_from_pretrained(&bad, true, NULL, &e), EMB_ERR_INVALID,
                   "embedding_dim must be at least 1, got 0");
    o = emb_embedding_options_default();
    o.padding_idx = -4;
    EMB_EXPECT_ERR(emb_embedding_from_pretrained(&t, true, &o, &e), EMB_ERR_INVALID,
                   "Padding_idx must be within num_embeddings: got padding_idx=-4, valid: [-3, 3)");
    o = emb_embedding_options_default();
    o.max_norm = -2;
    EMB_EXPECT_ERR(emb_embedding_from_pretrained(&t, true, &o, &e), EMB_ERR_INVALID,
                   "max_norm must be > 0");
    o = emb_embedding_options_default();
    o.norm_type = NAN;
    EMB_EXPECT_ERR(emb_embedding_from_pretrained(&t, true, &o, &e), EMB_ERR_INVALID,
                   "norm_type must not be NaN");
    assert_ptr_equal(e, sentinel);
    const float w0[6] = {1, 2, 3, 4, 5, 6};
    EMB_ASSERT_EXACT(w, w0, 6, "caller's weights");

    /* weight accessor */
    emb_tensor v;
    EMB_EXPECT_ERR(emb_embedding_weight(NULL, &v), EMB_ERR_NULL, "embedding must not be NULL");
    EMB_OK_OR_FAIL(emb_embedding_create(2, 2, NULL, &e));
    EMB_EXPECT_ERR(emb_embedding_weight(e, NULL), EMB_ERR_NULL, "view must not be NULL");
    emb_embedding_free(e);
}

/* ---- forward ---------------------------------------------------------------------------- */

static void test_forward_shapes(void **state) {
    (void)state;
    emb_embedding *e = make_table(6, 3, NULL, false);
    const float *w = weight_of(e);
    emb_tensor it, ot;
    int nd;
    int64_t shp[EMB_MAX_DIMS];

    /* 0-d index -> [D] */
    int64_t i0 = 4;
    float out0[3];
    EMB_OK_OR_FAIL(emb_tensor_init(&it, EMB_INT64, &i0, 0, NULL));
    EMB_OK_OR_FAIL(emb_embedding_output_shape(e, &it, &nd, shp));
    assert_int_equal(nd, 1);
    assert_int_equal(shp[0], 3);
    EMB_OK_OR_FAIL(emb_tensor_init(&ot, EMB_FLOAT32, out0, 1, shp));
    EMB_OK_OR_FAIL(emb_embedding_forward(e, &it, &ot));
    EMB_ASSERT_EXACT(out0, w + 12, 3, "0-d lookup");

    /* 8-d int32 indices [2,1,2,1,1,2,1,2] (16 positions) -> 9-d output */
    int64_t s8[8] = {2, 1, 2, 1, 1, 2, 1, 2};
    int32_t i8[16];
    for (int k = 0; k < 16; k++) i8[k] = (k * 5 + 1) % 6;
    float out8[16 * 3];
    EMB_OK_OR_FAIL(emb_tensor_init(&it, EMB_INT32, i8, 8, s8));
    EMB_OK_OR_FAIL(emb_embedding_output_shape(e, &it, &nd, shp));
    assert_int_equal(nd, 9);
    for (int k = 0; k < 8; k++) assert_int_equal(shp[k], s8[k]);
    assert_int_equal(shp[8], 3);
    EMB_OK_OR_FAIL(emb_tensor_init(&ot, EMB_FLOAT32, out8, 9, shp));
    EMB_OK_OR_FAIL(emb_embedding_forward(e, &it, &ot));
    for (int k = 0; k < 16; k++) EMB_ASSERT_EXACT(out8 + 3 * k, w + 3 * i8[k], 3, "8-d lookup");

    /* empty: [2, 0] -> [2, 0, 3], data may be NULL */
    int64_t se[2] = {2, 0}, soe[3] = {2, 0, 3};
    EMB_OK_OR_FAIL(emb_tensor_init(&it, EMB_INT64, NULL, 2, se));
    EMB_OK_OR_FAIL(emb_tensor_init(&ot, EMB_FLOAT32, NULL, 3, soe));
    EMB_OK_OR_FAIL(emb_embedding_forward(e, &it, &ot));

    /* int64 2-d, repeated indices, padding row returned as stored */
    emb_embedding_free(e);
    emb_embedding_options o = emb_embedding_options_default();
    o.padding_idx = 2;
    e = make_table(6, 3, &o, false);
    w = weight_of(e);
    int64_t i2[2][3] = {{2, 0, 2}, {5, 5, 1}};
    int64_t s2[2] = {2, 3}, so2[3] = {2, 3, 3};
    float out2[18];
    EMB_OK_OR_FAIL(emb_tensor_init(&it, EMB_INT64, i2, 2, s2));
    EMB_OK_OR_FAIL(emb_tensor_init(&ot, EMB_FLOAT32, out2, 3, so2));
    EMB_OK_OR_FAIL(emb_embedding_forward(e, &it, &ot));
    for (int k = 0; k < 6; k++)
        EMB_ASSERT_EXACT(out2 + 3 * k, w + 3 * i2[k / 3][k % 3], 3, "2-d lookup");
    assert_true(out2[0] != 0.0f); /* padding row 2 is not zeroed by from_pretrained or forward */
    emb_embedding_free(e);
}

static void test_lookup_functional(void **state) {
    (void)state;
    float w[4][2] = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
    int64_t sw[2] = {4, 2};
    int32_t idx[3] = {3, 0, 3};
    int64_t si[1] = {3}, so[2] = {3, 2};
    float out[6];
    emb_tensor wt, it, ot;
    EMB_OK_OR_FAIL(emb_tensor_init(&wt, EMB_FLOAT32, w, 2, sw));
    EMB_OK_OR_FAIL(emb_tensor_init(&it, EMB_INT32, idx, 1, si));
    EMB_OK_OR_FAIL(emb_tensor_init(&ot, EMB_FLOAT32, out, 2, so));
    EMB_OK_OR_FAIL(emb_embedding_lookup(&wt, &it, &ot));
    const float want[6] = {6, 7, 0, 1, 6, 7};
    EMB_ASSERT_EXACT(out, want, 6, "lookup");

    /* a [4, 0] weight: any valid index gives an empty row */
    int64_t sw0[2] = {4, 0}, so0[2] = {3, 0};
    EMB_OK_OR_FAIL(emb_tensor_init(&wt, EMB_FLOAT32, NULL, 2, sw0));
    EMB_OK_OR_FAIL(emb_tensor_init(&ot, EMB_FLOAT32, NULL, 2, so0));
    EMB_OK_OR_FAIL(emb_embedding_lookup(&wt, &it, &ot));
    /* ... but a bad one is still reported */
    idx[1] = 4;
    EMB_EXPECT_ERR(emb_embedding_lookup(&wt, &it, &ot), EMB_ERR_INDEX,
                   "index 4 at position 1 is out of range for an embedding with 4 rows "
                   "(valid: [0, 4))");
    /* a [0, 2] weight with empty indices is fine; with one index it is an error */
    int64_t swz[2] = {0, 2}, s0[1] = {0}, so00[2] = {0, 2};
    EMB_OK_OR_FAIL(emb_tensor_init(&wt, EMB_FLOAT32, NULL, 2, swz));
    EMB_OK_OR_FAIL(emb_tensor_init(&it, EMB_INT32, NULL, 1, s0));
    EMB_OK_OR_FAIL(emb_tensor_init(&ot, EMB_FLOAT32, NULL, 2, so00));
    EMB_OK_OR_FAIL(emb_embedding_lookup(&wt, &it, &ot));
    int64_t one = 0, s1[1] = {1}, so1[2] = {1, 2};
    float o1[2] = {NAN, NAN};
    EMB_OK_OR_FAIL(emb_tensor_init(&it, EMB_INT64, &one, 1, s1));
    EMB_OK_OR_FAIL(emb_tensor_init(&ot, EMB_FLOAT32, o1, 2, so1));
    EMB_EXPECT_ERR(emb_embedding_lookup(&wt, &it, &ot), EMB_ERR_INDEX,
                   "index 0 at position 0 is out of range for an embedding with 0 rows "
                   "(valid: [0, 0))");
    assert_all_nan(o1, 2);
}

/* out sharing memory with indices is refused (found by the fuzzer: the gather overwrote
 * indices it had not read yet, then read rows out of range), nothing written; adjacent
 * buffers are fine. */
static void test_lookup_overlap(void **state) {
    (void)state;
    _Alignas(8) unsigned char mem[128];
    float w[3][2] = {{0, 1}, {2, 3}, {4, 5}};
    emb_tensor wt = emb_test_view(EMB_FLOAT32, w, 2, SHP(3, 2));
    int64_t idx[2] = {2, 1};
    memset(mem, 0x7f, sizeof mem);
    memcpy(mem, idx, sizeof idx);
    emb_tensor it = emb_test_view(EMB_INT64, mem, 1, SHP(2));
    /* out starts inside the indices (byte 8) */
    emb_tensor ot = emb_test_view(EMB_FLOAT32, mem + 8, 2, SHP(2, 2));
    unsigned char before[128];
    memcpy(before, mem, sizeof mem);
    EMB_EXPECT_ERR(emb_embedding_lookup(&wt, &it, &ot), EMB_ERR_INVALID,
                   "out must not overlap indices");
    assert_memory_equal(mem, before, sizeof mem);
    /* out ends inside the indices */
    emb_tensor it2 = emb_test_view(EMB_INT64, mem + 16, 1, SHP(2));
    memcpy(mem + 16, idx, sizeof idx);
    memcpy(before, mem, sizeof mem);
    ot = emb_test_view(EMB_FLOAT32, mem + 4, 2, SHP(2, 2));
    EMB_EXPECT_ERR(emb_embedding_lookup(&wt, &it2, &ot), EMB_ERR_INVALID,
                   "out must not overlap indices");
    assert_memory_equal(mem, before, sizeof mem);
    /* adjacent: out right after the indices */
    ot = emb_test_view(EMB_FLOAT32, mem + 32, 2, SHP(2, 2));
    EMB_OK_OR_FAIL(emb_embedding_lookup(&wt, &it2, &ot));
    const float want[4] = {4, 5, 2, 3};
    EMB_ASSERT_EXACT((const float *)(mem + 32), want, 4, "adjacent out");
}

/* All forward/lookup/output_shape errors: status, message, weight and out unchanged. */
static void test_forward_errors(void **state) {
    (void)state;
    for (int with_max_norm = 0; with_max_norm < 2; with_max_norm++) {
        emb_embedding_options o = emb_embedding_options_default();
        if (with_max_norm) o.max_norm = 0.5;
        emb_embedding *e = make_table(10, 4, &o, false);
        float *snap = snapshot(e);
        int64_t idx[4] = {1, 2, 3, 4};
        int32_t idx32[4] = {1, 2, 3, 4};
        int64_t si[2] = {2, 2}, so[3] = {2, 2, 4};
        float out[16];
        fill_nan(out, 16);
        emb_tensor it, ot;
        EMB_OK_OR_FAIL(emb_tensor_init(&it, EMB_INT64, idx, 2, si));
        EMB_OK_OR_FAIL(emb_tensor_init(&ot, EMB_FLOAT32, out, 3, so));

        EMB_EXPECT_ERR(emb_embedding_forward(NULL, &it, &ot), EMB_ERR_NULL,
                       "embedding must not be NULL");
        EMB_EXPECT_ERR(emb_embedding_forward(e, NULL, &ot), EMB_ERR_NULL,
                       "indices must not be NULL");
        EMB_EXPECT_ERR(emb_embedding_forward(e, &it, NULL), EMB_ERR_NULL, "out must not be NULL");
        /* index dtype: PyTorch's message */
        const emb_dtype bad_dt[] = {EMB_FLOAT32, EMB_INT16, EMB_UINT8, EMB_BOOL, EMB_FLOAT64};
        const char *names[] = {"torch.FloatTensor", "torch.ShortTensor", "torch.ByteTensor",
                               "CPUBoolType", "torch.DoubleTensor"};
        for (int k = 0; k < 5; k++) {
            emb_tensor b = it;
            b.dtype = bad_dt[k];
            char msg[300];
            snprintf(msg, sizeof msg,
                     "Expected tensor for argument #1 'indices' to have one of the following "
                     "scalar types: Long, Int; but got %s instead (while checking arguments "
                     "for embedding)",
                     names[k]);
            EMB_EXPECT_ERR(emb_embedding_forward(e, &b, &ot), EMB_ERR_DTYPE, msg);
            assert_string_equal(emb_errmsg(), msg);
        }
        emb_tensor b = it;
        b.dtype = (emb_dtype)77;
        EMB_EXPECT_ERR(emb_embedding_forward(e, &b, &ot), EMB_ERR_DTYPE, "but got unknown");
        /* index rank 9 */
        b = it;
        b.ndim = 9;
        for (int k = 2; k < 9; k++) b.shape[k] = 1;
        EMB_EXPECT_ERR(emb_embedding_forward(e, &b, &ot), EMB_ERR_SHAPE,
                       "indices has 9 dimensions; at most 8 are supported");
        b = it;
        b.ndim = -1;
        EMB_EXPECT_ERR(emb_embedding_forward(e, &b, &ot), EMB_ERR_SHAPE, "indices has -1");
        b = it;
        b.shape[1] = -2;
        EMB_EXPECT_ERR(emb_embedding_forward(e, &b, &ot), EMB_ERR_SHAPE,
                       "indices has a negative dimension -2 at dim 1");
        b = it;
        b.data = NULL;
        EMB_EXPECT_ERR(emb_embedding_forward(e, &b, &ot), EMB_ERR_NULL,
                       "indices has 4 elements but its data is NULL");
        /* out */
        emb_tensor c = ot;
        c.dtype = EMB_FLOAT64;
        EMB_EXPECT_ERR(emb_embedding_forward(e, &it, &c), EMB_ERR_DTYPE,
                       "out must be float32, got float64");
        c = ot;
        c.shape[2] = 5;
        EMB_EXPECT_ERR(emb_embedding_forward(e, &it, &c), EMB_ERR_SHAPE,
                       "out has shape [2, 2, 5], expected [2, 2, 4]");
        c = ot;
        c.ndim = 2;
        c.shape[1] = 8;
        EMB_EXPECT_ERR(emb_embedding_forward(e, &it, &c), EMB_ERR_SHAPE,
                       "out has shape [2, 8], expected [2, 2, 4]");
        c = ot;
        c.data = NULL;
        EMB_EXPECT_ERR(emb_embedding_forward(e, &it, &c), EMB_ERR_NULL,
                       "out has 16 elements but its data is NULL");
        /* out-of-range values, first bad position reported, int64 and int32 */
        const int64_t bad_vals[] = {10, -1, INT64_MAX, INT64_MIN, 1000};
        for (int k = 0; k < 5; k++) {
            for (int pos = 0; pos < 4; pos++) {
                int64_t saved = idx[pos];
                idx[pos] = bad_vals[k];
                idx[3] = pos < 3 ? -7 : idx[3]; /* a later bad index is not the one reported */
                char msg[200];
                snprintf(msg, sizeof msg,
                         "index %lld at position %d is out of range for an embedding with 10 "
                         "rows (valid: [0, 10))",
                         (long long)bad_vals[k], pos);
                EMB_EXPECT_ERR(emb_embedding_forward(e, &it, &ot), EMB_ERR_INDEX, msg);
                assert_string_equal(emb_errmsg(), msg);
                idx[pos] = saved;
                idx[3] = 4;
            }
        }
        emb_tensor i32;
        EMB_OK_OR_FAIL(emb_tensor_init(&i32, EMB_INT32, idx32, 2, si));
        idx32[2] = -3;
        EMB_EXPECT_ERR(emb_embedding_forward(e, &i32, &ot), EMB_ERR_INDEX,
                       "index -3 at position 2 is out of range for an embedding with 10 rows");
        idx32[2] = INT32_MAX;
        EMB_EXPECT_ERR(emb_embedding_forward(e, &i32, &ot), EMB_ERR_INDEX,
                       "index 2147483647 at position 2 is out of range");
        idx32[2] = 3;

        assert_weight_is(e, snap); /* no renorm happened, even with max_norm */
        assert_all_nan(out, 16);

        /* emb_embedding_output_shape */
        int nd = -5;
        int64_t shp[EMB_MAX_DIMS];
        EMB_EXPECT_ERR(emb_embedding_output_shape(NULL, &it, &nd, shp), EMB_ERR_NULL,
                       "embedding must not be NULL");
        EMB_EXPECT_ERR(emb_embedding_output_shape(e, NULL, &nd, shp), EMB_ERR_NULL,
                       "indices must not be NULL");
        EMB_EXPECT_ERR(emb_embedding_output_shape(e, &it, NULL, shp), EMB_ERR_NULL,
                       "ndim must not be NULL");
        EMB_EXPECT_ERR(emb_embedding_output_shape(e, &it, &nd, NULL), EMB_ERR_NULL,
                       "shape must not be NULL");
        b = it;
        b.dtype = EMB_FLOAT32;
        EMB_EXPECT_ERR(emb_embedding_output_shape(e, &b, &nd, shp), EMB_ERR_DTYPE,
                       "but got torch.FloatTensor instead");
        b = it;
        b.ndim = 9;
        EMB_EXPECT_ERR(emb_embedding_output_shape(e, &b, &nd, shp), EMB_ERR_SHAPE, "at most 8");
        assert_int_equal(nd, -5);

        free(snap);
        emb_embedding_free(e);
    }

    /* emb_embedding_lookup's own checks */
    float w[3][2] = {{1, 2}, {3, 4}, {5, 6}};
    const float w0[3][2] = {{1, 2}, {3, 4}, {5, 6}};
    int64_t sw[2] = {3, 2}, idx[2] = {0, 3}, si[1] = {2}, so[2] = {2, 2};
    float out[4];
    fill_nan(out, 4);
    emb_tensor wt, it, ot;
    EMB_OK_OR_FAIL(emb_tensor_init(&wt, EMB_FLOAT32, w, 2, sw));
    EMB_OK_OR_FAIL(emb_tensor_init(&it, EMB_INT64, idx, 1, si));
    EMB_OK_OR_FAIL(emb_tensor_init(&ot, EMB_FLOAT32, out, 2, so));
    EMB_EXPECT_ERR(emb_embedding_lookup(NULL, &it, &ot), EMB_ERR_NULL, "weight must not be NULL");
    EMB_EXPECT_ERR(emb_embedding_lookup(&wt, NULL, &ot), EMB_ERR_NULL, "indices must not be NULL");
    EMB_EXPECT_ERR(emb_embedding_lookup(&wt, &it, NULL), EMB_ERR_NULL, "out must not be NULL");
    emb_tensor b = wt;
    b.ndim = 1;
    b.shape[0] = 6;
    EMB_EXPECT_ERR(emb_embedding_lookup(&b, &it, &ot), EMB_ERR_SHAPE,
                   "'weight' must be 2-D, got 1 dimensions");
    b = wt;
    b.dtype = EMB_INT32;
    EMB_EXPECT_ERR(emb_embedding_lookup(&b, &it, &ot), EMB_ERR_DTYPE,
                   "weight must be float32, got int32");
    b = wt;
    b.data = NULL;
    EMB_EXPECT_ERR(emb_embedding_lookup(&b, &it, &ot), EMB_ERR_NULL, "weight has 6 elements");
    b = it;
    b.dtype = EMB_INT8;
    EMB_EXPECT_ERR(emb_embedding_lookup(&wt, &b, &ot), EMB_ERR_DTYPE,
                   "but got torch.CharTensor instead (while checking arguments for embedding)");
    emb_tensor c = ot;
    c.shape[1] = 3;
    EMB_EXPECT_ERR(emb_embedding_lookup(&wt, &it, &c), EMB_ERR_SHAPE,
                   "out has shape [2, 3], expected [2, 2]");
    EMB_EXPECT_ERR(emb_embedding_lookup(&wt, &it, &ot), EMB_ERR_INDEX,
                   "index 3 at position 1 is out of range for an embedding with 3 rows "
                   "(valid: [0, 3))");
    assert_all_nan(out, 4);
    EMB_ASSERT_EXACT(&w[0][0], &w0[0][0], 6, "caller weight");
}

/* ---- max_norm ----------------------------------------------------------------------------- */

static void test_renorm_values(void **state) {
    (void)state;
    /* docs/semantics.md §5.3: [3, 4] with max_norm 1 -> [0.6000000238, 0.8000000119]; the
     * row named three times is processed once; row 1 is not named; row 2 has norm exactly
     * max_norm and is left alone. */
    float w[3][2] = {{3, 4}, {30, 40}, {0.6f, 0.8f}};
    int64_t sw[2] = {3, 2}, idx[3] = {0, 0, 0}, si[1] = {3};
    emb_tensor wt, it;
    EMB_OK_OR_FAIL(emb_tensor_init(&wt, EMB_FLOAT32, w, 2, sw));
    EMB_OK_OR_FAIL(emb_tensor_init(&it, EMB_INT64, idx, 1, si));
    EMB_OK_OR_FAIL(emb_embedding_renorm_(&wt, &it, 1.0, 2.0));
    const float want0[2] = {0.6000000238f, 0.8000000119f};
    EMB_ASSERT_EXACT(w[0], want0, 2, "renormed row");
    assert_true(w[1][0] == 30 && w[1][1] == 40);
    float n2 = emb__row_norm2_f32_ref(w[2], 2);
    idx[0] = 2;
    idx[1] = idx[2] = 2;
    const float keep[2] = {0.6f, 0.8f};
    EMB_OK_OR_FAIL(emb_embedding_renorm_(&wt, &it, (double)n2, 2.0));
    EMB_ASSERT_EXACT(w[2], keep, 2, "row at max_norm");

    /* the norms of the reference's other norm types */
    const float x[4] = {3, -4, 0, 12};
    assert_true(emb__row_norm_f32_ref(x, 4, 1.0) == 19.0f);
    assert_true(emb__row_norm_f32_ref(x, 4, 2.0) == 13.0f);
    assert_true(emb__row_norm_f32_ref(x, 4, INFINITY) == 12.0f);
    assert_true(emb__row_norm_f32_ref(x, 4, -INFINITY) == 0.0f);
    assert_true(emb__row_norm_f32_ref(x, 4, 0.0) == 3.0f);
    assert_true(emb__row_norm_f32_ref(x, 0, 2.0) == 0.0f);
    assert_true(isinf(emb__row_norm_f32_ref(x, 0, -1.0)));
    const float y[2] = {3, -4}; /* p = -1: 1 / (1/3 + 1/4) */
    assert_true(fabsf(emb__row_norm_f32_ref(y, 2, -1.0) - 12.0f / 7.0f) < 1e-6f);
    const float z[3] = {1, NAN, 2};
    assert_true(isnan(emb__row_norm_f32_ref(z, 3, INFINITY)));
    assert_true(isnan(emb__row_norm_f32_ref(z, 3, -INFINITY)));
    assert_true(isnan(emb__row_norm_f32_ref(z, 3, 2.0)));

    /* The 2-norm's tail rule (docs/semantics.md §5.2): for 13 elements the 5-element tail
     * is 4 plain adds (rounded squares) then 1 fma. Pick inputs where that differs from an
     * all-fma or all-plain tail. */
    bool found = false;
    for (int trial = 0; trial < 1000 && !found; trial++) {
        float v[13];
        for (int i = 0; i < 13; i++)
            v[i] = 1.0f + (float)((i * 7919 + trial * 104729) % 1000) * 0.0012345f;
        float lane[8] = {0};
        for (int j = 0; j < 8; j++) lane[j] = fmaf(v[j], v[j], lane[j]);
        float base = lane[0];
        for (int j = 1; j < 8; j++) base = base + lane[j];
        float good = base, all_fma = base, all_plain = base;
        for (int i = 8; i < 13; i++) {
            float sq = v[i] * v[i];
            good = i < 12 ? good + sq : fmaf(v[i], v[i], good);
            all_fma = fmaf(v[i], v[i], all_fma);
            all_plain = all_plain + sq;
        }
        if (sqrtf(good) == sqrtf(all_fma) || sqrtf(good) == sqrtf(all_plain)) continue;
        found = true;
        assert_true(emb__row_norm2_f32_ref(v, 13) == sqrtf(good));
    }
    assert_true(found);

    /* the sort path for distinct rows (a large table, few indices) processes a repeated row
     * once too; with p = 0 (count of non-zeros) a second pass would halve the row again */
    float *big = calloc(1000 * 2, sizeof(float));
    assert_non_null(big);
    big[10] = 3;
    big[11] = 4;
    int64_t sb[2] = {1000, 2}, rep[3] = {5, 5, 5};
    EMB_OK_OR_FAIL(emb_tensor_init(&wt, EMB_FLOAT32, big, 2, sb));
    EMB_OK_OR_FAIL(emb_tensor_init(&it, EMB_INT64, rep, 1, si));
    EMB_OK_OR_FAIL(emb_embedding_renorm_(&wt, &it, 1.0, 0.0));
    float half = (float)(1.0 / (2.0 + 1e-7));
    const float want_p0[2] = {3 * half, 4 * half};
    EMB_ASSERT_EXACT(big + 10, want_p0, 2, "renormed row, sort path");
    /* and the bitmap path (a small table) */
    float small[2][2] = {{3, 4}, {1, 1}};
    int64_t ss[2] = {2, 2};
    EMB_OK_OR_FAIL(emb_tensor_init(&wt, EMB_FLOAT32, small, 2, ss));
    rep[0] = rep[1] = rep[2] = 0;
    EMB_OK_OR_FAIL(emb_embedding_renorm_(&wt, &it, 1.0, 0.0));
    EMB_ASSERT_EXACT(small[0], want_p0, 2, "renormed row, bitmap path");
    free(big);
}

static void test_forward_max_norm(void **state) {
    (void)state;
    /* module forward: renorm first (each distinct looked-up row once, the padding row too),
     * then the lookup returns the renormed rows; rows not looked up are untouched */
    float w[4][2] = {{3, 4}, {0.3f, 0.4f}, {6, 8}, {-5, 12}};
    int64_t sw[2] = {4, 2};
    emb_tensor wt;
    EMB_OK_OR_FAIL(emb_tensor_init(&wt, EMB_FLOAT32, w, 2, sw));
    emb_embedding_options o = emb_embedding_options_default();
    o.max_norm = 1.0;
    o.padding_idx = 2;
    emb_embedding *e = NULL;
    EMB_OK_OR_FAIL(emb_embedding_from_pretrained(&wt, false, &o, &e));
    int32_t idx[5] = {2, 0, 2, 1, 0};
    int64_t si[1] = {5}, so[2] = {5, 2};
    float out[10];
    emb_tensor it, ot;
    EMB_OK_OR_FAIL(emb_tensor_init(&it, EMB_INT32, idx, 1, si));
    EMB_OK_OR_FAIL(emb_tensor_init(&ot, EMB_FLOAT32, out, 2, so));
    EMB_OK_OR_FAIL(emb_embedding_forward(e, &it, &ot));
    const float *nw = weight_of(e);
    float s0 = (float)(1.0 / (5.0 + 1e-7)), s2 = (float)(1.0 / (10.0 + 1e-7));
    const float want_w[8] = {3 * s0, 4 * s0, 0.3f, 0.4f, 6 * s2, 8 * s2, -5, 12};
    EMB_ASSERT_EXACT(nw, want_w, 8, "weight after max_norm forward");
    for (int k = 0; k < 5; k++) EMB_ASSERT_EXACT(out + 2 * k, nw + 2 * idx[k], 2, "output");
    emb_embedding_free(e);
}

/* emb_embedding_renorm_ errors: status, message, weight unchanged. */
static void test_renorm_errors(void **state) {
    (void)state;
    float w[3][2] = {{3, 4}, {30, 40}, {6, 8}};
    const float w0[3][2] = {{3, 4}, {30, 40}, {6, 8}};
    int64_t sw[2] = {3, 2}, idx[3] = {0, 1, 2}, si[1] = {3};
    emb_tensor wt, it;
    EMB_OK_OR_FAIL(emb_tensor_init(&wt, EMB_FLOAT32, w, 2, sw));
    EMB_OK_OR_FAIL(emb_tensor_init(&it, EMB_INT64, idx, 1, si));
    EMB_EXPECT_ERR(emb_embedding_renorm_(NULL, &it, 1, 2), EMB_ERR_NULL, "weight must not be NULL");
    EMB_EXPECT_ERR(emb_embedding_renorm_(&wt, NULL, 1, 2), EMB_ERR_NULL,
                   "indices must not be NULL");
    emb_tensor b = wt;
    b.ndim = 1;
    b.shape[0] = 6;
    EMB_EXPECT_ERR(emb_embedding_renorm_(&b, &it, 1, 2), EMB_ERR_SHAPE,
                   "Expected 2-dimensional tensor, but got 1-dimensional tensor for argument "
                   "#1 'self' (while checking arguments for embedding_renorm_)");
    b = wt;
    b.dtype = EMB_FLOAT64;
    b.shape[0] = 1;
    EMB_EXPECT_ERR(emb_embedding_renorm_(&b, &it, 1, 2), EMB_ERR_DTYPE,
                   "weight must be float32, got float64");
    b = wt;
    b.data = NULL;
    EMB_EXPECT_ERR(emb_embedding_renorm_(&b, &it, 1, 2), EMB_ERR_NULL,
                   "weight has 6 elements but its data is NULL");
    b = it;
    b.dtype = EMB_UINT8;
    EMB_EXPECT_ERR(emb_embedding_renorm_(&wt, &b, 1, 2), EMB_ERR_DTYPE,
                   "Expected tensor for argument #2 'indices' to have one of the following "
                   "scalar types: Long, Int; but got torch.ByteTensor instead (while checking "
                   "arguments for embedding_renorm_)");
    b.dtype = (emb_dtype)50;
    EMB_EXPECT_ERR(emb_embedding_renorm_(&wt, &b, 1, 2), EMB_ERR_DTYPE, "but got unknown");
    b = it;
    b.ndim = 9;
    for (int k = 1; k < 9; k++) b.shape[k] = 1;
    EMB_EXPECT_ERR(emb_embedding_renorm_(&wt, &b, 1, 2), EMB_ERR_SHAPE, "at most 8");
    b = it;
    b.data = NULL;
    EMB_EXPECT_ERR(emb_embedding_renorm_(&wt, &b, 1, 2), EMB_ERR_NULL, "data is NULL");
    const double bad_max[] = {0.0, -1.0, -INFINITY, NAN};
    for (int k = 0; k < 4; k++)
        EMB_EXPECT_ERR(emb_embedding_renorm_(&wt, &it, bad_max[k], 2), EMB_ERR_INVALID,
                       "max_norm must be > 0 (INFINITY for none), got ");
    EMB_EXPECT_ERR(emb_embedding_renorm_(&wt, &it, 1, NAN), EMB_ERR_INVALID,
                   "norm_type must not be NaN");
    idx[2] = -1; /* PyTorch would renormalise row 2 before failing; emb changes nothing */
    EMB_EXPECT_ERR(emb_embedding_renorm_(&wt, &it, 1, 2), EMB_ERR_INDEX,
                   "index -1 at position 2 is out of range for an embedding with 3 rows "
                   "(valid: [0, 3))");
    idx[2] = 3;
    EMB_EXPECT_ERR(emb_embedding_renorm_(&wt, &it, 1, 2), EMB_ERR_INDEX,
                   "index 3 at position 2 is out of range");
    EMB_ASSERT_EXACT(&w[0][0], &w0[0][0], 6, "weight after failed renorm_");
    /* INFINITY: allowed, nothing changes */
    idx[2] = 2;
    EMB_OK_OR_FAIL(emb_embedding_renorm_(&wt, &it, INFINITY, 2));
    EMB_ASSERT_EXACT(&w[0][0], &w0[0][0], 6, "max_norm INFINITY");
    /* an empty index tensor is fine */
    int64_t s0[1] = {0};
    EMB_OK_OR_FAIL(emb_tensor_init(&it, EMB_INT64, NULL, 1, s0));
    EMB_OK_OR_FAIL(emb_embedding_renorm_(&wt, &it, 1, 2));
    EMB_ASSERT_EXACT(&w[0][0], &w0[0][0], 6, "empty indices");
}

/* ---- threads and the two distinct-row paths ------------------------------------------- */

static void test_threads_and_paths(void **state) {
    (void)state;
    const int64_t V = 50000, D = 24, n = 6001; /* odd: uneven thread chunks */
    float *w = malloc((size_t)(V * D) * sizeof(float));
    int64_t *idx = malloc((size_t)n * sizeof(int64_t));
    float *out1 = malloc((size_t)(n * D) * sizeof(float));
    float *out2 = malloc((size_t)(n * D) * sizeof(float));
    assert_true(w && idx && out1 && out2);
    emb_generator *g = NULL;
    EMB_OK_OR_FAIL(emb_generator_create(3, &g));
    int64_t sw[2] = {V, D}, si[1] = {n}, so[2] = {n, D};
    emb_tensor wt, it;
    EMB_OK_OR_FAIL(emb_tensor_init(&wt, EMB_FLOAT32, w, 2, sw));
    EMB_OK_OR_FAIL(emb_normal_(&wt, 0.0, 1.0, g));
    EMB_OK_OR_FAIL(emb_tensor_init(&it, EMB_INT64, idx, 1, si));
    EMB_OK_OR_FAIL(emb_randint_(&it, 0, V, g));
    for (int64_t i = 0; i < n / 3; i++) idx[n - 1 - i] = idx[i]; /* duplicates */
    for (int64_t i = 0; i < 50; i++) idx[50 + i] = idx[i];       /* also among the first 100 */
    emb_generator_free(g);

    /* forward: 1 thread vs 2 threads, and against a direct copy */
    emb_embedding_options o = emb_embedding_options_default();
    emb_embedding *e = NULL;
    EMB_OK_OR_FAIL(emb_embedding_from_pretrained(&wt, false, &o, &e));
    emb_tensor o1, o2;
    EMB_OK_OR_FAIL(emb_tensor_init(&o1, EMB_FLOAT32, out1, 2, so));
    EMB_OK_OR_FAIL(emb_tensor_init(&o2, EMB_FLOAT32, out2, 2, so));
    emb_set_num_threads(1);
    EMB_OK_OR_FAIL(emb_embedding_forward(e, &it, &o1));
    emb_set_num_threads(2);
    fill_nan(out2, n * D);
    EMB_OK_OR_FAIL(emb_embedding_forward(e, &it, &o2));
    EMB_ASSERT_EXACT(out1, out2, n * D, "forward, 1 vs 2 threads");
    for (int64_t i = 0; i < n; i++)
        if (memcmp(out2 + i * D, w + idx[i] * D, (size_t)D * sizeof(float)))
            fail_msg("row %lld differs", (long long)i);
    emb_embedding_free(e);

    /* renorm: the sort path (few indices, large table), the bitmap path (many indices), and
     * 1 vs 2 threads all agree */
    /* round 0: the first 100 indices (sort path); round 1: 6002 indices naming 3001
     * distinct rows twice each (bitmap path, odd: uneven thread chunks) */
    int64_t *ridx = malloc(6002 * sizeof(int64_t));
    assert_non_null(ridx);
    for (int64_t i = 0; i < 6002; i++) ridx[i] = (i * 7) % 3001 * 13;
    const int64_t counts[2] = {100, 6002};
    for (int c = 0; c < 2; c++) {
        emb_tensor part = it;
        part.shape[0] = counts[c];
        if (c == 1) part.data = ridx;
        const int64_t *pidx = part.data;
        float *w1 = malloc((size_t)(V * D) * sizeof(float));
        float *w2 = malloc((size_t)(V * D) * sizeof(float));
        assert_true(w1 && w2);
        memcpy(w1, w, (size_t)(V * D) * sizeof(float));
        memcpy(w2, w, (size_t)(V * D) * sizeof(float));
        emb_tensor t1 = wt, t2 = wt;
        t1.data = w1;
        t2.data = w2;
        emb_set_num_threads(1);
        EMB_OK_OR_FAIL(emb_embedding_renorm_(&t1, &part, 3.0, 2.0));
        for (int nt = 2; nt <= 3; nt++) { /* uneven chunks for one of them */
            memcpy(w2, w, (size_t)(V * D) * sizeof(float));
            emb_set_num_threads(nt);
            EMB_OK_OR_FAIL(emb_embedding_renorm_(&t2, &part, 3.0, 2.0));
            EMB_ASSERT_EXACT(w1, w2, V * D, "renorm, 1 vs 2 or 3 threads");
        }
        /* against the kernel applied once to each distinct row of a fresh copy */
        float *ref = malloc((size_t)(V * D) * sizeof(float));
        char *seen = calloc((size_t)V, 1);
        assert_true(ref && seen);
        memcpy(ref, w, (size_t)(V * D) * sizeof(float));
        int64_t distinct = 0;
        for (int64_t i = 0; i < counts[c]; i++) {
            int64_t r = pidx[i];
            if (seen[r]) continue;
            seen[r] = 1;
            distinct++;
            emb__renorm_rows_f32_ref(ref, D, &r, 0, 1, 3.0, 2.0);
        }
        EMB_ASSERT_EXACT(w1, ref, V * D, "renorm vs per-row kernel");
        int64_t changed = 0;
        for (int64_t r = 0; r < V; r++)
            changed += memcmp(w + r * D, w1 + r * D, (size_t)D * sizeof(float)) != 0;
        assert_true(changed > distinct / 2); /* most rows of norm ~sqrt(24) exceed 3 */
        assert_true(changed <= distinct);
        free(seen);
        free(ref);
        free(w1);
        free(w2);
    }
    emb_set_num_threads(0);
    free(ridx);
    free(w);
    free(idx);
    free(out1);
    free(out2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options_default),
        cmocka_unit_test(test_create_accessors),
        cmocka_unit_test(test_create_padding_row_zeroed),
        cmocka_unit_test(test_create_uses_generator),
        cmocka_unit_test(test_from_pretrained),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_forward_shapes),
        cmocka_unit_test(test_lookup_functional),
        cmocka_unit_test(test_forward_errors),
        cmocka_unit_test(test_lookup_overlap),
        cmocka_unit_test(test_renorm_values),
        cmocka_unit_test(test_forward_max_norm),
        cmocka_unit_test(test_renorm_errors),
        cmocka_unit_test(test_threads_and_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
