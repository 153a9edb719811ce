/* log_softmax kernels with AVX2 and SLEEF, in the arithmetic of PyTorch 1.13's AVX2
 * capability (see softmax.h). This file is compiled with -mavx2 -mfma when the build found
 * SLEEF on x86-64 (EMB_HAVE_SLEEF); its functions run only on CPUs with AVX2 and FMA. */
#include "softmax.h"

#if defined(EMB_HAVE_SLEEF)
#include <immintrin.h>
#include <math.h>
#include <sleef.h>
#include <string.h>

#include "nan_rules.h"

/* Vectorized<float>::loadu(p, n): n < 8 values, the other lanes zero. */
static inline __m256 load_part(const float *p, int64_t n) {
    float t[8] = {0};
    memcpy(t, p, (size_t)n * sizeof(float));
    return _mm256_loadu_ps(t);
}

/* Vectorized<float>::set(a, b, n): lanes < n from b, the rest from a. */
static inline __m256 set_part(__m256 a, __m256 b, int64_t n) {
    float ta[8], tb[8];
    _mm256_storeu_ps(ta, a);
    _mm256_storeu_ps(tb, b);
    memcpy(ta, tb, (size_t)n * sizeof(float));
    return _mm256_loadu_ps(ta);
}

static inline __m256 vmax(__m256 a, __m256 b) {
    __m256 m = _mm256_max_ps(a, b);
    return _mm256_or_ps(m, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}

static inline __m256 vop(__m256 a, __m256 b, bool is_max) {
    return is_max ? vmax(a, b) : _mm256_add_ps(a, b);
}

/* vec_reduce_all over the first n < 8 lanes, in order. */
static inline float reduce_short(__m256 v, int64_t n, bool is_max) {
    float a[8];
    _mm256_storeu_ps(a, v);
    __m256 acc = v;
    for (int64_t i = 1; i < n; i++) {
        float nx[8] = {0};
        nx[0] = a[i];
        acc = vop(acc, _mm256_loadu_ps(nx), is_max);
    }
    return _mm256_cvtss_f32(acc);
}

/* The AVX2 VecReduceAllSIMD<float>: 128-bit, 64-bit and 32-bit shuffles. */
static inline float reduce8(__m256 v, bool is_max) {
    v = vop(v, _mm256_permute2f128_ps(v, v, 0x1), is_max);
    v = vop(v, _mm256_shuffle_ps(v, v, 0x4E), is_max);
    v = vop(v, _mm256_shuffle_ps(v, v, 0xB1), is_max);
    return _mm256_cvtss_f32(v);
}

/* reduce_all / map_reduce_all(exp(x - sub)) over one row. */
static float row_reduce(const float *x, int64_t c, bool is_max, bool map_exp, float sub) {
    const __m256 vs = _mm256_set1_ps(sub);
    if (c < 8) {
        __m256 v = load_part(x, c);
        if (map_exp) v = Sleef_expf8_u10(_mm256_sub_ps(v, vs));
        return reduce_short(v, c, is_max);
    }
    __m256 acc = _mm256_loadu_ps(x);
    if (map_exp) acc = Sleef_expf8_u10(_mm256_sub_ps(acc, vs));
    int64_t d = 8;
    for (; d + 8 <= c; d += 8) {
        __m256 v = _mm256_loadu_ps(x + d);
        if (map_exp) v = Sleef_expf8_u10(_mm256_sub_ps(v, vs));
        acc = vop(acc, v, is_max);
    }
    if (c - d > 0) {
        __m256 v = load_part(x + d, c - d);
        if (map_exp) v = Sleef_expf8_u10(_mm256_sub_ps(v, vs));
        acc = set_part(acc, vop(acc, v, is_max), c - d);
    }
    return reduce8(acc, is_max);
}

void emb__log_softmax_fwd_avx2(const float *x, float *y, int64_t rows, int64_t c) {
    if (c <= 0) return;
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x + i * c;
        float *yr = y + i * c;
        float mx = row_reduce(xr, c, true, false, 0.0f);
        float sum = row_reduce(xr, c, false, true, mx);
        float lse = _mm256_cvtss_f32(Sleef_logf8_u10(_mm256_set1_ps(sum)));
        const __m256 vm = _mm256_set1_ps(mx), vl = _mm256_set1_ps(lse);
        int64_t j = 0;
        for (; j + 8 <= c; j += 8)
            _mm256_storeu_ps(yr + j, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + j), vm), vl));
        for (; j < c; j++) yr[j] = (xr[j] - mx) - lse;
    }
}

/* gy - exp(y) * s as torch's vectorised backward computes it, a fused -(e * s) + gy, with
 * x86's NaN for such an operation: e's, then s's, then gy's (nan_rules.h). */
static inline __m256 bwd_lane(__m256 e, __m256 vs, __m256 g) {
    const __m256 r = _mm256_fnmadd_ps(e, vs, g);
    if (_mm256_movemask_ps(_mm256_cmp_ps(r, r, _CMP_UNORD_Q)) == 0) return r;
    float tr[8], te[8], ts[8], tg[8];
    _mm256_storeu_ps(tr, r), _mm256_storeu_ps(te, e), _mm256_storeu_ps(ts, vs);
    _mm256_storeu_ps(tg, g);
    for (int k = 0; k < 8; k++)
        if (tr[k] != tr[k]) tr[k] = emb__nan_of3(te[k], ts[k], tg[k]);
    return _mm256_loadu_ps(tr);
}

void emb__log_softmax_bwd_avx2(const float *gy, const float *y, float *gx, int64_t rows,
                               int64_t c) {
    if (c <= 0) return;
    for (int64_t i = 0; i < rows; i++) {
        const float *gr = gy + i * c, *yr = y + i * c;
        float *out = gx + i * c;
        const __m256 vs = _mm256_set1_ps(row_reduce(gr, c, false, false, 0.0f));
        int64_t j = 0;
        for (; j + 8 <= c; j += 8) {
            __m256 e = Sleef_expf8_u10(_mm256_loadu_ps(yr + j));
            _mm256_storeu_ps(out + j, bwd_lane(e, vs, _mm256_loadu_ps(gr + j)));
        }
        if (j < c) {
            int64_t n = c - j;
            __m256 e = Sleef_expf8_u10(load_part(yr + j, n));
            float t[8];
            _mm256_storeu_ps(t, bwd_lane(e, vs, load_part(gr + j, n)));
            memcpy(out + j, t, (size_t)n * sizeof(float));
        }
    }
}
static int64_t dim_chunk(int64_t c) {
    int64_t ch = (int64_t)(128 * 1024) / c / (int64_t)sizeof(float);
    if (ch < 8) ch = 8;
    return ch / 8 * 8;
}

void emb__log_softmax_dim_fwd_avx2(const float *x, float *y, int64_t outer, int64_t c,
                                   int64_t inner, float *scratch) {
    if (c <= 0 || inner <= 0) return;
    const int64_t CH = dim_chunk(c), nch = (inner + CH - 1) / CH;
    float *mxb = scratch, *sb = scratch + CH;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t k = 0; k < nch; k++) {
            const int64_t b0 = k * CH, size = inner - b0 < CH ? inner - b0 : CH;
            const int64_t vend = size - size % 8;
            const int64_t base = o * c * inner + b0;
            for (int64_t d = 0; d < size; d++) {
                mxb[d] = -INFINITY;
                sb[d] = 0.0f;
            }
            for (int64_t dd = 0; dd < c; dd++) {
                const float *p = x + base + dd * inner;
                for (int64_t d = 0; d < vend; d += 8) {
                    __m256 v = _mm256_loadu_ps(p + d), m = _mm256_loadu_ps(mxb + d);
                    _mm256_storeu_ps(mxb + d,
                                     _mm256_blendv_ps(m, v, _mm256_cmp_ps(v, m, _CMP_GT_OQ)));
                }
                for (int64_t d = vend; d < size; d++) mxb[d] = p[d] > mxb[d] ? p[d] : mxb[d];
            }
            for (int64_t dd = 0; dd < c; dd++) {
                const float *p = x + base + dd * inner;
                for (int64_t d = 0; d < vend; d += 8) {
                    __m256 e = Sleef_expf8_u10(
                        _mm256_sub_ps(_mm256_loadu_ps(p + d), _mm256_loadu_ps(mxb + d)));
                    _mm256_storeu_ps(sb + d, _mm256_add_ps(_mm256_loadu_ps(sb + d), e));
                }
                for (int64_t d = vend; d < size; d++) sb[d] = sb[d] + expf(p[d] - mxb[d]);
            }
            for (int64_t d = 0; d < size; d += 8) {
                int64_t n = size - d < 8 ? size - d : 8;
                float t[8];
                _mm256_storeu_ps(t, Sleef_logf8_u10(load_part(sb + d, n)));
                memcpy(sb + d, t, (size_t)n * sizeof(float));
            }
            for (int64_t dd = 0; dd < c; dd++) {
                const float *p = x + base + dd * inner;
                float *q = y + base + dd * inner;
                for (int64_t d = 0; d < size; d++) q[d] = (p[d] - mxb[d]) - sb[d];
            }
        }
    }
}

void emb__log_softmax_dim_bwd_avx2(const float *gy, const float *y, float *gx, int64_t outer,
                                   int64_t c, int64_t inner, float *scratch) {
    if (c <= 0 || inner <= 0) return;
    const int64_t CH = dim_chunk(c), nch = (inner + CH - 1) / CH;
    float *sb = scratch;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t k = 0; k < nch; k++) {
            const int64_t b0 = k * CH, size = inner - b0 < CH ? inner - b0 : CH;
            const int64_t vend = size - size % 8;
            const int64_t base = o * c * inner + b0;
            for (int64_t d = 0; d < size; d++) sb[d] = 0.0f;
            for (int64_t dd = 0; dd < c; dd++) {
                const float *p = gy + base + dd * inner;
                for (int64_t d = 0; d < vend; d += 8)
                    _mm256_storeu_ps(
                        sb + d, _mm256_add_ps(_mm256_loadu_ps(sb + d), _mm256_loadu_ps(p + d)));
                for (int64_t d = vend; d < size; d++) sb[d] = sb[d] + p[d];
            }
            for (int64_t dd = 0; dd < c; dd++) {
                const int64_t off = base + dd * inner;
                for (int64_t d = 0; d < vend; d += 8) {
                    __m256 e = Sleef_expf8_u10(_mm256_loadu_ps(y + off + d));
                    _mm256_storeu_ps(gx + off + d, _mm256_fnmadd_ps(e, _mm256_loadu_ps(sb + d),
                                                                    _mm256_loadu_ps(gy + off + d)));
                }
                for (int64_t d = vend; d < size; d++)
                    gx[off + d] = fmaf(-expf(y[off + d]), sb[d], gy[off + d]);
            }
        }
    }
}
/* vec::map of exp (is_log false) or log over n floats. */
static inline __m256 exp_or_log(__m256 v, bool is_log) {
    return is_log ? Sleef_logf8_u10(v) : Sleef_expf8_u10(v);
}

static void vmap(const float *in, float *out, int64_t n, bool is_log) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, exp_or_log(_mm256_loadu_ps(in + i), is_log));
    if (i < n) {
        float t[8];
        _mm256_storeu_ps(t, exp_or_log(load_part(in + i, n - i), is_log));
        memcpy(out + i, t, (size_t)(n - i) * sizeof(float));
    }
}

void emb__vexp_avx2(const float *in, float *out, int64_t n) {
    vmap(in, out, n, false);
}

void emb__vlog_avx2(const float *in, float *out, int64_t n) {
    vmap(in, out, n, true);
}

void emb__sigmoid_avx2(const float *in, float *out, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int h = 0; h < 16; h += 8) {
            __m256 a = Sleef_expf8_u10(_mm256_sub_ps(zero, _mm256_loadu_ps(in + i + h)));
            _mm256_storeu_ps(out + i + h, _mm256_div_ps(one, _mm256_add_ps(a, one)));
        }
    for (; i < n; i++) out[i] = 1.0f / (1.0f + expf(-in[i]));
}
#else
/* Without SLEEF the AVX2 twins are not built; emb__log_softmax_pick never selects them. */
typedef int emb__softmax_avx2_unused;
#endif
