/* log_softmax reference kernels (torch's DEFAULT-capability arithmetic) and torch's float
 * sum order. See softmax.h; the choice between these and the AVX2 twins is in dispatch.c. */
#include "softmax.h"

#include <math.h>

enum { LANES = 8 };

static inline float max_lane(float a, float b) {
    /* Vectorized<T> maximum of the DEFAULT capability: a > b ? a : b, a NaN a wins. */
    float c = a > b ? a : b;
    return isnan(a) ? a : c;
}

/* Lane layout of reduce_all / map_reduce_all: op over lanes; `map` applied per element
 * (0: identity, 1: expf(x - sub)). */
static float lane_reduce(const float *x, int64_t c, bool is_max, bool map_exp, float sub) {
    float acc[LANES] = {0};
    int64_t full = c < LANES ? c : LANES;
    for (int64_t l = 0; l < full; l++) acc[l] = map_exp ? expf(x[l] - sub) : x[l];
    if (c < LANES) {
        float r = acc[0];
        for (int64_t l = 1; l < c; l++) r = is_max ? max_lane(r, acc[l]) : r + acc[l];
        return r;
    }
    int64_t d = LANES;
    for (; d + LANES <= c; d += LANES)
        for (int l = 0; l < LANES; l++) {
            float v = map_exp ? expf(x[d + l] - sub) : x[d + l];
            acc[l] = is_max ? max_lane(acc[l], v) : acc[l] + v;
        }
    for (int64_t l = 0; l < c - d; l++) {
        float v = map_exp ? expf(x[d + l] - sub) : x[d + l];
        acc[l] = is_max ? max_lane(acc[l], v) : acc[l] + v;
    }
    float r = acc[0];
    for (int l = 1; l < LANES; l++) r = is_max ? max_lane(r, acc[l]) : r + acc[l];
    return r;
}

void emb__log_softmax_fwd_ref(const float *x, float *y, int64_t rows, int64_t c) {
    if (c <= 0) return;
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x + i * c;
        float *yr = y + i * c;
        float mx = lane_reduce(xr, c, true, false, 0.0f);
        float lse = logf(lane_reduce(xr, c, false, true, mx));
        for (int64_t j = 0; j < c; j++) yr[j] = (xr[j] - mx) - lse;
    }
}

void emb__log_softmax_bwd_ref(const float *gy, const float *y, float *gx, int64_t rows, int64_t c) {
    if (c <= 0) return;
    for (int64_t i = 0; i < rows; i++) {
        const float *gr = gy + i * c, *yr = y + i * c;
        float *out = gx + i * c;
        float s = lane_reduce(gr, c, false, false, 0.0f);
        for (int64_t j = 0; j < c; j++) out[j] = gr[j] - expf(yr[j]) * s;
    }
}

void emb__vexp_ref(const float *in, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = expf(in[i]);
}

void emb__vlog_ref(const float *in, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = logf(in[i]);
}

void emb__sigmoid_ref(const float *in, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = 1.0f / (1.0f + expf(-in[i]));
}

static int64_t dim_chunk(int64_t c) {
    int64_t ch = (int64_t)(128 * 1024) / c / (int64_t)sizeof(float);
    if (ch < LANES) ch = LANES;
    return ch / LANES * LANES;
}

void emb__log_softmax_dim_fwd_ref(const float *x, float *y, int64_t outer, int64_t c, int64_t inner,
                                  float *scratch) {
    (void)scratch;
    if (c <= 0 || inner <= 0) return;
    for (int64_t o = 0; o < outer; o++) {
        const float *xo = x + o * c * inner;
        float *yo = y + o * c * inner;
        for (int64_t p = 0; p < inner; p++) {
            float mx = -INFINITY, sum = 0.0f;
            for (int64_t d = 0; d < c; d++) {
                float v = xo[d * inner + p];
                mx = v > mx ? v : mx;
            }
            for (int64_t d = 0; d < c; d++) sum = sum + expf(xo[d * inner + p] - mx);
            float lse = logf(sum);
            for (int64_t d = 0; d < c; d++) yo[d * inner + p] = (xo[d * inner + p] - mx) - lse;
        }
    }
}

void emb__log_softmax_dim_bwd_ref(const float *gy, const float *y, float *gx, int64_t outer,
                                  int64_t c, int64_t inner, float *scratch) {
    (void)scratch;
    if (c <= 0 || inner <= 0) return;
    for (int64_t o = 0; o < outer; o++) {
        const int64_t base = o * c * inner;
        for (int64_t p = 0; p < inner; p++) {
            float s = 0.0f;
            for (int64_t d = 0; d < c; d++) s = s + gy[base + d * inner + p];
            for (int64_t d = 0; d < c; d++) {
                int64_t i = base + d * inner + p;
                gx[i] = gy[i] - expf(y[i]) * s;
            }
        }
    }
}

int64_t emb__log_softmax_dim_scratch(int64_t c) {
    return 2 * dim_chunk(c > 0 ? c : 1);
}

/* ---------------------------------------------------------------------------------------
 * PyTorch 1.13's CPU float sum of a contiguous run (SumKernel.cpp, cascade_sum): in float,
 *   cascade(v[0..n), stride): running sums in blocks of 2^p items (p = max(4,
 *     ceil(log2 n) / 4)), block sums carried up through four levels, the levels added at
 *     the end;
 *   ilp4(v[0..n)): four cascades over v[k], v[k+4], ... (n/4 items each), the n % 4
 *     leftover items added to the first, then the four added in order;
 *   n >= 8: eight lanes l, each an ilp4 over v[l], v[l+8], ... (n/8 items), then
 *     0 + the n % 8 leftovers in order + lanes 0..7 in order; n < 8: ilp4.
 * The result is then stored into a zeroed output (0 + s).
 * ------------------------------------------------------------------------------------- */

static int ceil_log2(int64_t n) {
    return n <= 1 ? 0 : 64 - __builtin_clzll((unsigned long long)(n - 1));
}

static float cascade(const float *v, int64_t stride, int64_t n) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int p = ceil_log2(n) / 4;
    if (p < 4) p = 4;
    const int64_t step = (int64_t)1 << p, mask = step - 1;
    int64_t i = 0;
    while (i + step <= n) {
        for (int64_t e = i + step; i < e; i++) acc[0] = acc[0] + v[i * stride];
        for (int l = 1; l < 4; l++) {
            acc[l] = acc[l] + acc[l - 1];
            acc[l - 1] = 0.0f;
            if (i & (mask << (l * p))) break;
        }
    }
    for (; i < n; i++) acc[0] = acc[0] + v[i * stride];
    return ((acc[0] + acc[1]) + acc[2]) + acc[3];
}

static float ilp4(const float *v, int64_t stride, int64_t n) {
    float part[4];
    int64_t q = n / 4;
    for (int k = 0; k < 4; k++) part[k] = cascade(v + k * stride, 4 * stride, q);
    for (int64_t i = 4 * q; i < n; i++) part[0] = part[0] + v[i * stride];
    return ((part[0] + part[1]) + part[2]) + part[3];
}

float emb__torch_sum_f32(const float *v, int64_t n) {
    if (n <= 0) return 0.0f;
    float s;
    if (n < LANES) {
        s = ilp4(v, 1, n);
    } else {
        int64_t nv = n / LANES;
        float acc = 0.0f;
        for (int64_t i = LANES * nv; i < n; i++) acc = acc + v[i];
        for (int l = 0; l < LANES; l++) acc = acc + ilp4(v + l, LANES, nv);
        s = acc;
    }
    return 0.0f + s;
}

/* Column sums (a reduction over a non-innermost dimension), as measured against torch:
 * columns in full groups of 4 (cols < 8) or 32 (cols >= 8) are each a cascade over the
 * rows; the remaining columns each an ilp4 over the rows; the result stored as 0 + s. */
void emb__torch_colsum_f32(const float *base, int64_t rows, int64_t cols, int64_t row_stride,
                           float *out) {
    const int64_t group = cols < 8 ? 4 : 32;
    const int64_t cascaded = cols / group * group;
    for (int64_t j = 0; j < cols; j++) {
        float s = rows <= 0      ? 0.0f
                  : j < cascaded ? cascade(base + j, row_stride, rows)
                                 : ilp4(base + j, row_stride, rows);
        out[j] = 0.0f + s;
    }
}
