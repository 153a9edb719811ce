/* src/mpi/mpi_wait.c: the collective calls of libemb_mpi, with a deadline. Each is MPI's
 * non-blocking collective, polled (MPI_Test; between tests the core is yielded, after 100 ms
 * of waiting the rank naps 1 ms at a time) until it completes
 * or the table's timeout_ms has passed since it started. A rank that stops answering (a
 * stopped or hung process) would otherwise keep the others waiting for ever: past the
 * deadline the waiting rank prints which call it waited for and ends the job with
 * MPI_Abort. timeout_ms 0 waits without a deadline (MPI_Wait). */
#include "mpi_internal.h"

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int emb__mpi_wait(int64_t ms, MPI_Comm comm, MPI_Request *req, const char *call) {
    if (ms <= 0) return MPI_Wait(req, MPI_STATUS_IGNORE);
    const int64_t t0 = now_ms();
    for (;;) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done) return rc;
        const int64_t waited = now_ms() - t0;
        if (waited > ms) break;
        if (waited < 100) { /* a short wait: give the core to the others (oversubscribed) */
            sched_yield();
        } else { /* a long one: 1 ms naps */
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    int rank = -1, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    fprintf(stderr,
            "emb_mpi: rank %d of %d: %s did not complete within %" PRId64
            " ms (timeout_ms): a rank stopped answering; aborting the job\n",
            rank, size, call, ms);
    fflush(stderr);
    MPI_Abort(comm, EMB_MPI_TIMEOUT_EXIT);
    return MPI_ERR_OTHER; /* not reached */
}

int emb__mpi_allreduce(int64_t ms, const void *sb, void *rb, int n, MPI_Datatype dt, MPI_Op op,
                       MPI_Comm comm) {
    MPI_Request req;
    int rc = MPI_Iallreduce(sb, rb, n, dt, op, comm, &req);
    return rc == MPI_SUCCESS ? emb__mpi_wait(ms, comm, &req, "MPI_Allreduce") : rc;
}

int emb__mpi_bcast(int64_t ms, void *buf, int n, MPI_Datatype dt, int root, MPI_Comm comm) {
    MPI_Request req;
    int rc = MPI_Ibcast(buf, n, dt, root, comm, &req);
    return rc == MPI_SUCCESS ? emb__mpi_wait(ms, comm, &req, "MPI_Bcast") : rc;
}

int emb__mpi_alltoall(int64_t ms, const void *sb, int sn, MPI_Datatype st, void *rb, int rn,
                      MPI_Datatype rt, MPI_Comm comm) {
    MPI_Request req;
    int rc = MPI_Ialltoall(sb, sn, st, rb, rn, rt, comm, &req);
    return rc == MPI_SUCCESS ? emb__mpi_wait(ms, comm, &req, "MPI_Alltoall") : rc;
}

int emb__mpi_alltoallv(int64_t ms, const void *sb, const int *sc, const int *sd, MPI_Datatype st,
                       void *rb, const int *rc_, const int *rd, MPI_Datatype rt, MPI_Comm comm) {
    MPI_Request req;
    int rc = MPI_Ialltoallv(sb, sc, sd, st, rb, rc_, rd, rt, comm, &req);
    return rc == MPI_SUCCESS ? emb__mpi_wait(ms, comm, &req, "MPI_Alltoallv") : rc;
}

int emb__mpi_allgather(int64_t ms, const void *sb, int sn, MPI_Datatype st, void *rb, int rn,
                       MPI_Datatype rt, MPI_Comm comm) {
    MPI_Request req;
    int rc = MPI_Iallgather(sb, sn, st, rb, rn, rt, comm, &req);
    return rc == MPI_SUCCESS ? emb__mpi_wait(ms, comm, &req, "MPI_Allgather") : rc;
}

int emb__mpi_allgatherv(int64_t ms, const void *sb, int sn, MPI_Datatype st, void *rb,
                        const int *rc_, const int *rd, MPI_Datatype rt, MPI_Comm comm) {
    MPI_Request req;
    int rc = MPI_Iallgatherv(sb, sn, st, rb, rc_, rd, rt, comm, &req);
    return rc == MPI_SUCCESS ? emb__mpi_wait(ms, comm, &req, "MPI_Allgatherv") : rc;
}

int emb__mpi_gatherv(int64_t ms, const void *sb, int sn, MPI_Datatype st, void *rb, const int *rc_,
                     const int *rd, MPI_Datatype rt, int root, MPI_Comm comm) {
    MPI_Request req;
    int rc = MPI_Igatherv(sb, sn, st, rb, rc_, rd, rt, root, comm, &req);
    return rc == MPI_SUCCESS ? emb__mpi_wait(ms, comm, &req, "MPI_Gatherv") : rc;
}

int emb__mpi_comm_dup(int64_t ms, MPI_Comm comm, MPI_Comm *out) {
    MPI_Request req;
    int rc = MPI_Comm_idup(comm, out, &req);
    return rc == MPI_SUCCESS ? emb__mpi_wait(ms, comm, &req, "MPI_Comm_dup") : rc;
}
