"""What this machine's CPU offers, for the tests (parity_util.kernel_modes) and for
scripts/test_machines.py, which runs the suites under each kernel tier and OpenBLAS core
type the CPU can execute. Reads Linux's /proc/cpuinfo only: importable without libemb."""


def cpu_flags():
    """The CPU's feature flags (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


# What each kernel tier needs: the AVX2+FMA twins, the AVX-512 (F and VL) twins.
AVX2 = {"avx2", "fma"}
AVX512 = AVX2 | {"avx512f", "avx512vl"}
