/* train_mpi.c: `emb train` as one rank of an MPI job (tools/emb/train_mpi.h). Built with MPI
 * when CMake finds it (EMB_HAVE_MPI); without, a job of several processes is refused. */
#include "train_mpi.h"

#include <stdlib.h>
#include <string.h>

#ifdef EMB_HAVE_MPI
#include <emb/mpi.h>

static bool started;
#endif

/* The size of the job this process was started in by a launcher, or 0. */
static int launched_size(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v) > 0 ? atoi(v) : 1;
    }
    return getenv("PMIX_RANK") ? 1 : 0;
}

int train_mpi_start(const emb_cli_command *cmd, bool asked, train_mpi *m) {
    m->on = false, m->rank = 0, m->size = 1;
    int launched = launched_size();
    if (!asked && launched == 0) return -1;
#ifdef EMB_HAVE_MPI
    int init = 0;
    MPI_Initialized(&init);
    if (!init && MPI_Init(NULL, NULL) != MPI_SUCCESS)
        return emb_cli_fail(cmd, "cannot initialise MPI");
    started = !init;
    MPI_Comm_rank(MPI_COMM_WORLD, &m->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m->size);
    m->on = true;
    return -1;
#else
    if (asked)
        return emb_cli_fail(cmd, "--mpi: this emb was built without MPI (install an MPI, e.g. "
                                 "Debian's libopenmpi-dev, and build again)");
    if (launched > 1)
        return emb_cli_fail(cmd,
                            "started as one of %d processes (mpirun), but this emb was built "
                            "without MPI: each would train alone; build with MPI "
                            "(libopenmpi-dev) or run one process",
                            launched);
    return -1;
#endif
}

#ifdef EMB_HAVE_MPI
/* Rank 0's summary of the merges' traffic, one line per rank. */
static void report_traffic(const emb_mpi_w2v *d, int size) {
    for (int q = 0; q < size; q++) {
        emb_mpi_w2v_bytes b;
        if (emb_mpi_w2v_traffic(d, q, &b)) return;
        double per = b.rounds > 0 ? (double)b.rounds : 1;
        fprintf(stderr,
                "emb train: merge traffic of rank %d of %d: sent %.0f bytes, received %.0f "
                "over %lld rounds (%.0f and %.0f per round)\n",
                q, size, (double)b.sent, (double)b.received, (long long)b.rounds,
                (double)b.sent / per, (double)b.received / per);
    }
}
#endif

emb_status train_mpi_train(const train_mpi *m, emb_w2v *w, emb_w2v_progress_fn fn, void *user,
                           bool report) {
#ifdef EMB_HAVE_MPI
    if (m->on) {
        emb_mpi_w2v *d;
        emb_status st = emb_mpi_w2v_create(MPI_COMM_WORLD, w, &d);
        if (st) return st;
        st = emb_w2v_train(w, fn, user);
        if (!st && report && m->rank == 0) report_traffic(d, m->size);
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", emb_errmsg());
        emb_mpi_w2v_free(d);
        if (st) emb_set_error(st, "%s", msg);
        return st;
    }
#else
    (void)m, (void)report;
#endif
    return emb_w2v_train(w, fn, user);
}

int train_mpi_end(int rc) {
#ifdef EMB_HAVE_MPI
    if (started) {
        started = false;
        if (rc != EMB_CLI_OK) {
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, rc);
        }
        MPI_Finalize();
    }
#endif
    return rc;
}
