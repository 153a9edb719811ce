/* train_mpi.h: `mpirun -np N emb train` — the command as one rank of an MPI job
 * (tools/emb/train_mpi.c; docs/DISTRIBUTED.md, "Word vectors"). */
#ifndef EMB_TOOLS_TRAIN_MPI_H
#define EMB_TOOLS_TRAIN_MPI_H

#include <emb/word2vec.h>

#include "cli.h"

typedef struct train_mpi {
    bool on;        /* this process is one rank of an MPI job */
    int rank, size; /* 0 and 1 when not */
} train_mpi;

/* Whether `emb train` runs as a rank: --mpi was given (asked), or the process was started by
 * mpirun (Open MPI's OMPI_COMM_WORLD_SIZE, or PMI_SIZE / PMIX_SIZE / PMIX_RANK of other
 * launchers, are set). Initialises MPI then. Returns -1 when the command goes on, or the exit
 * status after printing why not (MPI asked for, or a job of several processes, and this emb
 * was built without MPI). */
int train_mpi_start(const emb_cli_command *cmd, bool asked, train_mpi *m);

/* Trains w: over the job's ranks when m->on (each rank trains its lanes; the progress callback
 * runs on every rank), else emb_w2v_train. With report, rank 0 prints the bytes each rank sent
 * and received in the merges, in total and per round (after a run that succeeded). */
emb_status train_mpi_train(const train_mpi *m, emb_w2v *w, emb_w2v_progress_fn fn, void *user,
                           bool report);

/* Ends MPI after the command (when it was started): MPI_Finalize after success; after a
 * failure MPI_Abort, which ends every rank of the job, since a rank that failed alone would
 * leave the others waiting for it. Returns rc. */
int train_mpi_end(int rc);

#endif /* EMB_TOOLS_TRAIN_MPI_H */
