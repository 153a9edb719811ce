/* Unit tests of src/core: status codes, messages, dtypes, tensor views. */
#include "emb_test.h"
#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static void test_status_strings(void **state) {
    (void)state;
    assert_string_equal(emb_status_str(EMB_OK), "ok");
    assert_string_equal(emb_status_str(EMB_ERR_INDEX), "index out of range");
    assert_string_equal(emb_status_str(EMB_ERR_FORMAT), "malformed input");
    assert_string_equal(emb_status_str(12345), "unknown status");
    /* pinned values */
    assert_int_equal(EMB_ERR_INVALID, -1);
    assert_int_equal(EMB_ERR_NULL, -2);
    assert_int_equal(EMB_ERR_NOMEM, -3);
    assert_int_equal(EMB_ERR_INDEX, -4);
    assert_int_equal(EMB_ERR_DTYPE, -5);
    assert_int_equal(EMB_ERR_SHAPE, -6);
    assert_int_equal(EMB_ERR_OVERFLOW, -7);
    assert_int_equal(EMB_ERR_UNSUPPORTED, -8);
    assert_int_equal(EMB_ERR_STATE, -9);
    assert_int_equal(EMB_ERR_IO, -10);
    assert_int_equal(EMB_ERR_FORMAT, -11);
}

static void test_version(void **state) {
    (void)state;
    assert_string_equal(emb_version(), EMB_VERSION_STRING);
    assert_int_equal(emb_version_number(), EMB_VERSION_NUMBER);
}

static void test_dtypes(void **state) {
    (void)state;
    assert_int_equal(emb_dtype_nbytes(EMB_FLOAT32), 4);
    assert_int_equal(emb_dtype_nbytes(EMB_INT64), 8);
    assert_int_equal(emb_dtype_nbytes(EMB_INT32), 4);
    assert_int_equal(emb_dtype_nbytes(EMB_BFLOAT16), 2);
    assert_int_equal(emb_dtype_nbytes((emb_dtype)99), 0);
    assert_string_equal(emb_dtype_name(EMB_INT32), "int32");
    assert_string_equal(emb_dtype_name((emb_dtype)99), "unknown");
    assert_string_equal(emb__dtype_torch_type(EMB_FLOAT32), "torch.FloatTensor");
    assert_string_equal(emb__dtype_torch_type(EMB_INT64), "torch.LongTensor");
}

static void test_tensor_init(void **state) {
    (void)state;
    float buf[6] = {0};
    emb_tensor t;
    int64_t shape[2] = {2, 3};
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, buf, 2, shape));
    assert_int_equal(emb_tensor_numel(&t), 6);
    assert_int_equal(emb_tensor_nbytes(&t), 24);
    assert_ptr_equal(t.data, buf);
    /* 0-d tensor holds one element */
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_INT64, buf, 0, NULL));
    assert_int_equal(emb_tensor_numel(&t), 1);
    /* empty tensors may have NULL data */
    int64_t empty[2] = {0, 3};
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, NULL, 2, empty));
    assert_int_equal(emb_tensor_numel(&t), 0);
}

static void test_tensor_init_errors(void **state) {
    (void)state;
    float buf[4];
    emb_tensor t, before;
    int64_t shape[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    memset(&t, 0x5a, sizeof t);
    before = t;
    EMB_EXPECT_ERR(emb_tensor_init(NULL, EMB_FLOAT32, buf, 1, shape), EMB_ERR_NULL,
                   "must not be NULL");
    EMB_EXPECT_ERR(emb_tensor_init(&t, EMB_FLOAT32, buf, 10, shape), EMB_ERR_SHAPE,
                   "has 10 dimensions; emb tensors have 0 to 9");
    EMB_EXPECT_ERR(emb_tensor_init(&t, EMB_FLOAT32, buf, -1, shape), EMB_ERR_SHAPE,
                   "has -1 dimensions");
    int64_t neg[2] = {2, -3};
    EMB_EXPECT_ERR(emb_tensor_init(&t, EMB_FLOAT32, buf, 2, neg), EMB_ERR_SHAPE,
                   "negative dimension -3 at dim 1");
    EMB_EXPECT_ERR(emb_tensor_init(&t, (emb_dtype)42, buf, 1, shape), EMB_ERR_DTYPE,
                   "unknown dtype (42)");
    int64_t big[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
    EMB_EXPECT_ERR(emb_tensor_init(&t, EMB_FLOAT32, buf, 2, big), EMB_ERR_OVERFLOW, "overflows");
    int64_t big2[1] = {INT64_C(1) << 62};
    EMB_EXPECT_ERR(emb_tensor_init(&t, EMB_FLOAT32, buf, 1, big2), EMB_ERR_OVERFLOW, "byte size");
    EMB_EXPECT_ERR(emb_tensor_init(&t, EMB_FLOAT32, NULL, 1, shape), EMB_ERR_NULL,
                   "data of a non-empty tensor");
    EMB_EXPECT_ERR(emb_tensor_init(&t, EMB_FLOAT32, buf, 2, NULL), EMB_ERR_NULL, "shape");
    /* nothing changed */
    assert_memory_equal(&t, &before, sizeof t);
}

static void test_tensor_alloc(void **state) {
    (void)state;
    emb_tensor t;
    int64_t shape[3] = {3, 5, 7};
    EMB_OK_OR_FAIL(emb_tensor_alloc(&t, EMB_FLOAT32, 3, shape));
    assert_non_null(t.data);
    assert_int_equal((uintptr_t)t.data % 64, 0);
    const float *p = t.data;
    for (int i = 0; i < 105; i++) assert_true(p[i] == 0.0f);
    emb_tensor_release(&t);
    assert_null(t.data);
    emb_tensor_release(NULL);
    int64_t big[1] = {INT64_C(1) << 61};
    EMB_EXPECT_ERR(emb_tensor_alloc(&t, EMB_INT64, 1, big), EMB_ERR_OVERFLOW, "overflows");
}

static void test_tensor_check(void **state) {
    (void)state;
    emb_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = EMB_FLOAT32;
    t.ndim = 1;
    t.shape[0] = 4;
    EMB_EXPECT_ERR(emb_tensor_check(&t, "weights"), EMB_ERR_NULL,
                   "weights has 4 elements but its data is NULL");
    EMB_EXPECT_ERR(emb_tensor_check(NULL, "weights"), EMB_ERR_NULL, "weights must not be NULL");
    t.ndim = 12;
    EMB_EXPECT_ERR(emb_tensor_check(&t, "weights"), EMB_ERR_SHAPE, "weights has 12 dimensions");
}

/* numel, nbytes and same_shape on structs filled by hand with invalid shapes: no
 * overflow, no read past shape[EMB_MAX_DIMS). */
static void test_numel_invalid(void **state) {
    (void)state;
    emb_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = EMB_FLOAT64;
    assert_int_equal(emb_tensor_numel(&t), 1); /* 0-d */
    assert_int_equal(emb_tensor_nbytes(&t), 8);
    t.ndim = 3;
    t.shape[0] = 0;
    t.shape[1] = INT64_MAX;
    t.shape[2] = 2;
    assert_int_equal(emb_tensor_numel(&t), 0);
    assert_int_equal(emb_tensor_nbytes(&t), 0);
    t.shape[0] = 3; /* a zero after an overflowing prefix: still empty */
    t.shape[1] = INT64_MAX;
    t.shape[2] = 0;
    assert_int_equal(emb_tensor_numel(&t), 0);
    emb_tensor v;
    EMB_OK_OR_FAIL(emb_tensor_init(&v, EMB_FLOAT32, NULL, 3, t.shape));
    EMB_OK_OR_FAIL(emb_tensor_check(&v, "empty"));
    t.shape[2] = 2; /* 3 * INT64_MAX overflows */
    assert_int_equal(emb_tensor_numel(&t), -1);
    assert_int_equal(emb_tensor_nbytes(&t), 0);
    t.shape[0] = INT64_C(1) << 61; /* numel fits, bytes (* 8) do not fit in int64 */
    t.shape[1] = 1;
    t.shape[2] = 1;
    assert_int_equal(emb_tensor_numel(&t), INT64_C(1) << 61);
    t.dtype = EMB_INT16; /* 2^62 bytes */
    if (sizeof(size_t) == 8) assert_true(emb_tensor_nbytes(&t) == (size_t)1 << 62);
    t.dtype = EMB_FLOAT64; /* 2^64 bytes: does not fit */
    if (sizeof(size_t) == 8) assert_int_equal(emb_tensor_nbytes(&t), 0);
    t.shape[1] = -1;
    assert_int_equal(emb_tensor_numel(&t), -1);
    assert_int_equal(emb_tensor_nbytes(&t), 0);
    t.shape[1] = 1;
    t.ndim = EMB_MAX_DIMS + 1;
    assert_int_equal(emb_tensor_numel(&t), -1);
    t.ndim = -1;
    assert_int_equal(emb_tensor_numel(&t), -1);
    assert_int_equal(emb_tensor_numel(NULL), -1);
    assert_int_equal(emb_tensor_nbytes(NULL), 0);
    t.ndim = 1;
    t.dtype = (emb_dtype)77;
    assert_int_equal(emb_tensor_nbytes(&t), 0);

    emb_tensor a = t, b = t;
    a.ndim = b.ndim = EMB_MAX_DIMS + 1;
    assert_false(emb__tensor_same_shape(&a, &b));
    a.ndim = b.ndim = -1;
    assert_false(emb__tensor_same_shape(&a, &b));
    a.ndim = b.ndim = 1;
    assert_true(emb__tensor_same_shape(&a, &b));
    assert_false(emb__tensor_same_shape(&a, NULL));
    assert_false(emb__tensor_same_shape(NULL, &b));
}

static void test_shape_str(void **state) {
    (void)state;
    char buf[64];
    int64_t shape[3] = {1, 25, 10};
    size_t n = emb_shape_repr(3, shape, buf, sizeof buf);
    assert_string_equal(buf, "torch.Size([1, 25, 10])");
    assert_int_equal(n, strlen("torch.Size([1, 25, 10])"));
    emb_shape_repr(0, NULL, buf, sizeof buf);
    assert_string_equal(buf, "torch.Size([])");
    emb_shape_repr(3, NULL, buf, sizeof buf); /* no shape to read */
    assert_string_equal(buf, "torch.Size([])");
    /* truncation is NUL-terminated and reports the full length */
    n = emb_shape_repr(3, shape, buf, 8);
    assert_int_equal(n, 23);
    assert_int_equal(strlen(buf), 7);
}

static void *other_thread(void *arg) {
    (void)arg;
    /* a fresh thread has no message, and its failure does not leak to the main thread */
    const char *m = emb_errmsg();
    int clean = m[0] == '\0';
    emb_tensor_init(NULL, EMB_FLOAT32, NULL, 0, NULL);
    return clean ? (void *)1 : NULL;
}

static void test_errmsg_per_thread(void **state) {
    (void)state;
    emb_tensor t;
    int64_t neg[1] = {-1};
    emb_tensor_init(&t, EMB_FLOAT32, NULL, 1, neg);
    char mine[256];
    snprintf(mine, sizeof mine, "%s", emb_errmsg());
    assert_non_null(strstr(mine, "negative dimension -1"));
    pthread_t th;
    void *ret = NULL;
    assert_int_equal(pthread_create(&th, NULL, other_thread, NULL), 0);
    pthread_join(th, &ret);
    assert_ptr_equal(ret, (void *)1);
    assert_string_equal(emb_errmsg(), mine);
    emb_clear_error();
    assert_string_equal(emb_errmsg(), "");
}

static void test_threads_and_kernels(void **state) {
    (void)state;
    emb_set_num_threads(3);
    assert_int_equal(emb_get_num_threads(), 3);
    emb_set_num_threads(0);
    assert_true(emb_get_num_threads() >= 1);
    emb_set_kernel_mode(EMB_KERNELS_REF);
    assert_int_equal(emb_get_kernel_mode(), EMB_KERNELS_REF);
    emb_set_kernel_mode(EMB_KERNELS_AUTO);
    assert_int_equal(emb_get_kernel_mode(), EMB_KERNELS_AUTO);
}

/* 1 when the mapping that holds p carries the huge-page advice ("hg" in its VmFlags in
 * /proc/self/smaps), 0 when it does not, -1 when no mapping holds p. */
static int hugepage_advised(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[512];
    int inside = 0, found = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        } else if (inside && !strncmp(line, "VmFlags:", 8)) {
            found = strstr(line, " hg") != NULL;
            break;
        }
    }
    fclose(f);
    return found;
}

/* emb__malloc advises transparent huge pages for allocations of 2 MiB and more (random row
 * access to tables), not for smaller ones; a large embedding table gets the advice
 * and its lookups are the plain row copies at 1 and 2 threads. */
static void test_malloc_hugepages(void **state) {
    (void)state;
#if defined(__linux__)
    const size_t big = (size_t)64 << 20;
    char *p = emb__malloc(big);
    assert_non_null(p);
    assert_int_equal(hugepage_advised(p + big / 2), 1);
    memset(p, 7, big);
    assert_int_equal(p[0], 7);
    assert_int_equal(p[big - 1], 7);
    emb__free(p);
    char *q = emb__malloc((size_t)1 << 20);
    assert_non_null(q);
    assert_int_equal(hugepage_advised(q), 0);
    emb__free(q);
    /* a word2vec table of State of the Union (11,710 x 100 floats): aligned to 2 MiB and
     * advised, and the bytes past it are not */
    const size_t w2v = (size_t)11710 * 100 * sizeof(float);
    char *tab = emb__malloc(w2v);
    assert_non_null(tab);
    assert_int_equal((uintptr_t)tab % ((uintptr_t)2 << 20), 0);
    assert_int_equal(hugepage_advised(tab), 1);
    assert_int_equal(hugepage_advised(tab + w2v / 2), 1);
    assert_true(hugepage_advised(tab + w2v + 8192) != 1); /* the padding to 6 MiB is left */
    memset(tab, 1, w2v);
    emb__free(tab);
    assert_false(emb__advise_hugepages(NULL, big));
    size_t small = big;
    assert_false(emb__advise_hugepages(&small, sizeof small));

    const int64_t V = 16384, D = 1024, N = 3000; /* a 64 MiB table */
    emb_embedding *e;
    assert_int_equal(emb_embedding_create(V, D, NULL, &e), EMB_OK);
    emb_tensor w, idx, out;
    assert_int_equal(emb_embedding_weight(e, &w), EMB_OK);
    assert_int_equal(hugepage_advised((const char *)w.data + (size_t)V * D * 2), 1);
    assert_int_equal(emb_tensor_alloc(&idx, EMB_INT64, 1, (int64_t[]){N}), EMB_OK);
    assert_int_equal(emb_tensor_alloc(&out, EMB_FLOAT32, 2, (int64_t[]){N, D}), EMB_OK);
    int64_t *ix = idx.data;
    uint64_t s = 12345;
    for (int64_t i = 0; i < N; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        ix[i] = (int64_t)((s >> 33) % (uint64_t)V);
    }
    const int saved = emb_get_num_threads();
    for (int t = 1; t <= 2; t++) {
        emb_set_num_threads(t);
        memset(out.data, 0xff, emb_tensor_nbytes(&out));
        assert_int_equal(emb_embedding_forward(e, &idx, &out), EMB_OK);
        for (int64_t i = 0; i < N; i++)
            assert_memory_equal((const float *)out.data + i * D, (const float *)w.data + ix[i] * D,
                                (size_t)D * sizeof(float));
    }
    emb_set_num_threads(saved);
    emb_tensor_release(&idx);
    emb_tensor_release(&out);
    emb_embedding_free(e);
#endif
}

/* The one overlap check (src/core/tensor.c) over ranges that end at the top of the address
 * space: an end computed as start + size would wrap to 0 there. */
static void test_overlap_at_the_top(void **state) {
    (void)state;
    void *top16 = (void *)(UINTPTR_MAX - 15), *top8 = (void *)(UINTPTR_MAX - 7);
    assert_true(emb__overlap(top16, 16, top8, 8));
    assert_true(emb__overlap(top8, 8, top16, 16));
    assert_true(emb__overlap(top16, 16, top16, 16));
    assert_false(emb__overlap(top16, 8, top8, 8)); /* [top-15, top-7) ends where top8 starts */
    assert_false(emb__overlap(top8, 8, (void *)0x1000, 16));
    assert_false(emb__overlap((void *)0x1000, 16, top8, 8));
    assert_false(emb__overlap(top16, 0, top16, 16)); /* empty ranges never overlap */
    assert_false(emb__overlap(NULL, 16, NULL, 16));
    /* tensors: two float32 views ending at the top of the address space */
    int64_t four = 4, two = 2;
    emb_tensor a, b;
    EMB_OK_OR_FAIL(emb_tensor_init(&a, EMB_FLOAT32, top16, 1, &four));
    EMB_OK_OR_FAIL(emb_tensor_init(&b, EMB_FLOAT32, top8, 1, &two));
    assert_true(emb__tensors_overlap(&a, &b));
    assert_true(emb__tensors_overlap(&b, &a));
    /* a huge tensor: from 0x1000, 2^60 float32 elements */
    int64_t huge = INT64_C(1) << 60;
    EMB_OK_OR_FAIL(emb_tensor_init(&a, EMB_FLOAT32, (void *)0x1000, 1, &huge));
    EMB_OK_OR_FAIL(emb_tensor_init(&b, EMB_FLOAT32, (void *)0x2000, 1, &two));
    assert_true(emb__tensors_overlap(&a, &b));
    assert_false(emb__tensors_overlap(&b, NULL));
}

/* The byte codec of the binary formats (src/core/bytes.h): little-endian bytes whatever the
 * host, cursors that stop at the end of their buffer, and 64-bit FNV-1a. */
static void test_byte_codec(void **state) {
    (void)state;
    unsigned char b[16];
    emb__put_u16le(b, 0x0102);
    emb__put_u32le(b + 2, 0x03040506u);
    emb__put_u64le(b + 6, UINT64_C(0x0708090a0b0c0d0e));
    const unsigned char want[14] = {2, 1, 6, 5, 4, 3, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, 9, 8, 7};
    assert_memory_equal(b, want, 14);
    assert_int_equal(emb__get_u16le(b), 0x0102);
    assert_int_equal(emb__get_u32le(b + 2), 0x03040506u);
    assert_true(emb__get_u64le(b + 6) == UINT64_C(0x0708090a0b0c0d0e));
    emb__put_f32le(b, 1.0f); /* 0x3f800000 */
    assert_int_equal(b[0], 0);
    assert_int_equal(b[3], 0x3f);
    assert_true(emb__get_f32le(b) == 1.0f);
    emb__put_f64le(b, -2.5);
    assert_true(emb__get_f64le(b) == -2.5);
    assert_int_equal(b[7], 0xc0);
    const float xs[3] = {1.5f, -0.0f, 3e38f};
    float ys[3];
    unsigned char e[12];
    emb__f32le_encode(e, xs, 3);
    emb__f32le_decode(ys, e, 3);
    assert_memory_equal(xs, ys, sizeof xs);
    assert_true(emb__get_f32le(e + 4) == 0.0f && e[7] == 0x80);

    /* the cursor writes what fits, then nothing */
    memset(b, 0xaa, sizeof b);
    emb__bytes_out o = emb__bytes_out_at(b, 10);
    emb__out_u32(&o, 7);
    emb__out_raw(&o, "xy", 2);
    assert_false(o.bad);
    emb__out_u64(&o, 1); /* 8 bytes, 4 left */
    assert_true(o.bad);
    emb__out_u32(&o, 9); /* fits, but the cursor stays bad */
    assert_int_equal(o.pos, 6);
    assert_int_equal(b[6], 0xaa);
    emb__bytes_in in = emb__bytes_in_at(b, 10);
    assert_int_equal(emb__in_u32(&in), 7);
    char xy[2];
    assert_true(emb__in_raw(&in, xy, 2));
    assert_memory_equal(xy, "xy", 2);
    assert_true(emb__in_u64(&in) == 0 && in.bad); /* past the end: zero */
    assert_int_equal(emb__in_u32(&in), 0);
    assert_true(emb__in_f64(&in) == 0.0);
    assert_false(emb__in_raw(&in, xy, 1));

    /* FNV-1a 64: the published values for "" and "a", and one run equals pieces */
    assert_true(emb__fnv64("", 0) == UINT64_C(0xcbf29ce484222325));
    assert_true(emb__fnv64("a", 1) == UINT64_C(0xaf63dc4c8601ec8c));
    assert_true(emb__fnv64("foobar", 6) == UINT64_C(0x85944171f73967e8));
    assert_true(emb__fnv64_update(emb__fnv64("foo", 3), "bar", 3) == emb__fnv64("foobar", 6));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_malloc_hugepages),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_tensor_init),
        cmocka_unit_test(test_tensor_init_errors),
        cmocka_unit_test(test_tensor_alloc),
        cmocka_unit_test(test_tensor_check),
        cmocka_unit_test(test_numel_invalid),
        cmocka_unit_test(test_shape_str),
        cmocka_unit_test(test_errmsg_per_thread),
        cmocka_unit_test(test_threads_and_kernels),
        cmocka_unit_test(test_overlap_at_the_top),
        cmocka_unit_test(test_byte_codec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
