/* src/kernels/softmax.h: log_softmax over the last dimension of row-major [rows, c] float32
 * data, forward and backward, in the exact arithmetic of PyTorch 1.13's CPU kernels
 * (aten/src/ATen/native/cpu/SoftMaxKernel.cpp, vec_log_softmax_lastdim and
 * vec_host_softmax_backward_lastdim), which work on at::vec::Vectorized<float> of 8 lanes:
 *
 *   max  = reduce_all(maximum, x)        lanes: acc = x[0..8), acc[l] = max(acc[l], x[8k+l]),
 *                                        the last partial vector updating its lanes only
 *   sum  = map_reduce_all(exp(x - max), +)   the same lane layout, exp applied per vector
 *   lse  = log(sum)
 *   y[j] = (x[j] - max) - lse
 * backward (gy = d loss / d y):
 *   s     = reduce_all(+, gy)
 *   gx[j] = gy[j] - exp(y[j]) * s
 *
 * A row shorter than 8 reduces its c lanes in order (lane 0 op lane 1 op ...). For c >= 8
 * the 8 lanes are combined as the build's capability does it:
 *   ref  (torch's DEFAULT capability): in order, ((l0 op l1) op l2) ... op l7; exp and log
 *        from libm (expf, logf); gx = gy - (e * s), two roundings.
 *   avx2 (torch's AVX2 capability, what torch 1.13 uses on an AVX2 CPU): a shuffle tree,
 *        (l0 op l4), (l1 op l5), ... then pairs at distance 2, then 1; exp and log from
 *        SLEEF's Sleef_expf8_u10 / Sleef_logf8_u10 (the functions torch calls); gx is one
 *        fused multiply-add, as GCC contracts torch's x - (y.exp() * sum).
 * maximum propagates NaN. Rows are independent, so any split of rows between threads gives
 * the same bits. Kernels never validate and never allocate. */
#ifndef EMB_SOFTMAX_H
#define EMB_SOFTMAX_H

#include <stdbool.h>
#include <stdint.h>

typedef void (*emb__log_softmax_fwd_fn)(const float *x, float *y, int64_t rows, int64_t c);
typedef void (*emb__log_softmax_bwd_fn)(const float *gy, const float *y, float *gx, int64_t rows,
                                        int64_t c);

void emb__log_softmax_fwd_ref(const float *x, float *y, int64_t rows, int64_t c);
void emb__log_softmax_bwd_ref(const float *gy, const float *y, float *gx, int64_t rows, int64_t c);

/* log_softmax over the middle dimension of [outer, c, inner] data (torch's _vec_logsoftmax
 * and _vec_log_softmax_backward, used whenever the dimension is not the last one, inner 1
 * included). The inner positions are processed in chunks of CHUNK = max(8, 131072 / (4c))
 * rounded down to a multiple of 8; per chunk, the first size - size % 8 positions are
 * vectorized (SLEEF exp on AVX2) and the rest scalar (libm expf, and on AVX2 a fused
 * multiply-add in the backward as GCC contracts it); per position:
 *   max = the running x > max ? x : max from -inf over c (NaN never wins);
 *   sum = 0 + exp(x[0] - max) + ... in c order; lse = log(sum) (vectorized map);
 *   y = (x - max) - lse;   backward: s = 0 + gy[0] + ...; gx = gy - exp(y) * s.
 * scratch: emb__log_softmax_dim_scratch(c) floats owned by the caller (one per thread). */
int64_t emb__log_softmax_dim_scratch(int64_t c);
void emb__log_softmax_dim_fwd_ref(const float *x, float *y, int64_t outer, int64_t c, int64_t inner,
                                  float *scratch);
void emb__log_softmax_dim_bwd_ref(const float *gy, const float *y, float *gx, int64_t outer,
                                  int64_t c, int64_t inner, float *scratch);
void emb__log_softmax_dim_fwd_avx2(const float *x, float *y, int64_t outer, int64_t c,
                                   int64_t inner, float *scratch);
void emb__log_softmax_dim_bwd_avx2(const float *gy, const float *y, float *gx, int64_t outer,
                                   int64_t c, int64_t inner, float *scratch);
typedef void (*emb__log_softmax_dim_fwd_fn)(const float *x, float *y, int64_t outer, int64_t c,
                                            int64_t inner, float *scratch);
typedef void (*emb__log_softmax_dim_bwd_fn)(const float *gy, const float *y, float *gx,
                                            int64_t outer, int64_t c, int64_t inner,
                                            float *scratch);

/* Elementwise exp / log of n floats as torch's vml does them (vec::map: every element
 * through Vectorized<float>, the last partial vector padded), and sigmoid as torch's
 * cpu_kernel_vec runs it on one contiguous range: vectors of 16 (1 / (1 + exp(0 - x))),
 * the last n % 16 elements scalar (1 / (1 + expf(-x))). in and out may be the same. */
void emb__vexp_ref(const float *in, float *out, int64_t n);
void emb__vlog_ref(const float *in, float *out, int64_t n);
void emb__sigmoid_ref(const float *in, float *out, int64_t n);
void emb__vexp_avx2(const float *in, float *out, int64_t n);
void emb__vlog_avx2(const float *in, float *out, int64_t n);
void emb__sigmoid_avx2(const float *in, float *out, int64_t n);
typedef void (*emb__vmap_fn)(const float *in, float *out, int64_t n);

/* The AVX2 + SLEEF twins (softmax_avx2.c); only built when the build found SLEEF on
 * x86-64 (EMB_HAVE_SLEEF), only called when the CPU has AVX2 and FMA. */
void emb__log_softmax_fwd_avx2(const float *x, float *y, int64_t rows, int64_t c);
void emb__log_softmax_bwd_avx2(const float *gy, const float *y, float *gx, int64_t rows, int64_t c);

/* One tier of the family (dispatch.h: emb__log_softmax_pick gives the AVX2 + SLEEF one when
 * the build has SLEEF and the tier is AVX2 or above, else the reference). */
typedef struct emb__log_softmax_kernels {
    emb__log_softmax_fwd_fn fwd;
    emb__log_softmax_bwd_fn bwd;
    emb__log_softmax_dim_fwd_fn dim_fwd;
    emb__log_softmax_dim_bwd_fn dim_bwd;
    emb__vmap_fn vexp, vlog, sigmoid;
    bool simd; /* true for the AVX2 + SLEEF pair */
} emb__log_softmax_kernels;

/* float(1-D contiguous sum) in the order of PyTorch 1.13's CPU sum of a contiguous float
 * tensor (at::sum of a 1-D tensor, or of each row in sum(dim=-1)); see softmax_ref.c. */
float emb__torch_sum_f32(const float *v, int64_t n);

/* out[j] = float sum over i < rows of base[i * row_stride + j], j < cols, in the order of
 * PyTorch 1.13's CPU sum over a non-innermost dimension (x.sum(0) of a contiguous
 * [rows, cols]); see softmax_ref.c. */
void emb__torch_colsum_f32(const float *base, int64_t rows, int64_t cols, int64_t row_stride,
                           float *out);

#endif /* EMB_SOFTMAX_H */
