/* src/mpi/mpi_internal.h: the sharded table's fields and the helpers shared by the files of
 * libemb_mpi. The module is a library of its own over libemb's public API (it includes
 * only public headers, <mpi.h>, its own headers and core/kernels headers that are
 * header-only); docs/DISTRIBUTED.md describes it. */
#ifndef EMB_MPI_INTERNAL_H
#define EMB_MPI_INTERNAL_H

#include <emb/io.h>
#include <emb/mpi.h>

/* SGD's momentum buffer (mpi_momentum.c): the whole list's rows, this rank's values. */
typedef struct emb__mpi_momentum {
    bool has;      /* created (by the first step) */
    int64_t n;     /* entries of the whole list */
    int64_t *rows; /* [n] table rows */
    int64_t nown;  /* entries of this rank's rows */
    float *vals;   /* [nown, dim], in list order */
} emb__mpi_momentum;

struct emb_mpi_table {
    MPI_Comm comm;          /* the table's own duplicate */
    MPI_Datatype row_type;  /* one stored row: row_bytes bytes */
    MPI_Datatype grad_type; /* one gradient row: dim floats */
    int rank, size;
    int64_t num_embeddings, dim;
    emb_bag_options opts; /* mode, padding_idx (normalised), include_last_offset */
    int64_t *begin;       /* [size + 1]: rank r holds rows [begin[r], begin[r + 1]) */
    int64_t row_begin, row_end;
    emb_qtype qtype;
    int64_t row_bytes;  /* of a stored row */
    float *weight;      /* f32: [row_end - row_begin, dim], NULL when empty */
    void *qdata;        /* other types: the rows drawn (owned), NULL when empty or not drawn */
    emb_qtable *qshard; /* other types: a table over qdata, or over the caller's or a file's rows */
    float qlr;          /* f16/bf16: SGD's learning rate */
    emb_bag *checker;   /* a 1-row bag with the table's mode: checks arguments */
    emb_optimizer *opt; /* NULL until set_optimizer (and on ranks without rows) */
    bool have_opt;
    bool opt_dense; /* set by emb_mpi_table_set_optimizer_dense (mpi_dense.c's steps) */
    emb_optimizer_kind opt_kind;
    emb_optimizer_options opt_opts;
    emb__mpi_momentum mom; /* SGD with momentum */
    emb_mpi_stats stats;
    int64_t timeout_ms;   /* of each collective (mpi_wait.c); 0: none */
    bool partial_sums;    /* row-wise bags pooled by the owners (mpi_partial.c) */
    bool borrowed;        /* weight is the caller's or the mapping's: not freed */
    bool read_only;       /* mapped rows: no step writes them */
    emb_safetensors *map; /* emb_mpi_table_map_safetensors's file, unmapped by free */
    void *mapped;         /* emb_mpi_table_map_npy's mapping of this rank's rows, or NULL */
    size_t mapped_len;
    emb_qtable *qfile; /* emb_mpi_table_map_qtable's mapped file, freed by free */
};

/* Where a table's rows come from when it does not draw them: the caller's memory
 * (emb_mpi_table_wrap, _wrap_qtable) or a mapped file (emb_mpi_table_map_safetensors,
 * _map_npy, _map_qtable). */
typedef struct emb__mpi_source {
    void *rows; /* this rank's rows as stored: [nrows, dim] floats, or nrows rows of qtype */
    int64_t nrows;
    emb_qtype qtype; /* the rows' storage type: it must be the shard options' */
    bool read_only;
    emb_safetensors *map; /* owned by the table once created */
    void *base;           /* a mapping (mpi_npy.c) owned by the table once created */
    size_t len;
    emb_qtable *qfile; /* a mapped table file (emb_mpi_table_map_qtable), owned once created */
} emb__mpi_source;

/* This rank's rows as stored (float32 or the storage type's bytes); NULL when it holds none. */
static inline const unsigned char *emb__mpi_stored(const emb_mpi_table *t) {
    return t->weight ? (const unsigned char *)t->weight
                     : (const unsigned char *)emb_qtable_data(t->qshard);
}

/* Collective: a table of V x D rows; its rows from src (NULL: drawn as emb_bag_create). */
emb_status emb__mpi_create(MPI_Comm comm, int64_t num_embeddings, int64_t embedding_dim,
                           const emb_bag_options *bag_opts, const emb_mpi_shard_options *shard,
                           const emb__mpi_source *src, emb_mpi_table **out);
/* Local: the rows [*b, *e) rank holds under s; [0, 0) when the settings are invalid. */
void emb__mpi_rows_of(int rank, int size, int64_t V, const emb_mpi_shard_options *s, int64_t *b,
                      int64_t *e);
/* Local: what libemb's sparse step says of these options (one step of an empty gradient). */
emb_status emb__mpi_sparse_probe(const emb_optimizer_options *opts);
/* Local: unmaps what mpi_npy.c mapped (NULL: nothing). */
void emb__mpi_unmap(void *base, size_t len);

/* One rank's batch, its distinct ids and their positions in the fetched rows. */
typedef struct emb__mpi_route {
    int64_t n;     /* positions */
    int64_t *ids;  /* [n] the table rows named, as int64 */
    int64_t *uniq; /* [nu] distinct rows, ascending (the padding row included when set) */
    int64_t nu;
    int64_t *local;       /* [n] position of ids[p] in uniq */
    int64_t local_pad;    /* position of the padding row in uniq, or EMB_PADDING_NONE */
    float *rows;          /* max(nu, 1) rows of max(dim floats, row_bytes): the fetched rows */
    emb_qtable *q;        /* other types: a table over the fetched rows */
    emb_bag *bag;         /* a bag over `rows` with the table's options */
    emb_tensor local_idx; /* `local` in the shape of the batch */
} emb__mpi_route;

/* Everything is collective unless said otherwise. */

/* The agreement before anything changes: returns EMB_OK on every rank when every rank's
 * st is EMB_OK; otherwise the first refusing rank's status on every rank, with its message
 * there and "rank r refused <what>: <message>" on the others. */
emb_status emb__mpi_agree(emb_mpi_table *t, emb_status st, const char *what);
/* The same over a bare communicator (before a table exists), with a deadline of ms. */
emb_status emb__mpi_agree_comm(MPI_Comm comm, int64_t ms, emb_status st, const char *what);
/* An MPI call's failure as an emb error (MPI's default handler aborts first; this serves a
 * communicator whose handler returns). Local. */
emb_status emb__mpi_fail(int rc, const char *call);

/* Local: reads the batch, checks the ids against the table (message names the position),
 * finds the distinct rows and creates the route's bag (over zeroed rows). */
emb_status emb__mpi_route_build(const emb_mpi_table *t, const emb_tensor *indices,
                                emb__mpi_route *r);
void emb__mpi_route_free(emb__mpi_route *r);
/* Collective: fills r->rows with the table's rows r->uniq from their owners. */
emb_status emb__mpi_route_fetch(emb_mpi_table *t, emb__mpi_route *r);

/* Collective: with a finite max_norm, the owners renormalise the distinct rows of positions
 * [0, end) of every rank's batch, each once, as emb_embedding_renorm_ over the joined
 * batch does (rows are independent: the order does not matter). */
emb_status emb__mpi_renorm(emb_mpi_table *t, const emb__mpi_route *r, int64_t end);

/* MPI's collectives with a deadline (mpi_wait.c): ms > 0: past it, the rank prints which
 * call it waited for and ends the job (MPI_Abort with EMB_MPI_TIMEOUT_EXIT); ms 0: no
 * deadline. Return MPI's code. */
#define EMB_MPI_TIMEOUT_EXIT 124
int emb__mpi_allreduce(int64_t ms, const void *sb, void *rb, int n, MPI_Datatype dt, MPI_Op op,
                       MPI_Comm comm);
int emb__mpi_bcast(int64_t ms, void *buf, int n, MPI_Datatype dt, int root, MPI_Comm comm);
int emb__mpi_alltoall(int64_t ms, const void *sb, int sn, MPI_Datatype st, void *rb, int rn,
                      MPI_Datatype rt, MPI_Comm comm);
int emb__mpi_alltoallv(int64_t ms, const void *sb, const int *sc, const int *sd, MPI_Datatype st,
                       void *rb, const int *rc_, const int *rd, MPI_Datatype rt, MPI_Comm comm);
int emb__mpi_allgather(int64_t ms, const void *sb, int sn, MPI_Datatype st, void *rb, int rn,
                       MPI_Datatype rt, MPI_Comm comm);
int emb__mpi_allgatherv(int64_t ms, const void *sb, int sn, MPI_Datatype st, void *rb,
                        const int *rc_, const int *rd, MPI_Datatype rt, MPI_Comm comm);
int emb__mpi_gatherv(int64_t ms, const void *sb, int sn, MPI_Datatype st, void *rb, const int *rc_,
                     const int *rd, MPI_Datatype rt, int root, MPI_Comm comm);
int emb__mpi_comm_dup(int64_t ms, MPI_Comm comm, MPI_Comm *out);
/* Waits for a request of a collective started on comm (call: its name for the message). */
int emb__mpi_wait(int64_t ms, MPI_Comm comm, MPI_Request *req, const char *call);
/* Collective: the inexact bag forward (shard option partial_sums, mpi_partial.c) of the
 * route's batch, sum or mean, float32 rows. */
emb_status emb__mpi_bag_partial(emb_mpi_table *t, const emb__mpi_route *r, const emb_tensor *input,
                                const emb_tensor *offsets, const emb_tensor *psw, emb_tensor *out,
                                int64_t B);

/* Collective: the rows of every rank's entries gid[0..n), joined in rank order, on every
 * rank (*all, freed by the caller; MPI_Allgatherv). */
emb_status emb__mpi_joined_rows(emb_mpi_table *t, const int64_t *gid, int64_t n, int64_t **all,
                                int64_t *total);
/* Local: one step of SGD with momentum o over the joined batch's entries, rows all[0..total)
 * and gval the values of the entries of this rank's rows, in order. */
emb_status emb__mpi_momentum_step(emb_mpi_table *t, const emb_optimizer_options *o,
                                  const int64_t *all, int64_t total, const float *gval);
void emb__mpi_momentum_free(emb__mpi_momentum *m);

/* Local checks. */
emb_status emb__mpi_check_f32(const emb_tensor *t, const char *what, int ndim,
                              const int64_t *shape);
/* A bag batch's arguments as emb_bag_forward checks them (out: [B, dim] when given, named
 * out_name), *num_bags its bags. */
emb_status emb__mpi_check_bag(const emb_mpi_table *t, const emb_tensor *input,
                              const emb_tensor *offsets, const emb_tensor *psw,
                              const emb_tensor *out, const char *out_name, int64_t *num_bags);

/* Test hook: a distributed word2vec run cannot allocate room for more than this many rows to
 * merge (EMB_ERR_NOMEM as if realloc failed); INT64_MAX (the default): no limit. Tests only. */
extern int64_t emb__mpi_w2v_max_rows;

/* Test hook: a distributed word2vec run with subwords cannot allocate room to save more than
 * this many n-gram rows' starts (as if malloc failed); INT64_MAX (the default): no limit. */
extern int64_t emb__mpi_w2v_max_slots;

/* Test hook of libemb's trainer (src/w2v/trainer.c), reachable by a test that links the static
 * libraries: emb_w2v_train allocates the threads' training scratch for at most this many
 * threads (one per lane in those tests), the others failing as if out of memory; INT_MAX (the
 * default): no limit. Tests only. */
extern int emb__w2v_max_scratch_lanes;

#endif /* EMB_MPI_INTERNAL_H */
