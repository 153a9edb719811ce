/* A rank that dies or stalls while the others wait in a collective table call:
 *
 *   test_mpi_fault kill|stop|sleep
 *
 * At step 3 the last rank kills itself (kill), stops itself with SIGSTOP (stop), or sleeps
 * for an hour between two calls (sleep); the table's timeout_ms is 2000.
 * tests/mpi/fault.py runs each under mpirun and checks that the job ends with a non-zero
 * exit within a bounded time, saying why, instead of hanging. */
#include <emb/emb.h>
#include <emb/mpi.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *how = argc > 1 ? argv[1] : "kill";
    emb_mpi_shard_options so = emb_mpi_shard_options_default();
    so.timeout_ms = 2000;
    emb_mpi_table *t = NULL;
    if (emb_mpi_table_create(MPI_COMM_WORLD, 100, 8, NULL, &so, &t)) {
        fprintf(stderr, "rank %d: %s\n", rank, emb_errmsg());
        return 2;
    }
    int64_t ids[4] = {1, 50, 99, 7}, n = 4, shape[2] = {4, 8};
    float out[32];
    emb_tensor in, ot;
    emb_tensor_init(&in, EMB_INT64, ids, 1, &n);
    emb_tensor_init(&ot, EMB_FLOAT32, out, 2, shape);
    for (int step = 0;; step++) {
        if (step == 3 && rank == size - 1) {
            fprintf(stderr, "rank %d: %s at step %d\n", rank,
                    !strcmp(how, "stop")    ? "stopping itself"
                    : !strcmp(how, "sleep") ? "sleeping"
                                            : "killing itself",
                    step);
            fflush(stderr);
            if (!strcmp(how, "stop"))
                raise(SIGSTOP);
            else if (!strcmp(how, "sleep"))
                sleep(3600);
            else
                raise(SIGKILL);
        }
        if (emb_mpi_table_lookup(t, &in, &ot)) {
            fprintf(stderr, "rank %d: %s\n", rank, emb_errmsg());
            return 3;
        }
        if (step > 1000000) break; /* never reached while the last rank fails at step 3 */
    }
    emb_mpi_table_free(t);
    MPI_Finalize();
    return 0;
}
