/* emb most-similar, emb similarity, emb doesnt-match: gensim's KeyedVectors queries
 * (most_similar with positive and negative words, similarity and n_similarity,
 * doesnt_match) over any vector file, by word or, with --rows, by row id (tables without
 * words). The library calls are in include/emb/similarity.h. */
#include "wordvecs.h"

#include <emb/similarity.h>

#include <stdlib.h>
#include <string.h>

/* The rows named by `list` (words, or row ids with by_row, separated by commas or blanks),
 * appended to *rows (grown with realloc). Unknown words are reported; with skip_unknown
 * they are left out with a warning (gensim's doesnt_match), otherwise they fail. Returns
 * false on a failure (reported). */
static bool add_rows(const emb_cli_command *cmd, const wordvecs *w, const char *list, bool by_row,
                     bool skip_unknown, int64_t **rows, int64_t *n) {
    char *dup = strdup(list);
    if (!dup) return emb_cli_fail(cmd, "out of memory"), false;
    bool ok = true;
    for (char *save = NULL, *t = strtok_r(dup, ", \t", &save); t && ok;
         t = strtok_r(NULL, ", \t", &save)) {
        int64_t r;
        if (by_row) {
            char why[128];
            if (!emb_cli_parse_int(t, 0, w->v.weight.shape[0] - 1, &r, why, sizeof why)) {
                emb_cli_fail(cmd, "row '%s': %s (the table has %lld rows)", t, why,
                             (long long)w->v.weight.shape[0]);
                ok = false;
                break;
            }
        } else if ((r = wordvecs_find(w, t)) < 0) {
            if (skip_unknown) {
                fprintf(stderr,
                        "emb %s: '%s' is not in the vocabulary; left out (as gensim does)\n",
                        cmd->name, t);
                continue;
            }
            emb_cli_fail(cmd, "'%s' is not in the vocabulary", t);
            ok = false;
            break;
        }
        int64_t *grown = realloc(*rows, (size_t)(*n + 1) * sizeof(int64_t));
        if (!grown) {
            emb_cli_fail(cmd, "out of memory");
            ok = false;
            break;
        }
        *rows = grown;
        (*rows)[(*n)++] = r;
    }
    free(dup);
    return ok;
}

/* The name of a row in answers: its word, or its id in a table without words. */
static void print_row(const wordvecs *w, int64_t r) {
    if (w->v.vocab)
        fputs(wordvecs_word(w, r), stdout);
    else
        printf("%lld", (long long)r);
}

/* Opens FILE (operand 0) for a query command; --rows accepts a table without words. */
static int open_for(const emb_cli_command *cmd, const emb_cli_args *args, int64_t limit,
                    int64_t restrict_rows, bool fold, bool by_row, wordvecs *w) {
    if (by_row) return wordvecs_open_any(cmd, args->v[0], limit, restrict_rows, false, w);
    return wordvecs_open(cmd, args->v[0], limit, restrict_rows, fold, w);
}

/* The start of similarity and doesnt-match, which take the same options (--limit, --rows,
 * -i): parses them, checks for min..max operands (named `what`) and opens FILE. Returns -1
 * with *w open and *by_row set; otherwise the exit status. */
static int open_simple(const emb_cli_command *cmd, int argc, char **argv, int min, int max,
                       const char *what, emb_cli_args *args, bool *by_row, wordvecs *w) {
    int64_t limit = 0;
    bool fold = false;
    *by_row = false;
    const emb_cli_option opts[] = {
        {"limit", 0, NULL, EMB_CLI_INT, &limit, 1, INT64_MAX, 0, 0},
        {"rows", 0, NULL, EMB_CLI_FLAG, by_row, 0, 0, 0, 0},
        {"ignore-case", 'i', NULL, EMB_CLI_FLAG, &fold, 0, 0, 0, 0},
        {NULL, 0, NULL, EMB_CLI_FLAG, NULL, 0, 0, 0, 0},
    };
    int rc = emb_cli_parse(cmd, argc, argv, opts, args);
    if (rc >= 0) return rc;
    if ((rc = emb_cli_operands(cmd, args, min, max, what)) >= 0) return rc;
    return open_for(cmd, args, limit, 0, fold, *by_row, w);
}

/* ---- most-similar ---- */

static int run_most_similar(const emb_cli_command *cmd, int argc, char **argv) {
    int64_t k = 10, restrict_rows = 0, limit = 0;
    bool fold = false, by_row = false;
    const char *negative = NULL;
    const emb_cli_option opts[] = {
        {"negative", 'n', NULL, EMB_CLI_STRING, &negative, 0, 0, 0, 0},
        {"k", 'k', "topn", EMB_CLI_INT, &k, 1, 1000000, 0, 0},
        {"restrict", 0, "restrict-vocab", EMB_CLI_INT, &restrict_rows, 1, INT64_MAX, 0, 0},
        {"limit", 0, NULL, EMB_CLI_INT, &limit, 1, INT64_MAX, 0, 0},
        {"rows", 0, NULL, EMB_CLI_FLAG, &by_row, 0, 0, 0, 0},
        {"ignore-case", 'i', NULL, EMB_CLI_FLAG, &fold, 0, 0, 0, 0},
        {NULL, 0, NULL, EMB_CLI_FLAG, NULL, 0, 0, 0, 0},
    };
    emb_cli_args args;
    int rc = emb_cli_parse(cmd, argc, argv, opts, &args);
    if (rc >= 0) return rc;
    if ((rc = emb_cli_operands(cmd, &args, 1, -1, "FILE")) >= 0) return rc;
    if (args.n == 1 && !negative)
        return emb_cli_usage_error(cmd, "nothing to compare: give positive %s and/or --negative",
                                   by_row ? "rows" : "words");
    wordvecs w;
    if ((rc = open_for(cmd, &args, limit, restrict_rows, fold, by_row, &w)) >= 0) return rc;
    int64_t *pos = NULL, *neg = NULL, np = 0, nn = 0;
    bool ok = true;
    for (int i = 1; i < args.n && ok; i++)
        ok = add_rows(cmd, &w, args.v[i], by_row, false, &pos, &np);
    if (ok && negative) ok = add_rows(cmd, &w, negative, by_row, false, &neg, &nn);
    int64_t *ids = ok ? malloc((size_t)k * sizeof(int64_t)) : NULL;
    float *sc = ok ? malloc((size_t)k * sizeof(float)) : NULL;
    if (ok && (!ids || !sc)) ok = false, emb_cli_fail(cmd, "out of memory");
    if (ok && emb_knn_most_similar(w.knn, pos, np, neg, nn, k, ids, sc) != EMB_OK)
        ok = false, emb_cli_fail(cmd, "%s", emb_errmsg());
    for (int64_t i = 0; ok && i < k && ids[i] >= 0; i++) {
        print_row(&w, ids[i]);
        printf(" %.6g\n", sc[i]);
    }
    free(pos), free(neg), free(ids), free(sc);
    wordvecs_close(&w);
    return ok ? EMB_CLI_OK : EMB_CLI_FAILURE;
}

const emb_cli_command emb_cli_cmd_most_similar = {
    "most-similar",
    "gensim's most_similar: nearest words to positive words minus negative ones",
    "usage: emb most-similar FILE [POSITIVE...] [-n NEGATIVE[,NEGATIVE...]] [-k N]\n"
    "                        [--restrict N] [--rows] [-i] [--limit N]\n"
    "\n"
    "Prints the k rows of FILE (any vector format emb reads) closest to the query of\n"
    "gensim's KeyedVectors.most_similar(positive, negative, topn=k, restrict_vocab=N): the\n"
    "mean of the unit vectors of the POSITIVE words and of the negated unit vectors of the\n"
    "NEGATIVE words, normalised; best first, one 'word cosine' line each; the query words\n"
    "themselves are left out. 'emb most-similar v.bin king woman -n man' answers the analogy\n"
    "man : king :: woman : ?. POSITIVE operands and the --negative list may separate words\n"
    "with commas. With --rows the operands and --negative are row ids (0-based) and answers\n"
    "name rows by their words, or by their ids in a table without words (an .npy or\n"
    "safetensors table): nearest neighbours by row id.\n"
    "\n"
    "Options:\n"
    "  -n, --negative LIST  words (or rows) to subtract, separated by commas\n"
    "  -k N                 answers (default 10; gensim's topn, also -topn)\n"
    "  --restrict N         answer only from the first N rows, the N most frequent words in\n"
    "                       files sorted by frequency (gensim's restrict_vocab; default all)\n"
    "  --rows               operands are row ids, and FILE may have no words\n"
    "  -i, --ignore-case    match words ignoring ASCII case\n"
    "  --limit N            read only the first N rows of FILE\n"
    "  -h, --help           print this help and exit\n"
    "\n"
    "Exit status: 0 on success, 1 when FILE cannot be read or a word is not in the\n"
    "vocabulary (gensim raises KeyError), 2 on a usage error.\n"
    "\n"
    "Examples:\n"
    "  emb most-similar vectors.bin king woman -n man -k 5\n"
    "  emb most-similar table.npy --rows 42\n",
    run_most_similar,
};

/* ---- similarity ---- */

static int run_similarity(const emb_cli_command *cmd, int argc, char **argv) {
    emb_cli_args args;
    bool by_row;
    wordvecs w;
    int rc = open_simple(cmd, argc, argv, 3, 3, "FILE A B", &args, &by_row, &w);
    if (rc >= 0) return rc;
    int64_t *a = NULL, *b = NULL, na = 0, nb = 0;
    bool ok = add_rows(cmd, &w, args.v[1], by_row, false, &a, &na) &&
              add_rows(cmd, &w, args.v[2], by_row, false, &b, &nb);
    double sim = 0;
    if (ok && emb_knn_n_similarity(w.knn, a, na, b, nb, &sim) != EMB_OK)
        ok = false, emb_cli_fail(cmd, "%s", emb_errmsg());
    if (ok) printf("%.9g\n", sim);
    free(a), free(b);
    wordvecs_close(&w);
    return ok ? EMB_CLI_OK : EMB_CLI_FAILURE;
}

const emb_cli_command emb_cli_cmd_similarity = {
    "similarity",
    "gensim's similarity and n_similarity: the cosine of two words or two sets of words",
    "usage: emb similarity FILE A B [--rows] [-i] [--limit N]\n"
    "\n"
    "Prints the cosine similarity of words A and B of FILE (gensim's\n"
    "KeyedVectors.similarity). When A or B lists several words separated by commas\n"
    "('sushi,shop'), the cosine of the means of the two sets' vectors (as stored, not\n"
    "normalised: gensim's n_similarity). With --rows, A and B are row ids and FILE may have\n"
    "no words. Vectors of norm 0 have similarity 0 (gensim: NaN). Computed in float64.\n"
    "\n"
    "Options:\n"
    "  --rows             A and B are row ids (0-based)\n"
    "  -i, --ignore-case  match words ignoring ASCII case\n"
    "  --limit N          read only the first N rows of FILE\n"
    "  -h, --help         print this help and exit\n"
    "\n"
    "Exit status: 0 on success, 1 when FILE cannot be read or a word is not in the\n"
    "vocabulary, 2 on a usage error.\n"
    "\n"
    "Examples:\n"
    "  emb similarity vectors.bin woman man\n"
    "  emb similarity vectors.bin sushi,shop japanese,restaurant\n",
    run_similarity,
};

/* ---- doesnt-match ---- */

static int run_doesnt_match(const emb_cli_command *cmd, int argc, char **argv) {
    emb_cli_args args;
    bool by_row;
    wordvecs w;
    int rc = open_simple(cmd, argc, argv, 2, -1, "FILE WORD", &args, &by_row, &w);
    if (rc >= 0) return rc;
    int64_t *rows = NULL, n = 0, odd = -1;
    bool ok = true;
    for (int i = 1; i < args.n && ok; i++)
        ok = add_rows(cmd, &w, args.v[i], by_row, true, &rows, &n);
    if (ok && n == 0) ok = false, emb_cli_fail(cmd, "no word of the list is in the vocabulary");
    if (ok && emb_knn_doesnt_match(w.knn, rows, n, &odd) != EMB_OK)
        ok = false, emb_cli_fail(cmd, "%s", emb_errmsg());
    if (ok) {
        print_row(&w, odd);
        printf("\n");
    }
    free(rows);
    wordvecs_close(&w);
    return ok ? EMB_CLI_OK : EMB_CLI_FAILURE;
}

const emb_cli_command emb_cli_cmd_doesnt_match = {
    "doesnt-match",
    "gensim's doesnt_match: the word that fits least with the others",
    "usage: emb doesnt-match FILE WORD... [--rows] [-i] [--limit N]\n"
    "\n"
    "Prints the WORD whose unit vector has the lowest cosine with the normalised mean of\n"
    "the words' unit vectors (gensim's KeyedVectors.doesnt_match). Words may also be\n"
    "separated by commas. As in gensim, words not in the vocabulary are left out with a\n"
    "warning on standard error. With --rows the operands are row ids and FILE may have no\n"
    "words.\n"
    "\n"
    "Options:\n"
    "  --rows             operands are row ids (0-based)\n"
    "  -i, --ignore-case  match words ignoring ASCII case\n"
    "  --limit N          read only the first N rows of FILE\n"
    "  -h, --help         print this help and exit\n"
    "\n"
    "Exit status: 0 on success, 1 when FILE cannot be read or no word is in the\n"
    "vocabulary, 2 on a usage error.\n"
    "\n"
    "Example:\n"
    "  emb doesnt-match vectors.bin breakfast cereal dinner lunch\n",
    run_doesnt_match,
};
