/* src/kernels/optim_ref.c: the scalar reference table of optimizer update kernels,
 * instantiated from optim_body.h for the baseline ISA. Its AVX2+FMA twin is optim_avx2.c;
 * dispatch.c chooses between them. */
#include "optim_body.h"

EMB__OPTIM_INSTANTIATE(ref, )
const emb__optim_kernel_table emb__optim_kernels_ref = EMB__OPTIM_TABLE(ref);
