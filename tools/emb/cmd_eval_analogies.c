/* emb eval-analogies: accuracy on a word-analogy test set (questions-words.txt). */
#include "wordvecs.h"

#include <stdlib.h>
#include <string.h>

#define EMB__EVAL_K 8

typedef struct {
    char *name;
    int64_t correct, answered, skipped;
} section;

static void fold(char *s, bool do_fold) {
    if (do_fold) wordvecs_lower(s);
}

static int run(const emb_cli_command *cmd, int argc, char **argv) {
    emb_cli_args args;
    bool case_sensitive;
    FILE *qf;
    wordvecs w;
    int rc = wordvecs_open_eval(cmd, argc, argv, 30000, "restrict-vocab threshold",
                                "FILE QUESTIONS", &args, &case_sensitive, &qf, &w);
    if (rc >= 0) return rc;
    const char *qpath = args.v[1];
    /* Read every question; keep those whose four words are among the searched rows. */
    section *secs = NULL;
    int nsec = 0;
    int64_t *abc = NULL, *expect = NULL, *sec_of = NULL, nq = 0, capq = 0, lineno = 0;
    char *line = NULL;
    size_t cap = 0;
    rc = EMB_CLI_OK;
    while (getline(&line, &cap, qf) >= 0) {
        lineno++;
        char *tok[5];
        int n = wordvecs_split(line, tok, 5);
        if (n == 0) continue;
        if (tok[0][0] == ':') {
            section *s = realloc(secs, (size_t)(nsec + 1) * sizeof *secs);
            if (!s) {
                rc = emb_cli_fail(cmd, "out of memory");
                break;
            }
            secs = s;
            const char *name = tok[0][1] ? tok[0] + 1 : (n > 1 ? tok[1] : "");
            secs[nsec].name = strdup(name);
            secs[nsec].correct = secs[nsec].answered = secs[nsec].skipped = 0;
            nsec++;
            continue;
        }
        if (n != 4) {
            rc = emb_cli_fail(cmd, "%s:%lld: expected a ': section' line or four words", qpath,
                              (long long)lineno);
            break;
        }
        if (nsec == 0) {
            rc = emb_cli_fail(cmd, "%s:%lld: a question before the first ': section' line", qpath,
                              (long long)lineno);
            break;
        }
        int64_t r[4];
        bool ok = true;
        for (int i = 0; i < 4; i++) {
            fold(tok[i], !case_sensitive);
            r[i] = wordvecs_find(&w, tok[i]);
            ok = ok && r[i] >= 0 && r[i] < w.rows;
        }
        if (!ok) {
            secs[nsec - 1].skipped++;
            continue;
        }
        if (nq == capq) {
            capq = capq ? 2 * capq : 1024;
            int64_t *a = realloc(abc, (size_t)capq * 3 * sizeof(int64_t));
            if (a) abc = a;
            int64_t *e = realloc(expect, (size_t)capq * sizeof(int64_t));
            if (e) expect = e;
            int64_t *s = realloc(sec_of, (size_t)capq * sizeof(int64_t));
            if (s) sec_of = s;
            if (!a || !e || !s) {
                rc = emb_cli_fail(cmd, "out of memory");
                break;
            }
        }
        abc[3 * nq] = r[0], abc[3 * nq + 1] = r[1], abc[3 * nq + 2] = r[2];
        expect[nq] = r[3];
        sec_of[nq] = nsec - 1;
        nq++;
    }
    free(line);
    if (qf != stdin) fclose(qf);
    int64_t *ids = NULL;
    float *sc = NULL;
    if (rc == EMB_CLI_OK && nq > 0) {
        ids = malloc((size_t)nq * EMB__EVAL_K * sizeof(int64_t));
        sc = malloc((size_t)nq * EMB__EVAL_K * sizeof(float));
        if (!ids || !sc)
            rc = emb_cli_fail(cmd, "out of memory");
        else if (emb_knn_analogy(w.knn, abc, nq, EMB__EVAL_K, ids, sc) != EMB_OK)
            rc = emb_cli_fail(cmd, "%s", emb_errmsg());
    }
    if (rc == EMB_CLI_OK) {
        /* The answer is the best candidate that is not a question word, also up to case
         * when case is folded (gensim's evaluate_word_analogies does the same). */
        for (int64_t q = 0; q < nq; q++) {
            int64_t pred = -1;
            for (int j = 0; j < EMB__EVAL_K && pred < 0; j++) {
                int64_t c = ids[q * EMB__EVAL_K + j];
                if (c < 0) break;
                int64_t canon = case_sensitive ? c : wordvecs_find(&w, wordvecs_word(&w, c));
                if (canon == abc[3 * q] || canon == abc[3 * q + 1] || canon == abc[3 * q + 2])
                    continue;
                pred = canon;
            }
            section *s = &secs[sec_of[q]];
            s->answered++;
            s->correct += pred == expect[q];
        }
        int64_t tot[3][3] = {{0}}; /* semantic, syntactic, all: correct, answered, skipped */
        for (int i = 0; i < nsec; i++) {
            section *s = &secs[i];
            int kind = strncmp(s->name, "gram", 4) == 0;
            for (int t = 0; t < 2; t++) {
                int row = t ? 2 : kind;
                tot[row][0] += s->correct, tot[row][1] += s->answered, tot[row][2] += s->skipped;
            }
            printf("%s: %.2f%% (%lld/%lld)\n", s->name,
                   s->answered ? 100.0 * (double)s->correct / (double)s->answered : 0.0,
                   (long long)s->correct, (long long)s->answered);
        }
        const char *names[3] = {"semantic", "syntactic", "total"};
        for (int r = 0; r < 3; r++)
            printf("%s: %.2f%% (%lld/%lld), %lld skipped\n", names[r],
                   tot[r][1] ? 100.0 * (double)tot[r][0] / (double)tot[r][1] : 0.0,
                   (long long)tot[r][0], (long long)tot[r][1], (long long)tot[r][2]);
        printf("questions: %lld, answered %lld, skipped %lld (a word outside the first %lld "
               "rows)\n",
               (long long)(tot[2][1] + tot[2][2]), (long long)tot[2][1], (long long)tot[2][2],
               (long long)w.rows);
        if (tot[2][1] == 0 && tot[2][2] > 0)
            fprintf(stderr,
                    "emb %s: note: every question was skipped: none has its four words among "
                    "the first %lld rows of %s%s (--restrict N searches more rows, 0 all of "
                    "them%s)\n",
                    cmd->name, (long long)w.rows, args.v[0],
                    case_sensitive ? " matched with their case" : " (ignoring case)",
                    case_sensitive ? "; without --case-sensitive case is ignored" : "");
    }
    for (int i = 0; i < nsec; i++) free(secs[i].name);
    free(secs), free(abc), free(expect), free(sec_of), free(ids), free(sc);
    wordvecs_close(&w);
    return rc;
}

const emb_cli_command emb_cli_cmd_eval_analogies = {
    "eval-analogies",
    "accuracy on a word-analogy test set (questions-words.txt)",
    "usage: emb eval-analogies FILE QUESTIONS [--restrict N] [--case-sensitive] [--limit N]\n"
    "\n"
    "Evaluates word vectors on analogy questions in the word2vec format: ': section' lines,\n"
    "then lines of four words 'a b c d' meaning a is to b as c is to d (the word2vec\n"
    "distribution's questions-words.txt). Each question is answered with the word closest\n"
    "(cosine) to unit(b) - unit(a) + unit(c) among the first --restrict rows, a, b and c\n"
    "excluded, as the word2vec tool's compute-accuracy and gensim's\n"
    "evaluate_word_analogies do. A question with a word outside those rows is skipped and\n"
    "counted as such; when every question is skipped, a note on standard error says why.\n"
    "Prints the accuracy of each section, of the semantic sections, of the syntactic ones\n"
    "(names starting with 'gram') and in total.\n"
    "\n"
    "Options:\n"
    "  --restrict N       search and accept only the first N rows, the most frequent words\n"
    "                     in files sorted by frequency (default 30000, the word2vec tool's\n"
    "                     usual threshold; 0: all rows); alias -threshold. gensim's\n"
    "                     evaluate_word_analogies restricts to the 300000 most frequent\n"
    "                     (restrict_vocab=300000): --restrict 300000 gives its numbers\n"
    "  --case-sensitive   match words exactly (default: ignore ASCII case, as gensim)\n"
    "  --limit N          read only the first N rows of FILE\n"
    "  -h, --help         print this help and exit\n"
    "\n"
    "Exit status: 0 on success, 1 when a file cannot be read or QUESTIONS is malformed, 2\n"
    "on a usage error.\n"
    "\n"
    "Example:\n"
    "  emb eval-analogies vectors.bin questions-words.txt\n",
    run,
};
