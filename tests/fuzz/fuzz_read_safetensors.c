/* libFuzzer harness: safetensors files (emb_safetensors_open and its accessors,
 * emb_vectors_read, the zero-copy mapping), with write/read round trips of what was read:
 * as float32 safetensors, and through the streaming f16/int8 writer (emb convert --dtype). */
#include "fuzz_read_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_input_path(data, size);
    emb_safetensors *st = (emb_safetensors *)&st, *sentinel = st;
    emb_clear_error();
    emb_status rc = emb_safetensors_open(path, &st);
    if (rc) {
        fz_check_error(rc, "emb_safetensors_open");
        if (st != sentinel) FINDING("emb_safetensors_open changed *out on failure");
    } else {
        for (int64_t i = 0; i < emb_safetensors_num_tensors(st); i++) {
            const char *name = emb_safetensors_name(st, i);
            if (!name || !emb_safetensors_dtype(st, i))
                FINDING("tensor %lld has no name or dtype", (long long)i);
            if (emb_safetensors_find(st, name) != i)
                FINDING("tensor \"%s\" does not find itself", name);
            int nd = -1;
            const int64_t *sh = emb_safetensors_shape(st, i, &nd);
            if (!sh || nd < 0) FINDING("tensor %lld has no shape", (long long)i);
            emb_tensor t;
            emb_clear_error();
            rc = emb_safetensors_view(st, i, &t);
            if (rc) {
                fz_check_error(rc, "emb_safetensors_view");
            } else {
                if (t.ndim != nd || (nd && memcmp(t.shape, sh, (size_t)nd * sizeof *sh)))
                    FINDING("tensor %lld: the view's shape is not the file's", (long long)i);
                volatile unsigned char sink = 0;
                size_t nb = emb_tensor_nbytes(&t);
                for (size_t k = 0; k < nb; k++) sink ^= ((const unsigned char *)t.data)[k];
                (void)sink;
            }
            emb_clear_error();
            rc = emb_safetensors_read(st, i, &t);
            if (rc)
                fz_check_error(rc, "emb_safetensors_read");
            else
                emb_tensor_release(&t);
        }
        for (int64_t i = 0; i < emb_safetensors_num_metadata(st); i++) {
            const char *k = emb_safetensors_metadata_key(st, i);
            if (!k || emb_safetensors_metadata(st, k) == NULL)
                FINDING("metadata %lld inconsistent", (long long)i);
        }
        emb_safetensors_free(st);
    }
    emb_vectors v;
    if (fz_read_vectors(path, EMB_FORMAT_SAFETENSORS, size % 3 == 0 ? 1 : 0, &v)) {
        /* as `emb convert --dtype f16|int8`: the table through the streaming quantized
         * writer, read back with its shape */
        const emb_qtype qt = size % 2 || v.weight.shape[1] == 0 ? EMB_QTYPE_F16 : EMB_QTYPE_INT8;
        const int64_t rows = v.weight.shape[0], dim = v.weight.shape[1];
        const char *qout = fz_scratch("q.safetensors");
        emb_qtable_writer *qw = NULL;
        emb_clear_error();
        rc = emb_qtable_writer_open(qout, qt, rows, dim, v.vocab, &qw);
        if (!rc) {
            rc = emb_qtable_writer_append(qw, v.weight.data, rows);
            if (!rc) rc = emb_qtable_writer_commit(qw, NULL);
            emb_qtable_writer_free(qw);
        }
        if (rc) {
            fz_check_error(rc, "emb_qtable_writer");
        } else {
            emb_qtable *q = NULL;
            if (emb_qtable_load(qout, &q, NULL))
                FINDING("cannot load the quantized table emb wrote: %s", emb_errmsg());
            if (emb_qtable_num_rows(q) != rows || emb_qtable_dim(q) != dim)
                FINDING("quantized table changed shape");
            emb_qtable_free(q);
        }
        const char *out = fz_scratch("rt.safetensors");
        emb_clear_error();
        rc = emb_vectors_write(out, &v.weight, v.vocab, NULL);
        if (rc) {
            /* only words that safetensors metadata cannot hold may fail */
            if (rc != EMB_ERR_INVALID) FINDING("write-back failed: %s", emb_errmsg());
        } else {
            emb_vectors back;
            emb_vectors_read_options o2 = emb_vectors_read_options_default();
            if (emb_vectors_read(out, &o2, &back))
                FINDING("cannot read back what emb wrote: %s", emb_errmsg());
            fz_check_same(&v, &back, true, "safetensors");
            emb_vectors_release(&back);
        }
        emb_vectors_release(&v);
    }
    emb_embedding *e = NULL;
    emb_clear_error();
    rc = emb_embedding_map_safetensors(path, NULL, NULL, &e);
    if (rc) {
        fz_check_error(rc, "emb_embedding_map_safetensors");
    } else {
        int64_t rows = emb_embedding_num_embeddings(e), dim = emb_embedding_embedding_dim(e);
        if (rows > 0 && dim > 0 && dim <= 4096) {
            int64_t idx = rows - 1, one = 1, oshape[2] = {1, dim};
            float *buf = malloc((size_t)dim * 4);
            emb_tensor ti, to;
            emb_tensor_init(&ti, EMB_INT64, &idx, 1, &one);
            emb_tensor_init(&to, EMB_FLOAT32, buf, 2, oshape);
            if (emb_embedding_forward(e, &ti, &to))
                FINDING("lookup in a mapped table failed: %s", emb_errmsg());
            free(buf);
        }
        emb_embedding_free(e);
    }
    return 0;
}
