/* tests/unit/test_quant.c: reduced-precision and quantized tables (include/emb/quant.h) at
 * the C level: argument errors, that refusals change nothing, wrap and release, the
 * reference and AVX2 kernels giving the same bits, the quantization bound. Bit parity with
 * PyTorch's ops is tests/parity/test_quant.py. */
#include "emb_test.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static const emb_qtype ALL[] = {EMB_QTYPE_F32, EMB_QTYPE_F16, EMB_QTYPE_BF16, EMB_QTYPE_INT8,
                                EMB_QTYPE_INT4};

static void fill(float *w, int64_t n, uint32_t seed) {
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        w[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * (float)(1 + (i % 7) * 3);
    }
}

static void test_names_and_sizes(void **state) {
    (void)state;
    emb_qtype q;
    const char *names[] = {"f32", "f16", "bf16", "int8", "int4"};
    for (int i = 0; i < 5; i++) {
        assert_string_equal(emb_qtype_name(ALL[i]), names[i]);
        EMB_OK_OR_FAIL(emb_qtype_parse(names[i], &q));
        assert_int_equal(q, ALL[i]);
    }
    EMB_OK_OR_FAIL(emb_qtype_parse("half", &q));
    assert_int_equal(q, EMB_QTYPE_F16);
    EMB_EXPECT_ERR(emb_qtype_parse("int3", &q), EMB_ERR_INVALID, "int3");
    assert_string_equal(emb_qtype_name((emb_qtype)42), "unknown");
    int64_t rb;
    const int64_t want[] = {4 * 7, 2 * 7, 2 * 7, 7 + 8, 4 + 4};
    for (int i = 0; i < 5; i++) {
        EMB_OK_OR_FAIL(emb_qtype_row_nbytes(ALL[i], 7, &rb));
        assert_int_equal(rb, want[i]);
    }
    EMB_EXPECT_ERR(emb_qtype_row_nbytes(EMB_QTYPE_INT8, 0, &rb), EMB_ERR_SHAPE, "dim >= 1");
    EMB_EXPECT_ERR(emb_qtype_row_nbytes(EMB_QTYPE_F16, -1, &rb), EMB_ERR_SHAPE, "dim");
    EMB_EXPECT_ERR(emb_qtype_row_nbytes((emb_qtype)9, 4, &rb), EMB_ERR_INVALID, "storage type");
    EMB_EXPECT_ERR(emb_qtype_row_nbytes(EMB_QTYPE_F16, INT64_MAX, &rb), EMB_ERR_OVERFLOW, "dim");
}

/* Each element dequantizes within half a step of its source (plus float rounding). */
static void test_roundtrip_bound(void **state) {
    (void)state;
    enum { V = 37, D = 19 };
    float w[V * D], back[V * D];
    fill(w, V * D, 3);
    for (int i = 0; i < 5; i++) {
        emb_tensor t;
        EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, w, 2, (int64_t[]){V, D}));
        emb_qtable *q = NULL;
        EMB_OK_OR_FAIL(emb_qtable_quantize(&t, ALL[i], &q));
        assert_int_equal(emb_qtable_num_rows(q), V);
        assert_int_equal(emb_qtable_dim(q), D);
        assert_int_equal(emb_qtable_qtype(q), ALL[i]);
        EMB_OK_OR_FAIL(emb_qtable_dequantize(q, 0, V, back));
        for (int r = 0; r < V; r++) {
            float mn = w[r * D], mx = w[r * D];
            for (int j = 1; j < D; j++) {
                mn = fminf(mn, w[r * D + j]);
                mx = fmaxf(mx, w[r * D + j]);
            }
            double step = ALL[i] == EMB_QTYPE_INT8   ? (mx - mn) / 255.0
                          : ALL[i] == EMB_QTYPE_INT4 ? (mx - mn) / 15.0
                                                     : 0.0;
            for (int j = 0; j < D; j++) {
                double x = w[r * D + j], y = back[r * D + j];
                double rel = ALL[i] == EMB_QTYPE_F16    ? 1.0 / 2048
                             : ALL[i] == EMB_QTYPE_BF16 ? 1.0 / 256
                                                        : 0;
                /* int4's float16 bias and scale add their own rounding */
                double tol = step * (ALL[i] == EMB_QTYPE_INT4 ? 0.75 : 0.5) + rel * fabs(x) +
                             1e-6 * (fabs(mx) + fabs(mn));
                if (fabs(x - y) > tol)
                    fail_msg("%s row %d col %d: %g -> %g (tolerance %g)", emb_qtype_name(ALL[i]), r,
                             j, x, y, tol);
            }
        }
        emb_qerror e;
        EMB_OK_OR_FAIL(emb_qtable_error(q, &t, &e));
        assert_int_equal(e.rows, V);
        assert_true(e.mean_cosine > 0.99 && e.mean_cosine <= 1.0 + 1e-12);
        if (ALL[i] == EMB_QTYPE_F32) assert_true(e.max_abs == 0.0);
        emb_qtable_free(q);
    }
}

/* Rows without columns: the weight may have no storage at all (data NULL), and every row
 * counts with cosine 1 (found by fuzz_api: the error walk computed NULL + 0). */
static void test_error_of_rows_without_columns(void **state) {
    (void)state;
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, NULL, 2, (int64_t[]){3, 0}));
    for (int i = 0; i < 5; i++) {
        emb_qtable *q = NULL;
        if (ALL[i] == EMB_QTYPE_INT8 || ALL[i] == EMB_QTYPE_INT4) {
            /* their rows need values for a scale and a bias */
            EMB_EXPECT_ERR(emb_qtable_quantize(&t, ALL[i], &q), EMB_ERR_SHAPE, "dim >= 1");
            continue;
        }
        EMB_OK_OR_FAIL(emb_qtable_quantize(&t, ALL[i], &q));
        emb_qerror e;
        EMB_OK_OR_FAIL(emb_qtable_error(q, &t, &e));
        assert_int_equal(e.rows, 3);
        assert_int_equal(e.elements, 0);
        assert_true(e.mean_cosine == 1.0 && e.max_abs == 0.0);
        emb_qtable_free(q);
    }
}

/* A table of no rows and a huge dimension (found by fuzz_api: a 0 x 2^32 table made the error
 * walk allocate 16 GiB of scratch rows for rows it does not have): the scratch is sized by the
 * rows there are, so the walk succeeds without allocating (2^58 columns would need 2^60
 * bytes for one row: the allocation failed before the fix). */
static void test_error_of_no_rows(void **state) {
    (void)state;
    const int64_t dim = (int64_t)1 << 58;
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, NULL, 2, (int64_t[]){0, dim}));
    for (int i = 0; i < 5; i++) {
        emb_qtable *q = NULL;
        EMB_OK_OR_FAIL(emb_qtable_quantize(&t, ALL[i], &q));
        emb_qerror e;
        EMB_OK_OR_FAIL(emb_qtable_error(q, &t, &e));
        assert_int_equal(e.rows, 0);
        assert_int_equal(e.elements, 0);
        emb_qtable_free(q);
    }
}

/* Rows without columns: no per-row work (a fuzz_api input asked for the error of a table of
 * so many such rows that the loop over them ran for 50 s: libFuzzer's timeout); each row's
 * cosine is 1 (both rows are the empty vector), as for a few rows. Before the fix the 2^58
 * rows below did not finish. */
static void test_error_of_no_columns(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        const int64_t rows = k ? (int64_t)1 << 58 : 3;
        emb_tensor t;
        EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, NULL, 2, (int64_t[]){rows, 0}));
        for (int i = 0; i < 3; i++) { /* f32, f16, bf16: int8 and int4 rows need dim >= 1 */
            emb_qtable *q = NULL;
            EMB_OK_OR_FAIL(emb_qtable_quantize(&t, ALL[i], &q));
            emb_qerror e;
            EMB_OK_OR_FAIL(emb_qtable_error(q, &t, &e));
            assert_int_equal(e.rows, rows);
            assert_int_equal(e.elements, 0);
            assert_true(e.mean_cosine == 1.0 && e.sum_cosine == (double)rows);
            assert_true(e.mean_abs == 0.0 && e.max_abs == 0.0);
            emb_qtable_free(q);
        }
    }
    emb_qerror e;
    emb_qerror_init(&e);
    EMB_OK_OR_FAIL(emb_qerror_add(&e, NULL, NULL, (int64_t)1 << 62, 0));
    assert_true(e.rows == (int64_t)1 << 62 && e.mean_cosine == 1.0);
}

static void test_refusal_changes_nothing(void **state) {
    (void)state;
    float src[2 * 4] = {1, 2, 3, 4, 5, NAN, 7, 8};
    unsigned char dst[64];
    for (int i = 0; i < 5; i++) {
        memset(dst, 0xAB, sizeof dst);
        EMB_EXPECT_ERR(emb_quantize_rows(ALL[i], src, 2, 4, dst, sizeof dst), EMB_ERR_INVALID,
                       "row 1");
        for (size_t k = 0; k < sizeof dst; k++) assert_int_equal(dst[k], 0xAB);
    }
    float ok[4] = {1, 2, 3, 4};
    EMB_EXPECT_ERR(emb_quantize_rows(EMB_QTYPE_INT8, ok, 1, 4, dst, 11), EMB_ERR_INVALID,
                   "need 12");
    EMB_EXPECT_ERR(emb_quantize_rows(EMB_QTYPE_INT8, ok, 1, 4, (unsigned char *)ok, 12),
                   EMB_ERR_INVALID, "overlap");
    EMB_EXPECT_ERR(emb_quantize_rows(EMB_QTYPE_INT8, NULL, 1, 4, dst, 12), EMB_ERR_NULL, "src");
    EMB_EXPECT_ERR(emb_quantize_rows(EMB_QTYPE_INT8, ok, -1, 4, dst, 12), EMB_ERR_SHAPE, "rows");
    emb_qtable *q = (emb_qtable *)(uintptr_t)0x1;
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, src, 2, (int64_t[]){2, 4}));
    EMB_EXPECT_ERR(emb_qtable_quantize(&t, EMB_QTYPE_F16, &q), EMB_ERR_INVALID, "NaN");
    assert_ptr_equal(q, (emb_qtable *)(uintptr_t)0x1);
    int64_t idx64[2] = {0, 1};
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_INT64, idx64, 2, (int64_t[]){1, 2}));
    EMB_EXPECT_ERR(emb_qtable_quantize(&t, EMB_QTYPE_F16, &q), EMB_ERR_DTYPE, "float32");
}

static int releases;
static void count_release(void *data, void *ctx) {
    (void)data;
    (void)ctx;
    releases++;
}

static void test_wrap(void **state) {
    (void)state;
    enum { V = 5, D = 6 };
    float w[V * D], a[V * D], b[V * D];
    fill(w, V * D, 9);
    unsigned char rows[V * (D + 8)];
    EMB_OK_OR_FAIL(emb_quantize_rows(EMB_QTYPE_INT8, w, V, D, rows, sizeof rows));
    emb_storage s = {.read_only = true, .release = count_release, .release_ctx = NULL};
    emb_qtable *q = NULL;
    releases = 0;
    EMB_EXPECT_ERR(emb_qtable_wrap(EMB_QTYPE_INT8, V, D, rows, sizeof rows - 1, &s, &q),
                   EMB_ERR_INVALID, "need 70");
    assert_null(q);
    assert_int_equal(releases, 0);
    EMB_OK_OR_FAIL(emb_qtable_wrap(EMB_QTYPE_INT8, V, D, rows, sizeof rows, &s, &q));
    assert_ptr_equal(emb_qtable_data(q), rows);
    EMB_OK_OR_FAIL(emb_dequantize_rows(EMB_QTYPE_INT8, rows, sizeof rows, V, D, a));
    EMB_OK_OR_FAIL(emb_qtable_dequantize(q, 0, V, b));
    emb_assert_close_f32(b, a, V * D, 1, 0, 0, "wrap");
    EMB_EXPECT_ERR(emb_qtable_dequantize(q, 3, 3, b), EMB_ERR_INDEX, "outside");
    emb_qtable_free(q);
    assert_int_equal(releases, 1);
    emb_qtable_free(NULL);
}

/* The reference kernels and the dispatched ones, 1 and 2 threads: the same bits. */
static void test_kernels_agree(void **state) {
    (void)state;
    enum { V = 300, D = 37, N = 6000, B = 300 };
    float *w = malloc(sizeof(float) * V * D);
    int64_t *idx = malloc(sizeof(int64_t) * N), off[B];
    float *psw = malloc(sizeof(float) * N);
    fill(w, V * D, 21);
    fill(psw, N, 22);
    for (int i = 0; i < N; i++) idx[i] = (i * 7919 + 13) % V;
    for (int b = 0; b < B; b++) off[b] = b * (N / B) - (b % 3 == 1 ? 3 : 0);
    emb_tensor tw, ti, to, tp, tout;
    EMB_OK_OR_FAIL(emb_tensor_init(&tw, EMB_FLOAT32, w, 2, (int64_t[]){V, D}));
    EMB_OK_OR_FAIL(emb_tensor_init(&ti, EMB_INT64, idx, 1, (int64_t[]){N}));
    EMB_OK_OR_FAIL(emb_tensor_init(&to, EMB_INT64, off, 1, (int64_t[]){B}));
    EMB_OK_OR_FAIL(emb_tensor_init(&tp, EMB_FLOAT32, psw, 1, (int64_t[]){N}));
    float *out[3], *bag[3], *mx[3];
    for (int k = 0; k < 3; k++) {
        out[k] = malloc(sizeof(float) * N * D);
        bag[k] = malloc(sizeof(float) * B * D);
        mx[k] = malloc(sizeof(float) * B * D);
    }
    emb_bag_options o = emb_bag_options_default();
    for (int i = 0; i < 5; i++) {
        emb_qtable *q;
        EMB_OK_OR_FAIL(emb_qtable_quantize(&tw, ALL[i], &q));
        for (int k = 0; k < 3; k++) {
            emb_set_kernel_mode(k == 0 ? EMB_KERNELS_REF : EMB_KERNELS_AUTO);
            emb_set_num_threads(k == 2 ? 2 : 1);
            EMB_OK_OR_FAIL(emb_tensor_init(&tout, EMB_FLOAT32, out[k], 2, (int64_t[]){N, D}));
            EMB_OK_OR_FAIL(emb_qtable_forward(q, &ti, &tout));
            o.mode = EMB_BAG_SUM;
            EMB_OK_OR_FAIL(emb_tensor_init(&tout, EMB_FLOAT32, bag[k], 2, (int64_t[]){B, D}));
            EMB_OK_OR_FAIL(emb_qtable_bag_forward(q, &ti, &to, &tp, &o, &tout, NULL));
            o.mode = EMB_BAG_MAX;
            EMB_OK_OR_FAIL(emb_tensor_init(&tout, EMB_FLOAT32, mx[k], 2, (int64_t[]){B, D}));
            EMB_OK_OR_FAIL(emb_qtable_bag_forward(q, &ti, &to, NULL, &o, &tout, NULL));
        }
        emb_set_kernel_mode(EMB_KERNELS_AUTO);
        emb_set_num_threads(0);
        for (int k = 1; k < 3; k++) {
            emb_assert_close_f32(out[k], out[0], (int64_t)N * D, 1, 0, 0, "forward");
            emb_assert_close_f32(bag[k], bag[0], (int64_t)B * D, 1, 0, 0, "bag sum");
            emb_assert_close_f32(mx[k], mx[0], (int64_t)B * D, 1, 0, 0, "bag max");
        }
        emb_qtable_free(q);
    }
    for (int k = 0; k < 3; k++) {
        free(out[k]);
        free(bag[k]);
        free(mx[k]);
    }
    free(w);
    free(idx);
    free(psw);
}

/* A table of a gigabyte or more loads rows ahead for real (qtable.c, EMB__Q_TOUCH_BYTES):
 * the same bits as the reference kernels, and no read outside the table. The table is a
 * 1 GiB anonymous mapping of which only the looked-up rows are written; the others stay
 * the shared zero page. */
static void test_touch_ahead_on_large_tables(void **state) {
    (void)state;
    enum { D = 56, N = 4000, B = 200 };
    const int64_t rb = D + 8, V = ((int64_t)1 << 30) / rb + 1;
    const size_t nbytes = (size_t)(V * rb);
    uint8_t *base = mmap(NULL, nbytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED)
        fail_msg("mmap of a %zu-byte anonymous table: %s", nbytes, strerror(errno));
    float w[64 * D];
    fill(w, 64 * D, 31);
    int64_t rows[64], idx[N], off[B];
    for (int r = 0; r < 64; r++) {
        rows[r] = r == 63 ? V - 1 : (int64_t)r * (V / 63) + r * 977;
        EMB_OK_OR_FAIL(
            emb_quantize_rows(EMB_QTYPE_INT8, w + r * D, 1, D, base + rows[r] * rb, (size_t)rb));
    }
    for (int i = 0; i < N; i++) idx[i] = rows[(i * 37 + i / 64) % 64];
    for (int b = 0; b < B; b++) off[b] = b * (N / B);
    emb_qtable *q;
    EMB_OK_OR_FAIL(emb_qtable_wrap(EMB_QTYPE_INT8, V, D, base, nbytes, NULL, &q));
    emb_tensor ti, to, tout;
    EMB_OK_OR_FAIL(emb_tensor_init(&ti, EMB_INT64, idx, 1, (int64_t[]){N}));
    EMB_OK_OR_FAIL(emb_tensor_init(&to, EMB_INT64, off, 1, (int64_t[]){B}));
    float *out[3], *bag[3], expect[D];
    emb_bag_options o = emb_bag_options_default();
    o.mode = EMB_BAG_SUM;
    /* prefetch: advice on the wrapped memory (not emb's own), then the same lookups */
    EMB_OK_OR_FAIL(emb_qtable_prefetch(q, &ti));
    int64_t bad[2] = {0, V};
    emb_tensor tbad;
    EMB_OK_OR_FAIL(emb_tensor_init(&tbad, EMB_INT64, bad, 1, (int64_t[]){2}));
    EMB_EXPECT_ERR(emb_qtable_prefetch(q, &tbad), EMB_ERR_INDEX, "position 1");
    EMB_OK_OR_FAIL(emb_tensor_init(&tbad, EMB_FLOAT32, w, 1, (int64_t[]){2}));
    EMB_EXPECT_ERR(emb_qtable_prefetch(q, &tbad), EMB_ERR_DTYPE, "");
    EMB_EXPECT_ERR(emb_qtable_prefetch(NULL, &ti), EMB_ERR_NULL, "table");
    for (int k = 0; k < 3; k++) {
        out[k] = malloc(sizeof(float) * N * D);
        bag[k] = malloc(sizeof(float) * B * D);
        emb_set_kernel_mode(k == 0 ? EMB_KERNELS_REF : EMB_KERNELS_AUTO);
        emb_set_num_threads(k == 2 ? 2 : 1);
        EMB_OK_OR_FAIL(emb_tensor_init(&tout, EMB_FLOAT32, out[k], 2, (int64_t[]){N, D}));
        EMB_OK_OR_FAIL(emb_qtable_forward(q, &ti, &tout));
        EMB_OK_OR_FAIL(emb_tensor_init(&tout, EMB_FLOAT32, bag[k], 2, (int64_t[]){B, D}));
        EMB_OK_OR_FAIL(emb_qtable_bag_forward(q, &ti, &to, NULL, &o, &tout, NULL));
    }
    emb_set_kernel_mode(EMB_KERNELS_AUTO);
    emb_set_num_threads(0);
    for (int i = 0; i < N; i += 97) {
        EMB_OK_OR_FAIL(emb_qtable_dequantize(q, idx[i], 1, expect));
        emb_assert_close_f32(out[0] + (int64_t)i * D, expect, D, 1, 0, 0, "row");
    }
    for (int k = 1; k < 3; k++) {
        emb_assert_close_f32(out[k], out[0], (int64_t)N * D, 1, 0, 0, "forward");
        emb_assert_close_f32(bag[k], bag[0], (int64_t)B * D, 1, 0, 0, "bag sum");
    }
    for (int k = 0; k < 3; k++) {
        free(out[k]);
        free(bag[k]);
    }
    emb_qtable_free(q);
    munmap(base, nbytes);
}

static void test_errors_change_nothing(void **state) {
    (void)state;
    float w[4 * 3] = {0};
    fill(w, 12, 5);
    emb_tensor tw, ti, tout;
    EMB_OK_OR_FAIL(emb_tensor_init(&tw, EMB_FLOAT32, w, 2, (int64_t[]){4, 3}));
    emb_qtable *q;
    EMB_OK_OR_FAIL(emb_qtable_quantize(&tw, EMB_QTYPE_INT4, &q));
    int64_t idx[3] = {0, 4, 1};
    float out[9];
    for (int i = 0; i < 9; i++) out[i] = 42.0f;
    EMB_OK_OR_FAIL(emb_tensor_init(&ti, EMB_INT64, idx, 1, (int64_t[]){3}));
    EMB_OK_OR_FAIL(emb_tensor_init(&tout, EMB_FLOAT32, out, 2, (int64_t[]){3, 3}));
    EMB_EXPECT_ERR(emb_qtable_forward(q, &ti, &tout), EMB_ERR_INDEX, "4");
    EMB_EXPECT_ERR(emb_qtable_forward(NULL, &ti, &tout), EMB_ERR_NULL, "table");
    EMB_OK_OR_FAIL(emb_tensor_init(&tout, EMB_FLOAT32, out, 2, (int64_t[]){3, 2}));
    idx[1] = 2;
    EMB_EXPECT_ERR(emb_qtable_forward(q, &ti, &tout), EMB_ERR_SHAPE, "");
    int64_t off[1] = {0};
    emb_tensor to;
    EMB_OK_OR_FAIL(emb_tensor_init(&to, EMB_INT64, off, 1, (int64_t[]){1}));
    EMB_OK_OR_FAIL(emb_tensor_init(&tout, EMB_FLOAT32, out, 2, (int64_t[]){1, 3}));
    emb_bag_options o = emb_bag_options_default();
    o.mode = EMB_BAG_MEAN;
    float psw[3] = {1, 2, 3};
    emb_tensor tp;
    EMB_OK_OR_FAIL(emb_tensor_init(&tp, EMB_FLOAT32, psw, 1, (int64_t[]){3}));
    EMB_EXPECT_ERR(emb_qtable_bag_forward(q, &ti, &to, &tp, &o, &tout, NULL), EMB_ERR_UNSUPPORTED,
                   "");
    o.mode = (emb_bag_mode)7;
    EMB_EXPECT_ERR(emb_qtable_bag_forward(q, &ti, &to, NULL, &o, &tout, NULL), EMB_ERR_INVALID,
                   "mode");
    o = emb_bag_options_default();
    o.mode = EMB_BAG_SUM;
    o.max_norm = 1.0; /* would renormalise the stored rows */
    EMB_EXPECT_ERR(emb_qtable_bag_forward(q, &ti, &to, NULL, &o, &tout, NULL), EMB_ERR_READ_ONLY,
                   "max_norm");
    o = emb_bag_options_default();
    o.mode = EMB_BAG_SUM;
    idx[1] = 4;
    EMB_EXPECT_ERR(emb_qtable_bag_forward(q, &ti, &to, NULL, &o, &tout, NULL), EMB_ERR_INDEX, "4");
    for (int i = 0; i < 9; i++) assert_true(out[i] == 42.0f);
    emb_qtable_free(q);
}

/* The streaming writer's life: commit finishes it (later calls are refused) without freeing
 * it; emb_qtable_writer_free destroys it, and abandons the write when no commit came (no
 * file is left). The ASan build checks that nothing leaks on either path. */
static void test_writer_commit_then_free(void **state) {
    (void)state;
    char dir[] = "/tmp/emb_test_qwriter_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
    float w[3 * 4];
    fill(w, 12, 7);
    emb_qtable_writer *q;
    assert_int_equal(emb_qtable_writer_open(path, EMB_QTYPE_INT8, 3, 4, NULL, &q), EMB_OK);
    assert_int_equal(emb_qtable_writer_append(q, w, 3), EMB_OK);
    emb_qerror err;
    assert_int_equal(emb_qtable_writer_commit(q, &err), EMB_OK);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(emb_qtable_writer_commit(q, &err), EMB_ERR_STATE);
    assert_non_null(strstr(emb_errmsg(), "already been committed"));
    assert_int_equal(emb_qtable_writer_append(q, w, 1), EMB_ERR_STATE);
    emb_qtable_writer_free(q);
    assert_int_equal(access(path, F_OK), 0); /* freeing after a commit keeps the file */
    assert_int_equal(unlink(path), 0);
    /* abandoned: free before commit removes the temporary and writes nothing */
    assert_int_equal(emb_qtable_writer_open(path, EMB_QTYPE_F16, 3, 4, NULL, &q), EMB_OK);
    assert_int_equal(emb_qtable_writer_append(q, w, 2), EMB_OK);
    emb_qtable_writer_free(q);
    emb_qtable_writer_free(NULL);
    assert_int_equal(rmdir(dir), 0); /* empty: no file, no temporary */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_sizes),
        cmocka_unit_test(test_roundtrip_bound),
        cmocka_unit_test(test_refusal_changes_nothing),
        cmocka_unit_test(test_error_of_rows_without_columns),
        cmocka_unit_test(test_error_of_no_rows),
        cmocka_unit_test(test_error_of_no_columns),
        cmocka_unit_test(test_wrap),
        cmocka_unit_test(test_kernels_agree),
        cmocka_unit_test(test_touch_ahead_on_large_tables),
        cmocka_unit_test(test_errors_change_nothing),
        cmocka_unit_test(test_writer_commit_then_free),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
