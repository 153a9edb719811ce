/* emb eval-pairs: Spearman (and Pearson) correlation with human word-similarity scores. */
#include "wordvecs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double cosine(const wordvecs *w, int64_t a, int64_t b) {
    int64_t d = w->v.weight.shape[1];
    float *buf = malloc((size_t)(2 * d) * sizeof(float));
    if (!buf) return 0.0;
    double c = wordvecs_cosine(wordvecs_row(w, a, buf), wordvecs_row(w, b, buf + d), d);
    free(buf);
    return c;
}

/* The cosine of two words' vectors, rows or fastText n-gram vectors; NAN when one has
 * neither. */
static double cosine_words(const wordvecs *w, const char *s1, const char *s2) {
    int64_t d = w->v.weight.shape[1], r;
    float *buf = malloc((size_t)(2 * d) * sizeof(float));
    if (!buf) return NAN;
    const float *x = wordvecs_vector(w, s1, buf, &r), *y = wordvecs_vector(w, s2, buf + d, &r);
    double c = x && y ? wordvecs_cosine(x, y, d) : NAN;
    free(buf);
    return c;
}

static int run(const emb_cli_command *cmd, int argc, char **argv) {
    emb_cli_args args;
    bool case_sensitive;
    FILE *pf;
    wordvecs w;
    int rc = wordvecs_open_eval(cmd, argc, argv, 300000, "restrict-vocab", "FILE PAIRS", &args,
                                &case_sensitive, &pf, &w);
    if (rc >= 0) return rc;
    const char *ppath = args.v[1];
    double *human = NULL, *model = NULL;
    int64_t n = 0, capn = 0, oov = 0, lineno = 0, total = 0;
    char *line = NULL;
    size_t cap = 0;
    rc = EMB_CLI_OK;
    while (getline(&line, &cap, pf) >= 0) {
        lineno++;
        if (line[0] == '#') continue;
        char *tok[4];
        int k = wordvecs_split(line, tok, 4);
        if (k == 0) continue;
        char *end = NULL;
        double score = k == 3 ? strtod(tok[2], &end) : NAN;
        if (k != 3 || !end || *end || !isfinite(score)) {
            if (lineno == 1 && total == 0) continue; /* a header line */
            rc = emb_cli_fail(cmd, "%s:%lld: expected 'word1 word2 score'", ppath,
                              (long long)lineno);
            break;
        }
        total++;
        if (!case_sensitive) wordvecs_lower(tok[0]), wordvecs_lower(tok[1]);
        int64_t a = wordvecs_find(&w, tok[0]), b = wordvecs_find(&w, tok[1]);
        /* a fastText model answers for every word, from its n-grams when it has no row */
        double cos = w.ft ? cosine_words(&w, tok[0], tok[1]) : NAN;
        if (w.ft ? isnan(cos) : a < 0 || b < 0 || a >= w.rows || b >= w.rows) {
            oov++;
            continue;
        }
        if (n == capn) {
            capn = capn ? 2 * capn : 256;
            double *h = realloc(human, (size_t)capn * sizeof(double));
            if (h) human = h;
            double *m = realloc(model, (size_t)capn * sizeof(double));
            if (m) model = m;
            if (!h || !m) {
                rc = emb_cli_fail(cmd, "out of memory");
                break;
            }
        }
        human[n] = score;
        model[n] = w.ft ? cos : cosine(&w, a, b);
        n++;
    }
    free(line);
    if (pf != stdin) fclose(pf);
    if (rc == EMB_CLI_OK && n < 2)
        rc = emb_cli_fail(cmd,
                          "%s: fewer than 2 pairs with both words in the vocabulary "
                          "(%lld pairs, %lld out of vocabulary)",
                          ppath, (long long)total, (long long)oov);
    if (rc == EMB_CLI_OK) {
        double rho = NAN;
        if (emb_spearman(human, model, n, &rho) != EMB_OK) {
            rc = emb_cli_fail(cmd, "%s", emb_errmsg());
        } else {
            double mh = 0, mm = 0, sxy = 0, sxx = 0, syy = 0;
            for (int64_t i = 0; i < n; i++) mh += human[i], mm += model[i];
            mh /= (double)n, mm /= (double)n;
            for (int64_t i = 0; i < n; i++) {
                double a = human[i] - mh, b = model[i] - mm;
                sxy += a * b, sxx += a * a, syy += b * b;
            }
            double r = sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
            printf("spearman: %.4f\npearson: %.4f\npairs: %lld used, %lld out of vocabulary "
                   "(%.1f%%)\n",
                   rho, r, (long long)n, (long long)oov, 100.0 * (double)oov / (double)total);
        }
    }
    free(human), free(model);
    wordvecs_close(&w);
    return rc;
}

const emb_cli_command emb_cli_cmd_eval_pairs = {
    "eval-pairs",
    "Spearman correlation with a word-similarity set (WordSim-353, SimLex-999, ...)",
    "usage: emb eval-pairs FILE PAIRS [--restrict N] [--case-sensitive] [--limit N]\n"
    "\n"
    "Compares the cosine similarity of word pairs with human scores: PAIRS has one pair a\n"
    "line, 'word1 word2 score', separated by tabs or spaces; lines starting with '#' and a\n"
    "first line that is not a pair (a header) are ignored. Pairs with a word outside the\n"
    "first --restrict rows are skipped and counted, except with a fastText .bin model,\n"
    "which scores every pair (a word without a row gets the vector of its character\n"
    "n-grams; gensim's evaluate_word_pairs skips such pairs even for FastText vectors).\n"
    "Prints Spearman's rank correlation\n"
    "(ties get their average rank), Pearson's correlation and the share of pairs out of\n"
    "vocabulary, as gensim's evaluate_word_pairs reports them.\n"
    "\n"
    "Options:\n"
    "  --restrict N       use only the first N rows (default 300000, as gensim; 0: all)\n"
    "  --case-sensitive   match words exactly (default: ignore ASCII case, as gensim)\n"
    "  --limit N          read only the first N rows of FILE\n"
    "  -h, --help         print this help and exit\n"
    "\n"
    "Exit status: 0 on success, 1 when a file cannot be read, PAIRS is malformed or fewer\n"
    "than two pairs can be scored, 2 on a usage error.\n"
    "\n"
    "Example:\n"
    "  emb eval-pairs vectors.bin wordsim353.tsv\n",
    run,
};
