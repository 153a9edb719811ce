"""`cmake --install` puts the library, headers, emb.pc, the CMake package and the `emb` program
in place, and a program builds against them with EXACTLY the README's lines: the code blocks
of its "Building against an installed emb" section are extracted at test time and run by the
shell with PREFIX set to a fresh install prefix, for pkg-config and for CMake. Then the
package's target names are checked: emb::emb is the (shared) library, emb::emb_static and
emb::emb_shared are the two libraries, emb::emb_cli is the program."""
import os
import re
import subprocess

import pytest

BUILD = os.environ["EMB_BUILD_DIR"]
SRC = os.environ["EMB_SOURCE_DIR"]
SECTION = "## Building against an installed emb"


def readme():
    with open(os.path.join(SRC, "README.md"), encoding="utf-8") as f:
        return f.read()


def readme_c_example():
    return re.findall(r"```c\n(.*?)```", readme(), re.S)[0]


def install_section_blocks():
    """[(language, text)] of the fenced blocks in the README's install section, in order."""
    text = readme()
    assert SECTION in text, f"README has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1]
    section = re.split(r"(?m)^## ", section, maxsplit=1)[0]
    return re.findall(r"```(\w*)\n(.*?)```", section, re.S)


def run(*args, **kw):
    p = subprocess.run(list(args), capture_output=True, text=True, **kw)
    if p.returncode != 0:
        pytest.fail(f"{args} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout


def run_block(block, cwd, prefix):
    """Runs a README shell block as written, with PREFIX set and nothing else from emb's
    build in the environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMB_", "PKG_CONFIG"))}
    env["PREFIX"] = str(prefix)
    return run("bash", "-euc", block, cwd=str(cwd), env=env)


def needed(exe):
    dyn = run("readelf", "-d", str(exe))
    return (re.findall(r"\(NEEDED\).*\[(.*?)\]", dyn),
            re.findall(r"\((?:RUNPATH|RPATH)\).*\[(.*?)\]", dyn))


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("prefix")
    run("cmake", "--install", BUILD, "--prefix", str(prefix))
    for f in ["include/emb/emb.h", "include/emb/embedding.h", "lib/libemb.a", "lib/libemb.so",
              "lib/pkgconfig/emb.pc", "lib/cmake/emb/embConfig.cmake", "bin/emb"]:
        assert (prefix / f).exists(), f
    assert run(str(prefix / "bin" / "emb"), "version").startswith("emb ")
    return prefix


def expected_output():
    """The output the README's example states in its comment (test_readme.py checks that
    comment against torch)."""
    m = re.search(r"/\* (tensor\(.*?\)) \*/", readme_c_example())
    assert m, "the README example states its output in a comment"
    return m.group(1) + "\n"


def test_readme_blocks_are_the_expected_ones():
    blocks = install_section_blocks()
    assert [lang for lang, _ in blocks] == ["sh", "cmake", "sh"], blocks
    assert "PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig" in blocks[0][1]
    assert "-Wl,-rpath," in blocks[0][1]
    assert "find_package(emb REQUIRED)" in blocks[1][1]
    assert "emb::emb)" in blocks[1][1]
    assert "-DCMAKE_PREFIX_PATH=$PREFIX" in blocks[2][1]


def test_readme_pkg_config_lines(prefix, tmp_path):
    sh = install_section_blocks()[0][1]
    (tmp_path / "demo.c").write_text(readme_c_example())
    out = run_block(sh, tmp_path, prefix)
    assert out == expected_output()
    libs, runpath = needed(tmp_path / "demo")
    assert "libemb.so.0" in libs
    assert str(prefix / "lib") in ":".join(runpath)


def test_readme_cmake_lines(prefix, tmp_path):
    blocks = install_section_blocks()
    (tmp_path / "demo.c").write_text(readme_c_example())
    (tmp_path / "CMakeLists.txt").write_text(blocks[1][1])
    out = run_block(blocks[2][1], tmp_path, prefix)
    assert out.endswith(expected_output()), out
    libs, _ = needed(tmp_path / "build" / "demo")
    assert "libemb.so.0" in libs  # emb::emb is the shared library


def test_package_targets(prefix, tmp_path):
    """The names beyond the README: each library, the static choice for emb::emb, the CLI."""
    (tmp_path / "main.c").write_text(readme_c_example())
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(consumer C)\n"
        "set(emb_USE_STATIC_LIBS ON)\nfind_package(emb REQUIRED)\n"
        "add_executable(m_static main.c)\ntarget_link_libraries(m_static PRIVATE emb::emb_static)\n"
        "add_executable(m_shared main.c)\ntarget_link_libraries(m_shared PRIVATE emb::emb_shared)\n"
        "add_executable(m_default main.c)\ntarget_link_libraries(m_default PRIVATE emb::emb)\n"
        "foreach(t emb::emb_static emb::emb_shared emb::emb_cli)\n"
        "  get_target_property(type ${t} TYPE)\n  message(STATUS \"TYPE ${t} ${type}\")\n"
        "endforeach()\n"
        "get_target_property(loc emb::emb_cli LOCATION)\nmessage(STATUS \"CLI ${loc}\")\n")
    b = tmp_path / "b"
    conf = run("cmake", "-S", str(tmp_path), "-B", str(b), f"-DCMAKE_PREFIX_PATH={prefix}")
    assert "TYPE emb::emb_static STATIC_LIBRARY" in conf
    assert "TYPE emb::emb_shared SHARED_LIBRARY" in conf
    assert "TYPE emb::emb_cli EXECUTABLE" in conf
    assert f"CLI {prefix}/bin/emb" in conf
    run("cmake", "--build", str(b))
    for exe in ("m_static", "m_shared", "m_default"):
        assert run(str(b / exe)) == expected_output()
    assert "libemb.so.0" in needed(b / "m_shared")[0]
    assert "libemb.so.0" not in needed(b / "m_static")[0]
    assert "libemb.so.0" not in needed(b / "m_default")[0]  # emb_USE_STATIC_LIBS ON
