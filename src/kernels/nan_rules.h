/* src/kernels/nan_rules.h: which NaN an operation returns, spelled out (docs/semantics.md
 * §1.1).
 *
 * When an operand of an x86 float operation is a NaN, the result is that NaN, quieted (its
 * quiet bit 0x00400000 set, sign and payload kept); with several NaN operands, the first in
 * the instruction's priority order: for a + b, a * b, a - b, a / b the first source operand,
 * for a fused multiply-add x * y + z the multiplicand x, then y, then z (Intel SDM vol. 1,
 * table 14-17; AMD Zen behaves the same). An operation without NaN operands that is invalid
 * (inf - inf, 0 * inf) returns the "default NaN" 0xffc00000. C leaves the operand order of
 * a + b to the compiler (it may swap them, and does so differently for the scalar and the
 * vector code of one loop), so emb does not rely on it where PyTorch's NaN must come out:
 * a kernel computes as usual and, where a result is NaN (rare, and cheap to detect), picks
 * the NaN these helpers name. They give the same bits on every CPU and in every kernel
 * variant. For the kernels and the modules' own float arithmetic. */
#ifndef EMB_NAN_RULES_H
#define EMB_NAN_RULES_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define EMB__QUIET_BIT   0x00400000u
#define EMB__DEFAULT_NAN 0xffc00000u /* x86's "real indefinite" */

static inline uint32_t emb__f2u(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float emb__u2f(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The NaN an operation returns when its operands, in priority order, are a and b: a quieted
 * if it is a NaN, else b quieted if it is one, else the default NaN (the operation itself
 * was invalid). */
static inline float emb__nan_of2(float a, float b) {
    const uint32_t u = a != a   ? emb__f2u(a) | EMB__QUIET_BIT
                       : b != b ? emb__f2u(b) | EMB__QUIET_BIT
                                : EMB__DEFAULT_NAN;
    return emb__u2f(u);
}

/* The same with three operands in priority order (a fused multiply-add: x, y, z). */
static inline float emb__nan_of3(float a, float b, float c) {
    return a != a ? emb__u2f(emb__f2u(a) | EMB__QUIET_BIT) : emb__nan_of2(b, c);
}

/* r, the computed result of an operation with operands a, b in priority order, or the NaN
 * x86 returns when r is a NaN. Written as a select, so that loops over it vectorise. */
static inline float emb__pick2(float r, float a, float b) {
    return r == r ? r : emb__nan_of2(a, b);
}

/* True when x[0..n) holds a NaN. */
static inline bool emb__any_nan(const float *x, int64_t n) {
    bool any = false;
    for (int64_t i = 0; i < n; i++) any |= x[i] != x[i];
    return any;
}

#endif /* EMB_NAN_RULES_H */
