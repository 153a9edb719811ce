/* libFuzzer harness: the word2vec corpus reader over several files, a directory of them and
 * compressed data (gzip, bzip2, xz, zstd, recognised by content): emb_w2v_create_from_files.
 * Input: an option byte (bits 0-1: the number of files - 1; bit 2: in a directory, read
 * recursively, else as a list; bit 3: lowercase; bit 4: lenient; bit 5: the second file in a
 * subfolder), then for each file but the last its length (2 bytes, little-endian; cut to
 * what is left), then the files' bytes. Checks: an error leaves *out untouched and sets a
 * message; an accepted corpus gives a vocabulary sorted by count, of valid UTF-8 words
 * without whitespace whose counts add up to the tokens, lowercase words already lowercase;
 * the directory and the list of its files give the same vocabulary and token count.
 * Decompression bombs: the reader holds bounded buffers (the fuzzer's RSS limit); the token
 * ids on disk are capped by RLIMIT_FSIZE here, which the reader reports as an I/O error. */
#include "fuzz_read_common.h"
#include "text/casefold.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void write_file(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) FINDING("cannot write %s", path);
}

static void check_vocab(const emb_w2v *w, bool lower) {
    const emb_vocab *v = emb_w2v_vocab(w);
    int64_t n = emb_vocab_num_words(v), total = 0;
    char buf[4096];
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = emb_vocab_word(v, i, &len);
        int64_t c = emb_vocab_count(v, i);
        if (!s || len == 0 || !emb__utf8_valid(s, len))
            FINDING("word %lld is empty or not UTF-8", (long long)i);
        for (size_t k = 0; k < len; k++)
            if (s[k] == ' ' || s[k] == '\n' || s[k] == '\t' || s[k] == '\r')
                FINDING("word %lld holds whitespace", (long long)i);
        if (lower && EMB__LOWER_MAX(len) <= sizeof buf &&
            (emb__utf8_lower(s, len, buf) != len || memcmp(buf, s, len) != 0))
            FINDING("word %lld is not lowercase after lowercasing", (long long)i);
        if (i > 0 && c > emb_vocab_count(v, i - 1)) FINDING("vocabulary not sorted by count");
        total += c;
    }
    if (total != emb_w2v_corpus_tokens(w)) FINDING("counts do not add up to the tokens");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool once;
    if (!once) { /* the token ids of a bomb stop at 64 MiB of disk with an error */
        struct rlimit rl = {64 << 20, 64 << 20};
        setrlimit(RLIMIT_FSIZE, &rl);
        signal(SIGXFSZ, SIG_IGN);
        setenv("TMPDIR", fz_tmp_root(), 1);
        once = true;
    }
    if (size < 1) return 0;
    int nf = 1 + (data[0] & 3);
    bool in_dir = data[0] & 4, sub = data[0] & 32;
    size_t head = 1 + 2 * (size_t)(nf - 1);
    if (size < head) return 0;
    emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    o.min_count = 1;
    o.lowercase = data[0] & 8;
    o.lenient = data[0] & 16;
    o.dim = 2;
    o.threads = 1;
    const uint8_t *p = data + head;
    size_t left = size - head;
    char dir[300], subdir[320], paths[4][340];
    snprintf(dir, sizeof dir, "%s", fz_scratch("corpora"));
    snprintf(subdir, sizeof subdir, "%s/s", dir);
    for (int i = 0; i < 4; i++) { /* the previous input's files */
        snprintf(paths[i], sizeof paths[i], "%s/f%d", dir, i);
        unlink(paths[i]);
        snprintf(paths[i], sizeof paths[i], "%s/f%d", subdir, i);
        unlink(paths[i]);
    }
    rmdir(subdir);
    mkdir(dir, 0700);
    if (sub) mkdir(subdir, 0700);
    const char *list[4];
    for (int i = 0; i < nf; i++) {
        size_t n = i == nf - 1 ? left : (size_t)data[1 + 2 * i] | (size_t)data[2 + 2 * i] << 8;
        if (n > left) n = left;
        snprintf(paths[i], sizeof paths[i], "%s/%sf%d", dir, sub && i == 1 ? "s/" : "", i);
        write_file(paths[i], p, n);
        p += n, left -= n;
        list[i] = paths[i];
    }
    emb_w2v *w = (emb_w2v *)0x1;
    emb_clear_error();
    const char *dirs[1] = {dir};
    emb_status rc = in_dir ? emb_w2v_create_from_files(&o, dirs, 1, &w)
                           : emb_w2v_create_from_files(&o, list, (size_t)nf, &w);
    if (rc) {
        fz_check_error(rc, "emb_w2v_create_from_files");
        if (w != (emb_w2v *)0x1) FINDING("emb_w2v_create_from_files changed *out on failure");
        return 0;
    }
    check_vocab(w, o.lowercase);
    if (in_dir) {            /* the directory is its files in byte order of their paths */
        if (sub && nf > 2) { /* "s/f1" sorts after "f2", "f3" */
            const char *t = list[1];
            for (int i = 1; i < nf - 1; i++) list[i] = list[i + 1];
            list[nf - 1] = t;
        }
        emb_w2v *w2 = NULL;
        if (emb_w2v_create_from_files(&o, list, (size_t)nf, &w2) != EMB_OK)
            FINDING("the files of a directory read as a list fail: %s", emb_errmsg());
        const emb_vocab *a = emb_w2v_vocab(w), *b = emb_w2v_vocab(w2);
        if (emb_vocab_num_words(a) != emb_vocab_num_words(b) ||
            emb_w2v_corpus_tokens(w) != emb_w2v_corpus_tokens(w2))
            FINDING("a directory and the list of its files differ");
        for (int64_t i = 0; i < emb_vocab_num_words(a); i++) {
            size_t n1, n2;
            const char *s1 = emb_vocab_word(a, i, &n1), *s2 = emb_vocab_word(b, i, &n2);
            if (n1 != n2 || memcmp(s1, s2, n1) || emb_vocab_count(a, i) != emb_vocab_count(b, i))
                FINDING("a directory and the list of its files differ at word %lld", (long long)i);
        }
        emb_w2v_free(w2);
    }
    emb_w2v_free(w);
    return 0;
}
