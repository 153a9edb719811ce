/* emb analogy: "a is to b as c is to ?" by 3CosAdd (b - a + c). */
#include "wordvecs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* unit(b) - unit(a) + unit(c) of three vectors of words without rows of a fastText model
 * (or with), then its nearest rows other than the words' own. */
static emb_status analogy_by_vectors(const wordvecs *w, char **words, int64_t k, int64_t *ids,
                                     float *sc) {
    int64_t d = w->v.weight.shape[1], rows[3];
    float *q = calloc((size_t)d, sizeof(float)), *buf = malloc((size_t)d * sizeof(float));
    emb_status st = q && buf ? EMB_OK : EMB_ERR_NOMEM;
    for (int i = 0; i < 3 && st == EMB_OK; i++) {
        const float *x = wordvecs_vector(w, words[i], buf, &rows[i]);
        if (!x) {
            st = EMB_ERR_NOMEM;
            break;
        }
        double s = 0;
        for (int64_t j = 0; j < d; j++) s += (double)x[j] * x[j];
        float inv = s > 0 ? (float)((i == 0 ? -1.0 : 1.0) / sqrt(s)) : 0.0f;
        for (int64_t j = 0; j < d; j++) q[j] += x[j] * inv;
    }
    if (st == EMB_OK) {
        emb_tensor tq;
        emb_tensor_init(&tq, EMB_FLOAT32, q, 2, (int64_t[]){1, d});
        st = emb_knn_search(w->knn, &tq, k, rows, 3, ids, sc);
    }
    free(q), free(buf);
    return st;
}

static bool answer(const emb_cli_command *cmd, const wordvecs *w, char **words, int64_t k) {
    int64_t abc[3];
    bool ok = true, rows = true;
    for (int i = 0; i < 3; i++) {
        abc[i] = wordvecs_find(w, words[i]);
        rows = rows && abc[i] >= 0;
        if (abc[i] < 0 && !w->ft) {
            fprintf(stderr, "emb %s: '%s' is not in the vocabulary\n", cmd->name, words[i]);
            ok = false;
        }
    }
    if (!ok) return false;
    int64_t *ids = malloc((size_t)k * sizeof(int64_t));
    float *sc = malloc((size_t)k * sizeof(float));
    if (!ids || !sc ||
        (rows ? emb_knn_analogy(w->knn, abc, 1, k, ids, sc)
              : analogy_by_vectors(w, words, k, ids, sc)) != EMB_OK) {
        fprintf(stderr, "emb %s: %s\n", cmd->name,
                ids && sc && emb_errmsg()[0] ? emb_errmsg() : "out of memory");
        free(ids), free(sc);
        return false;
    }
    for (int64_t i = 0; i < k && ids[i] >= 0; i++)
        printf("%s %.6g\n", wordvecs_word(w, ids[i]), sc[i]);
    free(ids), free(sc);
    return true;
}

/* One line of standard input: three words, or nothing (skipped). */
static int answer_line(void *ctx, char *line) {
    const wordvecs_query *q = ctx;
    char *words[4];
    int n = wordvecs_split(line, words, 4);
    if (n == 0) return -1;
    if (n != 3) {
        fprintf(stderr, "emb %s: a query is three words A B C\n", q->cmd->name);
        return 0;
    }
    return answer(q->cmd, &q->w, words, q->k);
}

static int run(const emb_cli_command *cmd, int argc, char **argv) {
    wordvecs_query q;
    emb_cli_args args;
    int rc = wordvecs_parse_query(cmd, argc, argv, &q, &args);
    if (rc >= 0) return rc;
    if (args.n != 1 && args.n != 4) {
        if (args.n == 0) return emb_cli_usage_error(cmd, "missing FILE");
        return emb_cli_usage_error(cmd, "expected FILE and three words A B C, got %d word%s",
                                   args.n - 1, args.n == 2 ? "" : "s");
    }
    if ((rc = wordvecs_open_query(&q, args.v[0])) >= 0) return rc;
    bool ok = true;
    if (args.n == 4)
        ok = answer(cmd, &q.w, args.v + 1, q.k);
    else
        ok = wordvecs_answer_stdin(
            cmd, "Enter three words A B C (A is to B as C is to ?): ", answer_line, &q);
    wordvecs_close(&q.w);
    return ok ? EMB_CLI_OK : EMB_CLI_FAILURE;
}

const emb_cli_command emb_cli_cmd_analogy = {
    "analogy",
    "word analogies: A is to B as C is to ? (B - A + C)",
    "usage: emb analogy FILE [A B C] [-k N] [--restrict N] [--limit N] [-i]\n"
    "\n"
    "Answers \"A is to B as C is to ?\" with the words whose vectors are closest (cosine) to\n"
    "unit(B) - unit(A) + unit(C), leaving out A, B and C: the word2vec tool's word-analogy\n"
    "order (man woman king -> queen) and gensim's most_similar(positive=[B, C],\n"
    "negative=[A]). Note that fastText's analogies takes its words in another order (A - B\n"
    "+ C). Prints 'word similarity' lines, best first. Without A B C, reads one query of\n"
    "three words per line from standard input (a prompt on standard error when it is a\n"
    "terminal; answers separated by a blank line otherwise). With a fastText .bin model,\n"
    "words it has no row for are taken from their character n-grams.\n"
    "\n"
    "Options:\n"
    "  -k N            answers per query (default 10)\n"
    "  --restrict N    answer only from the first N rows (the most frequent words)\n"
    "  --limit N       read only the first N rows of FILE\n"
    "  -i, --ignore-case  match query words ignoring ASCII case\n"
    "  -h, --help      print this help and exit\n"
    "\n"
    "Exit status: 0 on success, 1 when FILE cannot be read or a word is not in the\n"
    "vocabulary, 2 on a usage error.\n"
    "\n"
    "Example:\n"
    "  emb analogy vectors.bin man woman king\n",
    run,
};
