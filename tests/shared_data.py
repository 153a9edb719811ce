"""Test data that is not part of the repository: the seed documents (seeds/) and small vector
files written by gensim and fastText (fixtures/gensim/). They sit in one folder, named by the
environment variable EMB_SHARED_DIR; ctest sets it from the CMake cache variable of the same
name (default: the folder `shared` beside the source tree). Without it, the folder `shared`
beside the source tree is used.

A test that needs one of these files and does not find it FAILS, naming the file and the
variable; it never skips, so a run without the data cannot pass for a run that checked it.
tests/cli/test_shared_data.py shows the failure by pointing EMB_SHARED_DIR at an empty folder.
"""
import os

import pytest

VAR = "EMB_SHARED_DIR"
_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE_DIR = os.environ.get("EMB_SOURCE_DIR") or os.path.normpath(os.path.join(_HERE, ".."))

# The message every missing file produces (tests/cli/test_shared_data.py looks for it).
MISSING = "missing test data"


def shared_dir():
    """The folder of the data kept outside the repository."""
    return os.environ.get(VAR) or os.path.normpath(os.path.join(_SOURCE_DIR, "..", "shared"))


def shared_path(*parts):
    """The path of parts under shared_dir(); fails the calling test when it does not exist."""
    path = os.path.join(shared_dir(), *parts)
    if not os.path.exists(path):
        pytest.fail(f"{MISSING}: {path} does not exist. This test reads {'/'.join(parts)} from "
                    f"the data kept outside the repository, in the folder {VAR} names "
                    f"(now {shared_dir()}; ctest passes the CMake cache variable {VAR}, by "
                    f"default the folder 'shared' beside the source tree). Point {VAR} at a "
                    f"copy of that folder.", pytrace=False)
    return path
