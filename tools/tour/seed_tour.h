/* seed_tour.h: the "seed tour", the steps of the five seed documents written with emb's
 * public API, shared by `emb demo` and the example programs seed000_vocab ... seed004_words.
 *
 * They are built once into a small static library, emb_seed_tour (not installed, not part
 * of libemb): the steps (tour_seed000 ... tour_seed004, one per tools/tour/seed00N_*.c file)
 * and the helpers below (seed_tour.c). Each example program is that library plus a
 * three-line main (examples/seed_main.c); `emb demo` (tools/emb/cmd_demo.c) links the same library
 * and runs the steps with explanations, so the demo and the examples cannot drift apart.
 *
 * Conventions of the steps:
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

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Seed used by the tours of the documents that did not fix one themselves (001, 002,
 * 004). Any value works; the tests re-run the same steps in PyTorch with the same seed. */
#define TOUR_DEFAULT_SEED UINT64_C(42)

typedef struct tour_ctx {
    FILE *out;     /* where the tour prints (stdout) */
    bool explain;  /* print headings and explanations (emb demo) */
    uint64_t seed; /* seed for the documents that did not fix one */
} tour_ctx;

/* ---- the steps, one per seed document: 0 on success, 1 after reporting a failure ---- */

int tour_seed000(const tour_ctx *t); /* seed000_vocab.c  */
int tour_seed001(const tour_ctx *t); /* seed001_lookup.c */
int tour_seed002(const tour_ctx *t); /* seed002_chars.c  */
int tour_seed003(const tour_ctx *t); /* seed003_linear.c */
int tour_seed004(const tour_ctx *t); /* seed004_words.c  */

typedef struct tour_section {
    const char *id;      /* "000" */
    const char *program; /* the example program: "seed000_vocab" */
    int (*run)(const tour_ctx *t);
    bool seeded; /* the document fixed no seed: the program takes one */
} tour_section;

/* The five sections in order. */
extern const tour_section tour_sections[];
enum { TOUR_N_SECTIONS = 5 };

/* The section called `id` ("000", or "0" ... "4"), or NULL. */
const tour_section *tour_find_section(const char *id);

/* ---- helpers of the steps ---- */

/* Reports a failed library call the way the CLI does and returns 1. */
int tour_fail(const char *what);

/* Runs `call`; on failure reports it as `what` and jumps to the function's `done:` label
 * with rc still 1. */
#define TOUR_TRY(call, what)                                                                       \
    do {                                                                                           \
        if ((call) != EMB_OK) {                                                                    \
            tour_fail(what);                                                                       \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* Explanations: printed only in explain mode. */
void tour_heading(const tour_ctx *t, const char *title);

/* One or two sentences of commentary, word-wrapped at 80 columns, each line starting
 * with "-- " so that it never looks like program output. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void tour_say(const tour_ctx *t, const char *fmt, ...);

/* print(x) with up to two suffixes, as PyTorch appends them after the data
 * ("requires_grad=True", "grad_fn=<EmbeddingBackward0>", ...). NULL: none. */
emb_status tour_print(const tour_ctx *t, const emb_tensor *x, const char *s1, const char *s2);

/* print(p) of an nn.Parameter: "Parameter containing:" and the tensor, with
 * requires_grad=True when the parameter requires grad. */
emb_status tour_print_param(const tour_ctx *t, const emb_tensor *w, bool requires_grad);

/* print(x.shape), after an optional prefix such as "Input Tensor Shape: ". */
void tour_print_shape(const tour_ctx *t, const char *prefix, const emb_tensor *x);

/* The suffix PyTorch prints after the output of a lookup: a lookup in a table that requires
 * grad is recorded by autograd. */
const char *tour_lookup_grad_fn(const emb_embedding *e);

/* out = e(indices) into freshly allocated storage (free it with emb_tensor_release; it is
 * left empty on failure). */
emb_status tour_lookup(emb_embedding *e, const emb_tensor *indices, emb_tensor *out);

/* A 1-D view of row `i` of a contiguous float32 matrix (x[i] in PyTorch). */
emb_tensor tour_row(const emb_tensor *x, int64_t i);

/* ---- the example programs ---- */

/* main() of the example program of `section`: `prog [SEED]` when the section is seeded,
 * `prog` alone otherwise; --help prints the usage. Runs the step on stdout and returns
 * the exit status: 0, 1 after a failure or a write error on stdout, 2 after a usage
 * error. */
int tour_example_main(const tour_section *section, int argc, char **argv);

#endif /* EMB_SEED_TOUR_H */
