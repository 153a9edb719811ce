/* emb lookup: the vectors of words or row ids. */
#include "cli.h"
#include "wordvecs.h"

#include <emb/emb.h>

#include <stdlib.h>
#include <string.h>

static int run(const emb_cli_command *cmd, int argc, char **argv) {
    const char *from = NULL, *tensor = NULL;
    bool raw = false, no_utf8 = false;
    int64_t precision = 4;
    const emb_cli_option opts[] = {
        {"raw", 'r', NULL, EMB_CLI_FLAG, &raw, 0, 0, 0, 0},
        {"from", 0, NULL, EMB_CLI_STRING, &from, 0, 0, 0, 0},
        {"tensor", 0, NULL, EMB_CLI_STRING, &tensor, 0, 0, 0, 0},
        {"precision", 0, NULL, EMB_CLI_INT, &precision, 0, 17, 0, 0},
        {"no-utf8-check", 0, NULL, EMB_CLI_FLAG, &no_utf8, 0, 0, 0, 0},
        {NULL, 0, NULL, EMB_CLI_FLAG, NULL, 0, 0, 0, 0},
    };
    emb_cli_args args;
    int rc = emb_cli_parse(cmd, argc, argv, opts, &args);
    if (rc >= 0) return rc;
    if ((rc = emb_cli_operands(cmd, &args, 2, -1, "FILE and WORD|ID")) >= 0) return rc;
    emb_vectors_read_options ro = emb_vectors_read_options_default();
    if (from && emb_format_parse(from, &ro.format))
        return emb_cli_usage_error(cmd, "--from: %s", emb_errmsg());
    ro.tensor = tensor;
    ro.check_utf8 = !no_utf8;
    emb_vectors v;
    emb_cli_watch_input(cmd, args.v[0]);
    /* a fastText model answers for any word, from its character n-grams */
    emb_fasttext *ft = NULL;
    if (wordvecs_read(args.v[0], &ro, &v, &ft)) return emb_cli_fail(cmd, "%s", emb_errmsg());
    int64_t rows = v.weight.shape[0], dim = v.weight.shape[1], n = 0;
    const char **labels = malloc(sizeof *labels * (size_t)args.n);
    float *out = malloc(sizeof *out * (size_t)(args.n * dim + 1));
    if (!out || !labels) {
        free(out), free(labels), emb_vectors_release(&v), emb_fasttext_free(ft);
        return emb_cli_fail(cmd, "out of memory");
    }
    rc = EMB_CLI_OK;
    for (int i = 1; i < args.n; i++) {
        const char *q = args.v[i];
        int64_t id = v.vocab ? emb_vocab_find(v.vocab, q, strlen(q)) : -1;
        if (id < 0 && ft) {
            if (emb_fasttext_word_vector(ft, q, strlen(q), out + n * dim)) {
                rc = emb_cli_fail(cmd, "%s", emb_errmsg());
                break;
            }
            labels[n++] = q;
            continue;
        }
        if (id < 0) {
            char err[128];
            int64_t x;
            if (emb_cli_parse_int(q, 0, INT64_MAX, &x, err, sizeof err) && x < rows) {
                id = x;
            } else {
                if (v.vocab)
                    fprintf(stderr,
                            "emb lookup: '%s' is not in the vocabulary of %s (%lld words) nor a "
                            "row id\n",
                            q, args.v[0], (long long)rows);
                else
                    fprintf(stderr,
                            "emb lookup: '%s' is not a row id of %s (it has no words; ids are "
                            "0..%lld)\n",
                            q, args.v[0], (long long)rows - 1);
                rc = EMB_CLI_FAILURE;
                continue;
            }
        }
        if (dim > 0) /* a table of width 0 may have no data at all */
            memcpy(out + n * dim, (const float *)v.weight.data + id * dim,
                   sizeof *out * (size_t)dim);
        labels[n++] = v.vocab ? emb_vocab_word(v.vocab, id, NULL) : q;
    }
    if (n > 0) {
        if (raw) {
            for (int64_t i = 0; i < n; i++) {
                fputs(labels[i], stdout);
                for (int64_t k = 0; k < dim; k++) printf(" %.9g", (double)out[i * dim + k]);
                putchar('\n');
            }
        } else {
            emb_tensor t;
            int64_t oshape[2] = {n, dim};
            emb_print_options po = emb_print_options_default();
            po.precision = (int)precision;
            if (emb_tensor_init(&t, EMB_FLOAT32, out, 2, oshape) ||
                emb_tensor_print(stdout, &t, &po))
                rc = emb_cli_fail(cmd, "%s", emb_errmsg());
        }
    }
    emb_fasttext_free(ft);
    free(out);
    free(labels);
    emb_vectors_release(&v);
    return rc;
}

const emb_cli_command emb_cli_cmd_lookup = {
    "lookup",
    "print the vectors of words or row ids",
    "usage: emb lookup [--raw] [--precision P] [--from FORMAT] [--tensor NAME] FILE WORD|ID...\n"
    "\n"
    "Reads the table in FILE (any format emb reads, recognised from the content) and prints\n"
    "the rows of the given words, in order. An argument that is not a word of the table but\n"
    "a number in [0, rows) is a row id; files without words (.npy, safetensors without a\n"
    "vocabulary) are looked up by id only. A fastText .bin model gives every other\n"
    "argument the vector of its character n-grams, as fastText's print-word-vectors does.\n"
    "\n"
    "Output: by default the rows as one PyTorch-style tensor, exactly as print(emb.weight[ids])\n"
    "shows it, e.g.\n"
    "  tensor([[-0.6599,  0.2097,  0.4736],\n"
    "          [-0.0979, -0.7256, -0.1057]])\n"
    "With --raw, one line per row: the word (or the id as given), then every value with\n"
    "9 significant digits (enough to read back the same float32), separated by spaces.\n"
    "\n"
    "options:\n"
    "  -r, --raw          word2vec-style lines instead of the tensor\n"
    "  --precision P      digits after the decimal point in the tensor print (default 4)\n"
    "  --from FORMAT      read FILE as FORMAT: safetensors, npy, word2vec-text (txt, vec),\n"
    "                     word2vec-binary (bin), glove, fasttext-bin (fasttext)\n"
    "  --tensor NAME      safetensors: the tensor to read\n"
    "  --no-utf8-check    accept words in FILE that are not valid UTF-8\n"
    "\n"
    "exit status: 0 when every argument was found; 1 when some were not (each is reported\n"
    "on standard error, the others are printed) or FILE cannot be read; 2 on a usage error.\n"
    "\n"
    "examples:\n"
    "  emb lookup vectors.bin king queen\n"
    "  emb lookup --raw table.npy 0 17\n",
    run,
};
