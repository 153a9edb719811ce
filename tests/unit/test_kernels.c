/* Unit tests of the kernel dispatch (src/kernels/dispatch.h): every SIMD variant this CPU
 * runs gives the same bits as the scalar reference kernels, for every kernel in the table
 * and every option, and every picker honours the kernel mode. Also the generator's block
 * transform (src/core/rng_normal.h), whose AVX2 twin is chosen by the same rule. */
#include "emb_test.h"

#include "kernels/dispatch.h"
#include "internal.h"
#include "rng_normal.h"

static uint64_t rng = 0x243f6a8885a308d3ull;

/* Random floats in [-2, 2), with a few exact zeros, tiny and large values mixed in. */
static void randf(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = emb_test_next_u64(&rng);
        float v = (float)emb_test_urand(&rng) * 4.0f - 2.0f;
        switch (r % 23) {
        case 0:
            v = 0.0f;
            break;
        case 1:
            v = v * 1e-30f;
            break;
        case 2:
            v = v * 1e20f;
            break;
        default:
            break;
        }
        x[i] = v;
    }
}

static void randpos(float *x, int64_t n) {
    randf(x, n);
    for (int64_t i = 0; i < n; i++) x[i] = fabsf(x[i]);
}

/* The variants to check against the reference; fails if the reference is not first. */
static int variants(const emb__kernel_table *const **v) {
    int n = emb__kernel_variants(v);
    assert_true(n >= 1);
    assert_ptr_equal((*v)[0], &emb__kernels_ref);
    assert_string_equal((*v)[0]->name, "ref");
    if (n == 1) print_message("only the reference kernels run on this CPU\n");
    return n;
}

static void test_mode_selects_table(void **state) {
    (void)state;
    const emb__kernel_table *const *v;
    int n = variants(&v);
    emb_set_kernel_mode(EMB_KERNELS_REF);
    assert_ptr_equal(emb__kernels(), &emb__kernels_ref);
    emb_set_kernel_mode(EMB_KERNELS_AUTO);
    /* auto: the last (best) variant this CPU runs */
    assert_ptr_equal(emb__kernels(), v[n - 1]);
#if EMB__X86
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
        assert_int_equal(n, avx512 ? 3 : 2);
        assert_string_equal(v[1]->name, "avx2");
        if (avx512) assert_string_equal(v[2]->name, "avx512");
        /* EMB_KERNELS_AVX2 stops at the AVX2 twins */
        emb_set_kernel_mode(EMB_KERNELS_AVX2);
        assert_int_equal(emb_get_kernel_mode(), EMB_KERNELS_AVX2);
        assert_ptr_equal(emb__kernels(), v[1]);
        emb_set_kernel_mode(EMB_KERNELS_AUTO);
    } else {
        assert_int_equal(n, 1);
    }
#endif
    for (int k = 0; k < n; k++) {
        assert_non_null(v[k]->backward_rows);
        assert_non_null(v[k]->row_norm2);
        assert_non_null(v[k]->row_norm);
        assert_non_null(v[k]->renorm_rows);
        assert_non_null(v[k]->lookup_rows_i64);
        assert_non_null(v[k]->lookup_rows_i32);
        assert_non_null(v[k]->optim);
        assert_non_null(v[k]->score_tile);
    }
}

static void test_backward_rows_variants(void **state) {
    (void)state;
    const emb__kernel_table *const *v;
    int nv = variants(&v);
    /* multiples of 16, 32 and 64 take the register-blocked sums, the others the loop */
    const int64_t dims[] = {1, 3, 8, 16, 17, 32, 48, 64, 96, 128, 130, 256};
    enum { V = 37, N = 211 };
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        const int64_t D = dims[di];
        float *go = malloc((size_t)(N * D) * sizeof(float));
        float *w0 = malloc((size_t)(V * D) * sizeof(float));
        float *want = malloc((size_t)(V * D) * sizeof(float));
        float *got = malloc((size_t)(V * D) * sizeof(float));
        float *acc = malloc((size_t)D * sizeof(float));
        int64_t idx[N], offsets[V + 1], order[N], fill[V];
        assert_true(go && w0 && want && got && acc);
        randf(go, N * D);
        randf(w0, V * D);
        /* skewed indices: some rows many times, some once, some never */
        for (int64_t i = 0; i < N; i++) {
            uint64_t r = emb_test_next_u64(&rng);
            idx[i] = (int64_t)(r % 4 == 0 ? r % 3 : (r >> 8) % (V - 5));
        }
        memset(offsets, 0, sizeof offsets);
        for (int64_t i = 0; i < N; i++) offsets[idx[i] + 1]++;
        for (int64_t r = 0; r < V; r++) offsets[r + 1] += offsets[r];
        memcpy(fill, offsets, sizeof fill);
        for (int64_t i = 0; i < N; i++) order[fill[idx[i]]++] = i;
        for (int sbf = 0; sbf < 2; sbf++) {
            memcpy(want, w0, (size_t)(V * D) * sizeof(float));
            emb__embedding_backward_rows_ref(want, go, D, offsets, order, 0, V, sbf, false, acc);
            if (!sbf) { /* the sum of docs/semantics.md §6.1, one float at a time */
                for (int64_t r = 0; r < V; r++) {
                    if (offsets[r] == offsets[r + 1]) continue;
                    for (int64_t d = 0; d < D; d++) {
                        float a = 0.0f;
                        for (int64_t j = offsets[r]; j < offsets[r + 1]; j++)
                            a = a + go[order[j] * D + d];
                        float w = w0[r * D + d] + a;
                        assert_memory_equal(&w, &want[r * D + d], sizeof w);
                    }
                }
            }
            for (int k = 1; k < nv; k++) {
                memcpy(got, w0, (size_t)(V * D) * sizeof(float));
                /* two row ranges, as two threads would run them */
                v[k]->backward_rows(got, go, D, offsets, order, 0, V / 2, sbf, false, acc);
                v[k]->backward_rows(got, go, D, offsets, order, V / 2, V, sbf, false, acc);
                EMB_ASSERT_EXACT(got, want, V * D, v[k]->name);
            }
            /* the kernel did something: rows with contributions changed */
            assert_true(memcmp(want, w0, (size_t)D * sizeof(float)) != 0);
        }
        free(go);
        free(w0);
        free(want);
        free(got);
        free(acc);
    }
}

/* The row gather copies bits: every variant's output equals the reference's byte for byte
 * (NaN payloads included), for row widths the 64- and 16-byte pieces cover and others, both
 * index types, with and without prefetch, on sub-ranges of positions. */
static void test_lookup_rows_variants(void **state) {
    (void)state;
    const emb__kernel_table *const *v;
    int nv = variants(&v);
    const int64_t dims[] = {1, 3, 4, 12, 16, 20, 64, 68, 80, 128, 512};
    enum { V = 29, N = 97 };
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        const int64_t D = dims[di];
        float *w = malloc((size_t)(V * D) * sizeof(float));
        float *want = malloc((size_t)(N * D) * sizeof(float));
        float *got = malloc((size_t)(N * D) * sizeof(float));
        int64_t idx[N];
        int32_t idx32[N];
        randf(w, V * D);
        uint32_t nan_bits = 0x7fc01234u; /* a NaN with a payload */
        memcpy(&w[D / 2], &nan_bits, sizeof nan_bits);
        for (int i = 0; i < N; i++) {
            idx[i] = (int64_t)(emb_test_next_u64(&rng) % V);
            idx32[i] = (int32_t)idx[i];
        }
        for (int k = 1; k < nv; k++)
            for (int pf = 0; pf <= 8; pf += 8)
                for (int i32 = 0; i32 < 2; i32++) {
                    const int64_t b = i32 ? 5 : 0, e = i32 ? N - 3 : N;
                    memset(want, 0xab, (size_t)(N * D) * sizeof(float));
                    memset(got, 0xab, (size_t)(N * D) * sizeof(float));
                    if (i32) {
                        v[0]->lookup_rows_i32(want, w, D, idx32, b, e, pf);
                        v[k]->lookup_rows_i32(got, w, D, idx32, b, e, pf);
                    } else {
                        v[0]->lookup_rows_i64(want, w, D, idx, b, e, pf);
                        v[k]->lookup_rows_i64(got, w, D, idx, b, e, pf);
                    }
                    assert_memory_equal(got, want, (size_t)(N * D) * sizeof(float));
                    /* and the reference really gathered */
                    assert_memory_equal(want + b * D, w + idx[b] * D, (size_t)D * sizeof(float));
                }
        free(w);
        free(want);
        free(got);
    }
}

static void test_norm_variants(void **state) {
    (void)state;
    const emb__kernel_table *const *v;
    int nv = variants(&v);
    const double ps[] = {2.0, 1.0, 0.0, INFINITY, -INFINITY, 3.5, -1.0, 0.5};
    float x[300];
    for (int trial = 0; trial < 20; trial++) {
        randf(x, 300);
        if (trial == 7) x[5] = NAN;
        for (int64_t n = 0; n <= 300; n += (n < 40 ? 1 : 37)) {
            float want2 = emb__row_norm2_f32_ref(x, n);
            for (int k = 1; k < nv; k++) {
                float got2 = v[k]->row_norm2(x, n);
                EMB_ASSERT_EXACT(&got2, &want2, 1, "row_norm2");
            }
            for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
                float want = emb__row_norm_f32_ref(x, n, ps[pi]);
                for (int k = 1; k < nv; k++) {
                    float got = v[k]->row_norm(x, n, ps[pi]);
                    EMB_ASSERT_EXACT(&got, &want, 1, "row_norm");
                }
            }
        }
    }
}

static void test_renorm_variants(void **state) {
    (void)state;
    const emb__kernel_table *const *v;
    int nv = variants(&v);
    enum { V = 50, D = 29 };
    static float w0[V * D], want[V * D], got[V * D];
    int64_t rows[V];
    for (int64_t r = 0; r < V; r++) rows[r] = (r * 17) % V; /* distinct, shuffled */
    const double ps[] = {2.0, 1.0, 0.0, INFINITY, 3.0};
    const double max_norms[] = {0.5, 3.0, 20.0};
    for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
        for (size_t mi = 0; mi < sizeof max_norms / sizeof max_norms[0]; mi++) {
            randf(w0, V * D);
            for (int64_t i = 0; i < V * D; i++) w0[i] = fminf(fmaxf(w0[i], -3.0f), 3.0f);
            memcpy(want, w0, sizeof want);
            emb__renorm_rows_f32_ref(want, D, rows, 0, V, max_norms[mi], ps[pi]);
            for (int k = 1; k < nv; k++) {
                memcpy(got, w0, sizeof got);
                v[k]->renorm_rows(got, D, rows, 0, V / 3, max_norms[mi], ps[pi]);
                v[k]->renorm_rows(got, D, rows, V / 3, V, max_norms[mi], ps[pi]);
                EMB_ASSERT_EXACT(got, want, V * D, "renorm_rows");
            }
        }
    }
}

/* Every entry of the optimizer table, with every option combination. */
static void test_optim_variants(void **state) {
    (void)state;
    const emb__kernel_table *const *v;
    int nv = variants(&v);
    const emb__optim_kernel_table *R = emb__kernels_ref.optim;
    assert_ptr_equal(R, &emb__optim_kernels_ref);
    enum { N = 1003 };
    static float g[N], p0[N], a0[N], b0[N], c0[N];
    static float p1[N], a1[N], b1[N], c1[N], p2[N], a2[N], b2[N], c2[N];
    randf(g, N);
    randf(p0, N);
    randf(a0, N);
    randpos(b0, N);
    randpos(c0, N);
#define RESET()                                                                                    \
    do {                                                                                           \
        memcpy(p1, p0, sizeof p0);                                                                 \
        memcpy(a1, a0, sizeof a0);                                                                 \
        memcpy(b1, b0, sizeof b0);                                                                 \
        memcpy(c1, c0, sizeof c0);                                                                 \
        memcpy(p2, p0, sizeof p0);                                                                 \
        memcpy(a2, a0, sizeof a0);                                                                 \
        memcpy(b2, b0, sizeof b0);                                                                 \
        memcpy(c2, c0, sizeof c0);                                                                 \
    } while (0)
#define SAME(what)                                                                                 \
    do {                                                                                           \
        EMB_ASSERT_EXACT(p2, p1, N, what " p");                                                    \
        EMB_ASSERT_EXACT(a2, a1, N, what " a");                                                    \
        EMB_ASSERT_EXACT(b2, b1, N, what " b");                                                    \
        EMB_ASSERT_EXACT(c2, c1, N, what " c");                                                    \
    } while (0)
    for (int k = 1; k < nv; k++) {
        const emb__optim_kernel_table *F = v[k]->optim;
        assert_ptr_not_equal(F, R);
        for (int flags = 0; flags < 32; flags++) {
            const bool f0 = flags & 1, f1 = flags & 2, f2 = flags & 4, f3 = flags & 8,
                       f4 = flags & 16;
            emb__sgd_args sa = {-0.1f, 0.01f, 0.9f, 0.8f, f0, f1, f2, f3, f4};
            RESET();
            R->sgd_dense(p1, g, a1, N, &sa);
            F->sgd_dense(p2, g, a2, N, &sa);
            SAME("sgd");
            assert_true(memcmp(p1, p0, sizeof p0) != 0);
            emb__adagrad_args ga = {-0.3f, 1e-10f, 0.1f, f0, f1};
            RESET();
            R->adagrad_dense(p1, g, b1, N, &ga);
            F->adagrad_dense(p2, g, b2, N, &ga);
            SAME("adagrad");
            RESET();
            R->adagrad_row(p1, b1, g, N, &ga);
            F->adagrad_row(p2, b2, g, N, &ga);
            SAME("adagrad row");
            emb__adam_args aa = {
                0.9f, 0.1f, 0.999f, (float)(1 - 0.999), 0.01f, 0.9999f, -0.01f, 0.0316f, 1e-8f, f0,
                f1,   f2,   f3};
            RESET();
            R->adam_dense(p1, g, a1, b1, c1, N, &aa);
            F->adam_dense(p2, g, a2, b2, c2, N, &aa);
            SAME("adam");
        }
        emb__sparse_adam_args ra = {0.1f, 0.001f, 1e-8f, -0.001f};
        RESET();
        R->sparse_adam_row(p1, a1, b1, g, N, &ra);
        F->sparse_adam_row(p2, a2, b2, g, N, &ra);
        SAME("sparse adam row");
        RESET();
        R->axpy(p1, g, -0.37f, N);
        F->axpy(p2, g, -0.37f, N);
        R->scale(a1, 0.77f, N);
        F->scale(a2, 0.77f, N);
        R->scale_to(b1, g, -1.3f, N);
        F->scale_to(b2, g, -1.3f, N);
        SAME("axpy/scale/scale_to");
        for (int sign = -1; sign <= 1; sign += 2) {
            RESET();
            R->coalesce_first(a1, g, (float)sign, N);
            F->coalesce_first(a2, g, (float)sign, N);
            R->coalesce_add(c1, g, (float)sign, N);
            F->coalesce_add(c2, g, (float)sign, N);
            R->merge_entry(b1, g, (float)sign, c0, 0.3f, N);
            F->merge_entry(b2, g, (float)sign, c0, 0.3f, N);
            R->merge_entry(p1, NULL, 1.0f, g, -0.7f, N);
            F->merge_entry(p2, NULL, 1.0f, g, -0.7f, N);
            SAME("coalesce/merge");
        }
        RESET();
        R->merge_entry(p1, g, 1.0f, NULL, 0.3f, N);
        F->merge_entry(p2, g, 1.0f, NULL, 0.3f, N);
        SAME("merge t only");
    }
#undef RESET
#undef SAME
}

/* The k-NN score kernel (kernels/score.h): the reference is the plain fmaf chain of the
 * contract (checked against a loop written here), and every variant gives its bits, for
 * shapes across the register blocks, panels and depth chunks of the SIMD twins, with
 * columns past nr untouched. */
static void test_score_variants(void **state) {
    (void)state;
    const emb__kernel_table *const *v;
    int nv = variants(&v);
    const int64_t nqs[] = {1, 3, 4, 5, 8, 9, 17, 64};
    const int64_t nrs[] = {1, 7, 24, 25, 31, 32, 33, 48, 49, 100, 2048};
    const int64_t ds[] = {1, 2, 7, 8, 9, 31, 64, 100, 255, 256, 257, 300, 513};
    enum { QMAX = 64, RMAX = 2048, DMAX = 513, PAD = 3 };
    float *q = malloc(sizeof(float) * QMAX * DMAX), *r = malloc(sizeof(float) * RMAX * DMAX);
    float *want = malloc(sizeof(float) * QMAX * (RMAX + PAD));
    float *got = malloc(sizeof(float) * QMAX * (RMAX + PAD));
    float *scratch = malloc(sizeof(float) * emb__score_scratch_floats(QMAX, DMAX));
    assert_non_null(q), assert_non_null(r), assert_non_null(want), assert_non_null(got);
    assert_non_null(scratch);
    int cases = 0;
    for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
        for (size_t qi = 0; qi < sizeof nqs / sizeof nqs[0]; qi++)
            for (size_t ri = 0; ri < sizeof nrs / sizeof nrs[0]; ri++) {
                const int64_t nq = nqs[qi], nr = nrs[ri], d = ds[di], ldc = nr + PAD;
                if (nr == 2048 && (d > 64 || nq > 9)) continue; /* keep the test short */
                randf(q, nq * d);
                randf(r, nr * d);
                /* finite products and sums (no 1e20 * 1e20): exact bits, no NaN payloads */
                for (int64_t i = 0; i < nq * d; i++) q[i] = fminf(fmaxf(q[i], -4.0f), 4.0f);
                for (int64_t i = 0; i < nr * d; i++) r[i] = fminf(fmaxf(r[i], -4.0f), 4.0f);
                for (int64_t i = 0; i < nq * ldc; i++) want[i] = -7.0f;
                emb__score_tile_ref(want, ldc, q, nq, r, nr, d, scratch);
                for (int64_t i = 0; i < nq; i++)
                    for (int64_t j = 0; j < ldc; j++) {
                        float expect = -7.0f; /* past nr: untouched */
                        if (j < nr) {
                            expect = 0.0f;
                            for (int64_t p = 0; p < d; p++)
                                expect = fmaf(q[i * d + p], r[j * d + p], expect);
                        }
                        EMB_ASSERT_EXACT(&want[i * ldc + j], &expect, 1, "score ref");
                    }
                for (int k = 1; k < nv; k++) {
                    for (int64_t i = 0; i < nq * ldc; i++) got[i] = -7.0f;
                    v[k]->score_tile(got, ldc, q, nq, r, nr, d, scratch);
                    EMB_ASSERT_EXACT(got, want, nq * ldc, v[k]->name);
                }
                cases++;
            }
    assert_true(cases > 500);
    free(q), free(r), free(want), free(got), free(scratch);
}

/* normal_'s float32 block transform: the AVX2 twin against emb__normal16_ref on uniforms as
 * the generator makes them (24-bit multiples of 2^-24 in [0, 1)), edges included. */
static void test_normal16_variants(void **state) {
    (void)state;
    enum { NB = 256 };
    static float u[NB * 16], want[NB * 16], got[NB * 16];
    for (int64_t i = 0; i < NB * 16; i++) u[i] = (float)(emb_test_next_u64(&rng) >> 40) * 0x1p-24f;
    const float edges[] = {0.0f,  0x1p-24f,    0.5f,        0.25f, 0.125f, 1.0f - 0x1p-24f,
                           0.75f, 0.70710677f, 0.70710683f, 0.999f};
    for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++) {
        u[k] = edges[k];              /* as u1 candidates */
        u[16 + 8 + k % 8] = edges[k]; /* as u2 */
    }
    const float params[][2] = {{0.0f, 1.0f}, {0.5f, 2.0f}, {-3.0f, 0.01f}, {0.0f, 0.0f}};
    int checked = 0;
    for (size_t pi = 0; pi < sizeof params / sizeof params[0]; pi++) {
        memcpy(want, u, sizeof u);
        emb__normal16_ref(want, NB, params[pi][0], params[pi][1]);
        assert_true(memcmp(want, u, sizeof u) != 0);
#if EMB__X86
        if (emb__cpu_tier() >= EMB__TIER_AVX2) {
            memcpy(got, u, sizeof u);
            emb__normal16_avx2(got, NB, params[pi][0], params[pi][1]);
            EMB_ASSERT_EXACT(got, want, NB * 16, "normal16 avx2");
            checked++;
        }
#endif
    }
    emb_set_kernel_mode(EMB_KERNELS_REF);
    assert_true(emb__normal16_pick() == emb__normal16_ref);
    emb_set_kernel_mode(EMB_KERNELS_AUTO);
#if EMB__X86
    assert_true(emb__normal16_pick() ==
                (emb__cpu_tier() >= EMB__TIER_AVX2 ? emb__normal16_avx2 : emb__normal16_ref));
#endif
    if (!checked) print_message("only the reference block transform runs on this CPU\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mode_selects_table),   cmocka_unit_test(test_backward_rows_variants),
        cmocka_unit_test(test_lookup_rows_variants), cmocka_unit_test(test_norm_variants),
        cmocka_unit_test(test_renorm_variants),      cmocka_unit_test(test_optim_variants),
        cmocka_unit_test(test_normal16_variants),    cmocka_unit_test(test_score_variants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
