/* src/kernels/backward_avx2.c: the AVX2+FMA twin of the dense backward row kernel (same
 * body as emb__embedding_backward_rows_ref, see backward_body.h; same bits). Only
 * dispatch.c hands it out, and only on CPUs that support AVX2 and FMA. */
#include "dispatch.h"

#if EMB__KERNELS_AVX2
#include "backward_body.h"

EMB__TARGET_AVX2 void emb__embedding_backward_rows_avx2(
    float *grad_weight, const float *grad_output, int64_t dim, const int64_t *offsets,
    const int64_t *order, int64_t row_begin, int64_t row_end, bool scale_by_freq, float *acc) {
    backward_rows_body(grad_weight, grad_output, dim, offsets, order, row_begin, row_end,
                       scale_by_freq, acc);
}
#endif
