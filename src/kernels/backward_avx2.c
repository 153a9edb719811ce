/* src/kernels/backward_avx2.c: the AVX2+FMA twin of the dense backward row kernel (same
 * body as emb__embedding_backward_rows_ref, see backward_body.h; same bits). Only
 * dispatch.c hands it out, and only on CPUs that support AVX2 and FMA. */
#include "dispatch.h"

#if EMB__X86
#include "backward_body.h"

EMB__BACKWARD_INSTANTIATE(avx2, EMB__TARGET_AVX2)
#endif
