/* Shared by the harnesses that read an input as a word2vec corpus (fuzz_phrases,
 * fuzz_read_corpus): whether it is compressed, and whether its text is longer than a bound.
 * A few hundred bytes of compressed data can expand to megabytes of text, which the
 * harnesses' instrumented passes read several times (seconds per input), so they skip
 * compressed inputs whose text exceeds a bound; longer texts are fuzz_read_corpora's and
 * the unit tests'. Include after fuzz_read_common.h and w2v/w2v_internal.h. */
#ifndef EMB_FUZZ_CORPUS_TEXT_H
#define EMB_FUZZ_CORPUS_TEXT_H

/* Whether the n bytes at p start as gzip, bzip2, xz or zstd data (the reader's detection). */
static inline bool fz_compressed(const uint8_t *p, size_t n) {
    static const char *const magic[] = {"\x1f\x8b", "BZh", "\xfd\x37zXZ", "\x28\xb5\x2f\xfd"};
    for (int k = 0; k < 4; k++)
        if (n >= strlen(magic[k]) && memcmp(p, magic[k], strlen(magic[k])) == 0) return true;
    return false;
}

/* Whether the input at path gives more than cap bytes of text (read through the corpus
 * reader, as training reads it; an input it refuses is not skipped). */
static inline bool fz_text_longer_than(const char *path, size_t cap) {
    emb__corpus_src *s = NULL;
    const char *const paths[1] = {path};
    bool have = false, longer = false;
    if (emb__corpus_open_paths(&s, paths, 1) == EMB_OK &&
        emb__corpus_next_file(s, &have) == EMB_OK && have) {
        static char buf[1 << 16];
        size_t total = 0, got = 1;
        while (got > 0 && total <= cap && emb__corpus_read(s, buf, sizeof buf, &got) == EMB_OK)
            total += got;
        longer = total > cap;
    }
    emb__corpus_close(s);
    emb_clear_error();
    return longer;
}

#endif /* EMB_FUZZ_CORPUS_TEXT_H */
