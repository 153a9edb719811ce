/* libFuzzer harness: fastText model files (.bin). The input is the file. A model that reads
 * must be consistent: its vocabulary finds itself, every subword row lies inside the input
 * matrix, every word (and a few unseen ones, and the input's own bytes as a word) has a
 * vector, and emb_vectors_read gives those same vectors bit for bit. A failure must leave
 * *out untouched and report a message naming the file. */
#include "fuzz_read_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_rows(const emb_fasttext *ft, const char *w, size_t n, int64_t in_rows) {
    int64_t rows[512];
    int64_t k = emb_fasttext_subword_rows(ft, w, n, rows, 512);
    if (k < 0) FINDING("subword_rows failed on a model that was read");
    for (int64_t i = 0; i < k && i < 512; i++)
        if (rows[i] < 0 || rows[i] >= in_rows)
            FINDING("subword row %lld outside [0, %lld)", (long long)rows[i], (long long)in_rows);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_input_path(data, size);
    emb_fasttext *ft = (emb_fasttext *)(uintptr_t)0x5a5a;
    emb_clear_error();
    emb_status rc = emb_fasttext_read(path, &ft);
    emb_vectors v;
    emb_vectors_read_options o = emb_vectors_read_options_default();
    o.check_utf8 = false;
    o.format = EMB_FORMAT_FASTTEXT_BIN;
    if (rc) {
        fz_check_error(rc, "emb_fasttext_read");
        if (ft != (emb_fasttext *)(uintptr_t)0x5a5a)
            FINDING("emb_fasttext_read changed *out on failure");
        if (!strstr(emb_errmsg(), path))
            FINDING("message does not name the file: %s", emb_errmsg());
        if (emb_vectors_read(path, &o, &v) == EMB_OK)
            FINDING("emb_vectors_read read what emb_fasttext_read refused");
        return 0;
    }
    const emb_vocab *voc = emb_fasttext_vocab(ft);
    emb_fasttext_args a = emb_fasttext_args_of(ft);
    const int64_t dim = emb_fasttext_dim(ft), nw = emb_vocab_num_words(voc);
    const int64_t in_rows = nw + a.bucket;
    float *x = malloc((size_t)dim * sizeof(float));
    if (!x) FINDING("out of memory");
    if (emb_vectors_read(path, &o, &v) != EMB_OK)
        FINDING("emb_vectors_read refused a model: %s", emb_errmsg());
    if (v.weight.shape[0] != nw || v.weight.shape[1] != dim)
        FINDING("emb_vectors_read: wrong shape");
    fz_check_vectors(&v, &o);
    for (int64_t i = 0; i < nw && i < 256; i++) {
        size_t n;
        const char *w = emb_vocab_word(voc, i, &n);
        if (emb_vocab_find(voc, w, n) != i) FINDING("word %lld does not find itself", (long long)i);
        check_rows(ft, w, n, in_rows);
        if (emb_fasttext_word_vector(ft, w, n, x) != EMB_OK)
            FINDING("no vector for word %lld", (long long)i);
        if (memcmp(x, (const float *)v.weight.data + i * dim, (size_t)dim * 4))
            FINDING("emb_vectors_read's row %lld is not the word's vector", (long long)i);
    }
    const char *unseen[] = {"", "a", "\xc3\xbc\x62\x65r", "</s>", "\xff\xfe\x80"};
    for (size_t k = 0; k < sizeof unseen / sizeof unseen[0]; k++) {
        check_rows(ft, unseen[k], strlen(unseen[k]), in_rows);
        if (emb_fasttext_word_vector(ft, unseen[k], strlen(unseen[k]), x) != EMB_OK)
            FINDING("no vector for an unseen word");
    }
    size_t n = size < 64 ? size : 64;
    check_rows(ft, (const char *)data, n, in_rows);
    if (emb_fasttext_word_vector(ft, (const char *)data, n, x) != EMB_OK)
        FINDING("no vector for the input's bytes");
    emb_vectors_release(&v);
    free(x);
    emb_fasttext_free(ft);
    return 0;
}
