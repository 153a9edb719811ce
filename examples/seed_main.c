/* seed_main.c: main() of the five seed example programs. CMake builds it once per program
 * with SEED_TOUR_SECTION set to the program's section ("000" for seed000_vocab, ...); the
 * program's steps are in tools/tour/seed00N_*.c, in the emb_seed_tour library. */
#include "seed_tour.h"

#ifndef SEED_TOUR_SECTION
#error "build with -DSEED_TOUR_SECTION=\"000\" (the section of the program), as CMake does"
#endif

int main(int argc, char **argv) {
    return tour_example_main(tour_find_section(SEED_TOUR_SECTION), argc, argv);
}
