"""The one --out check and the print every command line shares (issue 24): each refusal says
what is wrong, the check tries the write without leaving anything behind or changing an
existing file, and a name that is not UTF-8 prints as escapes on any stream."""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_lab.numerics.command_line import (THREADS_PER_CPU, check_out_path, echo, max_threads,
                                            printable)


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "old.json").write_text("keep me")
    (tmp_path / "notes.txt").write_text("a file")
    (tmp_path / "run").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "to_run").symlink_to(tmp_path / "run")
    return tmp_path


@pytest.mark.parametrize("name, kind", [
    ("new.json", "file"), ("old.json", "file"), ("to_run/new.json", "file"),
    ("run", "folder"), ("to_run", "folder"), ("new/deeper/run", "folder"), (".", "folder"),
])
def test_a_writable_path_passes_and_nothing_is_left_or_changed(tree, name, kind, monkeypatch):
    monkeypatch.chdir(tree)
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))
    assert check_out_path(str(tree / name) if name != "." else name, kind) is None
    assert sorted(p.relative_to(tree) for p in tree.rglob("*")) == before   # probes removed
    assert (tree / "old.json").read_text() == "keep me"                     # not truncated


@pytest.mark.parametrize("name, kind, words", [
    ("", "file", "expected a path, got '' (an empty name)"),
    ("", "folder", "expected a path, got '' (an empty name; write . for the current folder)"),
    ("a\0b", "file", "expected a path without NUL characters"),
    ("dangling", "file", "a symbolic link to"),
    ("dangling", "folder", "a symbolic link to"),
    ("dangling/run", "folder", "is a symbolic link to"),
    ("run", "file", "expected a file to write, got the folder"),
    ("nowhere/x.json", "file", "expected a file in an existing folder, but"),
    ("notes.txt", "folder", "expected a folder, got"),
    ("notes.txt/run", "folder", "notes.txt' is not a folder"),
    ("/proc/grpo.json", "file", "expected a path outside /proc and /sys"),
    ("/sys/grpo", "folder", "expected a path outside /proc and /sys"),
    ("/dev/null/x", "folder", "cannot write to '/dev/null/x': '/dev/null' is not a folder"),
])
def test_an_unusable_path_says_why(tree, name, kind, words, monkeypatch):
    monkeypatch.chdir(tree)
    problem = check_out_path(name, kind)
    assert problem is not None and words in problem, problem


def test_a_folder_that_refuses_the_write_is_named(tree, monkeypatch):
    """Root passes every permission bit, so the probe's own failure is what is reported."""
    import tempfile

    def refuse(**kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    assert check_out_path(str(tree / "run"), "folder") == \
        f"cannot write to {str(tree / 'run')!r}: Permission denied"


def test_the_kind_is_checked():
    with pytest.raises(ValueError, match="^kind: expected one of"):
        check_out_path("x", "json")
    assert check_out_path(3) == "expected a path (a str), got 3"


@pytest.mark.parametrize("encoding", ["utf-8", "ascii", "latin-1"])
def test_echo_never_raises_on_a_name_that_is_not_utf8(encoding):
    name = os.fsdecode(b"runs/caf\xe9")                           # surrogate-escaped
    stream = io.TextIOWrapper(io.BytesIO(), encoding=encoding)  # strict, like a pipe
    echo("wrote", name, "and \u00e9t\u00e9", file=stream)
    stream.flush()
    text = stream.buffer.getvalue().decode(encoding)
    assert text.startswith("wrote runs/caf\\udce9 and ")
    assert text.endswith("\u00e9t\u00e9\n" if encoding != "ascii" else "\\xe9t\\xe9\n")


def test_printable_takes_bytes_and_paths():
    assert printable(b"caf\xe9") == "caf\\udce9"
    assert printable(os.fsdecode(b"x\xff"), "ascii") == "x\\udcff"


def test_max_threads_is_a_few_per_cpu():
    assert max_threads() == THREADS_PER_CPU * (os.cpu_count() or 1) >= THREADS_PER_CPU


def test_echo_writes_to_stdout_by_default(capsys):
    echo("a", 1, sep="-")
    assert capsys.readouterr().out == "a-1\n"


def test_a_device_passes_and_a_pipe_without_a_reader_is_named_at_once(tmp_path):
    """/dev/stdout resolves into /proc but is named outside it: the JSON goes to the
    terminal. A FIFO nobody reads would block the probe forever; it is refused at once."""
    assert check_out_path("/dev/null") is None and check_out_path("/dev/stdout") is None
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert check_out_path(str(fifo)) == f"cannot write to {str(fifo)!r}: No such device or address"


@pytest.mark.parametrize("command", ["grpo_lab.train", "grpo_lab.bench", "grpo_lab.sweep",
                                     "grpo_lab.deck"])
def test_every_command_helps_and_refuses_on_an_ascii_stream(command, tmp_path):
    """The sweep over the commands: --help, and a refused --out that is not UTF-8, print on
    a strict ASCII stream (the finished runs' own lines: tests/rl/test_cli.py, test_bench)."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONIOENCODING="ascii",
               PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    helped = subprocess.run([sys.executable, "-m", command, "--help"], env=env,
                            capture_output=True, timeout=120)
    assert helped.returncode == 0 and b"--out" in helped.stdout, helped.stderr[-2000:]
    latin1 = os.fsencode(tmp_path) + b"/caf\xe9"                    # a file, not UTF-8
    with open(latin1, "w") as f:
        f.write("a file, not a folder")
    refused = subprocess.run([sys.executable, "-m", command, b"--out=" + latin1 + b"/x"],
                             env=env, capture_output=True, timeout=120)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert b"error: argument --out: " in refused.stderr or b"error: --out: " in refused.stderr
    assert b"caf\\udce9" in refused.stderr and b"Traceback" not in refused.stderr
