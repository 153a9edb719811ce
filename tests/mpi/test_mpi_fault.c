/* A rank that dies: the last rank kills itself while the others wait in a collective table
 * call. tests/mpi/fault.py runs it under mpirun and checks that mpirun ends the job with a
 * non-zero exit within a bounded time instead of hanging. */
#include <emb/emb.h>
#include <emb/mpi.h>

#include <signal.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    emb_mpi_table *t = NULL;
    if (emb_mpi_table_create(MPI_COMM_WORLD, 100, 8, NULL, NULL, &t)) {
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
            fprintf(stderr, "rank %d: killing itself at step %d\n", rank, step);
            fflush(stderr);
            raise(SIGKILL);
        }
        if (emb_mpi_table_lookup(t, &in, &ot)) {
            fprintf(stderr, "rank %d: %s\n", rank, emb_errmsg());
            return 3;
        }
        if (step > 1000000) break; /* never reached while the last rank dies at step 3 */
    }
    emb_mpi_table_free(t);
    MPI_Finalize();
    return 0;
}
