/* Unit tests of the CLI framework (tools/emb/cli.c): every option spelling cli.h promises,
 * every usage error and its one-line message, that a value that fails to parse leaves the
 * destination unchanged, the output check and the query reader. The rules as the user sees
 * them, on the real commands, are in tests/cli/test_cli.py. */
#define _GNU_SOURCE /* posix_openpt, ptsname */
#include "emb_test.h"

#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

static const emb_cli_command test_cmd = {"t", "a test command", "usage: emb t [options]\nhelp\n",
                                         NULL};

/* What the last parse printed. */
static char out_text[4096], err_text[4096];

/* Evaluates expr with stdout and stderr captured into out_text and err_text. */
#define CAPTURE(expr)                                                                              \
    ({                                                                                             \
        FILE *o_ = tmpfile(), *e_ = tmpfile();                                                     \
        assert_non_null(o_);                                                                       \
        assert_non_null(e_);                                                                       \
        fflush(stdout);                                                                            \
        fflush(stderr);                                                                            \
        int so_ = dup(1), se_ = dup(2);                                                            \
        dup2(fileno(o_), 1);                                                                       \
        dup2(fileno(e_), 2);                                                                       \
        int r_ = (expr);                                                                           \
        fflush(stdout);                                                                            \
        fflush(stderr);                                                                            \
        dup2(so_, 1);                                                                              \
        dup2(se_, 2);                                                                              \
        close(so_);                                                                                \
        close(se_);                                                                                \
        read_all(o_, out_text);                                                                    \
        read_all(e_, err_text);                                                                    \
        r_;                                                                                        \
    })

/* Evaluates expr with stderr captured into err_text (stdout left where it is). */
#define CAPTURE_ERR(expr)                                                                          \
    ({                                                                                             \
        FILE *e_ = tmpfile();                                                                      \
        assert_non_null(e_);                                                                       \
        fflush(stderr);                                                                            \
        int se_ = dup(2);                                                                          \
        dup2(fileno(e_), 2);                                                                       \
        int r_ = (expr);                                                                           \
        fflush(stderr);                                                                            \
        dup2(se_, 2);                                                                              \
        close(se_);                                                                                \
        read_all(e_, err_text);                                                                    \
        r_;                                                                                        \
    })

static void read_all(FILE *f, char *buf) {
    rewind(f);
    size_t n = fread(buf, 1, 4095, f);
    buf[n] = '\0';
    fclose(f);
}

/* The options of the test command, and where they land. */
static int64_t dim, offset;
static uint64_t seed;
static double lr;
static bool quiet, verbose;
static const char *output;

static const emb_cli_option opts[] = {
    {"dim", 0, "size", EMB_CLI_INT, &dim, 1, 1000, 0, 0},
    {"offset", 0, NULL, EMB_CLI_INT, &offset, 0, 0, 0, 0},
    {"window", 'w', "ws win", EMB_CLI_INT, &dim, 1, 1000, 0, 0},
    {"seed", 0, NULL, EMB_CLI_UINT64, &seed, 0, 0, 0, 0},
    {"lr", 0, "alpha", EMB_CLI_DOUBLE, &lr, 0, 0, 0.0, 10.0},
    {"quiet", 'q', NULL, EMB_CLI_FLAG, &quiet, 0, 0, 0, 0},
    {"verbose", 'v', NULL, EMB_CLI_FLAG, &verbose, 0, 0, 0, 0},
    {"output", 'o', NULL, EMB_CLI_STRING, &output, 0, 0, 0, 0},
    {NULL, 0, NULL, EMB_CLI_FLAG, NULL, 0, 0, 0, 0},
};

static emb_cli_args args;
static char *argv_store[32];
static char arg_text[32][64];

/* Parses "t" followed by the given arguments (NULL-terminated), with every destination reset
 * to a sentinel first. */
static int parse_v(const char *first, va_list ap) {
    int argc = 0;
    dim = offset = -77;
    seed = 77;
    lr = -77.0;
    quiet = verbose = false;
    output = NULL;
    snprintf(arg_text[argc], sizeof arg_text[argc], "t");
    argv_store[argc] = arg_text[argc];
    argc++;
    for (const char *a = first; a; a = va_arg(ap, const char *)) {
        snprintf(arg_text[argc], sizeof arg_text[argc], "%s", a);
        argv_store[argc] = arg_text[argc];
        argc++;
    }
    argv_store[argc] = NULL;
    return CAPTURE(emb_cli_parse(&test_cmd, argc, argv_store, opts, &args));
}

static int parse(const char *first, ...) {
    va_list ap;
    va_start(ap, first);
    int rc = parse_v(first, ap);
    va_end(ap);
    return rc;
}

/* Asserts that the arguments are a usage error whose message is `msg`. */
static void expect_usage_error(const char *msg, const char *first, ...) {
    va_list ap;
    va_start(ap, first);
    int rc = parse_v(first, ap);
    va_end(ap);
    char want[512];
    snprintf(want, sizeof want, "emb t: %s (see 'emb t --help')\n", msg);
    assert_int_equal(rc, EMB_CLI_USAGE);
    assert_string_equal(err_text, want);
    assert_string_equal(out_text, "");
}

static void test_long_option_spellings(void **state) {
    (void)state;
    const char *const forms[][3] = {{"--dim", "100", NULL}, {"--dim=100", NULL, NULL},
                                    {"-dim", "100", NULL},  {"-dim=100", NULL, NULL},
                                    {"-size", "100", NULL}, {"--size=100", NULL, NULL}};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        assert_int_equal(parse(forms[i][0], forms[i][1], forms[i][2]), -1);
        assert_int_equal(dim, 100);
        assert_int_equal(args.n, 0);
        assert_string_equal(err_text, "");
        assert_string_equal(out_text, "");
    }
}

static void test_short_aliases(void **state) {
    (void)state;
    assert_int_equal(parse("-w", "5", NULL), -1);
    assert_int_equal(dim, 5);
    assert_int_equal(parse("-w7", NULL), -1);
    assert_int_equal(dim, 7);
    assert_int_equal(parse("-w=9", NULL), -1);
    assert_int_equal(dim, 9);
    assert_int_equal(parse("-ws", "11", NULL), -1); /* an alias, not -w with value "s" */
    assert_int_equal(dim, 11);
    assert_int_equal(parse("-win", "12", NULL), -1);
    assert_int_equal(dim, 12);
    assert_int_equal(parse("-o", "x.vec", NULL), -1);
    assert_string_equal(output, "x.vec");
    assert_int_equal(parse("-ox.bin", NULL), -1);
    assert_string_equal(output, "x.bin");
}

static void test_flags(void **state) {
    (void)state;
    assert_int_equal(parse("--quiet", NULL), -1);
    assert_true(quiet);
    assert_false(verbose);
    assert_int_equal(parse("-q", NULL), -1);
    assert_true(quiet);
    assert_int_equal(parse("-quiet", NULL), -1);
    assert_true(quiet);
    assert_int_equal(parse("-qv", NULL), -1);
    assert_true(quiet);
    assert_true(verbose);
    expect_usage_error("--quiet takes no value", "--quiet=1", NULL);
    assert_false(quiet);
    expect_usage_error("unknown option '-qx'", "-qx", NULL);
    assert_false(quiet); /* a bundle is taken whole or not at all */
    expect_usage_error("unknown option '-qw'", "-qw", "3", NULL);
}

static void test_operands(void **state) {
    (void)state;
    assert_int_equal(parse("a", "--dim", "3", "b", "-", "--quiet", "c", NULL), -1);
    assert_int_equal(dim, 3);
    assert_true(quiet);
    assert_int_equal(args.n, 4);
    assert_string_equal(args.v[0], "a");
    assert_string_equal(args.v[1], "b");
    assert_string_equal(args.v[2], "-"); /* stdin, by convention */
    assert_string_equal(args.v[3], "c");

    /* -- ends the options */
    assert_int_equal(parse("a", "--", "--dim", "3", "-q", "--", NULL), -1);
    assert_int_equal(dim, -77);
    assert_false(quiet);
    assert_int_equal(args.n, 5);
    assert_string_equal(args.v[1], "--dim");
    assert_string_equal(args.v[3], "-q");
    assert_string_equal(args.v[4], "--");

    /* a value that looks like an option is still the option's value */
    assert_int_equal(parse("--offset", "-5", "--output", "--dim", NULL), -1);
    assert_int_equal(offset, -5);
    assert_string_equal(output, "--dim");
    assert_int_equal(dim, -77);
}

static void test_operand_counts(void **state) {
    (void)state;
    assert_int_equal(parse("a", "b", NULL), -1);
    assert_int_equal(CAPTURE(emb_cli_operands(&test_cmd, &args, 1, 2, "FILE")), -1);
    assert_int_equal(CAPTURE(emb_cli_operands(&test_cmd, &args, 0, -1, "FILE")), -1);
    assert_int_equal(CAPTURE(emb_cli_operands(&test_cmd, &args, 3, -1, "FILE")), EMB_CLI_USAGE);
    assert_string_equal(err_text, "emb t: missing FILE (see 'emb t --help')\n");
    assert_int_equal(CAPTURE(emb_cli_operands(&test_cmd, &args, 0, 1, "FILE")), EMB_CLI_USAGE);
    assert_string_equal(err_text, "emb t: unexpected argument 'b' (see 'emb t --help')\n");
    assert_int_equal(CAPTURE(emb_cli_operands(&test_cmd, &args, 0, 0, "")), EMB_CLI_USAGE);
    assert_string_equal(err_text, "emb t: unexpected argument 'a' (see 'emb t --help')\n");
}

static void test_help(void **state) {
    (void)state;
    static const char *const forms[] = {"--help", "-h", "-help", NULL};
    for (size_t i = 0; i < 4; i++) {
        /* the last time: after an operand and an option */
        int rc = forms[i] ? parse(forms[i], NULL) : parse("x", "--dim", "3", "--help", NULL);
        assert_int_equal(rc, EMB_CLI_OK);
        assert_true(args.help);
        assert_string_equal(out_text, test_cmd.help);
        assert_string_equal(err_text, "");
    }
    expect_usage_error("--help takes no value", "--help=1", NULL);
    /* left to right: an error before --help is reported; --help as a value is a value */
    expect_usage_error("unknown option '--nope'", "--nope", "--help", NULL);
    assert_int_equal(parse("--output", "--help", NULL), -1);
    assert_string_equal(output, "--help");
    assert_false(args.help);
}

static void test_unknown_and_missing(void **state) {
    (void)state;
    expect_usage_error("unknown option '--nope'", "--nope", NULL);
    expect_usage_error("unknown option '--nope'", "--nope=3", NULL);
    expect_usage_error("unknown option '-nope'", "-nope", NULL);
    expect_usage_error("unknown option '-Z'", "-Z", NULL);
    expect_usage_error("unknown option '--di'", "--di", "3", NULL); /* no abbreviations */
    expect_usage_error("unknown option '---dim'", "---dim", "3", NULL);
    expect_usage_error("--dim needs a value", "--dim", NULL);
    expect_usage_error("-size needs a value", "-size", NULL);
    expect_usage_error("-w needs a value", "-w", NULL);
    expect_usage_error("-o needs a value", "-o", NULL);
    assert_int_equal(dim, -77);
    /* an empty value is a value (and not an integer) */
    expect_usage_error("invalid value '' for --dim: expected an integer in [1, 1000]",
                       "--dim=", NULL);
    assert_int_equal(parse("--output=", NULL), -1);
    assert_string_equal(output, "");
}

static void test_integer_values(void **state) {
    (void)state;
    static const char *const bad[] = {"abc",
                                      "0",
                                      "1001",
                                      "-1",
                                      " 5",
                                      "5 ",
                                      "5x",
                                      "0x10",
                                      "1e3",
                                      "99999999999999999999",
                                      "-99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char msg[128];
        snprintf(msg, sizeof msg, "invalid value '%s' for --dim: expected an integer in [1, 1000]",
                 bad[i]);
        expect_usage_error(msg, "--dim", bad[i], NULL);
        assert_int_equal(dim, -77); /* unchanged */
    }
    assert_int_equal(parse("--dim", "1", "-size", "+1000", NULL), -1);
    assert_int_equal(dim, 1000);
    assert_int_equal(parse("--dim", "007", NULL), -1);
    assert_int_equal(dim, 7);
    /* no range given: any int64 */
    assert_int_equal(parse("--offset", "-9223372036854775808", NULL), -1);
    assert_true(offset == INT64_MIN);
    expect_usage_error("invalid value '9223372036854775808' for --offset: expected an integer",
                       "--offset", "9223372036854775808", NULL);
}

static void test_uint64_values(void **state) {
    (void)state;
    assert_int_equal(parse("--seed", "18446744073709551615", NULL), -1);
    assert_true(seed == UINT64_MAX);
    assert_int_equal(parse("--seed=0", NULL), -1);
    assert_true(seed == 0);
    static const char *const bad[] = {"-1", "+1", "18446744073709551616", "1.5", "", " 1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char msg[128];
        snprintf(msg, sizeof msg, "invalid value '%s' for --seed: expected an integer in [0, 2^64)",
                 bad[i]);
        expect_usage_error(msg, "--seed", bad[i], NULL);
        assert_true(seed == 77);
    }
}

static void test_double_values(void **state) {
    (void)state;
    assert_int_equal(parse("--lr", "0.025", NULL), -1);
    assert_true(lr == 0.025);
    assert_int_equal(parse("-alpha", "1e-400", NULL), -1); /* underflow: a tiny number */
    assert_true(lr == 0.0);
    assert_int_equal(parse("--lr=10", NULL), -1);
    assert_true(lr == 10.0);
    static const char *const bad[] = {"nan",   "inf", "-inf", "1e400", "-0.5",
                                      "10.01", "x",   "0.5x", "",      " 1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char msg[128];
        snprintf(msg, sizeof msg, "invalid value '%s' for --lr: expected a number in [0, 10]",
                 bad[i]);
        expect_usage_error(msg, "--lr", bad[i], NULL);
        assert_true(lr == -77.0);
    }
}

static void test_number_helpers(void **state) {
    (void)state;
    char err[64];
    int64_t i = 5;
    double d = 5;
    assert_false(emb_cli_parse_int(NULL, 0, 1, &i, err, sizeof err));
    assert_int_equal(i, 5);
    assert_true(emb_cli_parse_int("7", 0, INT64_MAX, &i, err, sizeof err));
    assert_int_equal(i, 7);
    assert_false(emb_cli_parse_int("-1", 0, INT64_MAX, &i, err, sizeof err));
    assert_string_equal(err, "expected an integer >= 0");
    assert_false(emb_cli_parse_double("nan", 0, 0, &d, err, sizeof err));
    assert_string_equal(err, "expected a finite number");
    assert_true(emb_cli_parse_double("-1e300", 0, 0, &d, err, sizeof err));
    assert_true(d == -1e300);
}

static void test_usage_error_and_fail_messages(void **state) {
    (void)state;
    assert_int_equal(CAPTURE(emb_cli_usage_error(NULL, "unknown command '%s'", "x")),
                     EMB_CLI_USAGE);
    assert_string_equal(err_text, "emb: unknown command 'x' (see 'emb --help')\n");
    assert_int_equal(CAPTURE(emb_cli_fail(&test_cmd, "reading %s: %s", "f.bin", "truncated")),
                     EMB_CLI_FAILURE);
    assert_string_equal(err_text, "emb t: reading f.bin: truncated\n");
    assert_string_equal(out_text, "");
}

static void test_finish_output(void **state) {
    (void)state;
    FILE *full = fopen("/dev/full", "w");
    if (!full)
        fail_msg("cannot open /dev/full (a device whose writes all fail): %s", strerror(errno));
    fputs("text", full);
    assert_int_equal(CAPTURE(emb_cli_finish_output(full, "the file", EMB_CLI_OK)), EMB_CLI_FAILURE);
    assert_string_equal(err_text, "emb: error writing the file: No space left on device\n");
    /* a command that failed already keeps its status and its own message */
    fputs("text", full);
    assert_int_equal(CAPTURE(emb_cli_finish_output(full, "the file", EMB_CLI_USAGE)),
                     EMB_CLI_USAGE);
    assert_string_equal(err_text, "");
    fclose(full);

    FILE *ok = tmpfile();
    assert_non_null(ok);
    fputs("text", ok);
    assert_int_equal(CAPTURE(emb_cli_finish_output(ok, "the file", EMB_CLI_OK)), EMB_CLI_OK);
    assert_int_equal(CAPTURE(emb_cli_finish_output(ok, "the file", EMB_CLI_FAILURE)),
                     EMB_CLI_FAILURE);
    assert_string_equal(err_text, "");
    fclose(ok);
}

/* A help text longer than stdio's buffer of a full disk (4096 bytes): stdio writes it
 * while the text is printed, and the disk's error must still be what is reported. */
static char big_help[10000];
static const emb_cli_command big_cmd = {"big", "a command with a long help", big_help, NULL};

/* `emb help NAME` (cmd_help.c) finds its topic here; the real table is in main.c. */
const emb_cli_command *emb_cli_find(const char *name) {
    return strcmp(name, "big") == 0 ? &big_cmd : NULL;
}

void emb_cli_print_usage(FILE *f) {
    fputs("usage\n", f);
}

extern const emb_cli_command emb_cli_cmd_help;

/* Runs the command line argv (NULL-terminated) with standard output on /dev/full, as main()
 * does (the command, then emb_cli_finish_output); its stderr goes to err_text. */
static int run_on_full_disk(const emb_cli_command *cmd, char **argv) {
    int argc = 0;
    while (argv[argc]) argc++;
    fflush(stdout);
    int so = dup(1), full = open("/dev/full", O_WRONLY);
    if (full < 0) fail_msg("cannot open /dev/full: %s", strerror(errno));
    dup2(full, 1);
    close(full);
    int rc = CAPTURE_ERR(emb_cli_finish_output(stdout, "standard output",
                                               cmd->run ? cmd->run(cmd, argc, argv) : -1));
    clearerr(stdout);
    dup2(so, 1);
    close(so);
    return rc;
}

static void test_long_help_on_full_disk(void **state) {
    (void)state;
    memset(big_help, 'h', sizeof big_help - 2);
    big_help[sizeof big_help - 2] = '\n';
    /* emb help big: the help command prints another command's help */
    char *help_argv[] = {"help", "big", NULL};
    assert_int_equal(run_on_full_disk(&emb_cli_cmd_help, help_argv), EMB_CLI_FAILURE);
    assert_string_equal(err_text, "emb: error writing standard output: No space left on device\n");
    /* emb big --help: the framework prints it */
    char *opt_argv[] = {"big", "--help", NULL};
    fflush(stdout);
    int so = dup(1), full = open("/dev/full", O_WRONLY);
    assert_true(full >= 0);
    dup2(full, 1);
    close(full);
    emb_cli_args a;
    int rc = emb_cli_parse(&big_cmd, 2, opt_argv, NULL, &a);
    rc = CAPTURE_ERR(emb_cli_finish_output(stdout, "standard output", rc));
    clearerr(stdout);
    dup2(so, 1);
    close(so);
    assert_int_equal(rc, EMB_CLI_FAILURE);
    assert_string_equal(err_text, "emb: error writing standard output: No space left on device\n");
}

static void test_read_query(void **state) {
    (void)state;
    FILE *in = tmpfile();
    assert_non_null(in);
    fputs("king queen\nparis\r\n\nEXIT\nafter\n", in);
    rewind(in);
    char *line = NULL;
    size_t cap = 0, len = 99;
    /* not a terminal: no prompt */
    assert_true(CAPTURE(emb_cli_read_query(in, "Query? ", &line, &cap, &len)));
    assert_string_equal(line, "king queen");
    assert_int_equal(len, 10);
    assert_string_equal(err_text, "");
    assert_true(CAPTURE(emb_cli_read_query(in, "Query? ", &line, &cap, &len)));
    assert_string_equal(line, "paris"); /* CRLF stripped */
    assert_true(CAPTURE(emb_cli_read_query(in, "Query? ", &line, &cap, &len)));
    assert_string_equal(line, "");
    assert_int_equal(len, 0);
    assert_false(CAPTURE(emb_cli_read_query(in, "Query? ", &line, &cap, &len))); /* EXIT */
    fclose(in);

    in = tmpfile();
    assert_non_null(in);
    fputs("last line without newline", in);
    rewind(in);
    assert_true(emb_cli_read_query(in, NULL, &line, &cap, &len));
    assert_string_equal(line, "last line without newline");
    assert_false(emb_cli_read_query(in, NULL, &line, &cap, &len)); /* end of input */
    assert_false(ferror(in));
    fclose(in);

    /* on a terminal the prompt goes to stderr */
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) || unlockpt(master))
        fail_msg("cannot open a pseudo-terminal to test the prompt: %s", strerror(errno));
    int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
    assert_true(slave >= 0);
    assert_int_equal(write(master, "whale\n", 6), 6);
    in = fdopen(slave, "r");
    assert_non_null(in);
    assert_true(CAPTURE(emb_cli_read_query(in, "Query word? ", &line, &cap, &len)));
    assert_string_equal(line, "whale");
    assert_string_equal(err_text, "Query word? ");
    assert_string_equal(out_text, "");
    fclose(in);
    close(master);
    free(line);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_option_spellings),
        cmocka_unit_test(test_short_aliases),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_operands),
        cmocka_unit_test(test_operand_counts),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_unknown_and_missing),
        cmocka_unit_test(test_integer_values),
        cmocka_unit_test(test_uint64_values),
        cmocka_unit_test(test_double_values),
        cmocka_unit_test(test_number_helpers),
        cmocka_unit_test(test_usage_error_and_fail_messages),
        cmocka_unit_test(test_finish_output),
        cmocka_unit_test(test_long_help_on_full_disk),
        cmocka_unit_test(test_read_query),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
