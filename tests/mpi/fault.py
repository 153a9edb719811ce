"""A rank killed during training ends the job: mpirun returns non-zero within a bounded time
and says which rank died, never hangs.

    fault.py MPIEXEC NP PROGRAM

Open MPI's mpirun (its default error handling) aborts the whole job when one process of it
exits abnormally; the ranks blocked in a collective call with the dead one are killed with
it. The bound (120 s) is far above the few seconds this takes, and a hang is what it catches.
"""
import subprocess
import sys
import time

BOUND = 120


def main():
    mpiexec, np, prog = sys.argv[1], sys.argv[2], sys.argv[3]
    cmd = [mpiexec, "-np", np, "--oversubscribe", prog]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=BOUND)
    except subprocess.TimeoutExpired as e:
        print(e.output or "")
        sys.exit(f"FAIL: {' '.join(cmd)} still running after {BOUND} s (a hang)")
    took = time.monotonic() - t0
    print(p.stdout)
    if p.returncode == 0:
        sys.exit(f"FAIL: mpirun returned 0 although rank {int(np) - 1} was killed")
    if "killing itself" not in p.stdout:
        sys.exit("FAIL: the program did not reach the point where a rank dies")
    if "signal 9" not in p.stdout and "Killed" not in p.stdout:
        sys.exit("FAIL: mpirun's output does not name the killed process")
    print(f"ok: mpirun returned {p.returncode} after {took:.1f} s")


if __name__ == "__main__":
    main()
