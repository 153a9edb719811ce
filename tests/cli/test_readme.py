"""The README's C example compiles against the built library and prints what torch prints
for the same steps."""
import os
import re
import subprocess

import torch

SRC = os.environ.get("EMB_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
LIB = os.environ["EMB_LIB"]


def readme_example():
    text = open(os.path.join(SRC, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"```c\n(.*?)```", text, re.S)
    assert blocks, "README has no C example"
    return blocks[0]


def test_readme_example_runs_and_matches_torch(tmp_path):
    src = tmp_path / "readme.c"
    src.write_text(readme_example())
    exe = tmp_path / "readme"
    libdir = os.path.dirname(LIB)
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-I", os.path.join(SRC, "include"),
                    str(src), LIB, f"-Wl,-rpath,{libdir}", "-o", str(exe)], check=True)
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    torch.manual_seed(0)
    e = torch.nn.Embedding(6, 2)
    want = repr(e(torch.tensor([2])).detach()) + "\n"
    assert got == want
    # the comment in the README shows the same line
    assert want.strip() in readme_example()
