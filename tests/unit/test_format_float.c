/* emb__format_float (the text writers' numbers: word2vec and GloVe text, `emb print`) gives
 * printf's text, character for character: the shortest of "%.6g" .. "%.9g" that reads back
 * as the float (precision 0), or "%.<p>g". Its fast path rounds with doubles and leaves
 * ties and the far exponents to printf; the reference here is printf itself
 * (emb__format_float_printf). */
#include "emb_test.h"

#include "io/io_internal.h"

#include <float.h>
#include <math.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static void same_text(float f, int precision) {
    char got[32], want[32];
    int n = emb__format_float(got, f, precision);
    int m = emb__format_float_printf(want, f, precision);
    if (n != m || strcmp(got, want) != 0) {
        uint32_t bits;
        memcpy(&bits, &f, 4);
        fail_msg("float 0x%08x, precision %d: \"%s\", printf gives \"%s\"", bits, precision, got,
                 want);
    }
}

/* Every finite, zero, NaN and infinite case of a few forms, and their neighbours. */
static void test_edges(void **state) {
    (void)state;
    const float edges[] = {0.0f,
                           -0.0f,
                           NAN,
                           -NAN,
                           INFINITY,
                           -INFINITY,
                           1.0f,
                           -1.0f,
                           0.5f,
                           1.953125f,
                           2.4414062e-4f,
                           0.0001f,
                           0.00001f,
                           0.000099999f,
                           999999.5f,
                           9999995.0f,
                           999999.44f,
                           123456.5f,
                           100000.0f,
                           1000000.0f,
                           1e7f,
                           FLT_MAX,
                           FLT_MIN,
                           FLT_TRUE_MIN,
                           1e-14f,
                           1e-15f,
                           1e-20f,
                           1e30f,
                           1e31f,
                           3.4e38f,
                           0.1f,
                           0.2f,
                           0.3f,
                           1.0f / 3.0f,
                           16777216.0f,
                           16777217.0f,
                           1.17549435e-38f,
                           0.0078125f,
                           0.12345675f,
                           9.9999995e-5f};
    for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++) {
        float f = edges[k];
        for (int step = 0; step < 5; step++) {
            for (int p = 0; p <= 12; p++) same_text(f, p);
            same_text(-f, 0);
            f = nextafterf(f, INFINITY);
        }
    }
    /* every power of ten and the floats beside it, across the whole range */
    for (int e = -45; e <= 38; e++) {
        float f = (float)pow(10.0, e);
        for (int d = -2; d <= 2; d++) {
            float g = f;
            for (int i = 0; i < (d < 0 ? -d : d); i++) g = nextafterf(g, d < 0 ? 0.0f : INFINITY);
            for (int p = 0; p <= 9; p++) same_text(g, p);
        }
    }
}

/* Random bit patterns (every exponent alike), and values as tables hold them. */
static void test_random(void **state) {
    (void)state;
    for (int i = 0; i < 400000; i++) {
        uint32_t bits = (uint32_t)next();
        float f;
        memcpy(&f, &bits, 4);
        same_text(f, 0);
        same_text(f, (int)(next() % 10));
    }
    for (int i = 0; i < 400000; i++) {
        /* uniform in [-2, 2), scaled by 10^-6 .. 10^3 */
        double u = (double)(int64_t)(next() >> 11) / 9007199254740992.0 * 4 - 2;
        float f = (float)(u * pow(10.0, (int)(next() % 10) - 6));
        same_text(f, 0);
        same_text(f, 1 + (int)(next() % 9));
    }
}

/* Halfway values at 6 to 9 digits that floats hold exactly (ties: printf rounds to even). */
static void test_ties(void **state) {
    (void)state;
    int checked = 0;
    for (int e2 = -30; e2 <= 30; e2++)
        for (int m = 1; m < 4096; m += 2) {
            float f = ldexpf((float)m, e2);
            for (int p = 1; p <= 9; p++) same_text(f, p);
            same_text(f, 0);
            checked++;
        }
    assert_int_equal(checked, 61 * 2048);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_ties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
