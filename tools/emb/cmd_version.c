/* emb version: the library's version string. */
#include "cli.h"

#include <emb/emb.h>

static int run(const emb_cli_command *cmd, int argc, char **argv) {
    emb_cli_args args;
    int rc = emb_cli_parse(cmd, argc, argv, NULL, &args);
    if (rc >= 0) return rc;
    if ((rc = emb_cli_operands(cmd, &args, 0, 0, "")) >= 0) return rc;
    printf("emb %s\n", emb_version());
    return EMB_CLI_OK;
}

const emb_cli_command emb_cli_cmd_version = {
    "version",
    "print the version",
    "usage: emb version\n"
    "       emb --version\n"
    "\n"
    "Prints \"emb\" and the version of the emb library the tool is built with,\n"
    "\"emb MAJOR.MINOR.PATCH\", on one line of standard output.\n",
    run,
};
