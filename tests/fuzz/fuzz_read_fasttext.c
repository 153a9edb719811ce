/* libFuzzer harness: fastText model files (.bin). The input is the file. A model that reads
 * must be consistent: its vocabulary finds itself, every subword row lies inside the input
 * matrix, every word (and a few unseen ones, and the input's own bytes as a word) has a
 * vector, and emb_vectors_read gives those same vectors bit for bit. A failure must leave
 * *out untouched and report a message naming the file. A model that reads is written again
 * (emb_fasttext_save; a supervised one, or one with labels, refused with
 * EMB_ERR_UNSUPPORTED): the file reads back as the same model (arguments, words and counts,
 * both tables, bit for bit), and when the input is version 12 and not pruned (-1, what
 * fastText writes) it is the input's bytes. */
#include "fuzz_read_common.h"
#include "io/ngrams.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_rows(const emb_fasttext *ft, const char *w, size_t n, int64_t in_rows) {
    int64_t rows[512];
    int64_t k = emb_fasttext_subword_rows(ft, w, n, rows, 512);
    if (k < 0) FINDING("subword_rows failed on a model that was read");
    for (int64_t i = 0; i < k && i < 512; i++)
        if (rows[i] < 0 || rows[i] >= in_rows)
            FINDING("subword row %lld outside [0, %lld)", (long long)rows[i], (long long)in_rows);
}

/* Both tables of a model, as emb__fasttext_tables copies them; false when out of memory. */
static bool same_tables(const emb_fasttext *a, const emb_fasttext *b) {
    float *ai, *ao, *bi, *bo;
    int64_t ani, ano, bni, bno;
    if (emb__fasttext_tables(a, &ai, &ani, &ao, &ano) != EMB_OK)
        FINDING("tables: %s", emb_errmsg());
    if (emb__fasttext_tables(b, &bi, &bni, &bo, &bno) != EMB_OK)
        FINDING("tables: %s", emb_errmsg());
    const size_t d = (size_t)emb_fasttext_dim(a) * sizeof(float);
    bool same = ani == bni && ano == bno && !memcmp(ai, bi, (size_t)ani * d) &&
                !memcmp(ao, bo, (size_t)ano * d);
    free(ai), free(ao), free(bi), free(bo);
    return same;
}

/* The model written again reads back as itself; a version-12 input that is not pruned comes
 * back byte for byte. */
static void check_save(const emb_fasttext *ft, const uint8_t *data, size_t size) {
    const char *again = fz_scratch("again.bin");
    emb_status rc = emb_fasttext_save(ft, again);
    if (rc == EMB_ERR_UNSUPPORTED) return; /* a classifier, or labels */
    if (rc) FINDING("a model that was read cannot be written: %s", emb_errmsg());
    emb_fasttext *back = NULL;
    if (emb_fasttext_read(again, &back)) FINDING("what emb_fasttext_save wrote: %s", emb_errmsg());
    emb_fasttext_args a = emb_fasttext_args_of(ft), b = emb_fasttext_args_of(back);
    if (memcmp(&a, &b, sizeof a)) FINDING("the written model's arguments differ");
    const emb_vocab *va = emb_fasttext_vocab(ft), *vb = emb_fasttext_vocab(back);
    if (emb_vocab_num_words(va) != emb_vocab_num_words(vb)) FINDING("word count differs");
    for (int64_t i = 0; i < emb_vocab_num_words(va); i++) {
        size_t na, nb;
        const char *wa = emb_vocab_word(va, i, &na), *wb = emb_vocab_word(vb, i, &nb);
        if (na != nb || memcmp(wa, wb, na) || emb_vocab_count(va, i) != emb_vocab_count(vb, i))
            FINDING("word %lld or its count differs in the written model", (long long)i);
    }
    if (!same_tables(ft, back)) FINDING("the written model's tables differ");
    emb_fasttext_free(back);
    int32_t version;
    int64_t prune;
    memcpy(&version, data + 4, 4);
    memcpy(&prune, data + 84,
           8); /* magic, version, 12 arguments, t, size, nwords, nlabels, ntokens */
    if (version != 12 || prune != -1) return;
    FILE *f = fopen(again, "rb");
    if (!f) FINDING("cannot open %s", again);
    uint8_t *b2 = malloc(size + 1);
    size_t got = b2 ? fread(b2, 1, size + 1, f) : 0;
    fclose(f);
    if (got != size || memcmp(b2, data, size))
        FINDING("a version-12 model is not written back byte for byte");
    free(b2);
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
    check_save(ft, data, size);
    emb_fasttext_free(ft);
    return 0;
}
