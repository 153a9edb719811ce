/* safetensors: writing in the reference serializer's layout (the header's tensors ordered by
 * dtype, then name; data in that order, aligned as the reference pads it). */
#include "io_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Writing
 * ------------------------------------------------------------------------------------- */

static int write_rank(emb_dtype d) {
    /* the reference serializer's descending dtype order */
    switch (d) {
    case EMB_INT64:
        return 1;
    case EMB_FLOAT64:
        return 2;
    case EMB_FLOAT32:
        return 4;
    case EMB_INT32:
        return 6;
    case EMB_BFLOAT16:
        return 7;
    case EMB_FLOAT16:
        return 8;
    case EMB_INT16:
        return 10;
    case EMB_INT8:
        return 16;
    case EMB_UINT8:
        return 17;
    case EMB_BOOL:
        return 21;
    }
    return 99;
}

typedef struct w_item {
    const char *name;
    const emb_tensor *t;
} w_item;

static int cmp_item(const void *a, const void *b) {
    const w_item *x = a, *y = b;
    int rx = write_rank(x->t->dtype), ry = write_rank(y->t->dtype);
    if (rx != ry) return rx - ry;
    return strcmp(x->name, y->name);
}

emb_status emb_safetensors_write(const char *path, int64_t n, const char *const *names,
                                 const emb_tensor *tensors, int64_t nmeta,
                                 const char *const *meta_keys, const char *const *meta_values) {
    if (!path) return emb__null("path");
    if (n < 0 || nmeta < 0)
        return emb__error(EMB_ERR_INVALID,
                          "emb_safetensors_write: negative count (%lld tensors, %lld metadata)",
                          (long long)n, (long long)nmeta);
    if (n > 0 && (!names || !tensors)) return emb__null(!names ? "names" : "tensors");
    if (nmeta > 0 && (!meta_keys || !meta_values))
        return emb__null(!meta_keys ? "meta_keys" : "meta_values");
    emb_status rc;
    for (int64_t i = 0; i < n; i++) {
        if (!names[i] || !names[i][0] || !emb__utf8_valid(names[i], strlen(names[i])) ||
            !strcmp(names[i], "__metadata__"))
            return emb__error(EMB_ERR_INVALID, "%s: tensor name %lld is %s", path, (long long)i,
                              !names[i]                           ? "NULL"
                              : !names[i][0]                      ? "empty"
                              : !strcmp(names[i], "__metadata__") ? "the reserved \"__metadata__\""
                                                                  : "not valid UTF-8");
        for (int64_t j = 0; j < i; j++)
            if (!strcmp(names[i], names[j]))
                return emb__error(EMB_ERR_INVALID, "%s: tensor name \"%s\" is given twice", path,
                                  names[i]);
        if ((rc = emb_tensor_check(&tensors[i], names[i]))) return rc;
        if (!emb__st_dtype_name(tensors[i].dtype))
            return emb__error(EMB_ERR_DTYPE, "%s: tensor \"%s\": dtype %s has no safetensors name",
                              path, names[i], emb_dtype_name(tensors[i].dtype));
    }
    for (int64_t i = 0; i < nmeta; i++)
        if (!meta_keys[i] || !meta_values[i] ||
            !emb__utf8_valid(meta_keys[i], strlen(meta_keys[i])) ||
            !emb__utf8_valid(meta_values[i], strlen(meta_values[i])))
            return emb__error(EMB_ERR_INVALID, "%s: metadata entry %lld is NULL or not valid UTF-8",
                              path, (long long)i);
    w_item *items = malloc((size_t)(n ? n : 1) * sizeof *items);
    json_t *root = json_object(), *meta = json_object();
    char *hdr = NULL;
    if (!items || !root || !meta) {
        rc = emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    for (int64_t i = 0; i < n; i++) items[i] = (w_item){names[i], &tensors[i]};
    qsort(items, (size_t)n, sizeof *items, cmp_item);
    bool has_format = false;
    for (int64_t i = 0; i < nmeta; i++) has_format |= !strcmp(meta_keys[i], "format");
    if (!has_format) json_object_set_new(meta, "format", json_string("pt"));
    for (int64_t i = 0; i < nmeta; i++)
        if (json_object_set_new(meta, meta_keys[i], json_string(meta_values[i]))) {
            rc = emb__error(EMB_ERR_NOMEM, "%s: out of memory building the header", path);
            goto out;
        }
    json_object_set(root, "__metadata__", meta);
    uint64_t off = 0;
    for (int64_t i = 0; i < n; i++) {
        const emb_tensor *t = items[i].t;
        json_t *e = json_object(), *shape = json_array(), *offs = json_array();
        if (!e || !shape || !offs) {
            json_decref(e), json_decref(shape), json_decref(offs);
            rc = emb__error(EMB_ERR_NOMEM, "%s: out of memory building the header", path);
            goto out;
        }
        for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        uint64_t nb = emb_tensor_nbytes(t);
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + nb)));
        off += nb;
        json_object_set_new(e, "dtype", json_string(emb__st_dtype_name(t->dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", offs);
        if (json_object_set_new(root, items[i].name, e)) {
            rc = emb__error(EMB_ERR_NOMEM, "%s: out of memory building the header", path);
            goto out;
        }
    }
    hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!hdr) {
        rc = emb__error(EMB_ERR_NOMEM, "%s: out of memory writing the header", path);
        goto out;
    }
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    if (padded > EMB__ST_MAX_HEADER) {
        rc = emb__error(EMB_ERR_INVALID,
                        "%s: the header would be %zu bytes, more than the format's limit of %llu",
                        path, padded, EMB__ST_MAX_HEADER);
        goto out;
    }
    emb__writer w;
    if ((rc = emb__writer_open(&w, path))) goto out;
    unsigned char len8[8];
    emb__put_u64le(len8, (uint64_t)padded);
    emb__writer_put(&w, len8, 8);
    emb__writer_put(&w, hdr, hl);
    emb__writer_put(&w, "        ", padded - hl);
    for (int64_t i = 0; i < n; i++)
        emb__writer_put(&w, items[i].t->data, emb_tensor_nbytes(items[i].t));
    if (w.status) {
        rc = w.status;
        emb__writer_abort(&w);
    } else {
        rc = emb__writer_commit(&w);
    }
out:
    free(hdr);
    json_decref(meta);
    json_decref(root);
    free(items);
    return rc;
}
