/* libFuzzer harness: reduced-precision table files (emb_qtable_load, emb_qtable_map and
 * emb_vectors_read on the same bytes). Checks, besides the sanitizers: load and map agree
 * (both refuse, with the same status, or both give the same rows bit for bit; only a table
 * whose data is not aligned for its type loads and does not map); a table
 * that opened has a consistent shape; its lookups and bags give the dequantized rows; a
 * save of what was loaded reads back byte for byte; failures leave *out and *vocab alone. */
#include "fuzz_read_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Rows and dims a run may materialise: the file's bytes bound them in practice, but a
 * 1-byte int4 row of dim 2 still means 8 floats per stored byte. */
#define FZ_MAX_FLOATS ((int64_t)1 << 20)

static void check_table(const emb_qtable *q, const char *what) {
    const int64_t rows = emb_qtable_num_rows(q), dim = emb_qtable_dim(q);
    const int64_t rb = emb_qtable_row_nbytes(q);
    int64_t expect = -1;
    if (rows < 0 || dim < 0) FINDING("%s: negative shape", what);
    if (emb_qtype_row_nbytes(emb_qtable_qtype(q), dim, &expect) || rb != expect)
        FINDING("%s: row bytes %lld", what, (long long)rb);
    if (emb_qtable_nbytes(q) != (size_t)(rows * rb))
        FINDING("%s: nbytes does not match the shape", what);
    if (rows > 0 && rb > 0 && !emb_qtable_data(q)) FINDING("%s: no data", what);
}

/* Dequantizes the whole table (or NULL when too large to bother). */
static float *all_rows(const emb_qtable *q, const char *what) {
    const int64_t rows = emb_qtable_num_rows(q), dim = emb_qtable_dim(q);
    if (rows == 0 || dim == 0 || rows > FZ_MAX_FLOATS / dim) return NULL;
    float *w = malloc((size_t)(rows * dim) * sizeof(float));
    if (!w) FINDING("out of memory");
    if (emb_qtable_dequantize(q, 0, rows, w))
        FINDING("%s: dequantize failed: %s", what, emb_errmsg());
    return w;
}

/* A lookup of every row (last first) and a sum bag of each row alone: the dequantized rows. */
static void check_lookups(const emb_qtable *q, const float *w) {
    const int64_t rows = emb_qtable_num_rows(q), dim = emb_qtable_dim(q);
    int64_t *idx = malloc((size_t)rows * sizeof(int64_t));
    float *out = malloc((size_t)(rows * dim) * sizeof(float));
    if (!idx || !out) FINDING("out of memory");
    for (int64_t i = 0; i < rows; i++) idx[i] = rows - 1 - i;
    emb_tensor ti, to, toff;
    emb_tensor_init(&ti, EMB_INT64, idx, 1, (int64_t[]){rows});
    emb_tensor_init(&to, EMB_FLOAT32, out, 2, (int64_t[]){rows, dim});
    if (emb_qtable_forward(q, &ti, &to)) FINDING("forward failed: %s", emb_errmsg());
    for (int64_t i = 0; i < rows; i++)
        if (memcmp(out + i * dim, w + idx[i] * dim, (size_t)dim * 4))
            FINDING("forward of row %lld is not its dequantized row", (long long)idx[i]);
    int64_t *off = malloc((size_t)rows * sizeof(int64_t));
    if (!off) FINDING("out of memory");
    for (int64_t i = 0; i < rows; i++) off[i] = i;
    emb_tensor_init(&toff, EMB_INT64, off, 1, (int64_t[]){rows});
    emb_bag_options o = emb_bag_options_default();
    o.mode = EMB_BAG_MAX;
    if (emb_qtable_bag_forward(q, &ti, &toff, NULL, &o, &to, NULL))
        FINDING("bag failed: %s", emb_errmsg());
    for (int64_t i = 0; i < rows; i++)
        if (memcmp(out + i * dim, w + idx[i] * dim, (size_t)dim * 4))
            FINDING("max bag of row %lld alone is not the row", (long long)idx[i]);
    free(off);
    free(idx);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_input_path(data, size);
    emb_qtable *sentinel = (emb_qtable *)&sentinel, *loaded = sentinel, *mapped = sentinel;
    emb_vocab *vsent = (emb_vocab *)&vsent, *lv = vsent, *mv = vsent;
    emb_clear_error();
    emb_status rl = emb_qtable_load(path, &loaded, &lv);
    if (rl) {
        fz_check_error(rl, "emb_qtable_load");
        if (loaded != sentinel || lv != vsent)
            FINDING("emb_qtable_load changed an out-pointer on failure");
    }
    emb_clear_error();
    emb_status rm = emb_qtable_map(path, &mapped, &mv);
    if (rm) {
        fz_check_error(rm, "emb_qtable_map");
        if (mapped != sentinel || mv != vsent)
            FINDING("emb_qtable_map changed an out-pointer on failure");
    }
    /* a table whose data is not aligned for its type loads (a copy) but does not map */
    const bool unaligned =
        rl == EMB_OK && rm == EMB_ERR_UNSUPPORTED && strstr(emb_errmsg(), "not aligned");
    if (rl != rm && !unaligned) FINDING("load says %d, map says %d", rl, rm);
    if (rl) return 0;
    if (unaligned) {
        emb_vocab_free(lv);
        emb_qtable_free(loaded);
        return 0;
    }

    check_table(loaded, "load");
    check_table(mapped, "map");
    if (emb_qtable_qtype(loaded) != emb_qtable_qtype(mapped) ||
        emb_qtable_num_rows(loaded) != emb_qtable_num_rows(mapped) ||
        emb_qtable_dim(loaded) != emb_qtable_dim(mapped))
        FINDING("load and map disagree on the table");
    if (emb_qtable_nbytes(loaded) &&
        memcmp(emb_qtable_data(loaded), emb_qtable_data(mapped), emb_qtable_nbytes(loaded)))
        FINDING("load and map give different bytes");
    if ((lv == NULL) != (mv == NULL) || (lv && emb_vocab_num_words(lv) != emb_vocab_num_words(mv)))
        FINDING("load and map disagree on the vocabulary");
    if (lv && emb_vocab_num_words(lv) != emb_qtable_num_rows(loaded))
        FINDING("%lld words for %lld rows", (long long)emb_vocab_num_words(lv),
                (long long)emb_qtable_num_rows(loaded));

    float *w = all_rows(loaded, "load");
    if (w) check_lookups(mapped, w);

    /* Save what was loaded and read it back: the same stored bytes. */
    const char *out = fz_scratch("rt.safetensors");
    emb_clear_error();
    emb_status rs = emb_qtable_save(out, loaded, lv);
    if (rs) {
        /* only words that safetensors metadata cannot hold may fail */
        if (rs != EMB_ERR_INVALID) FINDING("save failed: %s", emb_errmsg());
    } else {
        emb_qtable *back = NULL;
        if (emb_qtable_load(out, &back, NULL))
            FINDING("cannot load what emb saved: %s", emb_errmsg());
        if (emb_qtable_qtype(back) != emb_qtable_qtype(loaded) ||
            emb_qtable_num_rows(back) != emb_qtable_num_rows(loaded) ||
            emb_qtable_dim(back) != emb_qtable_dim(loaded) ||
            (emb_qtable_nbytes(back) &&
             memcmp(emb_qtable_data(back), emb_qtable_data(loaded), emb_qtable_nbytes(back))))
            FINDING("saved table reads back different");
        emb_qtable_free(back);
    }

    /* The float reader dequantizes the same file to the same rows. */
    emb_vectors_read_options o = emb_vectors_read_options_default();
    o.format = EMB_FORMAT_SAFETENSORS;
    emb_vectors v;
    emb_clear_error();
    emb_status rv = emb_vectors_read(path, &o, &v);
    if (rv) {
        fz_check_error(rv, "emb_vectors_read");
    } else {
        fz_check_vectors(&v, &o);
        if (w && (v.weight.shape[0] != emb_qtable_num_rows(loaded) ||
                  v.weight.shape[1] != emb_qtable_dim(loaded) ||
                  memcmp(v.weight.data, w, (size_t)emb_tensor_nbytes(&v.weight))))
            FINDING("emb_vectors_read gives other rows than the table");
        emb_vectors_release(&v);
    }
    free(w);
    emb_vocab_free(lv);
    emb_vocab_free(mv);
    emb_qtable_free(loaded);
    emb_qtable_free(mapped);
    return 0;
}
