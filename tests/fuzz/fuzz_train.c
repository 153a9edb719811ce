/* libFuzzer harness: the word2vec trainer's options and tiny corpora. The first 32 bytes of
 * the input are the options, the rest (at most 2 KB) the corpus text:
 *   0 model and flags (bit 0 CBOW, 1 cbow_mean off, 2 shared negatives, 3 lowercase,
 *     4 strip punctuation, 5-6 threads 1-4)
 *   1 dim (byte % 24, so 0 is reachable)     2 window (% 8)     3 negative (% 8)
 *   4 epochs (% 4)                           5 min_count (% 4)  6 max_vocab (% 8)
 *   7 alpha: a table of rates, valid and not (below)            8 min_alpha: a fraction of alpha
 *   9 sample (a table)                       10-17 max_sentence (any int64)
 *   18-25 seed
 *   26 subwords: bit 7 on (else maxn 0), maxn = bits 0-2 (0-7)   27 minn (% 9, 0 refused)
 *   28-29 bucket: 1 + (little-endian 16 bits & 4095), or with bit 7 of byte 29 a value
 *     from a table of refused ones                              30-31 unused
 * Work per input is bounded: at most 2 KB of text, dim < 24, window < 8, negative < 8,
 * epochs < 4, at most 4096 n-gram rows. Oracles, besides the sanitizers: options
 * emb_w2v_options_check refuses are refused by create too (and nothing is created); an
 * accepted run trains to its end with finite vectors and exactly corpus tokens x epochs
 * words done, or stops with EMB_ERR_NUMERIC (training diverged, with a message naming the
 * vector) and then refuses to train or checkpoint again; a finished run's checkpoint resumes
 * to the same vectors; the run's model as a fastText model (emb_fasttext_from_w2v) gives
 * every vocabulary word and a few unseen ones the trainer's vector (emb_w2v_word_vector),
 * bit for bit.
 * Seeds: tests/fuzz/corpus/fuzz_train. */
#include "fuzz_read_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int64_t rd_i64(const uint8_t *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* The run as a fastText model: every vocabulary word's vector and a few unseen words' are
 * the trainer's, bit for bit, in the copy (emb_fasttext_from_w2v) and in the model that
 * takes the trainer's tables (emb_fasttext_take_w2v), which frees w. */
static void check_model(emb_w2v *w) {
    emb_fasttext *ft = NULL;
    if (emb_fasttext_from_w2v(w, &ft)) FINDING("emb_fasttext_from_w2v failed: %s", emb_errmsg());
    const emb_vocab *v = emb_w2v_vocab(w);
    const int64_t dim = emb_w2v_options_of(w).dim, n = emb_vocab_num_words(v);
    if (emb_fasttext_dim(ft) != dim || emb_vocab_num_words(emb_fasttext_vocab(ft)) != n)
        FINDING("the model's dim or vocabulary size differs from the run's");
    float a[24], b[24];
    static const char *const unseen[3] = {"zq", "\xc3\xa9t\xc3\xa9", "<x>"};
    for (int64_t i = 0; i < n + 3; i++) {
        size_t len;
        const char *s = i < n ? emb_vocab_word(v, i, &len) : unseen[i - n];
        if (i >= n) len = strlen(s);
        emb_status r1 = emb_w2v_word_vector(w, s, len, a);
        if (r1 == EMB_ERR_INVALID && i >= n && emb_w2v_options_of(w).maxn == 0) continue;
        if (r1 || emb_fasttext_word_vector(ft, s, len, b))
            FINDING("no vector for word %lld: %s", (long long)i, emb_errmsg());
        if (dim && memcmp(a, b, (size_t)dim * sizeof(float)))
            FINDING("word %lld: the model's vector differs from the trainer's", (long long)i);
    }
    emb_fasttext *taken = NULL;
    if (emb_fasttext_take_w2v(w, &taken)) FINDING("emb_fasttext_take_w2v failed: %s", emb_errmsg());
    v = emb_fasttext_vocab(ft);
    for (int64_t i = 0; i < n + 3; i++) {
        size_t len;
        const char *s = i < n ? emb_vocab_word(v, i, &len) : unseen[i - n];
        if (i >= n) len = strlen(s);
        emb_status r1 = emb_fasttext_word_vector(ft, s, len, a),
                   r2 = emb_fasttext_word_vector(taken, s, len, b);
        if (r1 != r2 || (!r1 && dim && memcmp(a, b, (size_t)dim * sizeof(float))))
            FINDING("word %lld: the taken model differs from the copy", (long long)i);
    }
    emb_fasttext_free(taken);
    emb_fasttext_free(ft);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 32 || size > 32 + 2048) return 0;
    static const double alphas[16] = {0.025, 0.05, 0.5,  1.0,   1e-6, 0.0,      -0.025, 1.0000001,
                                      2.0,   10.0, 1e30, 1e300, NAN,  INFINITY, 0.75,   0.1};
    static const double samples[8] = {0, 1e-3, 1e-5, 1, -1, NAN, INFINITY, 1e300};
    const uint8_t f = data[0];
    emb_w2v_options o = emb_w2v_options_default((f & 1) ? EMB_W2V_CBOW : EMB_W2V_SKIPGRAM);
    o.cbow_mean = !(f & 2);
    o.shared_negatives = f & 4;
    o.lowercase = f & 8;
    o.strip_punct = f & 16;
    o.threads = 1 + ((f >> 5) & 3);
    o.dim = data[1] % 24;
    o.window = data[2] % 8;
    o.negative = data[3] % 8;
    o.epochs = data[4] % 4;
    o.min_count = data[5] % 4;
    o.max_vocab = data[6] % 8;
    o.alpha = alphas[data[7] % 16];
    o.min_alpha = data[8] < 128 ? o.alpha * (double)data[8] / 127.0 : -1.0 * data[8];
    o.sample = samples[data[9] % 8];
    o.max_sentence = rd_i64(data + 10);
    o.seed = (uint64_t)rd_i64(data + 18);
    if (data[26] & 0x80) {
        static const int64_t bad_buckets[4] = {0, -1, INT32_MAX, INT64_MAX};
        o.maxn = data[26] & 7;
        o.minn = data[27] % 9;
        const unsigned b = (unsigned)data[28] | (unsigned)data[29] << 8;
        o.bucket = (data[29] & 0x80) ? bad_buckets[b & 3] : 1 + (int64_t)(b & 4095);
    }
    const char *path = fz_input_path(data + 32, size - 32);

    const bool valid = emb_w2v_options_check(&o) == EMB_OK;
    emb_w2v *w = (emb_w2v *)0x1;
    emb_clear_error();
    emb_status rc = emb_w2v_create_from_file(&o, path, &w);
    if (rc) {
        fz_check_error(rc, "emb_w2v_create_from_file");
        if (w != (emb_w2v *)0x1) FINDING("create changed *out on failure");
        return 0;
    }
    if (!valid) FINDING("options refused by emb_w2v_options_check were accepted by create");
    const int64_t total = emb_w2v_corpus_tokens(w) * o.epochs;
    emb_clear_error();
    rc = emb_w2v_train(w, NULL, NULL);
    if (rc == EMB_ERR_NUMERIC) {
        if (!strstr(emb_errmsg(), "training diverged") || !strstr(emb_errmsg(), "vector"))
            FINDING("divergence reported without naming the vector: %s", emb_errmsg());
        if (emb_w2v_train(w, NULL, NULL) != EMB_ERR_NUMERIC)
            FINDING("a diverged run trained again");
        if (emb_w2v_save_checkpoint(w, fz_scratch("train.ckpt")) == EMB_OK)
            FINDING("a diverged run was checkpointed");
        emb_w2v_free(w);
        return 0;
    }
    if (rc) FINDING("training failed: %s", emb_errmsg());
    if (emb_w2v_words_done(w) != total)
        FINDING("%lld words done of %lld", (long long)emb_w2v_words_done(w), (long long)total);
    emb_tensor t;
    if (emb_w2v_vectors(w, &t)) FINDING("no vectors");
    const float *x = t.data;
    for (int64_t i = 0; i < emb_tensor_numel(&t); i++)
        if (!isfinite(x[i]))
            FINDING("value %lld of the vectors is not finite after a successful run", (long long)i);
    const char *ck = fz_scratch("train.ckpt");
    if (emb_w2v_save_checkpoint(w, ck)) FINDING("checkpoint failed: %s", emb_errmsg());
    emb_w2v *r = NULL;
    if (emb_w2v_resume(&o, path, ck, &r)) FINDING("resume failed: %s", emb_errmsg());
    emb_tensor t2;
    emb_w2v_vectors(r, &t2);
    if (emb_tensor_nbytes(&t) && memcmp(t.data, t2.data, emb_tensor_nbytes(&t)))
        FINDING("resumed vectors differ");
    emb_w2v_free(r);
    check_model(w); /* frees w */
    return 0;
}
