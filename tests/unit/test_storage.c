/* Unit tests of embeddings over caller-owned memory (emb_embedding_wrap, src/nn/embedding.c):
 * every error path of wrap (status, message, *out untouched, release not called, the
 * caller's buffer unchanged), release called exactly once on free, a borrowed table sharing
 * its storage with the caller both ways (lookups, writes through the accessor, max_norm
 * renorm), read-only tables (lookups and backward work; every write is refused with
 * EMB_ERR_READ_ONLY and changes nothing), and a real PROT_READ file mapping, where a write
 * would fault. Parity with torch's from_pretrained (which shares storage the same way) is in
 * tests/parity/test_storage.py. */
#define _GNU_SOURCE
#include "emb_test.h"

#include <fcntl.h>
#include <stdalign.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------------ */

/* Counts the calls of release_counter and remembers what it was given. */
typedef struct release_log {
    int calls;
    void *data;
} release_log;

static void release_counter(void *data, void *ctx) {
    release_log *log = ctx;
    log->calls++;
    log->data = data;
}

static void release_free(void *data, void *ctx) {
    release_log *log = ctx;
    log->calls++;
    log->data = data;
    free(data);
}

/* w[i] = 0.25*i - 3: distinct values, some rows with norms above 1. */
static void fill_table(float *w, int64_t n) {
    for (int64_t i = 0; i < n; i++) w[i] = 0.25f * (float)i - 3.0f;
}

static emb_tensor view2(float *w, int64_t V, int64_t D) {
    return emb_test_view(EMB_FLOAT32, w, 2, SHP(V, D));
}

/* The sentinel *out must keep after a failed wrap. */
static emb_embedding *const SENTINEL = (emb_embedding *)(uintptr_t)0x5e47;

/* Calls wrap and from_pretrained on the same arguments: both must fail with `status`, the
 * same message containing `needle`, leave *out alone, and not call release; the caller's
 * buffer (n floats at w, may be NULL) must be unchanged. */
static void expect_wrap_error(const emb_tensor *t, const emb_embedding_options *o,
                              emb_status status, const char *needle, const float *w, int64_t n) {
    float *before = NULL;
    if (w && n > 0) {
        before = malloc((size_t)n * sizeof(float));
        assert_non_null(before);
        memcpy(before, w, (size_t)n * sizeof(float));
    }
    release_log log = {0, NULL};
    emb_storage s = {.read_only = false, .release = release_counter, .release_ctx = &log};
    emb_embedding *out = SENTINEL;
    EMB_EXPECT_ERR(emb_embedding_wrap(t, &s, false, o, &out), status, needle);
    char wrap_msg[512];
    snprintf(wrap_msg, sizeof wrap_msg, "%s", emb_errmsg());
    assert_ptr_equal(out, SENTINEL);
    assert_int_equal(log.calls, 0);
    if (before) {
        EMB_ASSERT_EXACT(w, before, n, "caller's weights");
        free(before);
    }
    /* the same refusal, word for word, as the copying form (except for wrap's own
     * alignment check, which from_pretrained does not need) */
    if (status != EMB_ERR_INVALID || !strstr(needle, "aligned")) {
        out = SENTINEL;
        EMB_EXPECT_ERR(emb_embedding_from_pretrained(t, false, o, &out), status, needle);
        assert_string_equal(emb_errmsg(), wrap_msg);
        assert_ptr_equal(out, SENTINEL);
    }
}

/* ---- wrap: errors --------------------------------------------------------------------- */

static void test_wrap_null_arguments(void **state) {
    (void)state;
    float w[6];
    fill_table(w, 6);
    emb_tensor t = view2(w, 2, 3);
    release_log log = {0, NULL};
    emb_storage s = {.read_only = true, .release = release_counter, .release_ctx = &log};
    emb_embedding *out = SENTINEL;
    EMB_EXPECT_ERR(emb_embedding_wrap(NULL, &s, false, NULL, &out), EMB_ERR_NULL,
                   "weights must not be NULL");
    assert_ptr_equal(out, SENTINEL);
    EMB_EXPECT_ERR(emb_embedding_wrap(&t, &s, false, NULL, NULL), EMB_ERR_NULL,
                   "out must not be NULL");
    assert_int_equal(log.calls, 0);
    /* a [2, 3] view without data */
    emb_tensor nodata = t;
    nodata.data = NULL;
    expect_wrap_error(&nodata, NULL, EMB_ERR_NULL, "weights has 6 elements but its data is NULL",
                      NULL, 0);
}

static void test_wrap_bad_tensor(void **state) {
    (void)state;
    float w[24];
    fill_table(w, 24);
    emb_tensor t3 = emb_test_view(EMB_FLOAT32, w, 3, SHP(2, 3, 4));
    expect_wrap_error(&t3, NULL, EMB_ERR_SHAPE,
                      "Embeddings parameter is expected to be 2-dimensional, got 3 dimensions", w,
                      24);
    emb_tensor t1 = emb_test_view(EMB_FLOAT32, w, 1, SHP(24));
    expect_wrap_error(&t1, NULL, EMB_ERR_SHAPE,
                      "Embeddings parameter is expected to be 2-dimensional, got 1 dimensions", w,
                      24);
    int64_t iw[6] = {1, 2, 3, 4, 5, 6};
    emb_tensor ti = emb_test_view(EMB_INT64, iw, 2, SHP(2, 3));
    expect_wrap_error(&ti, NULL, EMB_ERR_DTYPE, "weights must be float32, got int64", NULL, 0);
    emb_tensor empty_rows = emb_test_view(EMB_FLOAT32, w, 2, SHP(0, 3));
    expect_wrap_error(&empty_rows, NULL, EMB_ERR_INVALID, "num_embeddings must be at least 1", w,
                      24);
    emb_tensor empty_cols = emb_test_view(EMB_FLOAT32, w, 2, SHP(4, 0));
    expect_wrap_error(&empty_cols, NULL, EMB_ERR_INVALID, "embedding_dim must be at least 1", w,
                      24);
    emb_tensor neg = view2(w, 4, 6);
    neg.shape[0] = -1;
    expect_wrap_error(&neg, NULL, EMB_ERR_SHAPE, "negative", w, 24);
}

static void test_wrap_bad_options(void **state) {
    (void)state;
    float w[12];
    fill_table(w, 12);
    emb_tensor t = view2(w, 4, 3);
    emb_embedding_options o = emb_embedding_options_default();
    o.padding_idx = 4;
    expect_wrap_error(&t, &o, EMB_ERR_INVALID,
                      "Padding_idx must be within num_embeddings: got padding_idx=4, valid: "
                      "[-4, 4)",
                      w, 12);
    o.padding_idx = -5;
    expect_wrap_error(&t, &o, EMB_ERR_INVALID, "got padding_idx=-5", w, 12);
    o = emb_embedding_options_default();
    o.max_norm = 0.0;
    expect_wrap_error(&t, &o, EMB_ERR_INVALID, "max_norm must be > 0", w, 12);
    o.max_norm = NAN;
    expect_wrap_error(&t, &o, EMB_ERR_INVALID, "max_norm must be > 0", w, 12);
    o = emb_embedding_options_default();
    o.norm_type = NAN;
    expect_wrap_error(&t, &o, EMB_ERR_INVALID, "norm_type must not be NaN", w, 12);
}

static void test_wrap_overflow(void **state) {
    (void)state;
    float w[1] = {0};
    emb_tensor t = view2(w, 1, 1);
    t.shape[0] = INT64_MAX / 2;
    t.shape[1] = 4;
    expect_wrap_error(&t, NULL, EMB_ERR_OVERFLOW, "the number of elements of weights overflows", w,
                      1);
    t.shape[0] = INT64_MAX / 8;
    t.shape[1] = 3;
    expect_wrap_error(&t, NULL, EMB_ERR_OVERFLOW, "the byte size of weights overflows", w, 1);
}

static void test_wrap_misaligned(void **state) {
    (void)state;
    alignas(16) unsigned char buf[4 * 12 + 16];
    memset(buf, 0, sizeof buf);
    emb_tensor t = view2((float *)(void *)buf, 4, 3);
    for (int off = 1; off < 4; off++) {
        t.data = buf + off;
        expect_wrap_error(&t, NULL, EMB_ERR_INVALID, "is not aligned to 4 bytes (a float)", NULL,
                          0);
        for (size_t i = 0; i < sizeof buf; i++) assert_int_equal(buf[i], 0);
    }
    /* float alignment is enough: 4 bytes past a 16-byte boundary is accepted */
    t.data = buf + 4;
    emb_embedding *e = NULL;
    EMB_OK_OR_FAIL(emb_embedding_wrap(&t, NULL, false, NULL, &e));
    emb_tensor v;
    EMB_OK_OR_FAIL(emb_embedding_weight_const(e, &v));
    assert_ptr_equal(v.data, buf + 4);
    emb_embedding_free(e);
}

/* ---- ownership -------------------------------------------------------------------------- */

static void test_release_called_once_on_free(void **state) {
    (void)state;
    const int64_t V = 5, D = 3;
    float *w = malloc((size_t)(V * D) * sizeof(float));
    assert_non_null(w);
    fill_table(w, V * D);
    emb_tensor t = view2(w, V, D);
    release_log log = {0, NULL};
    emb_storage s = {.read_only = false, .release = release_free, .release_ctx = &log};
    emb_embedding *e = NULL;
    EMB_OK_OR_FAIL(emb_embedding_wrap(&t, &s, true, NULL, &e));
    assert_non_null(e);
    assert_int_equal(log.calls, 0); /* not before free */
    assert_false(emb_embedding_is_read_only(e));
    assert_false(emb_embedding_requires_grad(e)); /* freeze */
    emb_embedding_free(e);
    assert_int_equal(log.calls, 1);
    assert_ptr_equal(log.data, w); /* freed by release_free; ASan reports a double free */
}

static void test_release_read_only_ctx(void **state) {
    (void)state;
    float w[8];
    fill_table(w, 8);
    emb_tensor t = view2(w, 2, 4);
    release_log log = {0, NULL};
    emb_storage s = {.read_only = true, .release = release_counter, .release_ctx = &log};
    emb_embedding *e = NULL;
    EMB_OK_OR_FAIL(emb_embedding_wrap(&t, &s, false, NULL, &e));
    assert_true(emb_embedding_is_read_only(e));
    assert_true(emb_embedding_requires_grad(e));
    emb_embedding_free(e);
    assert_int_equal(log.calls, 1);
    assert_ptr_equal(log.data, w);
}

static void test_borrowed_outlives_handle(void **state) {
    (void)state;
    const int64_t V = 4, D = 2;
    float *w = malloc((size_t)(V * D) * sizeof(float));
    assert_non_null(w);
    fill_table(w, V * D);
    emb_tensor t = view2(w, V, D);
    emb_embedding *e = NULL;
    EMB_OK_OR_FAIL(emb_embedding_wrap(&t, NULL, false, NULL, &e));
    emb_embedding_free(e);
    /* still the caller's: readable and writable after free (ASan would flag a free) */
    w[0] = 7.0f;
    assert_true(w[V * D - 1] == 0.25f * (float)(V * D - 1) - 3.0f);
    free(w);
}

/* ---- sharing -------------------------------------------------------------------------- */

static void test_borrowed_shares_storage(void **state) {
    (void)state;
    const int64_t V = 6, D = 4;
    float w[24];
    fill_table(w, V * D);
    emb_tensor t = view2(w, V, D);
    emb_embedding_options o = emb_embedding_options_default();
    o.padding_idx = 2;
    emb_embedding *e = NULL;
    EMB_OK_OR_FAIL(emb_embedding_wrap(&t, NULL, false, &o, &e));
    assert_int_equal(emb_embedding_num_embeddings(e), V);
    assert_int_equal(emb_embedding_embedding_dim(e), D);
    assert_int_equal(emb_embedding_padding_idx(e), 2);
    /* the padding row is not zeroed, as from_pretrained */
    assert_true(w[2 * D] == 0.25f * (float)(2 * D) - 3.0f);

    emb_tensor v, vc;
    EMB_OK_OR_FAIL(emb_embedding_weight(e, &v));
    EMB_OK_OR_FAIL(emb_embedding_weight_const(e, &vc));
    assert_ptr_equal(v.data, w);
    assert_ptr_equal(vc.data, w);
    assert_int_equal(v.ndim, 2);
    assert_int_equal(v.shape[0], V);
    assert_int_equal(v.shape[1], D);
    assert_int_equal(vc.shape[0], V);
    assert_int_equal(vc.shape[1], D);

    /* the caller writes, the lookup sees it */
    int64_t ids[2] = {5, 1};
    emb_tensor idx = emb_test_view(EMB_INT64, ids, 1, SHP(2));
    float out[8];
    emb_tensor ov = emb_test_view(EMB_FLOAT32, out, 2, SHP(2, D));
    w[5 * D + 3] = 42.5f;
    EMB_OK_OR_FAIL(emb_embedding_forward(e, &idx, &ov));
    assert_true(out[3] == 42.5f);
    assert_true(out[D] == w[D]);
    /* the handle writes, the caller sees it */
    ((float *)v.data)[1 * D] = -9.0f;
    assert_true(w[D] == -9.0f);
    EMB_OK_OR_FAIL(emb_embedding_forward(e, &idx, &ov));
    assert_true(out[D] == -9.0f);
    emb_embedding_free(e);
    assert_true(w[D] == -9.0f); /* borrowed memory is left as it is */
}

static void test_borrowed_renorm_writes_caller_buffer(void **state) {
    (void)state;
    const int64_t V = 5, D = 3;
    float w[15], copy[15];
    fill_table(w, V * D);
    memcpy(copy, w, sizeof w);
    emb_tensor t = view2(w, V, D), tc = view2(copy, V, D);
    emb_embedding_options o = emb_embedding_options_default();
    o.max_norm = 0.5; /* rows 0 (norm 4.8) and 4 (norm 0.56) exceed it */
    emb_embedding *shared = NULL, *owned = NULL;
    EMB_OK_OR_FAIL(emb_embedding_wrap(&t, NULL, false, &o, &shared));
    EMB_OK_OR_FAIL(emb_embedding_from_pretrained(&tc, false, &o, &owned));
    int64_t ids[3] = {0, 4, 0};
    emb_tensor idx = emb_test_view(EMB_INT64, ids, 1, SHP(3));
    float out_s[9], out_o[9];
    emb_tensor os = emb_test_view(EMB_FLOAT32, out_s, 2, SHP(3, D));
    emb_tensor oo = emb_test_view(EMB_FLOAT32, out_o, 2, SHP(3, D));
    EMB_OK_OR_FAIL(emb_embedding_forward(shared, &idx, &os));
    EMB_OK_OR_FAIL(emb_embedding_forward(owned, &idx, &oo));
    EMB_ASSERT_EXACT(out_s, out_o, 9, "lookup of the shared and of the copied table");
    /* the renorm wrote rows 0 and 4 of the caller's buffer, exactly as in the copy... */
    emb_tensor vo;
    EMB_OK_OR_FAIL(emb_embedding_weight_const(owned, &vo));
    EMB_ASSERT_EXACT(w, vo.data, V * D, "caller's buffer after renorm");
    assert_true(w[0] != copy[0]);
    assert_true(w[4 * D + 1] != copy[4 * D + 1]);
    EMB_ASSERT_EXACT(w + D, copy + D, 3 * D, "rows 1-3, not looked up");
    /* ...and left the from_pretrained source alone */
    float fresh[15];
    fill_table(fresh, V * D);
    EMB_ASSERT_EXACT(copy, fresh, V * D, "from_pretrained's source");
    emb_embedding_free(shared);
    emb_embedding_free(owned);
}

/* ---- read-only -------------------------------------------------------------------------- */

static void test_read_only_lookup_and_refusals(void **state) {
    (void)state;
    const int64_t V = 6, D = 4;
    float w[24], before[24];
    fill_table(w, V * D);
    memcpy(before, w, sizeof w);
    emb_tensor t = view2(w, V, D);
    emb_storage s = {.read_only = true};
    emb_embedding_options o = emb_embedding_options_default();
    o.max_norm = 1.0;
    emb_embedding *e = NULL, *plain = NULL;
    EMB_OK_OR_FAIL(emb_embedding_wrap(&t, &s, false, &o, &e));
    EMB_OK_OR_FAIL(emb_embedding_wrap(&t, &s, false, NULL, &plain));
    assert_true(emb_embedding_is_read_only(e));
    assert_false(emb_embedding_is_read_only(NULL));

    int64_t ids[3] = {1, 5, 1};
    emb_tensor idx = emb_test_view(EMB_INT64, ids, 1, SHP(3));
    float out[12];
    emb_tensor ov = emb_test_view(EMB_FLOAT32, out, 2, SHP(3, D));

    /* forward with max_norm: refused, weight and out unchanged */
    emb_test_fill(out, 12, -1.5f);
    EMB_EXPECT_ERR(emb_embedding_forward(e, &idx, &ov), EMB_ERR_READ_ONLY,
                   "embedding forward with max_norm=1 would renormalise rows of a read-only "
                   "weight");
    emb_test_assert_all(out, 12, -1.5f, "out");
    EMB_ASSERT_EXACT(w, before, V * D, "read-only weight");
    /* also for an empty batch: the refusal depends on the table, not on the data */
    emb_tensor none = emb_test_view(EMB_INT64, ids, 1, SHP(0));
    float nothing[1] = {-1.5f};
    emb_tensor onone = emb_test_view(EMB_FLOAT32, nothing, 2, SHP(0, D));
    EMB_EXPECT_ERR(emb_embedding_forward(e, &none, &onone), EMB_ERR_READ_ONLY, "read-only");
    /* argument errors still come first */
    int64_t bad[1] = {6};
    emb_tensor bidx = emb_test_view(EMB_INT64, bad, 1, SHP(1));
    float bout[4];
    emb_tensor bov = emb_test_view(EMB_FLOAT32, bout, 2, SHP(1, D));
    EMB_EXPECT_ERR(emb_embedding_forward(e, &bidx, &bov), EMB_ERR_INDEX, "index 6 at position 0");

    /* the writable accessor: refused, view untouched */
    emb_tensor v;
    memset(&v, 0xab, sizeof v);
    emb_tensor vcopy = v;
    EMB_EXPECT_ERR(emb_embedding_weight(e, &v), EMB_ERR_READ_ONLY,
                   "emb_embedding_weight: the embedding's weight is read-only");
    assert_memory_equal(&v, &vcopy, sizeof v);

    /* the read-only accessor and a lookup without max_norm work */
    EMB_OK_OR_FAIL(emb_embedding_weight_const(e, &v));
    assert_ptr_equal(v.data, w);
    EMB_OK_OR_FAIL(emb_embedding_forward(plain, &idx, &ov));
    EMB_ASSERT_EXACT(out, w + 1 * D, D, "row 1");
    EMB_ASSERT_EXACT(out + D, w + 5 * D, D, "row 5");
    EMB_ASSERT_EXACT(out + 2 * D, w + 1 * D, D, "row 1 again");
    EMB_OK_OR_FAIL(emb_embedding_lookup(&v, &idx, &ov));
    EMB_ASSERT_EXACT(out + D, w + 5 * D, D, "row 5 through emb_embedding_lookup");

    /* backward only writes the gradient: allowed */
    float go[12], gw[24];
    emb_test_fill(go, 12, 1.0f);
    emb_test_fill(gw, 24, 0.0f);
    emb_tensor gov = emb_test_view(EMB_FLOAT32, go, 2, SHP(3, D));
    emb_tensor gwv = view2(gw, V, D);
    EMB_OK_OR_FAIL(emb_embedding_backward(e, &idx, &gov, &gwv));
    assert_true(gw[1 * D] == 2.0f && gw[5 * D] == 1.0f && gw[0] == 0.0f);
    emb_sparse_grad g;
    EMB_OK_OR_FAIL(emb_sparse_grad_init(&g, V, D));
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &idx, &gov, &g));
    assert_int_equal(g.nnz, 3);
    emb_sparse_grad_release(&g);

    EMB_ASSERT_EXACT(w, before, V * D, "read-only weight at the end");
    emb_embedding_free(e);
    emb_embedding_free(plain);
}

static void test_weight_const_errors(void **state) {
    (void)state;
    float w[4] = {1, 2, 3, 4};
    emb_tensor t = view2(w, 2, 2);
    emb_embedding *e = NULL;
    EMB_OK_OR_FAIL(emb_embedding_wrap(&t, NULL, false, NULL, &e));
    emb_tensor v;
    memset(&v, 0xcd, sizeof v);
    emb_tensor vcopy = v;
    EMB_EXPECT_ERR(emb_embedding_weight_const(NULL, &v), EMB_ERR_NULL,
                   "embedding must not be NULL");
    assert_memory_equal(&v, &vcopy, sizeof v);
    EMB_EXPECT_ERR(emb_embedding_weight_const(e, NULL), EMB_ERR_NULL, "view must not be NULL");
    emb_embedding_free(e);
}

/* ---- a real read-only mapping ------------------------------------------------------------ */

typedef struct mapping {
    size_t bytes;
    int unmapped;
} mapping;

static void release_munmap(void *data, void *ctx) {
    mapping *m = ctx;
    if (munmap(data, m->bytes) == 0) m->unmapped++;
}

static void test_read_only_file_mapping(void **state) {
    (void)state;
    const int64_t V = 1000, D = 16;
    const size_t bytes = (size_t)(V * D) * sizeof(float);
    float *src = malloc(bytes);
    assert_non_null(src);
    fill_table(src, V * D);
    char path[] = "/tmp/emb_test_storage_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    assert_int_equal(write(fd, src, bytes), (ssize_t)bytes);
    float *map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    assert_true(map != MAP_FAILED);

    mapping m = {bytes, 0};
    emb_storage s = {.read_only = true, .release = release_munmap, .release_ctx = &m};
    emb_embedding_options o = emb_embedding_options_default();
    o.max_norm = 2.0;
    emb_tensor t = view2(map, V, D);
    emb_embedding *e = NULL;
    EMB_OK_OR_FAIL(emb_embedding_wrap(&t, &s, true, &o, &e));

    int64_t ids[4] = {999, 0, 500, 999};
    emb_tensor idx = emb_test_view(EMB_INT64, ids, 1, SHP(4));
    float out[64];
    emb_tensor ov = emb_test_view(EMB_FLOAT32, out, 2, SHP(4, D));
    emb_test_fill(out, 64, 3.0f);
    /* every row here has a norm above 2: a renorm would write the mapping and fault */
    EMB_EXPECT_ERR(emb_embedding_forward(e, &idx, &ov), EMB_ERR_READ_ONLY, "read-only");
    emb_test_assert_all(out, 64, 3.0f, "out");
    emb_tensor v;
    EMB_EXPECT_ERR(emb_embedding_weight(e, &v), EMB_ERR_READ_ONLY, "read-only");
    /* lookups of the mapped rows */
    EMB_OK_OR_FAIL(emb_embedding_weight_const(e, &v));
    assert_ptr_equal(v.data, map);
    EMB_OK_OR_FAIL(emb_embedding_lookup(&v, &idx, &ov));
    for (int k = 0; k < 4; k++) EMB_ASSERT_EXACT(out + k * D, src + ids[k] * D, D, "mapped row");
    EMB_ASSERT_EXACT(map, src, V * D, "mapping");

    emb_embedding_free(e);
    assert_int_equal(m.unmapped, 1);
    free(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrap_null_arguments),
        cmocka_unit_test(test_wrap_bad_tensor),
        cmocka_unit_test(test_wrap_bad_options),
        cmocka_unit_test(test_wrap_overflow),
        cmocka_unit_test(test_wrap_misaligned),
        cmocka_unit_test(test_release_called_once_on_free),
        cmocka_unit_test(test_release_read_only_ctx),
        cmocka_unit_test(test_borrowed_outlives_handle),
        cmocka_unit_test(test_borrowed_shares_storage),
        cmocka_unit_test(test_borrowed_renorm_writes_caller_buffer),
        cmocka_unit_test(test_read_only_lookup_and_refusals),
        cmocka_unit_test(test_weight_const_errors),
        cmocka_unit_test(test_read_only_file_mapping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
