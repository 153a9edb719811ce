"""The layer map of docs/architecture.md holds: every #include under src/, include/emb/,
tools/ and examples/, and every call under src/, points down (or sideways within a layer),
never up, and the modules depend on each other without circles. The page describes the layers, the
modules' face headers and the rules; this test enforces exactly those rules, so a change to
one changes both.

    core -> kernels -> nn -> optim -> (io, text, w2v) -> quant -> (search, formats)
         -> (mpi, tools, examples)

A source's layer is its directory under src/. A public header's layer is the lowest layer
whose sources define the EMB_API functions it declares (from there on it can be included; so
new headers need no entry here); what a file may call is checked function by function (a
call points to a function defined on the caller's layer or below). <emb/emb.h>, the
umbrella of everything, is for tools and examples only. tools/ and examples/ may include emb
only through <emb/...> public headers, plus headers of the programs themselves (under tools/,
such as tools/tour/seed_tour.h, the seed tour library that `emb demo` and the seed examples
link; examples/ may use the tools' headers, tools/ nothing of examples/); never a .c file,
never a private header under src/.

The modules' dependencies form a graph: module A depends on module B when a file of A
includes a header of B (quoted, under src/) or calls (or declares) a function that B
defines. The graph has no circle, sideways dependencies included: io's safetensors reader
does not call back into quant, which reads its files through io.

Inside src/, a module (a directory) keeps its private headers, named *_internal.h, to itself:
no file of another module includes them. A module listed in FACES shows the other modules
exactly its face header(s) and none of its other headers: nn's face is src/nn/nn_face.h, so
optim and quant (and every module above nn) reach nn through it only.

Nothing that core provides is written a second time in a module: threads come from core's
one parallel-for (src/core/parallel.c is the only library file with an OpenMP pragma or
<omp.h>), and the CPU is asked about its features in one place (src/core/cpu.c is the only
one calling __builtin_cpu_supports or cpuid). The benchmark programs under bench/ keep their
own OpenMP loops: they measure baselines (a plain gather, a copy) without emb's machinery.

src/mpi is libemb_mpi, a library of its own linked against libemb's shared library, whose
internal functions are hidden: its files include public headers, system headers (<mpi.h>),
their own headers and the header-only helpers listed in HEADER_ONLY, nothing else of src/.
Its public header include/emb/mpi.h declares its functions with EMB_MPI_API (libemb.so
exports exactly the EMB_API ones).

The checker is run on the real tree, and on small synthetic trees to show that it catches
each kind of violation.
"""
import os
import re

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("EMB_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))

# src/<dir> -> rank. Directories of equal rank may include each other.
LAYERS = {"core": 0, "kernels": 1, "nn": 2, "optim": 3, "io": 4, "text": 4, "w2v": 4,
          "quant": 5, "search": 6, "formats": 6, "mpi": 7}
TOP = 7  # src/mpi, tools/, examples/ (and <emb/emb.h>)
LAYER_NAMES = {0: "core", 1: "kernels", 2: "nn", 3: "optim", 4: "io/text/w2v", 5: "quant",
               6: "search/formats", 7: "mpi/tools/examples"}

# Modules built as libraries of their own over libemb's public API, and the headers of the
# rest of src/ they may include: header-only ones (static inline functions, no symbol of
# libemb), each with its reason.
SEPARATE = {"mpi"}
HEADER_ONLY = {
    "src/kernels/nan_rules.h":
        "an owner sums gradient rows with coalesce()'s NaN rule, which is written there",
    "src/kernels/optim_body.h":
        "SGD's sparse momentum buffer on a sharded table is merged and applied with the "
        "optimizer kernels' own bodies (always-inline, no state), so its bits are libemb's",
    "src/kernels/optim_kernels.h":
        "the argument structs of optim_body.h (declarations only)",
    "src/kernels/bag_body.h":
        "a sharded table's owner sums its rows of the dense EmbeddingBag gradient with the bag "
        "kernels' own group body (always-inline, no state), so its bits are libemb's",
    "src/core/bytes.h":
        "the gathered optimizer state of a sharded table is written and read in the byte codec "
        "and checksum of libemb's formats (docs/optimizer-state.md)",
    "src/w2v/w2v_state.h":
        "the layout of a word2vec run (types only): the distributed trainer reads its tables, "
        "lanes and progress and installs its round hook",
}

# The headers a module shows the other modules, for the modules that have a face; their
# other headers are private to them.
FACES = {"nn": {"src/nn/nn_face.h"}, "io": {"src/io/io_face.h"},
         "quant": {"src/quant/quant_face.h"}}

# Include lines tolerated, each with its reason: (including file, included name) -> reason.
# They are exceptions to the private-header rules only (never to the layer order).
ALLOWED = {}

INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)

# What only one file of core may do: (what, pattern over comment-free code, the file).
BASE_ONLY = [
    ("OpenMP", re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+omp\b|^[ \t]*#[ \t]*include[ \t]*<omp\.h>|"
                          r"\bomp_[a-z_]+\s*\(", re.M), "src/core/parallel.c"),
    ("the CPU probe", re.compile(r"\b__builtin_cpu_(supports|is|init)\b|\b__get_cpuid\w*\b|"
                                 r"\b__cpuid\w*\b|<cpuid\.h>"), "src/core/cpu.c"),
]
API_DECL_RE = re.compile(r"\bEMB_(?:MPI_)?API\b[^;{]*?\b(emb_\w+)\s*\(")
# A function definition (its name), and a call or declaration of a function (its name).
DEF_RE = re.compile(r"(?m)^[A-Za-z_][\w \t\*\n]*?\b(emb_\w+)\s*\(([^;{}]*)\)\s*\{")
CALL_RE = re.compile(r"\b(emb_\w+)\s*\(")
STRING_RE = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')


def _files(root, sub, exts):
    base = os.path.join(root, sub)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for f in sorted(filenames):
            if f.endswith(exts):
                yield os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")


def _read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        return f.read()


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _src_layer(rel):
    """Layer of a path under src/, or None when its directory is not in the map."""
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) >= 3:
        return LAYERS.get(parts[1])
    return None


def definitions(root):
    """{function name: set of the modules under src/ whose files (.c, or .h for inline
    functions) define it}."""
    defined = {}
    for rel in _files(root, "src", (".c", ".h")):
        if _src_layer(rel) is None:
            continue
        for m in DEF_RE.finditer(_strip_comments(_read(root, rel))):
            defined.setdefault(m.group(1), set()).add(_module(rel))
    return defined


def public_header_layers(root):
    """{header name under include/emb: layer}: the lowest layer whose sources define the
    functions the header declares (0 when it declares none of the library's)."""
    defined = definitions(root)
    layers = {}
    for rel in _files(root, "include/emb", (".h",)):
        name = rel[len("include/"):]
        if name == "emb/emb.h":
            layers[name] = TOP
            continue
        decls = API_DECL_RE.findall(_strip_comments(_read(root, rel)))
        found = [LAYERS[m] for d in decls for m in defined.get(d, ())]
        layers[name] = min(found) if found else 0
    return layers


def _resolve_quoted(root, rel, name):
    """The repository path a quoted include names, trying the includer's directory, then
    the library's include directories (src/, src/core/). None if not found."""
    here = os.path.dirname(rel)
    candidates = [os.path.join(here, name)]
    if rel.startswith("src/"):
        candidates += [os.path.join("src", name), os.path.join("src", "core", name)]
    elif rel.startswith(("tools/", "examples/")):
        # the seed tour library's headers, then the examples' own (which tools may not use)
        candidates += [os.path.join("tools", "tour", name), os.path.join("examples", name)]
    for c in candidates:
        c = os.path.normpath(c).replace(os.sep, "/")
        if os.path.isfile(os.path.join(root, c)):
            return c
    return None


def _module(rel):
    """The module (directory under src/) of a path, or None outside src/<module>/."""
    parts = rel.split("/")
    return parts[1] if parts[0] == "src" and len(parts) >= 3 else None


def _private_header_problem(rel, target_rel):
    """Why src file `rel` may not include `target_rel` (another module's private header), or
    None."""
    mine, theirs = _module(rel), _module(target_rel)
    if theirs is None or theirs == mine:
        return None
    if target_rel.endswith("_internal.h"):
        return (f"a private header of src/{theirs} (*_internal.h headers are for the files "
                f"of their own module)")
    if theirs in FACES and target_rel not in FACES[theirs]:
        faces = ", ".join(sorted(FACES[theirs]))
        return f"src/{theirs} shows the other modules only {faces}"
    return None


def check_layers(root):
    """All violations of the layer map under root, as strings."""
    problems = []
    pub = public_header_layers(root)
    private = {rel[len("src/"):] for rel in _files(root, "src", (".h",))}
    private |= {rel[len("src/core/"):] for rel in _files(root, "src/core", (".h",))}

    def layer_of_public(name):
        return pub.get(name)

    targets = []
    for rel in _files(root, "src", (".c", ".h")):
        targets.append((rel, _src_layer(rel)))
    for rel in _files(root, "include/emb", (".h",)):
        targets.append((rel, pub[rel[len("include/"):]]))
    for sub in ("tools", "examples"):
        for rel in _files(root, sub, (".c", ".h")):
            targets.append((rel, TOP))

    for rel, layer in targets:
        if layer is None:
            problems.append(f"{rel}: src/{rel.split('/')[1]} is not in the layer map "
                            f"(tests/cli/test_layers.py LAYERS)")
            continue
        app = rel.startswith(("tools/", "examples/"))
        text = _strip_comments(_read(root, rel))
        for m in INCLUDE_RE.finditer(text):
            kind, name = m.group(1), m.group(2)
            line = text[: m.start()].count("\n") + 1
            where = f"{rel}:{line}: #include {kind}{name}{'>' if kind == '<' else kind}"
            if name.endswith(".c"):
                problems.append(f"{where}: includes a .c file")
                continue
            if kind == "<":
                if name.startswith("emb/"):
                    target = layer_of_public(name)
                    if target is None:
                        problems.append(f"{where}: no such public header include/{name}")
                    elif target > layer:
                        problems.append(f"{where}: upward include ({LAYER_NAMES[layer]} -> "
                                        f"{LAYER_NAMES[target]})")
                elif app and name in private:
                    problems.append(f"{where}: a private header of src/ (tools and examples "
                                    f"use <emb/...> only)")
                continue
            # quoted
            if rel.startswith("include/"):
                target_rel = _resolve_quoted(root, rel, name)
                tname = target_rel[len("include/"):] if target_rel else None
                if not tname or tname not in pub:
                    problems.append(f"{where}: a public header may include only public headers")
                elif pub[tname] > layer:
                    problems.append(f"{where}: upward include ({LAYER_NAMES[layer]} -> "
                                    f"{LAYER_NAMES[pub[tname]]})")
                continue
            target_rel = _resolve_quoted(root, rel, name)
            if app:
                if target_rel is None or not target_rel.startswith(("tools/", "examples/")):
                    problems.append(f"{where}: tools and examples include emb only through "
                                    f"<emb/...> (and headers of the programs themselves)")
                elif rel.startswith("tools/") and target_rel.startswith("examples/"):
                    problems.append(f"{where}: the tools include nothing of examples/ "
                                    f"(the programs they share live under tools/)")
                continue
            if target_rel is None:
                problems.append(f"{where}: cannot resolve (quoted includes under src/ must "
                                f"name a file of the tree)")
                continue
            mod = _module(rel)
            if (mod in SEPARATE and _module(target_rel) != mod and
                    not target_rel.startswith("include/") and target_rel not in HEADER_ONLY):
                problems.append(f"{where}: src/{mod} is a library of its own over libemb's "
                                f"public API (<emb/...>, its own headers, and the header-only "
                                f"ones in HEADER_ONLY)")
                continue
            why = _private_header_problem(rel, target_rel)
            if why and (rel, name) not in ALLOWED:
                problems.append(f"{where}: {why}")
            if target_rel.startswith("include/"):
                tname = target_rel[len("include/"):]
                target = pub.get(tname, TOP)
            else:
                target = _src_layer(target_rel)
                if target is None:
                    problems.append(f"{where}: includes a file outside the layer map")
                    continue
            if target > layer:
                problems.append(f"{where}: upward include ({LAYER_NAMES[layer]} -> "
                                f"{LAYER_NAMES[target]})")
    problems += check_calls(root)
    return problems


def _code(root, rel):
    """A file's code without comments and string literals."""
    return STRING_RE.sub('""', _strip_comments(_read(root, rel)))


def module_dependencies(root, defined=None):
    """{(module, module it depends on): [the first reason, as "file: what"]}: the quoted
    includes of another module's headers and the calls (or declarations) of functions
    another module defines, over src/."""
    defined = definitions(root) if defined is None else defined
    deps = {}
    for rel in _files(root, "src", (".c", ".h")):
        mine = _module(rel)
        if _src_layer(rel) is None:
            continue
        text = _strip_comments(_read(root, rel))
        for m in INCLUDE_RE.finditer(text):
            if m.group(1) != '"':
                continue
            target = _resolve_quoted(root, rel, m.group(2))
            theirs = _module(target) if target else None
            if theirs and theirs != mine:
                deps.setdefault((mine, theirs), f"{rel}: #include \"{m.group(2)}\"")
        for m in CALL_RE.finditer(STRING_RE.sub('""', text)):
            owners = defined.get(m.group(1), set())
            if mine in owners:
                continue
            for theirs in sorted(owners):
                deps.setdefault((mine, theirs), f"{rel}: {m.group(1)}()")
    return deps


def find_cycle(edges):
    """A circle in the directed graph `edges` (pairs), as the list of its nodes with the
    first one repeated at the end, or None."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    state = {}  # 1: on the current path, 2: done

    def visit(node, path):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, path)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def check_calls(root):
    """Calls that point up (to a function defined only on a higher layer) and circles
    between modules, as strings."""
    problems = []
    defined = definitions(root)
    for rel in _files(root, "src", (".c", ".h")):
        layer = _src_layer(rel)
        if layer is None:
            continue
        text = _code(root, rel)
        for m in CALL_RE.finditer(text):
            owners = defined.get(m.group(1), set())
            if not owners or _module(rel) in owners:
                continue
            lowest = min(LAYERS[o] for o in owners)
            if lowest > layer:
                line = text[: m.start()].count("\n") + 1
                problems.append(f"{rel}:{line}: {m.group(1)}(): upward call ({LAYER_NAMES[layer]} "
                                f"-> {LAYER_NAMES[lowest]})")
    deps = module_dependencies(root, defined)
    cycle = find_cycle(deps)
    if cycle:
        steps = [f"{a} -> {b} ({deps[(a, b)]})" for a, b in zip(cycle, cycle[1:])]
        problems.append("modules depend on each other in a circle: " + "; ".join(steps))
    return problems


def check_base_only(root):
    """Files of the library (src/, include/, tools/, examples/) doing what only one file of
    core may do (BASE_ONLY), as strings."""
    problems = []
    for sub in ("src", "include", "tools", "examples"):
        for rel in _files(root, sub, (".c", ".h")):
            text = _strip_comments(_read(root, rel))
            for what, pattern, owner in BASE_ONLY:
                m = pattern.search(text)
                if m and rel != owner:
                    line = text[: m.start()].count("\n") + 1
                    problems.append(f"{rel}:{line}: {m.group(0).strip()}: {what} belongs to "
                                    f"{owner} only")
    return problems


# ---- room sizes ----------------------------------------------------------------------------

# A library file (src/, and python/src/ of the extension module) holds at most MAX_FILE_LINES lines and a function at most
# MAX_FUNCTION_LINES, unless listed here with its reason: (file, function or None for the
# file) -> reason. An entry that is no longer over its limit fails the test (remove it).
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120
ROOMS = {}

# A function definition at the start of a line: its name, then its body up to the first "}"
# alone on a line.
FUNCTION_RE = re.compile(r"(?m)^(?![ \t#])[A-Za-z_][\w \t\*\n,()]*?\b(\w+)\s*\(([^;{}]*)\)\s*"
                         r"\{[ \t]*$")


def room_sizes(root):
    """[(file, function or None, lines)] of the library's files and functions over their
    limits."""
    big = []
    for rel in [*_files(root, "src", (".c", ".h")), *_files(root, "python/src", (".c", ".h"))]:
        text = _read(root, rel)
        n = text.count("\n")
        if n > MAX_FILE_LINES:
            big.append((rel, None, n))
        lines = text.split("\n")
        for m in FUNCTION_RE.finditer(text):
            first = text[: m.start()].count("\n")
            end = text[: m.end()].count("\n")
            while end < len(lines) and lines[end] != "}":
                end += 1
            if end - first + 1 > MAX_FUNCTION_LINES:
                big.append((rel, m.group(1), end - first + 1))
    return big


def test_rooms_are_small():
    big = room_sizes(SOURCE_DIR)
    over = [f"{rel}{': ' + fn + '()' if fn else ''}: {n} lines" for rel, fn, n in big
            if (rel, fn) not in ROOMS]
    assert not over, (f"over {MAX_FILE_LINES} lines a file or {MAX_FUNCTION_LINES} a function "
                      f"(split it, or list it in ROOMS with the reason):\n  " + "\n  ".join(over))
    stale = [key for key in ROOMS if key not in {(rel, fn) for rel, fn, _ in big}]
    assert not stale, f"no longer over the limit, remove from ROOMS: {stale}"


def test_room_checker_measures(tmp_path):
    body = "".join(f"    x += {i};\n" for i in range(MAX_FUNCTION_LINES))
    files = {"src/nn/small.c": "static int f(int x) {\n    return x;\n}\n",
             "src/nn/long_fn.c": "int\nemb__long(int x,\n          int y)\n{\n" + body + "    return x;\n}\n"
                                 "static int after(void) {\n    return 0;\n}\n",
             "src/io/big.c": "int v;\n" * (MAX_FILE_LINES + 1),
             "python/src/py_big.c": "int w;\n" * (MAX_FILE_LINES + 1)}
    big = room_sizes(_tree(tmp_path, files))
    assert ("src/nn/long_fn.c", "emb__long", MAX_FUNCTION_LINES + 6) in big, big
    assert ("src/io/big.c", None, MAX_FILE_LINES + 1) in big, big
    assert ("python/src/py_big.c", None, MAX_FILE_LINES + 1) in big, big
    assert len(big) == 3, big


def test_one_parallel_for_and_one_cpu_probe():
    problems = check_base_only(SOURCE_DIR)
    assert not problems, "core's base written again:\n  " + "\n  ".join(problems)
    for _, _, owner in BASE_ONLY:  # the owners exist and do it (the rule is not vacuous)
        assert os.path.isfile(os.path.join(SOURCE_DIR, owner)), owner


@pytest.mark.parametrize("rel,text,needle", [
    ("src/nn/x.c", "#ifdef _OPENMP\n#pragma omp parallel for\n#endif\n", "OpenMP"),
    ("src/kernels/x.c", "  #  pragma omp task\n", "OpenMP"),
    ("src/search/x.c", "#include <omp.h>\n", "OpenMP"),
    ("src/w2v/x.c", "int t = omp_get_thread_num();\n", "OpenMP"),
    ("tools/emb/x.c", "#pragma omp parallel\n", "OpenMP"),
    ("src/core/status.c", "#pragma omp single\n", "OpenMP"),
    ("src/kernels/x.c", "if (__builtin_cpu_supports(\"avx2\")) {}\n", "CPU probe"),
    ("src/quant/x.c", "#include <cpuid.h>\n", "CPU probe"),
    ("src/quant/x.c", "__get_cpuid(1, &a, &b, &c, &d);\n", "CPU probe"),
])
def test_base_checker_catches(tmp_path, rel, text, needle):
    files = {"src/core/parallel.c": "#include <omp.h>\n#pragma omp parallel\n",
             "src/core/cpu.c": "#include <cpuid.h>\nint f(void) { "
                               "return __builtin_cpu_supports(\"avx2\"); }\n",
             "src/nn/ok.c": "/* #pragma omp in a comment, __builtin_cpu_supports too */\n",
             rel: text}
    problems = check_base_only(_tree(tmp_path, files))
    assert len(problems) == 1 and rel in problems[0] and needle in problems[0], problems


def test_tree_respects_layer_map():
    problems = check_layers(SOURCE_DIR)
    assert not problems, "layer map violations:\n  " + "\n  ".join(problems)


def _quoted_includes(root, module):
    """The repository paths that the quoted includes of src/<module>'s files resolve to."""
    out = []
    for rel in _files(root, f"src/{module}", (".c", ".h")):
        for m in INCLUDE_RE.finditer(_strip_comments(_read(root, rel))):
            if m.group(1) == '"':
                out.append(_resolve_quoted(root, rel, m.group(2)))
    return out


def test_optim_and_quant_reach_nn_through_its_face():
    for module in ("optim", "quant"):
        nn = {t for t in _quoted_includes(SOURCE_DIR, module) if t and t.startswith("src/nn/")}
        assert nn == {"src/nn/nn_face.h"}, f"src/{module} includes these nn headers: {nn}"


def test_allowed_crossings_are_still_there():
    """An exception that is no longer needed leaves ALLOWED."""
    for rel, name in ALLOWED:
        text = _strip_comments(_read(SOURCE_DIR, rel))
        assert any(m.group(2) == name for m in INCLUDE_RE.finditer(text)), \
            f"{rel} no longer includes {name}: remove the entry from ALLOWED"


def test_architecture_page_matches_the_map():
    """docs/architecture.md's layer table is LAYERS, and it names every face and exception."""
    with open(os.path.join(SOURCE_DIR, "docs", "architecture.md"), encoding="utf-8") as f:
        page = f.read()
    table = {m.group(2): int(m.group(1))
             for m in re.finditer(r"(?m)^\| (\d) \| `src/(\w+)` \|", page)}
    assert table == LAYERS, f"docs/architecture.md's layers {table} != LAYERS {LAYERS}"
    assert re.search(rf"(?m)^\| {TOP} \| `tools/emb`, `examples/` \|", page)
    for faces in FACES.values():
        for face in faces:
            assert f"`{face}`" in page, f"docs/architecture.md does not name the face {face}"
    for rel, name in ALLOWED:
        assert f"`{rel}`" in page and name in page, \
            f"docs/architecture.md does not describe the exception {rel} -> {name}"
    assert f"{MAX_FILE_LINES} lines" in page and f"function over {MAX_FUNCTION_LINES}" in page
    for rel, fn in ROOMS:
        assert f"`{rel}`" in page, f"docs/architecture.md does not name the large room {rel}"


def test_public_header_layers():
    pub = public_header_layers(SOURCE_DIR)
    assert pub["emb/core.h"] == 0
    assert pub["emb/embedding.h"] == LAYERS["nn"]
    assert pub["emb/optim.h"] == LAYERS["optim"]
    assert pub["emb/emb.h"] == TOP
    assert pub["emb/mpi.h"] == LAYERS["mpi"]


# ---- the checker catches each kind of violation ---------------------------------------

def _tree(tmp_path, files):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(tmp_path)


BASE = {
    "include/emb/core.h": "EMB_API int emb_version_number(void);\n",
    "include/emb/embedding.h": '#include "core.h"\nEMB_API int emb_embedding_embedding_dim(void);\n',
    "include/emb/optim.h": '#include "embedding.h"\nEMB_API int emb_optimizer_x(void);\n',
    "include/emb/emb.h": '#include "core.h"\n#include "embedding.h"\n#include "optim.h"\n',
    "src/core/internal.h": "#include <emb/core.h>\n",
    "src/core/status.c": '#include "internal.h"\nint emb_version_number(void) { return 1; }\n',
    "src/kernels/backward.h": "#include <stdint.h>\n",
    "src/kernels/backward_ref.c": '#include "backward.h"\n#include "internal.h"\n',
    "src/nn/embedding.c": '#include "internal.h"\n#include <emb/embedding.h>\n'
                          '#include "kernels/backward.h"\n#include "embedding_internal.h"\n'
                          'int emb_embedding_embedding_dim(void) { return 2; }\n',
    "src/nn/embedding_internal.h": '#include "nn_face.h"\n',
    "src/nn/nn_face.h": "#include <emb/embedding.h>\n",
    "src/nn/extra.h": "#include <emb/embedding.h>\n",
    "src/optim/optimizer.c": '#include <emb/optim.h>\n#include "nn/nn_face.h"\n'
                             '#include "optim_internal.h"\n'
                             "int\nemb_optimizer_x(void)\n{\n    return 3;\n}\n",
    "src/optim/optim_internal.h": "\n",
    "src/io/io_internal.h": '#include "io_face.h"\n',
    "src/io/io_face.h": "int emb__read_table(void);\n",
    "src/io/reader.c": '#include "io_internal.h"\nint emb__read_table(void) { return 0; }\n',
    "src/quant/qfile.c": '#include "io/io_face.h"\n'
                         "int emb__qread(void) { return emb__read_table(); }\n",
    "src/formats/vectors.c": '#include "io/io_face.h"\n'
                             "int f(void) { return emb__qread() + emb__read_table(); }\n",
    "include/emb/mpi.h": "#include <mpi.h>\n#include \"optim.h\"\nEMB_MPI_API int emb_mpi_x(void);\n",
    "src/mpi/table.c": '#include <emb/mpi.h>\n#include "mpi_internal.h"\n'
                       '#include "kernels/nan_rules.h"\nint emb_mpi_x(void) { return 4; }\n',
    "src/mpi/mpi_internal.h": "#include <emb/mpi.h>\n",
    "src/kernels/nan_rules.h": "\n",
    "tools/emb/main.c": "#include <emb/emb.h>\n#include <stdio.h>\n#include \"cli.h\"\n"
                        "#include \"tour.h\"\n",
    "tools/emb/cli.h": "#include <emb/core.h>\n",
    "tools/tour/tour.h": "#include <emb/emb.h>\n",
    "examples/demo.c": "#include <emb/emb.h>\n#include \"tour.h\"\n#include \"ex.h\"\n",
    "examples/ex.h": "#include <emb/emb.h>\n",
}


def test_checker_accepts_clean_tree(tmp_path):
    assert check_layers(_tree(tmp_path, BASE)) == []


@pytest.mark.parametrize("rel,text,needle", [
    ("src/core/internal.h", "#include <emb/emb.h>\n", "upward include (core -> mpi/tools/examples)"),
    ("src/core/internal.h", "#include <emb/embedding.h>\n", "upward include (core -> nn)"),
    ("src/kernels/backward.h", "#include <emb/embedding.h>\n", "upward include (kernels -> nn)"),
    ("src/kernels/backward_ref.c", '#include "nn/nn_face.h"\n', "upward include (kernels -> nn)"),
    ("src/nn/nn_face.h", '#include "optim/x.h"\n', "cannot resolve"),
    ("src/nn/embedding.c", '#include "../optim/optimizer.c"\n', "includes a .c file"),
    ("include/emb/core.h", '#include "embedding.h"\n', "upward include (core -> nn)"),
    ("include/emb/core.h", '#include "../../src/core/internal.h"\n', "only public headers"),
    ("tools/emb/main.c", '#include "../../examples/demo.c"\n', "includes a .c file"),
    ("tools/emb/main.c", '#include "../../src/core/internal.h"\n', "through <emb/...>"),
    ("tools/emb/main.c", '#include "kernels/backward.h"\n', "through <emb/...>"),
    ("examples/demo.c", "#include <internal.h>\n", "a private header of src/"),
    ("src/misc/x.c", "int x;\n", "not in the layer map"),
    # libemb_mpi sees libemb's public API only
    ("src/mpi/table.c", '#include "internal.h"\n', "src/mpi is a library of its own"),
    ("src/mpi/table.c", '#include "nn/nn_face.h"\n', "src/mpi is a library of its own"),
    ("src/mpi/table.c", '#include "kernels/backward.h"\n', "src/mpi is a library of its own"),
    ("src/optim/optimizer.c", "#include <emb/mpi.h>\n", "upward include (optim -> mpi"),
    # private headers
    ("src/optim/optimizer.c", '#include "nn/embedding_internal.h"\n',
     "a private header of src/nn"),
    ("src/quant/qtable.c", '#include "nn/embedding_internal.h"\n', "a private header of src/nn"),
    ("src/optim/optimizer.c", '#include "nn/extra.h"\n',
     "src/nn shows the other modules only src/nn/nn_face.h"),
    ("src/quant/qtable.c", '#include "io/io_internal.h"\n', "a private header of src/io"),
    ("src/w2v/trainer.c", '#include "optim/optim_internal.h"\n', "a private header of src/optim"),
    ("src/nn/one_hot.c", '#include "../optim/optim_internal.h"\n', "a private header of src/optim"),
    ("src/formats/vectors.c", '#include "io/io_internal.h"\n', "a private header of src/io"),
    ("src/quant/qtable.c", '#include "io/reader.h"\n',
     "src/io shows the other modules only src/io/io_face.h"),
    # the tools use nothing of examples/
    ("tools/emb/main.c", '#include "ex.h"\n', "the tools include nothing of examples/"),
    # calls point down
    ("src/io/reader.c", "int g(void) { return emb__qread(); }\n",
     "emb__qread(): upward call (io/text/w2v -> quant)"),
    ("src/io/io_face.h", "int emb__qread(void);\n", "emb__qread(): upward call"),
    ("src/nn/embedding.c", "int h(void) { return emb_optimizer_x(); }\n",
     "emb_optimizer_x(): upward call (nn -> optim)"),
    # circles, sideways too
    ("src/text/vocab.c", "int v(void) { return emb__read_table(); }\n"
                         "int emb_vocab_n(void) { return 1; }\n", "in a circle"),
])
def test_checker_catches(tmp_path, rel, text, needle):
    files = dict(BASE)
    if rel == "src/quant/qtable.c" and "reader.h" in text:
        files["src/io/reader.h"] = "\n"
    if rel == "src/text/vocab.c":  # io calls text, text calls io
        files["src/io/reader.c"] += "int w(void) { return emb_vocab_n(); }\n"
    files[rel] = files.get(rel, "") + text
    if rel == "src/nn/nn_face.h":
        files["src/optim/x.h"] = "\n"
        files[rel] = '#include "optim/x.h"\n'  # resolvable from src/: an upward include
        needle = "upward include (nn -> optim)"
    problems = check_layers(_tree(tmp_path, files))
    assert any(needle in p for p in problems), problems


def test_checker_ignores_strings_and_comments(tmp_path):
    files = dict(BASE)
    files["src/io/reader.c"] += ('const char *m = "see emb__qread() in quant";\n'
                                 "/* emb__qread() */\n// emb_optimizer_x()\n")
    assert check_layers(_tree(tmp_path, files)) == []


def test_find_cycle():
    assert find_cycle([("a", "b"), ("b", "c")]) is None
    assert find_cycle([("a", "b"), ("b", "c"), ("a", "c")]) is None
    assert find_cycle([("a", "b"), ("b", "c"), ("c", "a")]) == ["a", "b", "c", "a"]
    assert find_cycle([("x", "y"), ("y", "x"), ("a", "x")]) in (["x", "y", "x"], ["y", "x", "y"])
    assert find_cycle([("a", "a")]) == ["a", "a"]


def test_no_circle_between_modules():
    deps = module_dependencies(SOURCE_DIR)
    cycle = find_cycle(deps)
    assert cycle is None, f"modules in a circle: {cycle}"
    # the graph is not empty: io's face is used by quant and formats, quant's by formats
    for edge in [("quant", "io"), ("formats", "io"), ("formats", "quant"), ("optim", "nn")]:
        assert edge in deps, f"{edge} missing from {sorted(deps)}"
    assert ("io", "quant") not in deps, deps[("io", "quant")]


def test_checker_public_layer_follows_definitions(tmp_path):
    """A header whose functions are defined in optim is an optim header: nn may not use it."""
    files = dict(BASE)
    files["include/emb/sched.h"] = "EMB_API int emb_sched(void);\n"
    files["src/optim/sched.c"] = "int emb_sched(void) { return 0; }\n"
    files["src/nn/embedding.c"] += "#include <emb/sched.h>\n"
    problems = check_layers(_tree(tmp_path, files))
    assert any("src/nn/embedding.c" in p and "nn -> optim" in p for p in problems), problems
