/* tests/unit/emb_test.h: shared helpers for the cmocka unit tests. */
#ifndef EMB_TEST_H
#define EMB_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <emb/emb.h>

/* Asserts a call returns EMB_OK, printing emb_errmsg() otherwise. */
#define EMB_OK_OR_FAIL(call)                                                            \
    do {                                                                                \
        emb_status st_ = (call);                                                        \
        if (st_ != EMB_OK) fail_msg("%s -> %d (%s): %s", #call, (int)st_,               \
                                    emb_status_str(st_), emb_errmsg());                 \
    } while (0)

/* Asserts a call fails with `status` and that emb_errmsg() contains `needle`. */
#define EMB_EXPECT_ERR(call, status, needle)                                            \
    do {                                                                                \
        emb_clear_error();                                                              \
        emb_status st_ = (call);                                                        \
        if (st_ != (status)) fail_msg("%s -> %d (%s), expected %d; msg: %s", #call,    \
                                      (int)st_, emb_status_str(st_), (int)(status),      \
                                      emb_errmsg());                                    \
        if (!strstr(emb_errmsg(), (needle)))                                            \
            fail_msg("%s: message \"%s\" does not contain \"%s\"", #call, emb_errmsg(), \
                     (needle));                                                         \
    } while (0)

/* The project's one comparison rule (PyTorch's): |got - want| <= atol + rtol*|want|, NaN
 * equal to NaN; with exact != 0, bitwise equality. Prints the worst error and the first
 * mismatches, then fails the test. */
static inline void emb_assert_close_f32(const float *got, const float *want, int64_t n,
                                        int exact, double rtol, double atol,
                                        const char *what) {
    int64_t bad = 0, worst_i = -1;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        int ok;
        if (exact) ok = memcmp(&got[i], &want[i], sizeof(float)) == 0;
        else if (isnan(g) || isnan(w)) ok = isnan(g) && isnan(w);
        else ok = fabs(g - w) <= atol + rtol * fabs(w);
        double err = (isnan(g) || isnan(w)) ? (isnan(g) && isnan(w) ? 0 : INFINITY) : fabs(g - w);
        if (err > worst || (!ok && worst_i < 0)) { worst = err; worst_i = i; }
        if (!ok) {
            if (bad < 5)
                print_error("%s: mismatch at %lld: got %.9g want %.9g\n", what, (long long)i,
                            g, w);
            bad++;
        }
    }
    if (bad)
        fail_msg("%s: %lld of %lld elements differ; worst |err| %.3g at %lld", what,
                 (long long)bad, (long long)n, worst, (long long)worst_i);
}

#define EMB_ASSERT_EXACT(got, want, n, what) emb_assert_close_f32(got, want, n, 1, 0, 0, what)
#define EMB_ASSERT_CLOSE(got, want, n, what) \
    emb_assert_close_f32(got, want, n, 0, 1.3e-6, 1e-5, what)

#endif /* EMB_TEST_H */
