/* The base layer's threads and CPU choice (src/core/parallel.h, src/core/cpu.h): the splits
 * tile their ranges exactly, every share of a parallel loop runs once with the nth it was
 * asked for (also nested, where OpenMP gives a team of one), dynamic claiming hands out
 * every unit once, tasks run every piece, the OpenBLAS thread setting is restored, and the
 * tier rule caps the CPU's tier by the kernel mode. Runs with and without OpenMP. */
#include "emb_test.h"

#include "internal.h"

/* ---- splits ---------------------------------------------------------------------------- */

enum { MAXN_SPLIT = 13 };

static void test_split_tiles(void **state) {
    (void)state;
    const int64_t ns[] = {0, 1, 2, 7, 64, 1000, 4097, INT64_MAX / 3, INT64_MAX};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        const int64_t n = ns[a];
        for (int nth = 1; nth <= MAXN_SPLIT; nth++) {
            int64_t prev = 0, lo, hi, smallest = INT64_MAX, largest = 0;
            for (int ith = 0; ith < nth; ith++) {
                emb__split(n, ith, nth, &lo, &hi);
                assert_true(lo == prev); /* contiguous, in order */
                if (n <= INT64_MAX / MAXN_SPLIT) assert_true(lo == n * ith / nth);
                assert_true(hi >= lo);
                if (hi - lo < smallest) smallest = hi - lo;
                if (hi - lo > largest) largest = hi - lo;
                prev = hi;
            }
            assert_true(prev == n); /* the whole range, also near INT64_MAX */
            assert_true(largest - smallest <= 1);
        }
    }
}

static void test_split_by_weight(void **state) {
    (void)state;
    /* units of weights w: prefix sums */
    const int64_t w[] = {5, 0, 0, 1, 1, 1, 30, 2, 0, 2, 2, 9, 0, 1};
    enum { U = sizeof w / sizeof w[0] };
    int64_t prefix[U + 1];
    prefix[0] = 0;
    for (int u = 0; u < U; u++) prefix[u + 1] = prefix[u] + w[u];
    for (int nth = 1; nth <= 9; nth++) {
        int64_t prev = 0, lo, hi;
        for (int ith = 0; ith < nth; ith++) {
            emb__split_by(prefix, U, ith, nth, &lo, &hi);
            assert_true(lo == prev && hi >= lo);
            /* a share starts at the first unit whose prefix reaches its even share */
            if (ith > 0) {
                const int64_t target = prefix[U] * ith / nth;
                assert_true(prefix[lo] >= target);
                assert_true(lo == 0 || prefix[lo - 1] < target);
            }
            prev = hi;
        }
        assert_true(prev == U);
    }
    /* no weight at all: the last share takes every unit */
    const int64_t zero[4] = {0, 0, 0, 0};
    int64_t lo, hi;
    emb__split_by(zero, 3, 0, 2, &lo, &hi);
    assert_true(lo == 0 && hi == 0);
    emb__split_by(zero, 3, 1, 2, &lo, &hi);
    assert_true(lo == 0 && hi == 3);
}

static void test_threads_for(void **state) {
    (void)state;
    emb_set_num_threads(4);
    assert_int_equal(emb_get_num_threads(), 4);
    assert_int_equal(emb__threads_for(0, 10), 1);
    assert_int_equal(emb__threads_for(25, 10), 2);
    assert_int_equal(emb__threads_for(1000, 10), 4);
    assert_int_equal(emb__threads_for(1000, 0), 4);
    assert_int_equal(emb__threads_for(INT64_MAX, 1), 4);
    emb_set_num_threads(0);
    assert_true(emb_get_num_threads() >= 1);
}

/* ---- parallel loops -------------------------------------------------------------------- */

enum { MAXN = 16 };

typedef struct runs {
    int count[MAXN];
    int nth_seen[MAXN];
    int inner_nth; /* > 0: each share runs a nested loop of this many shares */
    int inner[MAXN][MAXN];
} runs;

static void inner_share(void *p, int ith, int nth) {
    int *row = p;
    (void)nth;
    __atomic_fetch_add(&row[ith], 1, __ATOMIC_RELAXED);
}

static void count_share(void *p, int ith, int nth) {
    runs *r = p;
    __atomic_fetch_add(&r->count[ith], 1, __ATOMIC_RELAXED);
    r->nth_seen[ith] = nth;
    if (r->inner_nth) emb__parallel(r->inner_nth, inner_share, r->inner[ith]);
}

static void test_parallel_runs_every_share_once(void **state) {
    (void)state;
    for (int nested = 0; nested < 2; nested++)
        for (int nth = 0; nth <= MAXN; nth++) {
            runs r;
            memset(&r, 0, sizeof r);
            r.inner_nth = nested ? 5 : 0;
            emb__parallel(nth, count_share, &r);
            const int want = nth < 1 ? 1 : nth;
            for (int i = 0; i < MAXN; i++) {
                assert_int_equal(r.count[i], i < want ? 1 : 0);
                if (i < want) assert_int_equal(r.nth_seen[i], want);
                for (int j = 0; j < MAXN; j++)
                    assert_int_equal(r.inner[i][j], i < want && j < r.inner_nth ? 1 : 0);
            }
        }
}

typedef struct cover {
    int64_t n;
    unsigned char *hit;
    int64_t lo[MAXN], hi[MAXN];
} cover;

static void cover_range(void *p, int64_t lo, int64_t hi, int ith) {
    cover *c = p;
    c->lo[ith] = lo;
    c->hi[ith] = hi;
    for (int64_t i = lo; i < hi; i++) c->hit[i]++;
}

static void test_parallel_for_is_the_even_split(void **state) {
    (void)state;
    const int64_t n = 1003;
    unsigned char hit[1003];
    for (int nth = 1; nth <= MAXN; nth++) {
        cover c = {n, hit, {0}, {0}};
        memset(hit, 0, sizeof hit);
        emb__parallel_for(nth, n, cover_range, &c);
        for (int64_t i = 0; i < n; i++) assert_int_equal(hit[i], 1);
        for (int t = 0; t < nth; t++) {
            int64_t lo, hi;
            emb__split(n, t, nth, &lo, &hi);
            assert_true(c.lo[t] == lo && c.hi[t] == hi);
        }
    }
}

typedef struct claims {
    emb__counter next;
    int64_t units;
    int taken[1000];
    int by_share[MAXN];
} claims;

static void claim_share(void *p, int ith, int nth) {
    (void)nth;
    claims *c = p;
    for (int64_t u; (u = emb__claim(&c->next)) < c->units;) {
        __atomic_fetch_add(&c->taken[u], 1, __ATOMIC_RELAXED);
        c->by_share[ith]++;
    }
}

static void test_claim_hands_out_every_unit_once(void **state) {
    (void)state;
    for (int nth = 1; nth <= 8; nth++) {
        claims c;
        memset(&c, 0, sizeof c);
        c.units = 1000;
        emb__parallel(nth, claim_share, &c);
        int total = 0;
        for (int u = 0; u < 1000; u++) assert_int_equal(c.taken[u], 1);
        for (int t = 0; t < nth; t++) total += c.by_share[t];
        assert_int_equal(total, 1000);
    }
}

/* Divide and conquer over [lo, hi): leaves of at most 8 units mark themselves; the right
 * half of every split is spawned. */
static void visit(const emb__task_arg *a) {
    int *seen = a->p;
    int64_t lo = a->v[0], hi = a->v[1];
    while (hi - lo > 8) {
        const int64_t mid = lo + (hi - lo) / 2;
        const emb__task_arg right = {seen, {mid, hi, 0, 0}};
        emb__spawn(visit, &right);
        hi = mid;
    }
    for (int64_t i = lo; i < hi; i++) __atomic_fetch_add(&seen[i], 1, __ATOMIC_RELAXED);
}

static void test_tasks_run_every_piece(void **state) {
    (void)state;
    enum { N = 5000 };
    static int seen[N];
    for (int nth = 0; nth <= 5; nth++) {
        memset(seen, 0, sizeof seen);
        const emb__task_arg root = {seen, {0, N, 0, 0}};
        emb__tasks(nth, visit, &root);
        /* everything spawned has finished when emb__tasks returns */
        for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
    }
    /* outside emb__tasks a spawn runs at once */
    memset(seen, 0, sizeof seen);
    const emb__task_arg root = {seen, {0, 100, 0, 0}};
    emb__spawn(visit, &root);
    for (int i = 0; i < 100; i++) assert_int_equal(seen[i], 1);
}

static void test_blas_threads_restored(void **state) {
    (void)state;
    emb_set_num_threads(3);
    const int saved = emb__blas_threads_begin();
    emb_set_num_threads(0); /* now the OpenMP default, which begin set to 3 */
#ifdef _OPENMP
    assert_int_equal(emb_get_num_threads(), 3);
#else
    assert_int_equal(emb_get_num_threads(), 1);
#endif
    emb__blas_threads_end(saved);
#ifdef _OPENMP
    assert_int_equal(emb_get_num_threads(), saved);
#endif
    emb_set_num_threads(0);
}

static void test_fill_helpers(void **state) {
    (void)state;
    enum { N = (1 << 21) + 77 };
    float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
    assert_non_null(a);
    assert_non_null(b);
    for (int i = 0; i < N; i++) a[i] = (float)i - 0.5f;
    emb_set_num_threads(3);
    emb__copy_floats(b, a, N);
    assert_memory_equal(a, b, N * sizeof(float));
    emb__zero_floats(b, N);
    for (int i = 0; i < N; i++) assert_true(b[i] == 0.0f && !signbit(b[i]));
    emb__zero_floats(NULL, 0);
    emb__copy_floats(NULL, NULL, 0);
    emb_set_num_threads(0);
    free(a);
    free(b);
}

/* ---- the tier rule --------------------------------------------------------------------- */

static void test_tier_rule(void **state) {
    (void)state;
    const emb__tier cpu = emb__cpu_tier();
    const unsigned all = (1u << EMB__TIERS) - 1u;
#if EMB__X86
    /* the probe agrees with the compiler's own CPU model */
    const unsigned f = emb__cpu_features();
    assert_int_equal(!!(f & EMB__CPU_AVX2), !!__builtin_cpu_supports("avx2"));
    assert_int_equal(!!(f & EMB__CPU_FMA), !!__builtin_cpu_supports("fma"));
    assert_int_equal(!!(f & EMB__CPU_AVX512F), !!__builtin_cpu_supports("avx512f"));
    assert_int_equal(!!(f & EMB__CPU_AVX512VL), !!__builtin_cpu_supports("avx512vl"));
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 =
        avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
    assert_int_equal(cpu, avx512 ? EMB__TIER_AVX512 : avx2 ? EMB__TIER_AVX2 : EMB__TIER_REF);
#else
    assert_int_equal(emb__cpu_features(), 0);
    assert_int_equal(cpu, EMB__TIER_REF);
#endif
    const emb_kernel_mode before = emb_get_kernel_mode();
    emb_set_kernel_mode(EMB_KERNELS_REF);
    assert_int_equal(emb__kernel_tier(), EMB__TIER_REF);
    assert_int_equal(emb__variant(all), 0);
    assert_true(emb__force_ref());
    emb_set_kernel_mode(EMB_KERNELS_AVX2);
    assert_int_equal(emb__kernel_tier(), cpu < EMB__TIER_AVX2 ? cpu : EMB__TIER_AVX2);
    assert_false(emb__force_ref());
    emb_set_kernel_mode(EMB_KERNELS_AUTO);
    assert_int_equal(emb__kernel_tier(), cpu);
    assert_int_equal(emb__variant(all), (int)cpu);
    /* a family without the top tiers gets its best one at or below the tier */
    assert_int_equal(emb__variant(1u), 0);
    assert_int_equal(emb__variant(1u | 1u << EMB__TIER_AVX2), cpu >= EMB__TIER_AVX2 ? 1 : 0);
    assert_int_equal(emb__variant(1u | 1u << EMB__TIER_AVX512), cpu >= EMB__TIER_AVX512 ? 2 : 0);
    emb_set_kernel_mode((emb_kernel_mode)99); /* unknown: auto */
    assert_int_equal(emb_get_kernel_mode(), EMB_KERNELS_AUTO);
    emb_set_kernel_mode(before);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_tiles),
        cmocka_unit_test(test_split_by_weight),
        cmocka_unit_test(test_threads_for),
        cmocka_unit_test(test_parallel_runs_every_share_once),
        cmocka_unit_test(test_parallel_for_is_the_even_split),
        cmocka_unit_test(test_claim_hands_out_every_unit_once),
        cmocka_unit_test(test_tasks_run_every_piece),
        cmocka_unit_test(test_blas_threads_restored),
        cmocka_unit_test(test_fill_helpers),
        cmocka_unit_test(test_tier_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
