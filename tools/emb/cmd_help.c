/* emb help [COMMAND]: the usage, or one command's help text. */
#include "cli.h"

static int run(const emb_cli_command *cmd, int argc, char **argv) {
    emb_cli_args args;
    int rc = emb_cli_parse(cmd, argc, argv, NULL, &args);
    if (rc >= 0) return rc;
    if ((rc = emb_cli_operands(cmd, &args, 0, 1, "COMMAND")) >= 0) return rc;
    if (args.n == 0) {
        emb_cli_print_usage(stdout);
        return EMB_CLI_OK;
    }
    const emb_cli_command *topic = emb_cli_find(args.v[0]);
    if (!topic) return emb_cli_usage_error(NULL, "unknown command '%s'", args.v[0]);
    emb_cli_print_help(topic);
    return EMB_CLI_OK;
}

const emb_cli_command emb_cli_cmd_help = {
    "help",
    "print the list of commands, or a command's help",
    "usage: emb help [COMMAND]\n"
    "\n"
    "Without COMMAND, prints the usage of emb and the list of its commands. With COMMAND,\n"
    "prints that command's help, as 'emb COMMAND --help' does.\n"
    "\n"
    "Everything goes to standard output. Exit status: 0, or 2 when COMMAND is not a\n"
    "command of emb.\n"
    "\n"
    "Examples:\n"
    "  emb help demo\n",
    run,
};
