"""The rules every `emb` command follows (tools/emb/cli.h), checked on every command that
`emb --help` lists, so that a new command is covered as soon as it is in the table:

- `emb help CMD`, `emb CMD --help` and `emb CMD -h` print the same help on stdout, exit 0;
- an unknown option, an option given a value it does not take, and an unexpected argument
  are usage errors: exit 2, nothing on stdout, ONE line on stderr naming the problem and
  pointing to `--help`;
- a write error on stdout gives a non-zero exit status and a message;
- no arguments: the usage on stderr, exit 2; `emb`, `emb help`, `emb --help`: on stdout,
  exit 0; `emb --version`.
"""
import os
import re

import pytest

from conftest import EMB_BIN, header_version, run

ONE_LINE_USAGE_ERROR = r"emb{cmd}: {what} \(see 'emb{cmd} --help'\)\n"


def _usage_error(r, cmd, what):
    """r failed as a usage error of `cmd` ("" for emb itself) whose message is `what` (a
    regex)."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""
    pattern = ONE_LINE_USAGE_ERROR.format(cmd=f" {cmd}" if cmd else "", what=what)
    assert re.fullmatch(pattern, r.stderr), r.stderr


def _commands():
    """The commands `emb --help` lists, with their summaries."""
    r = run([EMB_BIN, "--help"])
    assert r.returncode == 0, r.stderr
    block = r.stdout.split("\ncommands:\n", 1)[1].split("\n\n", 1)[0]
    cmds = re.findall(r"(?m)^  ([a-z][a-z0-9-]*)  +(\S[^\n]*)$", block)
    assert cmds, r.stdout
    return cmds


COMMANDS = [name for name, _ in _commands()] if os.path.exists(EMB_BIN) else []


# ---- emb itself ----

def test_no_arguments_is_a_usage_error_with_the_usage_on_stderr(emb_bin):
    r = run([emb_bin])
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.startswith("usage: emb <command>")
    assert r.stderr == run([emb_bin, "--help"]).stdout


@pytest.mark.parametrize("args", [["help"], ["--help"], ["-h"]])
def test_usage_on_stdout(emb_bin, args):
    r = run([emb_bin, *args])
    assert r.returncode == 0
    assert r.stderr == ""
    assert r.stdout.startswith("usage: emb <command> [options] [arguments]\n")
    assert "emb help <command>" in r.stdout
    assert "emb --version" in r.stdout


def test_usage_lists_every_command_with_a_summary(emb_bin):
    cmds = dict(_commands())
    for name in ("demo", "help", "version"):
        assert name in cmds
    for name, summary in cmds.items():
        assert len(summary) > 10 and not summary.endswith("."), (name, summary)


@pytest.mark.parametrize("args", [["version"], ["--version"]])
def test_version(emb_bin, args):
    r = run([emb_bin, *args])
    assert r.returncode == 0
    assert r.stdout == f"emb {header_version()}\n"
    assert r.stderr == ""


@pytest.mark.parametrize("args, what", [
    (["frobnicate"], "unknown command 'frobnicate'"),
    (["Demo"], "unknown command 'Demo'"),
    (["--frobnicate"], "unknown option '--frobnicate'"),
    (["-x", "demo"], "unknown option '-x'"),
    (["help", "frobnicate"], "unknown command 'frobnicate'"),
])
def test_unknown_command_or_global_option(emb_bin, args, what):
    _usage_error(run([emb_bin, *args]), "", re.escape(what))


@pytest.mark.parametrize("args, cmd, what", [
    (["version", "extra"], "version", "unexpected argument 'extra'"),
    (["--version", "extra"], "version", "unexpected argument 'extra'"),
    (["help", "demo", "extra"], "help", "unexpected argument 'extra'"),
    (["--help", "demo", "extra"], "help", "unexpected argument 'extra'"),
])
def test_extra_arguments(emb_bin, args, cmd, what):
    _usage_error(run([emb_bin, *args]), cmd, re.escape(what))


def test_help_of_a_command_through_the_global_option(emb_bin):
    assert run([emb_bin, "--help", "demo"]).stdout == run([emb_bin, "demo", "--help"]).stdout


# ---- every command ----

@pytest.mark.parametrize("cmd", COMMANDS)
def test_help_of_every_command(emb_bin, cmd):
    ref = run([emb_bin, "help", cmd])
    assert ref.returncode == 0
    assert ref.stderr == ""
    assert ref.stdout.startswith(f"usage: emb {cmd}")
    assert ref.stdout.endswith("\n")
    # A real help text, not a usage line: a description after the usage lines.
    assert len(ref.stdout.splitlines()) >= 3
    for args in ([cmd, "--help"], [cmd, "-h"], [cmd, "-help"]):
        r = run([emb_bin, *args])
        assert (r.returncode, r.stdout, r.stderr) == (0, ref.stdout, ""), args


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("opt", ["--no-such-option", "-Q", "--no-such-option=3"])
def test_every_command_rejects_unknown_options(emb_bin, cmd, opt):
    spelled = opt.split("=")[0]
    _usage_error(run([emb_bin, cmd, opt]), cmd, re.escape(f"unknown option '{spelled}'"))


@pytest.mark.parametrize("cmd", COMMANDS)
def test_help_takes_no_value(emb_bin, cmd):
    _usage_error(run([emb_bin, cmd, "--help=yes"]), cmd, re.escape("--help takes no value"))


@pytest.mark.parametrize("cmd", COMMANDS)
def test_an_error_before_help_wins(emb_bin, cmd):
    """Options are read left to right: an unknown option before --help is reported."""
    _usage_error(run([emb_bin, cmd, "--no-such-option", "--help"]), cmd,
                 re.escape("unknown option '--no-such-option'"))


@pytest.mark.parametrize("args", [["--help"], ["help"], ["help", "demo"], ["demo", "--help"],
                                  ["--version"], ["demo", "000"]])
def test_write_error_on_stdout(emb_bin, args):
    with open("/dev/full", "w") as full:
        r = run([emb_bin, *args], stdout=full)
    assert r.returncode == 1
    assert re.fullmatch(r"emb: [^\n]+: No space left on device\n", r.stderr), r.stderr


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("form", ["option", "command"])
def test_write_error_on_stdout_of_every_help(emb_bin, cmd, form):
    args = [cmd, "--help"] if form == "option" else ["help", cmd]
    with open("/dev/full", "w") as full:
        r = run([emb_bin, *args], stdout=full)
    assert r.returncode == 1
    assert r.stderr == "emb: error writing standard output: No space left on device\n"


def test_closed_stdout_is_a_write_error(emb_bin):
    """With stdout closed (>&-), printing fails: a non-zero exit, not silence."""
    r = run(["/bin/sh", "-c", f"'{emb_bin}' --version >&-"])
    assert r.returncode == 1
    assert r.stderr.startswith("emb: error writing standard output: ")


# A table whose words look like options: after `--` every argument is an operand, a second
# `--` included, so that any word can be asked for.
DASH_WORDS = "4 2\n-- 1 0\nking 0.75 0.25\n-k 0 1\nx 0.5 0.5\n"


@pytest.mark.parametrize("args, out", [
    (["lookup", "--raw", "{f}", "--", "--", "-k"], "-- 1 0\n-k 0 1\n"),
    (["lookup", "--raw", "--", "{f}", "--"], "-- 1 0\n"),
    (["lookup", "--raw", "{f}", "king", "--", "--"], "king 0.75 0.25\n-- 1 0\n"),
    (["nn", "-k", "1", "{f}", "--", "--"], "king "),
    (["nn", "{f}", "-k", "1", "--", "-k"], "x "),
    (["most-similar", "-k", "1", "{f}", "--", "--"], "king "),
    (["similarity", "{f}", "--", "--", "-k"], "0\n"),
    (["doesnt-match", "{f}", "--", "--", "king", "-k"], "-k\n"),
    (["analogy", "-k", "1", "{f}", "--", "king", "--", "x"], "-k "),
])
def test_words_after_double_dash(emb_bin, tmp_path, args, out):
    f = tmp_path / "dash.txt"
    f.write_text(DASH_WORDS)
    r = run([emb_bin] + [a.replace("{f}", str(f)) for a in args])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(out), r.stdout
    assert r.stderr == ""
