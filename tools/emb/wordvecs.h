/* wordvecs.h: what the word-vector commands (nn, analogy, eval-analogies, eval-pairs) share:
 * a table read from any supported file with its words, a search index over it, and word
 * lookup, exact or case-insensitive the way gensim's evaluations fold case. */
#ifndef EMB_TOOLS_WORDVECS_H
#define EMB_TOOLS_WORDVECS_H

#include "cli.h"

#include <emb/emb.h>
#include <emb/io.h>

typedef struct {
    emb_vectors v;    /* the table and its words; over a quantized table (q != NULL) only the
                         words and v.weight's shape: read rows with wordvecs_row */
    emb_qtable *q;    /* a mapped f16/bf16/int8/int4 table searched directly, or NULL */
    emb_knn *knn;     /* cosine index over the first `restrict` rows */
    int64_t rows;     /* rows searched */
    emb_vocab *fold;  /* lowercased words of the searched rows -> row (most frequent first);
                         NULL when lookups are exact */
    emb_fasttext *ft; /* a fastText model (.bin): vectors for words without a row; or NULL */
} wordvecs;

/* emb_vectors_read, and for a fastText model also the model (*ft; NULL otherwise), which
 * answers for words it does not hold. A model in a regular file is read once (the table of
 * its words comes from the model); one through a pipe gives the table alone (*ft NULL),
 * since a pipe can be read once only. Errors as emb_vectors_read and emb_fasttext_read. */
emb_status wordvecs_read(const char *path, const emb_vectors_read_options *ro, emb_vectors *v,
                         emb_fasttext **ft);

/* Reads `path` (format sniffed; at most `limit` rows when limit > 0), requires words,
 * and indexes its first `restrict_rows` rows (0: all). Prints the error and returns
 * EMB_CLI_FAILURE on failure, -1 on success. */
int wordvecs_open(const emb_cli_command *cmd, const char *path, int64_t limit,
                  int64_t restrict_rows, bool fold_case, wordvecs *out);
/* The same for a table that may have no words (then v.vocab is NULL and rows are named by
 * their ids). */
int wordvecs_open_any(const emb_cli_command *cmd, const char *path, int64_t limit,
                      int64_t restrict_rows, bool fold_case, wordvecs *out);
void wordvecs_close(wordvecs *w);

/* The row of `word` among the searched rows (folded when the table was opened with
 * fold_case; exact otherwise: any row of the file), or -1. */
int64_t wordvecs_find(const wordvecs *w, const char *word);

/* The vector of `word`: its row's (*row set to the row) or, for a word without a row in a
 * fastText model, the mean of its n-grams' rows computed into buf (*row = -1). NULL (and
 * *row = -1) when the word has neither. */
const float *wordvecs_vector(const wordvecs *w, const char *word, float *buf, int64_t *row);

/* Row r as float32: a pointer into the table, or r dequantized into buf (dim floats). */
const float *wordvecs_row(const wordvecs *w, int64_t r, float *buf);

/* A case-folded index of the first `rows` words of vocab: each ASCII-lowercased word maps
 * to its first (most frequent) row. *out receives it; errors as emb_vocab_add. */
emb_status wordvecs_fold(const emb_vocab *vocab, int64_t rows, emb_vocab **out);

/* The row of word[0..n) (lowercased) in a folded index, or -1. */
int64_t wordvecs_fold_find(const emb_vocab *fold, const char *word, size_t n);

/* The word of a row. */
const char *wordvecs_word(const wordvecs *w, int64_t row);

/* The cosine of float32 vectors x and y of d values, computed in float64 (0 when one has
 * norm 0): what nn, eval-pairs and serve report as a similarity. */
double wordvecs_cosine(const float *x, const float *y, int64_t d);

/* Lowercases ASCII letters of s in place. */
void wordvecs_lower(char *s);

/* The options of the query commands (nn, analogy) and what they query. */
typedef struct {
    const emb_cli_command *cmd;
    int64_t k, restrict_rows, limit; /* -k (default 10), --restrict, --limit (0: all) */
    bool fold;                       /* -i */
    wordvecs w;                      /* the table, once opened */
} wordvecs_query;

/* Parses a query command's options (-k, --restrict, --limit, -i) into *q. Returns as
 * emb_cli_parse: -1 when the command goes on (then open q->w with wordvecs_open_query). */
int wordvecs_parse_query(const emb_cli_command *cmd, int argc, char **argv, wordvecs_query *q,
                         emb_cli_args *args);

/* Opens `path` for q as wordvecs_open does, with q's options. */
int wordvecs_open_query(wordvecs_query *q, const char *path);

/* Splits `line` in place into at most max words separated by blanks (space, tab, CR, LF),
 * stored in words; returns how many. */
int wordvecs_split(char *line, char **words, int max);

/* The queries of a command without query operands, read from standard input one per line
 * (emb_cli_read_query with `prompt`): answer(ctx, line) returns 1 when answered, 0 when the
 * query failed (said on stderr), -1 for a line that is no query (then no separator). Each
 * answer is followed by a blank line unless standard input is a terminal. Returns false
 * when a query failed or standard input could not be read (reported). */
bool wordvecs_answer_stdin(const emb_cli_command *cmd, const char *prompt,
                           int (*answer)(void *ctx, char *line), void *ctx);

/* The start of the evaluations (eval-analogies, eval-pairs): parses their options
 * (--restrict N, default restrict_default, also spelled as `restrict_aliases`; --limit N;
 * --case-sensitive into *case_sensitive), checks for the two operands FILE and a list
 * (named `operands` in messages; "-" is standard input), and opens the list into *list,
 * then the table as wordvecs_open does (case folded unless case-sensitive). Returns -1
 * when both are open; otherwise the exit status, with the error printed and nothing left
 * open. */
int wordvecs_open_eval(const emb_cli_command *cmd, int argc, char **argv, int64_t restrict_default,
                       const char *restrict_aliases, const char *operands, emb_cli_args *args,
                       bool *case_sensitive, FILE **list, wordvecs *w);

#endif /* EMB_TOOLS_WORDVECS_H */
