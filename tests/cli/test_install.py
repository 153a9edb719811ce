"""`cmake --install` puts the library, headers, emb.pc and the CMake package in place, and a
program builds against them both ways (pkg-config, find_package) and runs."""
import os
import re
import subprocess

BUILD = os.environ["EMB_BUILD_DIR"]
SRC = os.environ["EMB_SOURCE_DIR"]


def readme_example():
    text = open(os.path.join(SRC, "README.md"), encoding="utf-8").read()
    return re.findall(r"```c\n(.*?)```", text, re.S)[0]


def run(*args, **kw):
    return subprocess.run(list(args), check=True, capture_output=True, text=True, **kw)


def test_install_then_build_consumers(tmp_path):
    prefix = tmp_path / "prefix"
    run("cmake", "--install", BUILD, "--prefix", str(prefix))
    libdir = prefix / "lib"
    for f in ["include/emb/emb.h", "include/emb/embedding.h", "lib/libemb.a", "lib/libemb.so",
              "lib/pkgconfig/emb.pc", "lib/cmake/emb/embConfig.cmake", "bin/emb"]:
        assert (prefix / f).exists(), f
    src = tmp_path / "main.c"
    src.write_text(readme_example())
    want = run(str(prefix / "bin" / "emb"), "version").stdout
    assert want.startswith("emb ")

    # pkg-config
    env = dict(os.environ, PKG_CONFIG_PATH=str(libdir / "pkgconfig"))
    flags = run("pkg-config", "--cflags", "--libs", "emb", env=env).stdout.split()
    exe = tmp_path / "via_pc"
    run("cc", str(src), *flags, f"-Wl,-rpath,{libdir}", "-o", str(exe))
    out_pc = run(str(exe)).stdout
    assert out_pc.startswith("tensor([[")

    # CMake package, static and shared targets
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "main.c").write_text(readme_example())
    (proj / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(consumer C)\nfind_package(emb REQUIRED)\n"
        "add_executable(m_static main.c)\ntarget_link_libraries(m_static PRIVATE emb::emb_static)\n"
        "add_executable(m_shared main.c)\ntarget_link_libraries(m_shared PRIVATE emb::emb_shared)\n")
    b = tmp_path / "b"
    run("cmake", "-S", str(proj), "-B", str(b), f"-DCMAKE_PREFIX_PATH={prefix}")
    run("cmake", "--build", str(b))
    assert run(str(b / "m_static")).stdout == out_pc
    assert run(str(b / "m_shared")).stdout == out_pc
