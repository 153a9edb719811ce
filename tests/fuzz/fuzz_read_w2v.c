/* libFuzzer harness: word2vec text and binary, fastText .vec, GloVe. The first input byte
 * picks the format (auto, text, binary, GloVe), the UTF-8 check and a row limit; the rest is
 * the file. What reads successfully is written back in the same format and read again: the
 * values (shortest float text included) and words must survive bit for bit. */
#include "fuzz_read_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const emb_format fmts[4] = {EMB_FORMAT_AUTO, EMB_FORMAT_W2V_TEXT, EMB_FORMAT_W2V_BINARY,
                                       EMB_FORMAT_GLOVE};
    emb_vectors_read_options o = emb_vectors_read_options_default();
    o.format = fmts[data[0] & 3];
    o.check_utf8 = !(data[0] & 4);
    o.limit = (data[0] >> 3) & 3;
    const char *path = fz_input_path(data + 1, size - 1);
    emb_vectors v, sentinel;
    memset(&v, 0x5a, sizeof v);
    sentinel = v;
    emb_clear_error();
    emb_status rc = emb_vectors_read(path, &o, &v);
    if (rc) {
        fz_check_error(rc, "emb_vectors_read");
        if (memcmp(&v, &sentinel, sizeof v)) FINDING("emb_vectors_read changed *out on failure");
        return 0;
    }
    fz_check_vectors(&v, &o);
    if (v.format == EMB_FORMAT_SAFETENSORS || v.format == EMB_FORMAT_NPY) {
        emb_vectors_release(&v);
        return 0;
    }
    emb_vectors_write_options wo = emb_vectors_write_options_default();
    wo.format = v.format;
    wo.trailing_space = data[0] & 32;
    wo.binary_newline = !(data[0] & 64);
    const char *out = fz_scratch("rt.vectors");
    emb_clear_error();
    rc = emb_vectors_write(out, &v.weight, v.vocab, &wo);
    if (rc) {
        /* words a format cannot hold (blanks, line breaks) are refused, nothing else */
        if (rc != EMB_ERR_INVALID) FINDING("write-back failed: %s", emb_errmsg());
    } else {
        emb_vectors_read_options o2 = emb_vectors_read_options_default();
        o2.format = v.format;
        o2.check_utf8 = o.check_utf8;
        emb_vectors back;
        emb_status rb = emb_vectors_read(out, &o2, &back);
        if (rb) {
            size_t n0 = 0;
            const char *w0 =
                v.format == EMB_FORMAT_GLOVE && v.vocab ? emb_vocab_word(v.vocab, 0, &n0) : NULL;
            if (!(w0 && memchr(w0, ' ', n0)))
                FINDING("cannot read back what emb wrote: %s", emb_errmsg());
            emb_vectors_release(&v);
            return 0;
        }
        /* GloVe infers the dimension from the first line: a first word made of spaces and
         * numbers ("1 2") cannot be told from the values; that is the format's ambiguity */
        bool ambiguous = false;
        if (v.format == EMB_FORMAT_GLOVE && v.vocab && emb_vocab_num_words(v.vocab) > 0) {
            size_t n;
            const char *w0 = emb_vocab_word(v.vocab, 0, &n);
            ambiguous = memchr(w0, ' ', n) != NULL;
        }
        if (!ambiguous) fz_check_same(&v, &back, true, emb_format_name(v.format));
        emb_vectors_release(&back);
    }
    emb_vectors_release(&v);
    return 0;
}
