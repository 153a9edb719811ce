/* Stable LSD radix sort; see radix.h. One pass per digit of at most EMB__RADIX_BITS bits: count the
 * digits, turn the counts into first slots, scatter in input order (which keeps it stable). */
#include "radix.h"

#include <string.h>

uint64_t *emb__radix_sort_u64(uint64_t *keys, uint64_t *tmp, int64_t n, int lo_bit, int hi_bit) {
    int64_t count[1 << EMB__RADIX_BITS];
    uint64_t *src = keys, *dst = tmp;
    /* as few passes as EMB__RADIX_BITS allows, with digits of equal width: 14 bits are two
     * passes of 7 (128 counters each), not 11 + 3 (the counters are a fixed cost per pass
     * that matters for short arrays) */
    const int bits = hi_bit - lo_bit;
    const int passes = (bits + EMB__RADIX_BITS - 1) / EMB__RADIX_BITS;
    const int step = passes ? (bits + passes - 1) / passes : 1;
    for (int shift = lo_bit; shift < hi_bit; shift += step) {
        const int width = hi_bit - shift < step ? hi_bit - shift : step;
        const uint64_t mask = (UINT64_C(1) << width) - 1;
        const int64_t buckets = (int64_t)1 << width;
        memset(count, 0, (size_t)buckets * sizeof count[0]);
        for (int64_t i = 0; i < n; i++) count[(src[i] >> shift) & mask]++;
        if (n == 0 || count[(src[0] >> shift) & mask] == n) continue; /* one digit: no-op */
        int64_t run = 0;
        for (int64_t d = 0; d < buckets; d++) {
            int64_t c = count[d];
            count[d] = run;
            run += c;
        }
        for (int64_t i = 0; i < n; i++) dst[count[(src[i] >> shift) & mask]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    return src;
}
