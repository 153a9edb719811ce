/* src/quant/qfile.c: reduced-precision and quantized tables in safetensors files
 * (include/emb/quant.h "Files", docs/quantization.md): a streaming writer that converts
 * float32 rows batch by batch and completes its header with the quantization error, saving,
 * loading and read-only mapping. */
#include "quant_internal.h"

#include "internal.h"
#include "io/io_face.h"
#include "quant_face.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Room left in the header for the error values written at commit. */
#define Q_HEADER_SLACK 96

struct emb_qtable_writer {
    emb__writer w;
    emb_qtype qtype;
    int64_t rows, dim, rb, done;
    uint64_t header_len; /* reserved, padded: the data starts at 8 + header_len */
    char *words, *counts;
    uint8_t *qbuf;
    float *deq;
    int64_t chunk; /* rows per conversion batch */
    bool track_error;
    bool error_in_header;
    emb_qerror err;
    emb_status status;
    bool finished; /* committed (or its commit failed): the file is closed */
};

static const char *st_dtype_of(emb_qtype q) {
    switch (q) {
    case EMB_QTYPE_F32:
        return "F32";
    case EMB_QTYPE_F16:
        return "F16";
    case EMB_QTYPE_BF16:
        return "BF16";
    default:
        return "U8";
    }
}

static bool is_float_qtype(emb_qtype q) {
    return q == EMB_QTYPE_F32 || q == EMB_QTYPE_F16 || q == EMB_QTYPE_BF16;
}

/* The JSON header; err NULL: no error entries; placeholder: error entries of value "0". */
static char *build_header(const emb_qtable_writer *q, const emb_qerror *err) {
    json_t *root = json_object(), *meta = json_object(), *e = json_object();
    char *out = NULL;
    if (!root || !meta || !e) goto done;
    char buf[64];
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(meta, "emb.qtype", json_string(emb_qtype_name(q->qtype)));
    snprintf(buf, sizeof buf, "%" PRId64, q->dim);
    json_object_set_new(meta, "emb.dim", json_string(buf));
    if (err) {
        const double v[3] = {err->max_abs, err->mean_abs, err->mean_cosine};
        const char *k[3] = {"emb.error.max_abs", "emb.error.mean_abs", "emb.error.mean_cosine"};
        for (int i = 0; i < 3; i++) {
            snprintf(buf, sizeof buf, "%.9g", v[i]);
            json_object_set_new(meta, k[i], json_string(buf));
        }
    }
    if (q->words) json_object_set_new(meta, EMB__ST_VOCAB_KEY, json_string(q->words));
    if (q->counts) json_object_set_new(meta, EMB__ST_COUNTS_KEY, json_string(q->counts));
    json_object_set_new(root, "__metadata__", meta);
    meta = NULL;
    json_t *shape = json_array(), *offs = json_array();
    json_array_append_new(shape, json_integer(q->rows));
    json_array_append_new(shape, json_integer(is_float_qtype(q->qtype) ? q->dim : q->rb));
    json_array_append_new(offs, json_integer(0));
    json_array_append_new(offs, json_integer(q->rows * q->rb));
    json_object_set_new(e, "dtype", json_string(st_dtype_of(q->qtype)));
    json_object_set_new(e, "shape", shape);
    json_object_set_new(e, "data_offsets", offs);
    json_object_set_new(root, "weight", e);
    e = NULL;
    out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
done:
    json_decref(e);
    json_decref(meta);
    json_decref(root);
    return out;
}

static void writer_free(emb_qtable_writer *q) {
    free(q->words);
    free(q->counts);
    emb__free(q->qbuf);
    emb__free(q->deq);
    free(q);
}

static emb_status writer_open(const char *path, emb_qtype qtype, int64_t rows, int64_t dim,
                              const emb_vocab *vocab, bool track_error, emb_qtable_writer **out) {
    if (!path) return emb__null("path");
    if (!out) return emb__null("out");
    int64_t rb;
    emb_status st = emb_qtype_row_nbytes(qtype, dim, &rb);
    if (st) return st;
    if (rows < 0) return emb__error(EMB_ERR_SHAPE, "rows must be >= 0, got %" PRId64, rows);
    int64_t data;
    if (!emb__mul_i64(rows, rb, &data) || (uint64_t)data > (uint64_t)SIZE_MAX / 2)
        return emb__error(EMB_ERR_OVERFLOW,
                          "%s: %" PRId64 " rows of %" PRId64
                          " bytes do not fit in the address space",
                          path, rows, rb);
    emb_qtable_writer *q = calloc(1, sizeof *q);
    if (!q) return emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
    q->w.fd = -1;
    q->qtype = qtype;
    q->rows = rows;
    q->dim = dim;
    q->rb = rb;
    q->track_error = track_error && rows > 0 && dim > 0;
    emb_qerror_init(&q->err);
    st = emb__st_vocab_metadata(path, vocab, rows, &q->words, &q->counts);
    if (st) {
        writer_free(q);
        return st;
    }
    /* Conversion buffers for a batch of rows, sized from the rows there are (none for a
     * table without rows or of dimension 0: nothing is converted). */
    q->chunk = dim > 0 ? (1 << 20) / dim + 1 : 1;
    if (q->chunk > rows) q->chunk = rows > 0 ? rows : 1;
    const bool convert = rows > 0 && rb > 0;
    q->qbuf = convert ? emb__malloc((size_t)(q->chunk * rb)) : NULL;
    q->deq = q->track_error ? emb__malloc((size_t)(q->chunk * dim) * sizeof(float)) : NULL;
    if ((convert && !q->qbuf) || (q->track_error && !q->deq)) {
        const int64_t chunk = q->chunk;
        writer_free(q);
        return emb__error(EMB_ERR_NOMEM,
                          "%s: out of memory for a batch of %" PRId64 " rows of %" PRId64 " bytes",
                          path, chunk, rb);
    }
    st = emb__writer_open(&q->w, path);
    if (st) {
        writer_free(q);
        return st;
    }
    /* The error goes into the header when the header can be completed after the rows: not
     * through a device or a FIFO (the error is still reported to the caller). */
    q->error_in_header = q->track_error && emb__writer_seekable(&q->w);
    emb_qerror placeholder;
    emb_qerror_init(&placeholder);
    char *hdr = build_header(q, q->error_in_header ? &placeholder : NULL);
    if (!hdr) {
        emb__writer_abort(&q->w);
        writer_free(q);
        return emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t hl = strlen(hdr);
    q->header_len = (hl + (q->error_in_header ? Q_HEADER_SLACK : 0) + 7) / 8 * 8;
    st = emb__writer_preallocate(&q->w, 8 + q->header_len + (uint64_t)data);
    if (!st) {
        unsigned char len8[8];
        emb__put_u64le(len8, q->header_len);
        emb__writer_put(&q->w, len8, 8);
        emb__writer_put(&q->w, hdr, hl);
        for (size_t k = hl; k < q->header_len; k++) emb__writer_put(&q->w, " ", 1);
        st = q->w.status;
    }
    free(hdr);
    if (st) {
        emb__writer_abort(&q->w);
        writer_free(q);
        return st;
    }
    *out = q;
    return EMB_OK;
}

emb_status emb_qtable_writer_open(const char *path, emb_qtype qtype, int64_t rows, int64_t dim,
                                  const emb_vocab *vocab, emb_qtable_writer **out) {
    return writer_open(path, qtype, rows, dim, vocab, true, out);
}

static emb_status writer_fail(emb_qtable_writer *q, emb_status st) {
    if (!q->status) q->status = st;
    return q->status;
}

static emb_status writer_finished(void) {
    return emb__error(EMB_ERR_STATE, "the table writer has already been committed");
}

emb_status emb_qtable_writer_append(emb_qtable_writer *q, const float *rows, int64_t n) {
    if (!q) return emb__null("writer");
    if (q->finished) return writer_finished();
    if (q->status) return q->status;
    if (n < 0) return emb__error(EMB_ERR_SHAPE, "n must be >= 0, got %" PRId64, n);
    if (n > q->rows - q->done)
        return writer_fail(q, emb__error(EMB_ERR_INVALID,
                                         "%s: %" PRId64 " more rows appended, but only %" PRId64
                                         " of the announced %" PRId64 " remain",
                                         q->w.dest, n, q->rows - q->done, q->rows));
    if (n == 0) return EMB_OK;
    if (!rows && q->dim > 0) return writer_fail(q, emb__null("rows"));
    if (q->rb == 0) { /* dimension 0: rows without bytes */
        q->done += n;
        return EMB_OK;
    }
    const emb__qkernel_table *K = emb__qkernels();
    for (int64_t r = 0; r < n; r += q->chunk) {
        const int64_t k = n - r < q->chunk ? n - r : q->chunk;
        const float *src = rows + r * q->dim;
        emb_status st = emb__quantize_rows_from(q->qtype, src, k, q->dim, q->qbuf,
                                                (size_t)(k * q->rb), q->done + r);
        if (st) return writer_fail(q, st);
        if (q->track_error) {
            K->rows(q->qtype, q->deq, q->qbuf, q->rb, q->dim, 0, k);
            emb_qerror_add(&q->err, src, q->deq, k, q->dim);
        }
        if (emb__writer_put(&q->w, q->qbuf, (size_t)(k * q->rb)))
            return writer_fail(q, q->w.status);
    }
    q->done += n;
    return EMB_OK;
}

/* Appends already-stored rows (emb_qtable_save). */
static emb_status writer_append_raw(emb_qtable_writer *q, const void *data, size_t nbytes,
                                    int64_t n) {
    if (emb__writer_put(&q->w, data, nbytes)) return writer_fail(q, q->w.status);
    q->done += n;
    return EMB_OK;
}

void emb_qtable_writer_free(emb_qtable_writer *q) {
    if (!q) return;
    emb__writer_abort(&q->w); /* nothing left to remove after a commit */
    writer_free(q);
}

emb_status emb_qtable_writer_commit(emb_qtable_writer *q, emb_qerror *error) {
    if (!q) return emb__null("writer");
    if (q->finished) return writer_finished();
    q->finished = true;
    emb_status st = q->status;
    if (!st && q->done != q->rows)
        st = emb__error(EMB_ERR_STATE,
                        "%s: %" PRId64 " of the announced %" PRId64
                        " rows were appended; nothing is written",
                        q->w.dest, q->done, q->rows);
    if (!st && q->error_in_header) {
        char *hdr = build_header(q, &q->err);
        if (!hdr) {
            st = emb__error(EMB_ERR_NOMEM, "%s: out of memory", q->w.dest);
        } else {
            size_t hl = strlen(hdr);
            if (hl > q->header_len) {
                st = emb__error(EMB_ERR_STATE,
                                "%s: the final header (%zu bytes) outgrew its room (%llu)",
                                q->w.dest, hl, (unsigned long long)q->header_len);
            } else {
                char *padded = malloc(q->header_len);
                if (!padded) {
                    st = emb__error(EMB_ERR_NOMEM, "%s: out of memory", q->w.dest);
                } else {
                    memcpy(padded, hdr, hl);
                    memset(padded + hl, ' ', q->header_len - hl);
                    st = emb__writer_pwrite(&q->w, 8, padded, q->header_len);
                    free(padded);
                }
            }
            free(hdr);
        }
    }
    if (st) {
        emb__writer_abort(&q->w);
        return st;
    }
    st = emb__writer_commit(&q->w);
    if (!st && error) *error = q->err;
    return st;
}

emb_status emb_qtable_save(const char *path, const emb_qtable *t, const emb_vocab *vocab) {
    if (!t) return emb__null("table");
    emb_qtable_writer *q;
    emb_status st = writer_open(path, emb_qtable_qtype(t), emb_qtable_num_rows(t),
                                emb_qtable_dim(t), vocab, false, &q);
    if (st) return st;
    writer_append_raw(q, emb_qtable_data(t), emb_qtable_nbytes(t), emb_qtable_num_rows(t));
    st = emb_qtable_writer_commit(q, NULL);
    emb_qtable_writer_free(q);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * Reading
 * ------------------------------------------------------------------------------------- */

static emb_status q_fail(const char *path, const char *fmt, const char *a, const char *b) {
    char msg[400];
    snprintf(msg, sizeof msg, fmt, a, b);
    return emb__error(EMB_ERR_FORMAT, "%s: %s", path, msg);
}

/* The table found in an open file: its storage type, shape, and bytes in the file (not
 * necessarily aligned for the element type). */
typedef struct q_found {
    emb_qtype q;
    int64_t rows, dim;
    const unsigned char *data;
    size_t nbytes;
    size_t align; /* the element type's alignment */
    const char *name;
} q_found;

/* Finds the table in an open file and checks it against its metadata. */
static emb_status find_table(const char *path, const emb_safetensors *st, q_found *out) {
    int64_t i = emb_safetensors_find(st, "weight");
    if (i < 0) {
        if (emb_safetensors_num_tensors(st) != 1)
            return q_fail(path, "no tensor named \"weight\", and %s tensors to choose from%s",
                          emb_safetensors_num_tensors(st) ? "several" : "no", "");
        i = 0;
    }
    const char *dt = emb_safetensors_dtype(st, i);
    const char *meta_q = emb_safetensors_metadata(st, "emb.qtype");
    emb_qtype q;
    if (meta_q) {
        if (emb_qtype_parse(meta_q, &q))
            return q_fail(path, "__metadata__ \"emb.qtype\" is \"%s\"%s", meta_q,
                          ", not f32, f16, bf16, int8 or int4");
        if (strcmp(dt, st_dtype_of(q)))
            return emb__error(EMB_ERR_FORMAT,
                              "%s: tensor \"%s\" is %s, but \"emb.qtype\" says %s, stored as %s",
                              path, emb_safetensors_name(st, i), dt, meta_q, st_dtype_of(q));
    } else if (!strcmp(dt, "F32")) {
        q = EMB_QTYPE_F32;
    } else if (!strcmp(dt, "F16")) {
        q = EMB_QTYPE_F16;
    } else if (!strcmp(dt, "BF16")) {
        q = EMB_QTYPE_BF16;
    } else if (!strcmp(dt, "U8")) {
        q = EMB_QTYPE_INT8;
    } else {
        return q_fail(path,
                      "tensor dtype %s is not a table storage type (F32, F16, BF16, or U8 rows)%s",
                      dt, "");
    }
    int ndim;
    const int64_t *shape = emb_safetensors_shape(st, i, &ndim);
    if (ndim != 2)
        return emb__error(EMB_ERR_FORMAT, "%s: tensor \"%s\" has %d dimensions; a table has 2",
                          path, emb_safetensors_name(st, i), ndim);
    const int64_t V = shape[0], cols = shape[1];
    const size_t esz = q == EMB_QTYPE_F32 ? 4 : q == EMB_QTYPE_F16 || q == EMB_QTYPE_BF16 ? 2 : 1;
    const char *meta_d = emb_safetensors_metadata(st, "emb.dim");
    int64_t d;
    if (meta_d) {
        if (!emb__parse_count(meta_d, strlen(meta_d), &d))
            return q_fail(path, "__metadata__ \"emb.dim\" is \"%s\"%s", meta_d,
                          ", not a dimension");
    } else if (is_float_qtype(q)) {
        d = cols;
    } else if (q == EMB_QTYPE_INT8) {
        d = cols - 8;
    } else {
        d = (cols - 4) * 2;
    }
    int64_t rb = 0;
    int64_t have = is_float_qtype(q) ? cols * (int64_t)esz : cols;
    if (d < (is_float_qtype(q) ? 0 : 1) || emb_qtype_row_nbytes(q, d, &rb) || rb != have) {
        emb_clear_error();
        if (is_float_qtype(q))
            return emb__error(EMB_ERR_FORMAT,
                              "%s: rows of %" PRId64 " values, but \"emb.dim\" says %" PRId64, path,
                              cols, d);
        return emb__error(
            EMB_ERR_FORMAT,
            "%s: row size %" PRId64 " bytes, but %s rows of dim %" PRId64 " take %" PRId64
            " (%s); the file's scale/bias region does not match its header",
            path, cols, emb_qtype_name(q), d, rb,
            q == EMB_QTYPE_INT8 ? "dim codes, 4-byte scale, 4-byte bias"
                                : "ceil(dim/2) bytes of codes, 2-byte scale, 2-byte bias");
    }
    out->q = q;
    out->rows = V;
    out->dim = d;
    out->data = emb__safetensors_bytes(st, i, &out->nbytes);
    out->align = esz;
    out->name = emb_safetensors_name(st, i);
    return EMB_OK;
}

static bool aligned(const q_found *t) {
    return (uintptr_t)t->data % t->align == 0;
}

static void release_owned(void *data, void *ctx) {
    (void)ctx;
    emb__free(data);
}

static void release_map(void *data, void *ctx) {
    (void)data;
    emb__file *f = ctx;
    emb__file_close(f);
    free(f);
}

static emb_status open_common(const char *path, bool map, emb_qtable **out, emb_vocab **vocab) {
    if (!path) return emb__null("path");
    if (!out) return emb__null("out");
    emb_safetensors *st;
    emb_status rc = emb_safetensors_open(path, &st);
    if (rc) return rc;
    q_found t;
    emb_vocab *v = NULL;
    emb_qtable *qt = NULL;
    rc = find_table(path, st, &t);
    if (!rc && vocab) rc = emb__safetensors_vocab(st, t.rows, t.rows, &v);
    if (!rc && map && !aligned(&t))
        rc = emb__error(EMB_ERR_UNSUPPORTED,
                        "%s: tensor \"%s\" is not aligned for its element type in this file: it "
                        "can be loaded (a "
                        "copy), not mapped",
                        path, t.name);
    if (!rc && !map) {
        void *data = emb__malloc(t.nbytes ? t.nbytes : 1);
        if (!data) {
            rc = emb__error(EMB_ERR_NOMEM, "%s: cannot allocate %zu bytes for the table", path,
                            t.nbytes);
        } else {
            if (t.nbytes) memcpy(data, t.data, t.nbytes);
            emb_storage s = {.read_only = false, .release = release_owned, .release_ctx = NULL};
            rc = emb_qtable_wrap(t.q, t.rows, t.dim, data, t.nbytes, &s, &qt);
            if (rc)
                emb__free(data);
            else
                emb__qtable_set_in_memory(qt);
        }
    } else if (!rc) {
        emb__file *f = malloc(sizeof *f);
        if (!f) rc = emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
        if (!rc) rc = emb__safetensors_take_file(st, f);
        if (!rc) {
            madvise((void *)f->data, f->size, MADV_RANDOM);
            emb_storage s = {.read_only = true, .release = release_map, .release_ctx = f};
            rc = emb_qtable_wrap(t.q, t.rows, t.dim, t.nbytes ? t.data : NULL, t.nbytes, &s, &qt);
            if (rc) emb__file_close(f);
        }
        if (rc) free(f);
    }
    emb_safetensors_free(st);
    if (rc) {
        emb_vocab_free(v);
        return rc;
    }
    *out = qt;
    if (vocab) *vocab = v;
    return EMB_OK;
}

emb_status emb_qtable_load(const char *path, emb_qtable **out, emb_vocab **vocab) {
    return open_common(path, false, out, vocab);
}

emb_status emb_qtable_map(const char *path, emb_qtable **out, emb_vocab **vocab) {
    return open_common(path, true, out, vocab);
}

emb_status emb__qtable_read_vectors(const emb_safetensors *st, const char *path, int64_t limit,
                                    emb_vectors *out) {
    q_found t;
    emb_status rc = find_table(path, st, &t);
    if (rc) return rc;
    const int64_t rows = limit > 0 && limit < t.rows ? limit : t.rows;
    const size_t nbytes = t.rows ? t.nbytes / (size_t)t.rows * (size_t)rows : 0;
    /* the element type's alignment: data that is not aligned in the file is copied first */
    void *copy = NULL;
    const void *data = t.data;
    if (nbytes && !aligned(&t)) {
        if (!(copy = emb__malloc(nbytes)))
            return emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
        memcpy(copy, t.data, nbytes);
        data = copy;
    }
    emb_qtable *qt = NULL;
    rc = emb_qtable_wrap(t.q, rows, t.dim, nbytes ? data : NULL, nbytes, NULL, &qt);
    if (!rc) rc = emb__alloc_table(&out->weight, rows, t.dim);
    if (!rc && rows > 0 && t.dim > 0) rc = emb_qtable_dequantize(qt, 0, rows, out->weight.data);
    emb_qtable_free(qt);
    emb__free(copy);
    if (!rc) rc = emb__safetensors_vocab(st, rows, t.rows, &out->vocab);
    if (rc) {
        emb_tensor_release(&out->weight);
        return rc;
    }
    out->file_dtype = EMB_UINT8;
    out->file_rows = t.rows;
    return EMB_OK;
}
