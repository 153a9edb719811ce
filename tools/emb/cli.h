/* cli.h: the framework every `emb` subcommand is written against.
 *
 * A subcommand is one file, tools/emb/cmd_<name>.c, defining one emb_cli_command (its name,
 * a one-line summary for `emb --help`, its full help text for `emb help NAME` and
 * `emb NAME --help`, and its run function), plus one line in tools/emb/commands.h. See the
 * comment there, and docs/cli.md, for the recipe.
 *
 * The rules the framework enforces for every command (tests/cli/test_cli.py checks them):
 *   - `emb NAME --help` / `-h` prints the help text on stdout and exits 0, wherever it
 *     appears among the options (before `--`);
 *   - an unknown option, a missing or malformed option value and a wrong number of operands
 *     are usage errors: exit 2 and ONE line on stderr,
 *         emb NAME: <what is wrong> (see 'emb NAME --help')
 *     and nothing on stdout;
 *   - whatever the command printed on stdout is flushed by main(); a write error there
 *     (a full disk, `> /dev/full`) makes the exit status non-zero with a message;
 *   - exit status 0 on success, 1 on a failure at run time (I/O, a library error), 2 on a
 *     usage error.
 *
 * Option syntax accepted by emb_cli_parse (getopt_long_only's, with exact names):
 *   --name VALUE, --name=VALUE, -name VALUE, -name=VALUE   long options (one or two dashes,
 *                                                          so word2vec's -size 100 works)
 *   -k VALUE, -kVALUE                                      a one-letter short alias
 *   --flag, -flag, -f                                      options without a value
 *   --                                                     ends the options
 * Options and operands may be mixed; operands keep their order. A lone "-" is an operand
 * (conventionally stdin). Names must match exactly (no abbreviations: a new option can never
 * make an old abbreviation ambiguous).
 */
#ifndef EMB_TOOLS_CLI_H
#define EMB_TOOLS_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit statuses. */
enum { EMB_CLI_OK = 0, EMB_CLI_FAILURE = 1, EMB_CLI_USAGE = 2 };

typedef struct emb_cli_command {
    /* What the user types: lower case, words joined by '-' ("eval-analogies"). */
    const char *name;
    /* One line for the command list of `emb --help`, no trailing period. */
    const char *summary;
    /* The whole help text, printed as is by `emb help NAME` and `emb NAME --help`. Write it
     * like a man page: a "usage: emb NAME ..." line first, then what the command does, its
     * operands, every option (with default and range), the output format, the exit status,
     * and an example or two. End with a newline. */
    const char *help;
    /* Runs the command. argv[0] is the command's name, argv[1..argc) its arguments. Returns
     * the exit status (EMB_CLI_OK, EMB_CLI_FAILURE or EMB_CLI_USAGE). Output goes to stdout
     * (main flushes it and checks for write errors), diagnostics to stderr. */
    int (*run)(const struct emb_cli_command *cmd, int argc, char **argv);
} emb_cli_command;

/* ---- options ---- */

typedef enum emb_cli_kind {
    EMB_CLI_FLAG,   /* no value; dest is bool *, set to true */
    EMB_CLI_STRING, /* dest is const char **, set to the argument as given */
    EMB_CLI_INT,    /* dest is int64_t *, a decimal integer in [min, max] */
    EMB_CLI_UINT64, /* dest is uint64_t *, a decimal integer in [0, 2^64) (seeds) */
    EMB_CLI_DOUBLE, /* dest is double *, a finite number in [dmin, dmax] */
} emb_cli_kind;

typedef struct emb_cli_option {
    const char *name;    /* long name without dashes ("dim"); required */
    char short_name;     /* one-letter alias ('k'), or 0 */
    const char *aliases; /* other accepted long names, space-separated ("size"), or NULL */
    emb_cli_kind kind;
    void *dest;        /* see emb_cli_kind; written only when the option is given */
    int64_t min, max;  /* EMB_CLI_INT: accepted range (min == max == 0: any int64) */
    double dmin, dmax; /* EMB_CLI_DOUBLE: accepted range (dmin == dmax == 0: any finite) */
} emb_cli_option;

/* The arguments left once the options are taken out. */
typedef struct emb_cli_args {
    int n;     /* number of operands */
    char **v;  /* the operands, in order (points into the argv given to emb_cli_parse) */
    bool help; /* --help / -h was given: the help text has been printed */
} emb_cli_args;

/* Parses argv[1..argc) against `opts` (an array terminated by an entry whose name is NULL;
 * --help and -h are always recognised and need no entry). Reorders argv so that the
 * operands come first in args->v.
 *
 * Returns -1 when the command should go on. Otherwise returns the exit status the command
 * must return at once: EMB_CLI_OK after printing the help (args->help set), or EMB_CLI_USAGE
 * after printing a one-line error for an unknown option, a missing value or a value that
 * does not parse or is out of range. */
int emb_cli_parse(const emb_cli_command *cmd, int argc, char **argv, const emb_cli_option *opts,
                  emb_cli_args *args);

/* Checks that there are between min and max operands (max < 0: no limit); otherwise prints
 * a usage error ("missing OPERAND" naming `what`, or "unexpected argument 'x'") and returns
 * EMB_CLI_USAGE. Returns -1 when the count is right. `what` names the operands in the
 * message, e.g. "FILE". */
int emb_cli_operands(const emb_cli_command *cmd, const emb_cli_args *args, int min, int max,
                     const char *what);

/* Prints "emb CMD: <message> (see 'emb CMD --help')" on stderr and returns EMB_CLI_USAGE.
 * cmd NULL: "emb: <message> (see 'emb --help')". */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
int emb_cli_usage_error(const emb_cli_command *cmd, const char *fmt, ...);

/* Prints "emb CMD: <message>" on stderr and returns EMB_CLI_FAILURE: for failures at run
 * time (a file that cannot be read, a library error). */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
int emb_cli_fail(const emb_cli_command *cmd, const char *fmt, ...);

/* ---- numbers (for operands and for commands that parse values themselves) ---- */

/* Each returns true and sets *out when `s` is entirely a number of the kind and within the
 * range; otherwise returns false and writes into err[size] why, e.g. "expected an integer
 * in [1, 1000]" or "out of range [1, 1000]". Leading or trailing spaces are rejected. */
bool emb_cli_parse_int(const char *s, int64_t min, int64_t max, int64_t *out, char *err,
                       size_t size);
bool emb_cli_parse_uint64(const char *s, uint64_t *out, char *err, size_t size);
bool emb_cli_parse_double(const char *s, double min, double max, double *out, char *err,
                          size_t size);

/* ---- interactive input (query commands such as nn and analogy) ---- */

/* Reads the next query line from `in` into *line (grown with realloc as getline does; free
 * it when done), without its line terminator ("\n" or "\r\n"). When `prompt` is non-NULL
 * and `in` is a terminal, prints the prompt on stderr first (so that piped output holds
 * results only). Returns false at end of input, on a read error (check ferror(in)) and on
 * the line "EXIT" (word2vec's way to stop); true otherwise, with *len the line's length. */
bool emb_cli_read_query(FILE *in, const char *prompt, char **line, size_t *cap, size_t *len);

/* ---- output ---- */

/* Prints cmd's help text on stdout (`emb NAME --help`, `emb help NAME`), keeping the error
 * of a failed write for emb_cli_finish_output to report: a text longer than stdio's buffer
 * is written, and fails, before the output is finished. */
void emb_cli_print_help(const emb_cli_command *cmd);

/* Flushes `f` and checks it for a write error. Returns `rc` when all is well. Otherwise
 * returns EMB_CLI_FAILURE if `rc` was EMB_CLI_OK, after printing "emb: error writing
 * <what>: <reason>" (a command that already failed has said why; its status is kept). */
int emb_cli_finish_output(FILE *f, const char *what, int rc);

/* ---- signals (main.c installs the handlers before running a command) ---- */

/* Installs the handlers every command runs under: SIGINT, SIGTERM, SIGHUP and SIGPIPE remove
 * the temporary files of writes in progress (emb_remove_temp_files) and then end the process
 * by the same signal; SIGBUS, which a mapped input raises when another program truncates
 * it while emb reads it, prints "emb CMD: FILE: the file shrank while emb was reading it
 * (...)" for the input last named with emb_cli_watch_input, removes the temporaries and
 * exits with EMB_CLI_FAILURE. */
void emb_cli_install_signal_handlers(void);

/* Names the input file a SIGBUS is reported against (the path must outlive the command). */
void emb_cli_watch_input(const emb_cli_command *cmd, const char *path);

/* ---- the command table (main.c) ---- */

/* The command called `name`, or NULL. */
const emb_cli_command *emb_cli_find(const char *name);

/* Prints the usage of emb and the list of commands with their summaries. */
void emb_cli_print_usage(FILE *f);

#endif /* EMB_TOOLS_CLI_H */
