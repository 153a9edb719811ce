/* src/kernels/optim_ref.c: the scalar reference table of optimizer update kernels,
 * instantiated from optim_body.h for the baseline ISA. Its AVX2+FMA and AVX-512 twins are
 * optim_avx2.c and optim_avx512.c; dispatch.c chooses between them. */
#include "optim_body.h"

EMB__OPTIM_INSTANTIATE(ref, )
const emb__optim_kernel_table emb__optim_kernels_ref = EMB__OPTIM_TABLE(ref);
