/* emb demo: a tour of nn.Embedding through the five seed documents.
 *
 * The steps themselves live in examples/seed00*.c, one program per document; this file
 * includes them (without their main) and runs them in order with headings and short
 * explanations, so the demo and the examples cannot drift apart.
 */
#define EMB_TOUR_NO_MAIN
#include "../../examples/seed_tour.h"

#include "../../examples/seed000_vocab.c"
#include "../../examples/seed001_lookup.c"
#include "../../examples/seed002_chars.c"
#include "../../examples/seed003_linear.c"
#include "../../examples/seed004_words.c"

int emb_cmd_demo(int argc, char **argv);

typedef struct demo_section {
    const char *id;
    int (*run)(const tour_ctx *t);
} demo_section;

static const demo_section demo_sections[] = {
    {"000", tour_seed000}, {"001", tour_seed001}, {"002", tour_seed002},
    {"003", tour_seed003}, {"004", tour_seed004},
};
enum { DEMO_N = sizeof demo_sections / sizeof demo_sections[0] };

static void demo_usage(FILE *f) {
    fprintf(f,
            "usage: emb demo [--seed N] [SECTION...]\n"
            "\n"
            "A tour of nn.Embedding through the five seed documents, computed with emb and\n"
            "printed the way PyTorch prints it. SECTION is 000 to 004 (default: all).\n"
            "\n"
            "  --seed N   seed for sections 001, 002 and 004, whose documents set none\n"
            "             (default %" PRIu64 "); 000 and 003 use their documents' seeds 0 and 123\n"
            "  --help     this text\n",
            TOUR_DEFAULT_SEED);
}

static int demo_find(const char *name) {
    for (int i = 0; i < DEMO_N; i++)
        if (!strcmp(name, demo_sections[i].id) || !strcmp(name, demo_sections[i].id + 2))
            return i;
    return -1;
}

int emb_cmd_demo(int argc, char **argv) {
    tour_ctx t = {stdout, true, TOUR_DEFAULT_SEED};
    bool wanted[DEMO_N] = {false};
    bool any = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            demo_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--seed") || !strncmp(a, "--seed=", 7)) {
            const char *v = a[6] == '=' ? a + 7 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v) {
                fprintf(stderr, "emb demo: --seed needs a value\n");
                demo_usage(stderr);
                return 2;
            }
            if (!tour_parse_seed(v, &t.seed)) {
                fprintf(stderr, "emb demo: invalid seed '%s' (expected an integer in [0, 2^64))\n",
                        v);
                return 2;
            }
            continue;
        }
        int s = demo_find(a);
        if (s < 0) {
            fprintf(stderr, "emb demo: unknown %s '%s' (sections: 000 to 004)\n",
                    a[0] == '-' ? "option" : "section", a);
            demo_usage(stderr);
            return 2;
        }
        wanted[s] = true;
        any = true;
    }

    fprintf(t.out,
            "emb %s: a tour of nn.Embedding\n"
            "\n"
            "Five short documents explain what an embedding layer is. Each section below\n"
            "replays one of them with emb and prints its tensors exactly as PyTorch 1.13\n"
            "prints them; lines starting with '--' are commentary. The same steps, one\n"
            "program per document, are in examples/seed00*.c.\n",
            emb_version());
    for (int i = 0; i < DEMO_N; i++) {
        if (any && !wanted[i]) continue;
        if (demo_sections[i].run(&t) != 0) {
            fflush(t.out);
            return 1;
        }
    }
    return tour_finish(t.out, 0);
}
