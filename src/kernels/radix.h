/* src/kernels/radix.h: a stable LSD radix sort of unsigned 64-bit keys on a range of their
 * bits. The embedding module uses it to bucket a batch's positions by row (and to list the
 * distinct rows a renorm touches) in memory proportional to the batch rather than to the
 * table: the key packs (row << position_bits) | position, so sorting the row bits stably
 * keeps each row's positions in increasing order, as the counting sort does. */
#ifndef EMB_RADIX_H
#define EMB_RADIX_H

#include <stdint.h>

/* Bits of the digit of one pass: 2^EMB__RADIX_BITS counters live on the stack. */
#define EMB__RADIX_BITS 11

/* Sorts keys[0..n) stably by the bits [lo_bit, hi_bit) of each key (0 <= lo_bit <= hi_bit
 * <= 64), ascending; bits outside the range do not take part. tmp: scratch of n keys.
 * Returns where the sorted keys are: keys or tmp (each pass moves them from one to the
 * other; a pass whose digit is the same for every key is skipped). */
uint64_t *emb__radix_sort_u64(uint64_t *keys, uint64_t *tmp, int64_t n, int lo_bit, int hi_bit);

/* The number of bits needed to write x (0 for 0). */
static inline int emb__bit_width_u64(uint64_t x) {
    return x ? 64 - __builtin_clzll(x) : 0;
}

#endif /* EMB_RADIX_H */
