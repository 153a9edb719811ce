/* safetensors: validated reading (mapped), writing in the reference layout, tables with
 * their vocabulary in __metadata__, zero-copy embeddings over the mapping. */
#include "io_internal.h"
#include "half.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define ST_MAX_HEADER EMB__ST_MAX_HEADER
#define ST_MAX_RANK   64

typedef struct st_dtype {
    const char *name;
    int bits;
    int emb; /* emb_dtype, or -1 when emb_tensor cannot hold it */
} st_dtype;

static const st_dtype st_dtypes[] = {
    {"BOOL", 8, EMB_BOOL},
    {"U8", 8, EMB_UINT8},
    {"I8", 8, EMB_INT8},
    {"F8_E5M2", 8, -1},
    {"F8_E4M3", 8, -1},
    {"I16", 16, EMB_INT16},
    {"U16", 16, -1},
    {"F16", 16, EMB_FLOAT16},
    {"BF16", 16, EMB_BFLOAT16},
    {"I32", 32, EMB_INT32},
    {"U32", 32, -1},
    {"F32", 32, EMB_FLOAT32},
    {"F64", 64, EMB_FLOAT64},
    {"I64", 64, EMB_INT64},
    {"U64", 64, -1},
    {"F8_E8M0", 8, -1},
    {"F8_E4M3FNUZ", 8, -1},
    {"F8_E5M2FNUZ", 8, -1},
    {"C64", 64, -1},
    {"F4", 4, -1},
    {"F6_E2M3", 6, -1},
    {"F6_E3M2", 6, -1},
};
#define ST_NDTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

typedef struct st_entry {
    char *name;
    int dt; /* index into st_dtypes */
    int ndim;
    int64_t shape[ST_MAX_RANK];
    uint64_t begin, end;
} st_entry;

struct emb_safetensors {
    char *path;
    emb__file file;
    const unsigned char *buffer; /* start of the byte buffer */
    int64_t n;
    st_entry *e;
    int64_t nmeta;
    char **mkeys, **mvals;
};

static emb_status st_fail(const char *path, const char *fmt, ...) EMB__PRINTF(2, 3);
static emb_status st_fail(const char *path, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return emb__error(EMB_ERR_FORMAT, "%s: invalid safetensors file: %s", path, msg);
}

void emb_safetensors_free(emb_safetensors *st) {
    if (!st) return;
    for (int64_t i = 0; i < st->n; i++) free(st->e[i].name);
    for (int64_t i = 0; i < st->nmeta; i++) free(st->mkeys[i]), free(st->mvals[i]);
    free(st->e);
    free(st->mkeys);
    free(st->mvals);
    emb__file_close(&st->file);
    free(st->path);
    free(st);
}

static int cmp_entry(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static bool json_u64(const json_t *j, uint64_t *out) {
    if (!json_is_integer(j)) return false;
    json_int_t v = json_integer_value(j);
    if (v < 0) return false;
    *out = (uint64_t)v;
    return true;
}

/* The "__metadata__" object: string values only. */
static emb_status parse_metadata(emb_safetensors *st, const char *path, json_t *val) {
    if (!json_is_object(val)) return st_fail(path, "__metadata__ is not an object");
    size_t m = json_object_size(val);
    st->mkeys = calloc(m ? m : 1, sizeof *st->mkeys);
    st->mvals = calloc(m ? m : 1, sizeof *st->mvals);
    if (!st->mkeys || !st->mvals)
        return emb__error(EMB_ERR_NOMEM, "%s: out of memory for the metadata", path);
    const char *mk;
    json_t *mv;
    json_object_foreach(val, mk, mv) {
        if (!json_is_string(mv))
            return st_fail(path, "__metadata__ value of \"%.100s\" is not a string", mk);
        st->mkeys[st->nmeta] = strdup(mk);
        st->mvals[st->nmeta] = strndup(json_string_value(mv), json_string_length(mv));
        st->nmeta++;
        if (!st->mkeys[st->nmeta - 1] || !st->mvals[st->nmeta - 1])
            return emb__error(EMB_ERR_NOMEM, "%s: out of memory for the metadata", path);
    }
    return EMB_OK;
}

/* One tensor's entry, into e: dtype, shape, data_offsets, and the byte size they agree on. */
static emb_status parse_entry(st_entry *e, const char *path, const char *key, json_t *val) {
    if (!json_is_object(val))
        return st_fail(path, "the entry of tensor \"%.100s\" is not an object", key);
    json_t *jd = json_object_get(val, "dtype"), *js = json_object_get(val, "shape"),
           *jo = json_object_get(val, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo))
        return st_fail(
            path,
            "tensor \"%.100s\" needs \"dtype\" (a string), \"shape\" and \"data_offsets\" (arrays)",
            key);
    e->dt = -1;
    for (int k = 0; k < ST_NDTYPES; k++)
        if (!strcmp(json_string_value(jd), st_dtypes[k].name)) e->dt = k;
    if (e->dt < 0)
        return st_fail(path, "tensor \"%.100s\" has the unknown dtype \"%.40s\"", key,
                       json_string_value(jd));
    if (json_array_size(js) > ST_MAX_RANK)
        return st_fail(path, "tensor \"%.100s\" has %zu dimensions (more than %d)", key,
                       json_array_size(js), ST_MAX_RANK);
    e->ndim = (int)json_array_size(js);
    bool empty = false;
    for (int d = 0; d < e->ndim; d++) {
        uint64_t s;
        if (!json_u64(json_array_get(js, (size_t)d), &s))
            return st_fail(path, "tensor \"%.100s\": shape entry %d is not a non-negative integer",
                           key, d);
        e->shape[d] = (int64_t)s;
        empty |= s == 0;
    }
    /* The byte size; a shape with a zero anywhere holds nothing, however large the
     * other entries (what emb writes, it reads). */
    uint64_t bits = (uint64_t)st_dtypes[e->dt].bits;
    for (int d = 0; d < e->ndim && !empty; d++)
        if (__builtin_mul_overflow(bits, (uint64_t)e->shape[d], &bits))
            return st_fail(path, "tensor \"%.100s\": the byte size of its shape overflows", key);
    if (empty) bits = 0;
    if (json_array_size(jo) != 2 || !json_u64(json_array_get(jo, 0), &e->begin) ||
        !json_u64(json_array_get(jo, 1), &e->end))
        return st_fail(path, "tensor \"%.100s\": data_offsets must be two non-negative integers",
                       key);
    if (bits % 8)
        return st_fail(path, "tensor \"%.100s\": %llu bits is not a whole number of bytes", key,
                       (unsigned long long)bits);
    if (e->end < e->begin)
        return st_fail(path, "tensor \"%.100s\": data_offsets [%llu, %llu] end before they begin",
                       key, (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end - e->begin != bits / 8)
        return st_fail(
            path,
            "tensor \"%.100s\": data_offsets [%llu, %llu] hold %llu bytes but %s%s needs %llu", key,
            (unsigned long long)e->begin, (unsigned long long)e->end,
            (unsigned long long)(e->end - e->begin), st_dtypes[e->dt].name, " of its shape",
            (unsigned long long)(bits / 8));
    e->name = strdup(key);
    if (!e->name) return emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
    return EMB_OK;
}

/* The tensors (sorted by offset) cover the data buffer exactly: no overlap, no hole. */
static emb_status check_coverage(const emb_safetensors *st, const char *path, uint64_t buf_size) {
    uint64_t at = 0;
    for (int64_t i = 0; i < st->n; i++) {
        if (st->e[i].begin != at)
            return st->e[i].begin < at
                       ? st_fail(path,
                                 "tensor \"%.100s\" (bytes [%llu, %llu)) overlaps the previous "
                                 "tensor, which ends at %llu",
                                 st->e[i].name, (unsigned long long)st->e[i].begin,
                                 (unsigned long long)st->e[i].end, (unsigned long long)at)
                       : st_fail(
                             path,
                             "a hole in the data buffer: bytes [%llu, %llu) belong to no tensor",
                             (unsigned long long)at, (unsigned long long)st->e[i].begin);
        at = st->e[i].end;
    }
    if (at == buf_size) return EMB_OK;
    return at > buf_size
               ? st_fail(path,
                         "tensor data extends to byte %llu of the data buffer but the file holds "
                         "only %llu "
                         "(truncated file or out-of-range offsets)",
                         (unsigned long long)at, (unsigned long long)buf_size)
               : st_fail(
                     path,
                     "%llu bytes after the last tensor's data (the buffer must be covered exactly)",
                     (unsigned long long)(buf_size - at));
}

static emb_status parse_header(emb_safetensors *st, const char *path, const unsigned char *h,
                               size_t hlen, uint64_t buf_size) {
    if (hlen == 0 || h[0] != '{') return st_fail(path, "the header does not start with '{'");
    json_error_t jerr;
    json_t *root = json_loadb((const char *)h, hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return st_fail(path, "header JSON: %s (header byte %d)", jerr.text, jerr.position);
    emb_status rc = EMB_OK;
    if (!json_is_object(root)) {
        rc = st_fail(path, "the header is not a JSON object");
        goto out;
    }
    size_t cnt = json_object_size(root);
    st->e = calloc(cnt ? cnt : 1, sizeof *st->e);
    if (!st->e) {
        rc = emb__error(EMB_ERR_NOMEM, "%s: out of memory for %zu tensor entries", path, cnt);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if ((rc = parse_metadata(st, path, val))) goto out;
            continue;
        }
        if ((rc = parse_entry(&st->e[st->n], path, key, val))) goto out;
        st->n++;
    }
    qsort(st->e, (size_t)st->n, sizeof *st->e, cmp_entry);
    rc = check_coverage(st, path, buf_size);
out:
    json_decref(root);
    return rc;
}

emb_status emb_safetensors_open(const char *path, emb_safetensors **out) {
    if (!path) return emb__null("path");
    if (!out) return emb__null("out");
    emb__file f;
    emb_status rc = emb__file_open(path, &f, 0);
    if (rc) return rc;
    return emb__safetensors_open_file(path, &f, out);
}

emb_status emb__safetensors_open_file(const char *path, emb__file *f, emb_safetensors **out) {
    emb_safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(path))) {
        free(st);
        emb__file_close(f);
        return emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
    }
    st->file = *f;
    memset(f, 0, sizeof *f);
    f->fd = -1;
    emb_status rc;
    const unsigned char *d = st->file.data;
    size_t size = st->file.size;
    if (size < 8) {
        rc = st_fail(path, "%zu bytes, shorter than the 8-byte header length", size);
    } else {
        const uint64_t hl = emb__get_u64le(d);
        if (hl > ST_MAX_HEADER)
            rc = st_fail(path, "the header length %llu exceeds the limit of %llu bytes",
                         (unsigned long long)hl, ST_MAX_HEADER);
        else if (hl > size - 8)
            rc = st_fail(path,
                         "the header length %llu exceeds the %zu bytes after the length field "
                         "(truncated file?)",
                         (unsigned long long)hl, size - 8);
        else {
            st->buffer = d + 8 + hl;
            rc = parse_header(st, path, d + 8, (size_t)hl, size - 8 - hl);
        }
    }
    if (rc) {
        emb_safetensors_free(st);
        return rc;
    }
    if (st->file.mapped) madvise((void *)st->file.data, st->file.size, MADV_NORMAL);
    *out = st;
    return EMB_OK;
}

int64_t emb_safetensors_num_tensors(const emb_safetensors *st) {
    return st ? st->n : 0;
}

const char *emb_safetensors_name(const emb_safetensors *st, int64_t i) {
    return st && i >= 0 && i < st->n ? st->e[i].name : NULL;
}

int64_t emb_safetensors_find(const emb_safetensors *st, const char *name) {
    if (!st || !name) return -1;
    for (int64_t i = 0; i < st->n; i++)
        if (!strcmp(st->e[i].name, name)) return i;
    return -1;
}

const char *emb_safetensors_dtype(const emb_safetensors *st, int64_t i) {
    return st && i >= 0 && i < st->n ? st_dtypes[st->e[i].dt].name : NULL;
}

const int64_t *emb_safetensors_shape(const emb_safetensors *st, int64_t i, int *ndim) {
    if (!st || i < 0 || i >= st->n) return NULL;
    if (ndim) *ndim = st->e[i].ndim;
    return st->e[i].shape;
}

const char *emb_safetensors_metadata(const emb_safetensors *st, const char *key) {
    if (!st || !key) return NULL;
    for (int64_t i = 0; i < st->nmeta; i++)
        if (!strcmp(st->mkeys[i], key)) return st->mvals[i];
    return NULL;
}

int64_t emb_safetensors_num_metadata(const emb_safetensors *st) {
    return st ? st->nmeta : 0;
}

const char *emb_safetensors_metadata_key(const emb_safetensors *st, int64_t i) {
    return st && i >= 0 && i < st->nmeta ? st->mkeys[i] : NULL;
}

static emb_status st_check_index(const emb_safetensors *st, int64_t i) {
    if (!st) return emb__null("safetensors handle");
    if (i < 0 || i >= st->n)
        return emb__error(EMB_ERR_INDEX,
                          "%s: tensor index %lld is out of range (the file has %lld tensors)",
                          st->path, (long long)i, (long long)st->n);
    const st_entry *e = &st->e[i];
    if (st_dtypes[e->dt].emb < 0)
        return emb__error(EMB_ERR_DTYPE,
                          "%s: tensor \"%s\" has dtype %s, which emb does not support", st->path,
                          e->name, st_dtypes[e->dt].name);
    if (e->ndim > EMB_MAX_DIMS)
        return emb__error(EMB_ERR_SHAPE,
                          "%s: tensor \"%s\" has %d dimensions (emb supports up to %d)", st->path,
                          e->name, e->ndim, EMB_MAX_DIMS);
    return EMB_OK;
}

const unsigned char *emb__safetensors_bytes(const emb_safetensors *st, int64_t i, size_t *n) {
    const st_entry *e = &st->e[i];
    *n = (size_t)(e->end - e->begin);
    return st->buffer + e->begin;
}

emb_status emb_safetensors_view(const emb_safetensors *st, int64_t i, emb_tensor *view) {
    emb_status rc = st_check_index(st, i);
    if (rc) return rc;
    if (!view) return emb__null("view");
    const st_entry *e = &st->e[i];
    const unsigned char *p = st->buffer + e->begin;
    size_t align = (size_t)st_dtypes[e->dt].bits / 8;
    if (e->end > e->begin && ((uintptr_t)p % align))
        return emb__error(
            EMB_ERR_UNSUPPORTED,
            "%s: tensor \"%s\" is not aligned for %s in this file: it can be copied, not used in "
            "place",
            st->path, e->name, st_dtypes[e->dt].name);
    emb_tensor t;
    rc = emb_tensor_init(&t, (emb_dtype)st_dtypes[e->dt].emb, e->end > e->begin ? (void *)p : NULL,
                         e->ndim, e->shape);
    if (rc) return rc;
    *view = t;
    return EMB_OK;
}

emb_status emb_safetensors_read(const emb_safetensors *st, int64_t i, emb_tensor *out) {
    emb_status rc = st_check_index(st, i);
    if (rc) return rc;
    if (!out) return emb__null("out");
    const st_entry *e = &st->e[i];
    emb_tensor t;
    if ((rc = emb_tensor_alloc(&t, (emb_dtype)st_dtypes[e->dt].emb, e->ndim, e->shape))) return rc;
    if (e->end > e->begin) memcpy(t.data, st->buffer + e->begin, (size_t)(e->end - e->begin));
    *out = t;
    return EMB_OK;
}

/* The safetensors name of an emb dtype, or NULL (io_internal.h). */
const char *emb__st_dtype_name(emb_dtype d) {
    for (int k = 0; k < ST_NDTYPES; k++)
        if (st_dtypes[k].emb == (int)d) return st_dtypes[k].name;
    return NULL;
}

/* ---------------------------------------------------------------------------------------
 * Tables
 * ------------------------------------------------------------------------------------- */

static bool is_float_dt(const st_entry *e) {
    int d = st_dtypes[e->dt].emb;
    return d == EMB_FLOAT32 || d == EMB_FLOAT16 || d == EMB_BFLOAT16 || d == EMB_FLOAT64;
}

static emb_status choose_table(const emb_safetensors *st, const char *name, int64_t *out) {
    int64_t i;
    if (name) {
        if ((i = emb_safetensors_find(st, name)) >= 0) goto found;
    } else {
        if ((i = emb_safetensors_find(st, "weight")) >= 0) goto found;
        if ((i = emb_safetensors_find(st, "embedding.weight")) >= 0) goto found;
        int64_t cand = -1, ncand = 0;
        for (int64_t k = 0; k < st->n; k++)
            if (st->e[k].ndim == 2 && is_float_dt(&st->e[k])) cand = k, ncand++;
        if (ncand == 1) {
            i = cand;
            goto found;
        }
    }
    {
        char list[600] = "";
        size_t len = 0;
        for (int64_t k = 0; k < st->n && len < sizeof list - 80; k++)
            if (st->e[k].ndim == 2 || name)
                len +=
                    (size_t)snprintf(list + len, sizeof list - len, "%s\"%s\" %s", len ? ", " : "",
                                     st->e[k].name, st_dtypes[st->e[k].dt].name);
        if (name)
            return emb__error(EMB_ERR_INVALID, "%s: no tensor named \"%s\"; the file has: %s",
                              st->path, name, len ? list : "no tensors");
        return emb__error(EMB_ERR_INVALID,
                          "%s: no tensor \"weight\" or \"embedding.weight\" and not exactly one "
                          "2-D floating-point "
                          "tensor; name one (--tensor). 2-D tensors: %s",
                          st->path, len ? list : "none");
    }
found:
    if (st->e[i].ndim != 2)
        return emb__error(EMB_ERR_SHAPE, "%s: tensor \"%s\" has %d dimensions; a table has 2",
                          st->path, st->e[i].name, st->e[i].ndim);
    if (!is_float_dt(&st->e[i]))
        return emb__error(EMB_ERR_DTYPE,
                          "%s: tensor \"%s\" is %s; a table must be F32, F16, BF16 or F64",
                          st->path, st->e[i].name, st_dtypes[st->e[i].dt].name);
    *out = i;
    return EMB_OK;
}

#define ST_VOCAB_KEY  EMB__ST_VOCAB_KEY
#define ST_COUNTS_KEY EMB__ST_COUNTS_KEY

/* The words of __metadata__["emb.vocab"] ('\n'-separated) and counts of "emb.counts". */
static emb_status st_vocab(const emb_safetensors *st, int64_t rows, int64_t file_rows,
                           emb_vocab **out) {
    const char *words = emb_safetensors_metadata(st, ST_VOCAB_KEY);
    *out = NULL;
    if (!words) return EMB_OK;
    const char *counts = emb_safetensors_metadata(st, ST_COUNTS_KEY);
    emb_vocab *v;
    emb_status rc = emb_vocab_create(&v);
    if (rc) return rc;
    const char *p = words;
    int64_t i = 0;
    bool more = file_rows == 0 && *p;
    while (file_rows > 0) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        int64_t c = 0;
        if (counts) {
            while (*counts == ' ') counts++;
            size_t cn = strspn(counts, "0123456789");
            if (!emb__parse_count(counts, cn, &c) || (counts[cn] != ' ' && counts[cn] != '\0')) {
                emb_vocab_free(v);
                return st_fail(st->path,
                               "__metadata__ \"" ST_COUNTS_KEY
                               "\": entry %lld is not a count (an integer "
                               "in [0, 2^63))",
                               (long long)i);
            }
            counts += cn;
        }
        if (i < rows) {
            bool added = false;
            if (n == 0)
                rc = st_fail(st->path, "__metadata__ \"" ST_VOCAB_KEY "\": word %lld is empty",
                             (long long)i);
            else if (n > EMB_VOCAB_MAX_WORD)
                rc = st_fail(st->path,
                             "__metadata__ \"" ST_VOCAB_KEY
                             "\": word %lld has %zu bytes (the limit is %d)",
                             (long long)i, n, EMB_VOCAB_MAX_WORD);
            else
                rc = emb_vocab_add(v, p, n, c, NULL, &added);
            if (!rc && !added)
                rc = st_fail(st->path,
                             "__metadata__ \"" ST_VOCAB_KEY
                             "\": word %lld (\"%.*s\") repeats an earlier one",
                             (long long)i, (int)(n > 40 ? 40 : n), p);
            if (rc) {
                emb_vocab_free(v);
                return rc;
            }
        }
        i++;
        if (!nl) break;
        p = nl + 1;
        if (i == file_rows) {
            more = true;
            break;
        }
    }
    if (more || i != file_rows) {
        emb_vocab_free(v);
        return st_fail(
            st->path, "__metadata__ \"" ST_VOCAB_KEY "\" holds %s words than the table's %lld rows",
            more ? "more" : "fewer", (long long)file_rows);
    }
    *out = v;
    return EMB_OK;
}

emb_status emb__safetensors_vocab(const emb_safetensors *st, int64_t rows, int64_t file_rows,
                                  emb_vocab **out) {
    return st_vocab(st, rows, file_rows, out);
}

emb_status emb__safetensors_take_file(emb_safetensors *st, emb__file *out) {
    if (!st->file.mapped)
        return emb__error(EMB_ERR_UNSUPPORTED, "%s: not a regular file; it cannot be mapped",
                          st->path);
    *out = st->file;
    emb__file_drop_fd(out);
    memset(&st->file, 0, sizeof st->file);
    st->file.fd = -1;
    return EMB_OK;
}

emb_status emb__read_safetensors_table(const char *path, const emb_safetensors *st,
                                       const emb_vectors_read_options *o, emb_vectors *out) {
    int64_t i;
    emb_status rc = choose_table(st, o->tensor, &i);
    if (rc) return rc;
    const st_entry *e = &st->e[i];
    int64_t rows = e->shape[0];
    if (o->limit > 0 && o->limit < rows) rows = o->limit;
    if ((rc = emb__alloc_table(&out->weight, rows, e->shape[1]))) return rc;
    emb_dtype dt = (emb_dtype)st_dtypes[e->dt].emb;
    if (emb__io_test_hook) emb__io_test_hook(path);
    const int64_t numel = rows * e->shape[1];
    if (dt == EMB_FLOAT32 && numel > 0) {
        /* straight from the same open file into the table: no page faults on a mapping, no
         * copy */
        uint64_t off = (uint64_t)(st->buffer - st->file.data) + e->begin;
        if ((rc = emb__file_pread(&st->file, path, off, out->weight.data, (size_t)numel * 4)))
            return rc;
    } else if (numel > 0) {
        emb__to_f32(out->weight.data, st->buffer + e->begin, dt, numel);
    }
    out->file_dtype = dt;
    out->file_rows = e->shape[0];
    return st_vocab(st, rows, e->shape[0], &out->vocab);
}

emb_status emb__st_vocab_metadata(const char *path, const emb_vocab *v, int64_t rows,
                                  char **words_out, char **counts_out) {
    char *words = NULL, *counts = NULL;
    emb_status rc = EMB_OK;
    *words_out = *counts_out = NULL;
    if (v) {
        if (emb_vocab_num_words(v) != rows)
            return emb__error(EMB_ERR_INVALID,
                              "%s: the vocabulary has %lld words but the table has %lld rows", path,
                              (long long)emb_vocab_num_words(v), (long long)rows);
        size_t total = 1;
        for (int64_t k = 0; k < rows; k++) {
            size_t n;
            const char *s = emb_vocab_word(v, k, &n);
            if (memchr(s, '\n', n) || strlen(s) != n || !emb__utf8_valid(s, n))
                return emb__error(EMB_ERR_INVALID,
                                  "%s: word %lld cannot be stored in safetensors metadata (it must "
                                  "be UTF-8 without "
                                  "line breaks or NUL bytes)",
                                  path, (long long)k);
            total += n + 1;
        }
        bool with_counts = emb_vocab_has_counts(v);
        words = malloc(total);
        counts = with_counts ? malloc((size_t)rows * 21 + 1) : NULL;
        if (!words || (with_counts && !counts)) {
            rc = emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
            free(words);
            free(counts);
            return rc;
        }
        size_t wl = 0, cl = 0;
        for (int64_t k = 0; k < rows; k++) {
            size_t n;
            const char *s = emb_vocab_word(v, k, &n);
            memcpy(words + wl, s, n);
            wl += n;
            if (k + 1 < rows) words[wl++] = '\n';
            if (counts)
                cl += (size_t)sprintf(counts + cl, k ? " %lld" : "%lld",
                                      (long long)emb_vocab_count(v, k));
        }
        words[wl] = '\0';
        if (counts) counts[cl] = '\0';
    }
    *words_out = words;
    *counts_out = counts;
    return rc;
}

emb_status emb__write_safetensors_vectors(const char *path, const emb_tensor *w, const emb_vocab *v,
                                          const emb_vectors_write_options *o) {
    emb_dtype dt = o->dtype;
    if (dt != EMB_FLOAT32 && dt != EMB_FLOAT16 && dt != EMB_BFLOAT16 && dt != EMB_FLOAT64)
        return emb__error(EMB_ERR_INVALID,
                          "%s: a safetensors table is written as float32, float16, bfloat16 or "
                          "float64, not %s",
                          path, emb_dtype_name(dt));
    int64_t rows = w->shape[0], dim = w->shape[1], numel = rows * dim;
    char *words = NULL, *counts = NULL;
    emb_status rc = emb__st_vocab_metadata(path, v, rows, &words, &counts);
    if (rc) return rc;
    emb_tensor t = *w;
    void *conv = NULL;
    if (dt != EMB_FLOAT32) {
        conv = malloc((size_t)(numel ? numel : 1) * emb_dtype_nbytes(dt));
        if (!conv) {
            rc = emb__error(EMB_ERR_NOMEM, "%s: out of memory converting to %s", path,
                            emb_dtype_name(dt));
            goto out;
        }
        const float *src = w->data;
        for (int64_t k = 0; k < numel; k++) {
            if (dt == EMB_FLOAT64)
                ((double *)conv)[k] = src[k];
            else
                ((uint16_t *)conv)[k] =
                    dt == EMB_FLOAT16 ? emb__f32_to_f16(src[k]) : emb__f32_to_bf16(src[k]);
        }
        t.dtype = dt;
        t.data = numel ? conv : NULL;
    }
    const char *name = o->tensor ? o->tensor : "weight";
    const char *keys[3] = {"format", ST_VOCAB_KEY, ST_COUNTS_KEY};
    const char *vals[3] = {"pt", words, counts};
    rc = emb_safetensors_write(path, 1, &name, &t, words ? (counts ? 3 : 2) : 1, keys, vals);
    free(conv);
out:
    free(words);
    free(counts);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * Zero-copy
 * ------------------------------------------------------------------------------------- */

typedef struct st_map {
    emb__file file;
} st_map;

static void st_map_release(void *data, void *ctx) {
    (void)data;
    st_map *m = ctx;
    emb__file_close(&m->file);
    free(m);
}

emb_status emb_embedding_map_safetensors(const char *path, const char *tensor,
                                         const emb_embedding_options *opts, emb_embedding **out) {
    if (!out) return emb__null("out");
    emb_safetensors *st;
    emb_status rc = emb_safetensors_open(path, &st);
    if (rc) return rc;
    int64_t i;
    emb_tensor view;
    st_map *m = NULL;
    if ((rc = choose_table(st, tensor, &i))) goto out;
    if (st_dtypes[st->e[i].dt].emb != EMB_FLOAT32) {
        rc = emb__error(
            EMB_ERR_DTYPE,
            "%s: tensor \"%s\" is %s; a mapped table must be F32 (convert it, or read it "
            "with emb_vectors_read)",
            path, st->e[i].name, st_dtypes[st->e[i].dt].name);
        goto out;
    }
    if ((rc = emb_safetensors_view(st, i, &view))) goto out;
    if (!st->file.mapped) {
        rc = emb__error(EMB_ERR_UNSUPPORTED, "%s: not a regular file; it cannot be mapped", path);
        goto out;
    }
    m = malloc(sizeof *m);
    if (!m) {
        rc = emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    m->file = st->file;
    emb__file_drop_fd(&m->file);
    madvise((void *)m->file.data, m->file.size, MADV_RANDOM);
    emb_storage storage = {.read_only = true, .release = st_map_release, .release_ctx = m};
    rc = emb_embedding_wrap(&view, &storage, true, opts, out);
    if (rc) {
        free(m); /* the mapping stays with st and is closed below */
        goto out;
    }
    memset(&st->file, 0, sizeof st->file); /* now owned by the embedding */
    st->file.fd = -1;
out:
    emb_safetensors_free(st);
    return rc;
}
