/* emb/quant.h: embedding tables stored in fewer bytes per row: float16, bfloat16, and
 * 8-bit and 4-bit rowwise quantization in FBGEMM's fused layouts (the layouts of PyTorch's
 * torch.ops.quantized.embedding_bag_byte_prepack / embedding_bag_4bit_prepack), with
 * lookups and bags that dequantize row by row as they go (docs/quantization.md).
 *
 * Row layouts (little-endian, rows back to back, no padding between rows):
 *   EMB_QTYPE_F32   dim float32                                       4*dim bytes
 *   EMB_QTYPE_F16   dim IEEE binary16                                 2*dim bytes
 *   EMB_QTYPE_BF16  dim bfloat16 (the high half of a float32)         2*dim bytes
 *   EMB_QTYPE_INT8  dim uint8 codes, float32 scale, float32 bias      dim + 8 bytes
 *                   value = scale * code + bias
 *   EMB_QTYPE_INT4  ceil(dim/2) bytes of codes (element 2k in the low nibble, 2k+1 in the
 *                   high nibble; the high nibble of an odd dim's last byte is 0), then
 *                   float16 scale, float16 bias                       ceil(dim/2) + 4 bytes
 *
 * Quantization (emb_quantize_rows) is bit-identical to PyTorch 1.13's prepack ops on CPU:
 *   int8: min, max of the row; range = max - min; scale = range / 255; bias = min;
 *         code = lrintf((x - min) * (255 / (range + 1e-8f)))
 *   int4: max of the row; min = float16(min of the row) (round to nearest even, back to
 *         float32); range = max - min; scale = float16(range == 0 ? 1 : range / 15), 1 when
 *         that is 0 or 1 / scale is infinite; code = clamp(lrintf((x - min) * (1 / scale)),
 *         0, 15); bias = float16(min)
 *   f16/bf16: round to nearest even.
 * Rows holding NaN or an infinity, values that overflow float16/bfloat16, and int8/int4
 * rows whose range (max - min) overflows float32 are refused (PyTorch writes inf or codes
 * that dequantize to NaN; docs/differences.md).
 *
 * Dequantized value of an int8/int4 element: (float)((double)scale * code + (double)bias),
 * which is what PyTorch's quantized lookup of a single row yields.
 */
#ifndef EMB_QUANT_H
#define EMB_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "bag.h"
#include "core.h"
#include "embedding.h"
#include "random.h"
#include "vocab.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum emb_qtype {
    EMB_QTYPE_F32 = 0,
    EMB_QTYPE_F16 = 1,
    EMB_QTYPE_BF16 = 2,
    EMB_QTYPE_INT8 = 3, /* 8-bit rowwise, float32 scale and bias */
    EMB_QTYPE_INT4 = 4, /* 4-bit rowwise, float16 scale and bias */
} emb_qtype;

/* "f32", "f16", "bf16", "int8", "int4"; "unknown" for other values. */
EMB_API const char *emb_qtype_name(emb_qtype qtype);

/* Parses a storage type name: the names above and the aliases float32, float16, half,
 * bfloat16, uint8, byte, 8bit, 4bit (case-sensitive). EMB_ERR_NULL, EMB_ERR_INVALID. */
EMB_API emb_status emb_qtype_parse(const char *name, emb_qtype *out);

/* Bytes of one row of `dim` elements. Errors: EMB_ERR_INVALID (unknown qtype), EMB_ERR_SHAPE
 * (dim < 0, or dim < 1 for int8/int4), EMB_ERR_OVERFLOW, EMB_ERR_NULL. */
EMB_API emb_status emb_qtype_row_nbytes(emb_qtype qtype, int64_t dim, int64_t *out);

/* Converts rows [rows, dim] of float32 `src` to `qtype` rows in dst (dst_bytes must be at
 * least rows * row_bytes). Errors (dst unchanged): EMB_ERR_NULL, EMB_ERR_INVALID (unknown
 * qtype; a NaN or infinite value, a value overflowing float16/bfloat16, or an int8/int4 row
 * whose range overflows float32: the message names the row and column; dst_bytes too
 * small; src and dst overlap), EMB_ERR_SHAPE, EMB_ERR_OVERFLOW. */
EMB_API emb_status emb_quantize_rows(emb_qtype qtype, const float *src, int64_t rows, int64_t dim,
                                     void *dst, size_t dst_bytes);

/* The inverse: rows of `qtype` in src (src_bytes at least rows * row_bytes) to float32
 * [rows, dim] in dst, by the dequantized value above. Errors: as emb_quantize_rows, except
 * that values are not checked. */
EMB_API emb_status emb_dequantize_rows(emb_qtype qtype, const void *src, size_t src_bytes,
                                       int64_t rows, int64_t dim, float *dst);

/* ---------------------------------------------------------------------------------------
 * Tables
 * ------------------------------------------------------------------------------------- */

/* A read-only embedding table of `num_rows` rows in one storage type. Opaque; immutable
 * after creation, so every call below may run concurrently on one table. */
typedef struct emb_qtable emb_qtable;

/* A new table owning the conversion of the float32 2-D tensor `weight` [V, D].
 * Errors (*out untouched): as emb_quantize_rows, EMB_ERR_DTYPE / EMB_ERR_SHAPE for the
 * weight, EMB_ERR_NOMEM. */
EMB_API emb_status emb_qtable_quantize(const emb_tensor *weight, emb_qtype qtype, emb_qtable **out);

/* A table over `nbytes` of caller memory already in the layout (a mapped file, say),
 * without a copy. nbytes must equal rows * row_bytes exactly. storage says who frees the
 * memory (emb_storage.release, called once by emb_qtable_free; NULL or release NULL:
 * borrowed). Values are not checked (a NaN scale gives NaN rows).
 * Errors (*out untouched, release not called): EMB_ERR_NULL (out; data with nbytes > 0),
 * EMB_ERR_INVALID (unknown qtype; nbytes does not match: "... 1000 bytes for 10 rows of
 * 104 bytes (int8, dim 96) need 1040"), EMB_ERR_SHAPE (rows < 0, dim), EMB_ERR_OVERFLOW,
 * EMB_ERR_NOMEM. The rows are written only by the training step (emb_qtable_sgd_step), which
 * storage->read_only forbids. */
EMB_API emb_status emb_qtable_wrap(emb_qtype qtype, int64_t rows, int64_t dim, const void *data,
                                   size_t nbytes, const emb_storage *storage, emb_qtable **out);

/* Frees the handle and, if owned or handed over, the rows. NULL is fine. */
EMB_API void emb_qtable_free(emb_qtable *q);

/* Accessors (0 / EMB_QTYPE_F32 / NULL for a NULL table). */
EMB_API emb_qtype emb_qtable_qtype(const emb_qtable *q);
EMB_API int64_t emb_qtable_num_rows(const emb_qtable *q);
EMB_API int64_t emb_qtable_dim(const emb_qtable *q);
EMB_API int64_t emb_qtable_row_nbytes(const emb_qtable *q);
EMB_API const void *emb_qtable_data(const emb_qtable *q);
EMB_API size_t emb_qtable_nbytes(const emb_qtable *q);

/* F.embedding on the dequantized table: out[..., :] = dequant(row indices[...]).
 * indices: int64 or int32, any shape; out: float32 of shape indices.shape + [dim],
 * overwritten. Errors (out unchanged): as emb_embedding_lookup (EMB_ERR_NULL,
 * EMB_ERR_DTYPE, EMB_ERR_SHAPE, EMB_ERR_INVALID out overlapping indices, EMB_ERR_INDEX
 * naming the first index out of range). */
EMB_API emb_status emb_qtable_forward(const emb_qtable *q, const emb_tensor *indices,
                                      emb_tensor *out);

/* F.embedding_bag on the table, with emb_bag_lookup's arguments and checks (opts NULL:
 * the defaults, mode mean; padding_idx honoured; max_norm must be INFINITY since the table
 * is read-only: EMB_ERR_READ_ONLY). Numerics (docs/quantization.md):
 *   f32, f16, bf16: exactly emb_bag_lookup on the float32 values of the rows (so equal
 *         to PyTorch's F.embedding_bag on the upcast table, bit for bit);
 *   int8, int4, sum: per bag from +0.0, positions ascending, with s = p * scale and
 *         b = p * bias (p the per-sample weight, 1 without):
 *         acc = (float)((double)s * code + (double)(acc + b)), PyTorch's quantized
 *         embedding_bag_{byte,4bit}_rowwise_offsets bit for bit;
 *   int8, int4, mean: that sum divided by (float)max(count, 1) (PyTorch's quantized ops
 *         ignore the mode and always sum; docs/differences.md);
 *   int8, int4, max: per column the max of the dequantized values, with emb_bag_forward's
 *         rules for ties, NaN and empty bags; max_indices as there.
 * The result does not depend on the thread count. */
EMB_API emb_status emb_qtable_bag_forward(const emb_qtable *q, const emb_tensor *input,
                                          const emb_tensor *offsets,
                                          const emb_tensor *per_sample_weights,
                                          const emb_bag_options *opts, emb_tensor *out,
                                          emb_tensor *max_indices);

/* Starts reading the rows `indices` of a table over memory emb does not own (a mapped file:
 * emb_qtable_map, or a wrap) from disk without waiting for them: madvise(MADV_WILLNEED) on
 * the pages that hold each row, so that many reads are in flight at once instead of one page
 * fault at a time. A lookup or bag on those rows afterwards finds them in memory or on their
 * way. Call it ahead, e.g. for the next batch while the current one is computed; a mapped
 * 100M x 64 int8 table, dropped from the page cache: 262,144 random lookups 15.1 s cold,
 * 3.0 s with this call first (docs/quantization.md). It costs a system call per row, so it
 * is for rows likely not in memory. Tables in emb's own memory (quantize, load): nothing to
 * do. indices: int64 or int32, any shape. Errors (nothing asked): EMB_ERR_NULL,
 * EMB_ERR_DTYPE, EMB_ERR_SHAPE, EMB_ERR_INDEX (as emb_qtable_forward). */
EMB_API emb_status emb_qtable_prefetch(const emb_qtable *q, const emb_tensor *indices);

/* Rows [first, first + n) dequantized into out [n, dim] (caller's float32 buffer of
 * n * dim floats). Errors: EMB_ERR_NULL, EMB_ERR_INDEX (range outside the table). */
EMB_API emb_status emb_qtable_dequantize(const emb_qtable *q, int64_t first, int64_t n, float *out);

/* ---------------------------------------------------------------------------------------
 * Quantization error against the float32 source
 * ------------------------------------------------------------------------------------- */

/* Accumulated error of quantized rows against their float32 source: the largest and the
 * mean absolute difference per element, and the mean cosine similarity per row (a row
 * where either side is all zeros counts as 1 when both are, else 0). Fill with
 * emb_qerror_init, add rows in any batches, read max_abs, mean_abs, mean_cosine. */
typedef struct emb_qerror {
    double max_abs;
    double mean_abs;
    double mean_cosine;
    int64_t rows;
    int64_t elements;
    double sum_abs; /* running sums behind the means */
    double sum_cosine;
} emb_qerror;

EMB_API void emb_qerror_init(emb_qerror *e);

/* Adds rows: src float32 [rows, dim] and their dequantized values deq [rows, dim].
 * Errors: EMB_ERR_NULL, EMB_ERR_SHAPE (negative sizes). */
EMB_API emb_status emb_qerror_add(emb_qerror *e, const float *src, const float *deq, int64_t rows,
                                  int64_t dim);

/* The error of the whole table against `weight` (float32 [V, D] of the table's shape).
 * Errors: EMB_ERR_NULL, EMB_ERR_DTYPE, EMB_ERR_SHAPE, EMB_ERR_NOMEM. */
EMB_API emb_status emb_qtable_error(const emb_qtable *q, const emb_tensor *weight, emb_qerror *out);

/* ---------------------------------------------------------------------------------------
 * Files: safetensors (docs/quantization.md, "Files")
 *
 * One tensor "weight": F32 / F16 / BF16 [rows, dim] for the float types, U8 [rows,
 * row_bytes] for int8/int4 (the bytes PyTorch's prepack ops return), with __metadata__
 * "emb.qtype" (the qtype name) and "emb.dim", the vocabulary when given ("emb.vocab",
 * "emb.counts", as emb_vectors_write), and when the table was converted from float32 by
 * the writer, its error: "emb.error.max_abs", "emb.error.mean_abs", "emb.error.mean_cosine".
 * Every file is written to a temporary file beside the destination and renamed into place
 * on success: a failed or abandoned write leaves no file and an existing one unchanged.
 * ------------------------------------------------------------------------------------- */

/* A streaming writer: converts float32 rows as they are appended, so that a table far
 * larger than memory can be written from a generator or another file in batches. */
typedef struct emb_qtable_writer emb_qtable_writer;

/* Starts writing `rows` rows of `dim` as `qtype` to `path` (vocab NULL, or a vocabulary of
 * `rows` words). The disk space is reserved at once where the file system allows.
 * Errors (nothing created): EMB_ERR_NULL, EMB_ERR_INVALID (qtype, vocabulary size or an
 * unstorable word), EMB_ERR_SHAPE, EMB_ERR_OVERFLOW (the file would not fit in the address
 * space), EMB_ERR_IO (the folder, the disk), EMB_ERR_NOMEM. */
EMB_API emb_status emb_qtable_writer_open(const char *path, emb_qtype qtype, int64_t rows,
                                          int64_t dim, const emb_vocab *vocab,
                                          emb_qtable_writer **out);

/* Appends the next n float32 rows [n, dim]. A refused row (emb_quantize_rows' rules), more
 * rows than announced or a write error fail the writer: every later call returns that
 * error and commit removes the temporary file. */
EMB_API emb_status emb_qtable_writer_append(emb_qtable_writer *w, const float *rows, int64_t n);

/* Finishes: all rows must have been appended (EMB_ERR_STATE otherwise); writes the error
 * metadata, syncs and renames the file into place; error (may be NULL) receives the
 * quantization error of the whole table. On failure the temporary file is removed and
 * `path` is untouched. Either way the writer is finished: later appends and commits fail
 * with EMB_ERR_STATE, and it is still freed with emb_qtable_writer_free. */
EMB_API emb_status emb_qtable_writer_commit(emb_qtable_writer *w, emb_qerror *error);

/* Frees the writer. Before a commit this abandons the write: the temporary file is removed
 * and `path` is untouched. NULL is fine. */
EMB_API void emb_qtable_writer_free(emb_qtable_writer *w);

/* Writes a table as it is stored (no error metadata: there is no float32 source).
 * vocab NULL or of the table's size. Errors: as emb_qtable_writer_open, plus EMB_ERR_IO. */
EMB_API emb_status emb_qtable_save(const char *path, const emb_qtable *q, const emb_vocab *vocab);

/* Reads a table file into memory (emb_qtable_load) or maps it read-only without reading it
 * (emb_qtable_map: pages are read when rows are first touched; tables larger than memory
 * work). vocab (may be NULL) receives the file's vocabulary or NULL. Files without
 * "emb.qtype" are accepted when unambiguous: F32/F16/BF16 tensors, and U8 tensors as int8
 * (a PyTorch byte-prepacked table saved with safetensors).
 * Errors (*out, *vocab untouched): EMB_ERR_IO, EMB_ERR_FORMAT (not safetensors; no
 * "weight" tensor and not exactly one tensor; a dtype that does not match "emb.qtype"; a
 * row size that does not match the qtype and dim, e.g. "row size 70 bytes, but int8 rows
 * of dim 64 take 72 (64 codes, 4-byte scale, 4-byte bias)"; bad "emb.dim" or vocabulary),
 * EMB_ERR_UNSUPPORTED (emb_qtable_map on something that is not a regular file),
 * EMB_ERR_NOMEM. */
EMB_API emb_status emb_qtable_load(const char *path, emb_qtable **out, emb_vocab **vocab);
EMB_API emb_status emb_qtable_map(const char *path, emb_qtable **out, emb_vocab **vocab);

/* ---------------------------------------------------------------------------------------
 * Training f16 and bf16 tables (docs/quantization.md, "Training")
 *
 * A table stored in float16 or bfloat16 halves the memory of its float32 twin but cannot
 * hold an update smaller than half its spacing: with round-to-nearest, small steps are
 * lost. The SGD step here works on a float32 copy of the batch's rows: each touched row
 * is widened to float32, PyTorch's sparse SGD update is applied to the copy (for each
 * gradient entry in entry order, p = fmaf(v, (float)(-lr), p), duplicates one after the
 * other), and the result is rounded back to the storage type once per row element, either
 * to nearest even (EMB_QROUND_NEAREST) or stochastically (EMB_QROUND_STOCHASTIC: to one of
 * the two neighbouring stored values, the one farther away with probability equal to the
 * fraction of the spacing, so that the stored value is the float32 result in expectation).
 * Hence, on an f32 table the step equals torch.optim.SGD's sparse step bit for bit, and
 * with round-to-nearest on f16/bf16 it equals upcasting the table to float32, that step,
 * and casting back (Tensor.half() / .bfloat16()). int8/int4 tables are not trained (their
 * rows share a scale and bias: EMB_ERR_UNSUPPORTED).
 * ------------------------------------------------------------------------------------- */

typedef enum emb_qround {
    EMB_QROUND_NEAREST = 0,    /* round to nearest, ties to even */
    EMB_QROUND_STOCHASTIC = 1, /* to a neighbour with probability by distance */
} emb_qround;

/* Whether the table's rows may not be written: tables over read-only storage (wrap with
 * storage->read_only, emb_qtable_map). Tables from emb_qtable_quantize and
 * emb_qtable_load, and wraps without read-only storage, are writable. NULL: true. */
EMB_API bool emb_qtable_is_read_only(const emb_qtable *q);

/* The sparse gradient of emb_qtable_bag_forward (modes sum and mean) with respect to the table's
 * float32 values: exactly emb_bag_backward_sparse's entries for a float32 table of the
 * same shape and options (the gradient does not depend on the stored values). opts NULL:
 * the defaults (mode mean). An empty grad becomes the new gradient; otherwise grad += new.
 * Errors (grad unchanged): as emb_bag_backward_sparse (EMB_ERR_NULL, EMB_ERR_UNSUPPORTED
 * for mode max and scale_grad_by_freq, the arguments of emb_qtable_bag_forward, EMB_ERR_SHAPE for
 * grad_output and for grad when it is not of the table's shape), EMB_ERR_READ_ONLY
 * (max_norm set, as emb_qtable_bag_forward). */
EMB_API emb_status emb_qtable_bag_backward_sparse(const emb_qtable *q, const emb_tensor *input,
                                                  const emb_tensor *offsets,
                                                  const emb_tensor *per_sample_weights,
                                                  const emb_bag_options *opts,
                                                  const emb_tensor *grad_output,
                                                  emb_sparse_grad *grad);

/* One SGD step (lr, no momentum or weight decay) on the rows of `grad` (any order,
 * duplicates allowed), as described above. gen: the generator for stochastic rounding
 * (NULL: the default one); one 32-bit draw per element of each touched row, rows in
 * ascending order; not used by EMB_QROUND_NEAREST. Only the rows in grad change.
 * Errors (table and generator unchanged): EMB_ERR_NULL, EMB_ERR_INVALID (lr negative or
 * not finite: "Invalid learning rate: -1"; an unknown rounding; grad malformed),
 * EMB_ERR_SHAPE (grad not of the table's shape), EMB_ERR_INDEX (a row outside the
 * table), EMB_ERR_UNSUPPORTED (int8/int4 tables), EMB_ERR_READ_ONLY
 * (emb_qtable_is_read_only), EMB_ERR_OVERFLOW (a row's result is NaN or infinite, or does
 * not fit the storage type: "row 7, column 3: 70000 is out of float16's range"; with
 * stochastic rounding any magnitude above the largest finite value is refused, with
 * round-to-nearest only what rounds to infinity), EMB_ERR_NOMEM. */
EMB_API emb_status emb_qtable_sgd_step(emb_qtable *q, const emb_sparse_grad *grad, float lr,
                                       emb_qround rounding, emb_generator *gen);

/* The fused step for a bag: emb_qtable_bag_backward_sparse(q, ..., fresh grad) followed by
 * emb_qtable_sgd_step(q, grad, lr, rounding, gen), with the same result bit for bit and
 * the same refusals in the same order (the backward's first, then the step's). It forms
 * the gradient's entries as the unfused path does (nnz x dim floats of scratch); what it
 * saves is the gradient's management, and that no refusal can differ. */
EMB_API emb_status emb_qtable_sgd_step_bag(emb_qtable *q, const emb_tensor *input,
                                           const emb_tensor *offsets,
                                           const emb_tensor *per_sample_weights,
                                           const emb_bag_options *opts,
                                           const emb_tensor *grad_output, float lr,
                                           emb_qround rounding, emb_generator *gen);

#ifdef __cplusplus
}
#endif

#endif /* EMB_QUANT_H */
