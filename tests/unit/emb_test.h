/* tests/unit/emb_test.h: shared helpers for the cmocka unit tests. */
#ifndef EMB_TEST_H
#define EMB_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <emb/emb.h>

/* Asserts a call returns EMB_OK, printing emb_errmsg() otherwise. */
#define EMB_OK_OR_FAIL(call)                                                                       \
    do {                                                                                           \
        emb_status st_ = (call);                                                                   \
        if (st_ != EMB_OK)                                                                         \
            fail_msg("%s -> %d (%s): %s", #call, (int)st_, emb_status_str(st_), emb_errmsg());     \
    } while (0)

/* Asserts a call fails with `status` and that emb_errmsg() contains `needle`. */
#define EMB_EXPECT_ERR(call, status, needle)                                                       \
    do {                                                                                           \
        emb_clear_error();                                                                         \
        emb_status st_ = (call);                                                                   \
        if (st_ != (status))                                                                       \
            fail_msg("%s -> %d (%s), expected %d; msg: %s", #call, (int)st_, emb_status_str(st_),  \
                     (int)(status), emb_errmsg());                                                 \
        if (!strstr(emb_errmsg(), (needle)))                                                       \
            fail_msg("%s: message \"%s\" does not contain \"%s\"", #call, emb_errmsg(), (needle)); \
    } while (0)

/* The project's one comparison rule (PyTorch's): |got - want| <= atol + rtol*|want|, NaN
 * equal to NaN; with exact != 0, bitwise equality. Prints the worst error and the first
 * mismatches, then fails the test. */
static inline void emb_assert_close_f32(const float *got, const float *want, int64_t n, int exact,
                                        double rtol, double atol, const char *what) {
    int64_t bad = 0, worst_i = -1;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        int ok;
        if (exact)
            ok = memcmp(&got[i], &want[i], sizeof(float)) == 0;
        else if (isnan(g) || isnan(w))
            ok = isnan(g) && isnan(w);
        else
            ok = fabs(g - w) <= atol + rtol * fabs(w);
        double err = (isnan(g) || isnan(w)) ? (isnan(g) && isnan(w) ? 0 : INFINITY) : fabs(g - w);
        if (err > worst || (!ok && worst_i < 0)) {
            worst = err;
            worst_i = i;
        }
        if (!ok) {
            if (bad < 5)
                print_error("%s: mismatch at %lld: got %.9g want %.9g\n", what, (long long)i, g, w);
            bad++;
        }
    }
    if (bad)
        fail_msg("%s: %lld of %lld elements differ; worst |err| %.3g at %lld", what, (long long)bad,
                 (long long)n, worst, (long long)worst_i);
}

/* ---- small helpers shared by the unit tests ---- */

/* A shape literal: SHP(2, 3) */
#define SHP(...) ((const int64_t[]){__VA_ARGS__})

/* A tensor view; fails the test if the arguments are invalid. */
static inline emb_tensor emb_test_view(emb_dtype dtype, void *data, int ndim,
                                       const int64_t *shape) {
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_tensor_init(&t, dtype, data, ndim, shape));
    return t;
}

static inline uint32_t emb_test_f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline void emb_test_fill(float *p, int64_t n, float v) {
    for (int64_t i = 0; i < n; i++) p[i] = v;
}

/* Fails unless every p[i] has the bits of v (e.g. an output a failed call must not touch). */
static inline void emb_test_assert_all(const float *p, int64_t n, float v, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (emb_test_f2u(p[i]) != emb_test_f2u(v))
            fail_msg("%s[%lld] changed: %.9g (expected %.9g)", what, (long long)i, p[i], v);
}

/* Test data generator (splitmix64; not the library's generator). */
static inline uint64_t emb_test_next_u64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* Uniform double in [0, 1). */
static inline double emb_test_urand(uint64_t *state) {
    return (double)(emb_test_next_u64(state) >> 11) * (1.0 / 9007199254740992.0);
}
static inline void emb_test_randf(uint64_t *state, float *p, int64_t n, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) p[i] = (float)(lo + (hi - lo) * emb_test_urand(state));
}

/* Finite-difference gradient check: fd[i] (central differences, in double) against the
 * analytic gradient g[i]; passes when |fd - g| <= 2e-3 * max|g| + 1e-4 everywhere, and also
 * fails when the check could not tell g from 2g or g/2 (so that it can fail at all). */
static inline int emb_test_fd_agrees(const double *fd, const float *g, int64_t n, double scale,
                                     double *worst) {
    double gmax = 0;
    for (int64_t i = 0; i < n; i++) gmax = fmax(gmax, fabs((double)g[i] * scale));
    double tol = 2e-3 * gmax + 1e-4;
    int ok = 1;
    *worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(fd[i] - (double)g[i] * scale);
        if (e > *worst) *worst = e;
        if (!(e <= tol)) ok = 0;
    }
    return ok;
}
static inline void emb_test_check_fd(const double *fd, const float *g, int64_t n,
                                     const char *what) {
    double worst;
    if (!emb_test_fd_agrees(fd, g, n, 1.0, &worst))
        fail_msg("%s: finite differences disagree, worst |fd - g| = %.3g", what, worst);
    if (getenv("EMB_TEST_VERBOSE")) print_message("%s: worst |fd - g| = %.3g\n", what, worst);
    if (emb_test_fd_agrees(fd, g, n, 2.0, &worst) || emb_test_fd_agrees(fd, g, n, 0.5, &worst))
        fail_msg("%s: the finite-difference check cannot tell a gradient off by 2", what);
}

/* The path of a committed test file, tests/data/<rel> (ctest sets EMB_TEST_DATA; two
 * rotating buffers). */
static inline const char *emb_test_data(const char *rel) {
    static char buf[2][1024];
    static int k;
    k ^= 1;
    const char *d = getenv("EMB_TEST_DATA");
    snprintf(buf[k], sizeof buf[k], "%s/%s", d ? d : "tests/data", rel);
    return buf[k];
}

/* The whole of a file that must exist (the test fails naming it otherwise); free it. */
static inline unsigned char *emb_test_read(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (run from ctest, which sets EMB_TEST_DATA)", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long sz = ftell(f);
    assert_true(sz > 0);
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    unsigned char *b = malloc((size_t)sz);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return b;
}

#define EMB_ASSERT_EXACT(got, want, n, what) emb_assert_close_f32(got, want, n, 1, 0, 0, what)
#define EMB_ASSERT_CLOSE(got, want, n, what)                                                       \
    emb_assert_close_f32(got, want, n, 0, 1.3e-6, 1e-5, what)

#endif /* EMB_TEST_H */
