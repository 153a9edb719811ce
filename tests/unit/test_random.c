/* Unit tests for emb/random.h: reference vectors (bit patterns produced by PyTorch 1.13.1;
 * docs/semantics.md §2), draw
 * counts, the cached normal, state save/restore, and every error path (status, message, and
 * that nothing was drawn or written). */
#include "emb_test.h"

#include <stdlib.h>

static void bits_to_f32(const uint32_t *bits, float *out, int n) {
    for (int i = 0; i < n; i++) memcpy(&out[i], &bits[i], 4);
}

static emb_tensor tensor1d(emb_dtype dt, void *data, int64_t n) {
    emb_tensor t;
    assert_int_equal(emb_tensor_init(&t, dt, data, 1, &n), EMB_OK);
    return t;
}

/* Asserts gen's next draw equals twin's next draw (twin advanced identically so far):
 * the way to check that a failed call drew nothing. Advances both. */
static void assert_same_next(emb_generator *gen, emb_generator *twin) {
    uint32_t a = emb_generator_random(gen), b = emb_generator_random(twin);
    if (a != b) fail_msg("generator advanced: next draw %u, expected %u", a, b);
}

/* Number of engine draws a call made: compares gen with a twin stepped one by one. */
static int64_t draws_between(emb_generator *gen, uint64_t seed, int64_t max) {
    emb_generator *twin;
    EMB_OK_OR_FAIL(emb_generator_create(seed, &twin));
    uint32_t next = emb_generator_random(gen);
    int64_t k = 0;
    for (; k <= max; k++)
        if (emb_generator_random(twin) == next) break;
    emb_generator_free(twin);
    return k;
}

/* Must run first: the default generator before anyone seeds it. */
static void test_default_generator_unseeded(void **state) {
    (void)state;
    emb_generator *def = emb_default_generator();
    assert_non_null(def);
    assert_true(emb_generator_initial_seed(NULL) == EMB_DEFAULT_SEED);
    assert_true(emb_generator_initial_seed(def) == EMB_DEFAULT_SEED);
    emb_generator *twin;
    EMB_OK_OR_FAIL(emb_generator_create(EMB_DEFAULT_SEED, &twin));
    /* The state of the untouched default generator equals a fresh generator's. */
    size_t sz = emb_generator_state_nbytes();
    unsigned char *a = malloc(sz), *b = malloc(sz);
    EMB_OK_OR_FAIL(emb_generator_get_state(NULL, a, sz));
    EMB_OK_OR_FAIL(emb_generator_get_state(twin, b, sz));
    assert_memory_equal(a, b, sz);
    for (int i = 0; i < 2000; i++) assert_same_next(NULL, twin);
    emb_generator_free(twin);
    free(a);
    free(b);
}

/* std::mt19937 with its default seed 5489: the 10000th output is 4123659995 (C++11). */
static void test_mt19937_standard_vector(void **state) {
    (void)state;
    emb_generator *g;
    EMB_OK_OR_FAIL(emb_generator_create(5489, &g));
    uint32_t v = 0;
    for (int i = 0; i < 10000; i++) v = emb_generator_random(g);
    assert_int_equal(v, 4123659995u);
    emb_generator_free(g);
}

static void test_seeding(void **state) {
    (void)state;
    emb_generator *a, *b;
    EMB_OK_OR_FAIL(emb_generator_create(0, &a));
    EMB_OK_OR_FAIL(emb_generator_create(UINT64_C(1) << 32, &b));
    assert_true(emb_generator_initial_seed(b) == (UINT64_C(1) << 32));
    for (int i = 0; i < 1500; i++) assert_same_next(a, b); /* only the low 32 bits seed */
    /* -1 from Python is 2^64-1: same stream as 0xFFFFFFFF, full value kept. */
    emb_generator_seed(a, UINT64_MAX);
    emb_generator_seed(b, 0xFFFFFFFFu);
    assert_true(emb_generator_initial_seed(a) == UINT64_MAX);
    for (int i = 0; i < 700; i++) assert_same_next(a, b);
    /* Reseeding restarts the stream; emb_manual_seed is the default generator's seed. */
    emb_generator_seed(a, 42);
    uint32_t first = emb_generator_random(a);
    emb_generator_seed(a, 42);
    assert_int_equal(emb_generator_random(a), first);
    emb_manual_seed(42);
    assert_true(emb_generator_initial_seed(NULL) == 42);
    assert_int_equal(emb_generator_random(NULL), first);
    emb_generator_seed(NULL, 42); /* NULL: the default generator */
    assert_int_equal(emb_generator_random(emb_default_generator()), first);
    emb_generator_free(a);
    emb_generator_free(b);
    emb_generator_free(NULL);
}

static void test_random64_high_word_first(void **state) {
    (void)state;
    emb_generator *a, *b;
    EMB_OK_OR_FAIL(emb_generator_create(7, &a));
    EMB_OK_OR_FAIL(emb_generator_create(7, &b));
    for (int i = 0; i < 1000; i++) {
        uint64_t hi = emb_generator_random(a);
        uint64_t lo = emb_generator_random(a);
        assert_true(emb_generator_random64(b) == ((hi << 32) | lo));
    }
    emb_manual_seed(7);
    emb_generator_seed(a, 7);
    assert_true(emb_generator_random64(NULL) == emb_generator_random64(a));
    emb_generator_free(a);
    emb_generator_free(b);
}

/* Section 7 table: manual_seed(0); nn.Embedding(6, 2).weight (vector path, n = 12 < 16 is
 * the scalar path: 12 elements). */
static void test_reference_embedding_seed0(void **state) {
    (void)state;
    static const uint32_t want_bits[12] = {0x3fc53f5c, 0xbe963c50, 0xc00b7149, 0x3f1184b6,
                                           0xbf8ad1a1, 0xbfb3052d, 0x3ece837a, 0x3f5688e5,
                                           0xbf382144, 0xbece830b, 0xbf18bd18, 0x3e3a67c6};
    float want[12], got[12];
    bits_to_f32(want_bits, want, 12);
    emb_manual_seed(0);
    emb_tensor t;
    int64_t shape[2] = {6, 2};
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, got, 2, shape));
    EMB_OK_OR_FAIL(emb_normal_(&t, 0.0, 1.0, NULL));
    EMB_ASSERT_EXACT(got, want, 12, "manual_seed(0); Embedding(6,2)");
}

/* manual_seed(123); nn.Embedding(4, 5).weight[0] (20 elements: the vector path with a tail
 * block), in both kernel modes. */
static void test_reference_embedding_seed123(void **state) {
    (void)state;
    static const uint32_t want_bits[5] = {0x3eacbbc9, 0xbe360b3b, 0xbe9b67f8, 0xbf1687f2,
                                          0x3fca5d36};
    float want[5], got[20];
    bits_to_f32(want_bits, want, 5);
    for (int mode = 0; mode < 2; mode++) {
        emb_set_kernel_mode(mode ? EMB_KERNELS_REF : EMB_KERNELS_AUTO);
        emb_generator *g;
        EMB_OK_OR_FAIL(emb_generator_create(123, &g));
        emb_tensor t = tensor1d(EMB_FLOAT32, got, 20);
        EMB_OK_OR_FAIL(emb_randn_(&t, g));
        EMB_ASSERT_EXACT(got, want, 5, mode ? "Embedding(4,5) ref" : "Embedding(4,5) auto");
        emb_generator_free(g);
    }
    emb_set_kernel_mode(EMB_KERNELS_AUTO);
}

/* manual_seed(123); nn.Linear(4, 5): kaiming_uniform_(a=sqrt(5)) then the bias, both
 * uniform_ on float32. */
static void test_reference_linear_seed123(void **state) {
    (void)state;
    static const uint32_t w_bits[4] = {0xbe50c808, 0x3c87ada0, 0xbe7e4a08, 0x3e411508};
    static const uint32_t b_bits[5] = {0x3eb5075c, 0x3dbec700, 0x3e0c01bc, 0x3ef71b32, 0xbe66eab4};
    float w_want[4], b_want[5], w[20], b[5];
    bits_to_f32(w_bits, w_want, 4);
    bits_to_f32(b_bits, b_want, 5);
    double a = sqrt(5.0), in_f = 4.0;
    double bound = sqrt(3.0) * (sqrt(2.0 / (1 + pow(a, 2))) / sqrt(in_f));
    double bb = 1.0 / sqrt(in_f);
    emb_manual_seed(123);
    emb_tensor tw = tensor1d(EMB_FLOAT32, w, 20), tb = tensor1d(EMB_FLOAT32, b, 5);
    EMB_OK_OR_FAIL(emb_uniform_(&tw, -bound, bound, NULL));
    EMB_ASSERT_EXACT(w, w_want, 4, "Linear(4,5).weight[0]");
    EMB_OK_OR_FAIL(emb_uniform_(&tb, -bb, bb, NULL));
    EMB_ASSERT_EXACT(b, b_want, 5, "Linear(4,5).bias");
}

/* Draw counts of section 7: scalar path 4 per fresh pair, vector path n (+16 for a partial
 * block), float64 vector 2n (+32), uniform 1 (float32) or 2 (float64) per element,
 * randint 1 or 2 per element by range. */
static void test_draw_counts(void **state) {
    (void)state;
    static float f[100];
    static double d[100];
    static int64_t l[10];
    static int32_t i32[10];
    struct {
        emb_dtype dt;
        int64_t n;
        int op; /* 0 normal, 1 uniform, randint: 2 small, 3 [0, 2^33), 4 [0, 2^32), 5 int32 */
        int64_t draws;
    } cases[] = {
        {EMB_FLOAT32, 1, 0, 4},
        {EMB_FLOAT32, 2, 0, 4},
        {EMB_FLOAT32, 3, 0, 8},
        {EMB_FLOAT32, 15, 0, 32},
        {EMB_FLOAT32, 16, 0, 16},
        {EMB_FLOAT32, 17, 0, 33},
        {EMB_FLOAT32, 32, 0, 32},
        {EMB_FLOAT32, 100, 0, 116},
        {EMB_FLOAT64, 15, 0, 32},
        {EMB_FLOAT64, 16, 0, 32},
        {EMB_FLOAT64, 20, 0, 72},
        {EMB_FLOAT32, 0, 0, 0},
        {EMB_FLOAT32, 7, 1, 7},
        {EMB_FLOAT64, 7, 1, 14},
        {EMB_INT64, 10, 2, 10},
        {EMB_INT64, 10, 3, 20},
        {EMB_INT32, 10, 2, 10},
        {EMB_FLOAT32, 10, 3, 20},
        {EMB_FLOAT64, 10, 3, 20},
        {EMB_INT64, 0, 3, 0},
        /* range exactly 2^32: 64-bit draws, except float32 (update_to lowers `to` below
         * 2^32) and int32 (always 32-bit draws). */
        {EMB_INT64, 10, 4, 20},
        {EMB_FLOAT64, 10, 4, 20},
        {EMB_FLOAT32, 10, 4, 10},
        {EMB_INT32, 10, 5, 10},
        {EMB_INT64, 10, 5, 20},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        void *data = cases[c].dt == EMB_FLOAT32   ? (void *)f
                     : cases[c].dt == EMB_FLOAT64 ? (void *)d
                     : cases[c].dt == EMB_INT64   ? (void *)l
                                                  : (void *)i32;
        emb_tensor t = tensor1d(cases[c].dt, data, cases[c].n);
        emb_generator *g;
        EMB_OK_OR_FAIL(emb_generator_create(1000 + c, &g));
        switch (cases[c].op) {
        case 0:
            EMB_OK_OR_FAIL(emb_normal_(&t, 0.0, 1.0, g));
            break;
        case 1:
            EMB_OK_OR_FAIL(emb_uniform_(&t, 0.0, 1.0, g));
            break;
        case 2:
            EMB_OK_OR_FAIL(emb_randint_(&t, -3, 1000, g));
            break;
        case 3:
            EMB_OK_OR_FAIL(emb_randint_(&t, 0, INT64_C(1) << 33, g));
            break;
        case 4:
            EMB_OK_OR_FAIL(emb_randint_(&t, 0, INT64_C(1) << 32, g));
            break;
        default:
            EMB_OK_OR_FAIL(emb_randint_(&t, INT32_MIN, INT64_C(1) << 31, g));
            break;
        }
        int64_t k = draws_between(g, 1000 + c, 200);
        if (k != cases[c].draws)
            fail_msg("case %zu (dtype %d, n %lld, op %d): %lld draws, expected %lld", c,
                     (int)cases[c].dt, (long long)cases[c].n, cases[c].op, (long long)k,
                     (long long)cases[c].draws);
        emb_generator_free(g);
    }
}

/* The cached sin value survives a vector-path call and is returned by the next scalar draw:
 * normal_(1), normal_(100), normal_(1) gives cos, <block values>, sin of the first pair. */
static void test_normal_cache(void **state) {
    (void)state;
    emb_generator *g, *h;
    EMB_OK_OR_FAIL(emb_generator_create(99, &g));
    EMB_OK_OR_FAIL(emb_generator_create(99, &h));
    float x1, big[100], x3, pair[2], big_want[100];
    emb_tensor t1 = tensor1d(EMB_FLOAT32, &x1, 1), tb = tensor1d(EMB_FLOAT32, big, 100);
    emb_tensor t3 = tensor1d(EMB_FLOAT32, &x3, 1), tp = tensor1d(EMB_FLOAT32, pair, 2);
    EMB_OK_OR_FAIL(emb_normal_(&t1, 0.0, 1.0, g));
    EMB_OK_OR_FAIL(emb_normal_(&tb, 0.0, 1.0, g));
    EMB_OK_OR_FAIL(emb_normal_(&t3, 0.0, 1.0, g));
    EMB_OK_OR_FAIL(emb_normal_(&tp, 0.0, 1.0, h)); /* cos, sin of the same pair */
    EMB_ASSERT_EXACT(&x1, &pair[0], 1, "first scalar draw");
    EMB_ASSERT_EXACT(&x3, &pair[1], 1, "cached sin after the vector path");
    emb_tensor tbw = tensor1d(EMB_FLOAT32, big_want, 100);
    EMB_OK_OR_FAIL(emb_normal_(&tbw, 0.0, 1.0, h)); /* vector path right after 4 draws */
    EMB_ASSERT_EXACT(big, big_want, 100, "vector path between the scalar draws");
    /* Seeding clears the cache: after reseeding, one draw is a fresh cos again. */
    EMB_OK_OR_FAIL(emb_normal_(&t1, 0.0, 1.0, g)); /* fresh pair; sin cached */
    emb_generator_seed(g, 99);
    EMB_OK_OR_FAIL(emb_normal_(&t3, 0.0, 1.0, g));
    EMB_ASSERT_EXACT(&x3, &pair[0], 1, "first draw after reseeding");
    /* mean/std apply to the cached value too: (float)fma(sin, std, mean). */
    emb_generator_seed(g, 99);
    EMB_OK_OR_FAIL(emb_normal_(&t1, 0.0, 1.0, g));
    EMB_OK_OR_FAIL(emb_normal_(&t3, 3.0, 0.0, g));
    float three = 3.0f;
    EMB_ASSERT_EXACT(&x3, &three, 1, "std 0 gives the mean");
    emb_generator_free(g);
    emb_generator_free(h);
}

/* The scalar reference transform and the AVX2 one agree bit for bit (a quarter million
 * uniforms; on CPUs without AVX2 both runs use the reference). */
static void test_kernel_modes_agree(void **state) {
    (void)state;
    const int64_t n = (INT64_C(1) << 18) + 5;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    assert_non_null(a);
    assert_non_null(b);
    emb_tensor ta = tensor1d(EMB_FLOAT32, a, n), tb = tensor1d(EMB_FLOAT32, b, n);
    const double ms[3][2] = {{0.0, 1.0}, {-1.5, 0.02}, {3e5, 7.25}};
    for (int k = 0; k < 3; k++) {
        emb_generator *g;
        EMB_OK_OR_FAIL(emb_generator_create(31 + k, &g));
        emb_set_kernel_mode(EMB_KERNELS_AUTO);
        EMB_OK_OR_FAIL(emb_normal_(&ta, ms[k][0], ms[k][1], g));
        emb_generator_seed(g, 31 + k);
        emb_set_kernel_mode(EMB_KERNELS_REF);
        EMB_OK_OR_FAIL(emb_normal_(&tb, ms[k][0], ms[k][1], g));
        emb_set_kernel_mode(EMB_KERNELS_AUTO);
        EMB_ASSERT_EXACT(a, b, n, "AVX2 vs reference normal_");
        emb_generator_free(g);
    }
    free(a);
    free(b);
}

/* Values stay in their ranges. */
static void test_ranges(void **state) {
    (void)state;
    enum { N = 5000 };
    static float f[N];
    static double d[N];
    static int64_t l[N];
    static int32_t i[N];
    emb_generator *g;
    EMB_OK_OR_FAIL(emb_generator_create(5, &g));
    emb_tensor tf = tensor1d(EMB_FLOAT32, f, N), td = tensor1d(EMB_FLOAT64, d, N);
    emb_tensor tl = tensor1d(EMB_INT64, l, N), ti = tensor1d(EMB_INT32, i, N);
    EMB_OK_OR_FAIL(emb_uniform_(&tf, -2.0, 3.0, g));
    EMB_OK_OR_FAIL(emb_uniform_(&td, -2.0, 3.0, g));
    for (int k = 0; k < N; k++) {
        assert_true(f[k] >= -2.0f && f[k] <= 3.0f);
        assert_true(d[k] >= -2.0 && d[k] < 3.0);
    }
    EMB_OK_OR_FAIL(emb_uniform_(&tf, 1.5, 1.5, g)); /* from == to is allowed */
    for (int k = 0; k < N; k++) assert_true(f[k] == 1.5f);
    EMB_OK_OR_FAIL(emb_randint_(&tl, -7, 9, g));
    EMB_OK_OR_FAIL(emb_randint_(&ti, INT32_MIN, INT64_C(1) << 31, g));
    int seen_lo = 0, seen_hi = 0;
    for (int k = 0; k < N; k++) {
        assert_true(l[k] >= -7 && l[k] < 9);
        seen_lo |= l[k] == -7;
        seen_hi |= l[k] == 8;
    }
    assert_true(seen_lo && seen_hi);
    EMB_OK_OR_FAIL(emb_randint_(&tl, INT64_MIN, INT64_MAX, g));
    EMB_OK_OR_FAIL(emb_randint_(&tf, -16, 16, g));
    for (int k = 0; k < N; k++) assert_true(f[k] >= -16.0f && f[k] < 16.0f && f[k] == floorf(f[k]));
    EMB_OK_OR_FAIL(emb_normal_(&td, 0.0, 1.0, g));
    double s = 0, s2 = 0;
    for (int k = 0; k < N; k++) {
        s += d[k];
        s2 += d[k] * d[k];
    }
    assert_true(fabs(s / N) < 0.1 && fabs(s2 / N - 1.0) < 0.1);
    emb_generator_free(g);
}

/* Save and restore reproduce the stream, cached normal included. */
static void test_state_round_trip(void **state) {
    (void)state;
    size_t sz = emb_generator_state_nbytes();
    assert_true(sz >= 624 * 4);
    unsigned char *buf = malloc(sz);
    emb_generator *g, *h;
    EMB_OK_OR_FAIL(emb_generator_create(2024, &g));
    EMB_OK_OR_FAIL(emb_generator_create(1, &h));
    float one, seq_a[40], seq_b[40];
    emb_tensor t1 = tensor1d(EMB_FLOAT32, &one, 1);
    for (int k = 0; k < 700; k++) emb_generator_random(g); /* cross a twist */
    EMB_OK_OR_FAIL(emb_normal_(&t1, 0.0, 1.0, g));         /* leaves a cached normal */
    EMB_OK_OR_FAIL(emb_generator_get_state(g, buf, sz));
    for (int k = 0; k < 40; k++) {
        emb_tensor t = tensor1d(EMB_FLOAT32, &seq_a[k], 1);
        EMB_OK_OR_FAIL(emb_normal_(&t, 0.0, 1.0, g));
    }
    EMB_OK_OR_FAIL(emb_generator_set_state(h, buf, sz));
    assert_true(emb_generator_initial_seed(h) == 2024);
    for (int k = 0; k < 40; k++) {
        emb_tensor t = tensor1d(EMB_FLOAT32, &seq_b[k], 1);
        EMB_OK_OR_FAIL(emb_normal_(&t, 0.0, 1.0, h));
    }
    EMB_ASSERT_EXACT(seq_b, seq_a, 40, "stream after set_state");
    for (int k = 0; k < 1000; k++) assert_same_next(g, h);
    /* The default generator through NULL; a larger buffer is fine. */
    unsigned char *big = calloc(1, sz + 16);
    EMB_OK_OR_FAIL(emb_generator_get_state(g, big, sz + 16));
    EMB_OK_OR_FAIL(emb_generator_set_state(NULL, big, sz + 16));
    for (int k = 0; k < 100; k++) assert_same_next(NULL, g);
    EMB_OK_OR_FAIL(emb_generator_get_state(NULL, buf, sz));
    EMB_OK_OR_FAIL(emb_generator_set_state(h, buf, sz));
    for (int k = 0; k < 100; k++) assert_same_next(NULL, h);
    free(big);
    free(buf);
    emb_generator_free(g);
    emb_generator_free(h);
}

/* FNV-1a 64 over the first 2528 bytes, stored little-endian at 2528 (the documented
 * layout of version 2). */
static void rehash(unsigned char *b) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 2528; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    for (int i = 0; i < 8; i++) b[2528 + i] = (unsigned char)(h >> (8 * i));
}

/* A frozen copy of the version 1 writer, as emb wrote states before version 2: the same
 * fields in the machine's byte order (this test runs on a little-endian machine, where
 * version 2's fields are the same bytes), version 1, FNV-1a 32 at 2528, four zero bytes. */
static void to_version1(unsigned char *b) {
    const uint32_t one = 1;
    memcpy(b + 4, &one, 4);
    uint32_t h = 2166136261u;
    for (int i = 0; i < 2528; i++) h = (h ^ b[i]) * 16777619u;
    memcpy(b + 2528, &h, 4);
    memset(b + 2532, 0, 4);
}

/* States written by the previous format (version 1) still load and give the same stream:
 * the committed fixture tests/data/legacy/generator-v1.bin (written by emb before version
 * 2: seed 5, ten 32-bit draws, one float64 normal, so a cached normal is held), and a
 * version 1 state made at test time by the frozen writer above. */
static void test_state_version1_loads(void **state) {
    (void)state;
    size_t sz = emb_generator_state_nbytes(), n;
    unsigned char *old = emb_test_read(emb_test_data("legacy/generator-v1.bin"), &n);
    assert_int_equal(n, sz);
    assert_int_equal(old[4], 1); /* it is a version 1 state */
    emb_generator *want, *got;
    EMB_OK_OR_FAIL(emb_generator_create(5, &want));
    EMB_OK_OR_FAIL(emb_generator_create(99, &got));
    for (int i = 0; i < 10; i++) emb_generator_random(want);
    double d;
    emb_tensor t = tensor1d(EMB_FLOAT64, &d, 1);
    EMB_OK_OR_FAIL(emb_normal_(&t, 0.0, 1.0, want));
    EMB_OK_OR_FAIL(emb_generator_set_state(got, old, sz));
    assert_true(emb_generator_initial_seed(got) == 5);
    double a, b;
    emb_tensor ta = tensor1d(EMB_FLOAT64, &a, 1), tb = tensor1d(EMB_FLOAT64, &b, 1);
    EMB_OK_OR_FAIL(emb_normal_(&ta, 0.0, 1.0, want)); /* the cached normal comes first */
    EMB_OK_OR_FAIL(emb_normal_(&tb, 0.0, 1.0, got));
    assert_true(a == b);
    for (int k = 0; k < 1000; k++) assert_same_next(want, got);
    /* saving writes version 2: the same fields, the new checksum */
    unsigned char *now = malloc(sz);
    EMB_OK_OR_FAIL(emb_generator_get_state(got, now, sz));
    assert_int_equal(now[4], 2);
    /* the frozen version 1 writer over a version 2 state loads to the same generator */
    to_version1(now);
    EMB_OK_OR_FAIL(emb_generator_set_state(got, now, sz));
    for (int k = 0; k < 1000; k++) assert_same_next(want, got);
    /* a version 1 state with a broken checksum or padding is refused */
    now[100] ^= 1;
    EMB_EXPECT_ERR(emb_generator_set_state(got, now, sz), EMB_ERR_FORMAT, "checksum mismatch");
    now[100] ^= 1;
    now[sz - 1] = 1;
    EMB_EXPECT_ERR(emb_generator_set_state(got, now, sz), EMB_ERR_FORMAT, "nonzero padding");
    free(now);
    free(old);
    emb_generator_free(want);
    emb_generator_free(got);
}

static void test_set_state_rejects_garbage(void **state) {
    (void)state;
    size_t sz = emb_generator_state_nbytes();
    assert_int_equal(sz, 2536);
    unsigned char *good = malloc(sz), *bad = malloc(sz);
    emb_generator *g, *twin, *src;
    EMB_OK_OR_FAIL(emb_generator_create(77, &g));
    EMB_OK_OR_FAIL(emb_generator_create(77, &twin));
    EMB_OK_OR_FAIL(emb_generator_create(5, &src));
    float x, y;
    emb_tensor tx = tensor1d(EMB_FLOAT32, &x, 1), ty = tensor1d(EMB_FLOAT32, &y, 1);
    EMB_OK_OR_FAIL(emb_normal_(&tx, 0.0, 1.0, g)); /* both hold a cached normal */
    EMB_OK_OR_FAIL(emb_normal_(&ty, 0.0, 1.0, twin));
    EMB_OK_OR_FAIL(emb_generator_get_state(src, good, sz));

    srand(1);
    for (size_t i = 0; i < sz; i++) bad[i] = (unsigned char)rand();
    EMB_EXPECT_ERR(emb_generator_set_state(g, bad, sz), EMB_ERR_FORMAT, "bad magic or version");
    memcpy(bad, good, sz);
    bad[4] = 3; /* version */
    EMB_EXPECT_ERR(emb_generator_set_state(g, bad, sz), EMB_ERR_FORMAT, "bad magic or version");
    memcpy(bad, good, sz);
    bad[100] ^= 1; /* an engine word */
    EMB_EXPECT_ERR(emb_generator_set_state(g, bad, sz), EMB_ERR_FORMAT, "checksum mismatch");
    memcpy(bad, good, sz);
    uint32_t pos = 625;
    memcpy(bad + 16, &pos, 4);
    rehash(bad);
    EMB_EXPECT_ERR(emb_generator_set_state(g, bad, sz), EMB_ERR_FORMAT,
                   "position 625 (valid: [0, 624])");
    memcpy(bad, good, sz);
    uint32_t flags = 2;
    memcpy(bad + 20, &flags, 4);
    rehash(bad);
    EMB_EXPECT_ERR(emb_generator_set_state(g, bad, sz), EMB_ERR_FORMAT, "unknown flags 0x2");
    /* A cached normal no generator can hold (the fuzzer's NaN: the next table was NaN). */
    const double bad_normals[] = {NAN, -NAN, INFINITY, -INFINITY, 8.6, -1e300};
    for (size_t k = 0; k < sizeof bad_normals / sizeof bad_normals[0]; k++) {
        memcpy(bad, good, sz);
        flags = 1;
        memcpy(bad + 20, &flags, 4);
        memcpy(bad + 24, &bad_normals[k], 8);
        rehash(bad);
        EMB_EXPECT_ERR(emb_generator_set_state(g, bad, sz), EMB_ERR_FORMAT, "cached normal");
        assert_non_null(strstr(emb_errmsg(), "that no generator produces"));
    }
    /* No cached normal, but a value in its field. */
    memcpy(bad, good, sz);
    double half = 0.5;
    memcpy(bad + 24, &half, 8);
    rehash(bad);
    EMB_EXPECT_ERR(emb_generator_set_state(g, bad, sz), EMB_ERR_FORMAT,
                   "no cached normal but a nonzero normal field (0.5)");
    /* The checksum's last byte (version 2 has no padding; version 1's: see
     * test_state_version1_loads). */
    memcpy(bad, good, sz);
    bad[sz - 1] ^= 1;
    EMB_EXPECT_ERR(emb_generator_set_state(g, bad, sz), EMB_ERR_FORMAT, "checksum mismatch");
    /* An all-zero MT19937 state (only the unused low bits of word 0 set). */
    memcpy(bad, good, sz);
    memset(bad + 32, 0, 4 * 624);
    uint32_t w0 = 0x7FFFFFFFu;
    memcpy(bad + 32, &w0, 4);
    rehash(bad);
    EMB_EXPECT_ERR(emb_generator_set_state(g, bad, sz), EMB_ERR_FORMAT, "all-zero engine state");
    EMB_EXPECT_ERR(emb_generator_set_state(g, good, sz - 1), EMB_ERR_FORMAT,
                   "has 2535 bytes; a saved state has 2536");
    EMB_EXPECT_ERR(emb_generator_set_state(g, good, 0), EMB_ERR_FORMAT, "has 0 bytes");
    EMB_EXPECT_ERR(emb_generator_set_state(g, NULL, sz), EMB_ERR_NULL, "buf must not be NULL");
    /* g is unchanged: same seed, same cached normal, same stream. */
    assert_true(emb_generator_initial_seed(g) == 77);
    EMB_OK_OR_FAIL(emb_normal_(&tx, 0.0, 1.0, g));
    EMB_OK_OR_FAIL(emb_normal_(&ty, 0.0, 1.0, twin));
    EMB_ASSERT_EXACT(&x, &y, 1, "cached normal after rejected set_state");
    for (int k = 0; k < 100; k++) assert_same_next(g, twin);

    /* The largest cached normal the engine can produce is accepted and comes back first. */
    memcpy(bad, good, sz);
    flags = 1;
    double edge = -sqrt(-2.0 * log(0x1p-53));
    memcpy(bad + 20, &flags, 4);
    memcpy(bad + 24, &edge, 8);
    rehash(bad);
    EMB_OK_OR_FAIL(emb_generator_set_state(src, bad, sz));
    double d1;
    emb_tensor td = tensor1d(EMB_FLOAT64, &d1, 1);
    EMB_OK_OR_FAIL(emb_normal_(&td, 0.0, 1.0, src));
    assert_true(d1 == edge);

    /* get_state: buffer too small or NULL, nothing written. */
    memset(bad, 0xAB, sz);
    EMB_EXPECT_ERR(emb_generator_get_state(g, bad, sz - 1), EMB_ERR_INVALID,
                   "buffer has 2535 bytes; it needs 2536");
    for (size_t i = 0; i < sz; i++) assert_int_equal(bad[i], 0xAB);
    EMB_EXPECT_ERR(emb_generator_get_state(g, NULL, sz), EMB_ERR_NULL, "buf must not be NULL");
    free(good);
    free(bad);
    emb_generator_free(g);
    emb_generator_free(twin);
    emb_generator_free(src);
}

static void test_create_errors(void **state) {
    (void)state;
    EMB_EXPECT_ERR(emb_generator_create(1, NULL), EMB_ERR_NULL, "out must not be NULL");
}

/* Every distribution error: status, message, nothing drawn, tensor untouched. */
static void test_distribution_errors(void **state) {
    (void)state;
    emb_generator *g, *twin;
    EMB_OK_OR_FAIL(emb_generator_create(3, &g));
    EMB_OK_OR_FAIL(emb_generator_create(3, &twin));
    float f[20];
    double d[20];
    int64_t l[20];
    int32_t i32[20];
    for (int k = 0; k < 20; k++) {
        f[k] = 42.0f;
        d[k] = 42.0;
        l[k] = 42;
        i32[k] = 42;
    }
    emb_tensor tf = tensor1d(EMB_FLOAT32, f, 20), tf3 = tensor1d(EMB_FLOAT32, f, 3);
    emb_tensor td = tensor1d(EMB_FLOAT64, d, 20), tl = tensor1d(EMB_INT64, l, 20);
    emb_tensor ti = tensor1d(EMB_INT32, i32, 20);
    emb_tensor tnull = tf;
    tnull.data = NULL;
    emb_tensor tbad = tf;
    tbad.ndim = -1;
    emb_tensor tf16 = tf;
    tf16.dtype = EMB_FLOAT16;

#define NOTHING_DRAWN() assert_same_next(g, twin)
    /* normal_ */
    EMB_EXPECT_ERR(emb_normal_(NULL, 0, 1, g), EMB_ERR_NULL, "tensor must not be NULL");
    EMB_EXPECT_ERR(emb_normal_(&tnull, 0, 1, g), EMB_ERR_NULL, "data is NULL");
    EMB_EXPECT_ERR(emb_normal_(&tbad, 0, 1, g), EMB_ERR_SHAPE, "-1 dimensions");
    EMB_EXPECT_ERR(emb_normal_(&tl, 0, 1, g), EMB_ERR_DTYPE,
                   "normal_ expects a float32 or float64 tensor, got int64");
    EMB_EXPECT_ERR(emb_normal_(&tf16, 0, 1, g), EMB_ERR_DTYPE, "got float16");
    EMB_EXPECT_ERR(emb_normal_(&tf, 0, -1, g), EMB_ERR_INVALID,
                   "normal expects std >= 0.0, but found std -1");
    EMB_EXPECT_ERR(emb_normal_(&tf3, 0, -0.5, g), EMB_ERR_INVALID,
                   "normal expects std >= 0.0, but found std -0.5");
    EMB_EXPECT_ERR(emb_normal_(&td, 0, NAN, g), EMB_ERR_INVALID,
                   "normal expects std >= 0.0, but found std nan");
    EMB_EXPECT_ERR(emb_normal_(&tf, 0, INFINITY, g), EMB_ERR_INVALID,
                   "normal_ expects a finite mean and std, but found mean 0, std inf");
    EMB_EXPECT_ERR(emb_normal_(&tf, NAN, 1, g), EMB_ERR_INVALID, "found mean nan, std 1");
    /* finite as doubles, infinite as float32: the float32 tensor would fill with inf */
    EMB_EXPECT_ERR(emb_normal_(&tf, 1e300, 1, g), EMB_ERR_INVALID,
                   "finite in float32, but found mean 1e+300, std 1");
    EMB_EXPECT_ERR(emb_normal_(&tf, 0, 1e39, g), EMB_ERR_INVALID, "found mean 0, std 1e+39");
    EMB_EXPECT_ERR(emb_randn_(&tl, g), EMB_ERR_DTYPE, "got int64");
    NOTHING_DRAWN();
    /* uniform_ */
    EMB_EXPECT_ERR(emb_uniform_(NULL, 0, 1, g), EMB_ERR_NULL, "tensor must not be NULL");
    EMB_EXPECT_ERR(emb_uniform_(&ti, 0, 1, g), EMB_ERR_DTYPE,
                   "uniform_ expects a float32 or float64 tensor, got int32");
    EMB_EXPECT_ERR(emb_uniform_(&tf, 2, 1, g), EMB_ERR_INVALID,
                   "uniform_ expects to return a [from, to) range, but found from=2 > to=1");
    EMB_EXPECT_ERR(emb_uniform_(&td, 2.5, 1.25, g), EMB_ERR_INVALID,
                   "but found from=2.5 > to=1.25");
    EMB_EXPECT_ERR(emb_uniform_(&tf, 0, INFINITY, g), EMB_ERR_INVALID,
                   "to is out of bounds for float");
    EMB_EXPECT_ERR(emb_uniform_(&tf, 0, 1e39, g), EMB_ERR_INVALID, "to is out of bounds for float");
    EMB_EXPECT_ERR(emb_uniform_(&tf, NAN, 1, g), EMB_ERR_INVALID,
                   "from is out of bounds for float");
    EMB_EXPECT_ERR(emb_uniform_(&td, -INFINITY, 1, g), EMB_ERR_INVALID,
                   "from is out of bounds for double");
    EMB_EXPECT_ERR(emb_uniform_(&td, 0, NAN, g), EMB_ERR_INVALID, "to is out of bounds for double");
    EMB_EXPECT_ERR(emb_uniform_(&tf, -3.4e38, 3.4e38, g), EMB_ERR_INVALID,
                   "uniform_ expects to-from <= std::numeric_limits<Float>::max(), but found "
                   "to=3.4e+38 and from=-3.4e+38 which result in to-from to exceed the limit");
    EMB_EXPECT_ERR(emb_uniform_(&td, -1.7e308, 1.7e308, g), EMB_ERR_INVALID,
                   "std::numeric_limits<Double>::max(), but found to=1.7e+308");
    NOTHING_DRAWN();
    /* randint_ */
    EMB_EXPECT_ERR(emb_randint_(NULL, 0, 1, g), EMB_ERR_NULL, "tensor must not be NULL");
    EMB_EXPECT_ERR(emb_randint_(&tf16, 0, 1, g), EMB_ERR_DTYPE,
                   "randint expects an int64, int32, float32 or float64 tensor, got float16");
    EMB_EXPECT_ERR(emb_randint_(&tl, 5, 5, g), EMB_ERR_INVALID,
                   "random_ expects 'from' to be less than 'to', but got from=5 >= to=5");
    EMB_EXPECT_ERR(emb_randint_(&tf, 5, -3, g), EMB_ERR_INVALID, "got from=5 >= to=-3");
    EMB_EXPECT_ERR(emb_randint_(&ti, 0, (INT64_C(1) << 31) + 1, g), EMB_ERR_INVALID,
                   "to - 1 is out of bounds for int");
    EMB_EXPECT_ERR(emb_randint_(&ti, -(INT64_C(1) << 31) - 1, 0, g), EMB_ERR_INVALID,
                   "from is out of bounds for int");
    /* float32: from = 2^30+1 moves up to 2^30+128, past to = 2^30+2 (PyTorch's update_from). */
    EMB_EXPECT_ERR(emb_randint_(&tf, (INT64_C(1) << 30) + 1, (INT64_C(1) << 30) + 2, g),
                   EMB_ERR_INVALID,
                   "random_ expects 'from' casted to dtype to be less than 'to' casted to "
                   "dtype, but got from=1073741952 >= to=1073741826");
    NOTHING_DRAWN();
    for (int k = 0; k < 20; k++) {
        assert_true(f[k] == 42.0f && d[k] == 42.0 && l[k] == 42 && i32[k] == 42);
    }
#undef NOTHING_DRAWN
    /* The default generator (NULL) is not advanced by a failing call either. */
    emb_manual_seed(8);
    emb_generator_seed(twin, 8);
    EMB_EXPECT_ERR(emb_normal_(&tf, 0, -1, NULL), EMB_ERR_INVALID, "found std -1");
    EMB_EXPECT_ERR(emb_uniform_(&tf, 1, 0, NULL), EMB_ERR_INVALID, "from=1 > to=0");
    EMB_EXPECT_ERR(emb_randint_(&tl, 1, 0, NULL), EMB_ERR_INVALID, "from=1 >= to=0");
    assert_same_next(NULL, twin);
    emb_generator_free(g);
    emb_generator_free(twin);
}

/* NULL generator means the default one, for every distribution. */
static void test_null_means_default(void **state) {
    (void)state;
    emb_generator *g;
    EMB_OK_OR_FAIL(emb_generator_create(11, &g));
    emb_manual_seed(11);
    float a[37], b[37];
    double da[5], db[5];
    int64_t la[9], lb[9];
    emb_tensor ta = tensor1d(EMB_FLOAT32, a, 37), tb = tensor1d(EMB_FLOAT32, b, 37);
    emb_tensor tda = tensor1d(EMB_FLOAT64, da, 5), tdb = tensor1d(EMB_FLOAT64, db, 5);
    emb_tensor tla = tensor1d(EMB_INT64, la, 9), tlb = tensor1d(EMB_INT64, lb, 9);
    for (int round = 0; round < 3; round++) {
        EMB_OK_OR_FAIL(emb_normal_(&ta, 1.0, 2.0, NULL));
        EMB_OK_OR_FAIL(emb_normal_(&tb, 1.0, 2.0, g));
        EMB_ASSERT_EXACT(a, b, 37, "normal_ default vs explicit");
        EMB_OK_OR_FAIL(emb_randn_(&tda, NULL));
        EMB_OK_OR_FAIL(emb_randn_(&tdb, g));
        assert_memory_equal(da, db, sizeof da);
        EMB_OK_OR_FAIL(emb_uniform_(&ta, -1.0, 1.0, NULL));
        EMB_OK_OR_FAIL(emb_uniform_(&tb, -1.0, 1.0, g));
        EMB_ASSERT_EXACT(a, b, 37, "uniform_ default vs explicit");
        EMB_OK_OR_FAIL(emb_randint_(&tla, -5, INT64_C(1) << 40, NULL));
        EMB_OK_OR_FAIL(emb_randint_(&tlb, -5, INT64_C(1) << 40, g));
        assert_memory_equal(la, lb, sizeof la);
    }
    assert_same_next(NULL, g);
    emb_generator_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_generator_unseeded), /* first: needs a fresh default */
        cmocka_unit_test(test_mt19937_standard_vector),
        cmocka_unit_test(test_seeding),
        cmocka_unit_test(test_random64_high_word_first),
        cmocka_unit_test(test_reference_embedding_seed0),
        cmocka_unit_test(test_reference_embedding_seed123),
        cmocka_unit_test(test_reference_linear_seed123),
        cmocka_unit_test(test_draw_counts),
        cmocka_unit_test(test_normal_cache),
        cmocka_unit_test(test_kernel_modes_agree),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_state_round_trip),
        cmocka_unit_test(test_set_state_rejects_garbage),
        cmocka_unit_test(test_state_version1_loads),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_distribution_errors),
        cmocka_unit_test(test_null_means_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
