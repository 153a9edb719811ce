/* Tensor printing: repr(tensor) exactly as PyTorch 1.13 renders it.
 *
 * The rules (from torch/_tensor_str.py, re-expressed here):
 *  - One formatter for the whole tensor, decided on the elements that will be printed
 *    (all of them, or the summarised ones when numel > threshold).
 *  - Integer and bool dtypes: every element is its decimal string ("True"/"False"),
 *    right-aligned to the longest one.
 *  - Floating dtypes, looking only at the nonzero finite values:
 *      none at all        -> "int mode" (e.g. "0.", "nan"), width 1, sci_mode option ignored;
 *      all integral       -> int mode ("3."), unless max/min > 1000 or max > 1e8 -> sci;
 *      otherwise          -> fixed ("%.4f"), unless max/min > 1000, max > 1e8 or
 *                            min < 1e-4 -> sci ("%.4e").
 *    The width is the longest string of the nonzero finite values in the chosen mode; an
 *    explicit sci_mode option then overrides the mode (not the width).
 *  - Rows are wrapped at linewidth minus the indentation, nested brackets are joined by
 *    "," plus (rank-1) newlines plus indentation, summarised dimensions show edgeitems at
 *    each end around "...".
 *  - Suffixes (size for empty tensors, dtype for non-default dtypes, then the caller's)
 *    go on the same line unless that line would exceed linewidth.
 */
#include "internal.h"
#include <emb/print.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Largest precision accepted: keeps every formatted number within a fixed buffer. */
#define EMB__PRINT_MAX_PRECISION 100
/* "%.100f" of the largest double: sign + 309 digits + point + 100 digits + NUL < 512. */
#define EMB__NUMBUF 512

emb_print_options emb_print_options_default(void) {
    emb_print_options o;
    memset(&o, 0, sizeof o);
    o.precision = 4;
    o.threshold = 1000;
    o.edgeitems = 3;
    o.linewidth = 80;
    o.sci_mode = EMB_SCI_AUTO;
    return o;
}

/* ---------------------------------------------------------------------------------------
 * A growable string. Allocation failure is sticky and reported once at the end.
 * ------------------------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_reserve(sbuf *s, size_t extra) {
    if (s->oom) return;
    if (extra > SIZE_MAX - s->len - 1) {
        s->oom = true;
        return;
    }
    size_t need = s->len + extra + 1;
    if (need <= s->cap) return;
    size_t cap = s->cap ? s->cap : 256;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *q = realloc(s->p, cap);
    if (!q) {
        s->oom = true;
        return;
    }
    s->p = q;
    s->cap = cap;
}

static void sb_putn(sbuf *s, const char *str, size_t n) {
    sb_reserve(s, n);
    if (s->oom) return;
    memcpy(s->p + s->len, str, n);
    s->len += n;
    s->p[s->len] = '\0';
}

static void sb_puts(sbuf *s, const char *str) {
    sb_putn(s, str, strlen(str));
}

static void sb_repeat(sbuf *s, char c, int64_t n) {
    if (n <= 0) return;
    sb_reserve(s, (size_t)n);
    if (s->oom) return;
    memset(s->p + s->len, c, (size_t)n);
    s->len += (size_t)n;
    s->p[s->len] = '\0';
}

/* ---------------------------------------------------------------------------------------
 * Element access and formatting
 * ------------------------------------------------------------------------------------- */

typedef struct printer {
    const emb_tensor *t;
    const emb_print_options *o;
    int64_t stride[EMB_MAX_DIMS];
    bool summarize;
    bool floating;
    /* formatter state */
    bool int_mode, sci_mode;
    int64_t width;
    /* first pass over the nonzero finite values */
    int64_t nfinite;
    double amin, amax;
    sbuf out;
} printer;

static double elem_f(const emb_tensor *t, int64_t i) {
    return t->dtype == EMB_FLOAT32 ? (double)((const float *)t->data)[i]
                                   : ((const double *)t->data)[i];
}

static int64_t elem_i(const emb_tensor *t, int64_t i) {
    switch (t->dtype) {
    case EMB_INT64:
        return ((const int64_t *)t->data)[i];
    case EMB_INT32:
        return ((const int32_t *)t->data)[i];
    case EMB_INT16:
        return ((const int16_t *)t->data)[i];
    case EMB_INT8:
        return ((const int8_t *)t->data)[i];
    case EMB_UINT8:
        return ((const uint8_t *)t->data)[i];
    case EMB_BOOL:
        return ((const uint8_t *)t->data)[i] != 0;
    default:
        return 0;
    }
}

/* Python's '{:.Nf}' / '{:.Ne}' of a double: glibc rounds the exact binary value to
 * nearest-even like Python's dtoa; only NaN (never signed in Python) and infinities need
 * spelling out. Returns the length. */
static int fmt_double(char *buf, double v, char conv, int prec) {
    if (isnan(v)) return snprintf(buf, EMB__NUMBUF, "nan");
    if (isinf(v)) return snprintf(buf, EMB__NUMBUF, "%s", v < 0 ? "-inf" : "inf");
    return snprintf(buf, EMB__NUMBUF, conv == 'e' ? "%.*e" : "%.*f", prec, v);
}

/* One element as the formatter prints it, before padding. */
static int fmt_elem(const printer *p, int64_t i, char *buf) {
    const emb_tensor *t = p->t;
    if (!p->floating) {
        if (t->dtype == EMB_BOOL)
            return snprintf(buf, EMB__NUMBUF, "%s", elem_i(t, i) ? "True" : "False");
        return snprintf(buf, EMB__NUMBUF, "%" PRId64, elem_i(t, i));
    }
    double v = elem_f(t, i);
    if (p->sci_mode) return fmt_double(buf, v, 'e', p->o->precision);
    if (p->int_mode) {
        int n = fmt_double(buf, v, 'f', 0);
        if (isfinite(v)) {
            buf[n++] = '.';
            buf[n] = '\0';
        }
        return n;
    }
    return fmt_double(buf, v, 'f', p->o->precision);
}

static void put_elem(printer *p, int64_t i) {
    char buf[EMB__NUMBUF];
    int n = fmt_elem(p, i, buf);
    sb_repeat(&p->out, ' ', p->width - n);
    sb_putn(&p->out, buf, (size_t)n);
}

/* ---------------------------------------------------------------------------------------
 * Visiting the printed elements (PyTorch's get_summarized_data)
 * ------------------------------------------------------------------------------------- */

typedef void (*visit_fn)(printer *p, int64_t flat);

/* True when dimension d is cut down to its edges. */
static bool cut(const printer *p, int d) {
    return p->summarize && p->t->shape[d] > 2 * (int64_t)p->o->edgeitems;
}

static void visit(printer *p, int d, int64_t base, visit_fn fn) {
    const emb_tensor *t = p->t;
    if (d == t->ndim) {
        fn(p, base);
        return;
    }
    int64_t n = t->shape[d], s = p->stride[d];
    if (cut(p, d)) {
        int64_t e = p->o->edgeitems;
        for (int64_t i = 0; i < e; i++) visit(p, d + 1, base + i * s, fn);
        for (int64_t i = n - e; i < n; i++) visit(p, d + 1, base + i * s, fn);
    } else {
        for (int64_t i = 0; i < n; i++) visit(p, d + 1, base + i * s, fn);
    }
}

static void scan_range(printer *p, int64_t flat) {
    double v = elem_f(p->t, flat);
    if (!isfinite(v) || v == 0) return;
    double a = fabs(v);
    if (p->nfinite == 0 || a < p->amin) p->amin = a;
    if (p->nfinite == 0 || a > p->amax) p->amax = a;
    p->nfinite++;
    if (v != ceil(v)) p->int_mode = false;
}

static void scan_width(printer *p, int64_t flat) {
    char buf[EMB__NUMBUF];
    int64_t n;
    if (!p->floating) {
        n = fmt_elem(p, flat, buf);
    } else {
        double v = elem_f(p->t, flat);
        if (!isfinite(v) || v == 0) return;
        if (p->sci_mode)
            n = fmt_double(buf, v, 'e', p->o->precision);
        else if (p->int_mode)
            n = fmt_double(buf, v, 'f', 0) + 1;
        else
            n = fmt_double(buf, v, 'f', p->o->precision);
    }
    if (n > p->width) p->width = n;
}

/* PyTorch's _Formatter. */
static void make_formatter(printer *p) {
    p->int_mode = true;
    p->sci_mode = false;
    p->width = 1;
    if (p->floating) {
        p->nfinite = 0;
        visit(p, 0, 0, scan_range);
        if (p->nfinite == 0) return; /* PyTorch returns before applying sci_mode */
        double ratio = p->amax / p->amin;
        if (p->int_mode)
            p->sci_mode = ratio > 1000.0 || p->amax > 1.0e8;
        else
            p->sci_mode = ratio > 1000.0 || p->amax > 1.0e8 || p->amin < 1.0e-4;
    }
    visit(p, 0, 0, scan_width);
    if (p->floating && p->o->sci_mode != EMB_SCI_AUTO) p->sci_mode = p->o->sci_mode == EMB_SCI_ON;
}

/* ---------------------------------------------------------------------------------------
 * Rendering (PyTorch's _tensor_str_with_formatter / _vector_str)
 * ------------------------------------------------------------------------------------- */

static void render_vector(printer *p, int d, int64_t base, int64_t indent) {
    int64_t n = p->t->shape[d], s = p->stride[d];
    int64_t elem_len = p->width + 2;
    int64_t room = (int64_t)p->o->linewidth - indent;
    int64_t per_line = room > 0 ? room / elem_len : 0;
    if (per_line < 1) per_line = 1;
    bool c = cut(p, d);
    int64_t e = p->o->edgeitems;
    /* items: [0, e) ellipsis [n-e, n) when cut, else [0, n) */
    int64_t count = c ? 2 * e + 1 : n;
    sb_putn(&p->out, "[", 1);
    for (int64_t k = 0; k < count; k++) {
        if (k > 0) {
            if (k % per_line == 0) {
                sb_putn(&p->out, ",\n", 2);
                sb_repeat(&p->out, ' ', indent + 1);
            } else {
                sb_putn(&p->out, ", ", 2);
            }
        }
        if (c && k == e)
            sb_putn(&p->out, " ...", 4);
        else {
            int64_t i = !c || k < e ? k : n - e + (k - e - 1);
            put_elem(p, base + i * s);
        }
        if (p->out.oom) return;
    }
    sb_putn(&p->out, "]", 1);
}

static void render(printer *p, int d, int64_t base, int64_t indent) {
    int rest = p->t->ndim - d;
    if (rest == 0) {
        put_elem(p, base);
        return;
    }
    if (rest == 1) {
        render_vector(p, d, base, indent);
        return;
    }
    int64_t n = p->t->shape[d], s = p->stride[d];
    bool c = cut(p, d);
    int64_t e = p->o->edgeitems;
    int64_t count = c ? 2 * e + 1 : n;
    sb_putn(&p->out, "[", 1);
    for (int64_t k = 0; k < count; k++) {
        if (k > 0) {
            sb_putn(&p->out, ",", 1);
            sb_repeat(&p->out, '\n', rest - 1);
            sb_repeat(&p->out, ' ', indent + 1);
        }
        if (c && k == e)
            sb_putn(&p->out, "...", 3);
        else {
            int64_t i = !c || k < e ? k : n - e + (k - e - 1);
            render(p, d + 1, base + i * s, indent + 1);
        }
        if (p->out.oom) return;
    }
    sb_putn(&p->out, "]", 1);
}

/* PyTorch's _add_suffixes. `s` holds "tensor(" + data. */
static void add_suffixes(sbuf *s, const char *const *suffixes, int nsuf, int64_t indent,
                         int64_t linewidth) {
    const char *nl = NULL;
    for (size_t i = s->len; i > 0; i--)
        if (s->p[i - 1] == '\n') {
            nl = s->p + i - 1;
            break;
        }
    /* len(str) - str.rfind("\n") + 1, rfind giving -1 when there is no newline */
    int64_t last = nl ? (int64_t)s->len - (int64_t)(nl - s->p) + 1 : (int64_t)s->len + 2;
    for (int k = 0; k < nsuf; k++) {
        int64_t slen = (int64_t)strlen(suffixes[k]);
        if (last + slen + 2 > linewidth) {
            sb_putn(s, ",\n", 2);
            sb_repeat(s, ' ', indent);
            last = indent + slen;
        } else {
            sb_putn(s, ", ", 2);
            last += slen + 2;
        }
        sb_puts(s, suffixes[k]);
    }
    sb_putn(s, ")", 1);
}

/* ---------------------------------------------------------------------------------------
 * Validation and the public calls
 * ------------------------------------------------------------------------------------- */

static bool supported(emb_dtype d) {
    switch (d) {
    case EMB_FLOAT32:
    case EMB_FLOAT64:
    case EMB_INT64:
    case EMB_INT32:
    case EMB_INT16:
    case EMB_INT8:
    case EMB_UINT8:
    case EMB_BOOL:
        return true;
    default:
        return false;
    }
}

static emb_status check_options(const emb_print_options *o) {
    if (o->precision < 0 || o->precision > EMB__PRINT_MAX_PRECISION)
        return emb__error(EMB_ERR_INVALID, "print option precision is %d; valid: 0 to %d",
                          o->precision, EMB__PRINT_MAX_PRECISION);
    if (o->threshold < 0)
        return emb__error(EMB_ERR_INVALID, "print option threshold is %d; valid: >= 0",
                          o->threshold);
    if (o->edgeitems < 0)
        return emb__error(EMB_ERR_INVALID, "print option edgeitems is %d; valid: >= 0",
                          o->edgeitems);
    if (o->linewidth < 1)
        return emb__error(EMB_ERR_INVALID, "print option linewidth is %d; valid: >= 1",
                          o->linewidth);
    if (o->sci_mode != EMB_SCI_AUTO && o->sci_mode != EMB_SCI_ON && o->sci_mode != EMB_SCI_OFF)
        return emb__error(EMB_ERR_INVALID,
                          "print option sci_mode is %d; valid: EMB_SCI_AUTO (0), EMB_SCI_ON "
                          "(1), EMB_SCI_OFF (2)",
                          (int)o->sci_mode);
    return EMB_OK;
}

/* Builds the full repr into a malloc'd string (caller frees). */
static emb_status build_repr(const emb_tensor *t, const emb_print_options *opts, char **out,
                             size_t *out_len) {
    emb_status st = emb_tensor_check(t, "tensor");
    if (st) return st;
    if (!supported(t->dtype))
        return emb__error(EMB_ERR_DTYPE,
                          "cannot print a tensor of dtype %s (supported: float32, float64, "
                          "int64, int32, int16, int8, uint8, bool)",
                          emb_dtype_name(t->dtype));
    emb_print_options defaults = emb_print_options_default();
    const emb_print_options *o = opts ? opts : &defaults;
    st = check_options(o);
    if (st) return st;

    printer p;
    memset(&p, 0, sizeof p);
    p.t = t;
    p.o = o;
    p.floating = t->dtype == EMB_FLOAT32 || t->dtype == EMB_FLOAT64;
    int64_t numel = emb_tensor_numel(t);
    /* Row-major strides, needed only to visit the elements of a non-empty tensor. Their
     * product is then numel, which emb_tensor_check proved fits in int64; an empty tensor
     * may have other huge dimensions ([0, INT64_MAX, 2]) whose product overflows. */
    if (numel > 0) {
        int64_t s = 1;
        for (int d = t->ndim - 1; d >= 0; d--) {
            p.stride[d] = s;
            s *= t->shape[d];
        }
    }
    const int64_t indent = 7; /* len("tensor(") */

    sb_puts(&p.out, "tensor(");
    const char *suffixes[2 + 4];
    int nsuf = 0;
    char size_buf[32 * EMB_MAX_DIMS + 16];
    char dtype_buf[32];
    if (numel == 0) {
        sb_puts(&p.out, "[]");
        if (t->ndim != 1) {
            /* str(tuple(shape)); a 0-element tensor has ndim >= 1, so never "(n,)" here */
            size_t k = (size_t)snprintf(size_buf, sizeof size_buf, "size=(");
            for (int d = 0; d < t->ndim; d++)
                k += (size_t)snprintf(size_buf + k, sizeof size_buf - k, "%s%" PRId64,
                                      d ? ", " : "", t->shape[d]);
            snprintf(size_buf + k, sizeof size_buf - k, ")");
            suffixes[nsuf++] = size_buf;
        }
        if (t->dtype != EMB_FLOAT32) {
            snprintf(dtype_buf, sizeof dtype_buf, "dtype=torch.%s", emb_dtype_name(t->dtype));
            suffixes[nsuf++] = dtype_buf;
        }
    } else {
        p.summarize = numel > (int64_t)o->threshold;
        make_formatter(&p);
        render(&p, 0, 0, indent);
        if (t->dtype != EMB_FLOAT32 && t->dtype != EMB_INT64 && t->dtype != EMB_BOOL) {
            snprintf(dtype_buf, sizeof dtype_buf, "dtype=torch.%s", emb_dtype_name(t->dtype));
            suffixes[nsuf++] = dtype_buf;
        }
    }
    for (int k = 0; k < 4; k++)
        if (o->suffixes[k]) suffixes[nsuf++] = o->suffixes[k];
    add_suffixes(&p.out, suffixes, nsuf, indent, o->linewidth);

    if (p.out.oom) {
        free(p.out.p);
        return emb__error(EMB_ERR_NOMEM, "cannot allocate memory for the printed tensor");
    }
    *out = p.out.p;
    *out_len = p.out.len;
    return EMB_OK;
}

emb_status emb_tensor_repr(const emb_tensor *t, const emb_print_options *opts, char *buf,
                           size_t size, size_t *needed) {
    if (!buf && size > 0) return emb__null("buf (with size > 0)");
    char *s = NULL;
    size_t n = 0;
    emb_status st = build_repr(t, opts, &s, &n);
    if (st) return st;
    if (size > 0) {
        size_t k = n < size - 1 ? n : size - 1;
        memcpy(buf, s, k);
        buf[k] = '\0';
    }
    if (needed) *needed = n;
    free(s);
    return EMB_OK;
}

emb_status emb_tensor_print(FILE *f, const emb_tensor *t, const emb_print_options *opts) {
    if (!f) return emb__null("f");
    char *s = NULL;
    size_t n = 0;
    emb_status st = build_repr(t, opts, &s, &n);
    if (st) return st;
    errno = 0;
    bool ok = fwrite(s, 1, n, f) == n && fputc('\n', f) != EOF && fflush(f) == 0;
    int err = errno;
    free(s);
    if (!ok)
        return emb__error(EMB_ERR_IO, "writing the printed tensor failed: %s",
                          err ? strerror(err) : "stream error");
    return EMB_OK;
}
