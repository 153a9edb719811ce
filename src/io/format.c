/* src/io/format.c: the formats' names (emb_format_name, emb_format_parse), the format a
 * path's extension names, and the format of a file's content (emb_format_sniff). The
 * readers and writers of each format, and the dispatch between them (src/formats), use
 * these; this file uses none of them. */
#include "io_internal.h"

#include <string.h>
#include <strings.h>

const char *emb_format_name(emb_format f) {
    switch (f) {
    case EMB_FORMAT_AUTO: return "auto";
    case EMB_FORMAT_SAFETENSORS: return "safetensors";
    case EMB_FORMAT_NPY: return "npy";
    case EMB_FORMAT_W2V_TEXT: return "word2vec-text";
    case EMB_FORMAT_W2V_BINARY: return "word2vec-binary";
    case EMB_FORMAT_GLOVE: return "glove";
    case EMB_FORMAT_FASTTEXT_BIN: return "fasttext-bin";
    }
    return "unknown";
}

emb_status emb_format_parse(const char *name, emb_format *out) {
    if (!name) return emb__null("name");
    if (!out) return emb__null("out");
    static const struct {
        const char *name;
        emb_format f;
    } names[] = {{"safetensors", EMB_FORMAT_SAFETENSORS}, {"st", EMB_FORMAT_SAFETENSORS},
                 {"npy", EMB_FORMAT_NPY},                 {"word2vec-text", EMB_FORMAT_W2V_TEXT},
                 {"w2v", EMB_FORMAT_W2V_TEXT},            {"txt", EMB_FORMAT_W2V_TEXT},
                 {"text", EMB_FORMAT_W2V_TEXT},           {"vec", EMB_FORMAT_W2V_TEXT},
                 {"word2vec-binary", EMB_FORMAT_W2V_BINARY}, {"bin", EMB_FORMAT_W2V_BINARY},
                 {"binary", EMB_FORMAT_W2V_BINARY},       {"glove", EMB_FORMAT_GLOVE},
                 {"fasttext-bin", EMB_FORMAT_FASTTEXT_BIN}, {"fasttext", EMB_FORMAT_FASTTEXT_BIN},
                 {"auto", EMB_FORMAT_AUTO}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(name, names[k].name)) {
            *out = names[k].f;
            return EMB_OK;
        }
    return emb__error(EMB_ERR_INVALID,
                      "unknown format \"%s\" (known: safetensors, npy, word2vec-text (txt, vec), "
                      "word2vec-binary (bin), glove, fasttext-bin (fasttext), auto)", name);
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
        if (emb__get_u64le(d) <= 100000000u) return EMB_FORMAT_SAFETENSORS;
    }
    /* "rows dim" header? */
    size_t p = 0;
    int nums = 0;
    for (;;) {
        while (p < n && (d[p] == ' ' || d[p] == '\t')) p++;
        if (p < n && d[p] >= '0' && d[p] <= '9') {
            while (p < n && d[p] >= '0' && d[p] <= '9') p++;
            nums++;
            continue;
        }
        break;
    }
    if (p < n && d[p] == '\r') p++;
    if (nums != 2 || (p < n && d[p] != '\n')) return EMB_FORMAT_GLOVE;
    p++;
    /* The first row decides: in text, the rest of its line after the word is exactly dim
     * printable numbers; a binary row's dim * 4 raw bytes follow the word's space (and
     * may begin with a newline or any other byte). */
    uint64_t dim = 0;
    {
        size_t q = 0;
        while (q < n && (d[q] == ' ' || d[q] == '\t')) q++;
        while (q < n && d[q] >= '0' && d[q] <= '9') q++;
        while (q < n && (d[q] == ' ' || d[q] == '\t')) q++;
        while (q < n && d[q] >= '0' && d[q] <= '9' && dim < (1u << 30)) dim = dim * 10 + (uint64_t)(d[q++] - '0');
    }
    while (p < n && (d[p] == '\n' || d[p] == '\r')) p++;
    while (p < n && d[p] != ' ') p++;
    size_t limit = p + 65536 < n ? p + 65536 : n;
    uint64_t fields = 0;
    bool in_field = false;
    for (; p < limit; p++) {
        unsigned char c = d[p];
        if (c == '\n') return fields == dim ? EMB_FORMAT_W2V_TEXT : EMB_FORMAT_W2V_BINARY;
        if (!(c == '\t' || c == '\r' || (c >= 0x20 && c < 0x7f))) return EMB_FORMAT_W2V_BINARY;
        bool sp = c == ' ' || c == '\t' || c == '\r';
        if (!sp && !in_field) fields++;
        in_field = !sp;
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
