/* src/mpi/mpi_table.c: a table sharded over an MPI communicator: creation (the rows a single
 * process would draw), placement, gathering, the optimizer of the shard, and the collective
 * agreement every call makes before it changes anything. */
#include "mpi_internal.h"

#include <emb/print.h>

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define AGREE_MSG 768

emb_status emb__mpi_fail(int rc, const char *call) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "code %d", rc);
    return emb_set_error(EMB_ERR_IO, "%s failed: %s", call, s);
}

static emb_status agree(MPI_Comm comm, int64_t ms, emb_status st, const char *what,
                        uint64_t *sent) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int mine = st ? rank : size, first = size;
    int rc = emb__mpi_allreduce(ms, &mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (rc != MPI_SUCCESS) return emb__mpi_fail(rc, "MPI_Allreduce");
    if (sent && size > 1) *sent += sizeof mine;
    if (first == size) return EMB_OK;
    struct {
        int status;
        char msg[AGREE_MSG];
    } m;
    memset(&m, 0, sizeof m);
    if (rank == first) {
        m.status = st;
        snprintf(m.msg, sizeof m.msg, "%s", emb_errmsg());
        if (sent && size > 1) *sent += sizeof m;
    }
    rc = emb__mpi_bcast(ms, &m, (int)sizeof m, MPI_BYTE, first, comm);
    if (rc != MPI_SUCCESS) return emb__mpi_fail(rc, "MPI_Bcast");
    if (rank == first) return st;
    return emb_set_error((emb_status)m.status, "rank %d refused %s: %s", first, what, m.msg);
}

emb_status emb__mpi_agree(emb_mpi_table *t, emb_status st, const char *what) {
    return agree(t->comm, t->timeout_ms, st, what, &t->stats.bytes_sent);
}

emb_status emb__mpi_agree_comm(MPI_Comm comm, int64_t ms, emb_status st, const char *what) {
    return agree(comm, ms, st, what, NULL);
}

emb_status emb__mpi_check_f32(const emb_tensor *t, const char *what, int ndim,
                              const int64_t *shape) {
    if (!t) return emb_set_error(EMB_ERR_NULL, "%s must not be NULL", what);
    emb_status st = emb_tensor_check(t, what);
    if (st) return st;
    if (t->dtype != EMB_FLOAT32)
        return emb_set_error(EMB_ERR_DTYPE, "%s must be float32, got %s", what,
                             emb_dtype_name(t->dtype));
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char want[160], got[160];
        emb_shape_repr(ndim, shape, want, sizeof want);
        emb_shape_repr(t->ndim, t->shape, got, sizeof got);
        return emb_set_error(EMB_ERR_SHAPE, "%s has shape %s, expected %s", what, got, want);
    }
    return EMB_OK;
}

emb_mpi_shard_options emb_mpi_shard_options_default(void) {
    emb_mpi_shard_options o = {EMB_MPI_ROW_WISE, 0, EMB_QTYPE_F32, EMB_MPI_TIMEOUT_MS_DEFAULT,
                               false};
    return o;
}

/* Fills rows [t->row_begin, t->row_end) with what normal_(0, 1) over the whole
 * [V, dim] table gives them. normal_ on >= 16 floats works in independent blocks of 16, and
 * a length that is not a multiple of 16 redoes the last 16 (core/generator.c): the stream is
 * drawn in pieces of a multiple of 16 floats, the last piece being the final 16..31 floats,
 * which reproduces it exactly; below 16 floats it is one piece. */
static emb_status init_rows(emb_mpi_table *t, float *dst, emb_generator *gen) {
    const int64_t n = t->num_embeddings * t->dim;
    const int64_t lo = t->row_begin * t->dim, hi = t->row_end * t->dim;
    const int64_t chunk = (int64_t)1 << 16; /* floats, a multiple of 16 */
    const int64_t main_end = n < 16 ? 0 : (n % 16 ? n - n % 16 - 16 : n);
    float *buf = malloc((size_t)chunk * sizeof(float));
    if (!buf) return emb_set_error(EMB_ERR_NOMEM, "cannot allocate the initialisation buffer");
    emb_status st = EMB_OK;
    for (int64_t o = 0; o < n && !st;) {
        int64_t k = o < main_end ? (main_end - o < chunk ? main_end - o : chunk) : n - o;
        emb_tensor piece;
        st = emb_tensor_init(&piece, EMB_FLOAT32, buf, 1, &k);
        if (!st) st = emb_normal_(&piece, 0.0, 1.0, gen);
        if (st) break;
        int64_t a = o > lo ? o : lo, b = o + k < hi ? o + k : hi;
        if (a < b) memcpy(dst + (a - lo), buf + (a - o), (size_t)(b - a) * sizeof(float));
        o += k;
    }
    free(buf);
    if (!st && t->opts.padding_idx != EMB_PADDING_NONE && t->opts.padding_idx >= t->row_begin &&
        t->opts.padding_idx < t->row_end)
        memset(dst + (t->opts.padding_idx - t->row_begin) * t->dim, 0,
               (size_t)t->dim * sizeof(float));
    return st;
}

/* Allocates and fills the shard: float32 rows, or float32 rows converted to the storage
 * type (emb_quantize_rows, row by row as emb_qtable_quantize does) under a table. */
static emb_status make_shard(emb_mpi_table *t, emb_generator *gen) {
    const int64_t rows = t->row_end - t->row_begin;
    float *w = NULL;
    if (rows > 0) {
        w = malloc((size_t)rows * (size_t)t->dim * sizeof(float));
        if (!w) return emb_set_error(EMB_ERR_NOMEM, "cannot allocate the shard");
    }
    emb_status st = init_rows(t, w, gen);
    if (st || t->qtype == EMB_QTYPE_F32) {
        if (st)
            free(w);
        else
            t->weight = w;
        return st;
    }
    if (rows > 0) {
        const size_t nbytes = (size_t)rows * (size_t)t->row_bytes;
        t->qdata = malloc(nbytes);
        st = t->qdata ? emb_quantize_rows(t->qtype, w, rows, t->dim, t->qdata, nbytes)
                      : emb_set_error(EMB_ERR_NOMEM, "cannot allocate the shard");
        if (!st) st = emb_qtable_wrap(t->qtype, rows, t->dim, t->qdata, nbytes, NULL, &t->qshard);
    }
    free(w);
    return st;
}

/* The settings every rank must pass alike, with their names for the message. */
enum {
    CFG_V,
    CFG_D,
    CFG_MODE,
    CFG_PAD,
    CFG_LAST,
    CFG_NORM,
    CFG_NTYPE,
    CFG_FREQ,
    CFG_SHARD,
    CFG_OWNER,
    CFG_QTYPE,
    CFG_TIMEOUT,
    CFG_PARTIAL,
    CFG_N
};
static const char *const cfg_names[CFG_N] = {"num_embeddings",
                                             "embedding_dim",
                                             "mode",
                                             "padding_idx",
                                             "include_last_offset",
                                             "max_norm (bits)",
                                             "norm_type (bits)",
                                             "scale_grad_by_freq",
                                             "sharding",
                                             "owner",
                                             "qtype",
                                             "timeout_ms",
                                             "partial_sums"};

static emb_status check_local(int size, int64_t V, int64_t D, const emb_bag_options *o,
                              const emb_mpi_shard_options *s, emb_mpi_table **out) {
    if (!out) return emb_set_error(EMB_ERR_NULL, "out must not be NULL");
    if (V < 1 || D < 1)
        return emb_set_error(EMB_ERR_INVALID,
                             "a sharded table needs num_embeddings >= 1 and "
                             "embedding_dim >= 1, got %" PRId64 " and %" PRId64,
                             V, D);
    if (s->timeout_ms < 0)
        return emb_set_error(EMB_ERR_INVALID,
                             "timeout_ms must be >= 0 (0: no deadline), got %" PRId64,
                             s->timeout_ms);
    if (s->sharding != EMB_MPI_ROW_WISE && s->sharding != EMB_MPI_TABLE_WISE)
        return emb_set_error(EMB_ERR_INVALID, "unknown sharding %d", (int)s->sharding);
    if (s->sharding == EMB_MPI_ROW_WISE && V < size)
        return emb_set_error(EMB_ERR_INVALID,
                             "a row-wise table of %" PRId64 " rows cannot be "
                             "split over %d ranks (every rank holds at least one row)",
                             V, size);
    if (s->sharding == EMB_MPI_TABLE_WISE && (s->owner < 0 || s->owner >= size))
        return emb_set_error(EMB_ERR_INVALID,
                             "owner %d is not a rank of the communicator "
                             "(valid: [0, %d))",
                             s->owner, size);
    if (s->qtype != EMB_QTYPE_F32 && o->max_norm != INFINITY)
        return emb_set_error(EMB_ERR_UNSUPPORTED,
                             "embedding_bag: a table of %s rows is not renormalised "
                             "(max_norm needs float32 rows)",
                             emb_qtype_name(s->qtype));
    return EMB_OK;
}

/* The settings must agree: every rank compares its own with rank 0's (st: this rank's
 * verdict so far, kept when it is an error). */
static emb_status same_settings(MPI_Comm comm, int rank, int64_t num_embeddings,
                                int64_t embedding_dim, const emb_bag_options *op, int64_t pad,
                                const emb_mpi_shard_options *sp, emb_status st) {
    const emb_bag_options o = *op;
    const emb_mpi_shard_options s = *sp;
    int64_t cfg[CFG_N];
    double mn = o.max_norm, nt = o.norm_type;
    int64_t mn_bits, nt_bits;
    memcpy(&mn_bits, &mn, sizeof mn_bits);
    memcpy(&nt_bits, &nt, sizeof nt_bits);
    cfg[CFG_V] = num_embeddings;
    cfg[CFG_D] = embedding_dim;
    cfg[CFG_MODE] = o.mode;
    cfg[CFG_PAD] = pad;
    cfg[CFG_LAST] = o.include_last_offset;
    cfg[CFG_NORM] = mn_bits;
    cfg[CFG_NTYPE] = o.max_norm == INFINITY ? 0 : nt_bits;
    cfg[CFG_FREQ] = o.scale_grad_by_freq;
    cfg[CFG_SHARD] = s.sharding;
    cfg[CFG_OWNER] = s.sharding == EMB_MPI_TABLE_WISE ? s.owner : 0;
    cfg[CFG_QTYPE] = s.qtype;
    cfg[CFG_TIMEOUT] = s.timeout_ms;
    cfg[CFG_PARTIAL] = s.partial_sums;
    int64_t root[CFG_N];
    memcpy(root, cfg, sizeof root);
    const int64_t ms = s.timeout_ms >= 0 ? s.timeout_ms : EMB_MPI_TIMEOUT_MS_DEFAULT;
    int rc = emb__mpi_bcast(ms, root, CFG_N, MPI_INT64_T, 0, comm);
    if (rc != MPI_SUCCESS) st = st ? st : emb__mpi_fail(rc, "MPI_Bcast");
    for (int i = 0; i < CFG_N && !st; i++)
        if (cfg[i] != root[i])
            st = emb_set_error(EMB_ERR_INVALID,
                               "settings differ between ranks: rank %d passed "
                               "%s %" PRId64 ", rank 0 passed %" PRId64,
                               rank, cfg_names[i], cfg[i], root[i]);
    return st;
}

/* The table's own communicator and its two row types. Collective. */
static emb_status comm_and_types(emb_mpi_table *t, MPI_Comm comm, int64_t ms) {
    int rc = emb__mpi_comm_dup(ms, comm, &t->comm);
    if (rc != MPI_SUCCESS) return emb__mpi_fail(rc, "MPI_Comm_dup");
    rc = MPI_Type_contiguous((int)t->row_bytes, MPI_BYTE, &t->row_type);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&t->row_type);
    if (rc == MPI_SUCCESS) rc = MPI_Type_contiguous((int)t->dim, MPI_FLOAT, &t->grad_type);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&t->grad_type);
    if (rc == MPI_SUCCESS) return EMB_OK;
    MPI_Comm_free(&t->comm);
    return emb__mpi_fail(rc, "MPI_Type_contiguous");
}

/* The rows [begin, end) a rank holds (the settings already checked). */
static void rows_of(int rank, int size, int64_t V, const emb_mpi_shard_options *s, int64_t *b,
                    int64_t *e) {
    if (s->sharding == EMB_MPI_ROW_WISE) {
        *b = (int64_t)((__int128)V * rank / size);
        *e = (int64_t)((__int128)V * (rank + 1) / size);
    } else {
        *b = rank <= s->owner ? 0 : V;
        *e = rank < s->owner ? 0 : V;
    }
}

void emb__mpi_rows_of(int rank, int size, int64_t V, const emb_mpi_shard_options *s, int64_t *b,
                      int64_t *e) {
    *b = *e = 0; /* invalid settings: creation refuses them before the rows */
    if (s->sharding == EMB_MPI_ROW_WISE
            ? V >= size
            : s->sharding == EMB_MPI_TABLE_WISE && s->owner >= 0 && s->owner < size)
        rows_of(rank, size, V, s, b, e);
}

/* A source's own checks: rows of the shard options' storage type, the rank's row count, no
 * renormalisation of read-only rows. */
static emb_status check_source(const emb__mpi_source *src, int rank, int size, int64_t V,
                               const emb_bag_options *o, const emb_mpi_shard_options *s) {
    if (src->qtype != s->qtype)
        return emb_set_error(EMB_ERR_DTYPE,
                             "the rows are %s, but the shard options' qtype is %s (set it to "
                             "the rows' storage type)",
                             emb_qtype_name(src->qtype), emb_qtype_name(s->qtype));
    if (src->read_only && o->max_norm != INFINITY)
        return emb_set_error(EMB_ERR_READ_ONLY,
                             "max_norm=%g would renormalise rows of a read-only (mapped) "
                             "table",
                             o->max_norm);
    int64_t b, e;
    rows_of(rank, size, V, s, &b, &e);
    if (src->nrows != e - b)
        return emb_set_error(EMB_ERR_SHAPE,
                             "rank %d holds rows [%" PRId64 ", %" PRId64 ") of the table: %" PRId64
                             " rows, got %" PRId64,
                             rank, b, e, e - b, src->nrows);
    return EMB_OK;
}

emb_status emb__mpi_create(MPI_Comm comm, int64_t num_embeddings, int64_t embedding_dim,
                           const emb_bag_options *bag_opts, const emb_mpi_shard_options *shard,
                           const emb__mpi_source *src, emb_mpi_table **out) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return emb_set_error(EMB_ERR_STATE, "MPI is not initialised (call MPI_Init first)");
    emb_bag_options o = bag_opts ? *bag_opts : emb_bag_options_default();
    emb_mpi_shard_options s = shard ? *shard : emb_mpi_shard_options_default();
    int size = 0, rank = 0;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    emb_status st = check_local(size, num_embeddings, embedding_dim, &o, &s, out);
    if (!st && src) st = check_source(src, rank, size, num_embeddings, &o, &s);
    /* the deadline of creation's own collectives (the agreed one from then on) */
    const int64_t ms = s.timeout_ms >= 0 ? s.timeout_ms : EMB_MPI_TIMEOUT_MS_DEFAULT;
    /* emb_bag_create's option checks (padding_idx range, mode, max with sparse), on a
     * 1-row stand-in when the sizes are valid; the padding row is checked separately. */
    int64_t pad = EMB_PADDING_NONE;
    emb_bag *checker = NULL;
    if (!st) {
        if (o.padding_idx != EMB_PADDING_NONE) {
            if (o.padding_idx < -num_embeddings || o.padding_idx >= num_embeddings)
                st = emb_set_error(EMB_ERR_INVALID,
                                   "padding_idx must be within num_embeddings "
                                   "(got %" PRId64 " for %" PRId64 " rows)",
                                   o.padding_idx, num_embeddings);
            else
                pad = o.padding_idx < 0 ? o.padding_idx + num_embeddings : o.padding_idx;
        }
    }
    int64_t row_bytes = 0;
    if (!st) st = emb_qtype_row_nbytes(s.qtype, embedding_dim, &row_bytes);
    float *zero = NULL;
    if (!st) {
        zero = calloc((size_t)embedding_dim, sizeof(float));
        if (!zero) st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate a row");
    }
    if (!st) {
        emb_bag_options co = o;
        co.padding_idx = EMB_PADDING_NONE;
        co.generator = NULL;
        emb_tensor w;
        int64_t shape[2] = {1, embedding_dim};
        st = emb_tensor_init(&w, EMB_FLOAT32, zero, 2, shape);
        if (!st) st = emb_bag_from_pretrained(&w, false, &co, &checker);
    }
    free(zero);
    st = same_settings(comm, rank, num_embeddings, embedding_dim, &o, pad, &s, st);
    st = emb__mpi_agree_comm(comm, ms, st, "to create the table");
    if (st) {
        emb_bag_free(checker);
        return st;
    }

    emb_mpi_table *t = calloc(1, sizeof *t);
    int64_t *begin = calloc((size_t)size + 1, sizeof *begin);
    st = t && begin ? EMB_OK : emb_set_error(EMB_ERR_NOMEM, "cannot allocate the table");
    if (!st) {
        t->begin = begin;
        t->checker = checker;
        t->rank = rank;
        t->size = size;
        t->num_embeddings = num_embeddings;
        t->dim = embedding_dim;
        t->opts = o;
        t->opts.padding_idx = pad;
        t->opts.generator = NULL;
        t->qtype = s.qtype;
        t->row_bytes = row_bytes;
        t->timeout_ms = s.timeout_ms;
        t->partial_sums = s.partial_sums;
        for (int r = 0; r <= size; r++) {
            int64_t e;
            rows_of(r < size ? r : size - 1, size, num_embeddings, &s, &begin[r], &e);
            if (r == size) begin[r] = num_embeddings;
        }
        t->row_begin = begin[rank];
        t->row_end = begin[rank + 1];
    }
    if (!st && src) {
        t->borrowed = true;
        t->read_only = src->read_only;
        if (t->qtype == EMB_QTYPE_F32) {
            t->weight = src->nrows > 0 ? src->rows : NULL;
        } else if (src->nrows > 0) { /* a table over the rows as they are (never freed) */
            const emb_storage keep = {.read_only = src->read_only};
            st = emb_qtable_wrap(t->qtype, src->nrows, t->dim, src->rows,
                                 (size_t)src->nrows * (size_t)t->row_bytes, &keep, &t->qshard);
        }
    } else if (!st) {
        st = make_shard(t, o.generator);
    }
    st = emb__mpi_agree_comm(comm, ms, st, "to create the table");
    if (!st) st = comm_and_types(t, comm, ms);
    if (st) {
        if (t) {
            emb_qtable_free(t->qshard);
            free(t->qdata);
            if (!src) free(t->weight);
        }
        free(t);
        free(begin);
        emb_bag_free(checker);
        return st;
    }
    if (src) {
        t->map = src->map;
        t->mapped = src->base;
        t->mapped_len = src->len;
        t->qfile = src->qfile;
    }
    *out = t;
    return EMB_OK;
}

emb_status emb_mpi_table_create(MPI_Comm comm, int64_t num_embeddings, int64_t embedding_dim,
                                const emb_bag_options *bag_opts, const emb_mpi_shard_options *shard,
                                emb_mpi_table **out) {
    return emb__mpi_create(comm, num_embeddings, embedding_dim, bag_opts, shard, NULL, out);
}

emb_status emb_mpi_table_wrap(MPI_Comm comm, int64_t num_embeddings, emb_tensor *rows,
                              const emb_bag_options *bag_opts, const emb_mpi_shard_options *shard,
                              emb_mpi_table **out) {
    emb__mpi_source src = {.qtype = EMB_QTYPE_F32};
    emb_status st = EMB_OK;
    int64_t D = 0;
    if (!rows)
        st = emb_set_error(EMB_ERR_NULL, "rows must not be NULL");
    else if (!(st = emb_tensor_check(rows, "rows")) &&
             (rows->dtype != EMB_FLOAT32 || rows->ndim != 2))
        st = emb_set_error(EMB_ERR_SHAPE, "rows must be a float32 [rows, embedding_dim] tensor");
    if (!st) {
        src.rows = rows->data;
        src.nrows = rows->shape[0];
        D = rows->shape[1];
    }
    /* a refusal here is agreed too: the others must not wait in create's collectives */
    st = emb__mpi_agree_comm(comm, shard ? shard->timeout_ms : EMB_MPI_TIMEOUT_MS_DEFAULT, st,
                             "to create the table");
    if (st) return st;
    return emb__mpi_create(comm, num_embeddings, D, bag_opts, shard, &src, out);
}

emb_status emb_mpi_table_map_safetensors(MPI_Comm comm, const char *path, const char *tensor,
                                         const emb_bag_options *bag_opts,
                                         const emb_mpi_shard_options *shard, emb_mpi_table **out) {
    emb__mpi_source src = {.qtype = EMB_QTYPE_F32, .read_only = true};
    emb_tensor v;
    int64_t V = 0, D = 0;
    emb_status st = path ? emb_safetensors_open(path, &src.map)
                         : emb_set_error(EMB_ERR_NULL, "path must not be NULL");
    int64_t i = -1;
    if (!st) {
        i = tensor ? emb_safetensors_find(src.map, tensor)
                   : (emb_safetensors_num_tensors(src.map) == 1 ? 0 : -1);
        if (i < 0)
            st = emb_set_error(EMB_ERR_INVALID, "%s: no tensor %s%s", path, tensor ? tensor : "",
                               tensor ? "" : "(name one: the file holds several)");
    }
    if (!st) st = emb_safetensors_view(src.map, i, &v);
    if (!st && (v.dtype != EMB_FLOAT32 || v.ndim != 2))
        st = emb_set_error(EMB_ERR_SHAPE,
                           "%s: the table must be a 2-D F32 tensor (emb_mpi_table_map_qtable "
                           "maps tables of the other storage types)",
                           path);
    int size = 1, rank = 0;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    emb_mpi_shard_options s = shard ? *shard : emb_mpi_shard_options_default();
    if (!st) {
        V = v.shape[0];
        D = v.shape[1];
        int64_t b = 0, e = 0;
        emb__mpi_rows_of(rank, size, V, &s, &b, &e);
        src.rows = (float *)v.data + b * D;
        src.nrows = e - b;
    }
    st = emb__mpi_agree_comm(comm, s.timeout_ms >= 0 ? s.timeout_ms : EMB_MPI_TIMEOUT_MS_DEFAULT,
                             st, "to map the table");
    if (!st) st = emb__mpi_create(comm, V, D, bag_opts, &s, &src, out);
    if (st) emb_safetensors_free(src.map);
    return st;
}

emb_status emb_mpi_table_wrap_qtable(MPI_Comm comm, int64_t num_embeddings, const emb_qtable *rows,
                                     const emb_bag_options *bag_opts,
                                     const emb_mpi_shard_options *shard, emb_mpi_table **out) {
    emb__mpi_source src = {.qtype = EMB_QTYPE_F32};
    emb_status st = EMB_OK;
    int64_t D = 0;
    if (!rows) {
        st = emb_set_error(EMB_ERR_NULL, "rows must not be NULL");
    } else {
        src.qtype = emb_qtable_qtype(rows);
        src.nrows = emb_qtable_num_rows(rows);
        /* written only by the steps, which a read-only table refuses */
        src.rows = src.nrows > 0 ? (void *)(uintptr_t)emb_qtable_data(rows) : NULL;
        src.read_only = emb_qtable_is_read_only(rows);
        D = emb_qtable_dim(rows);
        if (src.qtype == EMB_QTYPE_F32 && (uintptr_t)src.rows % sizeof(float))
            st = emb_set_error(EMB_ERR_INVALID, "the float32 rows are not 4-byte aligned");
    }
    st = emb__mpi_agree_comm(comm, shard ? shard->timeout_ms : EMB_MPI_TIMEOUT_MS_DEFAULT, st,
                             "to create the table");
    if (st) return st;
    return emb__mpi_create(comm, num_embeddings, D, bag_opts, shard, &src, out);
}

emb_status emb_mpi_table_map_qtable(MPI_Comm comm, const char *path,
                                    const emb_bag_options *bag_opts,
                                    const emb_mpi_shard_options *shard, emb_mpi_table **out) {
    emb__mpi_source src = {.qtype = EMB_QTYPE_F32, .read_only = true};
    emb_mpi_shard_options s = shard ? *shard : emb_mpi_shard_options_default();
    int64_t V = 0, D = 0;
    emb_status st = path ? emb_qtable_map(path, &src.qfile, NULL)
                         : emb_set_error(EMB_ERR_NULL, "path must not be NULL");
    int size = 1, rank = 0;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    if (!st) {
        src.qtype = emb_qtable_qtype(src.qfile);
        V = emb_qtable_num_rows(src.qfile);
        D = emb_qtable_dim(src.qfile);
        if (src.qtype != s.qtype)
            st = emb_set_error(EMB_ERR_DTYPE,
                               "%s holds %s rows, but the shard options' qtype is %s (set it to "
                               "the file's storage type)",
                               path, emb_qtype_name(src.qtype), emb_qtype_name(s.qtype));
    }
    if (!st) { /* this rank's rows; only their pages are read, when they are looked up */
        int64_t b = 0, e = 0;
        emb__mpi_rows_of(rank, size, V, &s, &b, &e);
        src.nrows = e - b;
        if (e > b)
            src.rows = (unsigned char *)(uintptr_t)emb_qtable_data(src.qfile) +
                       (size_t)b * (size_t)emb_qtable_row_nbytes(src.qfile);
        if (src.qtype == EMB_QTYPE_F32 && (uintptr_t)src.rows % sizeof(float))
            st = emb_set_error(EMB_ERR_FORMAT, "%s: the float32 rows are not 4-byte aligned", path);
    }
    st = emb__mpi_agree_comm(comm, s.timeout_ms >= 0 ? s.timeout_ms : EMB_MPI_TIMEOUT_MS_DEFAULT,
                             st, "to map the table");
    if (!st) st = emb__mpi_create(comm, V, D, bag_opts, &s, &src, out);
    if (st) emb_qtable_free(src.qfile);
    return st;
}

void emb_mpi_table_free(emb_mpi_table *t) {
    if (!t) return;
    emb_optimizer_free(t->opt);
    emb__mpi_momentum_free(&t->mom);
    emb_bag_free(t->checker);
    emb_qtable_free(t->qshard);
    free(t->qdata);
    if (!t->borrowed) free(t->weight);
    emb_safetensors_free(t->map);
    emb__mpi_unmap(t->mapped, t->mapped_len);
    emb_qtable_free(t->qfile);
    free(t->begin);
    MPI_Type_free(&t->row_type);
    MPI_Type_free(&t->grad_type);
    MPI_Comm_free(&t->comm);
    free(t);
}

int64_t emb_mpi_table_num_embeddings(const emb_mpi_table *t) {
    return t ? t->num_embeddings : 0;
}
int64_t emb_mpi_table_dim(const emb_mpi_table *t) {
    return t ? t->dim : 0;
}

void emb_mpi_table_rows(const emb_mpi_table *t, int64_t *begin, int64_t *end) {
    if (begin) *begin = t ? t->row_begin : 0;
    if (end) *end = t ? t->row_end : 0;
}

int emb_mpi_table_owner(const emb_mpi_table *t, int64_t row) {
    if (!t || row < 0 || row >= t->num_embeddings) return -1;
    int lo = 0, hi = t->size - 1; /* the last r with begin[r] <= row < begin[r + 1] */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (t->begin[mid] <= row)
            lo = mid;
        else
            hi = mid - 1;
    }
    while (t->begin[lo + 1] <= row) lo++; /* skip empty ranks (table-wise) */
    return lo;
}

emb_status emb_mpi_table_shard(emb_mpi_table *t, emb_tensor *view) {
    if (!t) return emb_set_error(EMB_ERR_NULL, "table must not be NULL");
    if (!view) return emb_set_error(EMB_ERR_NULL, "view must not be NULL");
    if (t->qtype != EMB_QTYPE_F32)
        return emb_set_error(EMB_ERR_UNSUPPORTED,
                             "the table's rows are %s, not float32 "
                             "(emb_mpi_table_qshard)",
                             emb_qtype_name(t->qtype));
    int64_t shape[2] = {t->row_end - t->row_begin, t->dim};
    return emb_tensor_init(view, EMB_FLOAT32, t->weight, 2, shape);
}

emb_status emb_mpi_table_gather(emb_mpi_table *t, int root, emb_tensor *full) {
    if (!t) return emb_set_error(EMB_ERR_NULL, "table must not be NULL");
    emb_status st = EMB_OK;
    if (root < 0 || root >= t->size)
        st = emb_set_error(EMB_ERR_INVALID,
                           "root %d is not a rank of the communicator "
                           "(valid: [0, %d))",
                           root, t->size);
    int64_t shape[2] = {t->num_embeddings, t->qtype == EMB_QTYPE_F32 ? t->dim : t->row_bytes};
    if (!st && t->rank == root) {
        if (t->qtype == EMB_QTYPE_F32) {
            st = emb__mpi_check_f32(full, "full", 2, shape);
        } else if (!full) {
            st = emb_set_error(EMB_ERR_NULL, "full must not be NULL");
        } else if (!(st = emb_tensor_check(full, "full")) &&
                   (full->dtype != EMB_UINT8 || full->ndim != 2 || full->shape[0] != shape[0] ||
                    full->shape[1] != shape[1])) {
            st = emb_set_error(EMB_ERR_SHAPE,
                               "full must be uint8 [%" PRId64 ", %" PRId64 "] "
                               "(the %s rows as stored)",
                               shape[0], shape[1], emb_qtype_name(t->qtype));
        }
    }
    st = emb__mpi_agree(t, st, "to gather the table");
    if (st) return st;
    int *counts = NULL, *displs = NULL;
    if (t->rank == root) {
        counts = calloc((size_t)t->size, sizeof *counts);
        displs = calloc((size_t)t->size, sizeof *displs);
        if (!counts || !displs) st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate counts");
        for (int r = 0; !st && r < t->size; r++) {
            counts[r] = (int)(t->begin[r + 1] - t->begin[r]);
            displs[r] = (int)t->begin[r];
        }
    }
    st = emb__mpi_agree(t, st, "to gather the table");
    if (!st) {
        int n = (int)(t->row_end - t->row_begin);
        const void *mine = emb__mpi_stored(t);
        int rc = emb__mpi_gatherv(t->timeout_ms, mine, n, t->row_type, full ? full->data : NULL,
                                  counts, displs, t->row_type, root, t->comm);
        if (rc != MPI_SUCCESS) st = emb__mpi_fail(rc, "MPI_Gatherv");
        if (t->rank != root) t->stats.row_bytes += (uint64_t)n * (uint64_t)t->row_bytes;
        if (t->rank != root) t->stats.bytes_sent += (uint64_t)n * (uint64_t)t->row_bytes;
    }
    free(counts);
    free(displs);
    return st;
}

/* The options as one record of doubles, for comparing them between ranks. */
#define OPT_N 14 /* the options, and whether the optimizer is for dense steps */
static void opt_record(const emb_optimizer_options *o, bool dense, double *r) {
    double v[OPT_N] = {o->kind,     o->lr,
                       o->momentum, o->dampening,
                       o->nesterov, o->weight_decay,
                       o->lr_decay, o->initial_accumulator_value,
                       o->eps,      o->beta1,
                       o->beta2,    o->amsgrad,
                       o->maximize, dense};
    memcpy(r, v, sizeof v);
}

/* What libemb's sparse step says of these options: one step of an empty sparse gradient
 * on a 1 x 1 parameter (weight_decay with SGD or Adagrad is refused there, as in PyTorch). */
emb_status emb__mpi_sparse_probe(const emb_optimizer_options *opts) {
    float w0 = 0.0f;
    const int64_t shape[2] = {1, 1};
    emb_tensor w;
    emb_optimizer *opt = NULL;
    emb_sparse_grad g;
    memset(&g, 0, sizeof g);
    emb_status st = emb_tensor_init(&w, EMB_FLOAT32, &w0, 2, shape);
    if (!st) st = emb_optimizer_create(opts, &opt);
    if (!st) st = emb_optimizer_add_param(opt, &w, NULL);
    if (!st) st = emb_sparse_grad_init(&g, 1, 1);
    if (!st) st = emb_optimizer_step_sparse(opt, 0, &g);
    emb_sparse_grad_release(&g);
    emb_optimizer_free(opt);
    return st;
}

/* The optimizer of the shard, for sparse steps or (dense) for emb_mpi_table_step_dense. */
static emb_status set_optimizer(emb_mpi_table *t, const emb_optimizer_options *opts, bool dense) {
    if (!t) return emb_set_error(EMB_ERR_NULL, "table must not be NULL");
    emb_status st = EMB_OK;
    emb_optimizer *opt = NULL;
    if (!opts) {
        st = emb_set_error(EMB_ERR_NULL, "opts must not be NULL");
    } else if (!dense && (st = emb__mpi_sparse_probe(opts)) != EMB_OK) {
        /* libemb's own refusal of these options for sparse gradients */
    } else if (dense && t->qtype != EMB_QTYPE_F32) {
        st = emb_set_error(EMB_ERR_UNSUPPORTED,
                           "a table of %s rows has no dense optimizer (float32 rows only)",
                           emb_qtype_name(t->qtype));
    } else if (t->qtype != EMB_QTYPE_F32 && opts->kind == EMB_OPTIMIZER_SGD &&
               opts->momentum != 0) {
        st = emb_set_error(EMB_ERR_UNSUPPORTED, "a table of %s rows is trained without momentum",
                           emb_qtype_name(t->qtype));
    } else if (t->qtype != EMB_QTYPE_F32 &&
               (opts->kind != EMB_OPTIMIZER_SGD ||
                (t->qtype != EMB_QTYPE_F16 && t->qtype != EMB_QTYPE_BF16))) {
        st = emb_set_error(EMB_ERR_UNSUPPORTED,
                           "a table of %s rows is trained with SGD on "
                           "f16 or bf16 rows only",
                           emb_qtype_name(t->qtype));
    } else {
        st = emb_optimizer_create(opts, &opt); /* validates the options */
        if (!st && t->weight) {
            emb_tensor w;
            st = emb_mpi_table_shard(t, &w);
            if (!st) st = emb_optimizer_add_param(opt, &w, NULL);
        }
    }
    double mine[OPT_N], root[OPT_N];
    memset(mine, 0, sizeof mine);
    if (opts) opt_record(opts, dense, mine);
    memcpy(root, mine, sizeof root);
    int rc = emb__mpi_bcast(t->timeout_ms, root, OPT_N, MPI_DOUBLE, 0, t->comm);
    if (rc != MPI_SUCCESS && !st) st = emb__mpi_fail(rc, "MPI_Bcast");
    t->stats.bytes_sent += t->rank == 0 && t->size > 1 ? sizeof root : 0;
    if (!st && memcmp(mine, root, sizeof mine))
        st = emb_set_error(EMB_ERR_INVALID,
                           "optimizer options differ between ranks (rank %d's "
                           "are not rank 0's)",
                           t->rank);
    st = emb__mpi_agree(t, st, "the optimizer");
    if (st) {
        emb_optimizer_free(opt);
        return st;
    }
    emb_optimizer_free(t->opt);
    if (!t->weight) {
        emb_optimizer_free(opt);
        opt = NULL;
    }
    t->opt = opt;
    t->have_opt = true;
    t->opt_dense = dense;
    t->opt_kind = opts->kind;
    t->opt_opts = *opts;
    emb__mpi_momentum_free(&t->mom);
    t->qlr = (float)opts->lr;
    return EMB_OK;
}

emb_status emb_mpi_table_set_optimizer(emb_mpi_table *t, const emb_optimizer_options *opts) {
    return set_optimizer(t, opts, false);
}

emb_status emb_mpi_table_set_optimizer_dense(emb_mpi_table *t, const emb_optimizer_options *opts) {
    return set_optimizer(t, opts, true);
}

emb_optimizer *emb_mpi_table_optimizer(emb_mpi_table *t) {
    return t ? t->opt : NULL;
}

const emb_qtable *emb_mpi_table_qshard(const emb_mpi_table *t) {
    return t ? t->qshard : NULL;
}

emb_mpi_stats emb_mpi_table_stats(const emb_mpi_table *t) {
    emb_mpi_stats s;
    memset(&s, 0, sizeof s);
    return t ? t->stats : s;
}

void emb_mpi_table_reset_stats(emb_mpi_table *t) {
    if (t) memset(&t->stats, 0, sizeof t->stats);
}
