/* src/io/format.c: the formats' names (emb_format_name, emb_format_parse), the format a
 * path's extension names, and the format of a file's content (emb_format_sniff). The
 * readers and writers of each format, and the dispatch between them (src/formats), use
 * these; this file uses none of them. */
#include "io_internal.h"

#include <string.h>
#include <strings.h>

const char *emb_format_name(emb_format f) {
    switch (f) {
    case EMB_FORMAT_AUTO:
        return "auto";
    case EMB_FORMAT_SAFETENSORS:
        return "safetensors";
    case EMB_FORMAT_NPY:
        return "npy";
    case EMB_FORMAT_W2V_TEXT:
        return "word2vec-text";
    case EMB_FORMAT_W2V_BINARY:
        return "word2vec-binary";
    case EMB_FORMAT_GLOVE:
        return "glove";
    case EMB_FORMAT_FASTTEXT_BIN:
        return "fasttext-bin";
    }
    return "unknown";
}

emb_status emb_format_parse(const char *name, emb_format *out) {
    if (!name) return emb__null("name");
    if (!out) return emb__null("out");
    static const struct {
        const char *name;
        emb_format f;
    } names[] = {{"safetensors", EMB_FORMAT_SAFETENSORS},
                 {"st", EMB_FORMAT_SAFETENSORS},
                 {"npy", EMB_FORMAT_NPY},
                 {"word2vec-text", EMB_FORMAT_W2V_TEXT},
                 {"w2v", EMB_FORMAT_W2V_TEXT},
                 {"txt", EMB_FORMAT_W2V_TEXT},
                 {"text", EMB_FORMAT_W2V_TEXT},
                 {"vec", EMB_FORMAT_W2V_TEXT},
                 {"word2vec-binary", EMB_FORMAT_W2V_BINARY},
                 {"bin", EMB_FORMAT_W2V_BINARY},
                 {"binary", EMB_FORMAT_W2V_BINARY},
                 {"glove", EMB_FORMAT_GLOVE},
                 {"fasttext-bin", EMB_FORMAT_FASTTEXT_BIN},
                 {"fasttext", EMB_FORMAT_FASTTEXT_BIN},
                 {"auto", EMB_FORMAT_AUTO}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(name, names[k].name)) {
            *out = names[k].f;
            return EMB_OK;
        }
    return emb__error(EMB_ERR_INVALID,
                      "unknown format \"%s\" (known: safetensors, npy, word2vec-text (txt, vec), "
                      "word2vec-binary (bin), glove, fasttext-bin (fasttext), auto)",
                      name);
}

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcasecmp(s + n - m, suf);
}

emb_format emb_format_from_path(const char *path) {
    if (!path) return EMB_FORMAT_AUTO;
    if (ends_with(path, ".safetensors")) return EMB_FORMAT_SAFETENSORS;
    if (ends_with(path, ".npy")) return EMB_FORMAT_NPY;
    if (ends_with(path, ".bin")) return EMB_FORMAT_W2V_BINARY;
    if (ends_with(path, ".vec") || ends_with(path, ".txt")) return EMB_FORMAT_W2V_TEXT;
    return EMB_FORMAT_AUTO;
}

emb_format emb__sniff(const unsigned char *d, size_t n) {
    if (n >= 6 && !memcmp(d, "\x93NUMPY", 6)) return EMB_FORMAT_NPY;
    if (n >= 9 && d[8] == '{') {
        /* A header length a safetensors file can have: also when the file is truncated
         * before the header's end (it is then reported as a damaged safetensors file). Eight
         * bytes of text never make so small a little-endian number. */
        uint64_t hl = 0;
        for (int k = 7; k >= 0; k--) hl = (hl << 8) | d[k];
        if (hl <= 100000000u) return EMB_FORMAT_SAFETENSORS;
    }
    /* "rows dim" header? (a sign is taken too, so that a negative count is reported as
     * such by the reader rather than read as a GloVe word "-3") */
    size_t p = 0;
    int nums = 0;
    uint64_t dim = 0;
    for (;;) {
        while (p < n && (d[p] == ' ' || d[p] == '\t')) p++;
        size_t q = p + (p < n && d[p] == '-');
        if (q < n && d[q] >= '0' && d[q] <= '9') {
            dim = 0;
            for (p = q; p < n && d[p] >= '0' && d[p] <= '9'; p++)
                if (dim < (1u << 30)) dim = dim * 10 + (uint64_t)(d[p] - '0');
            nums++;
            continue;
        }
        break;
    }
    if (p < n && d[p] == '\r') p++;
    if (nums != 2 || (p < n && d[p] != '\n')) return EMB_FORMAT_GLOVE;
    p++;
    /* The first row decides. In text it is a word, then blank-separated numbers, then a
     * newline, all printable; a binary row is a word, a space and dim * 4 raw bytes. So: a
     * byte that is not printable, or a newline right after the word, is binary; a printable
     * line is text, unless its length is exactly that of a binary row and one of its fields
     * is not a number. The number of fields is not compared with the header's dimension:
     * a text row with the wrong count is a text file with an error, which the text reader
     * reports as such. A newline before the binary row's length may also be one of the
     * row's raw bytes (about one file in a few hundred starts with printable bytes and a
     * 0x0a): then the rest of the binary row's extent decides, binary when it holds a
     * control byte no text line holds. */
    while (p < n && (d[p] == '\n' || d[p] == '\r')) p++;
    while (p < n && d[p] != ' ' && d[p] != '\t' && d[p] != '\n') p++; /* the word */
    const size_t word_end = p;
    size_t limit = p + 65536 < n ? p + 65536 : n;
    int64_t fields = 0;
    bool all_numbers = true;
    while (p < limit) {
        unsigned char c = d[p];
        if (c == '\n') {
            if (fields == 0) return EMB_FORMAT_W2V_BINARY;
            const size_t row_end = word_end + 1 + 4 * dim;
            if (p == row_end) return all_numbers ? EMB_FORMAT_W2V_TEXT : EMB_FORMAT_W2V_BINARY;
            for (size_t k = p; k < row_end && k < n; k++)
                if (d[k] == 0x7f || (d[k] < 0x20 && d[k] != '\n' && d[k] != '\r' && d[k] != '\t'))
                    return EMB_FORMAT_W2V_BINARY;
            return EMB_FORMAT_W2V_TEXT;
        }
        if (c == ' ' || c == '\t' || c == '\r') {
            p++;
            continue;
        }
        size_t t = p;
        while (p < limit && d[p] > 0x20 && d[p] < 0x7f) p++;
        if (p < limit && !(d[p] == ' ' || d[p] == '\t' || d[p] == '\r' || d[p] == '\n'))
            return EMB_FORMAT_W2V_BINARY; /* a byte that is not printable ASCII */
        float x;
        if (!emb__parse_float((const char *)d + t, p - t, &x)) all_numbers = false;
        fields++;
    }
    return EMB_FORMAT_W2V_TEXT;
}

emb_status emb__sniff_file(const char *path, const emb__file *f, emb_format *out) {
    if (f->size == 0) return emb__error(EMB_ERR_FORMAT, "%s: empty file", path);
    *out = f->size >= 4 && !memcmp(f->data, "\xba\x16\x4f\x2f", 4) ? EMB_FORMAT_FASTTEXT_BIN
                                                                   : emb__sniff(f->data, f->size);
    return EMB_OK;
}

emb_status emb_format_sniff(const char *path, emb_format *out) {
    if (!path) return emb__null("path");
    if (!out) return emb__null("out");
    emb__file f;
    emb_status rc = emb__file_open(path, &f, 0);
    if (rc) return rc;
    rc = emb__sniff_file(path, &f, out);
    emb__file_close(&f);
    return rc;
}
