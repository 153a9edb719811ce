"""Tests that read data kept outside the repository (tests/shared_data.py: the seed documents,
gensim's vector files) fail when the data is not there, naming what is missing; they never
skip. Shown here by running them again with EMB_SHARED_DIR pointing at an empty folder (and,
for the unit test, unset)."""
import os
import re
import subprocess
import sys

import pytest

from conftest import BUILD_DIR, SOURCE_DIR
from shared_data import MISSING

TESTS = os.path.join(SOURCE_DIR, "tests")

# Every test that reads the shared data, by file and pytest -k expression, with how many
# tests the selection holds.
SELECTIONS = [
    ("cli/test_files_cli.py", "fixture or fasttext_bin", 2),
    ("cli/test_examples.py", "reproduces_the_document", 2),
    ("cli/test_word2vec.py", "matches_gensim or nn_stdin", 5),
    ("parity/test_io_interop.py", "fixtures_match_gensim", 2),
]


@pytest.mark.parametrize("path,select,count", SELECTIONS)
def test_pytest_fails_without_the_data(path, select, count, tmp_path):
    empty = tmp_path / "no-data"
    empty.mkdir()
    env = dict(os.environ, EMB_SHARED_DIR=str(empty), PYTHONDONTWRITEBYTECODE="1")
    test = os.path.join(TESTS, path)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider",
                        test, "-k", select], cwd=os.path.dirname(test), env=env,
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    summary = out.strip().splitlines()[-1]
    assert "passed" not in summary and "skipped" not in summary, summary
    failed = sum(int(n) for n in re.findall(r"(\d+) (?:failed|errors?)\b", summary))
    assert failed == count, summary
    assert f"{MISSING}: {empty}{os.sep}" in out, out
    assert "EMB_SHARED_DIR" in out


def run_test_io(env):
    exe = os.path.join(BUILD_DIR, "tests", "test_io")
    if not os.path.exists(exe):
        pytest.fail(f"{exe} not found: configure with -DEMB_TESTS=ON and build")
    env = {k: v for k, v in env.items() if v is not None}
    env["EMB_TEST_DATA"] = os.path.join(TESTS, "data")
    return subprocess.run([exe], env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("where", ["empty folder", "unset"])
def test_unit_test_fails_without_the_data(where, tmp_path):
    empty = tmp_path / "no-data"
    empty.mkdir()
    env = dict(os.environ, EMB_SHARED_DIR=str(empty) if where == "empty folder" else None)
    r = run_test_io(env)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out  # cmocka: the number of failed tests
    assert re.search(r"\[  FAILED  \] 1 test\(s\), listed below:\s*\n"
                     r"\[  FAILED  \] test_gensim_fixtures\n", out), out
    if where == "empty folder":
        assert f"{MISSING}: {empty}/fixtures/gensim/lee_fasttext.vec cannot be read" in out, out
    else:
        assert f"{MISSING}: EMB_SHARED_DIR is not set" in out, out
