/* emb/util.h: utilities beside the layers.
 *
 * Not embedding layers themselves, but needed next to them by programs built on emb (the
 * emb command among them): float16/bfloat16 conversion for the half-precision tensors that
 * emb_npy_read and emb_safetensors_read return as stored, and the rank correlation used to
 * score word vectors against human similarity judgements. Everything else that emb uses
 * internally stays out of the public API.
 */
#ifndef EMB_UTIL_H
#define EMB_UTIL_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* float32 <-> float16 / bfloat16, round to nearest even (NaN stays NaN), as torch converts
 * (Tensor.half(), Tensor.bfloat16(), Tensor.float()). Thread-safe. */
EMB_API uint16_t emb_f32_to_f16(float f);
EMB_API float emb_f16_to_f32(uint16_t h);
EMB_API uint16_t emb_f32_to_bf16(float f);
EMB_API float emb_bf16_to_f32(uint16_t h);

/* Spearman's rank correlation of x[0..n) and y[0..n): the Pearson correlation of their
 * ranks, ties given their average rank (as scipy.stats.spearmanr). *rho is NaN when a
 * variable is constant. Errors: EMB_ERR_NULL, EMB_ERR_INVALID (n < 2, or a value is NaN),
 * EMB_ERR_NOMEM. */
EMB_API emb_status emb_spearman(const double *x, const double *y, int64_t n, double *rho);

#ifdef __cplusplus
}
#endif

#endif /* EMB_UTIL_H */
