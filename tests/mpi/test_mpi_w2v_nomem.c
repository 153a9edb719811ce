/* A distributed word2vec run (emb_mpi_w2v) whose merge cannot allocate its buffers on one rank
 * only, under mpirun at 1, 2 and 4 ranks: every rank returns EMB_ERR_NOMEM from the same round
 * (the failing rank with its own message, the others naming it), none waits for the others'
 * deadline, and a second emb_w2v_train on the same run is refused on every rank. The failure is
 * injected with libemb_mpi's test hook (src/mpi/mpi_internal.h), which is why this test links
 * the static copy of the library. At one rank nothing is merged and the run trains. */
#include "mpi_check.h"

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

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    o.dim = 8;
    o.window = 3;
    o.negative = 3;
    o.min_count = 1;
    o.epochs = 1;
    o.threads = size_;
    emb_w2v *w = NULL;
    emb_mpi_w2v *d = NULL;
    FILE *f = corpus();
    OK(emb_w2v_create_from_stream(&o, f, "corpus", &w));
    fclose(f);
    const int64_t V = emb_vocab_num_words(emb_w2v_vocab(w));
    /* the buffers made at creation hold 2 V rows (every row of both tables of one rank); the
     * first round's changes of all ranks are more than that, so the last rank cannot grow */
    if (rank_ == size_ - 1) emb__mpi_w2v_max_rows = 2 * V;
    OK(emb_mpi_w2v_create(MPI_COMM_WORLD, w, &d));
    emb_status st = emb_w2v_train(w, count_rounds, NULL);
    if (size_ == 1) {
        CHECK(st == EMB_OK, "one rank merges nothing, yet status %d", (int)st);
    } else {
        CHECK(st == EMB_ERR_NOMEM, "status %d", (int)st);
        char want[64];
        snprintf(want, sizeof want, "rank %d refused the merge", size_ - 1);
        CHECK(strstr(emb_errmsg(), rank_ == size_ - 1 ? "rows to merge" : want), "message: %s",
              emb_errmsg());
        CHECK(rounds_seen == 0, "%d rounds completed", rounds_seen);
        emb_mpi_w2v_bytes b;
        OK(emb_mpi_w2v_traffic(d, rank_, &b));
        CHECK(b.rounds == 0, "%lld merges counted", (long long)b.rounds);
        /* the ranks' tables differ now: the run is refused on every rank, without waiting */
        st = emb_w2v_train(w, count_rounds, NULL);
        CHECK(st == EMB_ERR_STATE && strstr(emb_errmsg(), "failed on every rank"),
              "second run: status %d", (int)st);
    }
    emb__mpi_w2v_max_rows = INT64_MAX;
    emb_mpi_w2v_free(d);
    emb_w2v_free(w);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0) printf("test_mpi_w2v_nomem at %d ranks: %d failed checks\n", size_, all);
    MPI_Finalize();
    return all ? 1 : 0;
}
