/* Lowercasing UTF-8 text as Python's str.lower() does, from the tables that
 * scripts/gen-casefold.py derives from that function (casefold_table.c). */
#include "casefold.h"

#include <stdbool.h>

uint32_t emb__lower_cp(uint32_t c) {
    if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
    size_t lo = 0, hi = emb__lower_runs_n;
    while (lo < hi) { /* the last run starting at or before c */
        size_t mid = (lo + hi) / 2;
        if (emb__lower_runs[mid][0] <= c)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0) return c;
    const uint32_t *r = emb__lower_runs[lo - 1];
    if (c > r[1] || (c - r[0]) % r[3] != 0) return c;
    return c + r[2]; /* the delta is stored modulo 2^32 */
}

static bool in_ranges(const uint32_t (*t)[2], size_t n, uint32_t c) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t[mid][1] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && t[lo][0] <= c;
}

static bool ignorable(uint32_t c) {
    return in_ranges(emb__ignorable_ranges, emb__ignorable_ranges_n, c);
}
static bool cased(uint32_t c) {
    return in_ranges(emb__cased_ranges, emb__cased_ranges_n, c);
}

/* The code point at s[*i] (valid UTF-8), *i moved past it. */
static uint32_t next_cp(const unsigned char *s, size_t *i) {
    uint32_t c = s[(*i)++];
    if (c < 0x80) return c;
    int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    c &= 0x3F >> more;
    while (more--) c = (c << 6) | (s[(*i)++] & 0x3F);
    return c;
}

/* The code point that ends before s[*i], *i moved to its first byte. */
static uint32_t prev_cp(const unsigned char *s, size_t *i) {
    size_t k = *i - 1;
    while (k > 0 && (s[k] & 0xC0) == 0x80) k--;
    *i = k;
    return next_cp(s, &k);
}

static size_t put_cp(char *out, uint32_t c) {
    unsigned char *o = (unsigned char *)out;
    if (c < 0x80) return o[0] = (unsigned char)c, 1;
    if (c < 0x800) {
        o[0] = (unsigned char)(0xC0 | (c >> 6)), o[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (c >> 12)), o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (c >> 18)), o[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F)), o[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

/* Python's final-sigma rule for the capital sigma at s[at, end). */
static bool final_sigma(const unsigned char *s, size_t n, size_t at, size_t end) {
    size_t i = at;
    uint32_t c = 0;
    bool found = false;
    while (i > 0 && !found) found = !ignorable(c = prev_cp(s, &i));
    if (!found || !cased(c)) return false;
    for (i = end; i < n;)
        if (!ignorable(c = next_cp(s, &i))) return !cased(c);
    return true;
}

size_t emb__utf8_lower(const char *text, size_t n, char *out) {
    const unsigned char *s = (const unsigned char *)text;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) { /* ASCII */
            out[o++] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
            i++;
            continue;
        }
        size_t at = i;
        uint32_t c = next_cp(s, &i);
        if (c == 0x130) { /* the one code point whose lowercase is two */
            o += put_cp(out + o, 'i');
            o += put_cp(out + o, 0x307);
        } else if (c == 0x3A3) {
            o += put_cp(out + o, final_sigma(s, n, at, i) ? 0x3C2 : 0x3C3);
        } else {
            o += put_cp(out + o, emb__lower_cp(c));
        }
    }
    return o;
}
