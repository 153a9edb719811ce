/* Unit tests of the optimizers (include/emb/optim.h): defaults, validation messages, every
 * error path (status, message, nothing changed), parameter registration, step counts, lazy
 * state, sparse semantics on hand-checked cases, fused == unfused, and the kernel variants
 * against the reference kernels. Parity with torch is in tests/parity/test_optim.py. */
#include "emb_test.h"

#include <stdlib.h>

#include "kernels/dispatch.h"
#include "nn/embedding_internal.h" /* the read_only flag, to make a world read-only */

/* ---- helpers ------------------------------------------------------------------------ */

static emb_optimizer *make_opt(emb_optimizer_options o) {
    emb_optimizer *opt = NULL;
    EMB_OK_OR_FAIL(emb_optimizer_create(&o, &opt));
    return opt;
}

static emb_tensor view2(float *data, int64_t r, int64_t c) {
    emb_tensor t;
    int64_t shape[2] = {r, c};
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, data, 2, shape));
    return t;
}

static emb_tensor view1(void *data, emb_dtype dt, int64_t n) {
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_tensor_init(&t, dt, data, 1, &n));
    return t;
}

/* A sparse gradient viewing caller arrays (fields filled as emb_sparse_grad_init would,
 * plus the entries). */
static emb_sparse_grad sparse_view(int64_t rows, int64_t dim, int64_t nnz, int64_t *idx,
                                   float *val) {
    emb_sparse_grad g;
    memset(&g, 0, sizeof g);
    g.num_rows = rows;
    g.dim = dim;
    g.nnz = nnz;
    g.capacity = nnz;
    g.indices = idx;
    g.values = val;
    g.coalesced = nnz <= 1;
    return g;
}

static void fill(float *x, int64_t n, unsigned seed) {
    srand(seed);
    for (int64_t i = 0; i < n; i++) x[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
}

#define P_ROWS 5
#define P_COLS 3
#define P_N    (P_ROWS * P_COLS)

/* ---- options ------------------------------------------------------------------------ */

static void test_defaults(void **state) {
    (void)state;
    emb_optimizer_options o = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    assert_int_equal(o.kind, EMB_OPTIMIZER_SGD);
    assert_true(o.lr == 1e-3 && o.momentum == 0 && o.dampening == 0 && !o.nesterov &&
                o.weight_decay == 0 && !o.maximize);
    o = emb_optimizer_options_default(EMB_OPTIMIZER_ADAGRAD);
    assert_true(o.lr == 1e-2 && o.eps == 1e-10 && o.lr_decay == 0 &&
                o.initial_accumulator_value == 0 && o.weight_decay == 0);
    o = emb_optimizer_options_default(EMB_OPTIMIZER_ADAM);
    assert_true(o.lr == 1e-3 && o.eps == 1e-8 && o.beta1 == 0.9 && o.beta2 == 0.999 &&
                o.weight_decay == 0 && !o.amsgrad);
    o = emb_optimizer_options_default(EMB_OPTIMIZER_ADAMW);
    assert_true(o.lr == 1e-3 && o.eps == 1e-8 && o.weight_decay == 1e-2);
    o = emb_optimizer_options_default(EMB_OPTIMIZER_SPARSE_ADAM);
    assert_true(o.lr == 1e-3 && o.eps == 1e-8 && o.beta1 == 0.9 && o.beta2 == 0.999);
}

typedef struct bad_case {
    emb_optimizer_kind kind;
    const char *field;
    double value;
    const char *msg; /* the whole expected message */
} bad_case;

static void set_field(emb_optimizer_options *o, const char *f, double v) {
    if (!strcmp(f, "lr"))
        o->lr = v;
    else if (!strcmp(f, "momentum"))
        o->momentum = v;
    else if (!strcmp(f, "dampening"))
        o->dampening = v;
    else if (!strcmp(f, "weight_decay"))
        o->weight_decay = v;
    else if (!strcmp(f, "lr_decay"))
        o->lr_decay = v;
    else if (!strcmp(f, "init"))
        o->initial_accumulator_value = v;
    else if (!strcmp(f, "eps"))
        o->eps = v;
    else if (!strcmp(f, "beta1"))
        o->beta1 = v;
    else if (!strcmp(f, "beta2"))
        o->beta2 = v;
    else
        fail_msg("unknown field %s", f);
}

static void test_create_errors(void **state) {
    (void)state;
    static const bad_case cases[] = {
        {EMB_OPTIMIZER_SGD, "lr", -1.0, "Invalid learning rate: -1.0"},
        {EMB_OPTIMIZER_SGD, "lr", NAN, "Invalid learning rate: nan"},
        {EMB_OPTIMIZER_SGD, "momentum", -0.5, "Invalid momentum value: -0.5"},
        {EMB_OPTIMIZER_SGD, "weight_decay", -1e-5, "Invalid weight_decay value: -1e-05"},
        {EMB_OPTIMIZER_ADAGRAD, "lr", -0.01, "Invalid learning rate: -0.01"},
        {EMB_OPTIMIZER_ADAGRAD, "lr_decay", -1e16, "Invalid lr_decay value: -1e+16"},
        {EMB_OPTIMIZER_ADAGRAD, "weight_decay", -2.5, "Invalid weight_decay value: -2.5"},
        {EMB_OPTIMIZER_ADAGRAD, "init", -0.1, "Invalid initial_accumulator_value value: -0.1"},
        {EMB_OPTIMIZER_ADAGRAD, "eps", -1e-10, "Invalid epsilon value: -1e-10"},
        {EMB_OPTIMIZER_ADAM, "lr", -123456.0, "Invalid learning rate: -123456.0"},
        {EMB_OPTIMIZER_ADAM, "eps", -INFINITY, "Invalid epsilon value: -inf"},
        {EMB_OPTIMIZER_ADAM, "beta1", 1.0, "Invalid beta parameter at index 0: 1.0"},
        {EMB_OPTIMIZER_ADAM, "beta2", -0.0001, "Invalid beta parameter at index 1: -0.0001"},
        {EMB_OPTIMIZER_ADAM, "weight_decay", -3.0e-300, "Invalid weight_decay value: -3e-300"},
        {EMB_OPTIMIZER_ADAMW, "beta1", 1.5, "Invalid beta parameter at index 0: 1.5"},
        {EMB_OPTIMIZER_ADAMW, "beta2", NAN, "Invalid beta parameter at index 1: nan"},
        {EMB_OPTIMIZER_ADAMW, "weight_decay", -0.01, "Invalid weight_decay value: -0.01"},
        {EMB_OPTIMIZER_SPARSE_ADAM, "lr", 0.0, "Invalid learning rate: 0.0"},
        {EMB_OPTIMIZER_SPARSE_ADAM, "eps", 0.0, "Invalid epsilon value: 0.0"},
        {EMB_OPTIMIZER_SPARSE_ADAM, "beta1", 1.0, "Invalid beta parameter at index 0: 1.0"},
        {EMB_OPTIMIZER_SPARSE_ADAM, "beta2", 0.1 + 0.2 + 1.0,
         "Invalid beta parameter at index 1: 1.3"},
        {EMB_OPTIMIZER_SPARSE_ADAM, "beta2", 1.0 / 3.0 + 1.0,
         "Invalid beta parameter at index 1: 1.3333333333333333"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        emb_optimizer_options o = emb_optimizer_options_default(cases[i].kind);
        set_field(&o, cases[i].field, cases[i].value);
        emb_optimizer *sentinel = (emb_optimizer *)&o, *out = sentinel;
        emb_clear_error();
        emb_status st = emb_optimizer_create(&o, &out);
        assert_int_equal(st, EMB_ERR_INVALID);
        if (strcmp(emb_errmsg(), cases[i].msg))
            fail_msg("case %zu: got \"%s\", want \"%s\"", i, emb_errmsg(), cases[i].msg);
        assert_ptr_equal(out, sentinel);
    }
    emb_optimizer_options o = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    o.nesterov = true;
    emb_optimizer *out = NULL;
    EMB_EXPECT_ERR(emb_optimizer_create(&o, &out), EMB_ERR_INVALID,
                   "Nesterov momentum requires a momentum and zero dampening");
    o.momentum = 0.9;
    o.dampening = 0.1;
    EMB_EXPECT_ERR(emb_optimizer_create(&o, &out), EMB_ERR_INVALID,
                   "Nesterov momentum requires a momentum and zero dampening");
    assert_null(out);
    o.dampening = 0;
    EMB_OK_OR_FAIL(emb_optimizer_create(&o, &out));
    emb_optimizer_free(out);
    out = NULL;
    o.kind = (emb_optimizer_kind)7;
    EMB_EXPECT_ERR(emb_optimizer_create(&o, &out), EMB_ERR_INVALID, "unknown optimizer kind 7");
    EMB_EXPECT_ERR(emb_optimizer_create(NULL, &out), EMB_ERR_NULL, "opts must not be NULL");
    o = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    EMB_EXPECT_ERR(emb_optimizer_create(&o, NULL), EMB_ERR_NULL, "out must not be NULL");
    assert_null(out);
    /* Values PyTorch accepts. */
    o.lr = 0.0;
    o.dampening = -3.0; /* never checked by PyTorch */
    o.weight_decay = -0.0;
    EMB_OK_OR_FAIL(emb_optimizer_create(&o, &out));
    emb_optimizer_free(out);
    emb_optimizer_free(NULL);
}

/* ---- non-finite hyper-parameters, set_lr, init_state, empty parameters --------------- */

/* emb is stricter than PyTorch: every non-finite value an optimizer uses is refused
 * (fuzzer finding: SGD took a NaN dampening and infinite lr or momentum, and the parameters
 * became NaN). */
static void test_nonfinite_options(void **state) {
    (void)state;
    static const bad_case cases[] = {
        {EMB_OPTIMIZER_SGD, "lr", INFINITY, "Invalid learning rate: inf"},
        {EMB_OPTIMIZER_SGD, "momentum", INFINITY, "Invalid momentum value: inf"},
        {EMB_OPTIMIZER_SGD, "weight_decay", INFINITY, "Invalid weight_decay value: inf"},
        {EMB_OPTIMIZER_SGD, "dampening", NAN, "Invalid dampening value: nan"},
        {EMB_OPTIMIZER_SGD, "dampening", INFINITY, "Invalid dampening value: inf"},
        {EMB_OPTIMIZER_SGD, "dampening", -INFINITY, "Invalid dampening value: -inf"},
        {EMB_OPTIMIZER_ADAGRAD, "lr", INFINITY, "Invalid learning rate: inf"},
        {EMB_OPTIMIZER_ADAGRAD, "lr_decay", INFINITY, "Invalid lr_decay value: inf"},
        {EMB_OPTIMIZER_ADAGRAD, "weight_decay", INFINITY, "Invalid weight_decay value: inf"},
        {EMB_OPTIMIZER_ADAGRAD, "init", INFINITY, "Invalid initial_accumulator_value value: inf"},
        {EMB_OPTIMIZER_ADAGRAD, "eps", INFINITY, "Invalid epsilon value: inf"},
        {EMB_OPTIMIZER_ADAM, "lr", INFINITY, "Invalid learning rate: inf"},
        {EMB_OPTIMIZER_ADAM, "eps", INFINITY, "Invalid epsilon value: inf"},
        {EMB_OPTIMIZER_ADAM, "weight_decay", INFINITY, "Invalid weight_decay value: inf"},
        {EMB_OPTIMIZER_ADAMW, "lr", INFINITY, "Invalid learning rate: inf"},
        {EMB_OPTIMIZER_ADAMW, "weight_decay", INFINITY, "Invalid weight_decay value: inf"},
        {EMB_OPTIMIZER_SPARSE_ADAM, "lr", INFINITY, "Invalid learning rate: inf"},
        {EMB_OPTIMIZER_SPARSE_ADAM, "eps", INFINITY, "Invalid epsilon value: inf"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        emb_optimizer_options o = emb_optimizer_options_default(cases[i].kind);
        o.momentum = cases[i].kind == EMB_OPTIMIZER_SGD ? 0.9 : 0.0;
        set_field(&o, cases[i].field, cases[i].value);
        emb_optimizer *sentinel = (emb_optimizer *)&o, *out = sentinel;
        emb_clear_error();
        assert_int_equal(emb_optimizer_create(&o, &out), EMB_ERR_INVALID);
        if (strcmp(emb_errmsg(), cases[i].msg))
            fail_msg("case %zu: got \"%s\", want \"%s\"", i, emb_errmsg(), cases[i].msg);
        assert_ptr_equal(out, sentinel);
    }
    /* A finite negative dampening stays allowed (PyTorch never checks it). */
    emb_optimizer_options o = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    o.momentum = 0.9;
    o.dampening = -0.5;
    emb_optimizer_free(make_opt(o));
}

static void test_set_lr(void **state) {
    (void)state;
    emb_optimizer_kind kinds[] = {EMB_OPTIMIZER_SGD, EMB_OPTIMIZER_ADAGRAD, EMB_OPTIMIZER_ADAM,
                                  EMB_OPTIMIZER_ADAMW, EMB_OPTIMIZER_SPARSE_ADAM};
    for (size_t k = 0; k < 5; k++) {
        emb_optimizer *opt = make_opt(emb_optimizer_options_default(kinds[k]));
        const double lr0 = emb_optimizer_lr(opt);
        assert_true(lr0 == emb_optimizer_options_default(kinds[k]).lr);
        EMB_EXPECT_ERR(emb_optimizer_set_lr(opt, INFINITY), EMB_ERR_INVALID,
                       "Invalid learning rate: inf");
        EMB_EXPECT_ERR(emb_optimizer_set_lr(opt, NAN), EMB_ERR_INVALID,
                       "Invalid learning rate: nan");
        EMB_EXPECT_ERR(emb_optimizer_set_lr(opt, -0.25), EMB_ERR_INVALID,
                       "Invalid learning rate: -0.25");
        if (kinds[k] == EMB_OPTIMIZER_SPARSE_ADAM)
            EMB_EXPECT_ERR(emb_optimizer_set_lr(opt, 0.0), EMB_ERR_INVALID,
                           "Invalid learning rate: 0.0");
        else
            EMB_OK_OR_FAIL(emb_optimizer_set_lr(opt, 0.0));
        assert_true(emb_optimizer_lr(opt) == (kinds[k] == EMB_OPTIMIZER_SPARSE_ADAM ? lr0 : 0.0));
        EMB_OK_OR_FAIL(emb_optimizer_set_lr(opt, 0.125));
        assert_true(emb_optimizer_lr(opt) == 0.125);
        emb_optimizer_free(opt);
    }
    EMB_EXPECT_ERR(emb_optimizer_set_lr(NULL, 0.1), EMB_ERR_NULL, "opt must not be NULL");
    assert_true(isnan(emb_optimizer_lr(NULL)));
    /* The next step uses the new lr: plain SGD is p = fmaf(g, (float)-lr, p). */
    emb_optimizer_options o = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    o.lr = 0.1;
    emb_optimizer *opt = make_opt(o);
    float p[4] = {1, 2, 3, 4}, g[4] = {0.5f, -1.5f, 3.0f, 0.1f}, want[4];
    emb_tensor tp = view1(p, EMB_FLOAT32, 4), tg = view1(g, EMB_FLOAT32, 4);
    int id;
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tp, &id));
    EMB_OK_OR_FAIL(emb_optimizer_step(opt, id, &tg));
    for (int i = 0; i < 4; i++) want[i] = fmaf(g[i], (float)-0.1, (float)(i + 1));
    EMB_ASSERT_EXACT(p, want, 4, "lr 0.1");
    EMB_OK_OR_FAIL(emb_optimizer_set_lr(opt, 0.7));
    EMB_OK_OR_FAIL(emb_optimizer_step(opt, id, &tg));
    for (int i = 0; i < 4; i++) want[i] = fmaf(g[i], (float)-0.7, want[i]);
    EMB_ASSERT_EXACT(p, want, 4, "lr 0.7");
    assert_int_equal(emb_optimizer_param_steps(opt, id), 2);
    emb_optimizer_free(opt);
}

/* State created up front gives the same bits as lazy state, dense and sparse. */
static void test_init_state(void **state) {
    (void)state;
    emb_optimizer_options cfg[6];
    cfg[0] = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    cfg[0].momentum = 0.9;
    cfg[0].dampening = 0.1;
    cfg[1] = emb_optimizer_options_default(EMB_OPTIMIZER_ADAGRAD);
    cfg[1].initial_accumulator_value = 0.3;
    cfg[2] = emb_optimizer_options_default(EMB_OPTIMIZER_ADAM);
    cfg[2].amsgrad = true;
    cfg[3] = emb_optimizer_options_default(EMB_OPTIMIZER_ADAMW);
    cfg[4] = emb_optimizer_options_default(EMB_OPTIMIZER_SPARSE_ADAM);
    cfg[5] = cfg[1];
    cfg[5].lr_decay = 0.5;
    for (int c = 0; c < 6; c++) {
        for (int sparse = 0; sparse < 2; sparse++) {
            const emb_optimizer_kind kind = cfg[c].kind;
            if (sparse && (kind == EMB_OPTIMIZER_ADAM || kind == EMB_OPTIMIZER_ADAMW)) continue;
            if (!sparse && kind == EMB_OPTIMIZER_SPARSE_ADAM) continue;
            emb_optimizer *a = make_opt(cfg[c]), *b = make_opt(cfg[c]);
            float pa[P_N], pb[P_N];
            fill(pa, P_N, 60);
            memcpy(pb, pa, sizeof pa);
            emb_tensor ta = view2(pa, P_ROWS, P_COLS), tb = view2(pb, P_ROWS, P_COLS);
            int ia, ib;
            EMB_OK_OR_FAIL(emb_optimizer_add_param(a, &ta, &ia));
            EMB_OK_OR_FAIL(emb_optimizer_add_param(b, &tb, &ib));
            EMB_OK_OR_FAIL(emb_optimizer_init_state(a, ia));
            EMB_OK_OR_FAIL(emb_optimizer_init_state(a, ia)); /* twice: nothing more */
            assert_int_equal(emb_optimizer_param_steps(a, ia), 0);
            EMB_ASSERT_EXACT(pa, pb, P_N, "init_state does not touch the parameter");
            for (int s = 0; s < 4; s++) {
                float g[P_N];
                fill(g, P_N, 61 + (unsigned)s);
                if (sparse) {
                    int64_t idx[4] = {1, 4, 1, (int64_t)s};
                    emb_sparse_grad sg = sparse_view(P_ROWS, P_COLS, 4, idx, g);
                    EMB_OK_OR_FAIL(emb_optimizer_step_sparse(a, ia, &sg));
                    EMB_OK_OR_FAIL(emb_optimizer_step_sparse(b, ib, &sg));
                } else {
                    emb_tensor tg = view2(g, P_ROWS, P_COLS);
                    EMB_OK_OR_FAIL(emb_optimizer_step(a, ia, &tg));
                    EMB_OK_OR_FAIL(emb_optimizer_step(b, ib, &tg));
                }
                EMB_ASSERT_EXACT(pa, pb, P_N, "up-front state vs lazy state");
            }
            emb_optimizer_free(a);
            emb_optimizer_free(b);
        }
    }
    emb_optimizer *opt = make_opt(emb_optimizer_options_default(EMB_OPTIMIZER_ADAM));
    EMB_EXPECT_ERR(emb_optimizer_init_state(NULL, 0), EMB_ERR_NULL, "opt must not be NULL");
    EMB_EXPECT_ERR(emb_optimizer_init_state(opt, 0), EMB_ERR_INDEX,
                   "param_id 0 is out of range for an optimizer with 0 parameters");
    emb_optimizer_free(opt);
}

/* Fuzzer finding: a parameter without elements ([4, 0]) has a NULL data pointer, and the
 * steps computed NULL + 0 (undefined in C; the ASan/UBSan build runs this). Every step
 * kind counts the step and changes nothing. */
static void test_empty_parameter(void **state) {
    (void)state;
    emb_optimizer_options cfg[5];
    cfg[0] = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    cfg[1] = cfg[0];
    cfg[1].momentum = 0.9;
    cfg[2] = emb_optimizer_options_default(EMB_OPTIMIZER_ADAGRAD);
    cfg[3] = emb_optimizer_options_default(EMB_OPTIMIZER_SPARSE_ADAM);
    cfg[4] = emb_optimizer_options_default(EMB_OPTIMIZER_ADAM);
    for (int c = 0; c < 5; c++) {
        emb_optimizer *opt = make_opt(cfg[c]);
        emb_tensor tp = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(4, 0));
        int id;
        EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tp, &id));
        int64_t steps = 0;
        EMB_OK_OR_FAIL(emb_optimizer_init_state(opt, id));
        if (cfg[c].kind != EMB_OPTIMIZER_SPARSE_ADAM) {
            emb_tensor tg = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(4, 0));
            EMB_OK_OR_FAIL(emb_optimizer_step(opt, id, &tg));
            steps++;
        }
        if (cfg[c].kind != EMB_OPTIMIZER_ADAM) {
            /* two sparse steps (SGD momentum: a new buffer, then a merge) */
            int64_t rows[3] = {3, 0, 3};
            float dummy[1] = {0};
            emb_sparse_grad sg = sparse_view(4, 0, 3, rows, dummy);
            EMB_OK_OR_FAIL(emb_optimizer_step_sparse(opt, id, &sg));
            EMB_OK_OR_FAIL(emb_optimizer_step_sparse(opt, id, &sg));
            steps += 2;
            /* The fused step needs the table's weight: a [4, 0] parameter is refused. */
            float w[4 * 2] = {0};
            emb_tensor tw = view2(w, 4, 2);
            emb_embedding *e = NULL;
            EMB_OK_OR_FAIL(emb_embedding_from_pretrained(&tw, false, NULL, &e));
            int64_t idx[2] = {1, 2};
            float go[2 * 2] = {1, 2, 3, 4};
            emb_tensor ti = view1(idx, EMB_INT64, 2), tgo = view2(go, 2, 2);
            EMB_EXPECT_ERR(emb_optimizer_step_fused(opt, id, e, &ti, &tgo), EMB_ERR_SHAPE,
                           "grad is a sparse gradient of size [4, 2], expected [4, 0]");
            emb_embedding_free(e);
        }
        assert_int_equal(emb_optimizer_param_steps(opt, id), steps);
        emb_optimizer_free(opt);
    }
    /* SGD with momentum, sparse steps only (a sparse buffer). */
    emb_optimizer *opt = make_opt(cfg[1]);
    emb_tensor tp = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(4, 0));
    int id;
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tp, &id));
    int64_t rows[3] = {3, 0, 3};
    float dummy[1] = {0};
    emb_sparse_grad sg = sparse_view(4, 0, 3, rows, dummy);
    EMB_OK_OR_FAIL(emb_optimizer_step_sparse(opt, id, &sg));
    EMB_OK_OR_FAIL(emb_optimizer_step_sparse(opt, id, &sg));
    assert_int_equal(emb_optimizer_param_steps(opt, id), 2);
    emb_optimizer_free(opt);
}

/* A read-only table (emb_embedding_wrap): the fused step refuses to write it, even when the
 * caller registered the wrapped memory itself. */
static void test_fused_read_only(void **state) {
    (void)state;
    float w[P_N], w0[P_N], go[2 * P_COLS];
    fill(w, P_N, 70);
    fill(go, 2 * P_COLS, 71);
    memcpy(w0, w, sizeof w);
    emb_tensor tw = view2(w, P_ROWS, P_COLS);
    emb_storage so = {true, NULL, NULL};
    emb_embedding *e = NULL;
    EMB_OK_OR_FAIL(emb_embedding_wrap(&tw, &so, false, NULL, &e));
    assert_true(emb_embedding_is_read_only(e));
    emb_optimizer *opt = make_opt(emb_optimizer_options_default(EMB_OPTIMIZER_SPARSE_ADAM));
    int id;
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tw, &id));
    int64_t idx[2] = {1, 3};
    emb_tensor ti = view1(idx, EMB_INT64, 2), tgo = view2(go, 2, P_COLS);
    EMB_EXPECT_ERR(emb_optimizer_step_fused(opt, id, e, &ti, &tgo), EMB_ERR_READ_ONLY,
                   "the embedding's weight is read-only");
    EMB_ASSERT_EXACT(w, w0, P_N, "read-only table");
    assert_int_equal(emb_optimizer_param_steps(opt, id), 0);
    emb_optimizer_free(opt);
    emb_embedding_free(e);
}

/* ---- state save / load --------------------------------------------------------------- */

typedef struct scfg {
    emb_optimizer_options o;
    int mode; /* 0 dense steps, 1 sparse steps, 2 dense then sparse */
} scfg;

static void state_step(emb_optimizer *opt, int id, int mode, int s, uint64_t *rng) {
    float g[P_N];
    emb_test_randf(rng, g, P_N, -1, 1);
    if (mode == 0 || (mode == 2 && s == 0)) {
        emb_tensor tg = view2(g, P_ROWS, P_COLS);
        EMB_OK_OR_FAIL(emb_optimizer_step(opt, id, &tg));
    } else {
        int64_t idx[4];
        for (int k = 0; k < 4; k++) idx[k] = (int64_t)(emb_test_next_u64(rng) % P_ROWS);
        emb_sparse_grad sg = sparse_view(P_ROWS, P_COLS, 4, idx, g);
        EMB_OK_OR_FAIL(emb_optimizer_step_sparse(opt, id, &sg));
    }
}

static uint64_t test_fnv1a64(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}
static void reseal(unsigned char *b, size_t n) {
    uint64_t h = test_fnv1a64(b, n - 8);
    for (int i = 0; i < 8; i++) b[n - 8 + i] = (unsigned char)(h >> (8 * i));
}

/* k steps, save, m more steps == load into a fresh optimizer + the same m steps, bit for
 * bit, for every optimizer, dense and sparse (two parameters, one never stepped). */
static void test_state_resume(void **state) {
    (void)state;
    scfg cfg[12];
    int nc = 0;
    emb_optimizer_options o = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    o.lr = 0.1;
    cfg[nc++] = (scfg){o, 1};
    o.momentum = 0.9;
    o.dampening = 0.2;
    cfg[nc++] = (scfg){o, 0};
    cfg[nc++] = (scfg){o, 1}; /* the sparse momentum buffer */
    cfg[nc++] = (scfg){o, 2};
    o.dampening = 0;
    o.nesterov = true;
    o.maximize = true;
    cfg[nc++] = (scfg){o, 1};
    o = emb_optimizer_options_default(EMB_OPTIMIZER_ADAGRAD);
    o.lr_decay = 0.05;
    o.initial_accumulator_value = 0.1;
    cfg[nc++] = (scfg){o, 0};
    cfg[nc++] = (scfg){o, 2};
    o = emb_optimizer_options_default(EMB_OPTIMIZER_ADAM);
    o.amsgrad = true;
    o.weight_decay = 0.01;
    cfg[nc++] = (scfg){o, 0};
    o = emb_optimizer_options_default(EMB_OPTIMIZER_ADAMW);
    cfg[nc++] = (scfg){o, 0};
    o = emb_optimizer_options_default(EMB_OPTIMIZER_SPARSE_ADAM);
    o.maximize = true;
    cfg[nc++] = (scfg){o, 1};
    for (int c = 0; c < nc; c++) {
        uint64_t rng = 500 + (uint64_t)c;
        float p[P_N], q[7];
        emb_test_randf(&rng, p, P_N, -1, 1);
        emb_test_randf(&rng, q, 7, -1, 1);
        emb_optimizer *a = make_opt(cfg[c].o);
        emb_tensor tp = view2(p, P_ROWS, P_COLS), tq = view1(q, EMB_FLOAT32, 7);
        int id, iq;
        EMB_OK_OR_FAIL(emb_optimizer_add_param(a, &tp, &id));
        EMB_OK_OR_FAIL(emb_optimizer_add_param(a, &tq, &iq));
        for (int s = 0; s < 3; s++) state_step(a, id, cfg[c].mode, s, &rng);
        const size_t n = emb_optimizer_state_nbytes(a);
        assert_true(n > 0);
        unsigned char *buf = malloc(n + 1);
        EMB_OK_OR_FAIL(emb_optimizer_save_state(a, buf, n));
        /* a fresh optimizer (other lr: the saved options replace it) over copies */
        float p2[P_N], q2[7];
        memcpy(p2, p, sizeof p);
        memcpy(q2, q, sizeof q);
        emb_optimizer_options o2 = cfg[c].o;
        o2.lr = cfg[c].o.lr * 3;
        emb_optimizer *b = make_opt(o2);
        emb_tensor tp2 = view2(p2, P_ROWS, P_COLS), tq2 = view1(q2, EMB_FLOAT32, 7);
        int id2, iq2;
        EMB_OK_OR_FAIL(emb_optimizer_add_param(b, &tp2, &id2));
        EMB_OK_OR_FAIL(emb_optimizer_add_param(b, &tq2, &iq2));
        EMB_OK_OR_FAIL(emb_optimizer_load_state(b, buf, n));
        assert_true(emb_optimizer_lr(b) == cfg[c].o.lr);
        assert_int_equal(emb_optimizer_param_steps(b, id2), 3);
        assert_int_equal(emb_optimizer_param_steps(b, iq2), 0);
        /* The loaded state saves to the same bytes. */
        assert_int_equal(emb_optimizer_state_nbytes(b), n);
        unsigned char *buf2 = malloc(n);
        EMB_OK_OR_FAIL(emb_optimizer_save_state(b, buf2, n));
        assert_memory_equal(buf, buf2, n);
        uint64_t r1 = rng, r2 = rng;
        for (int s = 3; s < 7; s++) {
            state_step(a, id, cfg[c].mode, s, &r1);
            state_step(b, id2, cfg[c].mode, s, &r2);
            EMB_ASSERT_EXACT(p2, p, P_N, "resumed vs uninterrupted");
        }
        free(buf);
        free(buf2);
        emb_optimizer_free(a);
        emb_optimizer_free(b);
    }
}

static void expect_load_fails(emb_optimizer *opt, const unsigned char *buf, size_t n,
                              const char *needle) {
    const size_t n0 = emb_optimizer_state_nbytes(opt);
    unsigned char *before = malloc(n0), *after = malloc(n0);
    EMB_OK_OR_FAIL(emb_optimizer_save_state(opt, before, n0));
    EMB_EXPECT_ERR(emb_optimizer_load_state(opt, buf, n), EMB_ERR_FORMAT, needle);
    assert_int_equal(emb_optimizer_state_nbytes(opt), n0);
    EMB_OK_OR_FAIL(emb_optimizer_save_state(opt, after, n0));
    assert_memory_equal(before, after, n0); /* nothing changed */
    free(before);
    free(after);
}

static void test_state_errors(void **state) {
    (void)state;
    emb_optimizer_options o = emb_optimizer_options_default(EMB_OPTIMIZER_ADAM);
    o.lr = 0.01;
    emb_optimizer *opt = make_opt(o);
    float p[P_N], g[P_N];
    fill(p, P_N, 80);
    fill(g, P_N, 81);
    emb_tensor tp = view2(p, P_ROWS, P_COLS), tg = view2(g, P_ROWS, P_COLS);
    int id;
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tp, &id));
    EMB_OK_OR_FAIL(emb_optimizer_step(opt, id, &tg));
    const size_t n = emb_optimizer_state_nbytes(opt);
    unsigned char *good = malloc(n + 8), *bad = malloc(n + 8);
    EMB_OK_OR_FAIL(emb_optimizer_save_state(opt, good, n));
    /* a second optimizer, stepped differently, to load into */
    emb_optimizer *dst = make_opt(o);
    float p2[P_N];
    memcpy(p2, p, sizeof p);
    emb_tensor tp2 = view2(p2, P_ROWS, P_COLS);
    EMB_OK_OR_FAIL(emb_optimizer_add_param(dst, &tp2, &id));
    EMB_OK_OR_FAIL(emb_optimizer_step(dst, id, &tg));
    EMB_OK_OR_FAIL(emb_optimizer_step(dst, id, &tg));

    EMB_EXPECT_ERR(emb_optimizer_save_state(NULL, good, n), EMB_ERR_NULL, "opt");
    EMB_EXPECT_ERR(emb_optimizer_save_state(opt, NULL, n), EMB_ERR_NULL, "buf");
    memset(bad, 0xAB, n);
    EMB_EXPECT_ERR(emb_optimizer_save_state(opt, bad, n - 1), EMB_ERR_INVALID,
                   "the optimizer state needs");
    for (size_t i = 0; i < n; i++) assert_int_equal(bad[i], 0xAB); /* nothing written */
    EMB_EXPECT_ERR(emb_optimizer_load_state(NULL, good, n), EMB_ERR_NULL, "opt");
    EMB_EXPECT_ERR(emb_optimizer_load_state(dst, NULL, n), EMB_ERR_NULL, "buf");
    assert_int_equal(emb_optimizer_state_nbytes(NULL), 0);

    expect_load_fails(dst, good, n - 1, "optimizer state: "); /* truncated */
    expect_load_fails(dst, good, 50, "truncated");
    memcpy(bad, good, n);
    bad[n] = 0;
    expect_load_fails(dst, bad, n + 1, "trailing or missing bytes");
    memcpy(bad, good, n);
    bad[n - 20] ^= 0x10; /* a flipped bit in the data */
    expect_load_fails(dst, bad, n, "checksum mismatch");
    memcpy(bad, good, n);
    bad[0] = 'X';
    expect_load_fails(dst, bad, n, "not an emb optimizer state");
    memcpy(bad, good, n);
    bad[8] = 2; /* version 2 */
    reseal(bad, n);
    expect_load_fails(dst, bad, n, "version 2 is not supported");
    memcpy(bad, good, n);
    double neg = -1.0;
    memcpy(bad + 16, &neg, 8); /* lr (little-endian host) */
    reseal(bad, n);
    expect_load_fails(dst, bad, n, "invalid options (Invalid learning rate: -1.0)");
    /* another kind */
    emb_optimizer_options oa = emb_optimizer_options_default(EMB_OPTIMIZER_ADAMW);
    emb_optimizer *w = make_opt(oa);
    float pw[P_N];
    emb_tensor tpw = view2(pw, P_ROWS, P_COLS);
    EMB_OK_OR_FAIL(emb_optimizer_add_param(w, &tpw, NULL));
    expect_load_fails(w, good, n, "saved from a Adam optimizer (kind 2), this one is AdamW");
    emb_optimizer_free(w);
    /* another parameter count, another shape */
    emb_optimizer *two = make_opt(o);
    float pa[P_N], pb[3];
    emb_tensor ta = view2(pa, P_ROWS, P_COLS), tb = view1(pb, EMB_FLOAT32, 3);
    EMB_OK_OR_FAIL(emb_optimizer_add_param(two, &ta, NULL));
    EMB_OK_OR_FAIL(emb_optimizer_add_param(two, &tb, NULL));
    expect_load_fails(two, good, n, "1 parameters saved, this optimizer has 2");
    emb_optimizer_free(two);
    emb_optimizer *shp = make_opt(o);
    emb_tensor tt = view2(pa, P_COLS, P_ROWS);
    EMB_OK_OR_FAIL(emb_optimizer_add_param(shp, &tt, NULL));
    expect_load_fails(shp, good, n, "parameter 0 was saved with shape [5, 3], it has shape [3, 5]");
    emb_optimizer_free(shp);
    /* the good state loads */
    EMB_OK_OR_FAIL(emb_optimizer_load_state(dst, good, n));
    assert_int_equal(emb_optimizer_param_steps(dst, id), 1);
    /* a loaded step count that cannot grow: the next step refuses, nothing changes */
    memcpy(bad, good, n);
    const int64_t huge = INT64_MAX;
    memcpy(bad + 96 + 8, &huge, 8); /* parameter 0's steps (little-endian host) */
    reseal(bad, n);
    EMB_OK_OR_FAIL(emb_optimizer_load_state(dst, bad, n));
    memcpy(p, p2, sizeof p);
    EMB_EXPECT_ERR(emb_optimizer_step(dst, id, &tg), EMB_ERR_OVERFLOW,
                   "parameter 0: the step count overflows");
    EMB_EXPECT_ERR(emb_optimizer_advance_step(dst, id), EMB_ERR_OVERFLOW,
                   "parameter 0: the step count overflows");
    EMB_ASSERT_EXACT(p2, p, P_N, "parameter after the refused step");
    assert_true(emb_optimizer_param_steps(dst, id) == INT64_MAX);
    free(good);
    free(bad);
    emb_optimizer_free(opt);
    emb_optimizer_free(dst);
}

/* ---- sparse gradients from the caller's rows ---------------------------------------- */

static void test_sparse_grad_from_rows(void **state) {
    (void)state;
    enum { V = 6, D = 3, N = 5 };
    float val[N * D], w0[V * D];
    fill(val, N * D, 90);
    fill(w0, V * D, 91);
    int64_t r64[N] = {4, 1, 4, 0, 5};
    int32_t r32[N] = {4, 1, 4, 0, 5};
    emb_tensor tv = view2(val, N, D);
    for (int i32 = 0; i32 < 2; i32++) {
        emb_tensor tr = i32 ? view1(r32, EMB_INT32, N) : view1(r64, EMB_INT64, N);
        emb_sparse_grad g;
        EMB_OK_OR_FAIL(emb_sparse_grad_from_rows(&g, V, D, &tr, &tv));
        assert_int_equal(g.num_rows, V);
        assert_int_equal(g.dim, D);
        assert_int_equal(g.nnz, N);
        assert_false(g.coalesced);
        assert_memory_equal(g.indices, r64, sizeof r64);
        EMB_ASSERT_EXACT(g.values, val, N * D, "values copied");
        /* == the gradient backward_sparse builds for the same positions */
        emb_embedding *e = NULL;
        emb_tensor tw = view2(w0, V, D);
        EMB_OK_OR_FAIL(emb_embedding_from_pretrained(&tw, false, NULL, &e));
        emb_sparse_grad gb;
        EMB_OK_OR_FAIL(emb_sparse_grad_init(&gb, V, D));
        EMB_OK_OR_FAIL(emb_embedding_backward_sparse(e, &tr, &tv, &gb));
        assert_int_equal(gb.nnz, g.nnz);
        assert_memory_equal(gb.indices, g.indices, sizeof r64);
        EMB_ASSERT_EXACT(gb.values, g.values, N * D, "from_rows vs backward_sparse");
        emb_sparse_grad_release(&gb);
        emb_embedding_free(e);
        EMB_OK_OR_FAIL(emb_sparse_grad_coalesce(&g));
        assert_int_equal(g.nnz, 4);
        emb_sparse_grad_release(&g);
    }
    /* one entry, and none */
    emb_sparse_grad g;
    emb_tensor t1 = view1(r64, EMB_INT64, 1), tv1 = view2(val, 1, D);
    EMB_OK_OR_FAIL(emb_sparse_grad_from_rows(&g, V, D, &t1, &tv1));
    assert_true(g.coalesced);
    emb_sparse_grad_release(&g);
    emb_tensor t0 = emb_test_view(EMB_INT64, NULL, 1, SHP(0)),
               tv0 = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(0, D));
    EMB_OK_OR_FAIL(emb_sparse_grad_from_rows(&g, V, D, &t0, &tv0));
    assert_int_equal(g.nnz, 0);
    assert_true(g.coalesced);
    emb_sparse_grad_release(&g);
    /* errors leave g alone */
    emb_sparse_grad s;
    memset(&s, 0x5A, sizeof s);
    emb_sparse_grad s0 = s;
    emb_tensor tr = view1(r64, EMB_INT64, N);
    EMB_EXPECT_ERR(emb_sparse_grad_from_rows(NULL, V, D, &tr, &tv), EMB_ERR_NULL, "grad");
    EMB_EXPECT_ERR(emb_sparse_grad_from_rows(&s, -1, D, &tr, &tv), EMB_ERR_INVALID,
                   "non-negative sizes");
    EMB_EXPECT_ERR(emb_sparse_grad_from_rows(&s, V, D, NULL, &tv), EMB_ERR_NULL,
                   "rows must not be NULL");
    EMB_EXPECT_ERR(emb_sparse_grad_from_rows(&s, V, D, &tr, NULL), EMB_ERR_NULL,
                   "values must not be NULL");
    emb_tensor bad = tr;
    bad.dtype = EMB_FLOAT32;
    bad.data = val;
    EMB_EXPECT_ERR(emb_sparse_grad_from_rows(&s, V, D, &bad, &tv), EMB_ERR_DTYPE,
                   "torch.FloatTensor");
    emb_tensor r2 = emb_test_view(EMB_INT64, r64, 2, SHP(1, N));
    EMB_EXPECT_ERR(emb_sparse_grad_from_rows(&s, V, D, &r2, &tv), EMB_ERR_SHAPE,
                   "rows must be 1-D, got shape [1, 5]");
    EMB_EXPECT_ERR(emb_sparse_grad_from_rows(&s, V, D + 1, &tr, &tv), EMB_ERR_SHAPE,
                   "values has shape [5, 3], expected [5, 4]");
    r64[1] = V;
    EMB_EXPECT_ERR(emb_sparse_grad_from_rows(&s, V, D, &tr, &tv), EMB_ERR_INDEX,
                   "index 6 at position 1 is out of range for a sparse gradient with 6 rows");
    r64[1] = -1;
    EMB_EXPECT_ERR(emb_sparse_grad_from_rows(&s, V, D, &tr, &tv), EMB_ERR_INDEX,
                   "index -1 at position 1");
    assert_memory_equal(&s, &s0, sizeof s);
}

/* ---- parameters --------------------------------------------------------------------- */

static void test_add_param(void **state) {
    (void)state;
    emb_optimizer *opt = make_opt(emb_optimizer_options_default(EMB_OPTIMIZER_ADAM));
    float a[P_N], b[7], c[1] = {0};
    emb_tensor ta = view2(a, P_ROWS, P_COLS), tb = view1(b, EMB_FLOAT32, 7), tc;
    EMB_OK_OR_FAIL(emb_tensor_init(&tc, EMB_FLOAT32, c, 0, NULL));
    int id = -1;
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &ta, &id));
    assert_int_equal(id, 0);
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tb, NULL)); /* id 1 */
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tc, &id));
    assert_int_equal(id, 2);
    /* Errors leave *param_id and the list alone. */
    id = 42;
    EMB_EXPECT_ERR(emb_optimizer_add_param(NULL, &ta, &id), EMB_ERR_NULL, "opt");
    EMB_EXPECT_ERR(emb_optimizer_add_param(opt, NULL, &id), EMB_ERR_NULL, "param must not be NULL");
    int64_t ib[3];
    emb_tensor ti = view1(ib, EMB_INT64, 3);
    EMB_EXPECT_ERR(emb_optimizer_add_param(opt, &ti, &id), EMB_ERR_DTYPE,
                   "param must be float32, got int64");
    emb_tensor bad = ta;
    bad.ndim = 10;
    EMB_EXPECT_ERR(emb_optimizer_add_param(opt, &bad, &id), EMB_ERR_SHAPE, "param");
    bad = ta;
    bad.data = NULL;
    EMB_EXPECT_ERR(emb_optimizer_add_param(opt, &bad, &id), EMB_ERR_NULL, "param");
    /* The same memory, or an overlapping view, twice. */
    EMB_EXPECT_ERR(emb_optimizer_add_param(opt, &ta, &id), EMB_ERR_INVALID,
                   "overlaps the memory of parameter 0");
    emb_tensor part = view1(a + 14, EMB_FLOAT32, 1);
    EMB_EXPECT_ERR(emb_optimizer_add_param(opt, &part, &id), EMB_ERR_INVALID,
                   "overlaps the memory of parameter 0");
    emb_tensor tail = view1(b + 6, EMB_FLOAT32, 1);
    EMB_EXPECT_ERR(emb_optimizer_add_param(opt, &tail, &id), EMB_ERR_INVALID, "parameter 1");
    assert_int_equal(id, 42);
    /* Adjacent, non-overlapping memory is fine; ids continue. */
    float big[10];
    emb_tensor lo = view1(big, EMB_FLOAT32, 5), hi = view1(big + 5, EMB_FLOAT32, 5);
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &lo, &id));
    assert_int_equal(id, 3);
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &hi, &id));
    assert_int_equal(id, 4);
    /* Many parameters (the list grows). */
    static float many[100];
    for (int i = 0; i < 100; i++) {
        emb_tensor t = view1(many + i, EMB_FLOAT32, 1);
        EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &t, &id));
        assert_int_equal(id, 5 + i);
    }
    for (int i = 0; i < 105; i++) assert_int_equal(emb_optimizer_param_steps(opt, i), 0);
    assert_int_equal(emb_optimizer_param_steps(opt, 105), -1);
    assert_int_equal(emb_optimizer_param_steps(opt, -1), -1);
    assert_int_equal(emb_optimizer_param_steps(NULL, 0), -1);
    emb_optimizer_free(opt); /* never stepped: no state to free */
}

/* ---- dense step errors -------------------------------------------------------------- */

static void test_step_errors(void **state) {
    (void)state;
    emb_optimizer_kind kinds[] = {EMB_OPTIMIZER_SGD, EMB_OPTIMIZER_ADAGRAD, EMB_OPTIMIZER_ADAM,
                                  EMB_OPTIMIZER_ADAMW, EMB_OPTIMIZER_SPARSE_ADAM};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        emb_optimizer_options o = emb_optimizer_options_default(kinds[k]);
        o.momentum = 0.9;
        emb_optimizer *opt = make_opt(o);
        float p[P_N], p0[P_N], g[P_N];
        fill(p, P_N, 1);
        fill(g, P_N, 2);
        memcpy(p0, p, sizeof p);
        emb_tensor tp = view2(p, P_ROWS, P_COLS);
        int id;
        EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tp, &id));
        emb_tensor tg = view2(g, P_ROWS, P_COLS);
        EMB_EXPECT_ERR(emb_optimizer_step(NULL, id, &tg), EMB_ERR_NULL, "opt must not be NULL");
        EMB_EXPECT_ERR(emb_optimizer_step(opt, 1, &tg), EMB_ERR_INDEX,
                       "param_id 1 is out of range for an optimizer with 1 parameters "
                       "(valid: [0, 1))");
        EMB_EXPECT_ERR(emb_optimizer_step(opt, -1, &tg), EMB_ERR_INDEX, "param_id -1");
        EMB_EXPECT_ERR(emb_optimizer_step(opt, id, NULL), EMB_ERR_NULL, "grad must not be NULL");
        emb_tensor bad = view2(g, P_COLS, P_ROWS);
        EMB_EXPECT_ERR(emb_optimizer_step(opt, id, &bad), EMB_ERR_SHAPE,
                       "grad has shape [3, 5], expected [5, 3]");
        bad = view1(g, EMB_FLOAT32, P_N);
        EMB_EXPECT_ERR(emb_optimizer_step(opt, id, &bad), EMB_ERR_SHAPE, "grad has shape [15]");
        int32_t gi[P_N] = {0};
        bad = view2(g, P_ROWS, P_COLS);
        bad.dtype = EMB_INT32;
        bad.data = gi;
        EMB_EXPECT_ERR(emb_optimizer_step(opt, id, &bad), EMB_ERR_DTYPE,
                       "grad must be float32, got int32");
        bad = view2(g, P_ROWS, P_COLS);
        bad.data = NULL;
        EMB_EXPECT_ERR(emb_optimizer_step(opt, id, &bad), EMB_ERR_NULL, "grad");
        if (kinds[k] == EMB_OPTIMIZER_SPARSE_ADAM)
            EMB_EXPECT_ERR(emb_optimizer_step(opt, id, &tg), EMB_ERR_UNSUPPORTED,
                           "SparseAdam does not support dense gradients, please consider "
                           "Adam instead");
        EMB_ASSERT_EXACT(p, p0, P_N, "parameter after failed steps");
        assert_int_equal(emb_optimizer_param_steps(opt, id), 0);
        if (kinds[k] != EMB_OPTIMIZER_SPARSE_ADAM) {
            EMB_OK_OR_FAIL(emb_optimizer_step(opt, id, &tg));
            assert_int_equal(emb_optimizer_param_steps(opt, id), 1);
            /* A failing step after a good one changes neither parameter nor state: the next
             * good step gives the same result as without the failure. */
            float p1[P_N];
            memcpy(p1, p, sizeof p);
            EMB_EXPECT_ERR(emb_optimizer_step(opt, id, &bad), EMB_ERR_NULL, "grad");
            EMB_ASSERT_EXACT(p, p1, P_N, "parameter after a failed second step");
            assert_int_equal(emb_optimizer_param_steps(opt, id), 1);
        }
        emb_optimizer_free(opt);
    }
}

/* SGD momentum: a sparse buffer cannot take a dense gradient; nesterov on a dense buffer
 * cannot take a sparse one. */
static void test_sgd_buffer_kind_errors(void **state) {
    (void)state;
    emb_optimizer_options o = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    o.lr = 0.1;
    o.momentum = 0.9;
    emb_optimizer *opt = make_opt(o);
    float p[P_N], p0[P_N], g[P_N];
    fill(p, P_N, 3);
    fill(g, P_N, 4);
    emb_tensor tp = view2(p, P_ROWS, P_COLS), tg = view2(g, P_ROWS, P_COLS);
    int id;
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tp, &id));
    int64_t idx[2] = {1, 3};
    emb_sparse_grad sg = sparse_view(P_ROWS, P_COLS, 2, idx, g);
    EMB_OK_OR_FAIL(emb_optimizer_step_sparse(opt, id, &sg));
    memcpy(p0, p, sizeof p);
    EMB_EXPECT_ERR(emb_optimizer_step(opt, id, &tg), EMB_ERR_UNSUPPORTED, "sparse momentum buffer");
    EMB_ASSERT_EXACT(p, p0, P_N, "parameter");
    assert_int_equal(emb_optimizer_param_steps(opt, id), 1);
    emb_optimizer_free(opt);

    o.nesterov = true;
    opt = make_opt(o);
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tp, &id));
    EMB_OK_OR_FAIL(emb_optimizer_step(opt, id, &tg));
    memcpy(p0, p, sizeof p);
    EMB_EXPECT_ERR(emb_optimizer_step_sparse(opt, id, &sg), EMB_ERR_UNSUPPORTED,
                   "dense momentum buffer");
    EMB_ASSERT_EXACT(p, p0, P_N, "parameter");
    assert_int_equal(emb_optimizer_param_steps(opt, id), 1);
    emb_optimizer_free(opt);
}

/* ---- sparse step errors ------------------------------------------------------------- */

static void test_step_sparse_errors(void **state) {
    (void)state;
    float g[4 * P_COLS], g0[4 * P_COLS];
    fill(g, 4 * P_COLS, 5);
    memcpy(g0, g, sizeof g);
    int64_t idx[4] = {1, 4, 1, 0}, idx0[4];
    memcpy(idx0, idx, sizeof idx);
    struct {
        emb_optimizer_kind kind;
        double wd;
        emb_status st;
        const char *msg;
    } rej[] = {
        {EMB_OPTIMIZER_ADAM, 0, EMB_ERR_UNSUPPORTED,
         "Adam does not support sparse gradients, please consider SparseAdam instead"},
        {EMB_OPTIMIZER_ADAMW, 0.01, EMB_ERR_UNSUPPORTED, "AdamW does not support sparse gradients"},
        {EMB_OPTIMIZER_ADAGRAD, 0.1, EMB_ERR_UNSUPPORTED,
         "weight_decay option is not compatible with sparse gradients"},
        {EMB_OPTIMIZER_SGD, 0.1, EMB_ERR_UNSUPPORTED,
         "add(sparse, dense) is not supported. Use add(dense, sparse) instead."},
    };
    for (size_t r = 0; r < sizeof rej / sizeof rej[0]; r++) {
        emb_optimizer_options o = emb_optimizer_options_default(rej[r].kind);
        o.weight_decay = rej[r].wd;
        emb_optimizer *opt = make_opt(o);
        float p[P_N], p0[P_N];
        fill(p, P_N, 6);
        memcpy(p0, p, sizeof p);
        emb_tensor tp = view2(p, P_ROWS, P_COLS);
        int id;
        EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tp, &id));
        emb_sparse_grad sg = sparse_view(P_ROWS, P_COLS, 4, idx, g);
        EMB_EXPECT_ERR(emb_optimizer_step_sparse(opt, id, &sg), rej[r].st, rej[r].msg);
        EMB_ASSERT_EXACT(p, p0, P_N, "parameter");
        assert_int_equal(emb_optimizer_param_steps(opt, id), 0);
        emb_optimizer_free(opt);
    }

    emb_optimizer_kind ok_kinds[] = {EMB_OPTIMIZER_SGD, EMB_OPTIMIZER_ADAGRAD,
                                     EMB_OPTIMIZER_SPARSE_ADAM};
    for (size_t k = 0; k < 3; k++) {
        emb_optimizer_options o = emb_optimizer_options_default(ok_kinds[k]);
        o.momentum = 0.5;
        emb_optimizer *opt = make_opt(o);
        float p[P_N], p0[P_N], v[8];
        fill(p, P_N, 7);
        emb_tensor tp = view2(p, P_ROWS, P_COLS), tv = view1(v, EMB_FLOAT32, 8);
        int id, id1;
        EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tp, &id));
        EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tv, &id1));
        /* One good step first, so that state exists and must survive the failures. */
        emb_sparse_grad sg = sparse_view(P_ROWS, P_COLS, 4, idx, g);
        EMB_OK_OR_FAIL(emb_optimizer_step_sparse(opt, id, &sg));
        memcpy(p0, p, sizeof p);

        EMB_EXPECT_ERR(emb_optimizer_step_sparse(NULL, id, &sg), EMB_ERR_NULL, "opt");
        EMB_EXPECT_ERR(emb_optimizer_step_sparse(opt, 2, &sg), EMB_ERR_INDEX, "param_id 2");
        EMB_EXPECT_ERR(emb_optimizer_step_sparse(opt, id, NULL), EMB_ERR_NULL,
                       "grad must not be NULL");
        EMB_EXPECT_ERR(emb_optimizer_step_sparse(opt, id1, &sg), EMB_ERR_SHAPE,
                       "sparse gradients need a 2-D parameter; parameter 1 has shape [8]");
        emb_sparse_grad bad = sg;
        bad.num_rows = P_ROWS + 1;
        EMB_EXPECT_ERR(emb_optimizer_step_sparse(opt, id, &bad), EMB_ERR_SHAPE,
                       "grad is a sparse gradient of size [6, 3], expected [5, 3]");
        bad = sg;
        bad.dim = 2;
        EMB_EXPECT_ERR(emb_optimizer_step_sparse(opt, id, &bad), EMB_ERR_SHAPE, "size [5, 2]");
        bad = sg;
        bad.nnz = 5;
        EMB_EXPECT_ERR(emb_optimizer_step_sparse(opt, id, &bad), EMB_ERR_INVALID,
                       "not a valid sparse gradient");
        bad = sg;
        bad.values = NULL;
        EMB_EXPECT_ERR(emb_optimizer_step_sparse(opt, id, &bad), EMB_ERR_INVALID,
                       "not a valid sparse gradient");
        int64_t bad_idx[4] = {1, 4, 5, 0};
        bad = sparse_view(P_ROWS, P_COLS, 4, bad_idx, g);
        EMB_EXPECT_ERR(emb_optimizer_step_sparse(opt, id, &bad), EMB_ERR_INDEX,
                       "grad entry 2 has row 5, out of range for a parameter with 5 rows "
                       "(valid: [0, 5))");
        bad_idx[2] = -3;
        EMB_EXPECT_ERR(emb_optimizer_step_sparse(opt, id, &bad), EMB_ERR_INDEX,
                       "grad entry 2 has row -3");
        EMB_ASSERT_EXACT(p, p0, P_N, "parameter after failed sparse steps");
        assert_int_equal(emb_optimizer_param_steps(opt, id), 1);
        assert_memory_equal(idx, idx0, sizeof idx);
        EMB_ASSERT_EXACT(g, g0, 4 * P_COLS, "gradient values (read only)");
        emb_optimizer_free(opt);
    }
}

/* ---- the fused step refuses exactly what the unfused path refuses ------------------- */

enum { FV = 6, FD = 4, FN = 6 };

typedef enum fmut {
    FM_NONE,
    FM_E_NULL,
    FM_IDX_NULL,
    FM_GO_NULL,
    FM_FROZEN,
    FM_SGBF,
    FM_IDX_F32,
    FM_IDX_9D,
    FM_GO_SHAPE,
    FM_GO_F64,
    FM_GO_DATA_NULL,
    FM_IDX_RANGE,
    FM_IDX_NEG_PAD32,
    FM_OPT_NULL,
    FM_PID,
    FM_PARAM_1D,
    FM_PARAM_SHAPE,
    FM_PARAM_OTHER,
    FM_READ_ONLY,
} fmut;

typedef struct fcase {
    const char *name;
    fmut mut;
    emb_optimizer_kind kind;
    double weight_decay, momentum;
    bool nesterov;
    emb_status want;
    const char *needle;
    bool fused_only; /* a refusal of the fused step alone: the unfused path has none */
} fcase;

/* One "world": a padded table (padding_idx 2), an optimizer over its weight (id 0) and
 * three other parameters: 1-D (id 1), [FV, FD + 1] (id 2), [FV, FD] elsewhere (id 3). */
typedef struct fworld {
    emb_embedding *e;
    emb_optimizer *opt;
    int pid, pid_1d, pid_shape, pid_other;
    float v1d[8], wshape[FV * (FD + 1)], wother[FV * FD];
} fworld;

static void fworld_make(fworld *w, const fcase *c, const float *w0) {
    memset(w, 0, sizeof *w);
    emb_embedding_options eo = emb_embedding_options_default();
    eo.padding_idx = 2;
    eo.sparse = true;
    eo.scale_grad_by_freq = c->mut == FM_SGBF;
    emb_tensor t0 = view2((float *)w0, FV, FD);
    EMB_OK_OR_FAIL(emb_embedding_from_pretrained(&t0, false, &eo, &w->e));
    emb_optimizer_options o = emb_optimizer_options_default(c->kind);
    o.lr = 0.25;
    o.weight_decay = c->weight_decay;
    o.momentum = c->momentum;
    o.nesterov = c->nesterov;
    w->opt = make_opt(o);
    emb_tensor tw;
    EMB_OK_OR_FAIL(emb_embedding_weight(w->e, &tw));
    EMB_OK_OR_FAIL(emb_optimizer_add_param(w->opt, &tw, &w->pid));
    fill(w->v1d, 8, 50);
    fill(w->wshape, FV * (FD + 1), 51);
    fill(w->wother, FV * FD, 52);
    emb_tensor t1 = view1(w->v1d, EMB_FLOAT32, 8), t2 = view2(w->wshape, FV, FD + 1),
               t3 = view2(w->wother, FV, FD);
    EMB_OK_OR_FAIL(emb_optimizer_add_param(w->opt, &t1, &w->pid_1d));
    EMB_OK_OR_FAIL(emb_optimizer_add_param(w->opt, &t2, &w->pid_shape));
    EMB_OK_OR_FAIL(emb_optimizer_add_param(w->opt, &t3, &w->pid_other));
}

static void fworld_free(fworld *w) {
    emb_optimizer_free(w->opt);
    emb_embedding_free(w->e);
}

static const float *fworld_weight(fworld *w) {
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_embedding_weight_const(w->e, &t));
    return t.data;
}

/* A good step: dense (emb_optimizer_step on the weight), or sparse, fused or unfused. */
static void fworld_good_step(fworld *w, bool dense, bool fused, unsigned seed) {
    float go[FN * FD];
    fill(go, FN * FD, seed);
    if (dense) {
        emb_tensor tg = view2(go, FV, FD);
        EMB_OK_OR_FAIL(emb_optimizer_step(w->opt, w->pid, &tg));
        return;
    }
    int64_t idx[FN] = {1, 2, 5, 1, 0, 1};
    emb_tensor ti = emb_test_view(EMB_INT64, idx, 2, SHP(2, 3));
    emb_tensor tgo = emb_test_view(EMB_FLOAT32, go, 3, SHP(2, 3, FD));
    if (fused) {
        EMB_OK_OR_FAIL(emb_optimizer_step_fused(w->opt, w->pid, w->e, &ti, &tgo));
        return;
    }
    emb_sparse_grad sg;
    EMB_OK_OR_FAIL(emb_sparse_grad_init(&sg, FV, FD));
    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(w->e, &ti, &tgo, &sg));
    EMB_OK_OR_FAIL(emb_optimizer_step_sparse(w->opt, w->pid, &sg));
    emb_sparse_grad_release(&sg);
}

/* Feeds the SAME bad inputs to the unfused path (emb_embedding_backward_sparse, then
 * emb_optimizer_step_sparse) in world A and to the fused step in world B: identical status
 * and message, nothing changed in either (weights, step counts, the other parameters), and
 * the state untouched: a good step afterwards gives both exactly what world C, which never
 * saw the failure, gets. */
static void test_fused_refusals(void **state) {
    (void)state;
    static const fcase cases[] = {
        {"embedding NULL", FM_E_NULL, EMB_OPTIMIZER_SGD, 0, 0, false, EMB_ERR_NULL,
         "embedding must not be NULL", false},
        {"indices NULL", FM_IDX_NULL, EMB_OPTIMIZER_ADAGRAD, 0, 0, false, EMB_ERR_NULL,
         "indices must not be NULL", false},
        {"grad_output NULL", FM_GO_NULL, EMB_OPTIMIZER_SPARSE_ADAM, 0, 0, false, EMB_ERR_NULL,
         "grad_output must not be NULL", false},
        {"frozen table", FM_FROZEN, EMB_OPTIMIZER_SGD, 0, 0.9, false, EMB_ERR_STATE,
         "the embedding's weight does not require grad (created with freeze=true)", false},
        {"frozen table, Adam", FM_FROZEN, EMB_OPTIMIZER_ADAM, 0, 0, false, EMB_ERR_STATE,
         "does not require grad", false},
        {"scale_grad_by_freq", FM_SGBF, EMB_OPTIMIZER_SGD, 0, 0, false, EMB_ERR_UNSUPPORTED,
         "embedding_backward: scale_grad_by_freq not supported with sparse gradients", false},
        {"float indices", FM_IDX_F32, EMB_OPTIMIZER_SGD, 0, 0, false, EMB_ERR_DTYPE,
         "Long, Int; but got torch.FloatTensor", false},
        {"9-d indices", FM_IDX_9D, EMB_OPTIMIZER_ADAGRAD, 0, 0, false, EMB_ERR_SHAPE,
         "indices has 9 dimensions", false},
        {"grad_output shape", FM_GO_SHAPE, EMB_OPTIMIZER_SPARSE_ADAM, 0, 0, false, EMB_ERR_SHAPE,
         "grad_output has shape [2, 3, 5], expected [2, 3, 4]", false},
        {"grad_output float64", FM_GO_F64, EMB_OPTIMIZER_SGD, 0, 0.5, false, EMB_ERR_DTYPE,
         "grad_output must be float32, got float64", false},
        {"grad_output data NULL", FM_GO_DATA_NULL, EMB_OPTIMIZER_SGD, 0, 0, false, EMB_ERR_NULL,
         "grad_output", false},
        {"index out of range", FM_IDX_RANGE, EMB_OPTIMIZER_ADAGRAD, 0, 0, false, EMB_ERR_INDEX,
         "index 6 at position 4 is out of range for an embedding with 6 rows (valid: [0, 6))",
         false},
        {"index out of range, AdamW", FM_IDX_RANGE, EMB_OPTIMIZER_ADAMW, 0.01, 0, false,
         EMB_ERR_INDEX, "index 6 at position 4", false},
        {"negative int32 index at a padding position", FM_IDX_NEG_PAD32, EMB_OPTIMIZER_SPARSE_ADAM,
         0, 0, false, EMB_ERR_INDEX, "index -1 at position 3", false},
        {"opt NULL", FM_OPT_NULL, EMB_OPTIMIZER_SGD, 0, 0, false, EMB_ERR_NULL,
         "opt must not be NULL", false},
        {"unknown param_id", FM_PID, EMB_OPTIMIZER_SGD, 0, 0, false, EMB_ERR_INDEX,
         "param_id 7 is out of range for an optimizer with 4 parameters", false},
        {"Adam", FM_NONE, EMB_OPTIMIZER_ADAM, 0, 0, false, EMB_ERR_UNSUPPORTED,
         "Adam does not support sparse gradients, please consider SparseAdam instead", false},
        {"AdamW", FM_NONE, EMB_OPTIMIZER_ADAMW, 0.01, 0, false, EMB_ERR_UNSUPPORTED,
         "AdamW does not support sparse gradients", false},
        {"Adagrad weight_decay", FM_NONE, EMB_OPTIMIZER_ADAGRAD, 0.1, 0, false, EMB_ERR_UNSUPPORTED,
         "weight_decay option is not compatible with sparse gradients", false},
        {"SGD weight_decay", FM_NONE, EMB_OPTIMIZER_SGD, 0.1, 0.9, false, EMB_ERR_UNSUPPORTED,
         "add(sparse, dense) is not supported. Use add(dense, sparse) instead.", false},
        {"SGD nesterov on a dense buffer", FM_NONE, EMB_OPTIMIZER_SGD, 0, 0.9, true,
         EMB_ERR_UNSUPPORTED, "dense momentum buffer", false},
        {"1-D parameter", FM_PARAM_1D, EMB_OPTIMIZER_SGD, 0, 0, false, EMB_ERR_SHAPE,
         "sparse gradients need a 2-D parameter; parameter 1 has shape [8]", false},
        {"parameter of another shape", FM_PARAM_SHAPE, EMB_OPTIMIZER_ADAGRAD, 0, 0, false,
         EMB_ERR_SHAPE,
         "grad is a sparse gradient of size [6, 4], expected [6, 5] (the shape of parameter 2)",
         false},
        {"parameter elsewhere", FM_PARAM_OTHER, EMB_OPTIMIZER_SGD, 0, 0, false, EMB_ERR_INVALID,
         "parameter 3 is not the embedding's weight", true},
        {"read-only table", FM_READ_ONLY, EMB_OPTIMIZER_SGD, 0, 0.9, false, EMB_ERR_READ_ONLY,
         "read-only", true},
        {"read-only table, Adagrad", FM_READ_ONLY, EMB_OPTIMIZER_ADAGRAD, 0, 0, false,
         EMB_ERR_READ_ONLY, "read-only", true},
    };
    float w0[FV * FD];
    fill(w0, FV * FD, 40);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const fcase *c = &cases[k];
        fworld A, B, C;
        fworld_make(&A, c, w0);
        fworld_make(&B, c, w0);
        fworld_make(&C, c, w0);
        /* State first (a dense step where sparse ones are refused). */
        const bool sparse_ok = (c->kind == EMB_OPTIMIZER_SGD || c->kind == EMB_OPTIMIZER_ADAGRAD ||
                                c->kind == EMB_OPTIMIZER_SPARSE_ADAM) &&
                               c->weight_decay == 0 && !c->nesterov && c->mut != FM_SGBF;
        fworld_good_step(&A, !sparse_ok, false, 41);
        fworld_good_step(&B, !sparse_ok, true, 41);
        fworld_good_step(&C, !sparse_ok, true, 41);
        float wa[FV * FD], wb[FV * FD], other[FV * FD];
        memcpy(wa, fworld_weight(&A), sizeof wa);
        memcpy(wb, fworld_weight(&B), sizeof wb);
        memcpy(other, B.wother, sizeof other);
        EMB_ASSERT_EXACT(wa, wb, FV * FD, "fused vs unfused before the failure");

        /* The bad inputs. */
        int64_t idx[FN] = {0, 3, 5, 2, 2, 1};
        int32_t idx32[FN] = {0, 2, 2, -1, 2, 1};
        float go[FN * FD];
        double go64[FN * FD] = {0};
        fill(go, FN * FD, 42);
        emb_tensor ti = emb_test_view(EMB_INT64, idx, 2, SHP(2, 3));
        emb_tensor tgo = emb_test_view(EMB_FLOAT32, go, 3, SHP(2, 3, FD));
        const emb_tensor *pi = &ti, *pg = &tgo;
        emb_tensor bi = ti, bg = tgo;
        bool e_null = false, opt_null = false;
        int pid_a = A.pid, pid_b = B.pid;
        switch (c->mut) {
        case FM_NONE:
        case FM_SGBF:
            break;
        case FM_E_NULL:
            e_null = true;
            break;
        case FM_IDX_NULL:
            pi = NULL;
            break;
        case FM_GO_NULL:
            pg = NULL;
            break;
        case FM_FROZEN:
            emb_embedding_set_requires_grad(A.e, false);
            emb_embedding_set_requires_grad(B.e, false);
            break;
        case FM_IDX_F32:
            bi.dtype = EMB_FLOAT32;
            bi.data = go;
            pi = &bi;
            break;
        case FM_IDX_9D:
            bi.ndim = 9;
            for (int i = 2; i < 9; i++) bi.shape[i] = 1;
            pi = &bi;
            break;
        case FM_GO_SHAPE:
            bg.shape[2] = FD + 1;
            pg = &bg;
            break;
        case FM_GO_F64:
            bg.dtype = EMB_FLOAT64;
            bg.data = go64;
            pg = &bg;
            break;
        case FM_GO_DATA_NULL:
            bg.data = NULL;
            pg = &bg;
            break;
        case FM_IDX_RANGE:
            idx[4] = FV;
            break;
        case FM_IDX_NEG_PAD32:
            bi = emb_test_view(EMB_INT32, idx32, 2, SHP(2, 3));
            pi = &bi;
            break;
        case FM_OPT_NULL:
            opt_null = true;
            break;
        case FM_PID:
            pid_a = pid_b = 7;
            break;
        case FM_PARAM_1D:
            pid_a = A.pid_1d;
            pid_b = B.pid_1d;
            break;
        case FM_PARAM_SHAPE:
            pid_a = A.pid_shape;
            pid_b = B.pid_shape;
            break;
        case FM_PARAM_OTHER:
            pid_a = A.pid_other;
            pid_b = B.pid_other;
            break;
        case FM_READ_ONLY:
            B.e->read_only = true;
            break;
        }
        const int64_t steps_a = emb_optimizer_param_steps(A.opt, A.pid);
        const int64_t steps_b = emb_optimizer_param_steps(B.opt, B.pid);
        char msg_u[512] = "";
        emb_status st_u = EMB_OK;
        if (!c->fused_only) {
            emb_sparse_grad sg;
            EMB_OK_OR_FAIL(emb_sparse_grad_init(&sg, FV, FD));
            emb_clear_error();
            st_u = emb_embedding_backward_sparse(e_null ? NULL : A.e, pi, pg, &sg);
            if (st_u == EMB_OK)
                st_u = emb_optimizer_step_sparse(opt_null ? NULL : A.opt, pid_a, &sg);
            snprintf(msg_u, sizeof msg_u, "%s", emb_errmsg());
            emb_sparse_grad_release(&sg);
        }
        emb_clear_error();
        emb_status st_f =
            emb_optimizer_step_fused(opt_null ? NULL : B.opt, pid_b, e_null ? NULL : B.e, pi, pg);
        const char *msg_f = emb_errmsg();
        if (st_f != c->want || !strstr(msg_f, c->needle))
            fail_msg("%s: fused gave %d \"%s\", want %d \"...%s...\"", c->name, (int)st_f, msg_f,
                     (int)c->want, c->needle);
        if (!c->fused_only && (st_u != st_f || strcmp(msg_u, msg_f)))
            fail_msg("%s: unfused gave %d \"%s\", fused %d \"%s\"", c->name, (int)st_u, msg_u,
                     (int)st_f, msg_f);
        /* Nothing changed. */
        EMB_ASSERT_EXACT(fworld_weight(&A), wa, FV * FD, "weight after the unfused refusal");
        EMB_ASSERT_EXACT(fworld_weight(&B), wb, FV * FD, "weight after the fused refusal");
        EMB_ASSERT_EXACT(B.wother, other, FV * FD, "other parameter after the fused refusal");
        assert_int_equal(emb_optimizer_param_steps(A.opt, A.pid), steps_a);
        assert_int_equal(emb_optimizer_param_steps(B.opt, B.pid), steps_b);
        for (int p = 1; p < 4; p++) {
            assert_int_equal(emb_optimizer_param_steps(A.opt, p), 0);
            assert_int_equal(emb_optimizer_param_steps(B.opt, p), 0);
        }
        /* The state is untouched: the next good step is world C's. */
        emb_embedding_set_requires_grad(A.e, true);
        emb_embedding_set_requires_grad(B.e, true);
        B.e->read_only = false;
        fworld_good_step(&A, !sparse_ok, false, 43);
        fworld_good_step(&B, !sparse_ok, true, 43);
        fworld_good_step(&C, !sparse_ok, true, 43);
        EMB_ASSERT_EXACT(fworld_weight(&A), fworld_weight(&C), FV * FD, "unfused world vs C");
        EMB_ASSERT_EXACT(fworld_weight(&B), fworld_weight(&C), FV * FD, "fused world vs C");
        assert_int_equal(emb_optimizer_param_steps(B.opt, B.pid), 2);
        fworld_free(&A);
        fworld_free(&B);
        fworld_free(&C);
    }
}

/* ---- semantics on small hand-checked cases ----------------------------------------- */

/* Plain SGD: duplicates applied one after another with fmaf(v, (float)-lr, p). */
static void test_sgd_sparse_sequential(void **state) {
    (void)state;
    emb_optimizer_options o = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    o.lr = 0.1;
    emb_optimizer *opt = make_opt(o);
    float p[4 * 2] = {1, 2, 3, 4, 5, 6, 7, 8}, want[8];
    memcpy(want, p, sizeof p);
    emb_tensor tp = view2(p, 4, 2);
    int id;
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tp, &id));
    int64_t idx[3] = {2, 0, 2};
    float val[6] = {0.3f, -0.7f, 1.1f, 2.2f, 1e-3f, 5.5f};
    emb_sparse_grad g = sparse_view(4, 2, 3, idx, val);
    EMB_OK_OR_FAIL(emb_optimizer_step_sparse(opt, id, &g));
    const float a = (float)(-0.1);
    for (int k = 0; k < 3; k++)
        for (int d = 0; d < 2; d++)
            want[idx[k] * 2 + d] = fmaf(val[k * 2 + d], a, want[idx[k] * 2 + d]);
    EMB_ASSERT_EXACT(p, want, 8, "SGD sparse");
    assert_float_equal(p[2], 3.0f, 0); /* row 1 untouched */
    assert_float_equal(p[7], 8.0f, 0); /* row 3 untouched */
    assert_int_equal(emb_optimizer_param_steps(opt, id), 1);
    /* An empty gradient is a step that changes nothing. */
    emb_sparse_grad e = sparse_view(4, 2, 0, NULL, NULL);
    EMB_OK_OR_FAIL(emb_optimizer_step_sparse(opt, id, &e));
    EMB_ASSERT_EXACT(p, want, 8, "after an empty gradient");
    assert_int_equal(emb_optimizer_param_steps(opt, id), 2);
    emb_optimizer_free(opt);
}

/* Adagrad / SparseAdam: duplicates are summed before the update (coalesce), untouched rows
 * keep parameter and state, and the step counter is per parameter. */
static void test_coalescing_rules(void **state) {
    (void)state;
    for (int kind = 0; kind < 2; kind++) {
        emb_optimizer_options o =
            emb_optimizer_options_default(kind ? EMB_OPTIMIZER_SPARSE_ADAM : EMB_OPTIMIZER_ADAGRAD);
        o.lr = 0.5;
        emb_optimizer *a = make_opt(o), *b = make_opt(o);
        float pa[3 * 2] = {1, 1, 1, 1, 1, 1}, pb[3 * 2] = {1, 1, 1, 1, 1, 1};
        emb_tensor ta = view2(pa, 3, 2), tb = view2(pb, 3, 2);
        int ia, ib;
        EMB_OK_OR_FAIL(emb_optimizer_add_param(a, &ta, &ia));
        EMB_OK_OR_FAIL(emb_optimizer_add_param(b, &tb, &ib));
        /* a: row 2 twice (0.25 + 0.5); b: row 2 once with the sum 0.75 (exact in float). */
        int64_t i2[2] = {2, 2}, i1[1] = {2};
        float v2[4] = {0.25f, -1.0f, 0.5f, -2.0f}, v1[2] = {0.75f, -3.0f};
        emb_sparse_grad g2 = sparse_view(3, 2, 2, i2, v2), g1 = sparse_view(3, 2, 1, i1, v1);
        for (int s = 0; s < 3; s++) {
            EMB_OK_OR_FAIL(emb_optimizer_step_sparse(a, ia, &g2));
            EMB_OK_OR_FAIL(emb_optimizer_step_sparse(b, ib, &g1));
            EMB_ASSERT_EXACT(pa, pb, 6, "duplicates summed before the update");
        }
        for (int i = 0; i < 4; i++) assert_true(pa[i] == 1.0f); /* rows 0, 1 untouched */
        assert_true(pa[4] < 1.0f && pa[5] > 1.0f);              /* moved against the grad */
        assert_int_equal(emb_optimizer_param_steps(a, ia), 3);
        /* SparseAdam's first step moves a row by about lr (the moments' ratio is ~1). */
        if (kind) {
            emb_optimizer *c = make_opt(o);
            float pc[2] = {0, 0};
            emb_tensor tc = view2(pc, 1, 2);
            int ic;
            EMB_OK_OR_FAIL(emb_optimizer_add_param(c, &tc, &ic));
            int64_t i0 = 0;
            float v0[2] = {3.0f, -0.25f};
            emb_sparse_grad g0 = sparse_view(1, 2, 1, &i0, v0);
            EMB_OK_OR_FAIL(emb_optimizer_step_sparse(c, ic, &g0));
            float want[2] = {-0.5f, 0.5f};
            EMB_ASSERT_CLOSE(pc, want, 2, "SparseAdam first step");
            emb_optimizer_free(c);
        }
        emb_optimizer_free(a);
        emb_optimizer_free(b);
    }
}

/* Adam's first step moves every element by about lr against the gradient's sign; AdamW's
 * also decays the parameter; maximize reverses the direction. */
static void test_adam_first_step(void **state) {
    (void)state;
    float g[4] = {2.0f, -0.5f, 1e-3f, -7.0f};
    for (int w = 0; w < 2; w++) {
        for (int maximize = 0; maximize < 2; maximize++) {
            emb_optimizer_options o =
                emb_optimizer_options_default(w ? EMB_OPTIMIZER_ADAMW : EMB_OPTIMIZER_ADAM);
            o.lr = 0.01;
            o.maximize = maximize;
            emb_optimizer *opt = make_opt(o);
            float p[4] = {1, 1, 1, 1};
            emb_tensor tp = view1(p, EMB_FLOAT32, 4), tg = view1(g, EMB_FLOAT32, 4);
            int id;
            EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tp, &id));
            EMB_OK_OR_FAIL(emb_optimizer_step(opt, id, &tg));
            float want[4];
            double decay = w ? 1.0 - 0.01 * 0.01 : 1.0;
            for (int i = 0; i < 4; i++)
                want[i] = (float)(decay - (maximize ? -0.01 : 0.01) * (g[i] > 0 ? 1 : -1));
            EMB_ASSERT_CLOSE(p, want, 4, "Adam first step");
            emb_optimizer_free(opt);
        }
    }
}

/* The fused step equals backward_sparse + step_sparse, bit for bit, for every optimizer and
 * option that takes sparse gradients, with and without a padding row (positive and
 * negative padding_idx), int32 and int64 indices, many duplicates (more than 16 entries:
 * the unstable sort's introsort order), empty and all-padding steps, and after a dense
 * step (SGD's dense momentum buffer, Adagrad's state). */
static void test_fused_equals_unfused(void **state) {
    (void)state;
    enum { V = 11, D = 7, N = 90, NCFG = 12 };
    emb_optimizer_options cfg[NCFG];
    bool dense_first[NCFG] = {false};
    cfg[0] = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    cfg[0].lr = 0.1;
    cfg[1] = cfg[0];
    cfg[1].maximize = true;
    cfg[2] = cfg[0];
    cfg[2].momentum = 0.9;
    cfg[3] = cfg[2];
    cfg[3].momentum = 0.5;
    cfg[3].dampening = 0.25;
    cfg[3].maximize = true;
    cfg[4] = cfg[2];
    cfg[4].nesterov = true;
    cfg[5] = cfg[2];
    dense_first[5] = true;
    cfg[6] = emb_optimizer_options_default(EMB_OPTIMIZER_ADAGRAD);
    cfg[7] = cfg[6];
    cfg[7].lr = 0.3;
    cfg[7].lr_decay = 0.1;
    cfg[7].initial_accumulator_value = 0.2;
    cfg[7].maximize = true;
    cfg[8] = cfg[6];
    cfg[8].eps = 1e-3;
    dense_first[8] = true;
    cfg[9] = emb_optimizer_options_default(EMB_OPTIMIZER_SPARSE_ADAM);
    cfg[10] = cfg[9];
    cfg[10].lr = 0.02;
    cfg[10].beta1 = 0.5;
    cfg[10].beta2 = 0.9;
    cfg[10].eps = 1e-4;
    cfg[10].maximize = true;
    cfg[11] = cfg[3];
    cfg[11].nesterov = false;
    cfg[11].dampening = 0.0;
    cfg[11].momentum = 0.99;
    const int64_t pads[3] = {EMB_PADDING_NONE, 4, -1};
    uint64_t rng = 2024;
    for (int c = 0; c < NCFG; c++) {
        for (int pi = 0; pi < 3; pi++) {
            for (int i32 = 0; i32 < 2; i32++) {
                float w0[V * D];
                emb_test_randf(&rng, w0, V * D, -1, 1);
                emb_embedding_options eo = emb_embedding_options_default();
                eo.padding_idx = pads[pi];
                eo.sparse = true;
                emb_tensor tw = view2(w0, V, D);
                emb_embedding *eu = NULL, *ef = NULL;
                EMB_OK_OR_FAIL(emb_embedding_from_pretrained(&tw, false, &eo, &eu));
                EMB_OK_OR_FAIL(emb_embedding_from_pretrained(&tw, false, &eo, &ef));
                const int64_t pad = emb_embedding_padding_idx(ef);
                emb_tensor wu, wf;
                EMB_OK_OR_FAIL(emb_embedding_weight(eu, &wu));
                EMB_OK_OR_FAIL(emb_embedding_weight(ef, &wf));
                emb_optimizer *ou = make_opt(cfg[c]), *of = make_opt(cfg[c]);
                int pu, pf;
                EMB_OK_OR_FAIL(emb_optimizer_add_param(ou, &wu, &pu));
                EMB_OK_OR_FAIL(emb_optimizer_add_param(of, &wf, &pf));
                if (dense_first[c]) {
                    float g[V * D];
                    emb_test_randf(&rng, g, V * D, -1, 1);
                    emb_tensor tg = view2(g, V, D);
                    EMB_OK_OR_FAIL(emb_optimizer_step(ou, pu, &tg));
                    EMB_OK_OR_FAIL(emb_optimizer_step(of, pf, &tg));
                }
                for (int s = 0; s < 6; s++) {
                    /* step 2: empty; step 4: all padding (when there is a padding row) */
                    const int64_t n = s == 2 ? 0 : s == 4 ? 5 : N;
                    int64_t i64[N];
                    int32_t i32v[N];
                    float go[N * D];
                    for (int64_t i = 0; i < n; i++) {
                        uint64_t r = emb_test_next_u64(&rng);
                        int64_t v = (r % 3) ? (int64_t)((r >> 8) % 3) : (int64_t)((r >> 8) % V);
                        if (s == 4 && pad != EMB_PADDING_NONE)
                            v = pad;
                        else if (pad != EMB_PADDING_NONE && (r >> 20) % 5 == 0)
                            v = pad;
                        i64[i] = v;
                        i32v[i] = (int32_t)v;
                    }
                    emb_test_randf(&rng, go, n * D, -2, 2);
                    emb_tensor ti =
                        i32 ? emb_test_view(EMB_INT32, n ? i32v : NULL, 2, SHP(n / 5, 5))
                            : emb_test_view(EMB_INT64, n ? i64 : NULL, 2, SHP(n / 5, 5));
                    emb_tensor tg = emb_test_view(EMB_FLOAT32, n ? go : NULL, 3, SHP(n / 5, 5, D));
                    emb_sparse_grad sg;
                    EMB_OK_OR_FAIL(emb_sparse_grad_init(&sg, V, D));
                    EMB_OK_OR_FAIL(emb_embedding_backward_sparse(eu, &ti, &tg, &sg));
                    EMB_OK_OR_FAIL(emb_optimizer_step_sparse(ou, pu, &sg));
                    emb_sparse_grad_release(&sg);
                    EMB_OK_OR_FAIL(emb_optimizer_step_fused(of, pf, ef, &ti, &tg));
                    char what[96];
                    snprintf(what, sizeof what, "config %d padding %lld int%d step %d", c,
                             (long long)pads[pi], i32 ? 32 : 64, s);
                    EMB_ASSERT_EXACT((const float *)wf.data, (const float *)wu.data, V * D, what);
                    assert_int_equal(emb_optimizer_param_steps(of, pf),
                                     emb_optimizer_param_steps(ou, pu));
                }
                assert_int_equal(emb_optimizer_param_steps(of, pf), 6 + dense_first[c]);
                emb_optimizer_free(of);
                emb_optimizer_free(ou);
                emb_embedding_free(ef);
                emb_embedding_free(eu);
            }
        }
    }
}

/* The kernel variants agree with the reference kernels bit for bit. */
static void test_kernel_variants(void **state) {
    (void)state;
    const emb__optim_kernel_table *R = &emb__optim_kernels_ref, *F = emb__kernels()->optim;
    enum { N = 1003 };
    static float p1[N], p2[N], g[N], a1[N], a2[N], b1[N], b2[N], c1[N], c2[N];
    fill(g, N, 1);
    fill(p1, N, 2);
    fill(a1, N, 3);
    fill(b1, N, 4);
    for (int i = 0; i < N; i++) b1[i] = fabsf(b1[i]);
    memcpy(c1, b1, sizeof c1);
#define RESET()                                                                                    \
    do {                                                                                           \
        memcpy(p2, p1, sizeof p1);                                                                 \
        memcpy(a2, a1, sizeof a1);                                                                 \
        memcpy(b2, b1, sizeof b1);                                                                 \
        memcpy(c2, c1, sizeof c1);                                                                 \
    } while (0)
#define SAME(what)                                                                                 \
    do {                                                                                           \
        EMB_ASSERT_EXACT(p2, p1, N, what " p");                                                    \
        EMB_ASSERT_EXACT(a2, a1, N, what " a");                                                    \
        EMB_ASSERT_EXACT(b2, b1, N, what " b");                                                    \
        EMB_ASSERT_EXACT(c2, c1, N, what " c");                                                    \
    } while (0)
    emb__sgd_args sa = {(float)-0.1, 0.01f, 0.9f, 0.8f, true, true, true, true, false};
    RESET();
    R->sgd_dense(p1, g, a1, N, &sa);
    F->sgd_dense(p2, g, a2, N, &sa);
    SAME("sgd");
    emb__adagrad_args ga = {(float)-0.3, 1e-10f, 0.1f, true, false};
    RESET();
    R->adagrad_dense(p1, g, b1, N, &ga);
    F->adagrad_dense(p2, g, b2, N, &ga);
    SAME("adagrad");
    emb__adam_args aa = {
        0.9f, 0.1f, 0.999f, (float)(1 - 0.999), 0.01f, 0.9999f, -0.01f, 0.0316f, 1e-8f, false,
        true, true, true};
    RESET();
    R->adam_dense(p1, g, a1, b1, c1, N, &aa);
    F->adam_dense(p2, g, a2, b2, c2, N, &aa);
    SAME("adamw");
    RESET();
    R->adagrad_row(p1, b1, g, N, &ga);
    F->adagrad_row(p2, b2, g, N, &ga);
    SAME("adagrad row");
    emb__sparse_adam_args ra = {0.1f, 0.001f, 1e-8f, -0.001f};
    RESET();
    R->sparse_adam_row(p1, a1, b1, g, N, &ra);
    F->sparse_adam_row(p2, a2, b2, g, N, &ra);
    SAME("sparse adam row");
    RESET();
    R->axpy(p1, g, -0.37f, N);
    F->axpy(p2, g, -0.37f, N);
    R->merge_entry(a1, g, -1.0f, b1, 0.3f, N);
    F->merge_entry(a2, g, -1.0f, b2, 0.3f, N);
    R->coalesce_add(c1, g, -1.0f, N);
    F->coalesce_add(c2, g, -1.0f, N);
    SAME("axpy/merge/coalesce");
#undef RESET
#undef SAME
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_nonfinite_options),
        cmocka_unit_test(test_set_lr),
        cmocka_unit_test(test_init_state),
        cmocka_unit_test(test_empty_parameter),
        cmocka_unit_test(test_fused_read_only),
        cmocka_unit_test(test_state_resume),
        cmocka_unit_test(test_state_errors),
        cmocka_unit_test(test_sparse_grad_from_rows),
        cmocka_unit_test(test_add_param),
        cmocka_unit_test(test_step_errors),
        cmocka_unit_test(test_sgd_buffer_kind_errors),
        cmocka_unit_test(test_step_sparse_errors),
        cmocka_unit_test(test_fused_refusals),
        cmocka_unit_test(test_sgd_sparse_sequential),
        cmocka_unit_test(test_coalescing_rules),
        cmocka_unit_test(test_adam_first_step),
        cmocka_unit_test(test_fused_equals_unfused),
        cmocka_unit_test(test_kernel_variants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
