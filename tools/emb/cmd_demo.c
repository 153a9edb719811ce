/* emb demo: a tour of nn.Embedding through the five seed documents.
 *
 * The steps are those of the seed example programs, in the emb_seed_tour library
 * (tools/tour/seed_tour.h) that both link; the demo runs them in order with headings
 * and short explanations, so the demo and the examples cannot drift apart.
 */
#include "cli.h"
#include "seed_tour.h"

static int run(const emb_cli_command *cmd, int argc, char **argv) {
    tour_ctx t = {stdout, true, TOUR_DEFAULT_SEED};
    const emb_cli_option opts[] = {
        {"seed", 0, NULL, EMB_CLI_UINT64, &t.seed, 0, 0, 0, 0},
        {NULL, 0, NULL, EMB_CLI_FLAG, NULL, 0, 0, 0, 0},
    };
    emb_cli_args args;
    int rc = emb_cli_parse(cmd, argc, argv, opts, &args);
    if (rc >= 0) return rc;

    bool wanted[TOUR_N_SECTIONS] = {false};
    bool any = false;
    for (int i = 0; i < args.n; i++) {
        const tour_section *s = tour_find_section(args.v[i]);
        if (!s)
            return emb_cli_usage_error(cmd, "unknown section '%s': sections are 000 to 004",
                                       args.v[i]);
        wanted[s - tour_sections] = true;
        any = true;
    }

    fprintf(t.out,
            "emb %s: a tour of nn.Embedding\n"
            "\n"
            "Five short documents explain what an embedding layer is. Each section below\n"
            "replays one of them with emb and prints its tensors exactly as PyTorch 1.13\n"
            "prints them; lines starting with '--' are commentary. The same steps, one\n"
            "program per document, are in tools/tour/seed00*.c.\n",
            emb_version());
    for (int i = 0; i < TOUR_N_SECTIONS; i++) {
        if (any && !wanted[i]) continue;
        if (tour_sections[i].run(&t) != 0) return EMB_CLI_FAILURE;
    }
    return EMB_CLI_OK;
}

const emb_cli_command emb_cli_cmd_demo = {
    "demo",
    "a tour of nn.Embedding through the seed documents' examples",
    "usage: emb demo [--seed N] [SECTION...]\n"
    "\n"
    "A tour of nn.Embedding through five short documents that explain embedding layers.\n"
    "Each section replays one document's code with emb and prints its tensors exactly as\n"
    "PyTorch 1.13 prints them, with a heading and commentary lines starting with '-- '.\n"
    "The same code, one program per document, is in tools/tour/seed00*.c.\n"
    "\n"
    "Sections (default: all five, in this order):\n"
    "  000  what an embedding layer does: a vocabulary, its ids, a 6 x 2 table\n"
    "  001  lookups of random batches, an out-of-range id, a conditional input\n"
    "  002  a character tokenizer; Linear on a 0/1 vector vs summed embedding rows\n"
    "  003  an embedding layer is a Linear layer applied to one-hot vectors\n"
    "  004  word ids of a batch of sequences and their vectors\n"
    "SECTION may also be written 0 to 4. Sections run in the order above whatever the\n"
    "order given.\n"
    "\n"
    "Options:\n"
    "  --seed N    seed of the default generator in sections 001, 002 and 004, whose\n"
    "              documents fix none: an integer in [0, 2^64) (default 42). Sections 000\n"
    "              and 003 use their documents' own seeds, 0 and 123.\n"
    "  -h, --help  print this help and exit\n"
    "\n"
    "Output goes to standard output. Exit status: 0 on success, 1 when a step fails or\n"
    "the output cannot be written, 2 on a usage error.\n"
    "\n"
    "Examples:\n"
    "  emb demo                      the whole tour\n"
    "  emb demo --seed 7 001 004     two sections, with seed 7\n",
    run,
};
