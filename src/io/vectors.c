/* emb_vectors_read / emb_vectors_write: format names, detection and dispatch. */
#include "io_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *emb_format_name(emb_format f) {
    switch (f) {
    case EMB_FORMAT_AUTO: return "auto";
    case EMB_FORMAT_SAFETENSORS: return "safetensors";
    case EMB_FORMAT_NPY: return "npy";
    case EMB_FORMAT_W2V_TEXT: return "word2vec-text";
    case EMB_FORMAT_W2V_BINARY: return "word2vec-binary";
    case EMB_FORMAT_GLOVE: return "glove";
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
                 {"auto", EMB_FORMAT_AUTO}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(name, names[k].name)) {
            *out = names[k].f;
            return EMB_OK;
        }
    return emb__error(EMB_ERR_INVALID,
                      "unknown format \"%s\" (known: safetensors, npy, word2vec-text (txt, vec), "
                      "word2vec-binary (bin), glove, auto)", name);
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
     * reports as such. */
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
            bool binary_length = p == word_end + 1 + 4 * dim;
            return binary_length && !all_numbers ? EMB_FORMAT_W2V_BINARY : EMB_FORMAT_W2V_TEXT;
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
        if (!emb_parse_float((const char *)d + t, p - t, &x)) all_numbers = false;
        fields++;
    }
    return EMB_FORMAT_W2V_TEXT;
}

static emb_status sniff_file(const char *path, const emb__file *f, emb_format *out) {
    if (f->size == 0) return emb__error(EMB_ERR_FORMAT, "%s: empty file", path);
    if (f->size >= 4 && !memcmp(f->data, "\xba\x16\x4f\x2f", 4))
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "%s: a fastText .bin model (magic 793712314), which emb does not read; use the .vec "
                          "file fastText writes next to it", path);
    *out = emb__sniff(f->data, f->size);
    return EMB_OK;
}

emb_status emb_format_sniff(const char *path, emb_format *out) {
    if (!path) return emb__null("path");
    if (!out) return emb__null("out");
    emb__file f;
    emb_status rc = emb__file_open(path, &f, 0);
    if (rc) return rc;
    rc = sniff_file(path, &f, out);
    emb__file_close(&f);
    return rc;
}

emb_read_options emb_read_options_default(void) {
    emb_read_options o = {EMB_FORMAT_AUTO, 0, NULL, true};
    return o;
}

emb_write_options emb_write_options_default(void) {
    emb_write_options o = {EMB_FORMAT_AUTO, EMB_FLOAT32, NULL, 0, false, true};
    return o;
}

void emb_vectors_free(emb_vectors *v) {
    if (!v) return;
    emb_tensor_free(&v->weight);
    emb_vocab_free(v->vocab);
    memset(v, 0, sizeof *v);
}

emb_status emb_vectors_read(const char *path, const emb_read_options *opts, emb_vectors *out) {
    if (!path) return emb__null("path");
    if (!out) return emb__null("out");
    emb_read_options o = opts ? *opts : emb_read_options_default();
    if (o.limit < 0) return emb__error(EMB_ERR_INVALID, "limit %lld is negative", (long long)o.limit);
    if ((int)o.format < 0 || o.format > EMB_FORMAT_GLOVE)
        return emb__error(EMB_ERR_INVALID, "unknown format %d", (int)o.format);
    emb_vectors v;
    memset(&v, 0, sizeof v);
    /* One open file for everything: detection, header, words and values (a pipe is read
     * once; a file replaced meanwhile is read whole, as it was). */
    emb__file f;
    emb_status rc = emb__file_open(path, &f, 0);
    if (rc) return rc;
    emb_format fmt = o.format;
    if (fmt == EMB_FORMAT_AUTO) {
        if ((rc = sniff_file(path, &f, &fmt))) {
            emb__file_close(&f);
            return rc;
        }
        /* Unrecognised content (the GloVe fallback) in a file named .safetensors or .npy is
         * a damaged file of that format: report what is wrong with it as such. */
        emb_format ext = emb_format_from_path(path);
        if (fmt == EMB_FORMAT_GLOVE && (ext == EMB_FORMAT_SAFETENSORS || ext == EMB_FORMAT_NPY)) fmt = ext;
    }
    v.format = fmt;
    switch (fmt) {
    case EMB_FORMAT_SAFETENSORS: rc = emb__read_safetensors_vectors(path, &f, &o, &v); break;
    case EMB_FORMAT_NPY: rc = emb__read_npy_vectors(path, &f, &o, &v); break;
    default:
        emb__file_populate(&f); /* text and binary readers touch every byte */
        rc = emb__read_w2v(path, &f, fmt, &o, &v);
        break;
    }
    emb__file_close(&f);
    if (rc) {
        emb_vectors_free(&v);
        return rc;
    }
    *out = v;
    return EMB_OK;
}

/* The table as .npy and its words in "<stem>.vocab" beside it, replaced together: both
 * are written completely before either is renamed into place. Without words, a word list
 * left by an earlier table is removed (it would be read with the new one). A destination
 * that is not a regular file (a device, a FIFO) gets the table only. */
static emb_status write_npy_table(const char *path, const emb_tensor *t, const emb_vocab *v) {
    emb__writer tw, vw;
    emb_status rc = emb__npy_write_open(path, t, &tw);
    if (rc) return rc;
    char *vp = NULL;
    if (!emb__writer_seekable(&tw)) return emb__writer_commit(&tw);
    if ((rc = emb__vocab_sidecar_path(path, &vp))) {
        emb__writer_abort(&tw);
        return rc;
    }
    if (v) {
        if ((rc = emb__writer_open(&vw, vp))) {
            emb__writer_abort(&tw);
            free(vp);
            return rc;
        }
        for (int64_t i = 0; i < emb_vocab_size(v) && !vw.status; i++) {
            size_t n;
            const char *s = emb_vocab_word(v, i, &n);
            char num[32];
            int k = snprintf(num, sizeof num, " %lld\n", (long long)emb_vocab_count(v, i));
            emb__writer_put(&vw, s, n);
            emb__writer_put(&vw, num, (size_t)k);
        }
        if ((rc = vw.status)) {
            emb__writer_abort(&vw);
            emb__writer_abort(&tw);
        } else {
            rc = emb__writer_commit_pair(&vw, &tw); /* the words first, then the table */
        }
    } else if (!(rc = emb__writer_commit(&tw))) {
        struct stat sb;
        if (lstat(vp, &sb) == 0 && unlink(vp) != 0)
            rc = emb__error(EMB_ERR_IO, "%s: written, but the word list of the table it replaced, %s, cannot be "
                                        "removed: %s", path, vp, strerror(errno));
    }
    free(vp);
    return rc;
}

emb_status emb_vectors_write(const char *path, const emb_tensor *weight, const emb_vocab *vocab,
                             const emb_write_options *opts) {
    if (!path) return emb__null("path");
    if (!weight) return emb__null("weight");
    emb_status rc = emb_tensor_check(weight, "weight");
    if (rc) return rc;
    if (weight->dtype != EMB_FLOAT32)
        return emb__error(EMB_ERR_DTYPE, "weight must be float32, got %s", emb_dtype_name(weight->dtype));
    if (weight->ndim != 2)
        return emb__error(EMB_ERR_SHAPE, "weight must be 2-D [rows, dim], got %d dimensions", weight->ndim);
    emb_write_options o = opts ? *opts : emb_write_options_default();
    emb_format fmt = o.format == EMB_FORMAT_AUTO ? emb_format_from_path(path) : o.format;
    if (fmt == EMB_FORMAT_AUTO)
        return emb__error(EMB_ERR_INVALID,
                          "%s: cannot tell the format from the file name (use .safetensors, .npy, .bin, .vec or .txt, "
                          "or name the format)", path);
    if ((int)fmt < 0 || fmt > EMB_FORMAT_GLOVE) return emb__error(EMB_ERR_INVALID, "unknown format %d", (int)fmt);
    if (vocab && emb_vocab_size(vocab) != weight->shape[0])
        return emb__error(EMB_ERR_INVALID, "%s: the vocabulary has %lld words but the table has %lld rows", path,
                          (long long)emb_vocab_size(vocab), (long long)weight->shape[0]);
    switch (fmt) {
    case EMB_FORMAT_SAFETENSORS: return emb__write_safetensors_vectors(path, weight, vocab, &o);
    case EMB_FORMAT_NPY: {
        if (o.dtype != EMB_FLOAT32 && o.dtype != EMB_FLOAT16 && o.dtype != EMB_FLOAT64)
            return emb__error(EMB_ERR_INVALID, "%s: an .npy table is written as float32, float16 or float64, not %s",
                              path, emb_dtype_name(o.dtype));
        emb_tensor t = *weight;
        void *conv = NULL;
        int64_t numel = emb_tensor_numel(weight);
        if (o.dtype != EMB_FLOAT32) {
            conv = malloc((size_t)(numel ? numel : 1) * emb_dtype_size(o.dtype));
            if (!conv) return emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
            const float *s = weight->data;
            for (int64_t k = 0; k < numel; k++) {
                if (o.dtype == EMB_FLOAT64) ((double *)conv)[k] = s[k];
                else ((uint16_t *)conv)[k] = emb_f32_to_f16(s[k]);
            }
            t.dtype = o.dtype;
            t.data = numel ? conv : NULL;
        }
        rc = write_npy_table(path, &t, vocab);
        free(conv);
        return rc;
    }
    default:
        if (o.dtype != EMB_FLOAT32)
            return emb__error(EMB_ERR_INVALID, "%s: the %s format stores float32 values; dtype %s is not possible", path,
                              emb_format_name(fmt), emb_dtype_name(o.dtype));
        return emb__write_w2v(path, weight, vocab, fmt, &o);
    }
}
