/* Unit tests of the lookup kernel's software prefetch: emb__lookup_rows_i64/_i32 give the
 * plain row copies for every prefetch distance and range, and the forward over a table
 * large enough to take the prefetch path (64-wide rows) is the same at 1 and 2 threads. */
#include "emb_test.h"
#include "kernels/lookup.h"

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

static void test_prefetch_distances(void **state) {
    (void)state;
    static const int64_t dims[] = {1, 3, 4, 16, 64, 65, 128, 300};
    static const int dists[] = {0, 1, 8, 16, 1000};
    uint64_t s = 7;
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        const int64_t V = 97, D = dims[k], N = 203;
        float *w = malloc(sizeof(float) * (size_t)(V * D));
        float *ref = malloc(sizeof(float) * (size_t)(N * D));
        float *out = malloc(sizeof(float) * (size_t)(N * D));
        int64_t *i64 = malloc(sizeof(int64_t) * (size_t)N);
        int32_t *i32 = malloc(sizeof(int32_t) * (size_t)N);
        assert_true(w && ref && out && i64 && i32);
        for (int64_t i = 0; i < V * D; i++) w[i] = (float)lcg(&s) / 7.0f - 1e6f;
        for (int64_t i = 0; i < N; i++) i32[i] = (int32_t)(i64[i] = (int64_t)(lcg(&s) % V));
        for (int64_t i = 0; i < N; i++)
            memcpy(ref + i * D, w + i64[i] * D, sizeof(float) * (size_t)D);
        for (size_t d = 0; d < sizeof dists / sizeof dists[0]; d++) {
            /* whole range, and a middle range whose prefetches reach past its end */
            static const int64_t ranges[][2] = {{0, 203}, {5, 17}, {200, 203}, {7, 7}};
            for (int r = 0; r < 4; r++) {
                const int64_t b = ranges[r][0], e = ranges[r][1];
                for (int it = 0; it < 2; it++) {
                    memset(out, 0xab, sizeof(float) * (size_t)(N * D));
                    if (it == 0)
                        emb__lookup_rows_i64(out, w, D, i64, b, e, dists[d]);
                    else
                        emb__lookup_rows_i32(out, w, D, i32, b, e, dists[d]);
                    if (e > b)
                        assert_memory_equal(out + b * D, ref + b * D,
                                            sizeof(float) * (size_t)((e - b) * D));
                    /* nothing outside [b, e) is written */
                    for (int64_t i = 0; i < b * D; i++)
                        assert_int_equal(((uint32_t *)out)[i], 0xabababab);
                    for (int64_t i = e * D; i < N * D; i++)
                        assert_int_equal(((uint32_t *)out)[i], 0xabababab);
                }
            }
        }
        free(w);
        free(ref);
        free(out);
        free(i64);
        free(i32);
    }
}

/* A 6 MiB table of 64-wide rows (above the prefetch threshold of the forward): the forward
 * is the plain row copies at 1 and 2 threads, for int64 and int32 indices. */
static void test_forward_prefetch_path(void **state) {
    (void)state;
    const int64_t V = 24576, D = 64, N = 70000;
    emb_embedding *e;
    assert_int_equal(emb_embedding_create(V, D, NULL, &e), EMB_OK);
    emb_tensor w, idx, idx32, out;
    assert_int_equal(emb_embedding_weight(e, &w), EMB_OK);
    assert_int_equal(emb_tensor_alloc(&idx, EMB_INT64, 1, (int64_t[]){N}), EMB_OK);
    assert_int_equal(emb_tensor_alloc(&idx32, EMB_INT32, 1, (int64_t[]){N}), EMB_OK);
    assert_int_equal(emb_tensor_alloc(&out, EMB_FLOAT32, 2, (int64_t[]){N, D}), EMB_OK);
    uint64_t s = 99;
    for (int64_t i = 0; i < N; i++) {
        ((int64_t *)idx.data)[i] = (int64_t)(lcg(&s) % (uint64_t)V);
        ((int32_t *)idx32.data)[i] = (int32_t)((int64_t *)idx.data)[i];
    }
    const int saved = emb_get_num_threads();
    for (int t = 1; t <= 2; t++)
        for (int it = 0; it < 2; it++) {
            emb_set_num_threads(t);
            memset(out.data, 0xff, emb_tensor_nbytes(&out));
            assert_int_equal(emb_embedding_forward(e, it ? &idx32 : &idx, &out), EMB_OK);
            for (int64_t i = 0; i < N; i++)
                assert_memory_equal((const float *)out.data + i * D,
                                    (const float *)w.data + ((int64_t *)idx.data)[i] * D,
                                    sizeof(float) * (size_t)D);
        }
    emb_set_num_threads(saved);
    emb_tensor_release(&idx);
    emb_tensor_release(&idx32);
    emb_tensor_release(&out);
    emb_embedding_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefetch_distances),
        cmocka_unit_test(test_forward_prefetch_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
