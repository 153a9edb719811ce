"""A rank that dies or stalls ends the job: mpirun returns non-zero within a bounded time and
says why, never hangs.

    fault.py MPIEXEC NP PROGRAM

Runs PROGRAM (tests/mpi/test_mpi_fault.c) three times, its last rank failing at step 3:
- kill: the rank kills itself. Open MPI's mpirun (its default error handling) aborts the
  whole job when one process exits abnormally, and names the killed process.
- stop, sleep: the rank stops itself (SIGSTOP), or sleeps between two calls; it is alive
  and never answers. The others, waiting in a table call, give up after the table's
  timeout_ms (2000 ms in the program), print which call they waited for and end the job
  with MPI_Abort (error code 124).
The bound (120 s) is far above the few seconds each takes, and a hang is what it catches.
"""
import subprocess
import sys
import time

BOUND = 120


def run(mpiexec, np, prog, how):
    cmd = [mpiexec, "-np", np, "--oversubscribe", prog, how]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=BOUND)
    except subprocess.TimeoutExpired as e:
        out = e.output.decode(errors="replace") if isinstance(e.output, bytes) else e.output
        print(out or "")
        sys.exit(f"FAIL: {' '.join(cmd)} still running after {BOUND} s (a hang)")
    took = time.monotonic() - t0
    print(p.stdout)
    if p.returncode == 0:
        sys.exit(f"FAIL ({how}): mpirun returned 0 although rank {int(np) - 1} failed")
    said = {"kill": "killing itself", "stop": "stopping itself", "sleep": "sleeping"}[how]
    if said not in p.stdout:
        sys.exit(f"FAIL ({how}): the program did not reach the point where a rank fails")
    if how == "kill":
        if "signal 9" not in p.stdout and "Killed" not in p.stdout:
            sys.exit("FAIL (kill): mpirun's output does not name the killed process")
    else:
        if "did not complete within 2000 ms" not in p.stdout:
            sys.exit(f"FAIL ({how}): no rank said which call it waited for")
        if p.returncode != 124:
            sys.exit(f"FAIL ({how}): mpirun returned {p.returncode}, not MPI_Abort's 124")
    print(f"ok ({how}): mpirun returned {p.returncode} after {took:.1f} s")


def main():
    mpiexec, np, prog = sys.argv[1], sys.argv[2], sys.argv[3]
    for how in ("kill", "stop", "sleep"):
        run(mpiexec, np, prog, how)


if __name__ == "__main__":
    main()
