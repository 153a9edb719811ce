/* src/kernels/bag_avx2.c: the AVX2+FMA twins of the EmbeddingBag kernels (same bodies as
 * the _ref kernels, see bag_body.h; same bits). Only dispatch.c hands them out, and only on
 * CPUs that support AVX2 and FMA. */
#include "dispatch.h"

#if EMB__X86
#include "bag_body.h"

EMB__BAG_INSTANTIATE(avx2, EMB__TARGET_AVX2)
#endif
