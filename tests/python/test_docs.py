"""Every Python example of docs/python.md runs as written (each in a fresh namespace, from a
scratch folder); the asserts inside the examples are the checks, against torch, numpy and the
example's own stated results."""
import os
import re

import pytest

SRC = os.environ.get("EMB_SOURCE_DIR",
                     os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def examples():
    with open(os.path.join(SRC, "docs", "python.md"), encoding="utf8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


def test_the_page_has_examples_for_each_audience():
    text = "\n".join(examples())
    assert len(examples()) >= 6
    for needle in ["np.asarray(table)", "emb.torch", "emb.train", "most_similar"]:
        assert needle in text, needle


@pytest.mark.parametrize("n", range(len(examples())))
def test_example_runs(n, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = compile(examples()[n], f"docs/python.md example {n + 1}", "exec")
    exec(code, {"__name__": f"docs_example_{n + 1}"})
