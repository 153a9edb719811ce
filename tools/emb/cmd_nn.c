/* emb nn: nearest neighbours of words by cosine similarity. */
#include "wordvecs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One query: the words of `line` (separated by spaces); one word is looked up, several
 * are combined as the word2vec tool's distance does (the sum of their unit vectors). A
 * word without a row of a fastText model gets its n-gram vector (and is not left out of
 * the answers: it has no row). Returns false when a word has no vector (reported on
 * stderr). */
static bool query(const emb_cli_command *cmd, const wordvecs *w, char *line, int64_t k,
                  bool header) {
    int64_t d = w->v.weight.shape[1];
    float *q = calloc((size_t)d, sizeof(float)), *buf = malloc((size_t)d * sizeof(float));
    int64_t *ids = malloc((size_t)k * sizeof(int64_t));
    float *sc = malloc((size_t)k * sizeof(float));
    if (!q || !buf || !ids || !sc) {
        free(q), free(buf), free(ids), free(sc);
        fprintf(stderr, "emb %s: out of memory\n", cmd->name);
        return false;
    }
    int64_t words[64];
    const char *names[64];
    int n = 0, nw = 0;
    bool ok = true;
    for (char *save = NULL, *t = strtok_r(line, " \t\r\n", &save); t;
         t = strtok_r(NULL, " \t\r\n", &save)) {
        int64_t r;
        const float *x = wordvecs_vector(w, t, buf, &r);
        if (!x) {
            fprintf(stderr, "emb %s: '%s' is not in the vocabulary\n", cmd->name, t);
            ok = false;
        } else if (n < 64) {
            names[n++] = r >= 0 ? wordvecs_word(w, r) : t;
            if (r >= 0) words[nw++] = r;
            double s = 0;
            for (int64_t j = 0; j < d; j++) s += (double)x[j] * x[j];
            float inv = s > 0 ? (float)(1.0 / sqrt(s)) : 0.0f;
            for (int64_t j = 0; j < d; j++) q[j] += x[j] * inv;
        }
    }
    bool done = false;
    if (ok && n > 0) {
        emb_tensor tq;
        emb_tensor_init(&tq, EMB_FLOAT32, q, 2, (int64_t[]){1, d});
        done = emb_knn_search(w->knn, &tq, k, words, nw, ids, sc) == EMB_OK;
        if (!done) fprintf(stderr, "emb %s: %s\n", cmd->name, emb_errmsg());
    }
    if (done && header) {
        printf("%s:", "query");
        for (int i = 0; i < n; i++) printf(" %s", names[i]);
        printf("\n");
    }
    for (int64_t i = 0; done && i < k && ids[i] >= 0; i++)
        printf("%s %.6g\n", wordvecs_word(w, ids[i]), sc[i]);
    free(q), free(buf), free(ids), free(sc);
    return ok && (n == 0 || done);
}

static int answer_line(void *ctx, char *line) {
    const wordvecs_query *q = ctx;
    return query(q->cmd, &q->w, line, q->k, false);
}

static int run(const emb_cli_command *cmd, int argc, char **argv) {
    wordvecs_query q;
    emb_cli_args args;
    int rc = wordvecs_parse_query(cmd, argc, argv, &q, &args);
    if (rc >= 0) return rc;
    if ((rc = emb_cli_operands(cmd, &args, 1, -1, "FILE")) >= 0) return rc;
    if ((rc = wordvecs_open_query(&q, args.v[0])) >= 0) return rc;
    bool ok = true;
    if (args.n > 1) {
        for (int i = 1; i < args.n; i++) {
            char *dup = strdup(args.v[i]);
            ok = (dup && query(cmd, &q.w, dup, q.k, args.n > 2)) && ok;
            free(dup);
        }
    } else {
        ok = wordvecs_answer_stdin(cmd, "Query word? ", answer_line, &q);
    }
    wordvecs_close(&q.w);
    return ok ? EMB_CLI_OK : EMB_CLI_FAILURE;
}

const emb_cli_command emb_cli_cmd_nn = {
    "nn",
    "nearest neighbours of words by cosine similarity",
    "usage: emb nn FILE [WORD...] [-k N] [--restrict N] [--limit N] [-i]\n"
    "\n"
    "Prints the k words of FILE (any vector format emb reads: word2vec text or binary,\n"
    "fastText .vec and .bin, GloVe, safetensors with words) whose vectors have the highest\n"
    "cosine similarity with each WORD, best first, one 'word similarity' line each; the\n"
    "query word itself is left out, as gensim's most_similar and fastText's nn do. A word\n"
    "of no row of a fastText .bin model is answered from its character n-grams, as\n"
    "fastText does for words it did not see in training. With several\n"
    "WORDs each is a query, under a 'query: WORD' line. Without WORDs, queries are read\n"
    "from standard input, one per line, with a prompt on standard error when it is a\n"
    "terminal; a line of several words is one query, the sum of their unit vectors (as\n"
    "the word2vec tool's distance), and answers are separated by a blank line.\n"
    "\n"
    "Options:\n"
    "  -k N            neighbours per query (default 10)\n"
    "  --restrict N    search only the first N rows (the N most frequent words in files\n"
    "                  sorted by frequency; gensim's restrict_vocab)\n"
    "  --limit N       read only the first N rows of FILE\n"
    "  -i, --ignore-case  match query words ignoring ASCII case\n"
    "  -h, --help      print this help and exit\n"
    "\n"
    "Exit status: 0 on success, 1 when FILE cannot be read or a query word is not in the\n"
    "vocabulary (the other queries are still answered), 2 on a usage error.\n"
    "\n"
    "Example:\n"
    "  emb nn vectors.bin war peace -k 5\n",
    run,
};
