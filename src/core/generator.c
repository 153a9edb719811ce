/* PyTorch's CPU random number generator, reproduced bit for bit (PyTorch 1.13, AVX2 build).
 *
 * Engine: 32-bit MT19937 seeded with init_genrand(low 32 bits of the seed), plus the cached
 * double Box-Muller normal. Distributions (docs/semantics.md §2):
 *   - normal_, float32, numel < 16: double Box-Muller with glibc log/sin/cos and the cache;
 *   - normal_, float32, numel >= 16: float uniforms in blocks of 16 transformed with the
 *     Cephes-style float32 log and sincos of the AVX2 kernel (every FMA written out), and a
 *     tail block of 16 fresh uniforms when numel % 16 != 0;
 *   - normal_, float64: the scalar path below 16 elements, the double block algorithm above;
 *   - uniform_: one draw per element (float32: 32-bit draw, float64: 64-bit draw);
 *   - randint_: draw % range + low with a 32- or 64-bit draw.
 * The library is compiled with -ffp-contract=off: every fused multiply-add is an explicit
 * fmaf()/fma() and every other operation rounds on its own, as in PyTorch's machine code.
 */
#include "internal.h"
#include "rng_normal.h"
#include <emb/random.h>

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * The engine
 * ------------------------------------------------------------------------------------- */

#define MT_N        624
#define MT_M        397
#define MT_MATRIX_A 0x9908B0DFu
#define MT_UPPER    0x80000000u
#define MT_LOWER    0x7FFFFFFFu
/* pos value of a generator whose state has not been computed yet (the default generator
 * before first use): the engine is initialised from `seed` on the first draw. */
#define MT_UNSEEDED (MT_N + 1)

struct emb_generator {
    uint32_t mt[MT_N];
    uint32_t pos;       /* next word of mt to temper; MT_N: twist first */
    uint64_t seed;      /* the full 64-bit seed, for initial_seed() */
    int has_normal;     /* a cached double normal is waiting */
    double next_normal; /* the cached value (r * sin(theta)) */
};

static emb_generator emb__default_gen = {.pos = MT_UNSEEDED, .seed = EMB_DEFAULT_SEED};

static void mt_init(uint32_t *mt, uint32_t seed) {
    mt[0] = seed;
    for (uint32_t i = 1; i < MT_N; i++) mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i;
}

static void mt_twist(uint32_t *mt) {
    int k = 0;
    for (; k < MT_N - MT_M; k++) {
        uint32_t y = (mt[k] & MT_UPPER) | (mt[k + 1] & MT_LOWER);
        mt[k] = mt[k + MT_M] ^ (y >> 1) ^ ((0u - (y & 1u)) & MT_MATRIX_A);
    }
    for (; k < MT_N - 1; k++) {
        uint32_t y = (mt[k] & MT_UPPER) | (mt[k + 1] & MT_LOWER);
        mt[k] = mt[k + MT_M - MT_N] ^ (y >> 1) ^ ((0u - (y & 1u)) & MT_MATRIX_A);
    }
    uint32_t y = (mt[MT_N - 1] & MT_UPPER) | (mt[0] & MT_LOWER);
    mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ ((0u - (y & 1u)) & MT_MATRIX_A);
}

static inline uint32_t mt_temper(uint32_t y) {
    y ^= y >> 11;
    y ^= (y << 7) & 0x9D2C5680u;
    y ^= (y << 15) & 0xEFC60000u;
    y ^= y >> 18;
    return y;
}

/* Called when pos >= MT_N: initialises a lazily seeded generator, then twists. */
static void mt_refill(emb_generator *g) {
    if (g->pos != MT_N) mt_init(g->mt, (uint32_t)g->seed);
    mt_twist(g->mt);
    g->pos = 0;
}

static inline uint32_t gen_u32(emb_generator *g) {
    if (EMB__UNLIKELY(g->pos >= MT_N)) mt_refill(g);
    return mt_temper(g->mt[g->pos++]);
}

static inline uint64_t gen_u64(emb_generator *g) {
    uint64_t hi = gen_u32(g);
    return (hi << 32) | gen_u32(g);
}

/* n consecutive engine outputs. */
static void gen_fill_u32(emb_generator *g, uint32_t *out, int64_t n) {
    while (n > 0) {
        if (g->pos >= MT_N) mt_refill(g);
        int64_t k = MT_N - (int64_t)g->pos;
        if (k > n) k = n;
        const uint32_t *src = g->mt + g->pos;
        for (int64_t i = 0; i < k; i++) out[i] = mt_temper(src[i]);
        g->pos += (uint32_t)k;
        out += k;
        n -= k;
    }
}

/* Skips n engine outputs. */
static void gen_skip(emb_generator *g, int64_t n) {
    while (n > 0) {
        if (g->pos >= MT_N) mt_refill(g);
        int64_t k = MT_N - (int64_t)g->pos;
        if (k > n) k = n;
        g->pos += (uint32_t)k;
        n -= k;
    }
}

/* float32 uniform in [0, 1): the low 24 bits of one draw. */
static inline float unif_f32(uint32_t r) {
    return (float)(r & 0xFFFFFFu) * 0x1p-24f;
}
/* float64 uniform in [0, 1): the low 53 bits of a 64-bit draw. */
static inline double unif_f64(uint64_t r) {
    return (double)(r & ((UINT64_C(1) << 53) - 1)) * 0x1p-53;
}

static inline emb_generator *gen_or_default(emb_generator *gen) {
    return gen ? gen : &emb__default_gen;
}

static void gen_seed(emb_generator *g, uint64_t seed) {
    g->seed = seed;
    mt_init(g->mt, (uint32_t)seed);
    g->pos = MT_N;
    g->has_normal = 0;
    g->next_normal = 0.0;
}

emb_status emb_generator_create(uint64_t seed, emb_generator **out) {
    if (!out) return emb__null("out");
    emb_generator *g = malloc(sizeof *g);
    if (!g) return emb__error(EMB_ERR_NOMEM, "out of memory allocating a generator");
    gen_seed(g, seed);
    *out = g;
    return EMB_OK;
}

void emb_generator_free(emb_generator *gen) {
    if (gen && gen != &emb__default_gen) free(gen);
}

emb_generator *emb_default_generator(void) {
    return &emb__default_gen;
}

void emb_manual_seed(uint64_t seed) {
    gen_seed(&emb__default_gen, seed);
}

void emb_generator_seed(emb_generator *gen, uint64_t seed) {
    gen_seed(gen_or_default(gen), seed);
}

uint64_t emb_generator_initial_seed(const emb_generator *gen) {
    return gen ? gen->seed : emb__default_gen.seed;
}

uint32_t emb_generator_random(emb_generator *gen) {
    return gen_u32(gen_or_default(gen));
}

uint64_t emb_generator_random64(emb_generator *gen) {
    return gen_u64(gen_or_default(gen));
}

/* ---------------------------------------------------------------------------------------
 * Serialised state. Layout (version 2, little-endian through src/core/bytes.h,
 * EMB__STATE_SIZE bytes):
 *   [0, 4)      magic "EMBG"
 *   [4, 8)      uint32 format version (2)
 *   [8, 16)     uint64 seed (initial_seed)
 *   [16, 20)    uint32 position in the engine state, 0..624 (624: twist before next draw)
 *   [20, 24)    uint32 flags: bit 0 = a cached double normal is present; others zero
 *   [24, 32)    double cached normal (0.0 when absent)
 *   [32, 2528)  uint32 mt[624], the engine words
 *   [2528,2536) uint64 FNV-1a 64 checksum of bytes [0, 2528)
 * Version 1 (written before) is read too: the same fields in the byte order of the machine
 * that wrote it (little-endian on every machine emb ran on), then a uint32 FNV-1a 32
 * checksum at [2528, 2532) and four zero bytes.
 * ------------------------------------------------------------------------------------- */

#define EMB__STATE_SIZE    2536
#define EMB__STATE_VERSION 2u
#define OFF_SEED           8
#define OFF_POS            16
#define OFF_FLAGS          20
#define OFF_NORMAL         24
#define OFF_MT             32
#define OFF_HASH           (OFF_MT + 4 * MT_N)

/* The checksum of version 1 states (reading only). */
static uint32_t fnv1a32_v1(const unsigned char *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

size_t emb__generator_nbytes(void) {
    return sizeof(emb_generator);
}

size_t emb_generator_state_nbytes(void) {
    return EMB__STATE_SIZE;
}

emb_status emb_generator_get_state(const emb_generator *gen, void *buf, size_t size) {
    if (!buf) return emb__null("buf");
    if (size < EMB__STATE_SIZE)
        return emb__error(EMB_ERR_INVALID,
                          "generator state buffer has %zu bytes; it needs %d "
                          "(emb_generator_state_nbytes())",
                          size, EMB__STATE_SIZE);
    const emb_generator *g = gen ? gen : &emb__default_gen;
    uint32_t pos = g->pos, flags = g->has_normal ? 1u : 0u;
    const uint32_t *mt = g->mt;
    uint32_t fresh[MT_N];
    if (pos == MT_UNSEEDED) { /* not yet drawn from: the state right after seeding */
        mt_init(fresh, (uint32_t)g->seed);
        mt = fresh;
        pos = MT_N;
    }
    emb__bytes_out o = emb__bytes_out_at(buf, EMB__STATE_SIZE);
    emb__out_raw(&o, "EMBG", 4);
    emb__out_u32(&o, EMB__STATE_VERSION);
    emb__out_u64(&o, g->seed);
    emb__out_u32(&o, pos);
    emb__out_u32(&o, flags);
    emb__out_f64(&o, g->has_normal ? g->next_normal : 0.0);
    for (int i = 0; i < MT_N; i++) emb__out_u32(&o, mt[i]);
    emb__out_u64(&o, emb__fnv64(buf, OFF_HASH));
    return EMB_OK;
}

/* Checks a state's magic, version and checksum; *version is the version (1 or 2). */
static emb_status check_state_bytes(const unsigned char *b, uint32_t *version) {
    uint32_t v = emb__get_u32le(b + 4);
    if (memcmp(b, "EMBG", 4) != 0 || (v != 1u && v != EMB__STATE_VERSION))
        return emb__error(EMB_ERR_FORMAT, "not an emb generator state (bad magic or version)");
    bool ok = v == 1u ? emb__get_u32le(b + OFF_HASH) == fnv1a32_v1(b, OFF_HASH)
                      : emb__get_u64le(b + OFF_HASH) == emb__fnv64(b, OFF_HASH);
    if (!ok) return emb__error(EMB_ERR_FORMAT, "generator state is corrupt (checksum mismatch)");
    if (v == 1u && emb__get_u32le(b + OFF_HASH + 4) != 0)
        return emb__error(EMB_ERR_FORMAT, "generator state has nonzero padding bytes");
    *version = v;
    return EMB_OK;
}

emb_status emb_generator_set_state(emb_generator *gen, const void *buf, size_t size) {
    if (!buf) return emb__null("buf");
    if (size < EMB__STATE_SIZE)
        return emb__error(EMB_ERR_FORMAT, "generator state has %zu bytes; a saved state has %d",
                          size, EMB__STATE_SIZE);
    const unsigned char *b = buf;
    uint32_t version;
    emb_status st = check_state_bytes(b, &version);
    if (st) return st;
    emb__bytes_in in = emb__bytes_in_at(b + OFF_SEED, OFF_HASH - OFF_SEED);
    const uint64_t seed = emb__in_u64(&in);
    const uint32_t pos = emb__in_u32(&in), flags = emb__in_u32(&in);
    const double normal = emb__in_f64(&in);
    if (pos > MT_N)
        return emb__error(EMB_ERR_FORMAT,
                          "generator state has position %" PRIu32 " (valid: [0, %d])", pos, MT_N);
    if (flags > 1u)
        return emb__error(EMB_ERR_FORMAT, "generator state has unknown flags 0x%" PRIx32, flags);
    if (flags & 1u) {
        /* A cached normal is r * sin(theta) with r = sqrt(-2 log(1 - u2)) and 1 - u2 >=
         * 2^-53, so |normal| <= sqrt(-2 log(2^-53)) (about 8.57), computed the same way;
         * anything else (NaN, an infinity, a larger value) cannot come from the engine. */
        double bound = sqrt(-2.0 * log(0x1p-53));
        if (!(fabs(normal) <= bound))
            return emb__error(EMB_ERR_FORMAT,
                              "generator state has a cached normal %g that no generator "
                              "produces (valid: finite, |normal| <= %.17g)",
                              normal, bound);
    } else if (emb__get_u64le(b + OFF_NORMAL) != 0) {
        return emb__error(EMB_ERR_FORMAT,
                          "generator state has no cached normal but a nonzero normal "
                          "field (%g)",
                          normal);
    }
    /* MT19937's state is the top bit of mt[0] and the 19936 bits of mt[1..624); all zero,
     * the engine produces only zeros after its next twist (never the case when seeded). */
    uint32_t mt[MT_N], any = 0;
    for (int i = 0; i < MT_N; i++) {
        mt[i] = emb__in_u32(&in);
        any |= i == 0 ? (mt[i] & MT_UPPER) : mt[i];
    }
    if (any == 0)
        return emb__error(EMB_ERR_FORMAT,
                          "generator state has an all-zero engine state (MT19937 would "
                          "produce only zeros)");
    emb_generator *g = gen_or_default(gen);
    g->seed = seed;
    memcpy(g->mt, mt, sizeof g->mt);
    g->pos = pos;
    g->has_normal = (int)(flags & 1u);
    g->next_normal = g->has_normal ? normal : 0.0;
    return EMB_OK;
}

/* ---------------------------------------------------------------------------------------
 * normal_: the scalar path (double Box-Muller with the cache)
 * ------------------------------------------------------------------------------------- */

static const double EMB__PI = 3.14159265358979323846;

/* One standard normal from the scalar path (cache first). */
static inline double normal_scalar(emb_generator *g) {
    if (g->has_normal) {
        g->has_normal = 0;
        return g->next_normal;
    }
    double u1 = unif_f64(gen_u64(g));
    double u2 = unif_f64(gen_u64(g));
    double r = sqrt(-2.0 * log(1.0 - u2));
    double theta = 2.0 * EMB__PI * u1;
    g->next_normal = r * sin(theta);
    g->has_normal = 1;
    return r * cos(theta);
}

/* ---------------------------------------------------------------------------------------
 * normal_: the float32 block transform (Cephes-style log and sincos, FMA pattern of the
 * AVX2 kernel; rng_normal_ref.c and its AVX2 twin rng_normal_avx2.c). d[0..8) hold u1
 * candidates, d[8..16) u2; both are overwritten.
 * ------------------------------------------------------------------------------------- */

/* Writes n float32 uniforms to d. */
static void fill_unif_f32(emb_generator *g, float *d, int64_t n) {
    uint32_t r[512];
    while (n > 0) {
        int64_t k = n < 512 ? n : 512;
        gen_fill_u32(g, r, k);
        for (int64_t i = 0; i < k; i++) d[i] = unif_f32(r[i]);
        d += k;
        n -= k;
    }
}

/* Fills d[0..n), n >= 16, as PyTorch's vector path. The fill and the transform are fused
 * chunk by chunk (the blocks are independent); the uniforms a partial last block would
 * have used are skipped, since the tail block of 16 fresh uniforms overwrites them. */
static void normal_f32_vector(emb_generator *g, float *d, int64_t n, float mean, float std,
                              emb__normal16_fn f16) {
    const int64_t chunk = 1024; /* elements, a multiple of 16 */
    int64_t full = n - n % 16;
    for (int64_t o = 0; o < full; o += chunk) {
        int64_t k = full - o < chunk ? full - o : chunk;
        fill_unif_f32(g, d + o, k);
        f16(d + o, k / 16, mean, std);
    }
    if (n % 16) {
        gen_skip(g, n % 16);
        fill_unif_f32(g, d + n - 16, 16);
        f16(d + n - 16, 1, mean, std);
    }
}

/* float64, n >= 16: the same block structure in double with glibc log/cos/sin. */
static void normal16_f64(double *d, double mean, double std) {
    for (int j = 0; j < 8; j++) {
        double u1 = 1.0 - d[j];
        double u2 = d[j + 8];
        double radius = sqrt(-2.0 * log(u1));
        double theta = 2.0 * EMB__PI * u2;
        d[j] = fma(radius * cos(theta), std, mean);
        d[j + 8] = fma(radius * sin(theta), std, mean);
    }
}

static void normal_f64_vector(emb_generator *g, double *d, int64_t n, double mean, double std) {
    int64_t o = 0;
    for (; o + 16 <= n; o += 16) {
        for (int k = 0; k < 16; k++) d[o + k] = unif_f64(gen_u64(g));
        normal16_f64(d + o, mean, std);
    }
    if (n % 16) {
        gen_skip(g, 2 * (n % 16));
        double *t = d + n - 16;
        for (int k = 0; k < 16; k++) t[k] = unif_f64(gen_u64(g));
        normal16_f64(t, mean, std);
    }
}

emb__normal16_fn emb__normal16_pick(void) {
#if EMB__X86
    static const emb__normal16_fn variants[] = {emb__normal16_ref, emb__normal16_avx2};
    return variants[emb__variant(1u << EMB__TIER_REF | 1u << EMB__TIER_AVX2)];
#else
    return emb__normal16_ref;
#endif
}

/* ---------------------------------------------------------------------------------------
 * Public distributions
 * ------------------------------------------------------------------------------------- */

static emb_status check_float_tensor(const emb_tensor *t, const char *op, int64_t *numel) {
    emb_status st = emb_tensor_check(t, "tensor");
    if (st) return st;
    if (t->dtype != EMB_FLOAT32 && t->dtype != EMB_FLOAT64)
        return emb__error(EMB_ERR_DTYPE, "%s expects a float32 or float64 tensor, got %s", op,
                          emb_dtype_name(t->dtype));
    *numel = emb_tensor_numel(t);
    return EMB_OK;
}

emb_status emb_normal_(emb_tensor *t, double mean, double std, emb_generator *gen) {
    int64_t n = 0;
    emb_status st = check_float_tensor(t, "normal_", &n);
    if (st) return st;
    if (!(std >= 0.0))
        return emb__error(EMB_ERR_INVALID, "normal expects std >= 0.0, but found std %g", std);
    if (!isfinite(std) || !isfinite(mean))
        return emb__error(EMB_ERR_INVALID,
                          "normal_ expects a finite mean and std, but found mean %g, std %g", mean,
                          std);
    if (t->dtype == EMB_FLOAT32 && (!isfinite((float)mean) || !isfinite((float)std)))
        return emb__error(EMB_ERR_INVALID,
                          "normal_ on a float32 tensor expects a mean and std finite in "
                          "float32, but found mean %g, std %g",
                          mean, std);
    emb_generator *g = gen_or_default(gen);
    if (t->dtype == EMB_FLOAT32) {
        float *d = t->data;
        if (n >= 16) {
            normal_f32_vector(g, d, n, (float)mean, (float)std, emb__normal16_pick());
        } else {
            for (int64_t i = 0; i < n; i++) d[i] = (float)fma(normal_scalar(g), std, mean);
        }
    } else {
        double *d = t->data;
        if (n >= 16) {
            normal_f64_vector(g, d, n, mean, std);
        } else {
            for (int64_t i = 0; i < n; i++) d[i] = fma(normal_scalar(g), std, mean);
        }
    }
    return EMB_OK;
}

emb_status emb_randn_(emb_tensor *t, emb_generator *gen) {
    return emb_normal_(t, 0.0, 1.0, gen);
}

emb_status emb_uniform_(emb_tensor *t, double from, double to, emb_generator *gen) {
    int64_t n = 0;
    emb_status st = check_float_tensor(t, "uniform_", &n);
    if (st) return st;
    emb_generator *g = gen_or_default(gen);
    if (t->dtype == EMB_FLOAT32) {
        float lo = (float)from, hi = (float)to;
        if (!(fabsf(lo) <= FLT_MAX))
            return emb__error(EMB_ERR_INVALID, "from is out of bounds for float");
        if (!(fabsf(hi) <= FLT_MAX))
            return emb__error(EMB_ERR_INVALID, "to is out of bounds for float");
        if (!(lo <= hi))
            return emb__error(EMB_ERR_INVALID,
                              "uniform_ expects to return a [from, to) range, but found "
                              "from=%g > to=%g",
                              (double)lo, (double)hi);
        float range = hi - lo;
        if (!(range <= FLT_MAX))
            return emb__error(EMB_ERR_INVALID,
                              "uniform_ expects to-from <= std::numeric_limits<Float>::max(), "
                              "but found to=%g and from=%g which result in to-from to exceed "
                              "the limit",
                              (double)hi, (double)lo);
        float *d = t->data;
        for (int64_t i = 0; i < n; i++) d[i] = fmaf(unif_f32(gen_u32(g)), range, lo);
    } else {
        if (!(fabs(from) <= DBL_MAX))
            return emb__error(EMB_ERR_INVALID, "from is out of bounds for double");
        if (!(fabs(to) <= DBL_MAX))
            return emb__error(EMB_ERR_INVALID, "to is out of bounds for double");
        if (!(from <= to))
            return emb__error(EMB_ERR_INVALID,
                              "uniform_ expects to return a [from, to) range, but found "
                              "from=%g > to=%g",
                              from, to);
        double range = to - from;
        if (!(range <= DBL_MAX))
            return emb__error(EMB_ERR_INVALID,
                              "uniform_ expects to-from <= std::numeric_limits<Double>::max(), "
                              "but found to=%g and from=%g which result in to-from to exceed "
                              "the limit",
                              to, from);
        double *d = t->data;
        for (int64_t i = 0; i < n; i++) d[i] = fma(unif_f64(gen_u64(g)), range, from);
    }
    return EMB_OK;
}

/* (int64_t)x as x86-64's cvttss2si/cvttsd2si computes it: out of range or NaN gives
 * INT64_MIN (PyTorch relies on that in update_from/update_to for huge bounds). */
static int64_t x86_f2i64(double x) {
    if (!(x >= -0x1p63 && x < 0x1p63)) return INT64_MIN;
    return (int64_t)x;
}

/* PyTorch's update_from/update_to: move a bound inward to the nearest int64 that survives
 * the cast to a floating dtype with `digits` mantissa bits (round trip through float or
 * double, chosen by `is_f32`). */
static double round_to_dtype(int64_t v, int is_f32) {
    return is_f32 ? (double)(float)v : (double)v;
}

static int64_t update_from(int64_t from, int is_f32) {
    int digits = is_f32 ? 24 : 53;
    int64_t fp1 = x86_f2i64(round_to_dtype((int64_t)((uint64_t)from + 1u), is_f32));
    if (fp1 < from) {
        int64_t a = (int64_t)((uint64_t)from + 1u);
        uint64_t m = a < 0 ? 0u - (uint64_t)a : (uint64_t)a;
        int nb = 0;
        while (m >>= 1) ++nb;
        from = (int64_t)((uint64_t)fp1 + (UINT64_C(1) << (nb - digits + 1)));
    }
    return from;
}

static int64_t update_to(int64_t to, int is_f32) {
    int digits = is_f32 ? 24 : 53;
    int64_t tm1 = x86_f2i64(round_to_dtype((int64_t)((uint64_t)to - 1u), is_f32));
    if (tm1 >= to) {
        int64_t a = (int64_t)((uint64_t)to - 1u);
        uint64_t m = a < 0 ? 0u - (uint64_t)a : (uint64_t)a;
        int nb = 0;
        while (m >>= 1) ++nb;
        to = (int64_t)((uint64_t)tm1 - (UINT64_C(1) << (nb - digits + 1)));
    }
    return to;
}

emb_status emb_randint_(emb_tensor *t, int64_t low, int64_t high, emb_generator *gen) {
    emb_status st = emb_tensor_check(t, "tensor");
    if (st) return st;
    if (t->dtype != EMB_INT64 && t->dtype != EMB_INT32 && t->dtype != EMB_FLOAT32 &&
        t->dtype != EMB_FLOAT64)
        return emb__error(EMB_ERR_DTYPE,
                          "randint expects an int64, int32, float32 or float64 tensor, got %s",
                          emb_dtype_name(t->dtype));
    if (!(low < high))
        return emb__error(EMB_ERR_INVALID,
                          "random_ expects 'from' to be less than 'to', but got from=%" PRId64
                          " >= to=%" PRId64,
                          low, high);
    if (t->dtype == EMB_FLOAT32 || t->dtype == EMB_FLOAT64) {
        int is_f32 = t->dtype == EMB_FLOAT32;
        low = update_from(low, is_f32);
        high = update_to(high, is_f32);
        if (!(low < high))
            return emb__error(EMB_ERR_INVALID,
                              "random_ expects 'from' casted to dtype to be less than 'to' "
                              "casted to dtype, but got from=%" PRId64 " >= to=%" PRId64,
                              low, high);
    } else if (t->dtype == EMB_INT32) {
        if (low < INT32_MIN || low > INT32_MAX)
            return emb__error(EMB_ERR_INVALID, "from is out of bounds for int");
        if (high - 1 < INT32_MIN || high - 1 > INT32_MAX)
            return emb__error(EMB_ERR_INVALID, "to - 1 is out of bounds for int");
    }
    emb_generator *g = gen_or_default(gen);
    int64_t n = emb_tensor_numel(t);
    uint64_t range = (uint64_t)high - (uint64_t)low;
    /* PyTorch draws 64 bits for a range of 2^32 or more, except for int32 outputs. */
    int wide = range >= (UINT64_C(1) << 32) && t->dtype != EMB_INT32;
    uint64_t base = (uint64_t)low;
    switch (t->dtype) {
    case EMB_INT64: {
        int64_t *d = t->data;
        if (wide)
            for (int64_t i = 0; i < n; i++) d[i] = (int64_t)(gen_u64(g) % range + base);
        else
            for (int64_t i = 0; i < n; i++) d[i] = (int64_t)(gen_u32(g) % range + base);
        break;
    }
    case EMB_INT32: {
        int32_t *d = t->data;
        for (int64_t i = 0; i < n; i++)
            d[i] = (int32_t)(int64_t)((uint64_t)gen_u32(g) % range + base);
        break;
    }
    case EMB_FLOAT32: {
        float *d = t->data;
        for (int64_t i = 0; i < n; i++) {
            uint64_t r = wide ? gen_u64(g) : gen_u32(g);
            d[i] = (float)(int64_t)(r % range + base);
        }
        break;
    }
    default: {
        double *d = t->data;
        for (int64_t i = 0; i < n; i++) {
            uint64_t r = wide ? gen_u64(g) : gen_u32(g);
            d[i] = (double)(int64_t)(r % range + base);
        }
        break;
    }
    }
    return EMB_OK;
}
