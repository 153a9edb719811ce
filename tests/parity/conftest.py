import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# tests/shared_data.py: the data some tests read from outside the repository
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the Python package `emb` from the build folder (python/): the suites reach emb through it
sys.path.insert(0, os.path.join(os.environ.get("EMB_BUILD_DIR", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "build")), "python"))
