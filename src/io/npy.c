/* NumPy .npy v1/v2/v3: a tolerant reader of the header's dict literal, a writer that
 * produces np.save's exact bytes, and the "<stem>.vocab" word list kept next to an .npy. */
#include "io_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct npy_info {
    emb_dtype dtype;
    bool swap; /* big-endian data */
    bool fortran;
    int ndim;
    int64_t shape[EMB_MAX_DIMS];
    const unsigned char *data;
    size_t nbytes;
} npy_info;

typedef struct npy_parser {
    const char *path;
    const char *p, *end;
    const char *base;
} npy_parser;

static emb_status npy_fail(const npy_parser *ps, const char *what) {
    return emb__error(EMB_ERR_FORMAT, "%s: invalid .npy header at header byte %lld: %s", ps->path,
                      (long long)(ps->p - ps->base), what);
}

static void npy_ws(npy_parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

/* The shape tuple of the header (after "'shape':"): into info->ndim and info->shape. */
static emb_status npy_shape(npy_parser *ps, npy_info *info) {
    npy_ws(ps);
    if (ps->p >= ps->end || *ps->p != '(') return npy_fail(ps, "shape must be a tuple");
    ps->p++;
    info->ndim = 0; /* a repeated key: the last one counts, as in numpy's dict */
    for (;;) {
        npy_ws(ps);
        if (ps->p < ps->end && *ps->p == ')') {
            ps->p++;
            break;
        }
        if (ps->p >= ps->end || (unsigned)(*ps->p - '0') >= 10)
            return npy_fail(ps, "shape entries must be non-negative integers");
        int64_t x = 0;
        while (ps->p < ps->end && (unsigned)(*ps->p - '0') < 10) {
            if (x > (INT64_MAX - 9) / 10) return npy_fail(ps, "shape entry too large");
            x = x * 10 + (*ps->p++ - '0');
        }
        while (ps->p < ps->end && *ps->p == 'L') ps->p++; /* Python 2 longs */
        if (info->ndim == EMB_MAX_DIMS)
            return emb__error(EMB_ERR_SHAPE, "%s: .npy array has more than %d dimensions", ps->path,
                              EMB_MAX_DIMS);
        info->shape[info->ndim++] = x;
        npy_ws(ps);
        if (ps->p < ps->end && *ps->p == ',')
            ps->p++;
        else if (ps->p >= ps->end || *ps->p != ')')
            return npy_fail(ps, "expected ',' or ')' in shape");
    }
    return EMB_OK;
}

/* A quoted string (' or "), no escapes needed for the keys and descrs numpy writes. */
static emb_status npy_string(npy_parser *ps, const char **s, size_t *n) {
    npy_ws(ps);
    if (ps->p >= ps->end || (*ps->p != '\'' && *ps->p != '"'))
        return npy_fail(ps, "expected a quoted string");
    char q = *ps->p++;
    const char *st = ps->p;
    while (ps->p < ps->end && *ps->p != q) {
        if (*ps->p == '\\') return npy_fail(ps, "escapes in strings are not supported");
        ps->p++;
    }
    if (ps->p >= ps->end) return npy_fail(ps, "unterminated string");
    *s = st;
    *n = (size_t)(ps->p - st);
    ps->p++;
    return EMB_OK;
}

static bool npy_word(npy_parser *ps, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(ps->end - ps->p) >= n && !memcmp(ps->p, w, n)) {
        ps->p += n;
        return true;
    }
    return false;
}

static emb_status npy_descr(npy_parser *ps, const char *s, size_t n, npy_info *info) {
    char d[16];
    if (n == 0 || n >= sizeof d)
        return emb__error(EMB_ERR_DTYPE, "%s: unsupported .npy descr of %zu characters", ps->path,
                          n);
    memcpy(d, s, n);
    d[n] = '\0';
    char order = d[0];
    const char *t = d;
    if (order == '<' || order == '>' || order == '|' || order == '=')
        t++;
    else
        order = '=';
    static const struct {
        const char *code;
        emb_dtype dt;
    } map[] = {{"f4", EMB_FLOAT32}, {"f8", EMB_FLOAT64}, {"f2", EMB_FLOAT16},
               {"i8", EMB_INT64},   {"i4", EMB_INT32},   {"i2", EMB_INT16},
               {"i1", EMB_INT8},    {"u1", EMB_UINT8},   {"b1", EMB_BOOL}};
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
        if (!strcmp(t, map[k].code)) {
            info->dtype = map[k].dt;
            info->swap = order == '>' && emb_dtype_nbytes(map[k].dt) > 1;
            return EMB_OK;
        }
    if (t[0] == 'O')
        return emb__error(
            EMB_ERR_DTYPE,
            "%s: .npy holds Python objects (descr '%s'), which need pickle; emb refuses them",
            ps->path, d);
    return emb__error(EMB_ERR_DTYPE,
                      "%s: unsupported .npy descr '%s' (supported: f4 f8 f2 i8 i4 i2 i1 u1 b1)",
                      ps->path, d);
}

static emb_status npy_parse(const char *path, const emb__file *f, npy_info *info) {
    const unsigned char *d = f->data;
    memset(info, 0, sizeof *info);
    if (f->size < 10 || memcmp(d, "\x93NUMPY", 6))
        return emb__error(EMB_ERR_FORMAT, "%s: not an .npy file (no \\x93NUMPY magic)", path);
    unsigned major = d[6];
    size_t pre, hlen;
    if (major == 1) {
        pre = 10;
        hlen = emb__get_u16le(d + 8);
    } else if (major == 2 || major == 3) {
        if (f->size < 12) return emb__error(EMB_ERR_FORMAT, "%s: truncated .npy preamble", path);
        pre = 12;
        hlen = emb__get_u32le(d + 8);
    } else {
        return emb__error(EMB_ERR_FORMAT,
                          "%s: unsupported .npy version %u.%u (supported: 1.0, 2.0, 3.0)", path,
                          major, d[7]);
    }
    if (hlen > f->size - pre)
        return emb__error(EMB_ERR_FORMAT,
                          "%s: the .npy header length %zu exceeds the %zu bytes after the preamble "
                          "(truncated file?)",
                          path, hlen, f->size - pre);
    npy_parser ps = {path, (const char *)d + pre, (const char *)d + pre + hlen,
                     (const char *)d + pre};
    if (major < 3) /* v1/v2 headers are latin-1: only ASCII is meaningful in them */
        for (const char *q = ps.p; q < ps.end; q++)
            if (*q == '\0') return npy_fail(&ps, "NUL byte in the header");
    npy_ws(&ps);
    if (ps.p >= ps.end || *ps.p != '{') return npy_fail(&ps, "the header is not a dict literal");
    ps.p++;
    bool have_descr = false, have_fortran = false, have_shape = false;
    for (;;) {
        npy_ws(&ps);
        if (ps.p < ps.end && *ps.p == '}') {
            ps.p++;
            break;
        }
        const char *k;
        size_t kn;
        emb_status rc = npy_string(&ps, &k, &kn);
        if (rc) return rc;
        npy_ws(&ps);
        if (ps.p >= ps.end || *ps.p != ':') return npy_fail(&ps, "expected ':'");
        ps.p++;
        if (kn == 5 && !memcmp(k, "descr", 5)) {
            const char *s;
            size_t n;
            npy_ws(&ps);
            if (ps.p < ps.end && *ps.p == '[')
                return emb__error(EMB_ERR_DTYPE, "%s: structured .npy dtypes are not supported",
                                  path);
            if ((rc = npy_string(&ps, &s, &n)) || (rc = npy_descr(&ps, s, n, info))) return rc;
            have_descr = true;
        } else if (kn == 13 && !memcmp(k, "fortran_order", 13)) {
            npy_ws(&ps);
            if (npy_word(&ps, "True"))
                info->fortran = true;
            else if (npy_word(&ps, "False"))
                info->fortran = false;
            else
                return npy_fail(&ps, "fortran_order must be True or False");
            have_fortran = true;
        } else if (kn == 5 && !memcmp(k, "shape", 5)) {
            if ((rc = npy_shape(&ps, info))) return rc;
            have_shape = true;
        } else {
            return npy_fail(
                &ps, "unexpected key (only 'descr', 'fortran_order' and 'shape' are allowed)");
        }
        npy_ws(&ps);
        if (ps.p < ps.end && *ps.p == ',')
            ps.p++;
        else if (ps.p >= ps.end || *ps.p != '}')
            return npy_fail(&ps, "expected ',' or '}'");
    }
    npy_ws(&ps);
    if (ps.p != ps.end) return npy_fail(&ps, "unexpected text after the dict");
    if (!have_descr || !have_fortran || !have_shape)
        return npy_fail(&ps, "the header must have 'descr', 'fortran_order' and 'shape'");
    int64_t n = 1, nb;
    for (int k = 0; k < info->ndim; k++)
        if (!emb__mul_i64(n, info->shape[k], &n))
            return emb__error(EMB_ERR_FORMAT, "%s: the .npy shape's element count overflows", path);
    if (!emb__mul_i64(n, (int64_t)emb_dtype_nbytes(info->dtype), &nb))
        return emb__error(EMB_ERR_FORMAT, "%s: the .npy data size overflows", path);
    size_t avail = f->size - pre - hlen;
    if ((uint64_t)nb > avail)
        return emb__error(EMB_ERR_FORMAT,
                          "%s: truncated: the header's shape needs %lld bytes of data but the file "
                          "holds %zu",
                          path, (long long)nb, avail);
    if ((uint64_t)nb < avail)
        return emb__error(EMB_ERR_FORMAT,
                          "%s: %zu bytes after the array data (the shape needs %lld)", path,
                          avail - (size_t)nb, (long long)nb);
    info->data = d + pre + hlen;
    info->nbytes = (size_t)nb;
    return EMB_OK;
}

static void swap_bytes(unsigned char *p, size_t esz, size_t n) {
    for (size_t i = 0; i < n; i++, p += esz)
        for (size_t a = 0, b = esz - 1; a < b; a++, b--) {
            unsigned char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

/* Copies the array into C order, native byte order. */
static void npy_copy(const npy_info *in, unsigned char *dst) {
    size_t esz = emb_dtype_nbytes(in->dtype);
    int64_t n = 1;
    for (int k = 0; k < in->ndim; k++) n *= in->shape[k];
    if (!in->fortran || in->ndim < 2) {
        memcpy(dst, in->data, in->nbytes);
    } else {
        /* Fortran order: element (i0..ik) is at sum i_j * prod(shape[<j]). Walk C order. */
        int64_t idx[EMB_MAX_DIMS] = {0}, fstride[EMB_MAX_DIMS];
        int64_t s = 1;
        for (int k = 0; k < in->ndim; k++) fstride[k] = s, s *= in->shape[k];
        int64_t off = 0;
        for (int64_t i = 0; i < n; i++) {
            memcpy(dst + (size_t)i * esz, in->data + (size_t)off * esz, esz);
            for (int k = in->ndim - 1; k >= 0; k--) {
                if (++idx[k] < in->shape[k]) {
                    off += fstride[k];
                    break;
                }
                off -= fstride[k] * (idx[k] - 1);
                idx[k] = 0;
            }
        }
    }
    if (in->swap) swap_bytes(dst, esz, (size_t)n);
}

emb_status emb_npy_read(const char *path, emb_tensor *out) {
    if (!path) return emb__null("path");
    if (!out) return emb__null("out");
    emb__file f;
    emb_status rc = emb__file_open(path, &f, 0);
    if (rc) return rc;
    npy_info info;
    emb_tensor t;
    if (!(rc = npy_parse(path, &f, &info)) &&
        !(rc = emb_tensor_alloc(&t, info.dtype, info.ndim, info.shape))) {
        if (info.nbytes) npy_copy(&info, t.data);
        *out = t;
    }
    emb__file_close(&f);
    return rc;
}

emb_status emb__read_npy_vectors(const char *path, const emb__file *f,
                                 const emb_vectors_read_options *o, emb_vectors *out) {
    npy_info info;
    emb_status rc = npy_parse(path, f, &info);
    if (rc) return rc;
    if (info.ndim != 2)
        return emb__error(EMB_ERR_SHAPE, "%s: the array has %d dimensions; a table has 2", path,
                          info.ndim);
    if (info.dtype != EMB_FLOAT32 && info.dtype != EMB_FLOAT64 && info.dtype != EMB_FLOAT16)
        return emb__error(EMB_ERR_DTYPE,
                          "%s: the array is %s; a table must be float32, float64 or float16", path,
                          emb_dtype_name(info.dtype));
    int64_t rows = info.shape[0], dim = info.shape[1];
    if (o->limit > 0 && o->limit < rows) rows = o->limit;
    if ((rc = emb__alloc_table(&out->weight, rows, dim))) return rc;
    if (emb__io_test_hook) emb__io_test_hook(path);
    if (rows > 0 && dim > 0) {
        if (info.dtype == EMB_FLOAT32 && !info.fortran && !info.swap) {
            /* straight from the same open file into the table */
            rc = emb__file_pread(f, path, (uint64_t)(info.data - f->data), out->weight.data,
                                 (size_t)(rows * dim) * 4);
        } else if (info.fortran || info.swap || rows < info.shape[0]) {
            unsigned char *tmp = malloc(info.nbytes);
            if (!tmp) return emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
            npy_copy(&info, tmp);
            emb__to_f32(out->weight.data, tmp, info.dtype, rows * dim);
            free(tmp);
        } else {
            emb__to_f32(out->weight.data, info.data, info.dtype, rows * dim);
        }
    }
    if (rc) return rc;
    out->file_dtype = info.dtype;
    out->file_rows = info.shape[0];
    return emb__vocab_sidecar_read(path, info.shape[0], rows, o->check_utf8, &out->vocab);
}

static const char *npy_descr_of(emb_dtype d) {
    switch (d) {
    case EMB_FLOAT32:
        return "<f4";
    case EMB_FLOAT64:
        return "<f8";
    case EMB_FLOAT16:
        return "<f2";
    case EMB_INT64:
        return "<i8";
    case EMB_INT32:
        return "<i4";
    case EMB_INT16:
        return "<i2";
    case EMB_INT8:
        return "|i1";
    case EMB_UINT8:
        return "|u1";
    case EMB_BOOL:
        return "|b1";
    case EMB_BFLOAT16:
        return NULL;
    }
    return NULL;
}

emb_status emb_npy_write(const char *path, const emb_tensor *t) {
    emb__writer w;
    emb_status rc = emb__npy_write_open(path, t, &w);
    return rc ? rc : emb__writer_commit(&w);
}

emb_status emb__npy_write_open(const char *path, const emb_tensor *t, emb__writer *w) {
    if (!path) return emb__null("path");
    emb_status rc = emb_tensor_check(t, "tensor");
    if (rc) return rc;
    const char *descr = npy_descr_of(t->dtype);
    if (!descr)
        return emb__error(EMB_ERR_DTYPE, "%s: NumPy has no %s type; convert to float32 first", path,
                          emb_dtype_name(t->dtype));
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int k = 0; k < t->ndim; k++)
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, k ? ", %lld" : "%lld",
                      (long long)t->shape[k]);
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s), }", t->ndim == 1 ? "," : "");
    if (t->ndim > 0) { /* numpy's spare room for growing the first axis in place */
        char dig[24];
        int nd = snprintf(dig, sizeof dig, "%lld", (long long)t->shape[0]);
        for (int k = nd; k < 21; k++) hdr[n++] = ' ';
    }
    int hl = n + 1, pad = 64 - ((10 + hl) % 64);
    for (int k = 0; k < pad; k++) hdr[n++] = ' ';
    hdr[n++] = '\n';
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    emb__put_u16le(pre + 8, (uint16_t)n);
    if ((rc = emb__writer_open(w, path))) return rc;
    emb__writer_put(w, pre, 10);
    emb__writer_put(w, hdr, (size_t)n);
    if (emb_tensor_nbytes(t)) emb__writer_put(w, t->data, emb_tensor_nbytes(t));
    if ((rc = w->status)) emb__writer_abort(w);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * The word list next to an .npy
 * ------------------------------------------------------------------------------------- */

emb_status emb__vocab_sidecar_path(const char *npy_path, char **out) {
    size_t n = strlen(npy_path);
    if (n > 4 && !strcmp(npy_path + n - 4, ".npy")) n -= 4;
    char *s = malloc(n + 7);
    if (!s) return emb__error(EMB_ERR_NOMEM, "out of memory");
    memcpy(s, npy_path, n);
    memcpy(s + n, ".vocab", 7);
    *out = s;
    return EMB_OK;
}

emb_status emb__vocab_sidecar_read(const char *npy_path, int64_t file_rows, int64_t rows,
                                   bool check_utf8, emb_vocab **out) {
    *out = NULL;
    char *vp = NULL;
    emb_status rc = emb__vocab_sidecar_path(npy_path, &vp);
    if (rc) return rc;
    struct stat sb;
    if (stat(vp, &sb) != 0) {
        free(vp);
        return EMB_OK;
    }
    emb__file f;
    if ((rc = emb__file_open(vp, &f, EMB__FILE_READ))) {
        free(vp);
        return rc;
    }
    emb_vocab *v = NULL;
    if ((rc = emb_vocab_create(&v))) goto out;
    const unsigned char *p = f.data, *end = f.data + f.size;
    int64_t line = 0;
    while (p < end) {
        const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
        const unsigned char *le = nl ? nl : end;
        line++;
        if (line > file_rows) {
            rc = emb__error(EMB_ERR_FORMAT, "%s: line %lld: more words than the table's %lld rows",
                            vp, (long long)line, (long long)file_rows);
            goto out;
        }
        if (le > p && le[-1] == '\r') le--;
        const unsigned char *sp = le;
        while (sp > p && sp[-1] != ' ') sp--;
        int64_t c;
        if (sp <= p + 1 || !emb__parse_count((const char *)sp, (size_t)(le - sp), &c)) {
            bool digits = sp > p + 1 && sp < le;
            for (const unsigned char *q = sp; digits && q < le; q++)
                digits = *q >= '0' && *q <= '9';
            rc = digits ? emb__error(EMB_ERR_FORMAT, "%s: line %lld: the count is larger than %lld",
                                     vp, (long long)line, (long long)INT64_MAX)
                        : emb__error(EMB_ERR_FORMAT, "%s: line %lld: expected \"word count\"", vp,
                                     (long long)line);
            goto out;
        }
        size_t wn = (size_t)(sp - 1 - p);
        if (wn > EMB_VOCAB_MAX_WORD) {
            rc = emb__error(EMB_ERR_FORMAT, "%s: line %lld: a word of %zu bytes (the limit is %d)",
                            vp, (long long)line, wn, EMB_VOCAB_MAX_WORD);
            goto out;
        }
        if (check_utf8 && !emb__utf8_valid((const char *)p, wn)) {
            rc = emb__error(EMB_ERR_FORMAT, "%s: line %lld: the word is not valid UTF-8", vp,
                            (long long)line);
            goto out;
        }
        if (line <= rows) {
            bool added;
            if ((rc = emb_vocab_add(v, (const char *)p, wn, c, NULL, &added))) goto out;
            if (!added) {
                rc = emb__error(EMB_ERR_FORMAT, "%s: line %lld: the word repeats an earlier one",
                                vp, (long long)line);
                goto out;
            }
        }
        p = nl ? nl + 1 : end;
    }
    if (line != file_rows)
        rc = emb__error(EMB_ERR_FORMAT, "%s: %lld words for a table of %lld rows", vp,
                        (long long)line, (long long)file_rows);
out:
    emb__file_close(&f);
    free(vp);
    if (rc)
        emb_vocab_free(v);
    else
        *out = v;
    return rc;
}
