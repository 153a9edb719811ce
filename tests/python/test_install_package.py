"""`cmake --install` (what `make install` runs) puts the package where /usr/bin/python3 finds
it under the prefix: with a fresh prefix, and nothing of the build folder or the source tree
on the path, `import emb` works and runs the README's three Python lines."""
import os
import re
import subprocess
import sys

BUILD = os.environ["EMB_BUILD_DIR"]
SRC = os.environ.get("EMB_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def cache_value(name):
    with open(os.path.join(BUILD, "CMakeCache.txt"), encoding="utf8") as f:
        m = re.search(rf"^{name}:\w+=(.*)$", f.read(), re.M)
    assert m, f"{name} not in the build's CMakeCache.txt"
    return m.group(1)


def readme_python_lines():
    with open(os.path.join(SRC, "README.md"), encoding="utf8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert blocks, "the README shows a Python block"
    return blocks[0]


def test_installed_package_imports(tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", BUILD, "--prefix", str(prefix)], check=True,
                   capture_output=True)
    site = prefix / cache_value("EMB_PYTHON_INSTALL_DIR")
    assert (site / "emb" / "__init__.py").exists() and list((site / "emb").glob("_emb*.so"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EMB_LIB")}
    env["PYTHONPATH"] = str(site)
    script = ("import emb, sys\nassert emb.__file__.startswith(sys.argv[1]), emb.__file__\n" +
              readme_python_lines() + "\nprint(out.tobytes().hex())\n")
    p = subprocess.run([sys.executable, "-c", script, str(site)], cwd=str(tmp_path), env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    import torch
    torch.manual_seed(0)
    want = torch.nn.Embedding(6, 2)(torch.tensor([2])).detach().numpy()
    assert p.stdout.strip() == want.tobytes().hex(), (p.stdout, want)
    # and the README's comment shows those numbers as numpy prints them
    assert str(want) in readme_python_lines()


def test_install_dir_is_on_the_interpreters_path_for_usr_local():
    """For the default prefix (/usr/local) the install folder is one /usr/bin/python3 searches
    without PYTHONPATH."""
    rel = cache_value("EMB_PYTHON_INSTALL_DIR")
    p = subprocess.run([sys.executable, "-c", "import sys; print('\\n'.join(sys.path))"],
                       capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert os.path.join("/usr/local", rel) in p.stdout.split("\n"), (rel, p.stdout)
