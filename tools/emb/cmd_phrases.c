/* emb phrases: gensim's Phrases as a C pass: learn bigram phrases from a corpus and write it
 * with each detected pair joined (include/emb/phrases.h). */
#include "cli.h"

#include <emb/emb.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int run(const emb_cli_command *cmd, int argc, char **argv) {
    const char *output = "-", *delimiter = "_", *scoring = "default";
    int64_t min_count = 5;
    double threshold = 10;
    bool quiet = false;
    const emb_cli_option opts[] = {
        {"output", 'o', NULL, EMB_CLI_STRING, &output, 0, 0, 0, 0},
        {"min-count", 0, "min_count", EMB_CLI_INT, &min_count, 1, INT64_MAX, 0, 0},
        {"threshold", 0, NULL, EMB_CLI_DOUBLE, &threshold, 0, 0, 0, 0},
        {"delimiter", 0, NULL, EMB_CLI_STRING, &delimiter, 0, 0, 0, 0},
        {"scoring", 0, NULL, EMB_CLI_STRING, &scoring, 0, 0, 0, 0},
        {"quiet", 'q', NULL, EMB_CLI_FLAG, &quiet, 0, 0, 0, 0},
        {NULL, 0, NULL, EMB_CLI_FLAG, NULL, 0, 0, 0, 0},
    };
    emb_cli_args args;
    int rc = emb_cli_parse(cmd, argc, argv, opts, &args);
    if (rc >= 0) return rc;
    if ((rc = emb_cli_operands(cmd, &args, 1, INT32_MAX, "CORPUS")) >= 0) return rc;
    /* CORPUS...: files, directories and "-" read one after the other, as emb train reads them */
    const char *const *paths = (const char *const *)args.v;
    const size_t npaths = (size_t)args.n;
    emb_phrases_options o = emb_phrases_options_default();
    o.min_count = min_count, o.threshold = threshold, o.delimiter = delimiter;
    if (strcmp(scoring, "npmi") == 0)
        o.scoring = EMB_PHRASES_NPMI;
    else if (strcmp(scoring, "default") != 0)
        return emb_cli_usage_error(cmd, "--scoring is default or npmi, not '%s'", scoring);
    /* learnt before OUT is opened, so that a corpus that cannot be read leaves an existing
     * OUT alone; stdin can only be read twice through the library's copy of it */
    bool from_stdin = false;
    for (size_t i = 0; i < npaths; i++) from_stdin = from_stdin || strcmp(paths[i], "-") == 0;
    emb_phrases *p = NULL;
    if (!from_stdin && emb_phrases_learn_files(paths, npaths, &o, &p) != EMB_OK)
        return emb_cli_fail(cmd, "%s", emb_errmsg());
    const bool to_stdout = strcmp(output, "-") == 0;
    FILE *out = to_stdout ? stdout : fopen(output, "wb");
    if (!out) {
        rc = emb_cli_fail(cmd, "cannot write %s: %s", output, strerror(errno));
        emb_phrases_free(p);
        return rc;
    }
    int64_t n = 0;
    rc = EMB_CLI_OK;
    if ((p ? emb_phrases_apply_files(p, paths, npaths, out, &n)
           : emb_phrases_rewrite_files(paths, npaths, &o, out, &n)) != EMB_OK)
        rc = emb_cli_fail(cmd, "%s", emb_errmsg());
    emb_phrases_free(p);
    if (!to_stdout && fclose(out) != 0 && rc == EMB_CLI_OK)
        rc = emb_cli_fail(cmd, "cannot write %s: %s", output, strerror(errno));
    if (rc != EMB_CLI_OK && !to_stdout) unlink(output); /* no half-written output */
    if (rc == EMB_CLI_OK && !quiet)
        fprintf(stderr, "emb phrases: %lld phrases joined in %s\n", (long long)n,
                to_stdout ? "standard output" : output);
    return rc;
}

const emb_cli_command emb_cli_cmd_phrases = {
    "phrases",
    "join frequent word pairs into phrases (gensim's Phrases): new york -> new_york",
    "usage: emb phrases CORPUS... [-o OUT] [--min-count N] [--threshold X] [--delimiter S]\n"
    "                   [--scoring default|npmi]\n"
    "\n"
    "Detects bigram phrases as gensim's Phrases does and writes the corpus again with each\n"
    "detected pair joined by the delimiter, ready for emb train (the phrase is then one\n"
    "token). Tokens are separated by whitespace and a line is a sentence, as gensim's\n"
    "LineSentence. CORPUS is read as emb train reads it: several files and directories one\n"
    "after the other (a line end between two files), gzip, bzip2, xz or zstd data\n"
    "recognised by its first bytes, '-' for standard input (read twice, counting then\n"
    "rewriting: it is kept in a temporary file in TMPDIR, at most 64 GiB).\n"
    "The default score of consecutive tokens a b is\n"
    "(count(a b) - min_count) / (count(a) * count(b)) * size, size the number of distinct\n"
    "tokens and pairs counted; npmi's is log(p(a b) / (p(a) * p(b))) / -log(p(a b)), each p\n"
    "a count over the tokens counted (-inf when count(a b) < min_count). From left to\n"
    "right, a token and the next are joined when the score is above the threshold, and the\n"
    "scan goes on after the pair.\n"
    "\n"
    "Options:\n"
    "  -o, --output OUT   where to write the text (default '-': standard output)\n"
    "  --min-count N      subtracted from a pair's count; npmi: the fewest times a pair is\n"
    "                     seen to be a phrase (default 5, gensim's)\n"
    "  --threshold X      a pair is a phrase when its score is above X (default 10; with\n"
    "                     npmi give one in [-1, 1])\n"
    "  --delimiter S      joins the two words (default _)\n"
    "  --scoring S        default or npmi (gensim's Phrases scoring)\n"
    "  -q, --quiet        no summary on standard error\n"
    "  -h, --help         print this help and exit\n"
    "\n"
    "Exit status: 0 on success, 1 when CORPUS cannot be read or OUT written (or the\n"
    "options are refused: npmi with a threshold outside [-1, 1]), 2 on a usage error.\n"
    "\n"
    "Example:\n"
    "  emb phrases corpus.txt -o phrased.txt && emb train phrased.txt -o vectors.bin\n",
    run,
};
