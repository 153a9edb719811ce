/* commands.h: the subcommands of `emb`, one line each, in the order `emb --help` lists them.
 *
 * To add a command `emb frob-nicate`:
 *   1. write tools/emb/cmd_frob_nicate.c defining
 *          const emb_cli_command emb_cli_cmd_frob_nicate = {
 *              "frob-nicate", "one-line summary", "usage: emb frob-nicate ...\n...", run};
 *      with its run function (parse with emb_cli_parse, see cli.h; copy cmd_demo.c);
 *   2. add the line EMB_CLI_COMMAND(frob_nicate) below.
 * That is all: CMake compiles every .c file of tools/emb, main.c builds its table from
 * this list, and `emb help`, `emb frob-nicate --help` and the tests of tests/cli/test_cli.py
 * that apply to every command (help on stdout, unknown options rejected, write errors
 * reported) pick it up. docs/cli.md has the details.
 *
 * The argument is the C identifier of the command (its name with '-' replaced by '_');
 * the file defines emb_cli_cmd_<identifier>. This file is included twice by main.c with
 * different definitions of EMB_CLI_COMMAND, so it has no include guard.
 */
EMB_CLI_COMMAND(train)
EMB_CLI_COMMAND(phrases)
EMB_CLI_COMMAND(nn)
EMB_CLI_COMMAND(analogy)
EMB_CLI_COMMAND(most_similar)
EMB_CLI_COMMAND(similarity)
EMB_CLI_COMMAND(doesnt_match)
EMB_CLI_COMMAND(eval_analogies)
EMB_CLI_COMMAND(eval_pairs)
EMB_CLI_COMMAND(plot)
#ifdef EMB_HAVE_SERVE /* built with libmicrohttpd (tools/emb/serve/) */
EMB_CLI_COMMAND(serve)
#endif
EMB_CLI_COMMAND(info)
EMB_CLI_COMMAND(convert)
EMB_CLI_COMMAND(lookup)
EMB_CLI_COMMAND(demo)
EMB_CLI_COMMAND(help)
EMB_CLI_COMMAND(version)
