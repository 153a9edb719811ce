/* The kernel choice at first use from several threads at once: every thread of a fresh
 * process asks for the kernel mode, the thread count and every kernel family (through the
 * operations that pick one) at the same moment, while one of them also sets the mode and
 * the thread count to the values they already have. Every thread must see the same mode
 * and the same tables as a later call on one thread, and the ThreadSanitizer build of
 * `make test` runs this test, which must report no data race (the mode was once read from
 * the environment into a plain variable by whichever thread came first).
 *
 * The test is the only one of its executable: it needs a process in which nothing has
 * asked for a kernel yet. Threads are pthreads, so it says the same with or without
 * OpenMP. */
#include "emb_test.h"

#include "kernels/dispatch.h"
#include "internal.h"
#include "rng_normal.h"

#include <pthread.h>

enum { NTHREADS = 6, N = 48 };

typedef struct seen {
    emb_kernel_mode mode;
    int threads;
    const emb__kernel_table *table;
    const emb__qkernel_table *qtable;
    emb__sgns_step_fn sgns;
    emb__log_softmax_fwd_fn log_softmax;
    emb__normal16_fn normal16;
    float normal[N];  /* emb_normal_ of 48 floats (the block transform runs) */
    float softmax[N]; /* log_softmax of [4, 12] */
    float dequant[N]; /* f16 rows dequantized */
} seen;

static pthread_barrier_t start;
static seen got[NTHREADS];

static void run_ops(seen *s) {
    emb_generator *g = NULL;
    EMB_OK_OR_FAIL(emb_generator_create(7, &g));
    emb_tensor t = emb_test_view(EMB_FLOAT32, s->normal, 1, SHP(N));
    EMB_OK_OR_FAIL(emb_normal_(&t, 0.5, 2.0, g));
    emb_generator_free(g);
    float x[N];
    for (int i = 0; i < N; i++) x[i] = (float)(i % 7) * 0.75f - 2.0f;
    emb_tensor xt = emb_test_view(EMB_FLOAT32, x, 2, SHP(4, 12));
    emb_tensor yt = emb_test_view(EMB_FLOAT32, s->softmax, 2, SHP(4, 12));
    EMB_OK_OR_FAIL(emb_log_softmax_forward(&xt, &yt));
    uint16_t h[N];
    for (int i = 0; i < N; i++) h[i] = emb_f32_to_f16(x[i] * 3.0f);
    EMB_OK_OR_FAIL(emb_dequantize_rows(EMB_QTYPE_F16, h, sizeof h, 3, 16, s->dequant));
}

static void *worker(void *arg) {
    seen *s = arg;
    const int me = (int)(s - got);
    pthread_barrier_wait(&start);
    if (me == 0) {
        /* the values every thread reads anyway: a write that races only without atomics */
        emb_set_num_threads(emb_get_num_threads());
        emb_set_kernel_mode(emb_get_kernel_mode());
    }
    s->mode = emb_get_kernel_mode();
    s->threads = emb_get_num_threads();
    s->table = emb__kernels();
    s->qtable = emb__qkernels();
    s->sgns = emb__sgns_step();
    s->log_softmax = emb__log_softmax_pick().fwd;
    s->normal16 = emb__normal16_pick();
    run_ops(s);
    return NULL;
}

static void test_first_use_from_many_threads(void **state) {
    (void)state;
    pthread_t th[NTHREADS];
    assert_int_equal(pthread_barrier_init(&start, NULL, NTHREADS), 0);
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, worker, &got[i]), 0);
    for (int i = 0; i < NTHREADS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&start);

    /* the same on one thread, afterwards */
    seen one;
    memset(&one, 0, sizeof one);
    one.mode = emb_get_kernel_mode();
    one.threads = emb_get_num_threads();
    one.table = emb__kernels();
    one.qtable = emb__qkernels();
    one.sgns = emb__sgns_step();
    one.log_softmax = emb__log_softmax_pick().fwd;
    one.normal16 = emb__normal16_pick();
    run_ops(&one);
    for (int i = 0; i < NTHREADS; i++) {
        assert_int_equal(got[i].mode, one.mode);
        assert_int_equal(got[i].threads, one.threads);
        assert_ptr_equal(got[i].table, one.table);
        assert_ptr_equal(got[i].qtable, one.qtable);
        assert_true(got[i].sgns == one.sgns);
        assert_true(got[i].log_softmax == one.log_softmax);
        assert_true(got[i].normal16 == one.normal16);
        EMB_ASSERT_EXACT(got[i].normal, one.normal, N, "normal_");
        EMB_ASSERT_EXACT(got[i].softmax, one.softmax, N, "log_softmax");
        EMB_ASSERT_EXACT(got[i].dequant, one.dequant, N, "dequantize f16");
    }
    /* and the mode names the tables it should */
    const emb__kernel_table *ref = &emb__kernels_ref;
    if (one.mode == EMB_KERNELS_REF) assert_ptr_equal(one.table, ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_use_from_many_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
