/* src/kernels/lookup_avx512.c: the AVX-512 twins of the gather, norm and renorm kernels
 * (the bodies of lookup_body.h; same bits as the _ref kernels). Only dispatch.c hands
 * them out, and only on CPUs that support AVX-512 F and VL. */
#include "dispatch.h"

#if EMB__X86
#include "lookup_body.h"

EMB__LOOKUP_INSTANTIATE(avx512, EMB__TARGET_AVX512)
#endif
