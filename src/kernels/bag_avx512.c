/* src/kernels/bag_avx512.c: the AVX-512 twins of the EmbeddingBag kernels (same bodies as
 * the _ref kernels, see bag_body.h; same bits). Only dispatch.c hands them out, and only on
 * CPUs that support AVX-512 F and VL. */
#include "dispatch.h"

#if EMB__X86
#include "bag_body.h"

EMB__BAG_INSTANTIATE(avx512, EMB__TARGET_AVX512)
#endif
