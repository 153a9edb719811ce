/* cli.c: option parsing, number parsing and error reporting shared by the subcommands
 * (contracts in cli.h). */
#include "cli.h"

#include <emb/io.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void vreport(const emb_cli_command *cmd, const char *fmt, va_list ap) {
    fprintf(stderr, "emb%s%s: ", cmd ? " " : "", cmd ? cmd->name : "");
    vfprintf(stderr, fmt, ap);
}

int emb_cli_usage_error(const emb_cli_command *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport(cmd, fmt, ap);
    va_end(ap);
    if (cmd)
        fprintf(stderr, " (see 'emb %s --help')\n", cmd->name);
    else
        fputs(" (see 'emb --help')\n", stderr);
    return EMB_CLI_USAGE;
}

int emb_cli_fail(const emb_cli_command *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport(cmd, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return EMB_CLI_FAILURE;
}

/* ---- numbers ---- */

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static void int_range(char *err, size_t size, int64_t min, int64_t max) {
    if (min == INT64_MIN && max == INT64_MAX)
        snprintf(err, size, "expected an integer");
    else if (max == INT64_MAX)
        snprintf(err, size, "expected an integer >= %" PRId64, min);
    else
        snprintf(err, size, "expected an integer in [%" PRId64 ", %" PRId64 "]", min, max);
}

bool emb_cli_parse_int(const char *s, int64_t min, int64_t max, int64_t *out, char *err,
                       size_t size) {
    if (!s || !*s || is_space(*s)) {
        int_range(err, size, min, max);
        return false;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < min || v > max) {
        int_range(err, size, min, max);
        return false;
    }
    *out = (int64_t)v;
    return true;
}

bool emb_cli_parse_uint64(const char *s, uint64_t *out, char *err, size_t size) {
    /* strtoull accepts a sign (and wraps "-1" around): only digits are taken here. */
    if (!s || *s < '0' || *s > '9') {
        snprintf(err, size, "expected an integer in [0, 2^64)");
        return false;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) {
        snprintf(err, size, "expected an integer in [0, 2^64)");
        return false;
    }
    *out = (uint64_t)v;
    return true;
}

bool emb_cli_parse_double(const char *s, double min, double max, double *out, char *err,
                          size_t size) {
    bool any = min == 0 && max == 0;
    if (s && *s && !is_space(*s)) {
        char *end = NULL;
        double v = strtod(s, &end);
        /* Overflow gives an infinity (rejected); underflow a tiny or zero value (kept). */
        if (!*end && isfinite(v) && (any || (v >= min && v <= max))) {
            *out = v;
            return true;
        }
    }
    if (any)
        snprintf(err, size, "expected a finite number");
    else
        snprintf(err, size, "expected a number in [%g, %g]", min, max);
    return false;
}

/* ---- options ---- */

/* Does `name` (n bytes, not NUL-terminated) equal the option's name or one of its aliases? */
static bool names_match(const emb_cli_option *o, const char *name, size_t n) {
    if (strlen(o->name) == n && !memcmp(o->name, name, n)) return true;
    for (const char *a = o->aliases; a && *a;) {
        size_t len = strcspn(a, " ");
        if (len == n && !memcmp(a, name, n)) return true;
        a += len;
        while (*a == ' ') a++;
    }
    return false;
}

static const emb_cli_option *find_long(const emb_cli_option *opts, const char *name, size_t n) {
    for (const emb_cli_option *o = opts; o && o->name; o++)
        if (names_match(o, name, n)) return o;
    return NULL;
}

static const emb_cli_option *find_short(const emb_cli_option *opts, char c) {
    for (const emb_cli_option *o = opts; o && o->name; o++)
        if (o->short_name && o->short_name == c) return o;
    return NULL;
}

/* Stores `value` for option `o`, spelled `spelling` on the command line. */
static int store(const emb_cli_command *cmd, const emb_cli_option *o, const char *spelling,
                 const char *value) {
    char err[128];
    bool ok = true;
    switch (o->kind) {
    case EMB_CLI_FLAG:
        *(bool *)o->dest = true;
        return -1;
    case EMB_CLI_STRING:
        *(const char **)o->dest = value;
        return -1;
    case EMB_CLI_INT: {
        int64_t lo = o->min, hi = o->max;
        if (lo == 0 && hi == 0) lo = INT64_MIN, hi = INT64_MAX;
        ok = emb_cli_parse_int(value, lo, hi, (int64_t *)o->dest, err, sizeof err);
        break;
    }
    case EMB_CLI_UINT64:
        ok = emb_cli_parse_uint64(value, (uint64_t *)o->dest, err, sizeof err);
        break;
    case EMB_CLI_DOUBLE:
        ok = emb_cli_parse_double(value, o->dmin, o->dmax, (double *)o->dest, err, sizeof err);
        break;
    }
    if (!ok) return emb_cli_usage_error(cmd, "invalid value '%s' for %s: %s", value, spelling, err);
    return -1;
}

/* The error of the first failed write of a help text to stdout: stdio writes (and fails)
 * in the middle of a text longer than its buffer, and once the text is finished neither
 * errno nor the final flush tells that error any more. */
static int help_errno;

void emb_cli_print_help(const emb_cli_command *cmd) {
    errno = 0;
    if (fputs(cmd->help, stdout) == EOF && !help_errno) help_errno = errno;
}

static void print_help(const emb_cli_command *cmd, emb_cli_args *args) {
    emb_cli_print_help(cmd);
    args->help = true;
}

int emb_cli_parse(const emb_cli_command *cmd, int argc, char **argv, const emb_cli_option *opts,
                  emb_cli_args *args) {
    int n = 0;
    bool options_done = false;
    args->help = false;
    args->n = 0;
    args->v = argv + 1;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (options_done || a[0] != '-' || a[1] == '\0') {
            argv[1 + n++] = a; /* n <= i - 1: never overwrites what is still to be read */
            continue;
        }
        if (!strcmp(a, "--")) {
            options_done = true;
            continue;
        }
        int dashes = a[1] == '-' ? 2 : 1;
        const char *body = a + dashes;
        size_t name_len = strcspn(body, "=");
        const char *eq = body[name_len] == '=' ? body + name_len + 1 : NULL;
        /* The spelling used in messages: the option as typed, without any "=value". */
        char spelling[64];
        snprintf(spelling, sizeof spelling, "%.*s", (int)(dashes + name_len), a);

        if ((name_len == 4 && !memcmp(body, "help", 4)) ||
            (dashes == 1 && name_len == 1 && body[0] == 'h')) {
            if (eq) return emb_cli_usage_error(cmd, "%s takes no value", spelling);
            print_help(cmd, args);
            return EMB_CLI_OK;
        }
        const emb_cli_option *o = find_long(opts, body, name_len);
        if (!o && dashes == 1) {
            /* A short alias: -k5, -k 5, or flags bundled as -vq. */
            o = find_short(opts, body[0]);
            if (o && o->kind != EMB_CLI_FLAG) {
                snprintf(spelling, sizeof spelling, "-%c", body[0]);
                const char *value = body[1] ? body + 1 : NULL;
                if (value && value[0] == '=') value++;
                if (!value) {
                    if (i + 1 >= argc)
                        return emb_cli_usage_error(cmd, "%s needs a value", spelling);
                    value = argv[++i];
                }
                int rc = store(cmd, o, spelling, value);
                if (rc >= 0) return rc;
                continue;
            }
            if (o) {
                for (const char *c = body; *c; c++)
                    if (!find_short(opts, *c) || find_short(opts, *c)->kind != EMB_CLI_FLAG)
                        return emb_cli_usage_error(cmd, "unknown option '%s'", a);
                for (const char *c = body; *c; c++) *(bool *)find_short(opts, *c)->dest = true;
                continue;
            }
        }
        if (!o) return emb_cli_usage_error(cmd, "unknown option '%s'", spelling);
        if (o->kind == EMB_CLI_FLAG) {
            if (eq) return emb_cli_usage_error(cmd, "%s takes no value", spelling);
            *(bool *)o->dest = true;
            continue;
        }
        const char *value = eq;
        if (!value) {
            if (i + 1 >= argc) return emb_cli_usage_error(cmd, "%s needs a value", spelling);
            value = argv[++i];
        }
        int rc = store(cmd, o, spelling, value);
        if (rc >= 0) return rc;
    }
    args->n = n;
    return -1;
}

int emb_cli_operands(const emb_cli_command *cmd, const emb_cli_args *args, int min, int max,
                     const char *what) {
    if (args->n < min) return emb_cli_usage_error(cmd, "missing %s", what);
    if (max >= 0 && args->n > max)
        return emb_cli_usage_error(cmd, "unexpected argument '%s'", args->v[max]);
    return -1;
}

/* ---- interactive input ---- */

bool emb_cli_read_query(FILE *in, const char *prompt, char **line, size_t *cap, size_t *len) {
    if (prompt && isatty(fileno(in))) {
        fputs(prompt, stderr);
        fflush(stderr);
    }
    ssize_t n = getline(line, cap, in);
    if (n < 0) return false;
    if (n > 0 && (*line)[n - 1] == '\n') (*line)[--n] = '\0';
    if (n > 0 && (*line)[n - 1] == '\r') (*line)[--n] = '\0';
    if (!strcmp(*line, "EXIT")) return false;
    *len = (size_t)n;
    return true;
}

/* ---- output ---- */

int emb_cli_finish_output(FILE *f, const char *what, int rc) {
    errno = 0;
    int flushed = fflush(f);
    if (flushed == 0 && !ferror(f)) return rc;
    int err = flushed != 0 && errno ? errno : f == stdout && help_errno ? help_errno : EIO;
    help_errno = 0;
    /* A failed command has already said why; a write error on top of it changes nothing. */
    if (rc == EMB_CLI_OK) fprintf(stderr, "emb: error writing %s: %s\n", what, strerror(err));
    return rc == EMB_CLI_OK ? EMB_CLI_FAILURE : rc;
}

/* ---- signals ---- */

/* The message of a SIGBUS, formatted in advance: the handler may only write(2) it. */
#define BUS_DEFAULT                                                                                \
    "emb: an input file shrank while emb was reading it (another program truncated it)\n"
static char bus_msg[1024] = BUS_DEFAULT;
static volatile size_t bus_len = sizeof BUS_DEFAULT - 1;

void emb_cli_watch_input(const emb_cli_command *cmd, const char *path) {
    int n =
        snprintf(bus_msg, sizeof bus_msg,
                 "emb %s: %s: the file shrank while emb was reading it (another program truncated "
                 "it)\n",
                 cmd ? cmd->name : "", path);
    if (n < 0 || (size_t)n >= sizeof bus_msg) {
        bus_msg[sizeof bus_msg - 2] = '\n';
        n = (int)sizeof bus_msg - 1;
    }
    bus_len = (size_t)n;
}

static void on_bus(int sig) {
    (void)sig;
    ssize_t r = write(STDERR_FILENO, bus_msg, bus_len);
    (void)r;
    emb_remove_temp_files();
    _exit(EMB_CLI_FAILURE);
}

static void on_stop(int sig) {
    emb_remove_temp_files();
    signal(sig, SIG_DFL); /* end by the same signal, as if there were no handler */
    raise(sig);
}

void emb_cli_install_signal_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_bus;
    sigaction(SIGBUS, &sa, NULL);
    const int stops[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (size_t i = 0; i < sizeof stops / sizeof stops[0]; i++) {
        struct sigaction old;
        /* a signal the parent set to be ignored (nohup, a shell's background job) stays so */
        if (sigaction(stops[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sa.sa_handler = on_stop;
        sigaction(stops[i], &sa, NULL);
    }
}
