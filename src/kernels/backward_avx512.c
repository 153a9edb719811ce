/* src/kernels/backward_avx512.c: the AVX-512 twin of the dense backward row kernel (same
 * body as emb__embedding_backward_rows_ref, see backward_body.h; same bits). Only
 * dispatch.c hands it out, and only on CPUs that support AVX-512 F and VL. */
#include "dispatch.h"

#if EMB__X86
#include "backward_body.h"

EMB__BACKWARD_INSTANTIATE(avx512, EMB__TARGET_AVX512)
#endif
