/* src/kernels/optim_avx2.c: the AVX2+FMA twin of the optimizer kernel table (the bodies of
 * optim_body.h compiled for AVX2+FMA; same bits as emb__optim_kernels_ref). Only dispatch.c
 * hands it out, and only on CPUs that support AVX2 and FMA. */
#include "dispatch.h"

#if EMB__X86
#include "optim_body.h"

EMB__OPTIM_INSTANTIATE(avx2, EMB__TARGET_AVX2)
const emb__optim_kernel_table emb__optim_kernels_avx2 = EMB__OPTIM_TABLE(avx2);
#endif
