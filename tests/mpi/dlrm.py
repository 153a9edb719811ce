"""examples/mpi/dlrm_mpi trained at 1, 2 and 4 ranks ends with the parameters of the single
process (its --single mode, which uses libemb alone) on the joined batches, byte for byte.

    dlrm.py MPIEXEC DLRM_MPI
"""
import os
import subprocess
import sys
import tempfile


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    print(p.stdout)
    if p.returncode:
        sys.exit(f"FAIL: {' '.join(cmd)} returned {p.returncode}")
    return p.stdout


def main():
    mpiexec, prog = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        single = os.path.join(d, "single.bin")
        run([prog, "--single", "--steps", "30", "--out", single])
        with open(single, "rb") as f:
            want = f.read()
        assert len(want) > 1000, len(want)
        for np in (1, 2, 4):
            out = os.path.join(d, f"np{np}.bin")
            text = run([mpiexec, "-np", str(np), "--oversubscribe", prog, "--steps", "30",
                        "--out", out])
            with open(out, "rb") as f:
                got = f.read()
            if got != want:
                first = next(i for i in range(min(len(got), len(want))) if got[i] != want[i]) \
                    if len(got) == len(want) else -1
                sys.exit(f"FAIL: parameters after training at {np} ranks differ from the "
                         f"single process's (sizes {len(got)}/{len(want)}, first byte {first})")
            if np > 1:
                assert f"rank {np - 1}:" in text, "a rank did not report"
            print(f"ok: {np} ranks, {len(got)} bytes of parameters identical")


if __name__ == "__main__":
    main()
