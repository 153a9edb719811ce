/* Hogwild row updates (include/emb/optim.h: emb_optimizer_advance_step,
 * emb_optimizer_update_rows): equal to step_sparse bit for bit, every refusal (status,
 * message, nothing changed), several threads on disjoint rows == the same updates one after
 * the other (this test also runs in the ThreadSanitizer build of `make test`, which must
 * report nothing), and overlapping rows (a race by design: not run under TSan) give, element
 * by element, the result of some whole updates of that element (lost ones allowed). Threads
 * are pthreads, so the test says the same with or without OpenMP. */
#include "emb_test.h"

#include <pthread.h>

#if defined(__SANITIZE_THREAD__)
#define EMB_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EMB_TEST_TSAN 1
#endif
#endif

static emb_optimizer *make_opt(emb_optimizer_options o) {
    emb_optimizer *opt = NULL;
    EMB_OK_OR_FAIL(emb_optimizer_create(&o, &opt));
    return opt;
}

/* The optimizers whose sparse rule is row-local. */
static int row_configs(emb_optimizer_options *cfg) {
    int n = 0;
    cfg[n] = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    cfg[n++].lr = 0.1;
    cfg[n] = cfg[0];
    cfg[n++].maximize = true;
    cfg[n] = emb_optimizer_options_default(EMB_OPTIMIZER_ADAGRAD);
    cfg[n].lr_decay = 0.05;
    cfg[n++].initial_accumulator_value = 0.1;
    cfg[n] = emb_optimizer_options_default(EMB_OPTIMIZER_SPARSE_ADAM);
    cfg[n++].lr = 0.01;
    cfg[n] = cfg[n - 1];
    cfg[n++].maximize = true;
    return n;
}

/* advance_step + update_rows(entries) == step_sparse(entries), int32 and int64 rows, with
 * duplicates (more than 16 entries: the unstable sort's order) and empty steps. */
static void test_update_rows_equals_step_sparse(void **state) {
    (void)state;
    enum { V = 13, D = 5, N = 40 };
    emb_optimizer_options cfg[8];
    const int nc = row_configs(cfg);
    for (int c = 0; c < nc; c++) {
        for (int i32 = 0; i32 < 2; i32++) {
            uint64_t rng = 100 + (uint64_t)(c * 2 + i32);
            float pa[V * D], pb[V * D];
            emb_test_randf(&rng, pa, V * D, -1, 1);
            memcpy(pb, pa, sizeof pa);
            emb_optimizer *a = make_opt(cfg[c]), *b = make_opt(cfg[c]);
            emb_tensor ta = emb_test_view(EMB_FLOAT32, pa, 2, SHP(V, D));
            emb_tensor tb = emb_test_view(EMB_FLOAT32, pb, 2, SHP(V, D));
            int ia, ib;
            EMB_OK_OR_FAIL(emb_optimizer_add_param(a, &ta, &ia));
            EMB_OK_OR_FAIL(emb_optimizer_add_param(b, &tb, &ib));
            EMB_OK_OR_FAIL(emb_optimizer_init_state(b, ib));
            for (int s = 0; s < 5; s++) {
                const int64_t n = s == 3 ? 0 : N;
                int64_t r64[N];
                int32_t r32[N];
                float val[N * D];
                for (int64_t k = 0; k < n; k++) {
                    r64[k] = (int64_t)(emb_test_next_u64(&rng) % (k % 2 ? 3 : V));
                    r32[k] = (int32_t)r64[k];
                }
                emb_test_randf(&rng, val, n * D, -2, 2);
                emb_sparse_grad g;
                memset(&g, 0, sizeof g);
                g.num_rows = V;
                g.dim = D;
                g.nnz = g.capacity = n;
                g.indices = n ? r64 : NULL;
                g.values = n ? val : NULL;
                g.coalesced = n < 2;
                EMB_OK_OR_FAIL(emb_optimizer_step_sparse(a, ia, &g));
                emb_tensor tr = i32 ? emb_test_view(EMB_INT32, n ? r32 : NULL, 1, &n)
                                    : emb_test_view(EMB_INT64, n ? r64 : NULL, 1, &n);
                emb_tensor tv = emb_test_view(EMB_FLOAT32, n ? val : NULL, 2, SHP(n, D));
                EMB_OK_OR_FAIL(emb_optimizer_advance_step(b, ib));
                EMB_OK_OR_FAIL(emb_optimizer_update_rows(b, ib, &tr, &tv));
                EMB_ASSERT_EXACT(pb, pa, V * D, "update_rows vs step_sparse");
                assert_int_equal(emb_optimizer_param_steps(b, ib), s + 1);
            }
            emb_optimizer_free(a);
            emb_optimizer_free(b);
        }
    }
}

static void test_update_rows_errors(void **state) {
    (void)state;
    enum { V = 5, D = 3 };
    float p[V * D], p0[V * D], v1[4], val[2 * D] = {1, 2, 3, 4, 5, 6};
    int64_t rows[2] = {1, 4};
    emb_tensor tr = emb_test_view(EMB_INT64, rows, 1, SHP(2));
    emb_tensor tv = emb_test_view(EMB_FLOAT32, val, 2, SHP(2, D));
    struct {
        emb_optimizer_kind kind;
        double momentum, weight_decay;
        emb_status st;
        const char *msg;
    } rej[] = {
        {EMB_OPTIMIZER_ADAM, 0, 0, EMB_ERR_UNSUPPORTED, "Adam does not support sparse gradients"},
        {EMB_OPTIMIZER_ADAMW, 0, 0, EMB_ERR_UNSUPPORTED, "AdamW does not support sparse gradients"},
        {EMB_OPTIMIZER_ADAGRAD, 0, 0.1, EMB_ERR_UNSUPPORTED,
         "weight_decay option is not compatible with sparse gradients"},
        {EMB_OPTIMIZER_SGD, 0, 0.1, EMB_ERR_UNSUPPORTED, "add(sparse, dense) is not supported"},
        {EMB_OPTIMIZER_SGD, 0.9, 0, EMB_ERR_UNSUPPORTED,
         "SGD with momentum cannot update rows concurrently"},
    };
    for (size_t r = 0; r < sizeof rej / sizeof rej[0]; r++) {
        emb_optimizer_options o = emb_optimizer_options_default(rej[r].kind);
        o.momentum = rej[r].momentum;
        o.weight_decay = rej[r].weight_decay;
        emb_optimizer *opt = make_opt(o);
        emb_test_fill(p, V * D, 0.5f);
        emb_tensor tp = emb_test_view(EMB_FLOAT32, p, 2, SHP(V, D));
        int id;
        EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tp, &id));
        EMB_OK_OR_FAIL(emb_optimizer_init_state(opt, id));
        EMB_OK_OR_FAIL(emb_optimizer_advance_step(opt, id));
        EMB_EXPECT_ERR(emb_optimizer_update_rows(opt, id, &tr, &tv), rej[r].st, rej[r].msg);
        emb_test_assert_all(p, V * D, 0.5f, "parameter");
        emb_optimizer_free(opt);
    }

    emb_optimizer *opt = make_opt(emb_optimizer_options_default(EMB_OPTIMIZER_ADAGRAD));
    emb_test_randf(&(uint64_t){7}, p, V * D, -1, 1);
    memcpy(p0, p, sizeof p);
    emb_tensor tp = emb_test_view(EMB_FLOAT32, p, 2, SHP(V, D));
    emb_tensor t1 = emb_test_view(EMB_FLOAT32, v1, 1, SHP(4));
    int id, id1;
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tp, &id));
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &t1, &id1));
    /* the order of use: advance_step, then init_state */
    EMB_EXPECT_ERR(emb_optimizer_update_rows(opt, id, &tr, &tv), EMB_ERR_STATE,
                   "parameter 0 has made no step: call emb_optimizer_advance_step");
    EMB_OK_OR_FAIL(emb_optimizer_advance_step(opt, id));
    EMB_EXPECT_ERR(emb_optimizer_update_rows(opt, id, &tr, &tv), EMB_ERR_STATE,
                   "parameter 0 has no state: call emb_optimizer_init_state");
    EMB_OK_OR_FAIL(emb_optimizer_init_state(opt, id));
    EMB_EXPECT_ERR(emb_optimizer_update_rows(NULL, id, &tr, &tv), EMB_ERR_NULL,
                   "opt must not be NULL");
    EMB_EXPECT_ERR(emb_optimizer_update_rows(opt, 2, &tr, &tv), EMB_ERR_INDEX,
                   "param_id 2 is out of range for an optimizer with 2 parameters");
    EMB_EXPECT_ERR(emb_optimizer_update_rows(opt, id, NULL, &tv), EMB_ERR_NULL,
                   "rows must not be NULL");
    EMB_EXPECT_ERR(emb_optimizer_update_rows(opt, id, &tr, NULL), EMB_ERR_NULL,
                   "values must not be NULL");
    emb_tensor bad = tr;
    bad.dtype = EMB_FLOAT32;
    bad.data = val;
    EMB_EXPECT_ERR(emb_optimizer_update_rows(opt, id, &bad, &tv), EMB_ERR_DTYPE,
                   "torch.FloatTensor");
    bad = emb_test_view(EMB_INT64, rows, 2, SHP(1, 2));
    EMB_EXPECT_ERR(emb_optimizer_update_rows(opt, id, &bad, &tv), EMB_ERR_SHAPE,
                   "rows must be 1-D, got shape [1, 2]");
    bad = emb_test_view(EMB_FLOAT32, val, 2, SHP(3, 2));
    EMB_EXPECT_ERR(emb_optimizer_update_rows(opt, id, &tr, &bad), EMB_ERR_SHAPE,
                   "values has shape [3, 2], expected [2, 3]");
    bad = tv;
    bad.dtype = EMB_INT32;
    EMB_EXPECT_ERR(emb_optimizer_update_rows(opt, id, &tr, &bad), EMB_ERR_DTYPE,
                   "values must be float32, got int32");
    EMB_EXPECT_ERR(emb_optimizer_update_rows(opt, id1, &tr, &tv), EMB_ERR_SHAPE,
                   "sparse gradients need a 2-D parameter; parameter 1 has shape [4]");
    rows[1] = V;
    EMB_EXPECT_ERR(emb_optimizer_update_rows(opt, id, &tr, &tv), EMB_ERR_INDEX,
                   "index 5 at position 1 is out of range for a parameter with 5 rows");
    rows[1] = -2;
    EMB_EXPECT_ERR(emb_optimizer_update_rows(opt, id, &tr, &tv), EMB_ERR_INDEX, "index -2");
    EMB_ASSERT_EXACT(p, p0, V * D, "parameter after refused row updates");
    assert_int_equal(emb_optimizer_param_steps(opt, id), 1);
    rows[1] = 4;
    EMB_OK_OR_FAIL(emb_optimizer_update_rows(opt, id, &tr, &tv));
    assert_true(p[1 * D] != p0[1 * D] && p[0] == p0[0]);
    assert_int_equal(emb_optimizer_param_steps(opt, id), 1); /* not advanced by updates */
    /* A parameter without columns: nothing to update, no pointer arithmetic on NULL. */
    emb_tensor te = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(4, 0));
    int ie;
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &te, &ie));
    EMB_OK_OR_FAIL(emb_optimizer_init_state(opt, ie));
    EMB_OK_OR_FAIL(emb_optimizer_advance_step(opt, ie));
    emb_tensor tv0 = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(2, 0));
    rows[1] = 3;
    EMB_OK_OR_FAIL(emb_optimizer_update_rows(opt, ie, &tr, &tv0));
    assert_int_equal(emb_optimizer_param_steps(opt, ie), 1);
    EMB_EXPECT_ERR(emb_optimizer_advance_step(NULL, id), EMB_ERR_NULL, "opt must not be NULL");
    EMB_EXPECT_ERR(emb_optimizer_advance_step(opt, 5), EMB_ERR_INDEX, "param_id 5");
    emb_optimizer_free(opt);
}

/* ---- threads ------------------------------------------------------------------------- */

enum { HV = 64, HD = 16, HT = 4, HCALLS = 30, HN = 12, HSTEPS = 3 };

typedef struct hjob {
    const emb_optimizer *opt;
    int id;
    int64_t rows[HCALLS][HN];
    float vals[HCALLS][HN * HD];
    emb_status st;
} hjob;

static void *hrun(void *arg) {
    hjob *j = arg;
    j->st = EMB_OK;
    for (int c = 0; c < HCALLS && !j->st; c++) {
        emb_tensor tr, tv;
        int64_t n = HN;
        j->st = emb_tensor_init(&tr, EMB_INT64, j->rows[c], 1, &n);
        if (!j->st)
            j->st = emb_tensor_init(&tv, EMB_FLOAT32, j->vals[c], 2, (const int64_t[]){HN, HD});
        if (!j->st) j->st = emb_optimizer_update_rows(j->opt, j->id, &tr, &tv);
    }
    return NULL;
}

/* Fills the jobs of one step: thread t's rows are those with row % HT == t when disjoint,
 * any row otherwise (with duplicates inside a call either way). */
static void hfill(hjob *jobs, bool disjoint, uint64_t *rng) {
    for (int t = 0; t < HT; t++)
        for (int c = 0; c < HCALLS; c++) {
            for (int k = 0; k < HN; k++) {
                int64_t r = (int64_t)(emb_test_next_u64(rng) % (HV / HT));
                jobs[t].rows[c][k] = disjoint ? r * HT + t : (r * 7 + k) % HV;
            }
            emb_test_randf(rng, jobs[t].vals[c], HN * HD, -1, 1);
        }
}

/* Several threads on disjoint rows: no race (TSan-clean), and the result is exactly that
 * of the same calls made one after the other. */
static void test_hogwild_disjoint_rows(void **state) {
    (void)state;
    emb_optimizer_options cfg[8];
    const int nc = row_configs(cfg);
    static hjob jobs[HT];
    for (int c = 0; c < nc; c++) {
        uint64_t rng = 900 + (uint64_t)c;
        static float pc[HV * HD], ps[HV * HD];
        emb_test_randf(&rng, pc, HV * HD, -1, 1);
        memcpy(ps, pc, sizeof pc);
        emb_optimizer *oc = make_opt(cfg[c]), *os = make_opt(cfg[c]);
        emb_tensor tc = emb_test_view(EMB_FLOAT32, pc, 2, SHP(HV, HD));
        emb_tensor ts = emb_test_view(EMB_FLOAT32, ps, 2, SHP(HV, HD));
        int ic, is;
        EMB_OK_OR_FAIL(emb_optimizer_add_param(oc, &tc, &ic));
        EMB_OK_OR_FAIL(emb_optimizer_add_param(os, &ts, &is));
        EMB_OK_OR_FAIL(emb_optimizer_init_state(oc, ic));
        EMB_OK_OR_FAIL(emb_optimizer_init_state(os, is));
        for (int s = 0; s < HSTEPS; s++) {
            hfill(jobs, true, &rng);
            EMB_OK_OR_FAIL(emb_optimizer_advance_step(oc, ic));
            EMB_OK_OR_FAIL(emb_optimizer_advance_step(os, is));
            pthread_t th[HT];
            for (int t = 0; t < HT; t++) {
                jobs[t].opt = oc;
                jobs[t].id = ic;
                assert_int_equal(pthread_create(&th[t], NULL, hrun, &jobs[t]), 0);
            }
            for (int t = 0; t < HT; t++) assert_int_equal(pthread_join(th[t], NULL), 0);
            for (int t = 0; t < HT; t++) {
                if (jobs[t].st) fail_msg("thread %d: status %d", t, (int)jobs[t].st);
                jobs[t].opt = os;
                jobs[t].id = is;
                hrun(&jobs[t]); /* the same calls, one after the other */
                assert_int_equal(jobs[t].st, EMB_OK);
            }
            EMB_ASSERT_EXACT(pc, ps, HV * HD, "concurrent disjoint rows vs sequential");
        }
        assert_int_equal(emb_optimizer_param_steps(oc, ic), HSTEPS);
        emb_optimizer_free(oc);
        emb_optimizer_free(os);
    }
}

/* Overlapping rows race on floats by design (Hogwild): an update may be lost, so the result
 * depends on timing, but every element of the result is still the outcome of a chain of
 * whole updates. The gradients are built so that this can be checked element by element:
 * the last HV_FREE rows are never named, every gradient entry of column j is the same
 * positive value hgrad(j) (so every update moves the same way), and the initial values and
 * SGD's learning rate are exactly representable, as are all their sums here. Then
 *  - rows no call names keep their bits;
 *  - SGD (entry by entry): p0 - p == lr * hgrad(j) * k exactly (sign flipped by maximize),
 *    for a whole number k of applied entries, 1 <= k <= the entries naming the row;
 *  - Adagrad, SparseAdam (one update per row and call, duplicates summed first): p moved
 *    the gradient's way, at least once and by at most hbound() per call naming the row.
 * A wrong update (another row, column, sign or size, or none) breaks these. Not run under
 * ThreadSanitizer, which rightly reports the race (not compiled in that build). */
#ifndef EMB_TEST_TSAN
enum { HV_FREE = 8 };

static float hgrad(int64_t j) {
    return 0.25f * (float)(j % 4 + 1);
}

static float hinit(int64_t i) {
    return (float)((i * 5) % 7 - 3);
}

/* The largest move of one element in one update_rows call of step 1..HSTEPS, for gradient
 * entries between gmin and gmax (duplicates summed: gmin <= G <= gmax). Adagrad: clr*G over
 * sqrt(sum) + eps, where sum >= G^2 includes this G^2, so at most lr. SparseAdam: the step
 * size lr*sqrt(1-beta2^t)/(1-beta1^t) times m/(sqrt(v)+eps), where the moments updated
 * with this G give m <= gmax and v >= (1-beta2)*G^2. */
static double hbound(const emb_optimizer_options *o, double gmin, double gmax) {
    if (o->kind == EMB_OPTIMIZER_ADAGRAD) return o->lr * (1 + 1e-6);
    double step = 0;
    for (int t = 1; t <= HSTEPS; t++) {
        double s = o->lr * sqrt(1 - pow(o->beta2, t)) / (1 - pow(o->beta1, t));
        if (s > step) step = s;
    }
    return step * gmax / (sqrt(1 - o->beta2) * gmin) * (1 + 1e-6);
}

/* Fills the jobs of one step for overlapping updates: any row but the last HV_FREE, with
 * duplicates inside a call and across threads; counts the entries and the calls per row. */
static void hfill_overlap(hjob *jobs, uint64_t *rng, int64_t *entries, int64_t *calls) {
    for (int t = 0; t < HT; t++)
        for (int c = 0; c < HCALLS; c++) {
            bool named[HV] = {false};
            for (int k = 0; k < HN; k++) {
                int64_t r = (int64_t)(emb_test_next_u64(rng) % (HV - HV_FREE));
                if (k % 3 == 2) r = jobs[t].rows[c][k - 1]; /* a duplicate in the call */
                jobs[t].rows[c][k] = r;
                entries[r]++;
                if (!named[r]) calls[r]++;
                named[r] = true;
                for (int j = 0; j < HD; j++) jobs[t].vals[c][k * HD + j] = hgrad(j);
            }
        }
}

static void hcheck_overlap(int c, const emb_optimizer_options *o, const float *p,
                           const int64_t *entries, const int64_t *calls) {
    const double dir = o->maximize ? -1.0 : 1.0; /* p decreases when minimizing */
    const double bound = hbound(o, hgrad(0), HN * (double)hgrad(HD - 1));
    for (int64_t r = 0; r < HV; r++)
        for (int64_t j = 0; j < HD; j++) {
            const int64_t i = r * HD + j;
            const float p0 = hinit(i), got = p[i];
            if (!isfinite(got)) fail_msg("config %d: p[%lld] = %g", c, (long long)i, got);
            if (entries[r] == 0) {
                if (memcmp(&got, &p0, sizeof got))
                    fail_msg("config %d: row %lld, named by no call, changed from %g to %g", c,
                             (long long)r, p0, got);
                continue;
            }
            const double moved = dir * ((double)p0 - (double)got);
            if (o->kind == EMB_OPTIMIZER_SGD) {
                const double k = moved / (o->lr * hgrad(j));
                if (k != floor(k) || k < 1 || k > (double)entries[r])
                    fail_msg("config %d: p[%lld][%lld] moved from %g to %g: %g updates of "
                             "lr * %g, not a whole number in [1, %lld]",
                             c, (long long)r, (long long)j, p0, got, k, o->lr, hgrad(j),
                             (long long)entries[r]);
            } else if (!(moved > 0 && moved <= (double)calls[r] * bound)) {
                fail_msg("config %d: p[%lld][%lld] moved from %g to %g, outside (0, %lld "
                         "calls * %g] in the gradient's direction",
                         c, (long long)r, (long long)j, p0, got, (long long)calls[r], bound);
            }
        }
}

static void test_hogwild_overlapping_rows(void **state) {
    (void)state;
    emb_optimizer_options cfg[8];
    int nc = 0;
    cfg[nc] = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    cfg[nc++].lr = 0.125; /* a power of two: every p0 - lr * g * k is exact */
    cfg[nc] = cfg[0];
    cfg[nc++].maximize = true;
    cfg[nc] = emb_optimizer_options_default(EMB_OPTIMIZER_ADAGRAD);
    cfg[nc].lr_decay = 0.05;
    cfg[nc++].initial_accumulator_value = 0.1;
    cfg[nc] = emb_optimizer_options_default(EMB_OPTIMIZER_SPARSE_ADAM);
    cfg[nc++].lr = 0.01;
    cfg[nc] = cfg[nc - 1];
    cfg[nc++].maximize = true;
    static hjob jobs[HT];
    for (int c = 0; c < nc; c++) {
        uint64_t rng = 700 + (uint64_t)c;
        static float p[HV * HD];
        for (int64_t i = 0; i < HV * HD; i++) p[i] = hinit(i);
        int64_t entries[HV] = {0}, calls[HV] = {0};
        emb_optimizer *opt = make_opt(cfg[c]);
        emb_tensor tp = emb_test_view(EMB_FLOAT32, p, 2, SHP(HV, HD));
        int id;
        EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tp, &id));
        EMB_OK_OR_FAIL(emb_optimizer_init_state(opt, id));
        for (int s = 0; s < HSTEPS; s++) {
            hfill_overlap(jobs, &rng, entries, calls);
            EMB_OK_OR_FAIL(emb_optimizer_advance_step(opt, id));
            pthread_t th[HT];
            for (int t = 0; t < HT; t++) {
                jobs[t].opt = opt;
                jobs[t].id = id;
                assert_int_equal(pthread_create(&th[t], NULL, hrun, &jobs[t]), 0);
            }
            for (int t = 0; t < HT; t++) assert_int_equal(pthread_join(th[t], NULL), 0);
            for (int t = 0; t < HT; t++) assert_int_equal(jobs[t].st, EMB_OK);
        }
        hcheck_overlap(c, &cfg[c], p, entries, calls);
        assert_int_equal(emb_optimizer_param_steps(opt, id), HSTEPS);
        emb_optimizer_free(opt);
    }
}
#endif /* EMB_TEST_TSAN */

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_update_rows_equals_step_sparse),
        cmocka_unit_test(test_update_rows_errors),
        cmocka_unit_test(test_hogwild_disjoint_rows),
#ifndef EMB_TEST_TSAN
        cmocka_unit_test(test_hogwild_overlapping_rows),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
