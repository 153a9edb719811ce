/* Optimizer state files of the committed fixtures (tests/data/optim_state/<name>.bin, the
 * layout of docs/optimizer-state.md): the bytes a state was saved as stay readable and stay
 * what is written.
 *
 * Each fixture's optimizer is rebuilt here from fixed seeds and steps (every optimizer kind,
 * dense and sparse steps, SGD's dense and sparse momentum buffers, state created by
 * emb_optimizer_init_state, parameters never stepped, a 0-d and a 1-D parameter). Then:
 *   - saving it gives exactly the committed bytes;
 *   - the committed bytes load into a fresh optimizer over the same parameter values, which
 *     saves them back unchanged and takes its next steps exactly as the rebuilt one does.
 *
 * EMB_WRITE_OPTIM_STATE_FIXTURES=1 rewrites the files from this build (into $EMB_TEST_DATA)
 * and then fails, so that a rewrite is never taken for a pass. */
#include "emb_test.h"

#define MAX_PARAMS 4

typedef enum { NONE = 0, DENSE, SPARSE, INIT } step_kind;

typedef struct fixture {
    const char *name;
    emb_optimizer_options o;
    int nparams;
    int ndim[MAX_PARAMS];
    int64_t shape[MAX_PARAMS][2];
    step_kind how[MAX_PARAMS]; /* what each parameter goes through */
    int steps;
} fixture;

typedef struct world {
    emb_optimizer *opt;
    float *p[MAX_PARAMS];
    int64_t numel[MAX_PARAMS];
} world;

static int64_t numel_of(const fixture *f, int i) {
    int64_t n = 1;
    for (int d = 0; d < f->ndim[i]; d++) n *= f->shape[i][d];
    return n;
}

/* One step of every parameter that takes steps (seeded by rng). */
static void step_all(const fixture *f, world *w, uint64_t *rng) {
    for (int i = 0; i < f->nparams; i++) {
        const int64_t n = w->numel[i];
        float g[64];
        assert_true(n <= 64);
        emb_test_randf(rng, g, n, -1, 1);
        if (f->how[i] == DENSE) {
            emb_tensor tg = emb_test_view(EMB_FLOAT32, g, f->ndim[i], f->shape[i]);
            EMB_OK_OR_FAIL(emb_optimizer_step(w->opt, i, &tg));
        } else if (f->how[i] == SPARSE) {
            /* 3 entries with a repeated row: an uncoalesced gradient */
            const int64_t rows = f->shape[i][0], dim = f->shape[i][1];
            int64_t idx[3];
            idx[0] = (int64_t)(emb_test_next_u64(rng) % (uint64_t)rows);
            idx[1] = (int64_t)(emb_test_next_u64(rng) % (uint64_t)rows);
            idx[2] = idx[0];
            emb_tensor tr = emb_test_view(EMB_INT64, idx, 1, SHP(3));
            emb_tensor tv = emb_test_view(EMB_FLOAT32, g, 2, SHP(3, dim));
            emb_sparse_grad sg;
            EMB_OK_OR_FAIL(emb_sparse_grad_from_rows(&sg, rows, dim, &tr, &tv));
            EMB_OK_OR_FAIL(emb_optimizer_step_sparse(w->opt, i, &sg));
            emb_sparse_grad_release(&sg);
        }
    }
}

/* The optimizer over parameters holding `values` (NULL: seeded values), set up as the
 * fixture says, without steps. */
static void world_make(const fixture *f, world *w, float *const *values) {
    memset(w, 0, sizeof *w);
    EMB_OK_OR_FAIL(emb_optimizer_create(&f->o, &w->opt));
    uint64_t rng = 7;
    for (int i = 0; i < f->nparams; i++) {
        w->numel[i] = numel_of(f, i);
        w->p[i] = malloc((size_t)w->numel[i] * sizeof(float) + 1);
        assert_non_null(w->p[i]);
        if (values)
            memcpy(w->p[i], values[i], (size_t)w->numel[i] * sizeof(float));
        else
            emb_test_randf(&rng, w->p[i], w->numel[i], -1, 1);
        emb_tensor tp = emb_test_view(EMB_FLOAT32, w->p[i], f->ndim[i], f->shape[i]);
        int id = -1;
        EMB_OK_OR_FAIL(emb_optimizer_add_param(w->opt, &tp, &id));
        assert_int_equal(id, i);
    }
}

static void world_free(world *w) {
    for (int i = 0; i < MAX_PARAMS; i++) free(w->p[i]);
    emb_optimizer_free(w->opt);
}

static unsigned char *save(const emb_optimizer *opt, size_t *n) {
    *n = emb_optimizer_state_nbytes(opt);
    assert_true(*n > 0);
    unsigned char *b = malloc(*n);
    assert_non_null(b);
    EMB_OK_OR_FAIL(emb_optimizer_save_state(opt, b, *n));
    return b;
}

static const char *fixture_path(const char *name) {
    static char buf[1024];
    const char *d = getenv("EMB_TEST_DATA");
    snprintf(buf, sizeof buf, "%s/optim_state/%s.bin", d ? d : "tests/data", name);
    return buf;
}

static void check_fixture(const fixture *f) {
    world a;
    world_make(f, &a, NULL);
    for (int i = 0; i < f->nparams; i++)
        if (f->how[i] == INIT) EMB_OK_OR_FAIL(emb_optimizer_init_state(a.opt, i));
    uint64_t rng = 1000;
    for (int s = 0; s < f->steps; s++) step_all(f, &a, &rng);
    size_t n;
    unsigned char *got = save(a.opt, &n);
    const char *path = fixture_path(f->name);
    if (getenv("EMB_WRITE_OPTIM_STATE_FIXTURES")) {
        FILE *out = fopen(path, "wb");
        if (!out) fail_msg("cannot write %s", path);
        assert_int_equal(fwrite(got, 1, n, out), n);
        assert_int_equal(fclose(out), 0);
        fail_msg("wrote %s (%zu bytes); unset EMB_WRITE_OPTIM_STATE_FIXTURES to test", path, n);
    }
    size_t fn;
    unsigned char *file = emb_test_read(path, &fn);
    /* what this build writes is what was committed */
    assert_int_equal(n, fn);
    assert_memory_equal(got, file, n);

    /* the committed bytes load into a fresh optimizer (other lr: the saved one replaces it)
     * over the same parameter values */
    fixture f2 = *f;
    f2.o.lr = f->o.lr * 3;
    world b;
    world_make(&f2, &b, a.p);
    EMB_OK_OR_FAIL(emb_optimizer_load_state(b.opt, file, fn));
    assert_true(emb_optimizer_lr(b.opt) == f->o.lr);
    for (int i = 0; i < f->nparams; i++)
        assert_int_equal(emb_optimizer_param_steps(b.opt, i),
                         f->how[i] == DENSE || f->how[i] == SPARSE ? f->steps : 0);
    size_t n2;
    unsigned char *again = save(b.opt, &n2);
    assert_int_equal(n2, fn);
    assert_memory_equal(again, file, fn);
    /* and steps on exactly as the optimizer that wrote them */
    uint64_t r1 = rng, r2 = rng;
    for (int s = 0; s < 2; s++) {
        step_all(f, &a, &r1);
        step_all(f, &b, &r2);
    }
    for (int i = 0; i < f->nparams; i++) EMB_ASSERT_EXACT(b.p[i], a.p[i], a.numel[i], f->name);
    size_t na, nb;
    unsigned char *sa = save(a.opt, &na), *sb = save(b.opt, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(sa, sb, na);
    free(sa);
    free(sb);
    free(again);
    free(file);
    free(got);
    world_free(&a);
    world_free(&b);
}

/* ---- the fixtures ------------------------------------------------------------------- */

static void test_sgd(void **state) {
    (void)state;
    fixture f = {"sgd",
                 emb_optimizer_options_default(EMB_OPTIMIZER_SGD),
                 2,
                 {2, 1},
                 {{5, 3}, {4}},
                 {SPARSE, DENSE},
                 3};
    f.o.lr = 0.1;
    check_fixture(&f);
}

/* dense and sparse momentum buffers, a 0-d parameter, one never stepped */
static void test_sgd_momentum(void **state) {
    (void)state;
    fixture f = {"sgd_momentum",
                 emb_optimizer_options_default(EMB_OPTIMIZER_SGD),
                 4,
                 {2, 2, 0, 1},
                 {{5, 3}, {6, 2}, {0}, {3}},
                 {DENSE, SPARSE, DENSE, NONE},
                 3};
    f.o.lr = 0.1;
    f.o.momentum = 0.9;
    f.o.dampening = 0.2;
    f.o.maximize = true;
    check_fixture(&f);
}

static void test_sgd_nesterov(void **state) {
    (void)state;
    fixture f = {"sgd_nesterov",
                 emb_optimizer_options_default(EMB_OPTIMIZER_SGD),
                 1,
                 {2},
                 {{4, 3}},
                 {SPARSE},
                 4};
    f.o.lr = 0.05;
    f.o.momentum = 0.5;
    f.o.nesterov = true;
    check_fixture(&f);
}

/* state from steps, from emb_optimizer_init_state, and none */
static void test_adagrad(void **state) {
    (void)state;
    fixture f = {"adagrad",
                 emb_optimizer_options_default(EMB_OPTIMIZER_ADAGRAD),
                 4,
                 {2, 2, 2, 1},
                 {{5, 3}, {4, 2}, {3, 2}, {5}},
                 {DENSE, SPARSE, INIT, NONE},
                 3};
    f.o.lr_decay = 0.05;
    f.o.initial_accumulator_value = 0.1;
    f.o.eps = 1e-9;
    check_fixture(&f);
}

static void test_adam_amsgrad(void **state) {
    (void)state;
    fixture f = {"adam_amsgrad",
                 emb_optimizer_options_default(EMB_OPTIMIZER_ADAM),
                 2,
                 {2, 1},
                 {{5, 3}, {6}},
                 {DENSE, DENSE},
                 3};
    f.o.amsgrad = true;
    f.o.weight_decay = 0.01;
    f.o.beta2 = 0.99;
    check_fixture(&f);
}

static void test_adamw(void **state) {
    (void)state;
    fixture f = {"adamw",
                 emb_optimizer_options_default(EMB_OPTIMIZER_ADAMW),
                 2,
                 {2, 1},
                 {{4, 4}, {2}},
                 {DENSE, NONE},
                 2};
    f.o.beta1 = 0.8;
    f.o.lr = 0.01;
    check_fixture(&f);
}

static void test_sparse_adam(void **state) {
    (void)state;
    fixture f = {"sparse_adam",
                 emb_optimizer_options_default(EMB_OPTIMIZER_SPARSE_ADAM),
                 2,
                 {2, 2},
                 {{6, 3}, {2, 2}},
                 {SPARSE, NONE},
                 4};
    f.o.maximize = true;
    f.o.eps = 1e-6;
    check_fixture(&f);
}

/* ---- a record whose layout is larger than any buffer -------------------------------- */

static void put_le(unsigned char *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A sparse momentum buffer of 1 entry on a [0, 2^62] parameter (a legal, empty one) needs
 * 2^64 bytes of values: the state is truncated, whatever the 8 bytes that follow the row
 * (the size of its values must not wrap around to 0). */
static void test_record_size_overflow(void **state) {
    (void)state;
    emb_optimizer_options o = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    o.momentum = 0.9;
    emb_optimizer *opt = NULL;
    EMB_OK_OR_FAIL(emb_optimizer_create(&o, &opt));
    const int64_t dim = (int64_t)1 << 62;
    emb_tensor tp = emb_test_view(EMB_FLOAT32, NULL, 2, SHP(0, dim));
    EMB_OK_OR_FAIL(emb_optimizer_add_param(opt, &tp, NULL));
    size_t n0;
    unsigned char *before = save(opt, &n0);
    unsigned char b[160];
    memcpy(b, before, 96); /* the header of this optimizer, 1 parameter */
    unsigned char *r = b + 96;
    put_le(r, 2, 4);      /* ndim */
    put_le(r + 4, 0, 4);  /* flags */
    put_le(r + 8, 1, 8);  /* steps */
    put_le(r + 16, 2, 4); /* sparse momentum buffer */
    put_le(r + 20, 0, 4);
    put_le(r + 24, 1, 8); /* 1 entry */
    put_le(r + 32, 0, 8); /* shape [0, 2^62] */
    put_le(r + 40, (uint64_t)dim, 8);
    put_le(r + 48, 0, 8); /* its row */
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 152; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    put_le(b + 152, h, 8);
    EMB_EXPECT_ERR(emb_optimizer_load_state(opt, b, sizeof b), EMB_ERR_FORMAT,
                   "optimizer state: truncated: 160 bytes end inside parameter 0");
    size_t n1;
    unsigned char *after = save(opt, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(before);
    free(after);
    emb_optimizer_free(opt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd),          cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_sgd_nesterov), cmocka_unit_test(test_adagrad),
        cmocka_unit_test(test_adam_amsgrad), cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_sparse_adam),  cmocka_unit_test(test_record_size_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
