/* src/formats/vectors.c: emb_vectors_read and emb_vectors_write, the dispatch between the
 * table formats: it detects the format (io's src/io/format.c), then hands the file to io's
 * reader or writer of that format, or, for a quantized safetensors table, to quant's reader.
 * It sits above io and quant so that neither calls the other (docs/architecture.md). */
#include "io/io_face.h"
#include "half.h"
#include "quant/quant_face.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

emb_vectors_read_options emb_vectors_read_options_default(void) {
    emb_vectors_read_options o = {EMB_FORMAT_AUTO, 0, NULL, true};
    return o;
}

emb_vectors_write_options emb_vectors_write_options_default(void) {
    emb_vectors_write_options o = {EMB_FORMAT_AUTO, EMB_FLOAT32, NULL, 0, false, true};
    return o;
}

void emb_vectors_release(emb_vectors *v) {
    if (!v) return;
    emb_tensor_release(&v->weight);
    emb_vocab_free(v->vocab);
    memset(v, 0, sizeof *v);
}

/* A safetensors file (taken over, closed here): a rowwise-quantized table (emb.qtype int8
 * or int4, include/emb/quant.h) is read and dequantized by quant, any other by io. */
static emb_status read_safetensors(const char *path, emb__file *f,
                                   const emb_vectors_read_options *o, emb_vectors *out) {
    emb_safetensors *st;
    emb_status rc = emb__safetensors_open_file(path, f, &st);
    if (rc) return rc;
    const char *qt = emb_safetensors_metadata(st, "emb.qtype");
    if (qt && (!strcmp(qt, "int8") || !strcmp(qt, "int4")) &&
        (!o->tensor || !strcmp(o->tensor, "weight")))
        rc = emb__qtable_read_vectors(st, path, o->limit, out);
    else
        rc = emb__read_safetensors_table(path, st, o, out);
    emb_safetensors_free(st);
    return rc;
}

emb_status emb_vectors_read(const char *path, const emb_vectors_read_options *opts,
                            emb_vectors *out) {
    if (!path) return emb__null("path");
    if (!out) return emb__null("out");
    emb_vectors_read_options o = opts ? *opts : emb_vectors_read_options_default();
    if (o.limit < 0)
        return emb__error(EMB_ERR_INVALID, "limit %lld is negative", (long long)o.limit);
    if ((int)o.format < 0 || o.format > EMB_FORMAT_FASTTEXT_BIN)
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
        if ((rc = emb__sniff_file(path, &f, &fmt))) {
            emb__file_close(&f);
            return rc;
        }
        /* Unrecognised content (the GloVe fallback) in a file named .safetensors or .npy is
         * a damaged file of that format: report what is wrong with it as such. */
        emb_format ext = emb_format_from_path(path);
        if (fmt == EMB_FORMAT_GLOVE && (ext == EMB_FORMAT_SAFETENSORS || ext == EMB_FORMAT_NPY))
            fmt = ext;
    }
    v.format = fmt;
    switch (fmt) {
    case EMB_FORMAT_SAFETENSORS:
        rc = read_safetensors(path, &f, &o, &v);
        break;
    case EMB_FORMAT_NPY:
        rc = emb__read_npy_vectors(path, &f, &o, &v);
        break;
    case EMB_FORMAT_FASTTEXT_BIN:
        rc = emb__read_fasttext_vectors(path, &f, &o, &v);
        break;
    default:
        emb__file_populate(&f); /* text and binary readers touch every byte */
        rc = emb__read_w2v(path, &f, fmt, &o, &v);
        break;
    }
    emb__file_close(&f);
    if (rc) {
        emb_vectors_release(&v);
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
        for (int64_t i = 0; i < emb_vocab_num_words(v) && !vw.status; i++) {
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
            rc =
                emb__error(EMB_ERR_IO,
                           "%s: written, but the word list of the table it replaced, %s, cannot be "
                           "removed: %s",
                           path, vp, strerror(errno));
    }
    free(vp);
    return rc;
}

emb_status emb_vectors_write(const char *path, const emb_tensor *weight, const emb_vocab *vocab,
                             const emb_vectors_write_options *opts) {
    if (!path) return emb__null("path");
    if (!weight) return emb__null("weight");
    emb_status rc = emb_tensor_check(weight, "weight");
    if (rc) return rc;
    if (weight->dtype != EMB_FLOAT32)
        return emb__error(EMB_ERR_DTYPE, "weight must be float32, got %s",
                          emb_dtype_name(weight->dtype));
    if (weight->ndim != 2)
        return emb__error(EMB_ERR_SHAPE, "weight must be 2-D [rows, dim], got %d dimensions",
                          weight->ndim);
    emb_vectors_write_options o = opts ? *opts : emb_vectors_write_options_default();
    emb_format fmt = o.format == EMB_FORMAT_AUTO ? emb_format_from_path(path) : o.format;
    if (fmt == EMB_FORMAT_AUTO)
        return emb__error(EMB_ERR_INVALID,
                          "%s: cannot tell the format from the file name (use .safetensors, .npy, "
                          ".bin, .vec or .txt, "
                          "or name the format)",
                          path);
    if ((int)fmt < 0 || fmt > EMB_FORMAT_FASTTEXT_BIN)
        return emb__error(EMB_ERR_INVALID, "unknown format %d", (int)fmt);
    if (fmt == EMB_FORMAT_FASTTEXT_BIN)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "%s: a fastText .bin model holds n-gram rows and the output table, not "
                          "only word vectors; "
                          "a table of words is written as .vec (word2vec text)",
                          path);
    if (vocab && emb_vocab_num_words(vocab) != weight->shape[0])
        return emb__error(EMB_ERR_INVALID,
                          "%s: the vocabulary has %lld words but the table has %lld rows", path,
                          (long long)emb_vocab_num_words(vocab), (long long)weight->shape[0]);
    switch (fmt) {
    case EMB_FORMAT_SAFETENSORS:
        return emb__write_safetensors_vectors(path, weight, vocab, &o);
    case EMB_FORMAT_NPY: {
        if (o.dtype != EMB_FLOAT32 && o.dtype != EMB_FLOAT16 && o.dtype != EMB_FLOAT64)
            return emb__error(EMB_ERR_INVALID,
                              "%s: an .npy table is written as float32, float16 or float64, not %s",
                              path, emb_dtype_name(o.dtype));
        emb_tensor t = *weight;
        void *conv = NULL;
        int64_t numel = emb_tensor_numel(weight);
        if (o.dtype != EMB_FLOAT32) {
            conv = malloc((size_t)(numel ? numel : 1) * emb_dtype_nbytes(o.dtype));
            if (!conv) return emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
            const float *s = weight->data;
            for (int64_t k = 0; k < numel; k++) {
                if (o.dtype == EMB_FLOAT64)
                    ((double *)conv)[k] = s[k];
                else
                    ((uint16_t *)conv)[k] = emb__f32_to_f16(s[k]);
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
            return emb__error(EMB_ERR_INVALID,
                              "%s: the %s format stores float32 values; dtype %s is not possible",
                              path, emb_format_name(fmt), emb_dtype_name(o.dtype));
        return emb__write_w2v(path, weight, vocab, fmt, &o);
    }
}
