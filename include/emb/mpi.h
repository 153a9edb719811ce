/* emb/mpi.h: embedding tables sharded over the ranks of an MPI communicator (libemb_mpi).
 *
 * A separate library (link libemb_mpi and libemb; pkg-config emb-mpi) over the MPI C API,
 * so that libemb itself stays free of MPI. docs/DISTRIBUTED.md describes the design.
 *
 * The exact rule. Every call below is collective over the table's communicator: each rank
 * passes its own batch. A run on R ranks whose batches are B0, ..., B(R-1) gives, bit for
 * bit, what one process gives for the batch B0‖…‖B(R-1) (the batches joined in rank
 * order): each rank receives its part of the lookup or pooled output, its part of the
 * per_sample_weights gradient, and after a step each rank's shard holds exactly the rows
 * the single process's table holds. A communicator of one rank is the single-process
 * library.
 *
 * Refusals are collective too: when any rank's arguments are refused (an id out of range,
 * a wrong shape, ...), every rank returns an error and nothing changes anywhere. The
 * refusing rank's emb_errmsg() says why; the others' says which rank refused and why.
 *
 * Threads: the calls make MPI calls from the calling thread only (MPI_THREAD_SINGLE
 * suffices when one thread uses emb_mpi; MPI_THREAD_SERIALIZED when several take turns).
 * A table is used by one thread at a time.
 */
#ifndef EMB_MPI_H
#define EMB_MPI_H

#include <mpi.h>

#include "bag.h"
#include "core.h"
#include "embedding.h"
#include "optim.h"
#include "quant.h"
#include "word2vec.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define EMB_MPI_API __attribute__((visibility("default")))
#else
#define EMB_MPI_API
#endif

/* How the rows of a table are placed on the ranks. */
typedef enum emb_mpi_sharding {
    /* Contiguous row ranges: rank r holds rows [r*V/R, (r+1)*V/R) (integer division; the
     * ranges differ by at most one row). Every rank holds at least one row: V >= R. */
    EMB_MPI_ROW_WISE = 0,
    /* The whole table on one rank (`owner`); the others hold no row. For models with many
     * tables: give each table its own owner. */
    EMB_MPI_TABLE_WISE = 1,
} emb_mpi_sharding;

typedef struct emb_mpi_shard_options {
    emb_mpi_sharding sharding; /* default EMB_MPI_ROW_WISE */
    int owner;                 /* EMB_MPI_TABLE_WISE: the rank holding the table (default 0) */
    /* The storage type of the rows (default EMB_QTYPE_F32). Others (f16, bf16, int8, int4)
     * hold each shard as an emb_qtable: the rows a single process gets from
     * emb_qtable_quantize of the float32 table; lookups and bags are emb_qtable_forward's
     * and emb_qtable_bag_forward's; steps: SGD on f16/bf16 with round-to-nearest
     * (emb_qtable_sgd_step_bag's), nothing else. */
    emb_qtype qtype;
    /* The longest a rank waits in one collective step of the table's calls, in ms (default
     * EMB_MPI_TIMEOUT_MS_DEFAULT, 5 minutes; 0: no limit; the same on every rank). A rank
     * that stops answering (stopped, hung, or never making the call) would keep the others
     * waiting for ever: past the deadline a waiting rank prints to stderr which call it
     * waited for ("emb_mpi: rank 0 of 4: MPI_Alltoallv did not complete within 2000 ms
     * ...") and ends the whole job with MPI_Abort (error code 124). The one place the
     * library ends the process: nothing a rank can return would let the others go on. */
    int64_t timeout_ms;
    /* The inexact bag forward (default false: exact). When true, emb_mpi_table_bag_forward
     * of a float32 table in mode sum or mean sends each position (row id, bag, weight) to
     * the row's owner, the owners pool partial sums per bag for every rank's bags, and
     * MPI_Reduce_scatter adds them up (TorchRec's row-wise pooling): rows never travel, but
     * the sum of a bag is taken in another order than the single process's, so the result
     * is within rounding of it, not equal (docs/semantics.md gives the measured
     * tolerance). Mode max, other storage types and the other calls stay exact. */
    bool partial_sums;
} emb_mpi_shard_options;

#define EMB_MPI_TIMEOUT_MS_DEFAULT 300000

/* A table sharded over a communicator. Opaque. */
typedef struct emb_mpi_table emb_mpi_table;

/* Bytes and messages this rank sent through the table's calls (counted by the library:
 * the payloads of its point-to-point parts, MPI_Alltoallv, MPI_Allgatherv and the
 * collective agreements; MPI's own headers not included). */
typedef struct emb_mpi_stats {
    uint64_t bytes_sent; /* bytes this rank handed to MPI for other ranks */
    uint64_t id_bytes;   /* of which row ids (int64) */
    uint64_t row_bytes;  /* of which rows of the table (forward) */
    uint64_t grad_bytes; /* of which gradient rows (backward, steps) */
    uint64_t calls;      /* collective table calls made */
} emb_mpi_stats;

EMB_MPI_API emb_mpi_shard_options emb_mpi_shard_options_default(void);

/* Creates a [num_embeddings, embedding_dim] float32 table sharded over comm (the table
 * keeps its own duplicate of comm, MPI_Comm_dup). Collective. The rows a rank holds are
 * initialised to exactly the values emb_bag_create(num_embeddings, embedding_dim, bag_opts)
 * gives those rows in a single process that is in the same state (same seed, same
 * generator history): every rank draws the table's whole N(0, 1) sequence from
 * bag_opts->generator (NULL: the default generator), chunk by chunk, and keeps its rows, so
 * its generator ends where the single process's does; the padding row is zeroed.
 * bag_opts (NULL: emb_bag_options_default()) gives the mode, padding_idx,
 * include_last_offset, max_norm, norm_type and scale_grad_by_freq used by the calls. With a
 * finite max_norm (float32 tables only, EMB_ERR_UNSUPPORTED otherwise) the lookups and bag
 * forwards renormalise, as the single process's do over the joined batch: each row the
 * joined batch names is renormalised once, by its owner, before it is sent.
 * scale_grad_by_freq, like mode max, leaves the forward unchanged and makes the sparse
 * backward and the steps refuse as libemb's do. shard NULL: row-wise.
 * Errors, on every rank (nothing drawn, *out untouched): EMB_ERR_NULL (out),
 * EMB_ERR_STATE (MPI not initialised, or finalised), EMB_ERR_INVALID (sizes < 1, a table
 * of fewer rows than ranks row-wise, an owner outside [0, R), the option errors of
 * emb_bag_create, and arguments that differ between ranks: "rank 1 passed
 * num_embeddings 12, rank 0 passed 10"), EMB_ERR_UNSUPPORTED, EMB_ERR_NOMEM. */
EMB_MPI_API emb_status emb_mpi_table_create(MPI_Comm comm, int64_t num_embeddings,
                                            int64_t embedding_dim, const emb_bag_options *bag_opts,
                                            const emb_mpi_shard_options *shard,
                                            emb_mpi_table **out);

/* A table over rows the caller keeps (borrowed): each rank passes its own rows as a float32
 * view [end - begin, embedding_dim] of the rows [begin, end) it holds under `shard` (row-wise:
 * [r*V/R, (r+1)*V/R); table-wise: all on the owner, [0, 0) elsewhere). Nothing is drawn;
 * steps and max_norm write the caller's memory, which must outlive the table; free leaves
 * it alone. Collective. Errors on every rank: those of emb_mpi_table_create,
 * EMB_ERR_NULL / EMB_ERR_SHAPE (rows, or a row count that is not this rank's: the message
 * names the expected range), EMB_ERR_DTYPE (shard->qtype other than f32: rows of the other
 * storage types are wrapped by emb_mpi_table_wrap_qtable). */
EMB_MPI_API emb_status emb_mpi_table_wrap(MPI_Comm comm, int64_t num_embeddings, emb_tensor *rows,
                                          const emb_bag_options *bag_opts,
                                          const emb_mpi_shard_options *shard, emb_mpi_table **out);

/* A table over a safetensors file every rank maps read-only: the 2-D F32 tensor `tensor`
 * (NULL: the file's only tensor) is the [V, D] table, and each rank reads only the pages of
 * its own rows, when they are looked up. Lookups, bags and gradients work; steps are
 * EMB_ERR_READ_ONLY and max_norm is refused (EMB_ERR_READ_ONLY) as for libemb's mapped
 * tables; emb_mpi_table_shard's view is of the read-only mapping (never write through it);
 * free unmaps. Collective. Errors on every rank: those of emb_safetensors_open,
 * EMB_ERR_INVALID (no such tensor), EMB_ERR_SHAPE (not a 2-D F32 tensor), those of
 * emb_mpi_table_create. */
EMB_MPI_API emb_status emb_mpi_table_map_safetensors(MPI_Comm comm, const char *path,
                                                     const char *tensor,
                                                     const emb_bag_options *bag_opts,
                                                     const emb_mpi_shard_options *shard,
                                                     emb_mpi_table **out);

/* A table over a NumPy .npy file: a C-order little-endian float32 [V, D] array (descr '<f4',
 * fortran_order False, .npy version 1, 2 or 3). Every rank reads the header itself and maps,
 * read-only, only the pages of its own rows (mmap of their byte range), which are read when
 * they are looked up. As emb_mpi_table_map_safetensors's tables otherwise: lookups, bags and
 * gradients work; steps are EMB_ERR_READ_ONLY and max_norm is refused; free unmaps.
 * Collective. Errors on every rank (each rank reads the file: on a cluster it must be
 * readable on every node): EMB_ERR_NULL (path), EMB_ERR_IO (cannot open, read or map),
 * EMB_ERR_FORMAT (not an .npy file, a header it cannot read, a file size the shape does not
 * give), EMB_ERR_DTYPE (another dtype than '<f4', big-endian float32 included),
 * EMB_ERR_UNSUPPORTED (Fortran order), EMB_ERR_SHAPE (not 2-D, or an empty table), those of
 * emb_mpi_table_create. */
EMB_MPI_API emb_status emb_mpi_table_map_npy(MPI_Comm comm, const char *path,
                                             const emb_bag_options *bag_opts,
                                             const emb_mpi_shard_options *shard,
                                             emb_mpi_table **out);

/* A table over rows of any storage type the caller keeps (borrowed): each rank passes its
 * own rows [begin, end) under `shard` (as emb_mpi_table_wrap) as an emb_qtable: one made by
 * emb_qtable_wrap over the caller's memory, emb_qtable_quantize, _load or _map (a rank
 * holding no row passes a table of 0 rows and the same dim). Its storage type must be
 * shard->qtype, and its rows are the bytes a single process's emb_qtable of the whole table
 * holds for them: lookups and bags are then emb_qtable_forward's and emb_qtable_bag_forward's
 * on the joined batch, bit for bit, as for tables emb_mpi_table_create makes. The table uses
 * the rows where they are (no copy): SGD steps on f16/bf16 rows write them in place, and a
 * read-only `rows` (emb_qtable_map, or a wrap with storage->read_only) makes the steps
 * EMB_ERR_READ_ONLY. `rows` and its memory must outlive the table; free leaves them alone.
 * A float32 emb_qtable gives the table emb_mpi_table_wrap would (its rows 4-byte aligned).
 * Collective. Errors on every rank: those of emb_mpi_table_create, EMB_ERR_NULL (rows),
 * EMB_ERR_DTYPE (a storage type other than shard->qtype), EMB_ERR_SHAPE (a row count that is
 * not this rank's), EMB_ERR_INVALID (dims that differ between ranks, unaligned float32
 * rows). */
EMB_MPI_API emb_status emb_mpi_table_wrap_qtable(MPI_Comm comm, int64_t num_embeddings,
                                                 const emb_qtable *rows,
                                                 const emb_bag_options *bag_opts,
                                                 const emb_mpi_shard_options *shard,
                                                 emb_mpi_table **out);

/* A table over a table file of any storage type (what emb_qtable_map reads: emb's f16, bf16,
 * int8 and int4 files, `emb convert --dtype` output, and plain F32/F16/BF16 safetensors
 * tables) that every rank maps read-only: each rank reads only the pages of its own rows,
 * when they are looked up, so a table larger than one host's memory works. The file's
 * storage type must be shard->qtype. Lookups, bags and gradients are those of a single
 * process's emb_qtable_map of the file, bit for bit; steps are EMB_ERR_READ_ONLY and max_norm
 * is refused, as for emb_mpi_table_map_safetensors; free unmaps. Collective. Errors on every
 * rank (each rank reads the file: on a cluster it must be readable on every node): EMB_ERR_NULL
 * (path), those of emb_qtable_map (EMB_ERR_IO, EMB_ERR_FORMAT, EMB_ERR_UNSUPPORTED),
 * EMB_ERR_DTYPE (the file's storage type is not shard->qtype: the message names both), those
 * of emb_mpi_table_create. */
EMB_MPI_API emb_status emb_mpi_table_map_qtable(MPI_Comm comm, const char *path,
                                                const emb_bag_options *bag_opts,
                                                const emb_mpi_shard_options *shard,
                                                emb_mpi_table **out);

/* Frees the table, its shard, its optimizer and its communicator. Collective (it frees a
 * communicator). NULL is fine. */
EMB_MPI_API void emb_mpi_table_free(emb_mpi_table *t);

EMB_MPI_API int64_t emb_mpi_table_num_embeddings(const emb_mpi_table *t);
EMB_MPI_API int64_t emb_mpi_table_dim(const emb_mpi_table *t);
/* The rows this rank holds: [*begin, *end) of the table (empty when *begin == *end). */
EMB_MPI_API void emb_mpi_table_rows(const emb_mpi_table *t, int64_t *begin, int64_t *end);
/* The rank holding a row; -1 for a row outside the table. */
EMB_MPI_API int emb_mpi_table_owner(const emb_mpi_table *t, int64_t row);

/* This rank's rows as a float32 view [end - begin, dim] (data NULL when it holds none).
 * Writes through it change the shard (like writing emb_bag_weight's view).
 * EMB_ERR_UNSUPPORTED for a table of another storage type (emb_mpi_table_qshard). */
EMB_MPI_API emb_status emb_mpi_table_shard(emb_mpi_table *t, emb_tensor *view);
/* A table of another storage type than f32: this rank's rows as a table of end - begin
 * rows (owned by t, valid until emb_mpi_table_free); NULL for f32 tables and on ranks
 * holding no rows. */
EMB_MPI_API const emb_qtable *emb_mpi_table_qshard(const emb_mpi_table *t);

/* The whole table on `root` (float32 [num_embeddings, dim], written on root only; the
 * other ranks may pass NULL; for another storage type: uint8 [num_embeddings, row bytes],
 * the rows as stored, emb_qtable_wrap's layout). Collective. Errors on every rank: EMB_ERR_INVALID
 * (root outside the communicator), EMB_ERR_NULL / EMB_ERR_DTYPE / EMB_ERR_SHAPE (root's full). */
EMB_MPI_API emb_status emb_mpi_table_gather(emb_mpi_table *t, int root, emb_tensor *full);

/* The sparse optimizer the step calls apply to this rank's shard: emb_optimizer_create(opts)
 * over the shard, replacing any earlier one (its state is dropped). Collective; the options
 * must be the same on every rank. Supported: SGD (with momentum, dampening, Nesterov,
 * maximize), Adagrad, SparseAdam; what libemb's sparse step refuses (Adam, AdamW,
 * weight_decay with SGD or Adagrad) is refused here with libemb's status and message. SGD's
 * momentum buffer is PyTorch's sparse one, an uncoalesced list of entries over the whole
 * table that each step merges with the joined batch's entries: every rank keeps the whole
 * list's row ids (8 bytes per entry) and the values of its own rows' entries; it is saved
 * and loaded with emb_mpi_table_save_optimizer_state / _load_optimizer_state (gathered), not
 * with emb_optimizer_save_state of the shard's optimizer, which counts its steps only. Tables of
 * f16 or bf16 rows: SGD without momentum only, emb_qtable_sgd_step's with round-to-nearest and
 * (float)lr; int8/int4 tables are not trained (EMB_ERR_UNSUPPORTED). Errors on every rank:
 * EMB_ERR_NULL, EMB_ERR_INVALID (invalid options, or options that differ between ranks),
 * EMB_ERR_UNSUPPORTED, EMB_ERR_NOMEM. */
EMB_MPI_API emb_status emb_mpi_table_set_optimizer(emb_mpi_table *t,
                                                   const emb_optimizer_options *opts);
/* The shard's optimizer (NULL before emb_mpi_table_set_optimizer or _set_optimizer_dense, or
 * on a rank holding no rows): its step count (every step call counts one) and learning rate.
 * Its emb_optimizer_save_state is the shard's part alone, without SGD's sparse momentum
 * buffer; the whole state is emb_mpi_table_save_optimizer_state's. */
EMB_MPI_API emb_optimizer *emb_mpi_table_optimizer(emb_mpi_table *t);

/* ---- The optimizer's state, gathered ---------------------------------------------------
 * The state of the table's optimizer (sparse or dense) as the single process's optimizer of
 * the whole [num_embeddings, dim] table saves it: emb_optimizer_save_state's bytes
 * (docs/optimizer-state.md, one parameter), bit for bit: the options, the step count (every
 * step call counts one, SGD with momentum too), the state buffers of the whole table (the
 * shards' rows joined in rank order) and SGD's sparse momentum buffer (the whole list's rows
 * and every entry's value, in list order). So a state saved at R ranks loads at any rank
 * count and sharding, and into (or from) one process's emb_optimizer_load_state. f32 tables
 * only (EMB_ERR_UNSUPPORTED); EMB_ERR_STATE before an optimizer is set. */

/* The bytes the state takes now (the same on every rank). Collective. */
EMB_MPI_API emb_status emb_mpi_table_optimizer_state_nbytes(emb_mpi_table *t, size_t *nbytes);
/* Writes the state into root's buf (n >= the size above; exactly that many bytes are
 * written; the other ranks may pass NULL): every rank sends its shard's state to root
 * (MPI_Gatherv). Collective. Errors on every rank: EMB_ERR_INVALID (root outside the
 * communicator, root's buf too small), EMB_ERR_NULL, EMB_ERR_NOMEM. */
EMB_MPI_API emb_status emb_mpi_table_save_optimizer_state(emb_mpi_table *t, int root, void *buf,
                                                          size_t n);
/* Replaces the optimizer's options and state with a gathered state of exactly n bytes, which
 * every rank passes alike (each reads the same file, or root broadcasts it); each rank keeps
 * its rows' part. The table's optimizer must be of the state's kind, SGD with momentum on
 * sparse steps stays so (the state's momentum is not 0), and a table of sparse steps refuses
 * options libemb's sparse step refuses (weight_decay with SGD or Adagrad), as
 * emb_mpi_table_set_optimizer does. Everything is checked before
 * anything changes. Collective. Errors on every rank (nothing changed anywhere):
 * EMB_ERR_NULL, EMB_ERR_STATE, EMB_ERR_UNSUPPORTED, EMB_ERR_INVALID (bytes that differ
 * between ranks), EMB_ERR_FORMAT (those of emb_optimizer_load_state: layout, checksum, kind,
 * options, shape [num_embeddings, dim], records), EMB_ERR_NOMEM. */
EMB_MPI_API emb_status emb_mpi_table_load_optimizer_state(emb_mpi_table *t, const void *buf,
                                                          size_t n);

/* What this rank sent so far, and a reset. */
EMB_MPI_API emb_mpi_stats emb_mpi_table_stats(const emb_mpi_table *t);
EMB_MPI_API void emb_mpi_table_reset_stats(emb_mpi_table *t);

/* ---------------------------------------------------------------------------------------
 * Collective calls: the exact rule above holds for each. Each rank passes its own batch;
 * batches may differ in size (also empty) between ranks.
 * ------------------------------------------------------------------------------------- */

/* Lookup (emb_embedding_forward, max_norm included): out[..., :] = row indices[...] of the
 * table. indices int64/int32 of rank 0..8; out float32 indices.shape + [dim]. Row ids are
 * sent to their owners (MPI_Alltoallv), each distinct id of a rank's batch once, the owners
 * send the rows back. Errors on every rank (out unchanged): those of emb_embedding_forward
 * for this rank's arguments. */
EMB_MPI_API emb_status emb_mpi_table_lookup(emb_mpi_table *t, const emb_tensor *indices,
                                            emb_tensor *out);

/* EmbeddingBag forward (emb_bag_forward) with the table's mode, padding_idx and
 * include_last_offset: the rows are fetched as by emb_mpi_table_lookup and each rank pools its
 * own bags. max_indices: mode max, NULL or int64 [B, dim] (table rows, as emb_bag_forward
 * gives them). Errors on every rank (out, max_indices unchanged): those of emb_bag_forward
 * for this rank's arguments. */
EMB_MPI_API emb_status emb_mpi_table_bag_forward(emb_mpi_table *t, const emb_tensor *input,
                                                 const emb_tensor *offsets,
                                                 const emb_tensor *per_sample_weights,
                                                 emb_tensor *out, emb_tensor *max_indices);

/* The gradient of the per_sample_weights (emb_bag_backward_per_sample_weights, mode sum):
 * the rows are fetched, each rank computes its positions'. f32 tables only. Errors on every rank:
 * those of emb_bag_backward_per_sample_weights for this rank's arguments. */
EMB_MPI_API emb_status emb_mpi_table_bag_backward_per_sample_weights(
    emb_mpi_table *t, const emb_tensor *input, const emb_tensor *offsets,
    const emb_tensor *grad_output, emb_tensor *grad_per_sample_weights);

/* The gradient of this rank's shard: *grad (which must not hold storage; release it with
 * emb_sparse_grad_release) becomes a coalesced sparse gradient of [end - begin, dim] whose
 * rows (shard-local: row - begin, ascending) and values are bit for bit the rows [begin,
 * end) of emb_sparse_grad_coalesce applied to the single process's
 * emb_bag_backward_sparse (mode sum or mean) of the joined batch. Every rank's gradient
 * entries go to their rows' owners; the row ids of the whole joined batch go to every rank
 * (MPI_Allgatherv: coalesce() sums a row's entries in an order that depends on all of
 * them). Errors on every rank: those of emb_bag_backward_sparse. */
EMB_MPI_API emb_status emb_mpi_table_bag_backward_sparse(emb_mpi_table *t, const emb_tensor *input,
                                                         const emb_tensor *offsets,
                                                         const emb_tensor *per_sample_weights,
                                                         const emb_tensor *grad_output,
                                                         emb_sparse_grad *grad);

/* One step of the table's optimizer with the bag's gradient: equals the single process's
 * emb_optimizer_step_fused_bag over the joined batch (its table and optimizer state),
 * restricted to each rank's rows. SGD sends each rank's entries to the owners, which apply
 * them in the joined batch's order; Adagrad and SparseAdam coalesce as
 * emb_mpi_table_bag_backward_sparse. Every owner counts the step, with or without entries.
 * Errors on every rank (no shard and no optimizer state changed): EMB_ERR_STATE (no
 * optimizer set), those of emb_optimizer_step_fused_bag for this rank's arguments. */
EMB_MPI_API emb_status emb_mpi_table_bag_step(emb_mpi_table *t, const emb_tensor *input,
                                              const emb_tensor *offsets,
                                              const emb_tensor *per_sample_weights,
                                              const emb_tensor *grad_output);

/* One step with the gradient of a lookup (emb_optimizer_step_fused over the joined batch:
 * the table's padding_idx positions skipped). indices as emb_mpi_table_lookup, grad_output
 * float32 indices.shape + [dim]. f32 tables only. Errors on every rank: as
 * emb_mpi_table_bag_step. */
EMB_MPI_API emb_status emb_mpi_table_lookup_step(emb_mpi_table *t, const emb_tensor *indices,
                                                 const emb_tensor *grad_output);

/* ---- Dense gradients ------------------------------------------------------------------
 * The shard's rows of the single process's dense gradient of the joined batch, bit for bit,
 * and dense optimizer steps on the shard. grad_shard is float32 [end - begin, dim] (this
 * rank's rows, emb_mpi_table_rows; [0, dim] with data NULL on a rank holding none), and the
 * gradient is added to it (zero it first for a fresh gradient), as emb_bag_backward and
 * emb_embedding_backward add theirs. scale_grad_by_freq counts a row over the joined batch.
 * The rows' values are not read: tables of any storage type (mapped ones too) have these
 * gradients. */

/* EmbeddingBag dense backward (emb_bag_backward over the joined batch, restricted to this
 * rank's rows): modes sum and mean (with per_sample_weights, scale_grad_by_freq) and max
 * (max_indices: this rank's int64 [B, dim] from emb_mpi_table_bag_forward, table rows).
 * Sum and mean: each non-padding position's term (its bag's gradient row, weight and bag
 * size) goes to the row's owner, and the joined batch's row ids go to every rank
 * (MPI_Allgatherv: libemb sums a row's terms in the order of PyTorch's unstable sort of the
 * whole input). Max: each non-empty bag's gradient row and max_indices row go to the owners
 * of the rows it names. Errors on every rank (no gradient changed): those of
 * emb_bag_backward for this rank's arguments, EMB_ERR_NULL / EMB_ERR_DTYPE /
 * EMB_ERR_SHAPE (grad_shard). */
EMB_MPI_API emb_status emb_mpi_table_bag_backward_dense(emb_mpi_table *t, const emb_tensor *input,
                                                        const emb_tensor *offsets,
                                                        const emb_tensor *per_sample_weights,
                                                        const emb_tensor *max_indices,
                                                        const emb_tensor *grad_output,
                                                        emb_tensor *grad_shard);

/* Lookup dense backward (emb_embedding_backward over the joined batch, this rank's rows):
 * each non-padding position's gradient row goes to its row's owner, which sums them in the
 * joined batch's order. indices as emb_mpi_table_lookup, grad_output float32
 * indices.shape + [dim]. Errors on every rank: those of emb_embedding_backward for this
 * rank's arguments, those of grad_shard. */
EMB_MPI_API emb_status emb_mpi_table_lookup_backward_dense(emb_mpi_table *t,
                                                           const emb_tensor *indices,
                                                           const emb_tensor *grad_output,
                                                           emb_tensor *grad_shard);

/* The dense optimizer of the shard: emb_optimizer_create(opts) over this rank's rows, any
 * optimizer libemb's dense step has (SGD with momentum, dampening, Nesterov, weight_decay;
 * Adagrad; Adam and AdamW with amsgrad), replacing any earlier optimizer (sparse or dense;
 * its state is dropped). The sparse step calls refuse while it is set (EMB_ERR_STATE).
 * Collective; the options must be the same on every rank. Errors on every rank:
 * EMB_ERR_NULL, EMB_ERR_INVALID (invalid options, or options that differ between ranks),
 * EMB_ERR_UNSUPPORTED (a table of other rows than float32), EMB_ERR_NOMEM. */
EMB_MPI_API emb_status emb_mpi_table_set_optimizer_dense(emb_mpi_table *t,
                                                         const emb_optimizer_options *opts);

/* One step of the dense optimizer with this rank's rows of the gradient (grad_shard as
 * above): emb_optimizer_step on the shard. Its updates are elementwise, so every rank's rows
 * are the single process's after emb_optimizer_step with the whole gradient (the rows the
 * batch does not name step too, with a zero gradient, as in one process). Collective.
 * Errors on every rank (no shard changed, the step not counted): EMB_ERR_STATE (no dense
 * optimizer), EMB_ERR_READ_ONLY (a mapped table), those of grad_shard. */
EMB_MPI_API emb_status emb_mpi_table_step_dense(emb_mpi_table *t, const emb_tensor *grad_shard);

/* ---- Word vectors over ranks (docs/DISTRIBUTED.md, "Word vectors") ----
 *
 * Data-parallel word2vec: every rank creates the same run (emb_w2v_create_from_file or
 * emb_w2v_resume with the same corpus and options; `threads` is the number of lanes of the
 * whole run, ranks x threads per rank), then emb_mpi_w2v_create deals the run's lanes out
 * over the ranks (rank r trains lanes [r L/R, (r+1) L/R), L/R threads), and every rank calls
 * emb_w2v_train: each rank trains its lanes' share of the corpus on its own replica of both
 * tables, and after every round the ranks' changes to both tables are merged in rank order,
 * so that all ranks hold the same tables, positions and progress afterwards (any rank can
 * write the vectors or a checkpoint). One thread per rank gives the same vectors bit for bit
 * run after run; one rank gives exactly the single-process run. A progress callback's non-zero
 * return on any rank stops every rank (EMB_ERR_CANCELLED). With subwords the input table's
 * n-gram bucket rows a round changed are merged as the words' rows are. Collective. Errors on every
 * rank (*out untouched, w not changed): EMB_ERR_NULL, EMB_ERR_STATE (MPI not initialised; w already
 * distributed), EMB_ERR_INVALID (runs that differ between ranks: the message names the rank and
 * what differs — corpus fingerprint, vocabulary, options, lanes, tables, progress; a lane count the
 * ranks do not divide), EMB_ERR_UNSUPPORTED (more rows than 32-bit counts of rows over the ranks
 * hold), EMB_ERR_NOMEM. */
typedef struct emb_mpi_w2v emb_mpi_w2v;
EMB_MPI_API emb_status emb_mpi_w2v_create(MPI_Comm comm, emb_w2v *w, emb_mpi_w2v **out);
/* Ends the distribution (w trains alone again, all its lanes) and frees it. Collective. */
EMB_MPI_API void emb_mpi_w2v_free(emb_mpi_w2v *d);
/* Bytes this rank handed to MPI for the merges so far. */
EMB_MPI_API uint64_t emb_mpi_w2v_bytes_sent(const emb_mpi_w2v *d);
/* The merges' traffic of one rank since emb_mpi_w2v_create: `sent` is what the rank handed to
 * MPI once for all the others (its changed rows with their ids, its lanes' state and counts,
 * the stop agreement's int), `received` what the other ranks handed over (the payload every
 * rank gets back from the all-gathers; the bytes on the wire depend on MPI's algorithm and
 * headers), over `rounds` merges. Every rank knows every rank's counts. Local. */
typedef struct emb_mpi_w2v_bytes {
    uint64_t sent, received;
    int64_t rounds;
} emb_mpi_w2v_bytes;
EMB_MPI_API emb_status emb_mpi_w2v_traffic(const emb_mpi_w2v *d, int rank, emb_mpi_w2v_bytes *out);

#ifdef __cplusplus
}
#endif

#endif /* EMB_MPI_H */
