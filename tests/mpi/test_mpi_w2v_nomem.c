/* A distributed word2vec run (emb_mpi_w2v) whose merge cannot allocate its buffers on one rank
 * only, under mpirun at 1, 2 and 4 ranks: every rank returns EMB_ERR_NOMEM from the same round
 * (the failing rank with its own message, the others naming it), none waits for the others'
 * deadline, and a second emb_w2v_train on the same run is refused on every rank. The failure is
 * injected with the test hooks of src/mpi/mpi_internal.h, which is why this test links the
 * static copies of the libraries: the merge buffers cannot grow (without subwords, and with
 * them, where a rank's list holds the n-gram rows it changed), and with subwords the starts of
 * the n-gram rows cannot be saved. At one rank nothing is merged and the run trains. Also one
 * rank that cannot allocate its lanes' training scratch before the first round: every rank
 * returns EMB_ERR_NOMEM at once, the others naming that rank. */
#include "mpi_check.h"

#include <limits.h>

#include "mpi/mpi_internal.h"

static int rounds_seen;

static int count_rounds(const emb_w2v_progress *p, void *user) {
    (void)p, (void)user;
    rounds_seen++;
    return 0;
}

/* A corpus of 40 words in lines of 8, the same on every rank, in a temporary stream. */
static FILE *corpus(void) {
    FILE *f = tmpfile();
    if (!f) {
        fprintf(stderr, "rank %d: cannot create a temporary file\n", rank_);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    uint32_t s = 99;
    for (int line = 0; line < 4000; line++) {
        for (int k = 0; k < 8; k++) {
            s = s * 1103515245u + 12345u;
            fprintf(f, "%sv%u", k ? " " : "", (s >> 16) % 40);
        }
        fputc('\n', f);
    }
    rewind(f);
    return f;
}

/* A run over that corpus (the same on every rank), with subwords or not, in `threads` lanes. */
static emb_w2v *make_run(bool subwords, int threads) {
    emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    o.dim = 8;
    o.window = 3;
    o.negative = 3;
    o.min_count = 1;
    o.epochs = 1;
    o.threads = o.lanes = threads;
    if (subwords) o.minn = 3, o.maxn = 6, o.bucket = 5000;
    emb_w2v *w = NULL;
    FILE *f = corpus();
    OK(emb_w2v_create_from_stream(&o, f, "corpus", &w));
    fclose(f);
    rounds_seen = 0;
    return w;
}

/* The failures of the merge, all on the last rank only. */
enum {
    ROWS,          /* the merge buffers cannot grow past 2 V rows */
    SUBWORD_ROWS,  /* the same with subwords: a rank's list with n-gram rows is longer than that */
    SUBWORD_SLOTS, /* with subwords, the first n-gram row the rank changes cannot be saved */
    CASES
};

static void run(int c) {
    emb_w2v *w = make_run(c != ROWS, size_);
    emb_mpi_w2v *d = NULL;
    const int64_t V = emb_vocab_num_words(emb_w2v_vocab(w));
    /* the buffers made at creation hold 2 V rows (every row of both tables of one rank); the
     * first round's changes of all ranks are more than that, so the last rank cannot grow */
    if (rank_ == size_ - 1 && c != SUBWORD_SLOTS) emb__mpi_w2v_max_rows = 2 * V;
    if (rank_ == size_ - 1 && c == SUBWORD_SLOTS) emb__mpi_w2v_max_slots = 0;
    OK(emb_mpi_w2v_create(MPI_COMM_WORLD, w, &d));
    emb_status st = emb_w2v_train(w, count_rounds, NULL);
    if (size_ == 1) {
        CHECK(st == EMB_OK, "case %d: one rank merges nothing, yet status %d", c, (int)st);
    } else {
        CHECK(st == EMB_ERR_NOMEM, "case %d: status %d", c, (int)st);
        char want[64];
        snprintf(want, sizeof want, "rank %d refused the merge", size_ - 1);
        const char *own = c == SUBWORD_SLOTS ? "n-gram rows" : "rows to merge";
        CHECK(strstr(emb_errmsg(), rank_ == size_ - 1 ? own : want), "case %d: message: %s", c,
              emb_errmsg());
        CHECK(rounds_seen == 0, "case %d: %d rounds completed", c, rounds_seen);
        emb_mpi_w2v_bytes b;
        OK(emb_mpi_w2v_traffic(d, rank_, &b));
        CHECK(b.rounds == 0, "case %d: %lld merges counted", c, (long long)b.rounds);
        /* the ranks' tables differ now: the run is refused on every rank, without waiting */
        st = emb_w2v_train(w, count_rounds, NULL);
        CHECK(st == EMB_ERR_STATE && strstr(emb_errmsg(), "failed on every rank"),
              "case %d: second run: status %d", c, (int)st);
    }
    emb__mpi_w2v_max_rows = INT64_MAX;
    emb__mpi_w2v_max_slots = INT64_MAX;
    emb_mpi_w2v_free(d);
    emb_w2v_free(w);
}

/* The last rank cannot allocate the training scratch of the second of its two lanes: every rank
 * fails at once, before the first round (at one rank: the single process's failure), nothing
 * has changed, and the same run then trains on every rank. */
static void scratch(void) {
    emb_w2v *w = make_run(true, 2 * size_);
    emb_mpi_w2v *d = NULL;
    OK(emb_mpi_w2v_create(MPI_COMM_WORLD, w, &d));
    emb_tensor v;
    OK(emb_w2v_vectors(w, &v));
    const size_t nbytes = (size_t)emb_tensor_numel(&v) * sizeof(float);
    float *before = malloc(nbytes);
    if (before) memcpy(before, v.data, nbytes);
    if (rank_ == size_ - 1) emb__w2v_max_scratch_lanes = 1;
    emb_status st = emb_w2v_train(w, count_rounds, NULL);
    emb__w2v_max_scratch_lanes = INT_MAX;
    CHECK(st == EMB_ERR_NOMEM, "scratch: status %d", (int)st);
    char want[80];
    snprintf(want, sizeof want, "rank %d of the run cannot allocate its training scratch",
             size_ - 1);
    CHECK(strstr(emb_errmsg(), rank_ == size_ - 1 ? "cannot allocate training scratch" : want),
          "scratch: message: %s", emb_errmsg());
    CHECK(rounds_seen == 0, "scratch: %d rounds completed", rounds_seen);
    emb_mpi_w2v_bytes b;
    OK(emb_mpi_w2v_traffic(d, rank_, &b));
    CHECK(b.rounds == 0, "scratch: %lld merges counted", (long long)b.rounds);
    CHECK(emb_w2v_words_done(w) == 0, "scratch: %lld words done", (long long)emb_w2v_words_done(w));
    OK(emb_w2v_vectors(w, &v));
    CHECK(before && !memcmp(before, v.data, nbytes), "scratch: the vectors changed");
    /* nothing is left half done: the same run trains on every rank now */
    st = emb_w2v_train(w, count_rounds, NULL);
    CHECK(st == EMB_OK, "scratch: second run: status %d", (int)st);
    CHECK(rounds_seen > 0, "scratch: second run: no round");
    free(before);
    emb_mpi_w2v_free(d);
    emb_w2v_free(w);
}

int main(int argc, char **argv) {
    mpi_check_init(&argc, &argv);
    for (int c = 0; c < CASES; c++) run(c);
    scratch();
    return mpi_check_finish(NULL);
}
