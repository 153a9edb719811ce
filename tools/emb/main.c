/* emb: the command-line tool. */
#include <emb/emb.h>

#include <stdio.h>
#include <string.h>

int emb_cmd_demo(int argc, char **argv);

static void usage(FILE *f) {
    fprintf(f,
            "usage: emb <command> [options]\n"
            "\n"
            "commands:\n"
            "  demo      a tour of nn.Embedding through the seed documents' examples\n"
            "  version   print the version\n"
            "  help      this text\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stdout);
        return 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("emb %s\n", emb_version());
        return 0;
    }
    if (!strcmp(cmd, "demo")) return emb_cmd_demo(argc - 1, argv + 1);
    fprintf(stderr, "emb: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
