/* emb/random.h: a random number generator that reproduces PyTorch's CPU generator bit for
 * bit: torch.manual_seed, the mt19937 engine, and the normal_, uniform_, randint and randn
 * algorithms of PyTorch 1.13 on an AVX2 build (see docs/differences.md).
 */
#ifndef EMB_RANDOM_H
#define EMB_RANDOM_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An mt19937 engine plus PyTorch's cached Box-Muller normal. Opaque. */
typedef struct emb_generator emb_generator;

/* PyTorch's libtorch default seed, used by the default generator until it is seeded. */
#define EMB_DEFAULT_SEED UINT64_C(67280421310721)

/* Creates a generator seeded with `seed` (as torch.Generator().manual_seed(seed)).
 * Errors: EMB_ERR_NULL, EMB_ERR_NOMEM. Free with emb_generator_free. */
EMB_API emb_status emb_generator_create(uint64_t seed, emb_generator **out);

/* Frees a generator; NULL is fine. Never pass the default generator. */
EMB_API void emb_generator_free(emb_generator *gen);

/* The process-wide default generator (PyTorch's torch.default_generator). It is not
 * locked: use it from one thread at a time, or give each thread its own generator. */
EMB_API emb_generator *emb_default_generator(void);

/* torch.manual_seed(seed) on the default generator. A negative Python seed s corresponds to
 * (uint64_t)s (two's complement), as in PyTorch. Only the low 32 bits seed the engine;
 * emb_generator_initial_seed keeps all 64. Clears the cached normal. */
EMB_API void emb_manual_seed(uint64_t seed);

/* Reseeds a generator (gen NULL: the default generator). */
EMB_API void emb_generator_seed(emb_generator *gen, uint64_t seed);

/* The seed last given (torch.Generator.initial_seed). gen NULL: the default generator. */
EMB_API uint64_t emb_generator_initial_seed(const emb_generator *gen);

/* The next 32-bit engine output (PyTorch's random()). gen NULL: the default generator. */
EMB_API uint32_t emb_generator_random(emb_generator *gen);

/* Two engine outputs, the first as the high word (PyTorch's random64()). */
EMB_API uint64_t emb_generator_random64(emb_generator *gen);

/* Size in bytes of a serialised generator state (engine, position, seed, cached normal;
 * tagged and checksummed, little-endian; version 2, version 1 states still load; layout in
 * src/core/generator.c and docs/file-formats.md). */
EMB_API size_t emb_generator_state_size(void);
/* Copies the state into buf (at least emb_generator_state_size() bytes). gen NULL: the
 * default generator. Errors: EMB_ERR_NULL (buf), EMB_ERR_INVALID (size too small; buf is
 * then untouched). */
EMB_API emb_status emb_generator_get_state(const emb_generator *gen, void *buf, size_t size);
/* Restores a state saved by emb_generator_get_state (gen NULL: the default generator),
 * including the seed and the cached normal. Errors: EMB_ERR_NULL (buf), EMB_ERR_FORMAT
 * (fewer than emb_generator_state_size() bytes, bad tag or version, checksum mismatch,
 * invalid fields); the generator is unchanged on error. */
EMB_API emb_status emb_generator_set_state(emb_generator *gen, const void *buf, size_t size);

/* Tensor.normal_(mean, std) in place on a float32 or float64 tensor, in storage order,
 * choosing PyTorch's scalar path (numel < 16) or vector path (numel >= 16) exactly as
 * PyTorch does for a contiguous tensor. gen NULL: the default generator.
 * Errors: EMB_ERR_NULL, EMB_ERR_DTYPE (not float32/float64), EMB_ERR_INVALID (std < 0 or
 * NaN, PyTorch: "normal expects std >= 0.0, but found std -1"; an infinite std or a
 * non-finite mean, which PyTorch accepts and turns into inf/NaN output, is rejected too,
 * and so, for a float32 tensor, is a mean or std that is finite as a double but overflows
 * float32, such as 1e300, which would fill the tensor with infinities).
 * Nothing is drawn on error. */
EMB_API emb_status emb_normal_(emb_tensor *t, double mean, double std, emb_generator *gen);

/* torch.randn into an existing float32/float64 tensor: normal_(0, 1). */
EMB_API emb_status emb_randn_(emb_tensor *t, emb_generator *gen);

/* Tensor.uniform_(from, to) in place on a float32 or float64 tensor (from == to allowed).
 * float32 rounds from and to to float first, as PyTorch does.
 * Errors: EMB_ERR_NULL, EMB_ERR_DTYPE, EMB_ERR_INVALID with PyTorch's messages: from > to
 * ("uniform_ expects to return a [from, to) range, but found from=.. > to=.."), a bound
 * not finite in the dtype ("from is out of bounds for float"), to - from overflowing the
 * dtype ("uniform_ expects to-from <= std::numeric_limits<Float>::max(), ..."). Nothing is
 * drawn on error. */
EMB_API emb_status emb_uniform_(emb_tensor *t, double from, double to, emb_generator *gen);

/* torch.randint(low, high, ...) into an existing int64 or int32 tensor (or float32/float64,
 * where PyTorch allows a dtype= argument): each element low + (draw % (high - low)), with a
 * 32-bit draw when the range is below 2^32 and a 64-bit draw otherwise (int32 outputs always
 * use a 32-bit draw). For float outputs, bounds beyond the dtype's exact integers (2^24,
 * 2^53) are first moved inward as PyTorch's update_from/update_to do.
 * Errors: EMB_ERR_NULL, EMB_ERR_DTYPE, EMB_ERR_INVALID with PyTorch's messages: low >= high
 * ("random_ expects 'from' to be less than 'to', but got from=.. >= to=.."), low or high - 1
 * outside int32 for an int32 tensor ("from is out of bounds for int", "to - 1 is out of
 * bounds for int"), float bounds that cross after adjustment ("random_ expects 'from'
 * casted to dtype to be less than 'to' casted to dtype, ..."). Nothing is drawn on error. */
EMB_API emb_status emb_randint_(emb_tensor *t, int64_t low, int64_t high, emb_generator *gen);

#ifdef __cplusplus
}
#endif

#endif /* EMB_RANDOM_H */
