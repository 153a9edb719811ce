/* Unit tests for emb_tensor_repr / emb_tensor_print: snprintf semantics, bad arguments and
 * options, the seed notebooks' outputs, and a few fixed cases. Expected strings are torch
 * 1.13's repr of the same data (generated with torch and committed); the parity suite
 * compares with torch live on thousands of random cases. */
#include "emb_test.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#define SENTINEL 0x5a

/* repr into a fresh buffer via a size query; caller frees. */
static char *repr_of(const emb_tensor *t, const emb_print_options *o) {
    size_t need = 0;
    EMB_OK_OR_FAIL(emb_tensor_repr(t, o, NULL, 0, &need));
    char *buf = malloc(need + 1);
    assert_non_null(buf);
    size_t need2 = 0;
    EMB_OK_OR_FAIL(emb_tensor_repr(t, o, buf, need + 1, &need2));
    assert_int_equal(need, need2);
    assert_int_equal(strlen(buf), need);
    return buf;
}

static void expect_repr(const emb_tensor *t, const emb_print_options *o, const char *want) {
    char *got = repr_of(t, o);
    if (strcmp(got, want) != 0) {
        print_error("--- emb ---\n%s\n--- torch ---\n%s\n", got, want);
        free(got);
        fail_msg("repr differs");
    }
    free(got);
}

static emb_tensor view(emb_dtype dt, void *data, int ndim, const int64_t *shape) {
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_tensor_init(&t, dt, data, ndim, shape));
    return t;
}

/* ---- options ---------------------------------------------------------------------- */

static void test_defaults(void **state) {
    (void)state;
    emb_print_options o = emb_print_options_default();
    assert_int_equal(o.precision, 4);
    assert_int_equal(o.threshold, 1000);
    assert_int_equal(o.edgeitems, 3);
    assert_int_equal(o.linewidth, 80);
    assert_int_equal(o.sci_mode, EMB_SCI_AUTO);
    for (int i = 0; i < 4; i++) assert_null(o.suffixes[i]);

    /* opts NULL means the defaults */
    float v[3] = {1.25f, -0.5f, 3.0f};
    int64_t shape[1] = {3};
    emb_tensor t = view(EMB_FLOAT32, v, 1, shape);
    char *a = repr_of(&t, NULL), *b = repr_of(&t, &o);
    assert_string_equal(a, b);
    assert_string_equal(a, "tensor([ 1.2500, -0.5000,  3.0000])");
    free(a);
    free(b);
}

/* A failing call must leave buf and *needed alone. */
static void expect_untouched(const char *buf, size_t n, size_t needed) {
    for (size_t i = 0; i < n; i++) assert_int_equal((unsigned char)buf[i], SENTINEL);
    assert_int_equal(needed, 777);
}

static void test_invalid_options(void **state) {
    (void)state;
    float v[2] = {1, 2};
    int64_t shape[1] = {2};
    emb_tensor t = view(EMB_FLOAT32, v, 1, shape);
    int n = 0;
#define CASE(body, text)                                                                           \
    do {                                                                                           \
        emb_print_options o = emb_print_options_default();                                         \
        body;                                                                                      \
        char buf[64];                                                                              \
        size_t needed = 777;                                                                       \
        memset(buf, SENTINEL, sizeof buf);                                                         \
        EMB_EXPECT_ERR(emb_tensor_repr(&t, &o, buf, sizeof buf, &needed), EMB_ERR_INVALID, text);  \
        expect_untouched(buf, sizeof buf, needed);                                                 \
        n++;                                                                                       \
    } while (0)
    CASE(o.precision = -1, "print option precision is -1; valid: 0 to 100");
    CASE(o.precision = 101, "print option precision is 101; valid: 0 to 100");
    CASE(o.threshold = -5, "print option threshold is -5; valid: >= 0");
    CASE(o.edgeitems = -1, "print option edgeitems is -1; valid: >= 0");
    CASE(o.linewidth = 0, "print option linewidth is 0; valid: >= 1");
    CASE(o.linewidth = -80, "print option linewidth is -80; valid: >= 1");
    CASE(o.sci_mode = (emb_sci_mode)3, "print option sci_mode is 3; valid: EMB_SCI_AUTO (0)");
    CASE(o.sci_mode = (emb_sci_mode)-1, "print option sci_mode is -1");
#undef CASE
    assert_int_equal(n, 8);

    /* the limits themselves are valid */
    emb_print_options o = emb_print_options_default();
    o.precision = 100;
    o.threshold = 0;
    o.edgeitems = 0;
    o.linewidth = 1;
    char *s = repr_of(&t, &o);
    assert_string_equal(s, "tensor([ ...])"); /* summarised with no edge items */
    free(s);
    o.precision = 0;
    o.threshold = 1000;
    s = repr_of(&t, &o);
    assert_string_equal(s, "tensor([1.,\n        2.])");
    free(s);
}

/* ---- bad tensors and NULL arguments ------------------------------------------------- */

static void test_null_arguments(void **state) {
    (void)state;
    float v[2] = {1, 2};
    int64_t shape[1] = {2};
    emb_tensor t = view(EMB_FLOAT32, v, 1, shape);
    char buf[64];
    size_t needed = 777;

    memset(buf, SENTINEL, sizeof buf);
    EMB_EXPECT_ERR(emb_tensor_repr(NULL, NULL, buf, sizeof buf, &needed), EMB_ERR_NULL,
                   "tensor must not be NULL");
    expect_untouched(buf, sizeof buf, needed);

    EMB_EXPECT_ERR(emb_tensor_repr(&t, NULL, NULL, 10, &needed), EMB_ERR_NULL,
                   "buf (with size > 0) must not be NULL");
    assert_int_equal(needed, 777);

    emb_tensor bad = t;
    bad.data = NULL;
    memset(buf, SENTINEL, sizeof buf);
    EMB_EXPECT_ERR(emb_tensor_repr(&bad, NULL, buf, sizeof buf, &needed), EMB_ERR_NULL,
                   "tensor has 2 elements but its data is NULL");
    expect_untouched(buf, sizeof buf, needed);

    /* an empty tensor may have NULL data */
    int64_t eshape[2] = {0, 3};
    emb_tensor e = view(EMB_FLOAT32, NULL, 2, eshape);
    expect_repr(&e, NULL, "tensor([], size=(0, 3))");

    /* print: NULL stream, NULL tensor */
    EMB_EXPECT_ERR(emb_tensor_print(NULL, &t, NULL), EMB_ERR_NULL, "f must not be NULL");
    FILE *f = tmpfile();
    assert_non_null(f);
    EMB_EXPECT_ERR(emb_tensor_print(f, NULL, NULL), EMB_ERR_NULL, "tensor must not be NULL");
    assert_int_equal(ftell(f), 0);
    fclose(f);
}

static void test_bad_tensors(void **state) {
    (void)state;
    float v[4] = {1, 2, 3, 4};
    int64_t shape[1] = {4};
    emb_tensor t = view(EMB_FLOAT32, v, 1, shape);
    char buf[64];
    size_t needed = 777;

    emb_tensor bad = t;
    bad.dtype = (emb_dtype)42;
    memset(buf, SENTINEL, sizeof buf);
    EMB_EXPECT_ERR(emb_tensor_repr(&bad, NULL, buf, sizeof buf, &needed), EMB_ERR_DTYPE,
                   "tensor has an unknown dtype (42)");
    expect_untouched(buf, sizeof buf, needed);

    bad = t;
    bad.dtype = EMB_FLOAT16;
    EMB_EXPECT_ERR(emb_tensor_repr(&bad, NULL, buf, sizeof buf, &needed), EMB_ERR_DTYPE,
                   "cannot print a tensor of dtype float16 (supported: float32, float64, "
                   "int64, int32, int16, int8, uint8, bool)");
    expect_untouched(buf, sizeof buf, needed);
    bad.dtype = EMB_BFLOAT16;
    EMB_EXPECT_ERR(emb_tensor_repr(&bad, NULL, buf, sizeof buf, &needed), EMB_ERR_DTYPE,
                   "cannot print a tensor of dtype bfloat16");
    expect_untouched(buf, sizeof buf, needed);

    bad = t;
    bad.ndim = EMB_MAX_DIMS + 1;
    EMB_EXPECT_ERR(emb_tensor_repr(&bad, NULL, buf, sizeof buf, &needed), EMB_ERR_SHAPE,
                   "tensor has 10 dimensions; emb tensors have 0 to 9");
    expect_untouched(buf, sizeof buf, needed);

    bad = t;
    bad.ndim = -1;
    EMB_EXPECT_ERR(emb_tensor_repr(&bad, NULL, buf, sizeof buf, &needed), EMB_ERR_SHAPE,
                   "tensor has -1 dimensions");
    expect_untouched(buf, sizeof buf, needed);

    bad = t;
    bad.shape[0] = -4;
    EMB_EXPECT_ERR(emb_tensor_repr(&bad, NULL, buf, sizeof buf, &needed), EMB_ERR_SHAPE,
                   "tensor has a negative dimension -4 at dim 0");
    expect_untouched(buf, sizeof buf, needed);

    bad = t;
    bad.ndim = 3;
    bad.shape[0] = bad.shape[1] = bad.shape[2] = INT64_C(1) << 40;
    EMB_EXPECT_ERR(emb_tensor_repr(&bad, NULL, buf, sizeof buf, &needed), EMB_ERR_OVERFLOW,
                   "the number of elements of tensor overflows");
    expect_untouched(buf, sizeof buf, needed);

    /* the same errors through emb_tensor_print write nothing */
    FILE *f = tmpfile();
    assert_non_null(f);
    bad = t;
    bad.dtype = EMB_FLOAT16;
    EMB_EXPECT_ERR(emb_tensor_print(f, &bad, NULL), EMB_ERR_DTYPE, "dtype float16");
    emb_print_options o = emb_print_options_default();
    o.linewidth = 0;
    EMB_EXPECT_ERR(emb_tensor_print(f, &t, &o), EMB_ERR_INVALID, "linewidth is 0");
    assert_int_equal(ftell(f), 0);
    fclose(f);
}

/* ---- snprintf semantics ------------------------------------------------------------- */

static void test_size_query_and_truncation(void **state) {
    (void)state;
    float v[6] = {0.5f, -1.25f, 3.0f, 2.0f, 1.0f, -0.75f};
    int64_t shape[2] = {2, 3};
    emb_tensor t = view(EMB_FLOAT32, v, 2, shape);
    const char *full = "tensor([[ 0.5000, -1.2500,  3.0000],\n"
                       "        [ 2.0000,  1.0000, -0.7500]])";
    size_t len = strlen(full);

    /* size query: buf NULL with size 0, and a non-NULL buf with size 0 is not written */
    size_t needed = 0;
    EMB_OK_OR_FAIL(emb_tensor_repr(&t, NULL, NULL, 0, &needed));
    assert_int_equal(needed, len);
    char buf[128];
    memset(buf, SENTINEL, sizeof buf);
    needed = 0;
    EMB_OK_OR_FAIL(emb_tensor_repr(&t, NULL, buf, 0, &needed));
    assert_int_equal(needed, len);
    for (size_t i = 0; i < sizeof buf; i++) assert_int_equal((unsigned char)buf[i], SENTINEL);

    /* every size from 1 to len + 2: a NUL-terminated prefix, nothing written past size */
    for (size_t size = 1; size <= len + 2; size++) {
        memset(buf, SENTINEL, sizeof buf);
        needed = 0;
        EMB_OK_OR_FAIL(emb_tensor_repr(&t, NULL, buf, size, &needed));
        assert_int_equal(needed, len);
        size_t k = size - 1 < len ? size - 1 : len;
        assert_memory_equal(buf, full, k);
        assert_int_equal(buf[k], '\0');
        for (size_t i = size; i < sizeof buf; i++)
            assert_int_equal((unsigned char)buf[i], SENTINEL);
    }

    /* needed may be NULL */
    memset(buf, SENTINEL, sizeof buf);
    EMB_OK_OR_FAIL(emb_tensor_repr(&t, NULL, buf, sizeof buf, NULL));
    assert_string_equal(buf, full);
    EMB_OK_OR_FAIL(emb_tensor_repr(&t, NULL, NULL, 0, NULL));
}

/* ---- emb_tensor_print --------------------------------------------------------------- */

static void test_print_stream(void **state) {
    (void)state;
    int64_t v[3] = {7, -8, 9};
    int64_t shape[1] = {3};
    emb_tensor t = view(EMB_INT64, v, 1, shape);
    FILE *f = tmpfile();
    assert_non_null(f);
    EMB_OK_OR_FAIL(emb_tensor_print(f, &t, NULL));
    EMB_OK_OR_FAIL(emb_tensor_print(f, &t, NULL));
    rewind(f);
    char got[128] = {0};
    size_t n = fread(got, 1, sizeof got - 1, f);
    fclose(f);
    assert_int_equal(n, 2 * strlen("tensor([ 7, -8,  9])\n"));
    assert_string_equal(got, "tensor([ 7, -8,  9])\ntensor([ 7, -8,  9])\n");

    /* a stream opened for reading cannot be written */
    FILE *ro = fopen("/dev/null", "r");
    if (ro) {
        EMB_EXPECT_ERR(emb_tensor_print(ro, &t, NULL), EMB_ERR_IO,
                       "writing the printed tensor failed");
        fclose(ro);
    }
    /* a full device fails at the latest on flush */
    FILE *full = fopen("/dev/full", "w");
    if (full) {
        EMB_EXPECT_ERR(emb_tensor_print(full, &t, NULL), EMB_ERR_IO,
                       "writing the printed tensor failed: No space left on device");
        fclose(full);
    }
}

/* ---- fixed cases (torch 1.13 repr of the same data) --------------------------------- */

static void test_seed_outputs(void **state) {
    (void)state;
    /* shared/seeds/002: a 1x1x10 lookup with its grad_fn wrapped at 80 columns */
    float a[10] = {-0.1633f, 0.2602f, -1.3810f, -0.9100f, -1.3273f,
                   0.0258f,  1.2236f, 0.0988f,  1.5362f,  -0.0035f};
    int64_t sa[3] = {1, 1, 10};
    emb_tensor t = view(EMB_FLOAT32, a, 3, sa);
    emb_print_options o = emb_print_options_default();
    o.suffixes[0] = "grad_fn=<EmbeddingBackward0>";
    expect_repr(&t, &o,
                "tensor([[[-0.1633,  0.2602, -1.3810, -0.9100, -1.3273,  0.0258,  1.2236,\n"
                "           0.0988,  1.5362, -0.0035]]], grad_fn=<EmbeddingBackward0>)");

    /* shared/seeds/004: the 10x4 weight with requires_grad, and the 5x3 int64 sequence */
    float w[40] = {1.4610f,  -0.8082f, -0.7816f, -0.3135f, 0.1052f,  -0.0626f, -0.7115f, -1.1456f,
                   -0.3115f, 1.5333f,  0.6740f,  -1.8035f, -0.1831f, -2.3549f, 1.2970f,  -0.4006f,
                   1.8532f,  0.2546f,  0.4889f,  0.4106f,  1.0876f,  1.1219f,  -0.5330f, 0.1026f,
                   -0.4453f, -0.8550f, -0.0360f, 2.3146f,  0.7443f,  -0.3514f, 0.6963f,  -0.9283f,
                   -1.3944f, 0.0908f,  0.6961f,  1.0211f,  -0.2815f, 2.1397f,  -2.8740f, -0.4085f};
    int64_t sw[2] = {10, 4};
    t = view(EMB_FLOAT32, w, 2, sw);
    o = emb_print_options_default();
    o.suffixes[2] = "requires_grad=True"; /* NULL entries before it are skipped */
    expect_repr(&t, &o,
                "tensor([[ 1.4610, -0.8082, -0.7816, -0.3135],\n"
                "        [ 0.1052, -0.0626, -0.7115, -1.1456],\n"
                "        [-0.3115,  1.5333,  0.6740, -1.8035],\n"
                "        [-0.1831, -2.3549,  1.2970, -0.4006],\n"
                "        [ 1.8532,  0.2546,  0.4889,  0.4106],\n"
                "        [ 1.0876,  1.1219, -0.5330,  0.1026],\n"
                "        [-0.4453, -0.8550, -0.0360,  2.3146],\n"
                "        [ 0.7443, -0.3514,  0.6963, -0.9283],\n"
                "        [-1.3944,  0.0908,  0.6961,  1.0211],\n"
                "        [-0.2815,  2.1397, -2.8740, -0.4085]], requires_grad=True)");
    int64_t seq[15] = {0, 6, 7, 3, 2, 2, 2, 5, 2, 0, 8, 3, 4, 6, 3};
    int64_t ss[2] = {5, 3};
    t = view(EMB_INT64, seq, 2, ss);
    expect_repr(&t, NULL,
                "tensor([[0, 6, 7],\n"
                "        [3, 2, 2],\n"
                "        [2, 5, 2],\n"
                "        [0, 8, 3],\n"
                "        [4, 6, 3]])");

    /* shared/seeds/001: a 10-vector wrapped at 80 columns */
    float x[10] = {-0.5269f, 1.0298f,  -0.6908f, 1.8272f, -0.9981f,
                   0.0789f,  -2.8797f, 1.0594f,  1.1529f, -1.0838f};
    int64_t sx[1] = {10};
    t = view(EMB_FLOAT32, x, 1, sx);
    expect_repr(&t, NULL,
                "tensor([-0.5269,  1.0298, -0.6908,  1.8272, -0.9981,  0.0789, -2.8797,  1.0594,\n"
                "         1.1529, -1.0838])");

    /* shared/seeds/000: one row */
    float r[2] = {1.5410f, -0.2934f};
    int64_t sr[2] = {1, 2};
    t = view(EMB_FLOAT32, r, 2, sr);
    expect_repr(&t, NULL, "tensor([[ 1.5410, -0.2934]])");
    /* 0-d */
    t = view(EMB_FLOAT32, r, 0, NULL);
    expect_repr(&t, NULL, "tensor(1.5410)");
}

static void test_fixed_cases(void **state) {
    (void)state;
    /* a 10^7-element tensor is summarised; only the printed elements are visited */
    int64_t big = 10000000;
    emb_tensor z;
    EMB_OK_OR_FAIL(emb_tensor_alloc(&z, EMB_FLOAT32, 1, &big));
    clock_t c0 = clock();
    expect_repr(&z, NULL, "tensor([0., 0., 0.,  ..., 0., 0., 0.])");
    double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
    emb_tensor_release(&z);
    if (secs > 0.5) fail_msg("summarised print of 10^7 elements took %.3f s", secs);

    int64_t ones_shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    float one = 1.0f;
    emb_tensor t = view(EMB_FLOAT32, &one, 9, ones_shape);
    expect_repr(&t, NULL, "tensor([[[[[[[[[1.]]]]]]]]])");

    int64_t es[2] = {0, 3};
    t = view(EMB_INT32, NULL, 2, es);
    expect_repr(&t, NULL, "tensor([], size=(0, 3), dtype=torch.int32)");

    /* NaN prints without a sign, as in Python */
    float nn[2] = {-NAN, -1.5f};
    int64_t s2[1] = {2};
    t = view(EMB_FLOAT32, nn, 1, s2);
    expect_repr(&t, NULL, "tensor([    nan, -1.5000])");

    int16_t i16[4] = {1, -2, 300, 4};
    int64_t s22[2] = {2, 2};
    t = view(EMB_INT16, i16, 2, s22);
    expect_repr(&t, NULL, "tensor([[  1,  -2],\n        [300,   4]], dtype=torch.int16)");

    uint8_t b = 1;
    t = view(EMB_BOOL, &b, 0, NULL);
    expect_repr(&t, NULL, "tensor(True)");

    double d[3] = {1e-5, 1.0, INFINITY};
    int64_t s3[1] = {3};
    t = view(EMB_FLOAT64, d, 1, s3);
    expect_repr(&t, NULL, "tensor([1.0000e-05, 1.0000e+00,        inf], dtype=torch.float64)");

    /* precision 2, linewidth 30: blank line between the slices of a rank-3 tensor */
    float th[12];
    for (int i = 0; i < 12; i++) th[i] = (float)i / 3.0f;
    int64_t s223[3] = {2, 2, 3};
    t = view(EMB_FLOAT32, th, 3, s223);
    emb_print_options o = emb_print_options_default();
    o.precision = 2;
    o.linewidth = 30;
    expect_repr(&t, &o,
                "tensor([[[0.00, 0.33, 0.67],\n"
                "         [1.00, 1.33, 1.67]],\n"
                "\n"
                "        [[2.00, 2.33, 2.67],\n"
                "         [3.00, 3.33, 3.67]]])");
}

/* edgeitems = 0 while summarising: PyTorch 1.13 prints every element of a vector after
 * the ellipsis (a slice [-0:] bug) and raises for higher ranks; emb shows the ellipsis
 * alone, as print.h documents. */
static void test_edgeitems_zero(void **state) {
    (void)state;
    int64_t v[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    int64_t s1[1] = {10};
    emb_print_options o = emb_print_options_default();
    o.edgeitems = 0;
    o.threshold = 5;
    emb_tensor t = view(EMB_INT64, v, 1, s1);
    expect_repr(&t, &o, "tensor([ ...])");
    int64_t s2[2] = {2, 5};
    t = view(EMB_INT64, v, 2, s2);
    expect_repr(&t, &o, "tensor([...])");
    o.threshold = 1000; /* not summarised: edgeitems does not matter */
    expect_repr(&t, &o, "tensor([[0, 1, 2, 3, 4],\n        [5, 6, 7, 8, 9]])");
}

/* Empty tensors whose other dimensions are huge: the product of the non-zero dimensions
 * overflows int64, which must not be computed (it was: signed overflow in the strides).
 * Expected strings: torch 1.13's repr of torch.empty(...) with these sizes. */
static void test_empty_huge_dims(void **state) {
    (void)state;
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, NULL, 3, SHP(0, INT64_MAX, 2)));
    expect_repr(&t, NULL, "tensor([], size=(0, 9223372036854775807, 2))");
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_INT32, NULL, 2, SHP(INT64_MAX, 0)));
    expect_repr(&t, NULL, "tensor([], size=(9223372036854775807, 0), dtype=torch.int32)");
    EMB_OK_OR_FAIL(
        emb_tensor_init(&t, EMB_FLOAT64, NULL, 4, SHP(3, INT64_C(1) << 62, 0, INT64_C(1) << 62)));
    expect_repr(&t, NULL,
                "tensor([], size=(3, 4611686018427387904, 0, 4611686018427387904),\n"
                "       dtype=torch.float64)");
    FILE *f = tmpfile();
    assert_non_null(f);
    EMB_OK_OR_FAIL(emb_tensor_print(f, &t, NULL));
    assert_true(ftell(f) > 0);
    fclose(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_invalid_options),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_size_query_and_truncation),
        cmocka_unit_test(test_print_stream),
        cmocka_unit_test(test_seed_outputs),
        cmocka_unit_test(test_fixed_cases),
        cmocka_unit_test(test_edgeitems_zero),
        cmocka_unit_test(test_empty_huge_dims),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
