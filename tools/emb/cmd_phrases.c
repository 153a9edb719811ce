/* emb phrases: gensim's Phrases as a C pass: learn bigram phrases from a corpus and write it
 * with each detected pair joined (include/emb/phrases.h). */
#include "cli.h"

#include <emb/emb.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int run(const emb_cli_command *cmd, int argc, char **argv) {
    const char *output = "-", *delimiter = "_";
    int64_t min_count = 5;
    double threshold = 10;
    bool quiet = false;
    const emb_cli_option opts[] = {
        {"output", 'o', NULL, EMB_CLI_STRING, &output, 0, 0, 0, 0},
        {"min-count", 0, "min_count", EMB_CLI_INT, &min_count, 1, INT64_MAX, 0, 0},
        {"threshold", 0, NULL, EMB_CLI_DOUBLE, &threshold, 0, 0, 0, 0},
        {"delimiter", 0, NULL, EMB_CLI_STRING, &delimiter, 0, 0, 0, 0},
        {"quiet", 'q', NULL, EMB_CLI_FLAG, &quiet, 0, 0, 0, 0},
        {NULL, 0, NULL, EMB_CLI_FLAG, NULL, 0, 0, 0, 0},
    };
    emb_cli_args args;
    int rc = emb_cli_parse(cmd, argc, argv, opts, &args);
    if (rc >= 0) return rc;
    if ((rc = emb_cli_operands(cmd, &args, 1, 1, "CORPUS")) >= 0) return rc;
    const char *corpus = args.v[0];
    if (strcmp(corpus, "-") == 0)
        return emb_cli_usage_error(
            cmd, "the corpus is read twice (counting, then rewriting): give a file");
    emb_phrases_options o = emb_phrases_options_default();
    o.min_count = min_count, o.threshold = threshold, o.delimiter = delimiter;
    emb_cli_watch_input(cmd, corpus);
    emb_phrases *p;
    if (emb_phrases_learn(corpus, &o, &p) != EMB_OK) return emb_cli_fail(cmd, "%s", emb_errmsg());
    const bool to_stdout = strcmp(output, "-") == 0;
    FILE *out = to_stdout ? stdout : fopen(output, "wb");
    if (!out) {
        rc = emb_cli_fail(cmd, "cannot write %s: %s", output, strerror(errno));
        emb_phrases_free(p);
        return rc;
    }
    int64_t n = 0;
    rc = EMB_CLI_OK;
    if (emb_phrases_apply(p, corpus, out, &n) != EMB_OK) rc = emb_cli_fail(cmd, "%s", emb_errmsg());
    if (!to_stdout && fclose(out) != 0 && rc == EMB_CLI_OK)
        rc = emb_cli_fail(cmd, "cannot write %s: %s", output, strerror(errno));
    if (rc != EMB_CLI_OK && !to_stdout) unlink(output); /* no half-written output */
    if (rc == EMB_CLI_OK && !quiet)
        fprintf(stderr, "emb phrases: %lld phrases joined in %s\n", (long long)n,
                to_stdout ? "standard output" : output);
    emb_phrases_free(p);
    return rc;
}

const emb_cli_command emb_cli_cmd_phrases = {
    "phrases",
    "join frequent word pairs into phrases (gensim's Phrases): new york -> new_york",
    "usage: emb phrases CORPUS [-o OUT] [--min-count N] [--threshold X] [--delimiter S]\n"
    "\n"
    "Detects bigram phrases as gensim's Phrases does with its default scorer and writes\n"
    "CORPUS again with each detected pair joined by the delimiter, ready for emb train\n"
    "(the phrase is then one token). Tokens are separated by whitespace and a line is a\n"
    "sentence, as gensim's LineSentence. The score of consecutive tokens a b is\n"
    "(count(a b) - min_count) / (count(a) * count(b)) * size, size the number of distinct\n"
    "tokens and pairs counted; from left to right, a token and the next are joined when\n"
    "the score is above the threshold, and the scan goes on after the pair.\n"
    "\n"
    "Options:\n"
    "  -o, --output OUT   where to write the text (default '-': standard output)\n"
    "  --min-count N      subtracted from a pair's count (default 5, gensim's)\n"
    "  --threshold X      a pair is a phrase when its score is above X (default 10)\n"
    "  --delimiter S      joins the two words (default _)\n"
    "  -q, --quiet        no summary on standard error\n"
    "  -h, --help         print this help and exit\n"
    "\n"
    "Exit status: 0 on success, 1 when CORPUS cannot be read or OUT written, 2 on a usage\n"
    "error.\n"
    "\n"
    "Example:\n"
    "  emb phrases corpus.txt -o phrased.txt && emb train phrased.txt -o vectors.bin\n",
    run,
};
