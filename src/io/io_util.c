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

int emb__format_float(char *buf, float f, int precision) {
    if (precision > 0) return snprintf(buf, 32, "%.*g", precision, (double)f);
    int n = 0;
    for (int p = 6; p <= 9; p++) {
        n = snprintf(buf, 32, "%.*g", p, (double)f);
        float back;
        if (isnan(f) || (emb__parse_float(buf, (size_t)n, &back) && back == f)) return n;
    }
    return n;
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
