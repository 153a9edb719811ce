/* emb: the command-line tool. The front door: global options, the command table
 * (commands.h), dispatch, and the final check that standard output was written. */
#include "cli.h"

#include <emb/emb.h>

#include <string.h>

#define EMB_CLI_COMMAND(id) extern const emb_cli_command emb_cli_cmd_##id;
#include "commands.h"
#undef EMB_CLI_COMMAND

static const emb_cli_command *const commands[] = {
#define EMB_CLI_COMMAND(id) &emb_cli_cmd_##id,
#include "commands.h"
#undef EMB_CLI_COMMAND
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

const emb_cli_command *emb_cli_find(const char *name) {
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(commands[i]->name, name)) return commands[i];
    return NULL;
}

void emb_cli_print_usage(FILE *f) {
    int width = 0;
    for (int i = 0; i < N_COMMANDS; i++) {
        int n = (int)strlen(commands[i]->name);
        if (n > width) width = n;
    }
    fprintf(f,
            "usage: emb <command> [options] [arguments]\n"
            "       emb help <command>\n"
            "       emb --version\n"
            "\n"
            "emb %s: PyTorch's nn.Embedding and what surrounds it, in C.\n"
            "\n"
            "commands:\n",
            emb_version());
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-*s  %s\n", width, commands[i]->name, commands[i]->summary);
    fputs("\n"
          "Run 'emb help <command>' or 'emb <command> --help' for a command's options.\n"
          "Exit status: 0 on success, 1 on a failure at run time, 2 on a usage error.\n",
          f);
}

static int dispatch(int argc, char **argv) {
    if (argc < 2) {
        emb_cli_print_usage(stderr);
        return EMB_CLI_USAGE;
    }
    const char *a = argv[1];
    /* Global options: --help and --version, alone or as `--help CMD`, behave like the
     * help and version commands. */
    if (!strcmp(a, "--help") || !strcmp(a, "-h"))
        a = "help";
    else if (!strcmp(a, "--version"))
        a = "version";
    else if (a[0] == '-')
        return emb_cli_usage_error(NULL, "unknown option '%s'", a);
    const emb_cli_command *cmd = emb_cli_find(a);
    if (!cmd) return emb_cli_usage_error(NULL, "unknown command '%s'", a);
    argv[1] = (char *)cmd->name;
    return cmd->run(cmd, argc - 1, argv + 1);
}

int main(int argc, char **argv) {
    emb_cli_install_signal_handlers();
    return emb_cli_finish_output(stdout, "standard output", dispatch(argc, argv));
}
