/* Unit tests of nn.Linear (create, init bits, forward, backward, errors, finite-difference
 * gradients), F.one_hot, and the GEMM kernels (reference vs CBLAS). */
#include "emb_test.h"

static uint64_t rng_state = 88172645463325252ULL; /* test data seed */

#include <stdlib.h>

#include "kernels/gemm.h"

/* ---------------------------------------------------------------------------------------
 * Creation and initialisation
 * ------------------------------------------------------------------------------------- */

/* Bits produced by PyTorch 1.13.1 (docs/semantics.md §2, §3.3): manual_seed(123) then
 * nn.Linear(4, 5): weight[0] and the bias. */
static void test_init_reference_bits(void **state) {
    (void)state;
    emb_generator *g = NULL;
    EMB_OK_OR_FAIL(emb_generator_create(123, &g));
    emb_linear *lin = NULL;
    EMB_OK_OR_FAIL(emb_linear_create(4, 5, true, g, &lin));
    assert_int_equal(emb_linear_in_features(lin), 4);
    assert_int_equal(emb_linear_out_features(lin), 5);
    assert_true(emb_linear_has_bias(lin));
    emb_tensor w, b;
    EMB_OK_OR_FAIL(emb_linear_weight(lin, &w));
    EMB_OK_OR_FAIL(emb_linear_bias(lin, &b));
    assert_int_equal(w.ndim, 2);
    assert_int_equal(w.shape[0], 5);
    assert_int_equal(w.shape[1], 4);
    assert_int_equal(b.ndim, 1);
    assert_int_equal(b.shape[0], 5);
    const uint32_t w0[4] = {0xbe50c808, 0x3c87ada0, 0xbe7e4a08, 0x3e411508};
    const uint32_t b0[5] = {0x3eb5075c, 0x3dbec700, 0x3e0c01bc, 0x3ef71b32, 0xbe66eab4};
    for (int i = 0; i < 4; i++) assert_int_equal(emb_test_f2u(((float *)w.data)[i]), w0[i]);
    for (int i = 0; i < 5; i++) assert_int_equal(emb_test_f2u(((float *)b.data)[i]), b0[i]);
    emb_linear_free(lin);

    /* bias=False gives the same weight; the bias accessor is a state error. */
    emb_generator_seed(g, 123);
    EMB_OK_OR_FAIL(emb_linear_create(4, 5, false, g, &lin));
    assert_false(emb_linear_has_bias(lin));
    EMB_OK_OR_FAIL(emb_linear_weight(lin, &w));
    for (int i = 0; i < 4; i++) assert_int_equal(emb_test_f2u(((float *)w.data)[i]), w0[i]);
    emb_tensor before;
    memset(&b, 0x3c, sizeof b);
    before = b;
    EMB_EXPECT_ERR(emb_linear_bias(lin, &b), EMB_ERR_STATE, "bias=false");
    assert_memory_equal(&b, &before, sizeof b);
    EMB_EXPECT_ERR(emb_linear_bias(NULL, &b), EMB_ERR_NULL, "lin must not be NULL");
    EMB_EXPECT_ERR(emb_linear_bias(lin, NULL), EMB_ERR_NULL, "view must not be NULL");
    EMB_EXPECT_ERR(emb_linear_weight(NULL, &w), EMB_ERR_NULL, "lin must not be NULL");
    EMB_EXPECT_ERR(emb_linear_weight(lin, NULL), EMB_ERR_NULL, "view must not be NULL");
    emb_linear_free(lin);
    emb_linear_free(NULL);
    emb_generator_free(g);
}

/* The weight bound is 1/sqrt(in) computed as PyTorch does (a**2 = 5.000000000000001): all
 * values lie in [-bound, bound], bias in [-1/sqrt(in), 1/sqrt(in)]. */
static void test_init_bounds_and_draw_counts(void **state) {
    (void)state;
    double a = sqrt(5.0);
    assert_true(a * a == 5.000000000000001);
    emb_generator *g = NULL, *ref = NULL;
    EMB_OK_OR_FAIL(emb_generator_create(7, &g));
    EMB_OK_OR_FAIL(emb_generator_create(7, &ref));
    emb_linear *lin = NULL;
    EMB_OK_OR_FAIL(emb_linear_create(9, 3, true, g, &lin));
    emb_tensor w, b;
    EMB_OK_OR_FAIL(emb_linear_weight(lin, &w));
    EMB_OK_OR_FAIL(emb_linear_bias(lin, &b));
    for (int i = 0; i < 27; i++) assert_true(fabsf(((float *)w.data)[i]) <= 1.0f / 3.0f);
    for (int i = 0; i < 3; i++) assert_true(fabsf(((float *)b.data)[i]) <= 1.0f / 3.0f);
    /* 27 + 3 draws were consumed */
    for (int i = 0; i < 30; i++) (void)emb_generator_random(ref);
    assert_int_equal(emb_generator_random(g), emb_generator_random(ref));
    emb_linear_free(lin);

    /* in == 0: the weight draws nothing, the bias draws out_features zeros. */
    EMB_OK_OR_FAIL(emb_linear_create(0, 4, true, g, &lin));
    EMB_OK_OR_FAIL(emb_linear_bias(lin, &b));
    emb_test_assert_all(b.data, 4, 0.0f, "bias of Linear(0, 4)");
    for (int i = 0; i < 4; i++) (void)emb_generator_random(ref);
    assert_int_equal(emb_generator_random(g), emb_generator_random(ref));
    emb_linear_free(lin);

    /* out == 0: nothing at all. */
    EMB_OK_OR_FAIL(emb_linear_create(5, 0, true, g, &lin));
    assert_int_equal(emb_generator_random(g), emb_generator_random(ref));
    emb_linear_free(lin);
    emb_generator_free(g);
    emb_generator_free(ref);
}

static void test_create_errors(void **state) {
    (void)state;
    emb_generator *g = NULL, *ref = NULL;
    EMB_OK_OR_FAIL(emb_generator_create(99, &g));
    EMB_OK_OR_FAIL(emb_generator_create(99, &ref));
    emb_linear *sentinel = (emb_linear *)(uintptr_t)0x1234, *lin = sentinel;
    EMB_EXPECT_ERR(emb_linear_create(3, 2, true, g, NULL), EMB_ERR_NULL, "out must not be NULL");
    EMB_EXPECT_ERR(emb_linear_create(-1, 2, true, g, &lin), EMB_ERR_INVALID,
                   "Trying to create tensor with negative dimension -1: [2, -1]");
    EMB_EXPECT_ERR(emb_linear_create(3, -5, false, g, &lin), EMB_ERR_INVALID,
                   "negative dimension -5: [-5, 3]");
    EMB_EXPECT_ERR(emb_linear_create(INT64_MAX / 2, 4, true, g, &lin), EMB_ERR_OVERFLOW,
                   "overflows");
    EMB_EXPECT_ERR(emb_linear_create(INT64_MAX / 4 + 1, 1, true, g, &lin), EMB_ERR_OVERFLOW,
                   "overflows");
#if !defined(__SANITIZE_ADDRESS__)
    /* 2^42 floats (16 TiB) cannot be allocated. */
    EMB_EXPECT_ERR(emb_linear_create((int64_t)1 << 21, (int64_t)1 << 21, true, g, &lin),
                   EMB_ERR_NOMEM, "cannot allocate");
#endif
    assert_ptr_equal(lin, sentinel);
    /* nothing was drawn */
    assert_int_equal(emb_generator_random(g), emb_generator_random(ref));
    emb_generator_free(g);
    emb_generator_free(ref);
}

/* The default generator is used when gen is NULL. */
static void test_default_generator(void **state) {
    (void)state;
    emb_manual_seed(123);
    emb_linear *lin = NULL;
    EMB_OK_OR_FAIL(emb_linear_create(4, 5, false, NULL, &lin));
    emb_tensor w;
    EMB_OK_OR_FAIL(emb_linear_weight(lin, &w));
    assert_int_equal(emb_test_f2u(((float *)w.data)[0]), 0xbe50c808);
    emb_linear_free(lin);
}

/* ---------------------------------------------------------------------------------------
 * Forward / backward by hand
 * ------------------------------------------------------------------------------------- */

static emb_linear *hand_layer(bool bias) {
    emb_linear *lin = NULL;
    EMB_OK_OR_FAIL(emb_linear_create(3, 2, bias, NULL, &lin));
    emb_tensor w, b;
    EMB_OK_OR_FAIL(emb_linear_weight(lin, &w));
    const float wv[6] = {1, 2, 3, 4, 5, 6};
    memcpy(w.data, wv, sizeof wv);
    if (bias) {
        EMB_OK_OR_FAIL(emb_linear_bias(lin, &b));
        ((float *)b.data)[0] = 0.5f;
        ((float *)b.data)[1] = -1.0f;
    }
    return lin;
}

static void test_forward_hand(void **state) {
    (void)state;
    emb_linear *lin = hand_layer(true);
    float x[6] = {1, 0, -1, 2, 1, 0}, y[4];
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 3)),
               yt = emb_test_view(EMB_FLOAT32, y, 2, SHP(2, 2));
    EMB_OK_OR_FAIL(emb_linear_forward(lin, &xt, &yt));
    const float want[4] = {-1.5f, -3.0f, 4.5f, 12.0f};
    EMB_ASSERT_EXACT(y, want, 4, "y");
    /* 1-D input gives a 1-D output; rank 3 keeps the leading dims. */
    xt = emb_test_view(EMB_FLOAT32, x, 1, SHP(3));
    yt = emb_test_view(EMB_FLOAT32, y, 1, SHP(2));
    EMB_OK_OR_FAIL(emb_linear_forward(lin, &xt, &yt));
    EMB_ASSERT_EXACT(y, want, 2, "y 1-D");
    xt = emb_test_view(EMB_FLOAT32, x, 3, SHP(1, 2, 3));
    yt = emb_test_view(EMB_FLOAT32, y, 3, SHP(1, 2, 2));
    EMB_OK_OR_FAIL(emb_linear_forward(lin, &xt, &yt));
    EMB_ASSERT_EXACT(y, want, 4, "y 3-D");
    /* empty leading dimension */
    xt = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(0, 3));
    yt = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(0, 2));
    EMB_OK_OR_FAIL(emb_linear_forward(lin, &xt, &yt));
    emb_linear_free(lin);

    /* no bias */
    lin = hand_layer(false);
    xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 3));
    yt = emb_test_view(EMB_FLOAT32, y, 2, SHP(2, 2));
    EMB_OK_OR_FAIL(emb_linear_forward(lin, &xt, &yt));
    const float want_nb[4] = {-2.0f, -2.0f, 4.0f, 13.0f};
    EMB_ASSERT_EXACT(y, want_nb, 4, "y no bias");
    emb_linear_free(lin);

    /* in_features == 0: y is the bias (or zeros) */
    EMB_OK_OR_FAIL(emb_linear_create(0, 2, true, NULL, &lin));
    emb_tensor b;
    EMB_OK_OR_FAIL(emb_linear_bias(lin, &b));
    ((float *)b.data)[0] = 3.0f;
    ((float *)b.data)[1] = -4.0f;
    xt = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(2, 0));
    yt = emb_test_view(EMB_FLOAT32, y, 2, SHP(2, 2));
    emb_test_fill(y, 4, NAN);
    EMB_OK_OR_FAIL(emb_linear_forward(lin, &xt, &yt));
    const float want_b[4] = {3, -4, 3, -4};
    EMB_ASSERT_EXACT(y, want_b, 4, "y of Linear(0, 2)");
    emb_linear_free(lin);
    EMB_OK_OR_FAIL(emb_linear_create(0, 2, false, NULL, &lin));
    emb_test_fill(y, 4, NAN);
    EMB_OK_OR_FAIL(emb_linear_forward(lin, &xt, &yt));
    const float zeros[4] = {0};
    EMB_ASSERT_EXACT(y, zeros, 4, "y of Linear(0, 2, bias=False)");
    emb_linear_free(lin);
}

static void test_backward_hand(void **state) {
    (void)state;
    emb_linear *lin = hand_layer(true);
    float x[6] = {1, 0, -1, 2, 1, 0}, gy[4] = {1, 0, 0, 2};
    float gx[6], gw[6], gb[2];
    emb_test_fill(gx, 6, NAN);
    emb_test_fill(gw, 6, 1.0f);
    emb_test_fill(gb, 2, 0.25f);
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 3)),
               gyt = emb_test_view(EMB_FLOAT32, gy, 2, SHP(2, 2));
    emb_tensor gxt = emb_test_view(EMB_FLOAT32, gx, 2, SHP(2, 3)),
               gwt = emb_test_view(EMB_FLOAT32, gw, 2, SHP(2, 3));
    emb_tensor gbt = emb_test_view(EMB_FLOAT32, gb, 1, SHP(2));
    EMB_OK_OR_FAIL(emb_linear_backward(lin, &xt, &gyt, &gxt, &gwt, &gbt));
    const float want_gx[6] = {1, 2, 3, 8, 10, 12};
    const float want_gw[6] = {2, 1, 0, 5, 3, 1}; /* 1 + gy^T x */
    const float want_gb[2] = {1.25f, 2.25f};
    EMB_ASSERT_EXACT(gx, want_gx, 6, "grad_x");
    EMB_ASSERT_EXACT(gw, want_gw, 6, "grad_weight");
    EMB_ASSERT_EXACT(gb, want_gb, 2, "grad_bias");
    /* a second call accumulates into grad_weight/grad_bias and overwrites grad_x */
    EMB_OK_OR_FAIL(emb_linear_backward(lin, &xt, &gyt, &gxt, &gwt, &gbt));
    const float want_gw2[6] = {3, 1, -1, 9, 5, 1};
    const float want_gb2[2] = {2.25f, 4.25f};
    EMB_ASSERT_EXACT(gx, want_gx, 6, "grad_x (overwritten)");
    EMB_ASSERT_EXACT(gw, want_gw2, 6, "grad_weight (accumulated)");
    EMB_ASSERT_EXACT(gb, want_gb2, 2, "grad_bias (accumulated)");
    /* each output is optional */
    emb_test_fill(gx, 6, NAN);
    EMB_OK_OR_FAIL(emb_linear_backward(lin, &xt, &gyt, &gxt, NULL, NULL));
    EMB_ASSERT_EXACT(gx, want_gx, 6, "grad_x alone");
    EMB_ASSERT_EXACT(gw, want_gw2, 6, "grad_weight untouched");
    EMB_OK_OR_FAIL(emb_linear_backward(lin, &xt, &gyt, NULL, NULL, &gbt));
    const float want_gb3[2] = {3.25f, 6.25f};
    EMB_ASSERT_EXACT(gb, want_gb3, 2, "grad_bias alone");
    EMB_OK_OR_FAIL(emb_linear_backward(lin, &xt, &gyt, NULL, NULL, NULL));
    emb_linear_free(lin);
}

/* ---------------------------------------------------------------------------------------
 * Errors: status, message, outputs unchanged
 * ------------------------------------------------------------------------------------- */

static void test_forward_errors(void **state) {
    (void)state;
    emb_linear *lin = hand_layer(true);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[32];
    int64_t xi[8] = {0};
    double yd[4];
    emb_test_fill(y, 32, 777.0f);
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 3)),
               yt = emb_test_view(EMB_FLOAT32, y, 2, SHP(2, 2));
    EMB_EXPECT_ERR(emb_linear_forward(NULL, &xt, &yt), EMB_ERR_NULL, "lin must not be NULL");
    EMB_EXPECT_ERR(emb_linear_forward(lin, NULL, &yt), EMB_ERR_NULL, "x must not be NULL");
    EMB_EXPECT_ERR(emb_linear_forward(lin, &xt, NULL), EMB_ERR_NULL, "y must not be NULL");
    emb_tensor bad = emb_test_view(EMB_INT64, xi, 2, SHP(2, 3));
    EMB_EXPECT_ERR(emb_linear_forward(lin, &bad, &yt), EMB_ERR_DTYPE,
                   "mat1 and mat2 must have the same dtype");
    bad = emb_test_view(EMB_FLOAT32, x, 0, NULL);
    EMB_EXPECT_ERR(emb_linear_forward(lin, &bad, &yt), EMB_ERR_SHAPE,
                   "both arguments to matmul need to be at least 1D, but they are 0D and 2D");
    bad = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 4));
    EMB_EXPECT_ERR(emb_linear_forward(lin, &bad, &yt), EMB_ERR_SHAPE,
                   "mat1 and mat2 shapes cannot be multiplied (2x4 and 3x2)");
    bad = emb_test_view(EMB_FLOAT32, x, 1, SHP(4));
    EMB_EXPECT_ERR(emb_linear_forward(lin, &bad, &yt), EMB_ERR_SHAPE,
                   "mat1 and mat2 shapes cannot be multiplied (1x4 and 3x2)");
    bad = emb_test_view(EMB_FLOAT32, x, 3, SHP(2, 1, 4));
    EMB_EXPECT_ERR(emb_linear_forward(lin, &bad, &yt), EMB_ERR_SHAPE,
                   "mat1 and mat2 shapes cannot be multiplied (2x4 and 3x2)");
    bad = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(3, 0));
    EMB_EXPECT_ERR(emb_linear_forward(lin, &bad, &yt), EMB_ERR_SHAPE,
                   "cannot be multiplied (3x0 and 3x2)");
    /* leading dimensions whose product overflows (x is empty, its last dim 0) */
    bad = xt;
    bad.ndim = 3;
    bad.shape[0] = (int64_t)1 << 40;
    bad.shape[1] = (int64_t)1 << 40;
    bad.shape[2] = 0;
    EMB_EXPECT_ERR(emb_linear_forward(lin, &bad, &yt), EMB_ERR_OVERFLOW, "overflows");
    /* a hand-filled tensor with NULL data */
    bad = xt;
    bad.data = NULL;
    EMB_EXPECT_ERR(emb_linear_forward(lin, &bad, &yt), EMB_ERR_NULL, "data is NULL");
    bad = emb_test_view(EMB_FLOAT32, y, 2, SHP(2, 3));
    EMB_EXPECT_ERR(emb_linear_forward(lin, &xt, &bad), EMB_ERR_SHAPE,
                   "y has shape [2, 3], expected [2, 2]");
    bad = emb_test_view(EMB_FLOAT32, y, 1, SHP(4));
    EMB_EXPECT_ERR(emb_linear_forward(lin, &xt, &bad), EMB_ERR_SHAPE,
                   "y has shape [4], expected [2, 2]");
    bad = emb_test_view(EMB_FLOAT64, yd, 2, SHP(2, 2));
    EMB_EXPECT_ERR(emb_linear_forward(lin, &xt, &bad), EMB_ERR_DTYPE, "y must be float32");
    /* y overlapping x, or the layer's own parameters */
    emb_tensor alias = emb_test_view(EMB_FLOAT32, x + 2, 2, SHP(2, 2));
    EMB_EXPECT_ERR(emb_linear_forward(lin, &xt, &alias), EMB_ERR_INVALID, "y must not overlap x");
    emb_tensor w;
    EMB_OK_OR_FAIL(emb_linear_weight(lin, &w));
    float wsave[6];
    memcpy(wsave, w.data, sizeof wsave);
    alias = emb_test_view(EMB_FLOAT32, w.data, 2, SHP(2, 2));
    EMB_EXPECT_ERR(emb_linear_forward(lin, &xt, &alias), EMB_ERR_INVALID,
                   "y must not overlap the layer's parameters");
    EMB_ASSERT_EXACT((float *)w.data, wsave, 6, "weight unchanged");
    const float xs[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    EMB_ASSERT_EXACT(x, xs, 8, "x unchanged");
    emb_test_assert_all(y, 32, 777.0f, "y");
    emb_linear_free(lin);
}

static void test_backward_errors(void **state) {
    (void)state;
    emb_linear *lin = hand_layer(true), *nobias = hand_layer(false);
    float x[6] = {1, 0, -1, 2, 1, 0}, gy[4] = {1, 0, 0, 2};
    float gx[8], gw[8], gb[4];
    emb_test_fill(gx, 8, 111.0f);
    emb_test_fill(gw, 8, 222.0f);
    emb_test_fill(gb, 4, 333.0f);
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 3)),
               gyt = emb_test_view(EMB_FLOAT32, gy, 2, SHP(2, 2));
    emb_tensor gxt = emb_test_view(EMB_FLOAT32, gx, 2, SHP(2, 3)),
               gwt = emb_test_view(EMB_FLOAT32, gw, 2, SHP(2, 3));
    emb_tensor gbt = emb_test_view(EMB_FLOAT32, gb, 1, SHP(2));
    EMB_EXPECT_ERR(emb_linear_backward(NULL, &xt, &gyt, &gxt, &gwt, &gbt), EMB_ERR_NULL,
                   "lin must not be NULL");
    EMB_EXPECT_ERR(emb_linear_backward(lin, NULL, &gyt, &gxt, &gwt, &gbt), EMB_ERR_NULL,
                   "x must not be NULL");
    EMB_EXPECT_ERR(emb_linear_backward(lin, &xt, NULL, &gxt, &gwt, &gbt), EMB_ERR_NULL,
                   "grad_y must not be NULL");
    emb_tensor bad = emb_test_view(EMB_FLOAT32, x, 2, SHP(3, 2));
    EMB_EXPECT_ERR(emb_linear_backward(lin, &bad, &gyt, &gxt, &gwt, &gbt), EMB_ERR_SHAPE,
                   "mat1 and mat2 shapes cannot be multiplied (3x2 and 3x2)");
    bad = emb_test_view(EMB_FLOAT32, gy, 2, SHP(1, 2));
    EMB_EXPECT_ERR(emb_linear_backward(lin, &xt, &bad, &gxt, &gwt, &gbt), EMB_ERR_SHAPE,
                   "grad_y has shape [1, 2], expected [2, 2]");
    bad = emb_test_view(EMB_FLOAT32, gx, 2, SHP(3, 2));
    EMB_EXPECT_ERR(emb_linear_backward(lin, &xt, &gyt, &bad, &gwt, &gbt), EMB_ERR_SHAPE,
                   "grad_x has shape [3, 2], expected [2, 3]");
    bad = emb_test_view(EMB_FLOAT32, gw, 2, SHP(3, 2));
    EMB_EXPECT_ERR(emb_linear_backward(lin, &xt, &gyt, &gxt, &bad, &gbt), EMB_ERR_SHAPE,
                   "grad_weight has shape [3, 2], expected [2, 3]");
    bad = emb_test_view(EMB_FLOAT32, gb, 1, SHP(3));
    EMB_EXPECT_ERR(emb_linear_backward(lin, &xt, &gyt, &gxt, &gwt, &bad), EMB_ERR_SHAPE,
                   "grad_bias has shape [3], expected [2]");
    int64_t gi[8];
    bad = emb_test_view(EMB_INT64, gi, 2, SHP(2, 3));
    EMB_EXPECT_ERR(emb_linear_backward(lin, &xt, &gyt, &bad, &gwt, &gbt), EMB_ERR_DTYPE,
                   "grad_x must be float32, got int64");
    EMB_EXPECT_ERR(emb_linear_backward(nobias, &xt, &gyt, &gxt, &gwt, &gbt), EMB_ERR_STATE,
                   "grad_bias was given but this Linear layer has no bias");
    /* overlaps */
    emb_tensor alias = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 3));
    EMB_EXPECT_ERR(emb_linear_backward(lin, &xt, &gyt, &alias, &gwt, &gbt), EMB_ERR_INVALID,
                   "grad_x must not overlap x");
    alias = emb_test_view(EMB_FLOAT32, gy, 1, SHP(2));
    EMB_EXPECT_ERR(emb_linear_backward(lin, &xt, &gyt, &gxt, &gwt, &alias), EMB_ERR_INVALID,
                   "grad_bias must not overlap grad_y");
    alias = emb_test_view(EMB_FLOAT32, gw + 2, 1, SHP(2));
    EMB_EXPECT_ERR(emb_linear_backward(lin, &xt, &gyt, &gxt, &gwt, &alias), EMB_ERR_INVALID,
                   "grad_bias must not overlap grad_weight");
    emb_tensor w;
    EMB_OK_OR_FAIL(emb_linear_weight(lin, &w));
    float wsave[6];
    memcpy(wsave, w.data, sizeof wsave);
    alias = emb_test_view(EMB_FLOAT32, w.data, 2, SHP(2, 3));
    EMB_EXPECT_ERR(emb_linear_backward(lin, &xt, &gyt, &gxt, &alias, &gbt), EMB_ERR_INVALID,
                   "grad_weight must not overlap the layer's parameters");
    EMB_ASSERT_EXACT((float *)w.data, wsave, 6, "weight unchanged");
    emb_test_assert_all(gx, 8, 111.0f, "grad_x");
    emb_test_assert_all(gw, 8, 222.0f, "grad_weight");
    emb_test_assert_all(gb, 4, 333.0f, "grad_bias");
    emb_linear_free(lin);
    emb_linear_free(nobias);
}

/* ---------------------------------------------------------------------------------------
 * Finite differences. Loss L = sum(r * y) evaluated in double from emb's float32 forward;
 * the perturbation x +- h is applied to the float32 input and the actual step
 * (float)(x+h) - (float)(x-h) is used as the denominator. h = 1e-2. Linear is linear in
 * every parameter, so the only error is float32 rounding of y (|err| <~ 1e-6 * |L| / h);
 * the check requires |fd - g| <= 2e-3 * max|g| + 1e-4 and is shown to reject the
 * analytic gradient scaled by 2 or 0.5.
 * ------------------------------------------------------------------------------------- */

static double lin_loss(const emb_linear *lin, const emb_tensor *x, emb_tensor *y, const float *r) {
    EMB_OK_OR_FAIL(emb_linear_forward(lin, x, y));
    double s = 0;
    int64_t n = emb_tensor_numel(y);
    for (int64_t i = 0; i < n; i++) s += (double)r[i] * (double)((float *)y->data)[i];
    return s;
}

static void fd_param(emb_linear *lin, const emb_tensor *x, emb_tensor *y, const float *r, float *p,
                     int64_t n, const float *g, const char *what) {
    const float h = 1e-2f;
    double *fd = malloc((size_t)n * sizeof *fd);
    for (int64_t i = 0; i < n; i++) {
        float save = p[i];
        float xp = save + h, xm = save - h;
        p[i] = xp;
        double lp = lin_loss(lin, x, y, r);
        p[i] = xm;
        double lm = lin_loss(lin, x, y, r);
        p[i] = save;
        fd[i] = (lp - lm) / ((double)xp - (double)xm);
    }
    emb_test_check_fd(fd, g, n, what);
    free(fd);
}

static void test_finite_differences(void **state) {
    (void)state;
    emb_generator *gen = NULL;
    EMB_OK_OR_FAIL(emb_generator_create(5, &gen));
    const int64_t shapes[][3] = {{7, 5, 3}, {1, 4, 6}, {12, 17, 9}};
    for (int s = 0; s < 3; s++) {
        int64_t m = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
        emb_linear *lin = NULL;
        EMB_OK_OR_FAIL(emb_linear_create(in, out, true, gen, &lin));
        float *x = malloc((size_t)(m * in) * 4), *y = malloc((size_t)(m * out) * 4);
        float *r = malloc((size_t)(m * out) * 4), *gx = malloc((size_t)(m * in) * 4);
        float *gw = calloc((size_t)(in * out), 4), *gb = calloc((size_t)out, 4);
        emb_test_randf(&rng_state, x, m * in, -2, 2);
        emb_test_randf(&rng_state, r, m * out, -1, 1);
        emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(m, in)),
                   yt = emb_test_view(EMB_FLOAT32, y, 2, SHP(m, out));
        emb_tensor rt = emb_test_view(EMB_FLOAT32, r, 2, SHP(m, out)),
                   gxt = emb_test_view(EMB_FLOAT32, gx, 2, SHP(m, in));
        emb_tensor gwt = emb_test_view(EMB_FLOAT32, gw, 2, SHP(out, in)),
                   gbt = emb_test_view(EMB_FLOAT32, gb, 1, SHP(out));
        EMB_OK_OR_FAIL(emb_linear_backward(lin, &xt, &rt, &gxt, &gwt, &gbt));
        emb_tensor w, b;
        EMB_OK_OR_FAIL(emb_linear_weight(lin, &w));
        EMB_OK_OR_FAIL(emb_linear_bias(lin, &b));
        fd_param(lin, &xt, &yt, r, x, m * in, gx, "grad_x");
        fd_param(lin, &xt, &yt, r, w.data, in * out, gw, "grad_weight");
        fd_param(lin, &xt, &yt, r, b.data, out, gb, "grad_bias");
        free(x), free(y), free(r), free(gx), free(gw), free(gb);
        emb_linear_free(lin);
    }
    emb_generator_free(gen);
}

/* ---------------------------------------------------------------------------------------
 * GEMM kernels
 * ------------------------------------------------------------------------------------- */

/* op(A)[m,k] op(B)[k,n] in double, the oracle for both kernels. */
static void gemm_oracle(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                        int64_t lda, const float *b, int64_t ldb, double *c) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += (double)(ta ? a[p * lda + i] : a[i * lda + p]) *
                     (double)(tb ? b[j * ldb + p] : b[p * ldb + j]);
            c[i * n + j] = s;
        }
}

static void test_gemm_ref_vs_oracle_and_cblas(void **state) {
    (void)state;
    const int64_t dims[][3] = {{1, 1, 1},  {3, 5, 7}, {4, 4, 4},    {5, 65, 9},  {17, 3, 130},
                               {9, 70, 0}, {0, 4, 3}, {33, 31, 29}, {2, 129, 64}};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        int64_t m = dims[d][0], n = dims[d][1], k = dims[d][2];
        for (int mode = 0; mode < 4; mode++) {
            bool ta = mode & 1, tb = (mode >> 1) & 1;
            for (int integer = 0; integer < 2; integer++) {
                for (int beta_i = 0; beta_i < 2; beta_i++) {
                    float beta = (float)beta_i;
                    int64_t lda = ta ? m : k, ldb = tb ? k : n;
                    size_t na = (size_t)(m * k) + 1, nb = (size_t)(k * n) + 1,
                           nc = (size_t)(m * n) + 1;
                    float *a = malloc(na * 4), *b = malloc(nb * 4);
                    float *c0 = malloc(nc * 4), *c1 = malloc(nc * 4), *c2 = malloc(nc * 4);
                    double *o = malloc(nc * 8);
                    emb_test_randf(&rng_state, a, (int64_t)na, -1, 1);
                    emb_test_randf(&rng_state, b, (int64_t)nb, -1, 1);
                    emb_test_randf(&rng_state, c0, (int64_t)nc, -1, 1);
                    if (integer) { /* small integers: every order sums exactly */
                        for (size_t i = 0; i < na; i++) a[i] = floorf(a[i] * 8);
                        for (size_t i = 0; i < nb; i++) b[i] = floorf(b[i] * 8);
                        for (size_t i = 0; i < nc; i++) c0[i] = floorf(c0[i] * 8);
                    }
                    gemm_oracle(ta, tb, m, n, k, a, lda, b, ldb, o);
                    for (size_t i = 0; i + 1 < nc; i++) o[i] += beta * c0[i];
                    memcpy(c1, c0, nc * 4);
                    if (!beta_i)
                        emb_test_fill(c1, (int64_t)nc - 1, NAN); /* beta 0: C is not read */
                    memcpy(c2, c1, nc * 4);
                    emb__sgemm_ref(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c1, n);
                    float *of = malloc(nc * 4);
                    for (size_t i = 0; i < nc; i++) of[i] = (float)o[i];
                    char what[96];
                    snprintf(what, sizeof what, "ref %lldx%lldx%lld ta=%d tb=%d int=%d beta=%d",
                             (long long)m, (long long)n, (long long)k, ta, tb, integer, beta_i);
                    if (integer)
                        EMB_ASSERT_EXACT(c1, of, m * n, what);
                    else
                        EMB_ASSERT_CLOSE(c1, of, m * n, what);
                    /* splitting rows gives bit-identical results */
                    float *c3 = malloc(nc * 4);
                    memcpy(c3, c2, nc * 4);
                    int64_t cut = m / 3;
                    emb__sgemm_rows(ta, tb, 0, cut, n, k, 1.0f, a, lda, b, ldb, beta, c3, n);
                    emb__sgemm_rows(ta, tb, cut, m, n, k, 1.0f, a, lda, b, ldb, beta, c3, n);
                    EMB_ASSERT_EXACT(c3, c1, m * n, "row split");
                    if (emb__gemm_have_cblas()) {
                        assert_true(
                            emb__sgemm_cblas(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c2, n));
                        snprintf(what, sizeof what, "cblas %lldx%lldx%lld ta=%d tb=%d int=%d",
                                 (long long)m, (long long)n, (long long)k, ta, tb, integer);
                        if (integer)
                            EMB_ASSERT_EXACT(c2, c1, m * n, what);
                        else
                            EMB_ASSERT_CLOSE(c2, c1, m * n, what);
                    } else {
                        assert_false(
                            emb__sgemm_cblas(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c2, n));
                    }
                    free(a), free(b), free(c0), free(c1), free(c2), free(c3), free(o), free(of);
                }
            }
        }
    }
}

/* Forward/backward give the same results with the reference kernels on 1 and 2 threads,
 * and agree with CBLAS within tolerance. */
static void test_ref_mode_and_threads(void **state) {
    (void)state;
    emb_linear *lin = NULL;
    EMB_OK_OR_FAIL(emb_linear_create(70, 45, true, NULL, &lin));
    const int64_t m = 300;
    float *x = malloc(m * 70 * 4), *gy = malloc(m * 45 * 4);
    emb_test_randf(&rng_state, x, m * 70, -1, 1);
    emb_test_randf(&rng_state, gy, m * 45, -1, 1);
    float *y[3], *gx[3], *gw[3], *gb[3];
    for (int run = 0; run < 3; run++) {
        /* run 0: auto (CBLAS if built), 1: ref on 1 thread, 2: ref on 2 threads */
        emb_set_kernel_mode(run == 0 ? EMB_KERNELS_AUTO : EMB_KERNELS_REF);
        emb_set_num_threads(run == 2 ? 2 : 1);
        y[run] = malloc(m * 45 * 4);
        gx[run] = malloc(m * 70 * 4);
        gw[run] = calloc(45 * 70, 4);
        gb[run] = calloc(45, 4);
        emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(m, 70)),
                   yt = emb_test_view(EMB_FLOAT32, y[run], 2, SHP(m, 45));
        emb_tensor gyt = emb_test_view(EMB_FLOAT32, gy, 2, SHP(m, 45));
        emb_tensor gxt = emb_test_view(EMB_FLOAT32, gx[run], 2, SHP(m, 70));
        emb_tensor gwt = emb_test_view(EMB_FLOAT32, gw[run], 2, SHP(45, 70));
        emb_tensor gbt = emb_test_view(EMB_FLOAT32, gb[run], 1, SHP(45));
        EMB_OK_OR_FAIL(emb_linear_forward(lin, &xt, &yt));
        EMB_OK_OR_FAIL(emb_linear_backward(lin, &xt, &gyt, &gxt, &gwt, &gbt));
    }
    emb_set_kernel_mode(EMB_KERNELS_AUTO);
    emb_set_num_threads(0);
    EMB_ASSERT_EXACT(y[2], y[1], m * 45, "y 2 threads vs 1");
    EMB_ASSERT_EXACT(gx[2], gx[1], m * 70, "grad_x 2 threads vs 1");
    EMB_ASSERT_EXACT(gw[2], gw[1], 45 * 70, "grad_weight 2 threads vs 1");
    EMB_ASSERT_EXACT(gb[2], gb[1], 45, "grad_bias 2 threads vs 1");
    EMB_ASSERT_CLOSE(y[0], y[1], m * 45, "y auto vs ref");
    EMB_ASSERT_CLOSE(gx[0], gx[1], m * 70, "grad_x auto vs ref");
    /* grad_weight sums 300 products: compare with a tolerance scaled to the sum size */
    for (int i = 0; i < 45 * 70; i++)
        if (fabsf(gw[0][i] - gw[1][i]) > 1e-4f) fail_msg("grad_weight auto vs ref at %d", i);
    EMB_ASSERT_EXACT(gb[0], gb[1], 45, "grad_bias auto vs ref");
    for (int r = 0; r < 3; r++) free(y[r]), free(gx[r]), free(gw[r]), free(gb[r]);
    free(x), free(gy);
    emb_linear_free(lin);
}

/* ---------------------------------------------------------------------------------------
 * one_hot
 * ------------------------------------------------------------------------------------- */

static void test_one_hot_hand(void **state) {
    (void)state;
    int64_t idx[3] = {2, 0, 1}, out[12];
    emb_tensor it = emb_test_view(EMB_INT64, idx, 1, SHP(3));
    int64_t c = 0;
    EMB_OK_OR_FAIL(emb_one_hot_num_classes(&it, -1, &c));
    assert_int_equal(c, 3);
    EMB_OK_OR_FAIL(emb_one_hot_num_classes(&it, 4, &c));
    assert_int_equal(c, 4);
    emb_tensor ot = emb_test_view(EMB_INT64, out, 2, SHP(3, 3));
    memset(out, 0x7f, sizeof out);
    EMB_OK_OR_FAIL(emb_one_hot(&it, -1, &ot));
    const int64_t want[9] = {0, 0, 1, 1, 0, 0, 0, 1, 0};
    assert_memory_equal(out, want, sizeof want);
    float fo[12];
    emb_test_fill(fo, 12, NAN);
    ot = emb_test_view(EMB_FLOAT32, fo, 2, SHP(3, 4));
    EMB_OK_OR_FAIL(emb_one_hot(&it, 4, &ot));
    const float wantf[12] = {0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0};
    EMB_ASSERT_EXACT(fo, wantf, 12, "one_hot float");
    /* 0-d input gives [C] */
    int64_t one = 2;
    it = emb_test_view(EMB_INT64, &one, 0, NULL);
    ot = emb_test_view(EMB_INT64, out, 1, SHP(3));
    EMB_OK_OR_FAIL(emb_one_hot(&it, -1, &ot));
    const int64_t want0[3] = {0, 0, 1};
    assert_memory_equal(out, want0, sizeof want0);
    /* empty input with num_classes > 0: shape [..., 0, C] */
    it = emb_test_view(EMB_INT64, NULL, 2, SHP(2, 0));
    ot = emb_test_view(EMB_INT64, NULL, 3, SHP(2, 0, 5));
    EMB_OK_OR_FAIL(emb_one_hot(&it, 5, &ot));
    EMB_OK_OR_FAIL(emb_one_hot_num_classes(&it, 5, &c));
    assert_int_equal(c, 5);
}

static void test_one_hot_errors(void **state) {
    (void)state;
    int64_t idx[3] = {2, -1, 1}, big[2] = {1, 5}, out[64];
    int32_t idx32[3] = {0, 1, 2};
    for (int i = 0; i < 64; i++) out[i] = 4242;
    emb_tensor ot = emb_test_view(EMB_INT64, out, 2, SHP(3, 3));
    int64_t c = 77;
    emb_tensor it = emb_test_view(EMB_INT32, idx32, 1, SHP(3));
    EMB_EXPECT_ERR(emb_one_hot(&it, -1, &ot), EMB_ERR_DTYPE,
                   "one_hot is only applicable to index tensor.");
    EMB_EXPECT_ERR(emb_one_hot_num_classes(&it, -1, &c), EMB_ERR_DTYPE,
                   "one_hot is only applicable to index tensor.");
    float fidx[3] = {0, 1, 2};
    it = emb_test_view(EMB_FLOAT32, fidx, 1, SHP(3));
    EMB_EXPECT_ERR(emb_one_hot(&it, 3, &ot), EMB_ERR_DTYPE,
                   "one_hot is only applicable to index tensor.");
    it = emb_test_view(EMB_INT64, NULL, 1, SHP(0));
    EMB_EXPECT_ERR(emb_one_hot(&it, -1, &ot), EMB_ERR_INVALID,
                   "Can not infer total number of classes from empty tensor.");
    EMB_EXPECT_ERR(emb_one_hot(&it, 0, &ot), EMB_ERR_INVALID,
                   "Can not infer total number of classes from empty tensor.");
    EMB_EXPECT_ERR(emb_one_hot_num_classes(&it, -1, &c), EMB_ERR_INVALID,
                   "Can not infer total number of classes from empty tensor.");
    it = emb_test_view(EMB_INT64, idx, 1, SHP(3));
    EMB_EXPECT_ERR(emb_one_hot(&it, 3, &ot), EMB_ERR_INDEX,
                   "Class values must be non-negative. (value -1 at position 1)");
    EMB_EXPECT_ERR(emb_one_hot_num_classes(&it, -1, &c), EMB_ERR_INDEX,
                   "Class values must be non-negative.");
    it = emb_test_view(EMB_INT64, big, 1, SHP(2));
    EMB_EXPECT_ERR(emb_one_hot(&it, 3, &ot), EMB_ERR_INDEX,
                   "Class values must be smaller than num_classes. (value 5 at position 1; "
                   "num_classes is 3)");
    EMB_EXPECT_ERR(emb_one_hot(&it, 0, &ot), EMB_ERR_INDEX,
                   "Class values must be smaller than num_classes.");
    EMB_EXPECT_ERR(emb_one_hot(&it, -2, &ot), EMB_ERR_INDEX,
                   "Class values must be smaller than num_classes.");
    EMB_EXPECT_ERR(emb_one_hot_num_classes(&it, 5, &c), EMB_ERR_INDEX,
                   "Class values must be smaller than num_classes.");
    int64_t huge = INT64_MAX;
    it = emb_test_view(EMB_INT64, &huge, 1, SHP(1));
    EMB_EXPECT_ERR(emb_one_hot_num_classes(&it, -1, &c), EMB_ERR_OVERFLOW, "overflows int64");
    /* output checks */
    it = emb_test_view(EMB_INT64, big, 1, SHP(2));
    emb_tensor bad = emb_test_view(EMB_INT64, out, 2, SHP(2, 5));
    EMB_EXPECT_ERR(emb_one_hot(&it, 6, &bad), EMB_ERR_SHAPE,
                   "one_hot: out has shape [2, 5], expected [2, 6]");
    bad = emb_test_view(EMB_INT64, out, 1, SHP(12));
    EMB_EXPECT_ERR(emb_one_hot(&it, -1, &bad), EMB_ERR_SHAPE,
                   "one_hot: out has shape [12], expected [2, 6]");
    bad = emb_test_view(EMB_INT32, out, 2, SHP(2, 6));
    EMB_EXPECT_ERR(emb_one_hot(&it, -1, &bad), EMB_ERR_DTYPE,
                   "one_hot: out must be int64 or float32, got int32");
    EMB_EXPECT_ERR(emb_one_hot(&it, -1, NULL), EMB_ERR_NULL, "out must not be NULL");
    EMB_EXPECT_ERR(emb_one_hot(NULL, -1, &bad), EMB_ERR_NULL, "indices must not be NULL");
    EMB_EXPECT_ERR(emb_one_hot_num_classes(NULL, -1, &c), EMB_ERR_NULL, "indices must not be NULL");
    EMB_EXPECT_ERR(emb_one_hot_num_classes(&it, -1, NULL), EMB_ERR_NULL,
                   "out_classes must not be NULL");
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    int64_t zero = 0;
    it = emb_test_view(EMB_INT64, &zero, 9, nine);
    EMB_EXPECT_ERR(emb_one_hot(&it, 1, &ot), EMB_ERR_SHAPE,
                   "indices have 9 dimensions; at most 8 are supported");
    /* an output struct with NULL data */
    it = emb_test_view(EMB_INT64, big, 1, SHP(2));
    bad = emb_test_view(EMB_INT64, out, 2, SHP(2, 6));
    bad.data = NULL;
    EMB_EXPECT_ERR(emb_one_hot(&it, -1, &bad), EMB_ERR_NULL,
                   "out has 12 elements but its data is NULL");
    /* out overlapping the indices */
    int64_t shared[8] = {0, 1, 0, 0, 0, 0, 0, 0};
    it = emb_test_view(EMB_INT64, shared, 1, SHP(2));
    bad = emb_test_view(EMB_INT64, shared, 2, SHP(2, 2));
    EMB_EXPECT_ERR(emb_one_hot(&it, 2, &bad), EMB_ERR_INVALID, "out must not overlap indices");
    assert_int_equal(shared[0], 0);
    assert_int_equal(shared[1], 1);
    assert_int_equal(shared[2], 0);
    assert_int_equal(c, 77);
    for (int i = 0; i < 64; i++) assert_int_equal(out[i], 4242);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_reference_bits),
        cmocka_unit_test(test_init_bounds_and_draw_counts),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_default_generator),
        cmocka_unit_test(test_forward_hand),
        cmocka_unit_test(test_backward_hand),
        cmocka_unit_test(test_forward_errors),
        cmocka_unit_test(test_backward_errors),
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_gemm_ref_vs_oracle_and_cblas),
        cmocka_unit_test(test_ref_mode_and_threads),
        cmocka_unit_test(test_one_hot_hand),
        cmocka_unit_test(test_one_hot_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
