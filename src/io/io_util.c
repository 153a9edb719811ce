/* Tables, numbers (parsing, printing, half/bfloat16) for src/io. */
#include "io_internal.h"
#include "half.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

emb_status emb__alloc_table(emb_tensor *t, int64_t rows, int64_t dim) {
    int64_t n, shape[2] = {rows, dim};
    if (!emb__mul_i64(rows, dim, &n) || n > INT64_MAX / 4)
        return emb__error(EMB_ERR_OVERFLOW, "a table of %lld x %lld floats is too large",
                          (long long)rows, (long long)dim);
    void *d = NULL;
    if (n > 0 && !(d = emb__malloc((size_t)n * 4)))
        return emb__error(EMB_ERR_NOMEM, "out of memory for a table of %lld x %lld floats",
                          (long long)rows, (long long)dim);
    emb_status rc = emb_tensor_init(t, EMB_FLOAT32, d, 2, shape);
    if (rc) emb__free(d);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * Numbers
 * ------------------------------------------------------------------------------------- */

static const double emb__pow10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                      1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                      1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static bool parse_float_slow(const char *s, size_t len, float *out) {
    char small[128];
    char *buf = len < sizeof small ? small : malloc(len + 1);
    if (!buf) return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    float f = strtof(buf, &end);
    bool ok = end == buf + len;
    if (buf != small) free(buf);
    if (ok) *out = f;
    return ok;
}

bool emb__parse_float(const char *s, size_t len, float *out) {
    if (!s || !out || len == 0) return false;
    /* strtof skips leading white space; a token never has any. */
    if (s[0] == ' ' || (s[0] >= '\t' && s[0] <= '\r')) return false;
    const char *p = s, *e = s + len;
    bool neg = false;
    if (*p == '-' || *p == '+') neg = *p++ == '-';
    uint64_t m = 0;
    int nd = 0, exp10 = 0;
    bool any = false, lost = false;
    while (p < e && (unsigned)(*p - '0') < 10) {
        unsigned d = (unsigned)(*p++ - '0');
        any = true;
        if (m == 0 && d == 0) continue;
        if (nd < 19) {
            m = m * 10 + d;
            nd++;
        } else {
            exp10++;
            lost |= d != 0;
        }
    }
    if (p < e && *p == '.') {
        p++;
        while (p < e && (unsigned)(*p - '0') < 10) {
            unsigned d = (unsigned)(*p++ - '0');
            any = true;
            if (m == 0 && d == 0) {
                exp10--;
                continue;
            }
            if (nd < 19) {
                m = m * 10 + d;
                nd++;
                exp10--;
            } else {
                lost |= d != 0;
            }
        }
    }
    if (!any) return parse_float_slow(s, len, out); /* nan, inf, or not a number */
    if (p < e && (*p == 'e' || *p == 'E')) {
        const char *q = p + 1;
        bool eneg = false;
        if (q < e && (*q == '-' || *q == '+')) eneg = *q++ == '-';
        if (q == e || (unsigned)(*q - '0') >= 10) return parse_float_slow(s, len, out);
        int x = 0;
        while (q < e && (unsigned)(*q - '0') < 10) {
            if (x < 100000) x = x * 10 + (*q - '0');
            q++;
        }
        exp10 += eneg ? -x : x;
        p = q;
    }
    if (p != e || lost) return parse_float_slow(s, len, out);
    if (m == 0) {
        *out = neg ? -0.0f : 0.0f;
        return true;
    }
    if (m > (1ull << 53) || exp10 < -22 || exp10 > 22) return parse_float_slow(s, len, out);
    /* m and 10^|exp10| are exact doubles, so d is the correctly rounded double of the value;
     * rounding d to float is then correct unless d lies exactly halfway between two floats
     * (the value's side of the midpoint was lost): that rare case goes to strtof. The fast
     * range (>= 1e-22, <= 2^53 * 1e22) has no float subnormals or overflow. */
    double d = exp10 < 0 ? (double)m / emb__pow10[-exp10] : (double)m * emb__pow10[exp10];
    float f = (float)d;
    if ((double)f != d) {
        /* f > 0 here: its neighbour towards d is one unit away in the bit pattern */
        uint32_t fb;
        memcpy(&fb, &f, 4);
        fb += d > (double)f ? 1 : -1;
        float g;
        memcpy(&g, &fb, 4);
        if (((double)f + (double)g) * 0.5 == d) return parse_float_slow(s, len, out);
    }
    *out = neg ? -f : f;
    return true;
}

int emb__format_float_printf(char *buf, float f, int precision) {
    if (precision > 0) return snprintf(buf, 32, "%.*g", precision, (double)f);
    int n = 0;
    for (int p = 6; p <= 9; p++) {
        n = snprintf(buf, 32, "%.*g", p, (double)f);
        float back;
        if (isnan(f) || (emb__parse_float(buf, (size_t)n, &back) && back == f)) return n;
    }
    return n;
}

/* a > 0 (a float's value) rounded to p <= 9 significant digits, as printf rounds it: the
 * digits *d (p of them) and the decimal exponent *x of the rounded value. false when one
 * rounding of a double cannot decide: the value lies within 1e-6 of a tie (printf rounds
 * the exact binary value; ties go to even), or the scale 10^k is not an exact double. */
static bool round_digits(double a, int p, int *e_io, uint64_t *d, int *x) {
    static const uint64_t ten[11] = {1,       10,       100,       1000,       10000,      100000,
                                     1000000, 10000000, 100000000, 1000000000, 10000000000};
    int e = *e_io; /* the guess: floor(log10(a)) or one off */
    for (int tries = 0; tries < 3; tries++) {
        const int k = p - 1 - e;
        if (k > 22 || k < -22) return false;
        /* one rounding: 10^|k| is exact, so s is within half a unit of its last place
         * (< 6e-8 below 1e9) of a * 10^k */
        const double s = k >= 0 ? a * emb__pow10[k] : a / emb__pow10[-k];
        if (s < (double)ten[p - 1]) {
            e--;
            continue;
        }
        if (s >= (double)ten[p]) {
            e++;
            continue;
        }
        const double fl = (double)(uint64_t)s, fr = s - fl; /* s > 0: truncation is floor */
        if (fabs(fr - 0.5) < 1e-6) return false;
        uint64_t v = (uint64_t)fl + (fr > 0.5);
        *e_io = e; /* the exponent that fits p digits fits the next precision too */
        if (v == ten[p]) v /= 10, e++; /* 999999.7 -> 1.00000e6 */
        *d = v, *x = e;
        return true;
    }
    return false;
}

/* floor(log10(a)) or one less, for a > 0 a float's value (a normal double): from a's binary
 * exponent e2 (a in [2^e2, 2^(e2+1))), floor(e2 log10(2)) by 78913 / 2^18, which is exact
 * for |e2| < 1650. */
static int decimal_exponent_guess(double a) {
    uint64_t b;
    memcpy(&b, &a, sizeof b);
    const int e2 = (int)((b >> 52) & 0x7ff) - 1023, t = e2 * 78913;
    return t >= 0 ? t >> 18 : -((-t + (1 << 18) - 1) >> 18);
}

/* Whether the decimal d * 10^(x - p + 1) reads back as the float whose midpoints to its
 * neighbours are lo and hi: 1 or 0, or -1 when a double cannot tell (the decimal lies within
 * a few units of a double's last place of a midpoint, where rounding decides). */
static int reads_back(double lo, double hi, uint64_t d, int p, int x) {
    const int k = p - 1 - x;
    if (k > 22 || k < -22) return -1;
    const double c = k >= 0 ? (double)d / emb__pow10[k] : (double)d * emb__pow10[-k];
    const double tol = c * 0x1p-50;
    if (fabs(c - lo) <= tol || fabs(c - hi) <= tol) return -1;
    return c > lo && c < hi;
}

/* printf's "%.<p>g" of a rounded value: p digits d (trailing zeros dropped), exponent x. */
static int g_text(char *buf, bool neg, uint64_t d, int p, int x) {
    char dig[12];
    for (int i = p - 1; i >= 0; i--) dig[i] = (char)('0' + d % 10), d /= 10;
    int nd = p;
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    char *o = buf;
    if (neg) *o++ = '-';
    if (x < -4 || x >= p) { /* d.ddde+XX */
        *o++ = dig[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, dig + 1, (size_t)nd - 1), o += nd - 1;
        }
        *o++ = 'e';
        *o++ = x < 0 ? '-' : '+';
        const int ax = x < 0 ? -x : x;
        if (ax >= 100) *o++ = (char)('0' + ax / 100);
        *o++ = (char)('0' + ax / 10 % 10);
        *o++ = (char)('0' + ax % 10);
    } else if (x >= 0) { /* ddd.ddd */
        for (int i = 0; i <= x; i++) *o++ = i < nd ? dig[i] : '0';
        if (nd > x + 1) {
            *o++ = '.';
            memcpy(o, dig + x + 1, (size_t)(nd - x - 1)), o += nd - x - 1;
        }
    } else { /* 0.000ddd */
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -x - 1; i++) *o++ = '0';
        memcpy(o, dig, (size_t)nd), o += nd;
    }
    *o = 0;
    return (int)(o - buf);
}

/* The text of emb__format_float_printf without printf where a double decides the rounding
 * (nearly every float of a table): printf's conversion is exact multi-precision arithmetic
 * and was a sixth of a word2vec run's CPU time. The rest (ties, zeros, NaN, infinities,
 * values beyond 1e-14..1e30 or so) is printf's. */
int emb__format_float(char *buf, float f, int precision) {
    if (!isfinite(f) || f == 0 || precision > 9) return emb__format_float_printf(buf, f, precision);
    const bool neg = signbit(f);
    const double a = neg ? -(double)f : (double)f;
    uint64_t d;
    int x, e = decimal_exponent_guess(a);
    if (precision > 0) {
        if (!round_digits(a, precision, &e, &d, &x))
            return emb__format_float_printf(buf, f, precision);
        return g_text(buf, neg, d, precision, x);
    }
    /* the midpoints between |f| and its neighbours (|f| > 0 and finite: one unit of its bit
     * pattern down and up, the largest float's upper neighbour infinity), exact in double */
    uint32_t bits;
    const float af = (float)a;
    memcpy(&bits, &af, sizeof bits);
    float below, above;
    const uint32_t bb = bits - 1, ab = bits + 1;
    memcpy(&below, &bb, sizeof below), memcpy(&above, &ab, sizeof above);
    const double lo = ((double)af + (double)below) / 2, hi = ((double)af + (double)above) / 2;
    for (int p = 6; p <= 9; p++) {
        if (!round_digits(a, p, &e, &d, &x)) return emb__format_float_printf(buf, f, precision);
        const int back = reads_back(lo, hi, d, p, x);
        if (back == 1 || p == 9) return g_text(buf, neg, d, p, x); /* 9 digits always do */
        if (back < 0) {
            const int n = g_text(buf, neg, d, p, x);
            float g;
            if (emb__parse_float(buf, (size_t)n, &g) && g == f) return n;
        }
    }
    return 0;
}

bool emb__to_f32(float *dst, const void *src, emb_dtype dtype, int64_t n) {
    const unsigned char *s = src;
    switch (dtype) {
    case EMB_FLOAT32:
        if (n > 0) memcpy(dst, s, (size_t)n * 4);
        return true;
    case EMB_FLOAT64:
        for (int64_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, s + 8 * i, 8);
            dst[i] = (float)d;
        }
        return true;
    case EMB_FLOAT16:
    case EMB_BFLOAT16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = dtype == EMB_FLOAT16 ? emb__f16_to_f32(h) : emb__bf16_to_f32(h);
        }
        return true;
    case EMB_INT64:
        for (int64_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, s + 8 * i, 8);
            dst[i] = (float)v;
        }
        return true;
    case EMB_INT32:
        for (int64_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, s + 4 * i, 4);
            dst[i] = (float)v;
        }
        return true;
    case EMB_INT16:
        for (int64_t i = 0; i < n; i++) {
            int16_t v;
            memcpy(&v, s + 2 * i, 2);
            dst[i] = (float)v;
        }
        return true;
    case EMB_INT8:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(int8_t)s[i];
        return true;
    case EMB_UINT8:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)s[i];
        return true;
    case EMB_BOOL:
        for (int64_t i = 0; i < n; i++) dst[i] = s[i] ? 1.0f : 0.0f;
        return true;
    }
    return false;
}
