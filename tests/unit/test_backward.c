/* Unit tests of the nn.Embedding backward (src/nn/embedding_backward.c, src/nn/sparse_grad.c,
 * src/kernels/backward_ref.c): hand cases of docs/semantics.md §6.1, §6.3, §6.5,
 * summation order, accumulation, signed zeros, padding, scale_grad_by_freq, int32/int64,
 * thread-count independence, sparse gradients (merge on accumulation, coalesce, add to a
 * dense tensor, storage reuse), and every error path: status, message, and that nothing the
 * caller owns changed. Bit-exactness against torch itself is tests/parity/test_backward.py. */
#include "emb_test.h"

#include <stdlib.h>

#if defined(__SANITIZE_ADDRESS__)
/* Let the NOMEM tests see NULL from a huge allocation instead of an ASan report. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "allocator_may_return_null=1";
}
#endif

/* ---- helpers ---------------------------------------------------------------------------- */

static emb_embedding_options opts(int64_t padding_idx, bool scale) {
    emb_embedding_options o = emb_embedding_options_default();
    o.padding_idx = padding_idx;
    o.scale_grad_by_freq = scale;
    return o;
}

/* A [V, D] embedding with weight w[i] = 0.5*i (the backward never reads it). */
static emb_embedding *make_table(int64_t V, int64_t D, int64_t padding_idx, bool scale,
                                 bool freeze) {
    float *w = malloc((size_t)(V * D) * sizeof(float));
    assert_non_null(w);
    for (int64_t i = 0; i < V * D; i++) w[i] = 0.5f * (float)i;
    emb_tensor t;
    int64_t shape[2] = {V, D};
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, w, 2, shape));
    emb_embedding_options o = opts(padding_idx, scale);
    emb_embedding *e = NULL;
    EMB_OK_OR_FAIL(emb_embedding_from_pretrained(&t, freeze, &o, &e));
    free(w);
    return e;
}

/* A deep copy of a sparse gradient's visible state, to check that a failing call changed
 * nothing. */
typedef struct {
    emb_sparse_grad g;
    int64_t idx[64];
    float val[256];
} sparse_snap;

static void take_snap(const emb_sparse_grad *g, sparse_snap *s) {
    assert_true(g->nnz <= 64 && g->nnz * g->dim <= 256);
    s->g = *g;
    if (g->nnz) memcpy(s->idx, g->indices, (size_t)g->nnz * sizeof(int64_t));
    if (g->nnz * g->dim > 0) memcpy(s->val, g->values, (size_t)(g->nnz * g->dim) * sizeof(float));
}

static void assert_snap(const emb_sparse_grad *g, const sparse_snap *s) {
    assert_memory_equal(g, &s->g, sizeof *g);
    if (g->nnz) assert_memory_equal(g->indices, s->idx, (size_t)g->nnz * sizeof(int64_t));
    if (g->nnz * g->dim > 0) EMB_ASSERT_EXACT(g->values, s->val, g->nnz * g->dim, "sparse values");
}

static uint64_t rng_state = 12345;
static float next_float(void) { /* spread over magnitudes so that order matters */
    int e = (int)(emb_test_next_u64(&rng_state) % 16) - 8;
    float m = (float)(emb_test_next_u64(&rng_state) >> 40) / (float)(1 << 24) - 0.5f;
    return ldexpf(m, e);
}

/* ---- dense: hand cases ------------------------------------------------------------------ */

/* The example of docs/semantics.md §6.3: idx=[[1,2,1],[4,1,0]], padding_idx=0,
 * g=arange(12).view(2,3,2). */
static void test_dense_reference_example(void **state) {
    (void)state;
    emb_embedding *e = make_table(5, 2, 0, false, false);
    int64_t idx[6] = {1, 2, 1, 4, 1, 0}, ishape[2] = {2, 3}, gshape[3] = {2, 3, 2};
    int64_t wshape[2] = {5, 2};
    float g[12], gw[10] = {0};
    for (int i = 0; i < 12; i++) g[i] = (float)i;
    emb_tensor ti = emb_test_view(EMB_INT64, idx, 2, ishape),
               tg = emb_test_view(EMB_FLOAT32, g, 3, gshape);
    emb_tensor tw = emb_test_view(EMB_FLOAT32, gw, 2, wshape);
    EMB_OK_OR_FAIL(emb_embedding_backward(e, &ti, &tg, &tw));
    const float want[10] = {0, 0, 0 + 4 + 8, 1 + 5 + 9, 2, 3, 0, 0, 6, 7};
    EMB_ASSERT_EXACT(gw, want, 10, "grad_weight");
    emb_embedding_free(e);
}

/* scale_grad_by_freq: alpha = (float)(1.0 / count), count over all positions (padding
 * included), acc = fmaf(g, alpha, acc) from +0.0. */
static void test_dense_scale_grad_by_freq(void **state) {
    (void)state;
    emb_embedding *e = make_table(5, 2, 0, true, false);
    int64_t idx[6] = {1, 2, 1, 4, 1, 0}, ishape[2] = {2, 3}, gshape[3] = {2, 3, 2};
    int64_t wshape[2] = {5, 2};
    float g[12], gw[10] = {0};
    for (int i = 0; i < 12; i++) g[i] = (float)i + 0.1f;
    emb_tensor ti = emb_test_view(EMB_INT64, idx, 2, ishape),
               tg = emb_test_view(EMB_FLOAT32, g, 3, gshape);
    emb_tensor tw = emb_test_view(EMB_FLOAT32, gw, 2, wshape);
    EMB_OK_OR_FAIL(emb_embedding_backward(e, &ti, &tg, &tw));
    const float third = (float)(1.0 / 3.0);
    float want[10] = {0};
    for (int d = 0; d < 2; d++) {
        want[2 + d] = fmaf(g[8 + d], third, fmaf(g[4 + d], third, fmaf(g[0 + d], third, 0.0f)));
        want[4 + d] = fmaf(g[2 + d], 1.0f, 0.0f);
        want[8 + d] = fmaf(g[6 + d], 1.0f, 0.0f);
    }
    EMB_ASSERT_EXACT(gw, want, 10, "grad_weight");
    emb_embedding_free(e);
}

/* Duplicates are summed in increasing position order: 1e8 + 1 - 1e8 == 0 in float32, while
 * 1e8 - 1e8 + 1 == 1. */
static void test_dense_summation_order(void **state) {
    (void)state;
    emb_embedding *e = make_table(3, 1, EMB_PADDING_NONE, false, false);
    int64_t idx[6] = {2, 2, 2, 1, 1, 1}, ishape[1] = {6}, gshape[2] = {6, 1}, wshape[2] = {3, 1};
    float g[6] = {1e8f, 1.0f, -1e8f, 1e8f, -1e8f, 1.0f}, gw[3] = {0, 0, 0};
    emb_tensor ti = emb_test_view(EMB_INT64, idx, 1, ishape),
               tg = emb_test_view(EMB_FLOAT32, g, 2, gshape);
    emb_tensor tw = emb_test_view(EMB_FLOAT32, gw, 2, wshape);
    EMB_OK_OR_FAIL(emb_embedding_backward(e, &ti, &tg, &tw));
    const float want[3] = {0.0f, 1.0f, 0.0f};
    EMB_ASSERT_EXACT(gw, want, 3, "grad_weight");
    emb_embedding_free(e);
}

/* A call's gradient is summed from +0.0 and then added to grad_weight once (PyTorch's fresh
 * gradient followed by AccumulateGrad's grad += new): 1 + ((0 + 1e8) - 1e8) == 1, whereas
 * adding term by term into the buffer would give (1 + 1e8) - 1e8 == 0. */
static void test_dense_accumulates_once_per_call(void **state) {
    (void)state;
    emb_embedding *e = make_table(2, 1, EMB_PADDING_NONE, false, false);
    int64_t idx[2] = {1, 1}, ishape[1] = {2}, gshape[2] = {2, 1}, wshape[2] = {2, 1};
    float g[2] = {1e8f, -1e8f}, gw[2] = {5.0f, 1.0f};
    emb_tensor ti = emb_test_view(EMB_INT64, idx, 1, ishape),
               tg = emb_test_view(EMB_FLOAT32, g, 2, gshape);
    emb_tensor tw = emb_test_view(EMB_FLOAT32, gw, 2, wshape);
    EMB_OK_OR_FAIL(emb_embedding_backward(e, &ti, &tg, &tw));
    const float want[2] = {5.0f, 1.0f};
    EMB_ASSERT_EXACT(gw, want, 2, "grad_weight after one call");
    float g2[2] = {2.0f, 3.0f};
    tg = emb_test_view(EMB_FLOAT32, g2, 2, gshape);
    EMB_OK_OR_FAIL(emb_embedding_backward(e, &ti, &tg, &tw));
    const float want2[2] = {5.0f, 6.0f};
    EMB_ASSERT_EXACT(gw, want2, 2, "grad_weight after two calls");
    emb_embedding_free(e);
}

/* A lone -0.0 becomes +0.0 (0 + -0 = +0), also when added to an existing -0.0; rows that
 * receive nothing keep their bits (even -0.0 and NaN); inf and NaN propagate. */
static void test_dense_signed_zero_and_specials(void **state) {
    (void)state;
    emb_embedding *e = make_table(4, 2, EMB_PADDING_NONE, false, false);
    int64_t idx[3] = {0, 1, 2}, ishape[1] = {3}, gshape[2] = {3, 2}, wshape[2] = {4, 2};
    float g[6] = {-0.0f, -0.0f, INFINITY, INFINITY, NAN, -INFINITY};
    float gw[8] = {0.0f, -0.0f, 1.0f, -INFINITY, 0.0f, 0.0f, -0.0f, NAN};
    emb_tensor ti = emb_test_view(EMB_INT64, idx, 1, ishape),
               tg = emb_test_view(EMB_FLOAT32, g, 2, gshape);
    emb_tensor tw = emb_test_view(EMB_FLOAT32, gw, 2, wshape);
    EMB_OK_OR_FAIL(emb_embedding_backward(e, &ti, &tg, &tw));
    assert_false(signbit(gw[0]));
    assert_false(signbit(gw[1]));
    assert_true(gw[1] == 0.0f);
    assert_true(isinf(gw[2]) && gw[2] > 0);
    assert_true(isnan(gw[3])); /* -inf + inf */
    assert_true(isnan(gw[4]));
    assert_true(isinf(gw[5]) && gw[5] < 0);
    assert_true(signbit(gw[6]) && gw[6] == 0.0f); /* untouched row 3 */
    assert_true(isnan(gw[7]));
    emb_embedding_free(e);
}

/* The padding row gets nothing; a negative padding_idx counts from the end. */
static void test_dense_padding(void **state) {
    (void)state;
    emb_embedding *e = make_table(4, 2, -1, false, false);
    assert_int_equal(emb_embedding_padding_idx(e), 3);
    int64_t idx[4] = {3, 0, 3, 0}, ishape[1] = {4}, gshape[2] = {4, 2}, wshape[2] = {4, 2};
    float g[8] = {1, 2, 3, 4, 5, 6, 7, 8}, gw[8];
    emb_test_fill(gw, 8, 0.0f);
    emb_tensor ti = emb_test_view(EMB_INT64, idx, 1, ishape),
               tg = emb_test_view(EMB_FLOAT32, g, 2, gshape);
    emb_tensor tw = emb_test_view(EMB_FLOAT32, gw, 2, wshape);
    EMB_OK_OR_FAIL(emb_embedding_backward(e, &ti, &tg, &tw));
    const float want[8] = {3 + 7, 4 + 8, 0, 0, 0, 0, 0, 0};
    EMB_ASSERT_EXACT(gw, want, 8, "grad_weight");
    emb_embedding_free(e);

    /* with scale_grad_by_freq, padding positions still count: row 0 occurs twice among 4
     * positions whatever the padding */
    e = make_table(4, 2, 1, true, false);
    int64_t idx2[4] = {0, 1, 0, 1};
    emb_test_fill(gw, 8, 0.0f);
    ti = emb_test_view(EMB_INT64, idx2, 1, ishape);
    EMB_OK_OR_FAIL(emb_embedding_backward(e, &ti, &tg, &tw));
    const float half = (float)(1.0 / 2.0);
    const float want2[8] = {
        fmaf(5, half, fmaf(1, half, 0)), fmaf(6, half, fmaf(2, half, 0)), 0, 0, 0, 0, 0, 0};
    EMB_ASSERT_EXACT(gw, want2, 8, "grad_weight (scaled)");
    emb_embedding_free(e);
}

/* A 0-d index, empty index tensors and int32 indices. */
static void test_dense_shapes_and_int32(void **state) {
    (void)state;
    emb_embedding *e = make_table(6, 3, EMB_PADDING_NONE, false, false);
    int64_t wshape[2] = {6, 3}, gshape0[1] = {3};
    float gw[18], g[3] = {1.5f, -2.0f, 0.25f};
    emb_test_fill(gw, 18, 0.0f);
    int64_t i0 = 4;
    emb_tensor ti = emb_test_view(EMB_INT64, &i0, 0, NULL),
               tg = emb_test_view(EMB_FLOAT32, g, 1, gshape0);
    emb_tensor tw = emb_test_view(EMB_FLOAT32, gw, 2, wshape);
    EMB_OK_OR_FAIL(emb_embedding_backward(e, &ti, &tg, &tw));
    EMB_ASSERT_EXACT(gw + 12, g, 3, "row 4");

    /* empty: [0] and [2, 0] change nothing */
    float before[18];
    memcpy(before, gw, sizeof gw);
    int64_t es[2] = {2, 0}, egs[3] = {2, 0, 3};
    emb_tensor te = emb_test_view(EMB_INT64, NULL, 2, es),
               teg = emb_test_view(EMB_FLOAT32, NULL, 3, egs);
    EMB_OK_OR_FAIL(emb_embedding_backward(e, &te, &teg, &tw));
    EMB_ASSERT_EXACT(gw, before, 18, "unchanged by an empty batch");

    /* int32 gives the same bits as int64 */
    enum { N = 300 };
    int64_t i64[N];
    int32_t i32[N];
    float gg[N * 3];
    for (int i = 0; i < N; i++) {
        i64[i] = (int64_t)(emb_test_next_u64(&rng_state) % 6);
        i32[i] = (int32_t)i64[i];
    }
    for (int i = 0; i < N * 3; i++) gg[i] = next_float();
    float a[18] = {0}, b[18] = {0};
    int64_t ns[1] = {N}, ngs[2] = {N, 3};
    emb_tensor g2 = emb_test_view(EMB_FLOAT32, gg, 2, ngs);
    emb_tensor ta = emb_test_view(EMB_FLOAT32, a, 2, wshape),
               tb = emb_test_view(EMB_FLOAT32, b, 2, wshape);
    emb_tensor t64 = emb_test_view(EMB_INT64, i64, 1, ns),
               t32 = emb_test_view(EMB_INT32, i32, 1, ns);
    EMB_OK_OR_FAIL(emb_embedding_backward(e, &t64, &g2, &ta));
    EMB_OK_OR_FAIL(emb_embedding_backward(e, &t32, &g2, &tb));
    EMB_ASSERT_EXACT(b, a, 18, "int32 vs int64");
    emb_embedding_free(e);
}

/* Same bits for 1, 2, 3 and 4 threads on a skewed batch, and with the reference kernels. */
static void test_dense_thread_count_independent(void **state) {
    (void)state;
    const int64_t V = 2000, D = 8, N = 200000; /* large enough for the parallel bucketing */
    for (int scale = 0; scale < 2; scale++) {
        emb_embedding *e = make_table(V, D, 7, scale, false);
        int64_t *idx = malloc((size_t)N * sizeof *idx);
        float *g = malloc((size_t)(N * D) * sizeof *g);
        float *ref = calloc((size_t)(V * D), sizeof *ref);
        float *got = malloc((size_t)(V * D) * sizeof *got);
        assert_true(idx && g && ref && got);
        for (int64_t i = 0; i < N; i++) {
            uint64_t r = emb_test_next_u64(&rng_state);
            idx[i] = (int64_t)((r % 3 == 0) ? r % 10 : (r >> 8) % (uint64_t)V);
        }
        for (int64_t i = 0; i < N * D; i++) g[i] = next_float();
        int64_t is[1] = {N}, gs[2] = {N, D}, ws[2] = {V, D};
        emb_tensor ti = emb_test_view(EMB_INT64, idx, 1, is),
                   tg = emb_test_view(EMB_FLOAT32, g, 2, gs);
        emb_tensor tr = emb_test_view(EMB_FLOAT32, ref, 2, ws),
                   tgot = emb_test_view(EMB_FLOAT32, got, 2, ws);
        emb_set_num_threads(1);
        EMB_OK_OR_FAIL(emb_embedding_backward(e, &ti, &tg, &tr));
        for (int nt = 2; nt <= 4; nt++) {
            emb_set_num_threads(nt);
            memset(got, 0, (size_t)(V * D) * sizeof *got);
            EMB_OK_OR_FAIL(emb_embedding_backward(e, &ti, &tg, &tgot));
            EMB_ASSERT_EXACT(got, ref, V * D, "threads");
        }
        /* the reference kernels give the same bits as the fastest variant */
        emb_set_kernel_mode(EMB_KERNELS_REF);
        memset(got, 0, (size_t)(V * D) * sizeof *got);
        EMB_OK_OR_FAIL(emb_embedding_backward(e, &ti, &tg, &tgot));
        emb_set_kernel_mode(EMB_KERNELS_AUTO);
        EMB_ASSERT_EXACT(got, ref, V * D, "reference kernels");
        emb_set_num_threads(0);
        free(idx);
        free(g);
        free(ref);
        free(got);
        emb_embedding_free(e);
    }
}

/* ---- dense: errors ---------------------------------------------------------------------- */

/* The accumulating and the overwriting dense backward refuse the same inputs with the same
 * errors, and leave grad_weight unchanged. */
typedef emb_status (*dense_backward_fn)(const emb_embedding *, const emb_tensor *,
                                        const emb_tensor *, emb_tensor *);

static void check_dense_errors(dense_backward_fn bw) {
    emb_embedding *e = make_table(5, 2, EMB_PADDING_NONE, false, false);
    emb_embedding *frozen = make_table(5, 2, EMB_PADDING_NONE, false, true);
    int64_t idx[3] = {0, 4, 2}, ishape[1] = {3}, gshape[2] = {3, 2}, wshape[2] = {5, 2};
    float g[6] = {1, 2, 3, 4, 5, 6}, gw[10], keep[10];
    for (int i = 0; i < 10; i++) keep[i] = gw[i] = (float)i - 4.5f;
    emb_tensor ti = emb_test_view(EMB_INT64, idx, 1, ishape),
               tg = emb_test_view(EMB_FLOAT32, g, 2, gshape);
    emb_tensor tw = emb_test_view(EMB_FLOAT32, gw, 2, wshape);

    EMB_EXPECT_ERR(bw(NULL, &ti, &tg, &tw), EMB_ERR_NULL, "embedding must not be NULL");
    EMB_EXPECT_ERR(bw(e, NULL, &tg, &tw), EMB_ERR_NULL, "indices must not be NULL");
    EMB_EXPECT_ERR(bw(e, &ti, NULL, &tw), EMB_ERR_NULL, "grad_output must not be NULL");
    EMB_EXPECT_ERR(bw(e, &ti, &tg, NULL), EMB_ERR_NULL, "grad_weight must not be NULL");
    EMB_EXPECT_ERR(bw(frozen, &ti, &tg, &tw), EMB_ERR_STATE,
                   "the embedding's weight does not require grad (created with freeze=true)");
    emb_embedding_set_requires_grad(e, false);
    EMB_EXPECT_ERR(bw(e, &ti, &tg, &tw), EMB_ERR_STATE, "does not require grad");
    emb_embedding_set_requires_grad(e, true);

    /* indices */
    emb_tensor bad = ti;
    bad.dtype = EMB_FLOAT32;
    EMB_EXPECT_ERR(bw(e, &bad, &tg, &tw), EMB_ERR_DTYPE,
                   "Expected tensor for argument #1 'indices' to have one of the following "
                   "scalar types: Long, Int; but got torch.FloatTensor instead (while checking "
                   "arguments for embedding_backward)");
    bad = ti;
    bad.dtype = EMB_INT16;
    EMB_EXPECT_ERR(bw(e, &bad, &tg, &tw), EMB_ERR_DTYPE, "torch.ShortTensor");
    bad = ti;
    bad.ndim = 9;
    for (int i = 0; i < 9; i++) bad.shape[i] = 1;
    EMB_EXPECT_ERR(bw(e, &bad, &tg, &tw), EMB_ERR_SHAPE,
                   "indices has 9 dimensions; at most 8 are supported");
    bad = ti;
    bad.data = NULL;
    EMB_EXPECT_ERR(bw(e, &bad, &tg, &tw), EMB_ERR_NULL,
                   "indices has 3 elements but its data is NULL");
    bad = ti;
    bad.shape[0] = -1;
    EMB_EXPECT_ERR(bw(e, &bad, &tg, &tw), EMB_ERR_SHAPE, "negative dimension");

    /* grad_output */
    bad = tg;
    bad.dtype = EMB_FLOAT64;
    EMB_EXPECT_ERR(bw(e, &ti, &bad, &tw), EMB_ERR_DTYPE,
                   "grad_output must be float32, got float64");
    bad = tg;
    bad.shape[1] = 3;
    EMB_EXPECT_ERR(bw(e, &ti, &bad, &tw), EMB_ERR_SHAPE,
                   "grad_output has shape [3, 3], expected [3, 2]");
    bad = tg;
    bad.ndim = 1;
    EMB_EXPECT_ERR(bw(e, &ti, &bad, &tw), EMB_ERR_SHAPE,
                   "grad_output has shape [3], expected [3, 2]");
    bad = tg;
    bad.data = NULL;
    EMB_EXPECT_ERR(bw(e, &ti, &bad, &tw), EMB_ERR_NULL,
                   "grad_output has 6 elements but its data is NULL");

    /* grad_weight */
    bad = tw;
    bad.dtype = EMB_INT32;
    EMB_EXPECT_ERR(bw(e, &ti, &tg, &bad), EMB_ERR_DTYPE, "grad_weight must be float32, got int32");
    bad = tw;
    bad.shape[0] = 4;
    EMB_EXPECT_ERR(bw(e, &ti, &tg, &bad), EMB_ERR_SHAPE,
                   "grad_weight has shape [4, 2], expected [5, 2]");
    bad = tw;
    bad.data = NULL;
    EMB_EXPECT_ERR(bw(e, &ti, &tg, &bad), EMB_ERR_NULL,
                   "grad_weight has 10 elements but its data is NULL");

    /* index range, int64 and int32: checked before anything is written */
    idx[2] = 5;
    EMB_EXPECT_ERR(bw(e, &ti, &tg, &tw), EMB_ERR_INDEX,
                   "index 5 at position 2 is out of range for an embedding with 5 rows "
                   "(valid: [0, 5))");
    idx[2] = 2;
    idx[1] = -1;
    EMB_EXPECT_ERR(bw(e, &ti, &tg, &tw), EMB_ERR_INDEX, "index -1 at position 1 is out of range");
    int32_t i32[3] = {0, 1, 7};
    emb_tensor t32 = emb_test_view(EMB_INT32, i32, 1, ishape);
    EMB_EXPECT_ERR(bw(e, &t32, &tg, &tw), EMB_ERR_INDEX,
                   "index 7 at position 2 is out of range for an embedding with 5 rows");

    EMB_ASSERT_EXACT(gw, keep, 10, "grad_weight after failed calls");
    emb_embedding_free(e);
    emb_embedding_free(frozen);
}

static void test_dense_errors(void **state) {
    (void)state;
    check_dense_errors(emb_embedding_backward);
    check_dense_errors(emb_embedding_backward_overwrite);
}

/* ---- sparse ----------------------------------------------------------------------------- */

/* The example of docs/semantics.md §6.3: indices=[[1,2,1,4,1]],
 * values=[[0,1],[2,3],[4,5],[6,7],[8,9]]. */
static void test_sparse_reference_example(void **state) {
    (void)state;
    emb_embedding *e = make_table(5, 2, 0, false, false);
    int64_t idx[6] = {1, 2, 1, 4, 1, 0}, ishape[2] = {2, 3}, gshape[3] = {2, 3, 2};
    float g[12];
    for (int i = 0; i < 12; i++) g[i] = (float)i;
    emb_tensor ti = emb_test_view(EMB_INT64, idx, 2, ishape),
               tg = emb_test_view(EMB_FLOAT32, g, 3, gshape);
    emb_sparse_grad sg;
    EMB_OK_OR_FAIL(emb_sparse_grad_init(&sg, 5, 2));
    assert_true(sg.coalesced);
    assert_int_equal(sg.nnz, 0);
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &ti, &tg, &sg));
    assert_int_equal(sg.nnz, 5);
    assert_false(sg.coalesced);
    const int64_t want_idx[5] = {1, 2, 1, 4, 1};
    assert_memory_equal(sg.indices, want_idx, sizeof want_idx);
    EMB_ASSERT_EXACT(sg.values, g, 10, "values");

    /* dense equivalent */
    float dense[10] = {0};
    int64_t ds[2] = {5, 2};
    emb_tensor td = emb_test_view(EMB_FLOAT32, dense, 2, ds);
    EMB_OK_OR_FAIL(emb_sparse_grad_add_to_dense(&sg, &td));
    const float want[10] = {0, 0, 0 + 4 + 8, 1 + 5 + 9, 2, 3, 0, 0, 6, 7};
    EMB_ASSERT_EXACT(dense, want, 10, "to dense");

    /* coalesce: rows ascending, sums in (here stable) sorted order */
    EMB_OK_OR_FAIL(emb_sparse_grad_coalesce(&sg));
    assert_true(sg.coalesced);
    assert_int_equal(sg.nnz, 3);
    assert_int_equal(sg.capacity, 3);
    const int64_t cidx[3] = {1, 2, 4};
    const float cval[6] = {12, 15, 2, 3, 6, 7};
    assert_memory_equal(sg.indices, cidx, sizeof cidx);
    EMB_ASSERT_EXACT(sg.values, cval, 6, "coalesced values");
    emb_sparse_grad_release(&sg);
    assert_null(sg.indices);
    assert_int_equal(sg.capacity, 0);
    emb_embedding_free(e);
}

/* int32 indices, padding everywhere, fresh-gradient flags, storage reuse and growth. */
static void test_sparse_flags_and_storage(void **state) {
    (void)state;
    emb_embedding *e = make_table(6, 1, 5, false, false);
    emb_sparse_grad sg;
    EMB_OK_OR_FAIL(emb_sparse_grad_init(&sg, 6, 1));
    int64_t s1[1] = {1}, gs1[2] = {1, 1};
    int32_t one = 3;
    float g1 = -0.0f;
    emb_tensor ti = emb_test_view(EMB_INT32, &one, 1, s1),
               tg = emb_test_view(EMB_FLOAT32, &g1, 2, gs1);
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &ti, &tg, &sg));
    assert_int_equal(sg.nnz, 1);
    assert_true(sg.coalesced); /* PyTorch: fewer than 2 entries */
    assert_int_equal(sg.indices[0], 3);
    assert_true(signbit(sg.values[0])); /* a bitwise copy */
    assert_int_equal(sg.capacity, 1);

    /* all padding: nothing changes */
    int32_t pads[3] = {5, 5, 5};
    float g3[3] = {1, 2, 3};
    int64_t s3[1] = {3}, gs3[2] = {3, 1};
    emb_tensor tp = emb_test_view(EMB_INT32, pads, 1, s3),
               tg3 = emb_test_view(EMB_FLOAT32, g3, 2, gs3);
    sparse_snap snap;
    take_snap(&sg, &snap);
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &tp, &tg3, &sg));
    assert_snap(&sg, &snap);

    /* clear keeps the storage; a larger batch grows it geometrically */
    emb_sparse_grad_clear(&sg);
    assert_int_equal(sg.nnz, 0);
    assert_true(sg.coalesced);
    int32_t three[3] = {4, 0, 4};
    emb_tensor t3 = emb_test_view(EMB_INT32, three, 1, s3);
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &t3, &tg3, &sg));
    assert_int_equal(sg.nnz, 3);
    assert_int_equal(sg.capacity, 3);
    assert_false(sg.coalesced);
    int64_t *storage = sg.indices;
    emb_sparse_grad_clear(&sg);
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &ti, &tg, &sg));
    assert_ptr_equal(sg.indices, storage); /* reused */
    emb_sparse_grad_clear(&sg);
    int32_t seven[7] = {0, 1, 2, 3, 4, 0, 1};
    float g7[7] = {1, 2, 3, 4, 5, 6, 7};
    int64_t s7[1] = {7}, gs7[2] = {7, 1};
    emb_tensor t7 = emb_test_view(EMB_INT32, seven, 1, s7),
               tg7 = emb_test_view(EMB_FLOAT32, g7, 2, gs7);
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &t7, &tg7, &sg));
    assert_int_equal(sg.nnz, 7);
    assert_int_equal(sg.capacity, 7);
    emb_sparse_grad_clear(&sg);
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &t7, &tg7, &sg));
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &t7, &tg7, &sg)); /* merge */
    emb_sparse_grad_clear(&sg);
    int32_t many[20];
    float g20[20];
    for (int i = 0; i < 20; i++) {
        many[i] = i % 5;
        g20[i] = (float)i;
    }
    int64_t s20[1] = {20}, gs20[2] = {20, 1};
    emb_tensor t20 = emb_test_view(EMB_INT32, many, 1, s20),
               tg20 = emb_test_view(EMB_FLOAT32, g20, 2, gs20);
    assert_int_equal(sg.capacity, 14); /* the merge above allocated 7 + 7 */
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &t20, &tg20, &sg));
    assert_int_equal(sg.nnz, 20);
    assert_int_equal(sg.capacity, 28); /* geometric growth: max(20, 2 * 14) */

    emb_sparse_grad_release(&sg);
    emb_sparse_grad_release(&sg); /* twice is fine */
    emb_sparse_grad_release(NULL);
    emb_sparse_grad_clear(NULL);
    assert_int_equal(sg.num_rows, 6); /* still an empty gradient of the same shape */
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &t3, &tg3, &sg));
    assert_int_equal(sg.nnz, 3);
    emb_sparse_grad_release(&sg);
    emb_embedding_free(e);
}

/* Accumulating into a non-empty gradient is PyTorch's in-place sparse add: one merge pass
 * over both entry lists; equal heads become one entry (0 + old) + new. */
static void test_sparse_accumulation_merges(void **state) {
    (void)state;
    emb_embedding *e = make_table(6, 1, EMB_PADDING_NONE, false, false);
    emb_sparse_grad sg;
    EMB_OK_OR_FAIL(emb_sparse_grad_init(&sg, 6, 1));
    int64_t s2[1] = {2}, gs2[2] = {2, 1};
    int64_t a[2] = {3, 1}, b[2] = {2, 0};
    float ga[2] = {-0.0f, 10.0f}, gb[2] = {20.0f, 21.0f};
    emb_tensor ta = emb_test_view(EMB_INT64, a, 1, s2),
               tga = emb_test_view(EMB_FLOAT32, ga, 2, gs2);
    emb_tensor tb = emb_test_view(EMB_INT64, b, 1, s2),
               tgb = emb_test_view(EMB_FLOAT32, gb, 2, gs2);
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &ta, &tga, &sg));
    assert_true(signbit(sg.values[0]));
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &tb, &tgb, &sg));
    /* heads 3 vs 2 -> 2; 3 vs 0 -> 0; then 3, 1 */
    const int64_t widx[4] = {2, 0, 3, 1};
    const float wval[4] = {20.0f, 21.0f, 0.0f, 10.0f};
    assert_int_equal(sg.nnz, 4);
    assert_memory_equal(sg.indices, widx, sizeof widx);
    EMB_ASSERT_EXACT(sg.values, wval, 4, "merged values");
    assert_false(signbit(sg.values[2])); /* 0 + -0 = +0 */
    assert_false(sg.coalesced);

    /* two single-entry (coalesced) gradients of the same row merge into one entry */
    emb_sparse_grad_clear(&sg);
    int64_t s1[1] = {1}, gs1[2] = {1, 1}, r = 4;
    float x = 1e8f, y = 1.0f;
    emb_tensor tr = emb_test_view(EMB_INT64, &r, 1, s1),
               tx = emb_test_view(EMB_FLOAT32, &x, 2, gs1);
    emb_tensor ty = emb_test_view(EMB_FLOAT32, &y, 2, gs1);
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &tr, &tx, &sg));
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &tr, &ty, &sg));
    assert_int_equal(sg.nnz, 1);
    assert_true(sg.coalesced);
    assert_int_equal(sg.indices[0], 4);
    assert_true(sg.values[0] == 1e8f + 1.0f);
    /* ... and with another row stay sorted and coalesced */
    r = 1;
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &tr, &ty, &sg));
    assert_int_equal(sg.nnz, 2);
    assert_true(sg.coalesced);
    assert_int_equal(sg.indices[0], 1);
    assert_int_equal(sg.indices[1], 4);
    emb_sparse_grad_release(&sg);
    emb_embedding_free(e);
}

/* coalesce: order-sensitive sums (stable up to 16 entries), exact sums above 16, no-ops. */
static void test_coalesce(void **state) {
    (void)state;
    emb_sparse_grad sg;
    EMB_OK_OR_FAIL(emb_sparse_grad_init(&sg, 4, 1));
    emb_embedding *e = make_table(4, 1, EMB_PADDING_NONE, false, false);
    int64_t rows[4] = {2, 0, 2, 2}, s4[1] = {4}, gs4[2] = {4, 1};
    float vals[4] = {1e8f, 5.0f, 1.0f, -1e8f};
    emb_tensor ti = emb_test_view(EMB_INT64, rows, 1, s4),
               tg = emb_test_view(EMB_FLOAT32, vals, 2, gs4);
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &ti, &tg, &sg));
    EMB_OK_OR_FAIL(emb_sparse_grad_coalesce(&sg));
    assert_int_equal(sg.nnz, 2);
    assert_int_equal(sg.indices[0], 0);
    assert_int_equal(sg.indices[1], 2);
    assert_true(sg.values[0] == 5.0f);
    assert_true(sg.values[1] == 0.0f); /* (1e8 + 1) - 1e8 in position order */
    sparse_snap snap;
    take_snap(&sg, &snap);
    EMB_OK_OR_FAIL(emb_sparse_grad_coalesce(&sg)); /* already coalesced: nothing to do */
    assert_snap(&sg, &snap);
    emb_sparse_grad_release(&sg);
    emb_embedding_free(e);

    /* 100 entries over 7 rows, integer values: exact sums whatever the order */
    e = make_table(9, 2, EMB_PADDING_NONE, false, false);
    EMB_OK_OR_FAIL(emb_sparse_grad_init(&sg, 9, 2));
    int64_t r100[100], s100[1] = {100}, gs100[2] = {100, 2};
    float v100[200], sums[9][2] = {{0}};
    for (int i = 0; i < 100; i++) {
        r100[i] = (i * 5) % 7 + 1;
        v100[2 * i] = (float)i;
        v100[2 * i + 1] = (float)(-3 * i);
        sums[r100[i]][0] += (float)i;
        sums[r100[i]][1] += (float)(-3 * i);
    }
    ti = emb_test_view(EMB_INT64, r100, 1, s100);
    tg = emb_test_view(EMB_FLOAT32, v100, 2, gs100);
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &ti, &tg, &sg));
    EMB_OK_OR_FAIL(emb_sparse_grad_coalesce(&sg));
    assert_int_equal(sg.nnz, 7);
    for (int u = 0; u < 7; u++) {
        assert_int_equal(sg.indices[u], u + 1);
        EMB_ASSERT_EXACT(sg.values + 2 * u, sums[u + 1], 2, "row sum");
    }
    /* a single uncoalesced entry (flag cleared by hand) is flagged and kept bit for bit */
    emb_sparse_grad_clear(&sg);
    int64_t one_row = 3, s1[1] = {1}, gs1[2] = {1, 2};
    float one_val[2] = {-0.0f, 7.0f};
    ti = emb_test_view(EMB_INT64, &one_row, 1, s1);
    tg = emb_test_view(EMB_FLOAT32, one_val, 2, gs1);
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &ti, &tg, &sg));
    sg.coalesced = false;
    EMB_OK_OR_FAIL(emb_sparse_grad_coalesce(&sg));
    assert_true(sg.coalesced);
    assert_int_equal(sg.nnz, 1);
    assert_int_equal(sg.indices[0], 3);
    EMB_ASSERT_EXACT(sg.values, one_val, 2, "single entry");
    emb_sparse_grad_release(&sg);
    emb_embedding_free(e);
}

/* dense.add_(sparse) applies the entries one after the other: ((1 + 1e8) + 1) - 1e8 == 0,
 * where adding the coalesced sum would give 1 + ((1e8 + 1) - 1e8) == 1. Column-split
 * threads give the same bits. */
static void test_add_to_dense(void **state) {
    (void)state;
    emb_embedding *e = make_table(3, 40, EMB_PADDING_NONE, false, false);
    emb_sparse_grad sg;
    EMB_OK_OR_FAIL(emb_sparse_grad_init(&sg, 3, 40));
    int64_t rows[3] = {1, 1, 1}, s3[1] = {3}, gs3[2] = {3, 40}, ds[2] = {3, 40};
    float vals[120];
    for (int d = 0; d < 40; d++) {
        vals[d] = 1e8f;
        vals[40 + d] = 1.0f;
        vals[80 + d] = -1e8f;
    }
    emb_tensor ti = emb_test_view(EMB_INT64, rows, 1, s3),
               tg = emb_test_view(EMB_FLOAT32, vals, 2, gs3);
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &ti, &tg, &sg));
    float dense[120], want[120];
    for (int i = 0; i < 120; i++) dense[i] = want[i] = 1.0f;
    for (int d = 0; d < 40; d++) want[40 + d] = 0.0f;
    emb_tensor td = emb_test_view(EMB_FLOAT32, dense, 2, ds);
    EMB_OK_OR_FAIL(emb_sparse_grad_add_to_dense(&sg, &td));
    EMB_ASSERT_EXACT(dense, want, 120, "dense");
    emb_sparse_grad_release(&sg);
    emb_embedding_free(e);

    /* threads: a wide table with many entries */
    const int64_t V = 50, D = 300, N = 4000;
    e = make_table(V, D, EMB_PADDING_NONE, false, false);
    EMB_OK_OR_FAIL(emb_sparse_grad_init(&sg, V, D));
    int64_t *idx = malloc((size_t)N * sizeof *idx);
    float *g = malloc((size_t)(N * D) * sizeof *g);
    float *a = calloc((size_t)(V * D), sizeof *a), *b = calloc((size_t)(V * D), sizeof *b);
    assert_true(idx && g && a && b);
    for (int64_t i = 0; i < N; i++) idx[i] = (int64_t)(emb_test_next_u64(&rng_state) % (uint64_t)V);
    for (int64_t i = 0; i < N * D; i++) g[i] = next_float();
    int64_t is[1] = {N}, gs[2] = {N, D}, ws[2] = {V, D};
    emb_tensor tin = emb_test_view(EMB_INT64, idx, 1, is),
               tgn = emb_test_view(EMB_FLOAT32, g, 2, gs);
    emb_tensor ta = emb_test_view(EMB_FLOAT32, a, 2, ws), tb = emb_test_view(EMB_FLOAT32, b, 2, ws);
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &tin, &tgn, &sg));
    emb_set_num_threads(1);
    EMB_OK_OR_FAIL(emb_sparse_grad_add_to_dense(&sg, &ta));
    emb_set_num_threads(3);
    EMB_OK_OR_FAIL(emb_sparse_grad_add_to_dense(&sg, &tb));
    emb_set_num_threads(0);
    EMB_ASSERT_EXACT(b, a, V * D, "threads");
    /* row 0 by hand: its entries added one after the other, in entry order */
    float row0[300] = {0};
    for (int64_t i = 0; i < N; i++)
        if (idx[i] == 0)
            for (int d = 0; d < D; d++) row0[d] = row0[d] + g[i * D + d];
    EMB_ASSERT_EXACT(a, row0, D, "row 0");
    free(idx);
    free(g);
    free(a);
    free(b);
    emb_sparse_grad_release(&sg);
    emb_embedding_free(e);
}

/* ---- sparse: errors --------------------------------------------------------------------- */

static void test_sparse_backward_errors(void **state) {
    (void)state;
    emb_embedding *e = make_table(5, 2, EMB_PADDING_NONE, false, false);
    emb_embedding *scaled = make_table(5, 2, EMB_PADDING_NONE, true, false);
    emb_embedding *frozen = make_table(5, 2, EMB_PADDING_NONE, false, true);
    int64_t idx[3] = {0, 4, 2}, ishape[1] = {3}, gshape[2] = {3, 2};
    float g[6] = {1, 2, 3, 4, 5, 6};
    emb_tensor ti = emb_test_view(EMB_INT64, idx, 1, ishape),
               tg = emb_test_view(EMB_FLOAT32, g, 2, gshape);
    emb_sparse_grad sg;
    EMB_OK_OR_FAIL(emb_sparse_grad_init(&sg, 5, 2));
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &ti, &tg, &sg)); /* some content */
    sparse_snap snap;
    take_snap(&sg, &snap);

    EMB_EXPECT_ERR(emb_embedding_backward_sparse(NULL, &ti, &tg, &sg), EMB_ERR_NULL,
                   "embedding must not be NULL");
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(e, NULL, &tg, &sg), EMB_ERR_NULL,
                   "indices must not be NULL");
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(e, &ti, NULL, &sg), EMB_ERR_NULL,
                   "grad_output must not be NULL");
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(e, &ti, &tg, NULL), EMB_ERR_NULL,
                   "grad must not be NULL");
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(frozen, &ti, &tg, &sg), EMB_ERR_STATE,
                   "the embedding's weight does not require grad (created with freeze=true)");
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(scaled, &ti, &tg, &sg), EMB_ERR_UNSUPPORTED,
                   "embedding_backward: scale_grad_by_freq not supported with sparse "
                   "gradients");
    emb_tensor bad = ti;
    bad.dtype = EMB_UINT8;
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(e, &bad, &tg, &sg), EMB_ERR_DTYPE,
                   "but got torch.ByteTensor instead (while checking arguments for "
                   "embedding_backward)");
    bad = tg;
    bad.shape[0] = 2;
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(e, &ti, &bad, &sg), EMB_ERR_SHAPE,
                   "grad_output has shape [2, 2], expected [3, 2]");
    bad = tg;
    bad.dtype = EMB_FLOAT16;
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(e, &ti, &bad, &sg), EMB_ERR_DTYPE,
                   "grad_output must be float32, got float16");

    emb_sparse_grad other;
    EMB_OK_OR_FAIL(emb_sparse_grad_init(&other, 5, 3));
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(e, &ti, &tg, &other), EMB_ERR_SHAPE,
                   "grad is a sparse gradient of shape [5, 3], expected [5, 2] (the "
                   "embedding's weight)");
    assert_int_equal(other.nnz, 0);
    EMB_OK_OR_FAIL(emb_sparse_grad_init(&other, 6, 2));
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(e, &ti, &tg, &other), EMB_ERR_SHAPE,
                   "grad is a sparse gradient of shape [6, 2], expected [5, 2]");
    assert_int_equal(other.nnz, 0);

    emb_sparse_grad broken = sg;
    broken.nnz = broken.capacity + 1;
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(e, &ti, &tg, &broken), EMB_ERR_INVALID,
                   "grad is not a valid sparse gradient");
    broken = sg;
    broken.indices = NULL;
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(e, &ti, &tg, &broken), EMB_ERR_INVALID,
                   "but no storage");

    idx[1] = 5;
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(e, &ti, &tg, &sg), EMB_ERR_INDEX,
                   "index 5 at position 1 is out of range for an embedding with 5 rows "
                   "(valid: [0, 5))");
    idx[1] = -3;
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(e, &ti, &tg, &sg), EMB_ERR_INDEX,
                   "index -3 at position 1");

    assert_snap(&sg, &snap);
    emb_sparse_grad_release(&sg);
    emb_embedding_free(e);
    emb_embedding_free(scaled);
    emb_embedding_free(frozen);
}

static void test_sparse_grad_api_errors(void **state) {
    (void)state;
    emb_sparse_grad sg, keep;
    memset(&sg, 0x5A, sizeof sg);
    keep = sg;
    EMB_EXPECT_ERR(emb_sparse_grad_init(NULL, 3, 2), EMB_ERR_NULL, "grad must not be NULL");
    EMB_EXPECT_ERR(emb_sparse_grad_init(&sg, -1, 2), EMB_ERR_INVALID,
                   "a sparse gradient needs non-negative sizes, got [-1, 2]");
    EMB_EXPECT_ERR(emb_sparse_grad_init(&sg, 3, -4), EMB_ERR_INVALID, "got [3, -4]");
    assert_memory_equal(&sg, &keep, sizeof sg);

    EMB_OK_OR_FAIL(emb_sparse_grad_init(&sg, 3, 2));
    EMB_EXPECT_ERR(emb_sparse_grad_coalesce(NULL), EMB_ERR_NULL, "grad must not be NULL");
    emb_sparse_grad broken = sg;
    broken.coalesced = false;
    broken.nnz = 2; /* more entries than capacity 0 */
    EMB_EXPECT_ERR(emb_sparse_grad_coalesce(&broken), EMB_ERR_INVALID,
                   "grad is not a valid sparse gradient (num_rows 3, dim 2, nnz 2, "
                   "capacity 0)");
    broken = sg;
    broken.dim = -1;
    EMB_EXPECT_ERR(emb_sparse_grad_coalesce(&broken), EMB_ERR_INVALID,
                   "not a valid sparse gradient");

    /* add_to_dense */
    float dense[6] = {1, 2, 3, 4, 5, 6}, keepd[6];
    memcpy(keepd, dense, sizeof dense);
    int64_t ds[2] = {3, 2};
    emb_tensor td = emb_test_view(EMB_FLOAT32, dense, 2, ds);
    EMB_EXPECT_ERR(emb_sparse_grad_add_to_dense(NULL, &td), EMB_ERR_NULL, "grad must not be NULL");
    EMB_EXPECT_ERR(emb_sparse_grad_add_to_dense(&sg, NULL), EMB_ERR_NULL, "dense must not be NULL");
    EMB_EXPECT_ERR(emb_sparse_grad_add_to_dense(&broken, &td), EMB_ERR_INVALID,
                   "not a valid sparse gradient");
    emb_tensor bad = td;
    bad.dtype = EMB_FLOAT64;
    EMB_EXPECT_ERR(emb_sparse_grad_add_to_dense(&sg, &bad), EMB_ERR_DTYPE,
                   "dense must be float32, got float64");
    bad = td;
    bad.shape[1] = 3;
    EMB_EXPECT_ERR(emb_sparse_grad_add_to_dense(&sg, &bad), EMB_ERR_SHAPE,
                   "dense has shape [3, 3], expected [3, 2]");
    bad = td;
    bad.data = NULL;
    EMB_EXPECT_ERR(emb_sparse_grad_add_to_dense(&sg, &bad), EMB_ERR_NULL,
                   "dense has 6 elements but its data is NULL");

    /* an entry whose row is out of range (fields written by hand) */
    emb_embedding *e = make_table(3, 2, EMB_PADDING_NONE, false, false);
    int64_t idx[2] = {0, 2}, is[1] = {2}, gs[2] = {2, 2};
    float g[4] = {1, 1, 1, 1};
    emb_tensor ti = emb_test_view(EMB_INT64, idx, 1, is), tg = emb_test_view(EMB_FLOAT32, g, 2, gs);
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &ti, &tg, &sg));
    sg.indices[1] = 3;
    EMB_EXPECT_ERR(emb_sparse_grad_add_to_dense(&sg, &td), EMB_ERR_INDEX,
                   "grad entry 1 has row 3, out of range for 3 rows (valid: [0, 3))");
    sg.indices[1] = -1;
    EMB_EXPECT_ERR(emb_sparse_grad_add_to_dense(&sg, &td), EMB_ERR_INDEX,
                   "grad entry 1 has row -1");
    EMB_ASSERT_EXACT(dense, keepd, 6, "dense after failed calls");
    emb_sparse_grad_release(&sg);
    emb_embedding_free(e);
}

/* Allocation failures and size overflows leave the gradient unchanged. The sizes come from
 * a gradient whose nnz/capacity fields claim a huge storage (set by hand: no real gradient
 * can reach them); the failing allocation happens before any entry is read. */
static void test_sparse_nomem_and_overflow(void **state) {
    (void)state;
    emb_embedding *e = make_table(4, 2, EMB_PADDING_NONE, false, false);
    int64_t idx[2] = {1, 3}, is[1] = {2}, gs[2] = {2, 2};
    float g[4] = {1, 2, 3, 4};
    emb_tensor ti = emb_test_view(EMB_INT64, idx, 1, is), tg = emb_test_view(EMB_FLOAT32, g, 2, gs);
    int64_t dummy_idx[1] = {0};
    float dummy_val[2] = {0, 0};
    emb_sparse_grad huge;
    EMB_OK_OR_FAIL(emb_sparse_grad_init(&huge, 4, 2));
    huge.indices = dummy_idx;
    huge.values = dummy_val;
    /* 2^45 entries need 2^48-byte buffers: more than an x86-64 process can map, so the
     * allocation fails even with overcommit */
    huge.nnz = huge.capacity = (int64_t)1 << 45;
    huge.coalesced = false;
    emb_sparse_grad keep = huge;

    /* coalesce needs 3 * 2^45 int64 of sort buffers */
    EMB_EXPECT_ERR(emb_sparse_grad_coalesce(&huge), EMB_ERR_NOMEM,
                   "coalesce: cannot allocate the sort buffers for 35184372088832 entries");
    assert_memory_equal(&huge, &keep, sizeof huge);
    /* accumulating 2 entries into it needs 2^45 + 2 entries */
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(e, &ti, &tg, &huge), EMB_ERR_NOMEM,
                   "cannot allocate a sparse gradient of 35184372088834 entries of dimension 2");
    assert_memory_equal(&huge, &keep, sizeof huge);

    /* counts that overflow */
    huge.nnz = huge.capacity = INT64_MAX - 1;
    keep = huge;
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(e, &ti, &tg, &huge), EMB_ERR_OVERFLOW,
                   "embedding_backward: the number of entries overflows");
    EMB_EXPECT_ERR(emb_sparse_grad_coalesce(&huge), EMB_ERR_OVERFLOW,
                   "coalesce: 9223372036854775806 entries overflow");
    huge.nnz = huge.capacity = INT64_MAX / 8;
    keep = huge;
    EMB_EXPECT_ERR(emb_embedding_backward_sparse(e, &ti, &tg, &huge), EMB_ERR_OVERFLOW,
                   "does not fit in memory");
    assert_memory_equal(&huge, &keep, sizeof huge);
    emb_embedding_free(e);
}

/* emb_embedding_backward_sparse_view against emb_embedding_backward_sparse: the same
 * entries, flags and errors after every call of random sequences (backward into an empty,
 * an owned or a borrowed gradient, coalesce, add_to_dense, clear), a gradient that borrows
 * exactly when it is empty and the batch is int64 without padding, and the caller's
 * buffers never written (ASan checks that borrowed entries are never freed). */
static void test_sparse_view(void **state) {
    (void)state;
    int borrowed_seen = 0, copied_seen = 0;
    for (int cs = 0; cs < 300; cs++) {
        int64_t V = 1 + (int64_t)(emb_test_next_u64(&rng_state) % 30), D = 1 + cs % 5;
        int64_t pad = cs % 3 == 0 ? (int64_t)(cs % (int)V) : EMB_PADDING_NONE;
        emb_embedding *e = make_table(V, D, pad, false, false);
        emb_sparse_grad a, b;
        EMB_OK_OR_FAIL(emb_sparse_grad_init(&a, V, D));
        EMB_OK_OR_FAIL(emb_sparse_grad_init(&b, V, D));
        enum { STEPS = 6 };
        void *keep[2 * STEPS] = {0};
        void *orig[2 * STEPS] = {0};
        size_t bytes[2 * STEPS] = {0};
        for (int step = 0; step < STEPS; step++) {
            int op = (int)(emb_test_next_u64(&rng_state) % 8);
            if (op == 6) {
                bool was_borrowed = b.borrowed;
                emb_sparse_grad_clear(&a), emb_sparse_grad_clear(&b);
                assert_false(b.borrowed);
                if (was_borrowed) assert_null(b.indices); /* forgotten, not kept as storage */
                continue;
            }
            if (op == 7) {
                EMB_OK_OR_FAIL(emb_sparse_grad_coalesce(&a));
                EMB_OK_OR_FAIL(emb_sparse_grad_coalesce(&b));
                assert_false(b.borrowed && b.nnz > 1);
            } else {
                int64_t n = (int64_t)(emb_test_next_u64(&rng_state) % 12);
                bool i32 = op == 5, bad = op == 4 && n > 0;
                size_t isz = (size_t)n * (i32 ? 4 : 8), gsz = (size_t)(n * D) * sizeof(float);
                void *idx = malloc(isz ? isz : 1);
                float *g = malloc(gsz ? gsz : 1);
                for (int64_t i = 0; i < n; i++) {
                    int64_t v = (int64_t)(emb_test_next_u64(&rng_state) % (uint64_t)V);
                    if (bad && i == n - 1) v = V; /* out of range */
                    if (i32)
                        ((int32_t *)idx)[i] = (int32_t)v;
                    else
                        ((int64_t *)idx)[i] = v;
                }
                for (int64_t i = 0; i < n * D; i++) g[i] = next_float();
                keep[2 * step] = idx, keep[2 * step + 1] = g;
                bytes[2 * step] = isz, bytes[2 * step + 1] = gsz;
                orig[2 * step] = malloc(isz ? isz : 1), orig[2 * step + 1] = malloc(gsz ? gsz : 1);
                if (isz) memcpy(orig[2 * step], idx, isz);
                if (gsz) memcpy(orig[2 * step + 1], g, gsz);
                int64_t is[1] = {n}, gs[2] = {n, D};
                emb_tensor ti = emb_test_view(i32 ? EMB_INT32 : EMB_INT64, idx, 1, is),
                           tg = emb_test_view(EMB_FLOAT32, g, 2, gs);
                bool was_empty = b.nnz == 0, has_pad = false;
                for (int64_t i = 0; i < n; i++)
                    has_pad |= (i32 ? ((int32_t *)idx)[i] : ((int64_t *)idx)[i]) == pad;
                sparse_snap sa, sb;
                bool small = a.nnz + n <= 64 && (a.nnz + n) * D <= 256;
                if (bad && small) take_snap(&a, &sa), take_snap(&b, &sb);
                emb_status s1 = emb_embedding_backward_sparse(e, &ti, &tg, &a);
                emb_status s2 = emb_embedding_backward_sparse_view(e, &ti, &tg, &b);
                assert_int_equal(s1, s2);
                if (bad) {
                    assert_int_equal(s1, EMB_ERR_INDEX);
                    if (small) assert_snap(&a, &sa), assert_snap(&b, &sb);
                } else {
                    assert_int_equal(s1, EMB_OK);
                    bool want_borrow = was_empty && !i32 && !has_pad && n > 0;
                    if (want_borrow) {
                        assert_true(b.borrowed);
                        assert_ptr_equal(b.indices, idx);
                        assert_ptr_equal(b.values, g);
                        assert_int_equal(b.capacity, 0);
                        borrowed_seen++;
                    } else if (n > 0) {
                        copied_seen++;
                    }
                }
            }
            assert_int_equal(a.nnz, b.nnz);
            assert_int_equal(a.coalesced, b.coalesced);
            if (a.nnz) assert_memory_equal(a.indices, b.indices, (size_t)a.nnz * sizeof(int64_t));
            if (a.nnz * D > 0) EMB_ASSERT_EXACT(b.values, a.values, a.nnz * D, "view values");
            float da[30 * 5] = {0}, db[30 * 5] = {0};
            int64_t ds[2] = {V, D};
            emb_tensor ta = emb_test_view(EMB_FLOAT32, da, 2, ds),
                       tb = emb_test_view(EMB_FLOAT32, db, 2, ds);
            EMB_OK_OR_FAIL(emb_sparse_grad_add_to_dense(&a, &ta));
            EMB_OK_OR_FAIL(emb_sparse_grad_add_to_dense(&b, &tb));
            EMB_ASSERT_EXACT(db, da, V * D, "view add_to_dense");
        }
        emb_sparse_grad_release(&a);
        emb_sparse_grad_release(&b);
        assert_false(b.borrowed);
        for (int k = 0; k < 2 * STEPS; k++) {
            if (bytes[k]) assert_memory_equal(keep[k], orig[k], bytes[k]); /* never written */
            free(keep[k]), free(orig[k]);
        }
        emb_embedding_free(e);
    }
    assert_true(borrowed_seen > 50 && copied_seen > 50);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_reference_example),
        cmocka_unit_test(test_dense_scale_grad_by_freq),
        cmocka_unit_test(test_dense_summation_order),
        cmocka_unit_test(test_dense_accumulates_once_per_call),
        cmocka_unit_test(test_dense_signed_zero_and_specials),
        cmocka_unit_test(test_dense_padding),
        cmocka_unit_test(test_dense_shapes_and_int32),
        cmocka_unit_test(test_dense_thread_count_independent),
        cmocka_unit_test(test_dense_errors),
        cmocka_unit_test(test_sparse_reference_example),
        cmocka_unit_test(test_sparse_flags_and_storage),
        cmocka_unit_test(test_sparse_accumulation_merges),
        cmocka_unit_test(test_coalesce),
        cmocka_unit_test(test_add_to_dense),
        cmocka_unit_test(test_sparse_backward_errors),
        cmocka_unit_test(test_sparse_grad_api_errors),
        cmocka_unit_test(test_sparse_nomem_and_overflow),
        cmocka_unit_test(test_sparse_view),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
