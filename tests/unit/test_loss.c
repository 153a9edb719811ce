/* Unit tests of the losses: values against double-precision references, finite-difference
 * gradient checks for every backward, edge cases, and every error path. */
#include "emb_test.h"
#include "nn/loss_internal.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL; /* test data seed */

#include <stdlib.h>

static emb_loss_options opts_of(emb_reduction red, int64_t ignore, double ls) {
    emb_loss_options o = emb_loss_options_default();
    o.reduction = red;
    o.ignore_index = ignore;
    o.label_smoothing = ls;
    return o;
}

static const emb_reduction REDS[3] = {EMB_REDUCTION_MEAN, EMB_REDUCTION_SUM, EMB_REDUCTION_NONE};

static void test_defaults(void **state) {
    (void)state;
    emb_loss_options o = emb_loss_options_default();
    assert_int_equal(o.reduction, EMB_REDUCTION_MEAN);
    assert_int_equal(o.ignore_index, -100);
    assert_true(o.label_smoothing == 0.0);
    assert_null(o.weight);
}

/* ---------------------------------------------------------------------------------------
 * Double-precision references
 * ------------------------------------------------------------------------------------- */

/* Per-row cross-entropy; returns NAN-free value for kept rows, 0 for ignored rows. */
static double ce_row_ref(const float *x, int64_t c, int64_t t, double ls) {
    double m = x[0];
    for (int64_t j = 1; j < c; j++) m = fmax(m, x[j]);
    double s = 0;
    for (int64_t j = 0; j < c; j++) s += exp((double)x[j] - m);
    double lse = m + log(s);
    double nll = lse - x[t];
    double smooth = 0;
    for (int64_t j = 0; j < c; j++) smooth += lse - x[j];
    return (1 - ls) * nll + ls / (double)c * smooth;
}

static void ce_ref(const float *x, const int64_t *t, int64_t n, int64_t c,
                   const emb_loss_options *o, double *out) {
    double sum = 0;
    int64_t cnt = 0;
    for (int64_t i = 0; i < n; i++) {
        double v =
            t[i] == o->ignore_index ? 0.0 : ce_row_ref(x + i * c, c, t[i], o->label_smoothing);
        if (o->reduction == EMB_REDUCTION_NONE) out[i] = v;
        sum += v;
        cnt += t[i] != o->ignore_index;
    }
    if (o->reduction == EMB_REDUCTION_SUM) out[0] = sum;
    if (o->reduction == EMB_REDUCTION_MEAN) out[0] = sum / (double)cnt;
}

static double bce_ref(double x, double t, double pw) {
    double lw = 1 + (pw - 1) * t;
    double sp = log1p(exp(-fabs(x))) + fmax(-x, 0.0); /* log(1 + exp(-x)) */
    return (1 - t) * x + lw * sp;
}

/* ---------------------------------------------------------------------------------------
 * Finite differences: L = sum(r * loss) (none) or g * loss (mean/sum), evaluated in double
 * from emb's float32 forward; the perturbation +-h (h = 1e-2) is applied to the float32
 * input and the actual step (float)(x+h) - (float)(x-h) is the denominator. Truncation
 * error is O(h^2) (zero for mse), float rounding of the loss gives <~ 1e-5; the check is
 * |fd - g| <= 2e-3 * max|g| + 1e-4, and it is shown to reject the analytic gradient scaled
 * by 2 or by 0.5.
 * ------------------------------------------------------------------------------------- */

typedef emb_status (*fwd_fn)(void *ctx, emb_tensor *loss);

/* Weighted loss in double: sum(r * loss) with r the grad_loss values. */
static double weighted(fwd_fn f, void *ctx, emb_tensor *loss, const float *r) {
    EMB_OK_OR_FAIL(f(ctx, loss));
    int64_t n = emb_tensor_numel(loss);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)r[i] * (double)((float *)loss->data)[i];
    return s;
}

static void fd_check(fwd_fn f, void *ctx, emb_tensor *loss, const float *r, float *x, int64_t n,
                     const float *g, const char *what) {
    const float h = 1e-2f;
    double *fd = malloc((size_t)(n ? n : 1) * sizeof *fd);
    for (int64_t i = 0; i < n; i++) {
        float save = x[i], xp = save + h, xm = save - h;
        x[i] = xp;
        double lp = weighted(f, ctx, loss, r);
        x[i] = xm;
        double lm = weighted(f, ctx, loss, r);
        x[i] = save;
        fd[i] = (lp - lm) / ((double)xp - (double)xm);
    }
    emb_test_check_fd(fd, g, n, what);
    free(fd);
}

/* ---------------------------------------------------------------------------------------
 * Cross-entropy
 * ------------------------------------------------------------------------------------- */

typedef struct ce_case {
    emb_tensor x, t;
    emb_loss_options o;
} ce_case;

static emb_status ce_fwd(void *ctx, emb_tensor *loss) {
    ce_case *k = ctx;
    return emb_cross_entropy_forward(&k->x, &k->t, &k->o, loss);
}

static void test_ce_hand(void **state) {
    (void)state;
    /* logits [0, 0] with target 0: log 2; [0, log 3] with target 1: log(4/3). */
    float x[4] = {0, 0, 0, (float)log(3.0)}, loss[2];
    int64_t t[2] = {0, 1};
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 2)),
               tt = emb_test_view(EMB_INT64, t, 1, SHP(2));
    emb_loss_options o = opts_of(EMB_REDUCTION_NONE, -100, 0);
    emb_tensor lt = emb_test_view(EMB_FLOAT32, loss, 1, SHP(2));
    EMB_OK_OR_FAIL(emb_cross_entropy_forward(&xt, &tt, &o, &lt));
    const float want[2] = {(float)log(2.0), (float)log(4.0 / 3.0)};
    EMB_ASSERT_CLOSE(loss, want, 2, "ce none");
    /* opts NULL: mean */
    lt = emb_test_view(EMB_FLOAT32, loss, 0, NULL);
    EMB_OK_OR_FAIL(emb_cross_entropy_forward(&xt, &tt, NULL, &lt));
    const float mean = (float)((log(2.0) + log(4.0 / 3.0)) / 2);
    EMB_ASSERT_CLOSE(loss, &mean, 1, "ce mean");
    /* gradient of the mean: (softmax - onehot) / 2 */
    float g1 = 1.0f, gx[4];
    emb_tensor gt = emb_test_view(EMB_FLOAT32, &g1, 0, NULL),
               gxt = emb_test_view(EMB_FLOAT32, gx, 2, SHP(2, 2));
    EMB_OK_OR_FAIL(emb_cross_entropy_backward(&xt, &tt, NULL, &gt, &gxt));
    const float wg[4] = {-0.25f, 0.25f, 0.125f, -0.125f};
    EMB_ASSERT_CLOSE(gx, wg, 4, "ce grad");
    /* 1-D logits with a 0-d target */
    int64_t t0 = 1;
    xt = emb_test_view(EMB_FLOAT32, x + 2, 1, SHP(2));
    tt = emb_test_view(EMB_INT64, &t0, 0, NULL);
    for (int r = 0; r < 3; r++) {
        o = opts_of(REDS[r], -100, 0);
        EMB_OK_OR_FAIL(emb_cross_entropy_forward(&xt, &tt, &o, &lt));
        EMB_ASSERT_CLOSE(loss, &want[1], 1, "ce 1-D");
        gxt = emb_test_view(EMB_FLOAT32, gx, 1, SHP(2));
        EMB_OK_OR_FAIL(emb_cross_entropy_backward(&xt, &tt, &o, &gt, &gxt));
        const float w1[2] = {0.25f, -0.25f};
        EMB_ASSERT_CLOSE(gx, w1, 2, "ce 1-D grad");
    }
}

static void test_ce_values(void **state) {
    (void)state;
    enum { N = 6, C = 5 };
    float x[N * C], loss[N];
    int64_t t[N] = {0, 4, -100, 2, 3, 1};
    emb_test_randf(&rng_state, x, N * C, -3, 3);
    double ref[N];
    const double ls_vals[3] = {0.0, 0.25, 1.0};
    for (int r = 0; r < 3; r++)
        for (int l = 0; l < 3; l++)
            for (int ig = 0; ig < 2; ig++) {
                /* ig 1: ignore_index is the valid class 3 (and -100 becomes out of range:
                 * swap it for a valid class). */
                int64_t tt_data[N];
                memcpy(tt_data, t, sizeof t);
                if (ig) tt_data[2] = 0;
                emb_loss_options o = opts_of(REDS[r], ig ? 3 : -100, ls_vals[l]);
                emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(N, C)),
                           tt = emb_test_view(EMB_INT64, tt_data, 1, SHP(N));
                emb_tensor lt = REDS[r] == EMB_REDUCTION_NONE
                                    ? emb_test_view(EMB_FLOAT32, loss, 1, SHP(N))
                                    : emb_test_view(EMB_FLOAT32, loss, 0, NULL);
                EMB_OK_OR_FAIL(emb_cross_entropy_forward(&xt, &tt, &o, &lt));
                ce_ref(x, tt_data, N, C, &o, ref);
                int64_t n = emb_tensor_numel(&lt);
                float reff[N];
                for (int64_t i = 0; i < n; i++) reff[i] = (float)ref[i];
                char what[64];
                snprintf(what, sizeof what, "ce red=%d ls=%g ignore=%d", (int)REDS[r], ls_vals[l],
                         ig);
                EMB_ASSERT_CLOSE(loss, reff, n, what);
            }
}

static void test_ce_all_ignored(void **state) {
    (void)state;
    float x[6] = {1, 2, 3, 4, 5, 6}, loss[2], gx[6];
    int64_t t[2] = {-100, -100};
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 3)),
               tt = emb_test_view(EMB_INT64, t, 1, SHP(2));
    emb_tensor l0 = emb_test_view(EMB_FLOAT32, loss, 0, NULL),
               l1 = emb_test_view(EMB_FLOAT32, loss, 1, SHP(2));
    emb_tensor gxt = emb_test_view(EMB_FLOAT32, gx, 2, SHP(2, 3));
    float g = 1.0f, gn[2] = {1.0f, 1.0f};
    emb_tensor g0 = emb_test_view(EMB_FLOAT32, &g, 0, NULL),
               g1 = emb_test_view(EMB_FLOAT32, gn, 1, SHP(2));
    for (int ls = 0; ls < 2; ls++) {
        /* mean: 0/0 = nan as in PyTorch; sum: 0; none: zeros. Gradients are zero. */
        emb_loss_options o = opts_of(EMB_REDUCTION_MEAN, -100, ls * 0.2);
        EMB_OK_OR_FAIL(emb_cross_entropy_forward(&xt, &tt, &o, &l0));
        assert_true(isnan(loss[0]));
        emb_test_fill(gx, 6, NAN);
        EMB_OK_OR_FAIL(emb_cross_entropy_backward(&xt, &tt, &o, &g0, &gxt));
        emb_test_assert_all(gx, 6, 0.0f, "grad of an all-ignored mean");
        o.reduction = EMB_REDUCTION_SUM;
        EMB_OK_OR_FAIL(emb_cross_entropy_forward(&xt, &tt, &o, &l0));
        emb_test_assert_all(loss, 1, 0.0f, "all-ignored sum");
        o.reduction = EMB_REDUCTION_NONE;
        EMB_OK_OR_FAIL(emb_cross_entropy_forward(&xt, &tt, &o, &l1));
        emb_test_assert_all(loss, 2, 0.0f, "all-ignored none");
        emb_test_fill(gx, 6, NAN);
        EMB_OK_OR_FAIL(emb_cross_entropy_backward(&xt, &tt, &o, &g1, &gxt));
        emb_test_assert_all(gx, 6, 0.0f, "grad of an all-ignored none");
    }
    /* an empty batch: mean nan, sum 0 */
    xt = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(0, 3));
    tt = emb_test_view(EMB_INT64, NULL, 1, SHP(0));
    emb_loss_options o = opts_of(EMB_REDUCTION_MEAN, -100, 0);
    EMB_OK_OR_FAIL(emb_cross_entropy_forward(&xt, &tt, &o, &l0));
    assert_true(isnan(loss[0]));
    o.reduction = EMB_REDUCTION_SUM;
    EMB_OK_OR_FAIL(emb_cross_entropy_forward(&xt, &tt, &o, &l0));
    emb_test_assert_all(loss, 1, 0.0f, "empty sum");
}

/* Large logits stay finite thanks to the max subtraction. */
static void test_ce_large_logits(void **state) {
    (void)state;
    float x[3] = {1000.0f, 0.0f, -1000.0f}, loss, gx[3];
    int64_t t = 1;
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 1, SHP(3)),
               tt = emb_test_view(EMB_INT64, &t, 0, NULL);
    emb_tensor lt = emb_test_view(EMB_FLOAT32, &loss, 0, NULL);
    EMB_OK_OR_FAIL(emb_cross_entropy_forward(&xt, &tt, NULL, &lt));
    const float want = 1000.0f;
    EMB_ASSERT_CLOSE(&loss, &want, 1, "ce of large logits");
    float g = 1.0f;
    emb_tensor gt = emb_test_view(EMB_FLOAT32, &g, 0, NULL),
               gxt = emb_test_view(EMB_FLOAT32, gx, 1, SHP(3));
    EMB_OK_OR_FAIL(emb_cross_entropy_backward(&xt, &tt, NULL, &gt, &gxt));
    const float wg[3] = {1.0f, -1.0f, 0.0f};
    EMB_ASSERT_CLOSE(gx, wg, 3, "ce grad of large logits");
}

static void test_ce_finite_differences(void **state) {
    (void)state;
    enum { N = 5, C = 4 };
    float x[N * C], loss[N], r[N], gx[N * C];
    int64_t t[N] = {1, -100, 3, 0, 2};
    emb_test_randf(&rng_state, x, N * C, -2, 2);
    emb_test_randf(&rng_state, r, N, 0.5, 1.5);
    for (int red = 0; red < 3; red++)
        for (int l = 0; l < 2; l++) {
            ce_case k;
            k.x = emb_test_view(EMB_FLOAT32, x, 2, SHP(N, C));
            k.t = emb_test_view(EMB_INT64, t, 1, SHP(N));
            k.o = opts_of(REDS[red], -100, l ? 0.3 : 0.0);
            bool none = REDS[red] == EMB_REDUCTION_NONE;
            emb_tensor lt = none ? emb_test_view(EMB_FLOAT32, loss, 1, SHP(N))
                                 : emb_test_view(EMB_FLOAT32, loss, 0, NULL);
            emb_tensor gt = none ? emb_test_view(EMB_FLOAT32, r, 1, SHP(N))
                                 : emb_test_view(EMB_FLOAT32, r, 0, NULL);
            emb_tensor gxt = emb_test_view(EMB_FLOAT32, gx, 2, SHP(N, C));
            EMB_OK_OR_FAIL(emb_cross_entropy_backward(&k.x, &k.t, &k.o, &gt, &gxt));
            for (int c = 0; c < C; c++) assert_true(gx[C + c] == 0.0f); /* ignored row */
            char what[64];
            snprintf(what, sizeof what, "ce grad red=%d ls=%d", red, l);
            fd_check(ce_fwd, &k, &lt, r, x, N * C, gx, what);
        }
}

static void test_ce_errors(void **state) {
    (void)state;
    float x[8] = {0, 1, 2, 3, 4, 5, 6, 7}, loss[8], gx[8], g = 1.0f;
    emb_test_fill(loss, 8, 555.0f);
    emb_test_fill(gx, 8, 666.0f);
    int64_t t[2] = {1, 0}, t3[3] = {0, 1, 2}, tbad[2] = {1, 5}, tneg[2] = {-1, 0};
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 4)),
               tt = emb_test_view(EMB_INT64, t, 1, SHP(2));
    emb_tensor lt = emb_test_view(EMB_FLOAT32, loss, 0, NULL),
               gt = emb_test_view(EMB_FLOAT32, &g, 0, NULL);
    emb_tensor gxt = emb_test_view(EMB_FLOAT32, gx, 2, SHP(2, 4));
    emb_loss_options o = emb_loss_options_default();
    EMB_EXPECT_ERR(emb_cross_entropy_forward(NULL, &tt, &o, &lt), EMB_ERR_NULL,
                   "logits must not be NULL");
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, NULL, &o, &lt), EMB_ERR_NULL,
                   "target must not be NULL");
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &tt, &o, NULL), EMB_ERR_NULL,
                   "loss must not be NULL");
    emb_tensor bad = emb_test_view(EMB_FLOAT64, x, 2, SHP(1, 4));
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&bad, &tt, &o, &lt), EMB_ERR_DTYPE,
                   "logits must be float32, got float64");
    int32_t t32[2] = {1, 0};
    bad = emb_test_view(EMB_INT32, t32, 1, SHP(2));
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &bad, &o, &lt), EMB_ERR_DTYPE,
                   "expected scalar type Long but found Int");
    bad = emb_test_view(EMB_FLOAT32, x, 1, SHP(2));
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &bad, &o, &lt), EMB_ERR_DTYPE,
                   "class-probability targets are not supported");
    bad = emb_test_view(EMB_FLOAT32, x, 3, SHP(2, 2, 2));
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&bad, &tt, &o, &lt), EMB_ERR_SHAPE,
                   "Expected target size [2, 2], got [2]");
    bad = emb_test_view(EMB_FLOAT32, x, 0, NULL);
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&bad, &tt, &o, &lt), EMB_ERR_SHAPE,
                   "logits must be [N, C, d1, ...], [N, C] or [C], got shape []");
    bad = emb_test_view(EMB_INT64, t3, 1, SHP(3));
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &bad, &o, &lt), EMB_ERR_SHAPE,
                   "Expected input batch_size (2) to match target batch_size (3).");
    bad = emb_test_view(EMB_INT64, t, 2, SHP(1, 2));
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &bad, &o, &lt), EMB_ERR_SHAPE,
                   "Expected input batch_size (2) to match target batch_size (1).");
    bad = emb_test_view(EMB_INT64, t, 0, NULL);
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &bad, &o, &lt), EMB_ERR_SHAPE,
                   "Expected input batch_size (2) to match target batch_size (0).");
    int64_t t22[4] = {0, 1, 1, 0};
    bad = emb_test_view(EMB_INT64, t22, 2, SHP(2, 2));
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &bad, &o, &lt), EMB_ERR_SHAPE,
                   "0D or 1D target tensor expected, multi-target not supported");
    emb_tensor x1 = emb_test_view(EMB_FLOAT32, x, 1, SHP(4));
    bad = emb_test_view(EMB_INT64, t, 1, SHP(1));
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&x1, &bad, &o, &lt), EMB_ERR_SHAPE,
                   "size mismatch (got input: [4], target: [1])");
    bad = emb_test_view(EMB_INT64, tbad, 1, SHP(2));
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &bad, &o, &lt), EMB_ERR_INDEX,
                   "Target 5 is out of bounds. (position 1; classes are [0, 4), ignore_index "
                   "is -100)");
    EMB_EXPECT_ERR(emb_cross_entropy_backward(&xt, &bad, &o, &gt, &gxt), EMB_ERR_INDEX,
                   "Target 5 is out of bounds.");
    bad = emb_test_view(EMB_INT64, tneg, 1, SHP(2));
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &bad, &o, &lt), EMB_ERR_INDEX,
                   "Target -1 is out of bounds.");
    /* the default ignore_index is out of bounds once ignore_index is changed */
    int64_t tdef[2] = {-100, 0};
    bad = emb_test_view(EMB_INT64, tdef, 1, SHP(2));
    emb_loss_options o2 = opts_of(EMB_REDUCTION_MEAN, 0, 0);
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &bad, &o2, &lt), EMB_ERR_INDEX,
                   "Target -100 is out of bounds.");
    o2 = opts_of(EMB_REDUCTION_MEAN, -100, 1.5);
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &tt, &o2, &lt), EMB_ERR_INVALID,
                   "label_smoothing must be between 0.0 and 1.0. Got: 1.5");
    o2.label_smoothing = -0.1;
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &tt, &o2, &lt), EMB_ERR_INVALID,
                   "label_smoothing must be between 0.0 and 1.0. Got: -0.1");
    o2.label_smoothing = NAN;
    EMB_EXPECT_ERR(emb_cross_entropy_backward(&xt, &tt, &o2, &gt, &gxt), EMB_ERR_INVALID,
                   "label_smoothing must be between 0.0 and 1.0. Got: nan");
    o2 = opts_of((emb_reduction)7, -100, 0);
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &tt, &o2, &lt), EMB_ERR_INVALID,
                   "reduction must be EMB_REDUCTION_MEAN (0), EMB_REDUCTION_SUM (1) or "
                   "EMB_REDUCTION_NONE (2), got 7");
    /* loss shapes */
    bad = emb_test_view(EMB_FLOAT32, loss, 1, SHP(2));
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &tt, &o, &bad), EMB_ERR_SHAPE,
                   "loss has shape [2], expected []");
    o2 = opts_of(EMB_REDUCTION_NONE, -100, 0);
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &tt, &o2, &lt), EMB_ERR_SHAPE,
                   "loss has shape [], expected [2]");
    EMB_EXPECT_ERR(emb_cross_entropy_backward(&xt, &tt, &o2, &gt, &gxt), EMB_ERR_SHAPE,
                   "grad_loss has shape [], expected [2]");
    int64_t li[2];
    bad = emb_test_view(EMB_INT64, li, 0, NULL);
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &tt, &o, &bad), EMB_ERR_DTYPE,
                   "loss must be float32, got int64");
    /* backward arguments */
    EMB_EXPECT_ERR(emb_cross_entropy_backward(&xt, &tt, &o, NULL, &gxt), EMB_ERR_NULL,
                   "grad_loss must not be NULL");
    EMB_EXPECT_ERR(emb_cross_entropy_backward(&xt, &tt, &o, &gt, NULL), EMB_ERR_NULL,
                   "grad_logits must not be NULL");
    bad = emb_test_view(EMB_FLOAT32, gx, 2, SHP(4, 2));
    EMB_EXPECT_ERR(emb_cross_entropy_backward(&xt, &tt, &o, &gt, &bad), EMB_ERR_SHAPE,
                   "grad_logits has shape [4, 2], expected [2, 4]");
    /* overlaps */
    bad = emb_test_view(EMB_FLOAT32, x + 3, 0, NULL);
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &tt, &o, &bad), EMB_ERR_INVALID,
                   "loss must not overlap logits");
    bad = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 4));
    EMB_EXPECT_ERR(emb_cross_entropy_backward(&xt, &tt, &o, &gt, &bad), EMB_ERR_INVALID,
                   "grad_logits must not overlap logits");
    emb_tensor galias = emb_test_view(EMB_FLOAT32, gx + 5, 0, NULL);
    EMB_EXPECT_ERR(emb_cross_entropy_backward(&xt, &tt, &o, &galias, &gxt), EMB_ERR_INVALID,
                   "grad_logits must not overlap grad_loss");
    const float xs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    EMB_ASSERT_EXACT(x, xs, 8, "logits unchanged");
    emb_test_assert_all(loss, 8, 555.0f, "loss");
    emb_test_assert_all(gx, 8, 666.0f, "grad_logits");
}

/* ---------------------------------------------------------------------------------------
 * MSE
 * ------------------------------------------------------------------------------------- */

typedef struct pair_case {
    emb_tensor x, t, pw;
    bool has_pw;
    emb_loss_options o;
} pair_case;

static emb_status mse_fwd(void *ctx, emb_tensor *loss) {
    pair_case *k = ctx;
    return emb_mse_loss_forward(&k->x, &k->t, &k->o, loss);
}

static emb_status bce_fwd(void *ctx, emb_tensor *loss) {
    pair_case *k = ctx;
    return emb_bce_with_logits_forward(&k->x, &k->t, k->has_pw ? &k->pw : NULL, &k->o, loss);
}

static void test_mse_values_and_grad(void **state) {
    (void)state;
    enum { N = 3, D = 4 };
    float x[N * D], t[N * D], loss[N * D], r[N * D], gx[N * D];
    emb_test_randf(&rng_state, x, N * D, -2, 2);
    emb_test_randf(&rng_state, t, N * D, -2, 2);
    emb_test_randf(&rng_state, r, N * D, 0.5, 1.5);
    for (int red = 0; red < 3; red++) {
        pair_case k;
        k.x = emb_test_view(EMB_FLOAT32, x, 2, SHP(N, D));
        k.t = emb_test_view(EMB_FLOAT32, t, 2, SHP(N, D));
        k.has_pw = false;
        k.o = opts_of(REDS[red], -100, 0);
        bool none = REDS[red] == EMB_REDUCTION_NONE;
        emb_tensor lt = none ? emb_test_view(EMB_FLOAT32, loss, 2, SHP(N, D))
                             : emb_test_view(EMB_FLOAT32, loss, 0, NULL);
        EMB_OK_OR_FAIL(mse_fwd(&k, &lt));
        double s = 0;
        float want[N * D];
        for (int i = 0; i < N * D; i++) {
            double d = (double)x[i] - t[i];
            want[i] = (float)(d * d);
            s += d * d;
        }
        if (!none) want[0] = (float)(red == 0 ? s / (N * D) : s);
        EMB_ASSERT_CLOSE(loss, want, none ? N * D : 1, "mse");
        emb_tensor gt = none ? emb_test_view(EMB_FLOAT32, r, 2, SHP(N, D))
                             : emb_test_view(EMB_FLOAT32, r, 0, NULL);
        emb_tensor gxt = emb_test_view(EMB_FLOAT32, gx, 2, SHP(N, D));
        EMB_OK_OR_FAIL(emb_mse_loss_backward(&k.x, &k.t, &k.o, &gt, &gxt));
        /* PyTorch's formula, bit for bit: (float)norm * (x - t) * g */
        float norm = (float)(red == 0 ? 2.0 / (N * D) : 2.0), wg[N * D];
        for (int i = 0; i < N * D; i++) wg[i] = norm * (x[i] - t[i]) * r[none ? i : 0];
        EMB_ASSERT_EXACT(gx, wg, N * D, "mse grad");
        char what[32];
        snprintf(what, sizeof what, "mse grad red=%d", red);
        fd_check(mse_fwd, &k, &lt, r, x, N * D, gx, what);
    }
    /* 0-d input; empty input: mean nan, sum 0 */
    float a = 3.0f, b = 1.0f, l;
    emb_tensor at = emb_test_view(EMB_FLOAT32, &a, 0, NULL),
               bt = emb_test_view(EMB_FLOAT32, &b, 0, NULL);
    emb_tensor lt = emb_test_view(EMB_FLOAT32, &l, 0, NULL);
    EMB_OK_OR_FAIL(emb_mse_loss_forward(&at, &bt, NULL, &lt));
    assert_true(l == 4.0f);
    at = emb_test_view(EMB_FLOAT32, NULL, 1, SHP(0));
    bt = emb_test_view(EMB_FLOAT32, NULL, 1, SHP(0));
    EMB_OK_OR_FAIL(emb_mse_loss_forward(&at, &bt, NULL, &lt));
    assert_true(isnan(l));
    emb_loss_options o = opts_of(EMB_REDUCTION_SUM, -100, 0);
    EMB_OK_OR_FAIL(emb_mse_loss_forward(&at, &bt, &o, &lt));
    assert_true(l == 0.0f);
}

/* A broadcast target gives the same bits as the explicitly expanded one. */
static void test_mse_broadcast_target(void **state) {
    (void)state;
    float x[12], row[3] = {0.5f, -1.25f, 2.0f}, full[12], l1[12], l2[12], g1[12], g2[12];
    emb_test_randf(&rng_state, x, 12, -3, 3);
    for (int i = 0; i < 12; i++) full[i] = row[i % 3];
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 3, SHP(2, 2, 3));
    emb_tensor rt = emb_test_view(EMB_FLOAT32, row, 2, SHP(1, 3));
    emb_tensor ft = emb_test_view(EMB_FLOAT32, full, 3, SHP(2, 2, 3));
    for (int r = 0; r < 3; r++) {
        emb_loss_options o = opts_of(REDS[r], -100, 0);
        int nd = REDS[r] == EMB_REDUCTION_NONE ? 3 : 0;
        emb_tensor a = emb_test_view(EMB_FLOAT32, l1, nd, SHP(2, 2, 3)),
                   b = emb_test_view(EMB_FLOAT32, l2, nd, SHP(2, 2, 3));
        EMB_OK_OR_FAIL(emb_mse_loss_forward(&xt, &rt, &o, &a));
        EMB_OK_OR_FAIL(emb_mse_loss_forward(&xt, &ft, &o, &b));
        EMB_ASSERT_EXACT(l1, l2, nd ? 12 : 1, "broadcast target loss");
        float one = 1.0f, gl[12];
        emb_test_fill(gl, 12, 0.75f);
        emb_tensor gt = nd ? emb_test_view(EMB_FLOAT32, gl, 3, SHP(2, 2, 3))
                           : emb_test_view(EMB_FLOAT32, &one, 0, NULL);
        emb_tensor ga = emb_test_view(EMB_FLOAT32, g1, 3, SHP(2, 2, 3)),
                   gb = emb_test_view(EMB_FLOAT32, g2, 3, SHP(2, 2, 3));
        EMB_OK_OR_FAIL(emb_mse_loss_backward(&xt, &rt, &o, &gt, &ga));
        EMB_OK_OR_FAIL(emb_mse_loss_backward(&xt, &ft, &o, &gt, &gb));
        EMB_ASSERT_EXACT(g1, g2, 12, "broadcast target grad");
    }
}

static void test_mse_errors(void **state) {
    (void)state;
    float x[6] = {1, 2, 3, 4, 5, 6}, t[6] = {0}, loss[8], gx[8], g = 1.0f;
    emb_test_fill(loss, 8, 555.0f);
    emb_test_fill(gx, 8, 666.0f);
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 3)),
               tt = emb_test_view(EMB_FLOAT32, t, 2, SHP(2, 3));
    emb_tensor lt = emb_test_view(EMB_FLOAT32, loss, 0, NULL),
               gt = emb_test_view(EMB_FLOAT32, &g, 0, NULL);
    emb_tensor gxt = emb_test_view(EMB_FLOAT32, gx, 2, SHP(2, 3));
    EMB_EXPECT_ERR(emb_mse_loss_forward(NULL, &tt, NULL, &lt), EMB_ERR_NULL,
                   "input must not be NULL");
    EMB_EXPECT_ERR(emb_mse_loss_forward(&xt, NULL, NULL, &lt), EMB_ERR_NULL,
                   "target must not be NULL");
    EMB_EXPECT_ERR(emb_mse_loss_forward(&xt, &tt, NULL, NULL), EMB_ERR_NULL,
                   "loss must not be NULL");
    emb_tensor bad = emb_test_view(EMB_FLOAT32, t, 1, SHP(2));
    EMB_EXPECT_ERR(emb_mse_loss_forward(&xt, &bad, NULL, &lt), EMB_ERR_SHAPE,
                   "The size of tensor a (3) must match the size of tensor b (2) at "
                   "non-singleton dimension 1");
    /* a target that would make the input grow: torch broadcasts both, emb refuses */
    float big[12] = {0};
    bad = emb_test_view(EMB_FLOAT32, big, 3, SHP(2, 2, 3));
    EMB_EXPECT_ERR(emb_mse_loss_forward(&xt, &bad, NULL, &lt), EMB_ERR_SHAPE,
                   "mse_loss: the target [2, 2, 3] would broadcast the input [2, 3] to a "
                   "larger shape; emb broadcasts only the target to the input's shape");
    bad = emb_test_view(EMB_FLOAT32, big, 2, SHP(1, 3));
    emb_tensor x1 = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 1));
    EMB_EXPECT_ERR(emb_mse_loss_backward(&x1, &bad, NULL, &gt, &gxt), EMB_ERR_SHAPE,
                   "would broadcast the input [2, 1]");
    int64_t ti[6] = {0};
    bad = emb_test_view(EMB_INT64, ti, 2, SHP(2, 3));
    EMB_EXPECT_ERR(emb_mse_loss_forward(&xt, &bad, NULL, &lt), EMB_ERR_DTYPE,
                   "target must be float32, got int64");
    EMB_EXPECT_ERR(emb_mse_loss_forward(&bad, &tt, NULL, &lt), EMB_ERR_DTYPE,
                   "input must be float32, got int64");
    emb_loss_options o = opts_of((emb_reduction)-1, -100, 0);
    EMB_EXPECT_ERR(emb_mse_loss_forward(&xt, &tt, &o, &lt), EMB_ERR_INVALID, "got -1");
    /* label_smoothing is a cross-entropy option: ignored here */
    o = opts_of(EMB_REDUCTION_NONE, -100, 0);
    EMB_EXPECT_ERR(emb_mse_loss_forward(&xt, &tt, &o, &lt), EMB_ERR_SHAPE,
                   "loss has shape [], expected [2, 3]");
    EMB_EXPECT_ERR(emb_mse_loss_backward(&xt, &tt, &o, &gt, &gxt), EMB_ERR_SHAPE,
                   "grad_loss has shape [], expected [2, 3]");
    EMB_EXPECT_ERR(emb_mse_loss_backward(&xt, &tt, NULL, NULL, &gxt), EMB_ERR_NULL,
                   "grad_loss must not be NULL");
    EMB_EXPECT_ERR(emb_mse_loss_backward(&xt, &tt, NULL, &gt, NULL), EMB_ERR_NULL,
                   "grad_input must not be NULL");
    bad = emb_test_view(EMB_FLOAT32, gx, 2, SHP(3, 2));
    EMB_EXPECT_ERR(emb_mse_loss_backward(&xt, &tt, NULL, &gt, &bad), EMB_ERR_SHAPE,
                   "grad_input has shape [3, 2], expected [2, 3]");
    bad = emb_test_view(EMB_FLOAT32, t, 2, SHP(2, 3));
    EMB_EXPECT_ERR(emb_mse_loss_backward(&xt, &tt, NULL, &gt, &bad), EMB_ERR_INVALID,
                   "grad_input must not overlap target");
    bad = emb_test_view(EMB_FLOAT32, x + 5, 0, NULL);
    EMB_EXPECT_ERR(emb_mse_loss_forward(&xt, &tt, NULL, &bad), EMB_ERR_INVALID,
                   "loss must not overlap input");
    const float xs[6] = {1, 2, 3, 4, 5, 6}, ts[6] = {0};
    EMB_ASSERT_EXACT(x, xs, 6, "input unchanged");
    EMB_ASSERT_EXACT(t, ts, 6, "target unchanged");
    emb_test_assert_all(loss, 8, 555.0f, "loss");
    emb_test_assert_all(gx, 8, 666.0f, "grad_input");
}

/* ---------------------------------------------------------------------------------------
 * BCE with logits
 * ------------------------------------------------------------------------------------- */

static void test_bce_values_and_grad(void **state) {
    (void)state;
    enum { N = 3, D = 4 };
    float x[N * D], t[N * D], pw[D], loss[N * D], r[N * D], gx[N * D];
    emb_test_randf(&rng_state, x, N * D, -3, 3);
    emb_test_randf(&rng_state, t, N * D, 0, 1);
    emb_test_randf(&rng_state, pw, D, 0.2, 3);
    emb_test_randf(&rng_state, r, N * D, 0.5, 1.5);
    for (int red = 0; red < 3; red++)
        for (int use_pw = 0; use_pw < 2; use_pw++) {
            pair_case k;
            k.x = emb_test_view(EMB_FLOAT32, x, 2, SHP(N, D));
            k.t = emb_test_view(EMB_FLOAT32, t, 2, SHP(N, D));
            k.pw = emb_test_view(EMB_FLOAT32, pw, 1, SHP(D));
            k.has_pw = use_pw;
            k.o = opts_of(REDS[red], -100, 0);
            bool none = REDS[red] == EMB_REDUCTION_NONE;
            emb_tensor lt = none ? emb_test_view(EMB_FLOAT32, loss, 2, SHP(N, D))
                                 : emb_test_view(EMB_FLOAT32, loss, 0, NULL);
            EMB_OK_OR_FAIL(bce_fwd(&k, &lt));
            double s = 0;
            float want[N * D];
            for (int i = 0; i < N * D; i++) {
                double v = bce_ref(x[i], t[i], use_pw ? pw[i % D] : 1.0);
                want[i] = (float)v;
                s += v;
            }
            if (!none) want[0] = (float)(red == 0 ? s / (N * D) : s);
            char what[48];
            snprintf(what, sizeof what, "bce red=%d pos_weight=%d", red, use_pw);
            EMB_ASSERT_CLOSE(loss, want, none ? N * D : 1, what);
            emb_tensor gt = none ? emb_test_view(EMB_FLOAT32, r, 2, SHP(N, D))
                                 : emb_test_view(EMB_FLOAT32, r, 0, NULL);
            emb_tensor gxt = emb_test_view(EMB_FLOAT32, gx, 2, SHP(N, D));
            EMB_OK_OR_FAIL(
                emb_bce_with_logits_backward(&k.x, &k.t, use_pw ? &k.pw : NULL, &k.o, &gt, &gxt));
            snprintf(what, sizeof what, "bce grad red=%d pos_weight=%d", red, use_pw);
            fd_check(bce_fwd, &k, &lt, r, x, N * D, gx, what);
        }
}

/* The stable formulation: huge logits give finite losses and exact limits. */
static void test_bce_stable(void **state) {
    (void)state;
    float x[4] = {100.0f, -100.0f, 100.0f, -100.0f}, t[4] = {1, 0, 0, 1}, loss[4];
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 1, SHP(4)),
               tt = emb_test_view(EMB_FLOAT32, t, 1, SHP(4));
    emb_loss_options o = opts_of(EMB_REDUCTION_NONE, -100, 0);
    emb_tensor lt = emb_test_view(EMB_FLOAT32, loss, 1, SHP(4));
    EMB_OK_OR_FAIL(emb_bce_with_logits_forward(&xt, &tt, NULL, &o, &lt));
    const float want[4] = {0.0f, 0.0f, 100.0f, 100.0f};
    EMB_ASSERT_CLOSE(loss, want, 4, "bce of +-100");
}

static void test_bce_errors(void **state) {
    (void)state;
    float x[6] = {1, 2, 3, 4, 5, 6}, t[6] = {0}, pw[4] = {1, 2, 3, 4}, loss[8], gx[8], g = 1.0f;
    emb_test_fill(loss, 8, 555.0f);
    emb_test_fill(gx, 8, 666.0f);
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 3)),
               tt = emb_test_view(EMB_FLOAT32, t, 2, SHP(2, 3));
    emb_tensor pwt = emb_test_view(EMB_FLOAT32, pw, 1, SHP(3));
    emb_tensor lt = emb_test_view(EMB_FLOAT32, loss, 0, NULL),
               gt = emb_test_view(EMB_FLOAT32, &g, 0, NULL);
    emb_tensor gxt = emb_test_view(EMB_FLOAT32, gx, 2, SHP(2, 3));
    EMB_EXPECT_ERR(emb_bce_with_logits_forward(NULL, &tt, NULL, NULL, &lt), EMB_ERR_NULL,
                   "input must not be NULL");
    {
        /* the elementwise weight: broadcastable to the input, float32, not an output */
        float wv[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
        double wd[3] = {1, 1, 1};
        emb_loss_options wo = emb_loss_options_default();
        emb_tensor wt = emb_test_view(EMB_FLOAT32, wv, 1, SHP(2));
        wo.weight = &wt;
        EMB_EXPECT_ERR(emb_bce_with_logits_forward(&xt, &tt, NULL, &wo, &lt), EMB_ERR_SHAPE,
                       "The size of tensor a (3) must match the size of tensor b (2) at "
                       "non-singleton dimension 1");
        wt = emb_test_view(EMB_FLOAT32, wv, 3, SHP(2, 2, 3));
        EMB_EXPECT_ERR(emb_bce_with_logits_backward(&xt, &tt, NULL, &wo, &gt, &gxt), EMB_ERR_SHAPE,
                       "emb broadcasts only the weight to the input's shape");
        wt = emb_test_view(EMB_FLOAT64, wd, 1, SHP(3));
        EMB_EXPECT_ERR(emb_bce_with_logits_forward(&xt, &tt, NULL, &wo, &lt), EMB_ERR_DTYPE,
                       "weight must be float32, got float64");
        wt = emb_test_view(EMB_FLOAT32, gx, 2, SHP(2, 3));
        EMB_EXPECT_ERR(emb_bce_with_logits_backward(&xt, &tt, NULL, &wo, &gt, &gxt),
                       EMB_ERR_INVALID, "grad_input must not overlap weight");
        wt = emb_test_view(EMB_FLOAT32, loss, 1, SHP(3));
        EMB_EXPECT_ERR(emb_bce_with_logits_forward(&xt, &tt, NULL, &wo, &lt), EMB_ERR_INVALID,
                       "loss must not overlap weight");
    }
    EMB_EXPECT_ERR(emb_bce_with_logits_forward(&xt, &tt, &pwt, NULL, NULL), EMB_ERR_NULL,
                   "loss must not be NULL");
    emb_tensor bad = emb_test_view(EMB_FLOAT32, t, 2, SHP(3, 2));
    EMB_EXPECT_ERR(emb_bce_with_logits_forward(&xt, &bad, NULL, NULL, &lt), EMB_ERR_SHAPE,
                   "Target size (torch.Size([3, 2])) must be the same as input size "
                   "(torch.Size([2, 3]))");
    bad = emb_test_view(EMB_FLOAT32, pw, 1, SHP(4));
    EMB_EXPECT_ERR(emb_bce_with_logits_forward(&xt, &tt, &bad, NULL, &lt), EMB_ERR_SHAPE,
                   "pos_weight has shape [4], expected [3] (the last dimension of input [2, 3])");
    bad = emb_test_view(EMB_FLOAT32, pw, 2, SHP(1, 3));
    EMB_EXPECT_ERR(emb_bce_with_logits_backward(&xt, &tt, &bad, NULL, &gt, &gxt), EMB_ERR_SHAPE,
                   "pos_weight has shape [1, 3], expected [3]");
    int64_t pwi[3] = {1, 1, 1};
    bad = emb_test_view(EMB_INT64, pwi, 1, SHP(3));
    EMB_EXPECT_ERR(emb_bce_with_logits_forward(&xt, &tt, &bad, NULL, &lt), EMB_ERR_DTYPE,
                   "pos_weight must be float32, got int64");
    float s0 = 0.5f, s1 = 1.0f;
    emb_tensor x0 = emb_test_view(EMB_FLOAT32, &s0, 0, NULL),
               t0 = emb_test_view(EMB_FLOAT32, &s1, 0, NULL);
    bad = emb_test_view(EMB_FLOAT32, pw, 1, SHP(1));
    EMB_EXPECT_ERR(emb_bce_with_logits_forward(&x0, &t0, &bad, NULL, &lt), EMB_ERR_SHAPE,
                   "but input is 0-d");
    emb_loss_options o = opts_of(EMB_REDUCTION_NONE, -100, 0);
    EMB_EXPECT_ERR(emb_bce_with_logits_forward(&xt, &tt, &pwt, &o, &lt), EMB_ERR_SHAPE,
                   "loss has shape [], expected [2, 3]");
    EMB_EXPECT_ERR(emb_bce_with_logits_backward(&xt, &tt, &pwt, NULL, NULL, &gxt), EMB_ERR_NULL,
                   "grad_loss must not be NULL");
    EMB_EXPECT_ERR(emb_bce_with_logits_backward(&xt, &tt, &pwt, NULL, &gt, NULL), EMB_ERR_NULL,
                   "grad_input must not be NULL");
    bad = emb_test_view(EMB_FLOAT32, pw, 2, SHP(1, 1));
    EMB_EXPECT_ERR(emb_bce_with_logits_backward(&xt, &tt, &pwt, NULL, &gt, &bad), EMB_ERR_SHAPE,
                   "grad_input has shape [1, 1], expected [2, 3]");
    bad = emb_test_view(EMB_FLOAT32, pw, 2, SHP(1, 1));
    emb_tensor alias = emb_test_view(EMB_FLOAT32, pw + 1, 0, NULL);
    EMB_EXPECT_ERR(emb_bce_with_logits_forward(&xt, &tt, &pwt, NULL, &alias), EMB_ERR_INVALID,
                   "loss must not overlap pos_weight");
    alias = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 3));
    EMB_EXPECT_ERR(emb_bce_with_logits_backward(&xt, &tt, &pwt, NULL, &gt, &alias), EMB_ERR_INVALID,
                   "grad_input must not overlap input");
    alias = emb_test_view(EMB_FLOAT32, gx + 2, 0, NULL);
    EMB_EXPECT_ERR(emb_bce_with_logits_backward(&xt, &tt, &pwt, NULL, &alias, &gxt),
                   EMB_ERR_INVALID, "grad_input must not overlap grad_loss");
    const float pws[4] = {1, 2, 3, 4};
    EMB_ASSERT_EXACT(pw, pws, 4, "pos_weight unchanged");
    emb_test_assert_all(loss, 8, 555.0f, "loss");
    emb_test_assert_all(gx, 8, 666.0f, "grad_input");
}

/* Reductions over many elements give the same bits on 1 and 2 threads. */

/* Fuzz findings (issue 6, item 8): (a) logits [2, 0] with every target ignored: no
 * arithmetic on the NULL data pointers of the empty tensors, loss/gradient as torch gives
 * them; (c) logits [0, INT64_MAX]: no signed overflow in the work estimates or buffer
 * sizes (run under UBSan in make test). */
static void test_ce_fuzz_empty_tensors(void **state) {
    (void)state;
    int64_t t[2] = {-100, -100};
    emb_tensor xt = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(2, 0)),
               tt = emb_test_view(EMB_INT64, t, 1, SHP(2));
    emb_tensor gxt = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(2, 0));
    for (int r = 0; r < 3; r++) {
        for (int l = 0; l < 2; l++) {
            emb_loss_options o = opts_of(REDS[r], -100, l ? 0.1 : 0.0);
            float loss[2] = {7.0f, 7.0f}, g[2] = {1.0f, 1.0f};
            int nd = REDS[r] == EMB_REDUCTION_NONE ? 1 : 0;
            emb_tensor lt = emb_test_view(EMB_FLOAT32, loss, nd, SHP(2));
            emb_tensor gt = emb_test_view(EMB_FLOAT32, g, nd, SHP(2));
            EMB_OK_OR_FAIL(emb_cross_entropy_forward(&xt, &tt, &o, &lt));
            /* mean: 0 / 0; label smoothing: 0 * (0.1 / C) with C = 0 (torch: the same) */
            if (REDS[r] == EMB_REDUCTION_MEAN || l)
                assert_true(isnan(loss[0]));
            else
                assert_true(loss[0] == 0.0f && loss[1] == (nd ? 0.0f : 7.0f));
            EMB_OK_OR_FAIL(emb_cross_entropy_backward(&xt, &tt, &o, &gt, &gxt));
            EMB_OK_OR_FAIL(emb_nll_loss_backward(
                &xt, &tt, &(emb_loss_options){REDS[r], -100, 0.0, NULL}, &gt, &gxt));
        }
    }
    /* [0, INT64_MAX]: an empty batch of a huge class count */
    emb_tensor big = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(0, INT64_MAX));
    emb_tensor t0 = emb_test_view(EMB_INT64, NULL, 1, SHP(0));
    emb_tensor gbig = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(0, INT64_MAX));
    for (int r = 0; r < 3; r++) {
        emb_loss_options o = opts_of(REDS[r], -100, 0.2);
        float loss = 7.0f, g = 1.0f;
        int nd = REDS[r] == EMB_REDUCTION_NONE ? 1 : 0;
        emb_tensor lt = emb_test_view(EMB_FLOAT32, nd ? NULL : &loss, nd, SHP(0));
        emb_tensor gt = emb_test_view(EMB_FLOAT32, nd ? NULL : &g, nd, SHP(0));
        EMB_OK_OR_FAIL(emb_cross_entropy_forward(&big, &t0, &o, &lt));
        if (REDS[r] == EMB_REDUCTION_MEAN) assert_true(isnan(loss));
        if (REDS[r] == EMB_REDUCTION_SUM) assert_true(loss == 0.0f);
        EMB_OK_OR_FAIL(emb_cross_entropy_backward(&big, &t0, &o, &gt, &gbig));
    }
    EMB_OK_OR_FAIL(emb_log_softmax_forward(&big, &gbig));
    /* empty mse / BCE (NULL data): mean is 0 / 0, sum 0; found by the fuzzer in BCE */
    emb_tensor e = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(0, 3));
    emb_tensor ge = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(0, 3));
    for (int r = 0; r < 2; r++) {
        emb_loss_options o = opts_of(REDS[r], -100, 0);
        float loss = 7.0f, g = 1.0f;
        emb_tensor lt = emb_test_view(EMB_FLOAT32, &loss, 0, NULL);
        emb_tensor gt = emb_test_view(EMB_FLOAT32, &g, 0, NULL);
        EMB_OK_OR_FAIL(emb_bce_with_logits_forward(&e, &e, NULL, &o, &lt));
        assert_true(r == 0 ? isnan(loss) : loss == 0.0f);
        EMB_OK_OR_FAIL(emb_bce_with_logits_backward(&e, &e, NULL, &o, &gt, &ge));
        loss = 7.0f;
        EMB_OK_OR_FAIL(emb_mse_loss_forward(&e, &e, &o, &lt));
        assert_true(r == 0 ? isnan(loss) : loss == 0.0f);
        EMB_OK_OR_FAIL(emb_mse_loss_backward(&e, &e, &o, &gt, &ge));
    }
    /* [2, 0, 3] with label smoothing: no classes, every target ignored */
    int64_t t6[6] = {-100, -100, -100, -100, -100, -100};
    emb_tensor x0 = emb_test_view(EMB_FLOAT32, NULL, 3, SHP(2, 0, 3));
    emb_tensor t0s = emb_test_view(EMB_INT64, t6, 2, SHP(2, 3));
    float l6[6];
    emb_tensor l6t = emb_test_view(EMB_FLOAT32, l6, 2, SHP(2, 3));
    emb_loss_options os = opts_of(EMB_REDUCTION_NONE, -100, 0.1);
    EMB_OK_OR_FAIL(emb_cross_entropy_forward(&x0, &t0s, &os, &l6t));
}

/* Class weights: the weighted mean divides by the kept targets' weights; errors. */
static void test_ce_weight(void **state) {
    (void)state;
    float x[6] = {1, 2, 3, -1, 0, 4}, w[3] = {0.5f, 2.0f, 1.0f}, loss = 0, lu[2];
    int64_t t[2] = {0, 2};
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(2, 3)),
               tt = emb_test_view(EMB_INT64, t, 1, SHP(2)),
               wt = emb_test_view(EMB_FLOAT32, w, 1, SHP(3));
    emb_tensor lt = emb_test_view(EMB_FLOAT32, &loss, 0, NULL),
               lut = emb_test_view(EMB_FLOAT32, lu, 1, SHP(2));
    emb_loss_options o = emb_loss_options_default();
    o.weight = &wt;
    EMB_OK_OR_FAIL(emb_cross_entropy_forward(&xt, &tt, &o, &lt));
    o.reduction = EMB_REDUCTION_NONE;
    EMB_OK_OR_FAIL(emb_cross_entropy_forward(&xt, &tt, &o, &lut));
    double r0 = 0.5 * (log(exp(1.0) + exp(2.0) + exp(3.0)) - 1.0);
    double r1 = 1.0 * (log(exp(-1.0) + exp(0.0) + exp(4.0)) - 4.0);
    assert_float_equal(lu[0], r0, 1e-6);
    assert_float_equal(lu[1], r1, 1e-6);
    assert_float_equal(loss, (r0 + r1) / 1.5, 1e-6);
    /* errors: wrong length, wrong dtype; loss unchanged */
    float w2[2] = {1, 1};
    double wd[3] = {1, 1, 1};
    emb_tensor bad = emb_test_view(EMB_FLOAT32, w2, 1, SHP(2));
    o.reduction = EMB_REDUCTION_MEAN;
    o.weight = &bad;
    loss = 9.0f;
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &tt, &o, &lt), EMB_ERR_SHAPE,
                   "weight tensor should be defined either for all 3 classes or no classes "
                   "but got weight tensor of shape: [2]");
    bad = emb_test_view(EMB_FLOAT64, wd, 1, SHP(3));
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &tt, &o, &lt), EMB_ERR_DTYPE,
                   "weight must be float32, got float64");
    assert_true(loss == 9.0f);
    /* loss overlapping the weight */
    o.weight = &wt;
    emb_tensor over = emb_test_view(EMB_FLOAT32, w, 0, NULL);
    EMB_EXPECT_ERR(emb_cross_entropy_forward(&xt, &tt, &o, &over), EMB_ERR_INVALID,
                   "loss must not overlap weight");
    assert_true(w[0] == 0.5f);
}

/* nll_loss on log-probabilities equals cross_entropy on the logits; its errors. */
static void test_nll_and_log_softmax(void **state) {
    (void)state;
    enum { N = 5, C = 11 };
    float x[N * C], lp[N * C], g1[N * C], g2[N * C], gl[N * C], l1, l2, one = 1.0f;
    emb_test_randf(&rng_state, x, N * C, -3, 3);
    int64_t t[N] = {0, 10, -100, 4, 7};
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(N, C)),
               lpt = emb_test_view(EMB_FLOAT32, lp, 2, SHP(N, C)),
               tt = emb_test_view(EMB_INT64, t, 1, SHP(N));
    emb_tensor l1t = emb_test_view(EMB_FLOAT32, &l1, 0, NULL),
               l2t = emb_test_view(EMB_FLOAT32, &l2, 0, NULL),
               gt = emb_test_view(EMB_FLOAT32, &one, 0, NULL);
    emb_tensor g1t = emb_test_view(EMB_FLOAT32, g1, 2, SHP(N, C)),
               g2t = emb_test_view(EMB_FLOAT32, g2, 2, SHP(N, C)),
               glt = emb_test_view(EMB_FLOAT32, gl, 2, SHP(N, C));
    EMB_OK_OR_FAIL(emb_log_softmax_forward(&xt, &lpt));
    EMB_OK_OR_FAIL(emb_cross_entropy_forward(&xt, &tt, NULL, &l1t));
    EMB_OK_OR_FAIL(emb_nll_loss_forward(&lpt, &tt, NULL, &l2t));
    EMB_ASSERT_EXACT(&l2, &l1, 1, "nll(log_softmax) vs cross_entropy");
    EMB_OK_OR_FAIL(emb_cross_entropy_backward(&xt, &tt, NULL, &gt, &g1t));
    EMB_OK_OR_FAIL(emb_nll_loss_backward(&lpt, &tt, NULL, &gt, &glt));
    EMB_OK_OR_FAIL(emb_log_softmax_backward(&lpt, &glt, &g2t));
    EMB_ASSERT_EXACT(g2, g1, N * C, "chain of nll and log_softmax backward vs cross_entropy");
    /* rows of log_softmax sum to 1 in probability */
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int j = 0; j < C; j++) s += exp(lp[i * C + j]);
        assert_float_equal(s, 1.0, 1e-5);
    }
    emb_loss_options o = emb_loss_options_default();
    o.label_smoothing = 0.1;
    l2 = 5.0f;
    EMB_EXPECT_ERR(emb_nll_loss_forward(&lpt, &tt, &o, &l2t), EMB_ERR_INVALID,
                   "nll_loss has no label_smoothing (got 0.1)");
    EMB_EXPECT_ERR(emb_nll_loss_forward(NULL, &tt, NULL, &l2t), EMB_ERR_NULL,
                   "input must not be NULL");
    assert_true(l2 == 5.0f);
    /* log_softmax errors, output unchanged */
    emb_test_fill(g2, N * C, 3.0f);
    emb_tensor y0 = emb_test_view(EMB_FLOAT32, &one, 0, NULL);
    EMB_EXPECT_ERR(emb_log_softmax_forward(&y0, &g2t), EMB_ERR_SHAPE, "at least one dimension");
    EMB_EXPECT_ERR(emb_log_softmax_forward(&xt, NULL), EMB_ERR_NULL, "y must not be NULL");
    EMB_EXPECT_ERR(emb_log_softmax_forward(NULL, &g2t), EMB_ERR_NULL, "x must not be NULL");
    emb_tensor small = emb_test_view(EMB_FLOAT32, g2, 2, SHP(N, C - 1));
    EMB_EXPECT_ERR(emb_log_softmax_forward(&xt, &small), EMB_ERR_SHAPE, "y has shape");
    EMB_EXPECT_ERR(emb_log_softmax_forward(&xt, &xt), EMB_ERR_INVALID, "y must not overlap x");
    EMB_EXPECT_ERR(emb_log_softmax_backward(&lpt, &glt, &glt), EMB_ERR_INVALID,
                   "grad_x must not overlap grad_y");
    EMB_EXPECT_ERR(emb_log_softmax_backward(&lpt, NULL, &g2t), EMB_ERR_NULL,
                   "grad_y must not be NULL");
    EMB_EXPECT_ERR(emb_log_softmax_backward(&lpt, &glt, &small), EMB_ERR_SHAPE, "grad_x has shape");
    emb_test_assert_all(g2, N * C, 3.0f, "outputs after errors");
}

/* The reference kernels (torch's DEFAULT capability) and the SIMD ones agree within a few
 * ulp; each is deterministic. */
static void test_log_softmax_ref_vs_simd(void **state) {
    (void)state;
    enum { N = 7, C = 67 };
    float x[N * C], y[2][N * C];
    emb_test_randf(&rng_state, x, N * C, -20, 20);
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(N, C));
    for (int m = 0; m < 2; m++) {
        emb_set_kernel_mode(m ? EMB_KERNELS_REF : EMB_KERNELS_AUTO);
        emb_tensor yt = emb_test_view(EMB_FLOAT32, y[m], 2, SHP(N, C));
        EMB_OK_OR_FAIL(emb_log_softmax_forward(&xt, &yt));
    }
    emb_set_kernel_mode(EMB_KERNELS_AUTO);
    EMB_ASSERT_CLOSE(y[1], y[0], N * C, "ref vs auto log_softmax");
}

static void test_thread_independence(void **state) {
    (void)state;
    enum { N = 3000, C = 37 };
    float *x = malloc(N * C * 4), *t = malloc(N * C * 4);
    int64_t *cls = malloc(N * 8);
    emb_test_randf(&rng_state, x, N * C, -4, 4);
    emb_test_randf(&rng_state, t, N * C, 0, 1);
    for (int i = 0; i < N; i++) cls[i] = (int64_t)(emb_test_urand(&rng_state) * C);
    float res[2][3];
    for (int run = 0; run < 2; run++) {
        emb_set_num_threads(run + 1);
        emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(N, C)),
                   ct = emb_test_view(EMB_INT64, cls, 1, SHP(N));
        emb_tensor tt = emb_test_view(EMB_FLOAT32, t, 2, SHP(N, C));
        emb_tensor lt = emb_test_view(EMB_FLOAT32, &res[run][0], 0, NULL);
        emb_loss_options o = opts_of(EMB_REDUCTION_MEAN, -100, 0.1);
        EMB_OK_OR_FAIL(emb_cross_entropy_forward(&xt, &ct, &o, &lt));
        lt = emb_test_view(EMB_FLOAT32, &res[run][1], 0, NULL);
        EMB_OK_OR_FAIL(emb_mse_loss_forward(&xt, &tt, NULL, &lt));
        lt = emb_test_view(EMB_FLOAT32, &res[run][2], 0, NULL);
        EMB_OK_OR_FAIL(emb_bce_with_logits_forward(&xt, &tt, NULL, NULL, &lt));
    }
    emb_set_num_threads(0);
    EMB_ASSERT_EXACT(res[1], res[0], 3, "losses on 2 threads vs 1");
    free(x), free(t), free(cls);
}

/* The losses' output-versus-input check at the top of the address space: an output ending
 * at the last byte that shares its last 8 bytes with an input (start + size wraps to 0
 * there, which the check must not compute). */
static void test_overlap_check_at_the_top(void **state) {
    (void)state;
    int64_t four = 4, two = 2;
    emb_tensor out, in, far;
    EMB_OK_OR_FAIL(emb_tensor_init(&out, EMB_FLOAT32, (void *)(UINTPTR_MAX - 15), 1, &four));
    EMB_OK_OR_FAIL(emb_tensor_init(&in, EMB_FLOAT32, (void *)(UINTPTR_MAX - 7), 1, &two));
    EMB_OK_OR_FAIL(emb_tensor_init(&far, EMB_FLOAT32, (void *)0x1000, 1, &two));
    EMB_EXPECT_ERR(emb__loss_check_no_overlap(&out, "grad_input", &far, "target", &in, "input",
                                              NULL, "weight", NULL, "x"),
                   EMB_ERR_INVALID, "grad_input must not overlap input");
    EMB_EXPECT_ERR(emb__loss_check_no_overlap(&in, "grad_input", &out, "input", NULL, "target",
                                              NULL, "weight", NULL, "x"),
                   EMB_ERR_INVALID, "grad_input must not overlap input");
    assert_int_equal(emb__loss_check_no_overlap(&far, "grad_input", &out, "input", &in, "target",
                                                NULL, "weight", NULL, "x"),
                     EMB_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_ce_hand),
        cmocka_unit_test(test_ce_values),
        cmocka_unit_test(test_ce_all_ignored),
        cmocka_unit_test(test_ce_large_logits),
        cmocka_unit_test(test_ce_finite_differences),
        cmocka_unit_test(test_ce_errors),
        cmocka_unit_test(test_ce_fuzz_empty_tensors),
        cmocka_unit_test(test_ce_weight),
        cmocka_unit_test(test_nll_and_log_softmax),
        cmocka_unit_test(test_log_softmax_ref_vs_simd),
        cmocka_unit_test(test_mse_values_and_grad),
        cmocka_unit_test(test_mse_broadcast_target),
        cmocka_unit_test(test_mse_errors),
        cmocka_unit_test(test_bce_values_and_grad),
        cmocka_unit_test(test_bce_stable),
        cmocka_unit_test(test_bce_errors),
        cmocka_unit_test(test_thread_independence),
        cmocka_unit_test(test_overlap_check_at_the_top),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
