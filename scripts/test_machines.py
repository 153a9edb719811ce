#!/usr/bin/env python3
"""Runs the suites whose results can depend on the machine under every kernel tier and every
OpenBLAS core type this CPU can execute, so that a result that holds only on one kind of
machine fails here first (`make test-machines`; `make test` runs it after the main run).

    scripts/test_machines.py BUILD_DIR [--jobs N] [--list] [--after-main-run]

What can depend on the machine, and what runs (docs/semantics.md §12, §13):

* the kernel tier: emb picks its scalar reference kernels, their AVX2+FMA twins or their
  AVX-512 twins at run time (EMB_KERNELS=ref / avx2 / auto). Every unit test and the parity
  suites of the operations with kernel variants run once per tier the CPU has: ref always,
  avx2 with AVX2 and FMA, auto when it means AVX-512 (F and VL); without AVX-512, auto
  selects the AVX2 twins, which the avx2 run covers, and the script says so.
* the OpenBLAS core type: Linear's products and the per_sample_weights gradient go through
  OpenBLAS (as torch's do) and their bits follow its kernels. The suites that compare them
  with torch (one process, one OpenBLAS, so both use the same core) run with
  OPENBLAS_CORETYPE set to each core this CPU executes: Haswell and Zen with AVX2 and FMA,
  SkylakeX with AVX-512 (F, CD, BW, DQ, VL). Each run first checks, with OPENBLAS_VERBOSE=2,
  that OpenBLAS really loads that core (it falls back to another without saying so in its
  results).

A tier or core the CPU lacks is listed as not run, with the reason; a core that does not
load is a failure. With --after-main-run (what `make test` passes, after its full ctest run
with neither variable set), the tier that "auto" selects and the core OpenBLAS picks by
itself are not run again: they are the main run's, and the script says so. Exit status: 0
when every run passed, 1 otherwise, 2 on a usage error.
"""
import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "parity"))
from machine import AVX2, AVX512, cpu_flags  # noqa: E402 (the tests' own view of the CPU)

# Suites (ctest names) with kernel variants underneath: every unit test, and these parity
# suites. Left out: printing, file formats and the CLI (no kernel variants), losses
# (test_loss compares each of its two tiers with the matching torch kernel by itself: the
# AVX2+SLEEF one in process, the reference one against torch with
# ATEN_CPU_CAPABILITY=default in a subprocess).
TIER_SUITES = [
    "unit\\.", "parity\\.test_embedding", "parity\\.test_backward", "parity\\.test_bag",
    "parity\\.test_optim$", "parity\\.test_training", "parity\\.test_random",
    "parity\\.test_search", "parity\\.test_quant$", "parity\\.test_quant_train",
    "parity\\.test_equivalence", "parity\\.test_linear", "parity\\.test_temporaries",
    "parity\\.test_nan",
]
# Suites whose results go through OpenBLAS (Linear, the per_sample_weights gradient).
BLAS_SUITES = [
    "parity\\.test_linear", "parity\\.test_equivalence", "parity\\.test_bag",
    "parity\\.test_training", "parity\\.test_nan", "cli\\.test_bow_classifier",
    "cli\\.test_char_mlp",
]

TIERS = [  # (EMB_KERNELS, CPU flags needed, what it selects)
    ("ref", set(), "the scalar reference kernels"),
    ("avx2", AVX2, "the AVX2+FMA twins"),
    ("auto", AVX512, "the AVX-512 twins"),
]
CORES = [  # (OPENBLAS_CORETYPE, CPU flags needed)
    ("Haswell", AVX2),
    ("Zen", AVX2),
    ("SkylakeX", AVX512 | {"avx512cd", "avx512bw", "avx512dq"}),
]


def loaded_core(lib, coretype=None):
    """The core OpenBLAS reports when libemb loads with OPENBLAS_CORETYPE=coretype (None: the
    environment as it is), or None when nothing reports one (a build without OpenBLAS)."""
    env = dict(os.environ, OPENBLAS_VERBOSE="2")
    if coretype is not None:
        env["OPENBLAS_CORETYPE"] = coretype
    code = "import ctypes, sys; ctypes.CDLL(sys.argv[1])"
    p = subprocess.run([sys.executable, "-c", code, lib], env=env, capture_output=True,
                       text=True)
    cores = [ln.split(":", 1)[1].strip() for ln in (p.stdout + p.stderr).splitlines()
             if ln.startswith("Core:")]
    return cores[-1] if cores else None


def ctest(build, regexes, env_extra, jobs):
    env = dict(os.environ, **env_extra)
    cmd = ["ctest", "--output-on-failure", "-j", str(jobs), "-R", "|".join(regexes)]
    t0 = time.time()
    p = subprocess.run(cmd, cwd=build, env=env, capture_output=True, text=True)
    out = p.stdout + p.stderr
    summary = [ln for ln in out.splitlines() if "tests passed" in ln]
    if p.returncode != 0:
        sys.stdout.write(out)
    return p.returncode == 0, time.time() - t0, summary[-1].strip() if summary else out[-200:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--list", action="store_true", help="say what would run, run nothing")
    ap.add_argument("--after-main-run", action="store_true",
                    help="skip the tier and the core the main ctest run used")
    a = ap.parse_args()
    lib = os.path.join(a.build, "libemb.so")
    if not os.path.exists(lib):
        print(f"test_machines: no {lib}: build first (make test does)", file=sys.stderr)
        return 2
    flags = cpu_flags()
    runs, skipped = [], []
    # what the main run used: auto's tier (the best this CPU has) and OpenBLAS's own choice
    auto_tier = [n for n, need, _ in TIERS if need <= flags][-1]
    default_core = loaded_core(lib)
    for name, need, what in TIERS:
        missing = sorted(need - flags)
        if a.after_main_run and not missing and name == auto_tier:
            skipped.append((f"EMB_KERNELS={name} ({what})",
                            "what auto selects on this CPU: the main run covered it"))
            continue
        if missing:
            if name == "auto":
                skipped.append((f"EMB_KERNELS=auto ({what})",
                                "this CPU has no " + "/".join(missing) + "; auto selects the "
                                "AVX2 twins here (the avx2 tier)"))
            else:
                skipped.append((f"EMB_KERNELS={name} ({what})",
                                "this CPU has no " + "/".join(missing)))
            continue
        runs.append((f"EMB_KERNELS={name}", {"EMB_KERNELS": name}, TIER_SUITES))
    no_blas = loaded_core(lib, "Haswell") is None
    for core, need in CORES:
        missing = sorted(need - flags)
        if no_blas:
            skipped.append((f"OPENBLAS_CORETYPE={core}", "this build has no OpenBLAS"))
        elif missing:
            skipped.append((f"OPENBLAS_CORETYPE={core}",
                            "this CPU has no " + "/".join(missing) + " (the core would not run)"))
        elif a.after_main_run and core == default_core:
            skipped.append((f"OPENBLAS_CORETYPE={core}",
                            "OpenBLAS's own choice on this CPU: the main run covered it"))
        else:
            runs.append((f"OPENBLAS_CORETYPE={core}", {"OPENBLAS_CORETYPE": core}, BLAS_SUITES))
    print(f"test_machines: CPU flags: {' '.join(sorted(f for f in flags if f.startswith(('avx', 'fma'))))}")
    for label, why in skipped:
        print(f"  not run: {label}: {why}")
    if a.list:
        for label, _, suites in runs:
            print(f"  would run: {label}: {' '.join(s.replace(chr(92), '') for s in suites)}")
        return 0
    failed = []
    for label, env, suites in runs:
        if "OPENBLAS_CORETYPE" in env:
            core = loaded_core(lib, env["OPENBLAS_CORETYPE"])
            if core != env["OPENBLAS_CORETYPE"]:
                print(f"  FAILED: {label}: OpenBLAS loads core {core!r} instead")
                failed.append(label)
                continue
        ok, secs, summary = ctest(a.build, suites, env, a.jobs)
        print(f"  {'passed' if ok else 'FAILED'}: {label} ({secs:.0f} s): {summary}", flush=True)
        if not ok:
            failed.append(label)
    for label, why in skipped:
        print(f"  not run: {label}: {why}")
    if failed:
        print(f"test_machines: {len(failed)} of {len(runs)} runs failed: {', '.join(failed)}")
        return 1
    print(f"test_machines: all {len(runs)} runs passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
