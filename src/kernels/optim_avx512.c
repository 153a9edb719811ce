/* src/kernels/optim_avx512.c: the AVX-512 twin of the optimizer kernel table (the bodies of
 * optim_body.h compiled for AVX-512 F and VL; same bits as emb__optim_kernels_ref). Only
 * dispatch.c hands it out, and only on CPUs that support AVX-512 F and VL. */
#include "dispatch.h"

#if EMB__X86
#include "optim_body.h"

EMB__OPTIM_INSTANTIATE(avx512, EMB__TARGET_AVX512)
const emb__optim_kernel_table emb__optim_kernels_avx512 = EMB__OPTIM_TABLE(avx512);
#endif
