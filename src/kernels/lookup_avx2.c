/* src/kernels/lookup_avx2.c: the AVX2+FMA twins of the gather, norm and renorm kernels
 * (the bodies of lookup_body.h; same bits as the _ref kernels). Only dispatch.c hands
 * them out, and only on CPUs that support AVX2 and FMA. */
#include "dispatch.h"

#if EMB__X86
#include "lookup_body.h"

EMB__LOOKUP_INSTANTIATE(avx2, EMB__TARGET_AVX2)
#endif
