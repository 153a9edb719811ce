/* seed_tour.h: small helpers shared by the seed examples (examples/seed00*.c) and by
 * `emb demo` (tools/emb/cmd_demo.c), which includes those example files with
 * EMB_TOUR_NO_MAIN defined so that both run the very same steps.
 *
 * Public API only. Every helper is static inline so that a program that uses a few of
 * them compiles without unused-function warnings.
 *
 * Conventions of the tour programs:
 *   - they print, on t->out, what the corresponding seed document prints, in the same form
 *     (tensors through emb_tensor_print, shapes as torch.Size([...]));
 *   - with t->explain set (the demo), they also print a heading and a sentence or two per
 *     step; these lines never look like a tensor;
 *   - a failing library call prints "emb: <what>: <emb_errmsg()>" on stderr and the step
 *     function returns 1 after freeing what it allocated.
 */
#ifndef EMB_SEED_TOUR_H
#define EMB_SEED_TOUR_H

#include <emb/emb.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Seed used by the tours of the documents that did not fix one themselves (001, 002,
 * 004). Any value works; the tests re-run the same steps in PyTorch with the same seed. */
#define TOUR_DEFAULT_SEED UINT64_C(42)

typedef struct tour_ctx {
    FILE *out;     /* where the tour prints (stdout) */
    bool explain;  /* print headings and explanations (emb demo) */
    uint64_t seed; /* seed for the documents that did not fix one */
} tour_ctx;

/* Reports a failed library call the way the CLI does and returns 1. */
static inline int tour_fail(const char *what) {
    fprintf(stderr, "emb: %s: %s\n", what, emb_errmsg());
    return 1;
}

/* Runs `call`; on failure reports it as `what` and jumps to the function's `done:` label
 * with rc still 1. */
#define TOUR_TRY(call, what)                                                                \
    do {                                                                                    \
        if ((call) != EMB_OK) {                                                             \
            tour_fail(what);                                                                \
            goto done;                                                                      \
        }                                                                                   \
    } while (0)

/* Explanations: printed only in explain mode. */
static inline void tour_heading(const tour_ctx *t, const char *title) {
    if (t->explain) fprintf(t->out, "\n== %s ==\n\n", title);
}

/* One or two sentences of commentary, word-wrapped at 80 columns, each line starting
 * with "-- " so that it never looks like program output. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static inline void tour_say(const tour_ctx *t, const char *fmt, ...) {
    enum { WIDTH = 80 - 3 };
    char buf[1024];
    if (!t->explain) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    const char *p = buf;
    while (*p) {
        size_t n = strlen(p);
        if (n > WIDTH) {
            /* Break at the last space that keeps the line within WIDTH; a longer word
             * stays whole. */
            size_t cut = WIDTH;
            while (cut > 0 && p[cut] != ' ') cut--;
            if (cut == 0) cut = strcspn(p, " ");
            n = cut;
        }
        fprintf(t->out, "-- %.*s\n", (int)n, p);
        p += n;
        while (*p == ' ') p++;
    }
}

/* print(x) with up to two suffixes, as PyTorch appends them after the data
 * ("requires_grad=True", "grad_fn=<EmbeddingBackward0>", ...). NULL: none. */
static inline emb_status tour_print(const tour_ctx *t, const emb_tensor *x, const char *s1,
                                    const char *s2) {
    emb_print_options o = emb_print_options_default();
    o.suffixes[0] = s1;
    o.suffixes[1] = s2;
    return emb_tensor_print(t->out, x, &o);
}

/* print(p) of an nn.Parameter: "Parameter containing:" and the tensor, with
 * requires_grad=True when the parameter requires grad. */
static inline emb_status tour_print_param(const tour_ctx *t, const emb_tensor *w,
                                          bool requires_grad) {
    fputs("Parameter containing:\n", t->out);
    return tour_print(t, w, requires_grad ? "requires_grad=True" : NULL, NULL);
}

/* print(x.shape), after an optional prefix such as "Input Tensor Shape: ". */
static inline void tour_print_shape(const tour_ctx *t, const char *prefix,
                                    const emb_tensor *x) {
    char buf[160];
    emb_shape_str(buf, sizeof buf, x->ndim, x->shape);
    fprintf(t->out, "%s%s\n", prefix ? prefix : "", buf);
}

/* The suffix PyTorch prints after the output of a lookup: a lookup in a table that requires
 * grad is recorded by autograd. */
static inline const char *tour_lookup_grad_fn(const emb_embedding *e) {
    return emb_embedding_requires_grad(e) ? "grad_fn=<EmbeddingBackward0>" : NULL;
}

/* out = e(indices) into freshly allocated storage (free it with emb_tensor_free; it is
 * left empty on failure). */
static inline emb_status tour_lookup(emb_embedding *e, const emb_tensor *indices,
                                     emb_tensor *out) {
    int ndim = 0;
    int64_t shape[EMB_MAX_DIMS];
    memset(out, 0, sizeof *out);
    emb_status s = emb_embedding_output_shape(e, indices, &ndim, shape);
    if (s != EMB_OK) return s;
    emb_tensor tmp;
    s = emb_tensor_alloc(&tmp, EMB_FLOAT32, ndim, shape);
    if (s != EMB_OK) return s;
    s = emb_embedding_forward(e, indices, &tmp);
    if (s != EMB_OK) {
        emb_tensor_free(&tmp);
        return s;
    }
    *out = tmp;
    return EMB_OK;
}

/* A 1-D view of row `i` of a contiguous float32 matrix (x[i] in PyTorch). */
static inline emb_tensor tour_row(const emb_tensor *x, int64_t i) {
    emb_tensor r = *x;
    int64_t width = 1;
    for (int d = 1; d < x->ndim; d++) width *= x->shape[d];
    r.ndim = x->ndim - 1;
    for (int d = 0; d < r.ndim; d++) r.shape[d] = x->shape[d + 1];
    r.data = (float *)x->data + i * width;
    return r;
}

/* Parses a seed given on the command line: a decimal integer in [0, 2^64). */
static inline bool tour_parse_seed(const char *s, uint64_t *seed) {
    if (!s || *s < '0' || *s > '9') return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *seed = (uint64_t)v;
    return true;
}

/* For the example programs: `prog [SEED]` (seeded == true) or `prog` alone. Returns -1
 * to go on, or the exit code (0 after --help, 2 after a usage error). */
static inline int tour_example_args(int argc, char **argv, bool seeded, tour_ctx *t) {
    const char *prog = argc > 0 ? argv[0] : "example";
    t->out = stdout;
    t->explain = false;
    t->seed = TOUR_DEFAULT_SEED;
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        if (seeded)
            printf("usage: %s [SEED]\n  SEED: integer in [0, 2^64) passed to emb_manual_seed "
                   "(default %" PRIu64 ")\n",
                   prog, TOUR_DEFAULT_SEED);
        else
            printf("usage: %s\n  (the document fixes its own seed; no arguments)\n", prog);
        return 0;
    }
    if (argc > (seeded ? 2 : 1)) {
        fprintf(stderr, "%s: too many arguments\nusage: %s%s\n", prog, prog,
                seeded ? " [SEED]" : "");
        return 2;
    }
    if (seeded && argc == 2 && !tour_parse_seed(argv[1], &t->seed)) {
        fprintf(stderr, "%s: invalid seed '%s' (expected an integer in [0, 2^64))\n", prog,
                argv[1]);
        return 2;
    }
    return -1;
}

/* Flushes the output and turns a write error into exit status 1 (reported unless the
 * run already failed and said why). */
static inline int tour_finish(FILE *out, int rc) {
    errno = 0;
    if (fflush(out) != 0 || ferror(out)) {
        if (rc == 0) fprintf(stderr, "emb: writing output: %s\n", strerror(errno ? errno : EIO));
        return 1;
    }
    return rc;
}

#endif /* EMB_SEED_TOUR_H */
