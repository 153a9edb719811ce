/* seed_tour.c: the helpers of the seed tour and the table of its sections (contracts in
 * seed_tour.h). Public API of emb only. */
#include "seed_tour.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>

const tour_section tour_sections[TOUR_N_SECTIONS] = {
    {"000", "seed000_vocab", tour_seed000, false}, {"001", "seed001_lookup", tour_seed001, true},
    {"002", "seed002_chars", tour_seed002, true},  {"003", "seed003_linear", tour_seed003, false},
    {"004", "seed004_words", tour_seed004, true},
};

const tour_section *tour_find_section(const char *id) {
    for (int i = 0; i < TOUR_N_SECTIONS; i++)
        if (!strcmp(id, tour_sections[i].id) || !strcmp(id, tour_sections[i].id + 2))
            return &tour_sections[i];
    return NULL;
}

int tour_fail(const char *what) {
    fprintf(stderr, "emb: %s: %s\n", what, emb_errmsg());
    return 1;
}

void tour_heading(const tour_ctx *t, const char *title) {
    if (t->explain) fprintf(t->out, "\n== %s ==\n\n", title);
}

void tour_say(const tour_ctx *t, const char *fmt, ...) {
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

emb_status tour_print(const tour_ctx *t, const emb_tensor *x, const char *s1, const char *s2) {
    emb_print_options o = emb_print_options_default();
    o.suffixes[0] = s1;
    o.suffixes[1] = s2;
    return emb_tensor_print(t->out, x, &o);
}

emb_status tour_print_param(const tour_ctx *t, const emb_tensor *w, bool requires_grad) {
    fputs("Parameter containing:\n", t->out);
    return tour_print(t, w, requires_grad ? "requires_grad=True" : NULL, NULL);
}

void tour_print_shape(const tour_ctx *t, const char *prefix, const emb_tensor *x) {
    char buf[160];
    emb_shape_repr(x->ndim, x->shape, buf, sizeof buf);
    fprintf(t->out, "%s%s\n", prefix ? prefix : "", buf);
}

const char *tour_lookup_grad_fn(const emb_embedding *e) {
    return emb_embedding_requires_grad(e) ? "grad_fn=<EmbeddingBackward0>" : NULL;
}

emb_status tour_lookup(emb_embedding *e, const emb_tensor *indices, emb_tensor *out) {
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
        emb_tensor_release(&tmp);
        return s;
    }
    *out = tmp;
    return EMB_OK;
}

emb_tensor tour_row(const emb_tensor *x, int64_t i) {
    emb_tensor r = *x;
    int64_t width = 1;
    for (int d = 1; d < x->ndim; d++) width *= x->shape[d];
    r.ndim = x->ndim - 1;
    for (int d = 0; d < r.ndim; d++) r.shape[d] = x->shape[d + 1];
    r.data = (float *)x->data + i * width;
    return r;
}

/* A seed given on the command line: a decimal integer in [0, 2^64). */
static bool parse_seed(const char *s, uint64_t *seed) {
    if (!s || *s < '0' || *s > '9') return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *seed = (uint64_t)v;
    return true;
}

int tour_example_main(const tour_section *section, int argc, char **argv) {
    const char *prog = argc > 0 ? argv[0] : section->program;
    tour_ctx t = {stdout, false, TOUR_DEFAULT_SEED};
    bool seeded = section->seeded;
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        if (seeded)
            printf("usage: %s [SEED]\n  SEED: integer in [0, 2^64) passed to emb_manual_seed "
                   "(default %" PRIu64 ")\n",
                   prog, TOUR_DEFAULT_SEED);
        else
            printf("usage: %s\n  (the document fixes its own seed; no arguments)\n", prog);
        return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
    }
    if (argc > (seeded ? 2 : 1)) {
        fprintf(stderr, "%s: too many arguments\nusage: %s%s\n", prog, prog,
                seeded ? " [SEED]" : "");
        return 2;
    }
    if (seeded && argc == 2 && !parse_seed(argv[1], &t.seed)) {
        fprintf(stderr, "%s: invalid seed '%s' (expected an integer in [0, 2^64))\n", prog,
                argv[1]);
        return 2;
    }
    int rc = section->run(&t);
    /* Flush and turn a write error into exit status 1 (reported unless the run already
     * failed and said why). */
    errno = 0;
    if (fflush(t.out) != 0 || ferror(t.out)) {
        if (rc == 0) fprintf(stderr, "emb: writing output: %s\n", strerror(errno ? errno : EIO));
        return 1;
    }
    return rc;
}
