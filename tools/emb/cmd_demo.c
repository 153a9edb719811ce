/* emb demo: a tour of the seed documents. */
#include <emb/emb.h>

#include <stdio.h>

int emb_cmd_demo(int argc, char **argv);

int emb_cmd_demo(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "emb demo: not written yet\n");
    return 1;
}
