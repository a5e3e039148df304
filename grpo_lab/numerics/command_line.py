"""What every command line shares: the one check of a path it will write (every ``--out``),
the most threads it takes, and printing that never fails.

Used by ``python -m grpo_lab.bench`` (a JSON file) and ``python -m grpo_lab.train`` (a folder);
validation at the door, like :mod:`grpo_lab.numerics.validate` for arrays.

:func:`check_out_path` says what is wrong with a path before any work, or None. It does not
trust the permission bits alone: ``os.access`` says yes to root for any folder, /proc included,
and the write fails minutes later. So it tries: it opens an existing file for writing (without
truncating it) or creates and removes a probe, and it refuses the kernel's virtual file
systems, whose "files" take writes as commands.

:func:`echo` is ``print`` for text that may name such a path: a name that is not UTF-8 arrives
in ``sys.argv`` with surrogate escapes, and a stream whose encoding cannot show a character
(``PYTHONIOENCODING=ascii``, a C locale) would raise UnicodeEncodeError at the last line of a
finished run. It writes what the stream cannot show as a backslash escape instead.
"""

from __future__ import annotations

import os
import sys
import tempfile

__all__ = ["THREADS_PER_CPU", "VIRTUAL_ROOTS", "check_out_path", "echo", "max_threads",
           "printable"]

#: The most threads per CPU a command takes: past a few per core, threads only wait for each
#: other (and a million of them exhaust the memory maps before the first step).
THREADS_PER_CPU = 4

#: Where the kernel's virtual file systems live: a write there is a command, not a file.
VIRTUAL_ROOTS = ("/proc", "/sys")

KINDS = ("file", "folder")


def printable(text, encoding="utf-8") -> str:
    """``text`` (a str or a path) with whatever ``encoding`` cannot write as backslash escapes.

    >>> printable("runs/caf\\udce9")      # the byte 0xe9 of a Latin-1 name, surrogate-escaped
    'runs/caf\\\\udce9'
    >>> printable("caf\\u00e9", "ascii")
    'caf\\\\xe9'
    """
    text = os.fsdecode(text) if isinstance(text, (bytes, os.PathLike)) else str(text)
    return text.encode(encoding, "backslashreplace").decode(encoding)


def echo(*values, sep=" ", end="\n", file=None, flush=False) -> None:
    """``print``, except that what ``file``'s encoding cannot show is written as a backslash
    escape (lone surrogates included), never a UnicodeEncodeError."""
    stream = sys.stdout if file is None else file
    encoding = getattr(stream, "encoding", None) or "utf-8"
    print(printable(sep.join(str(v) for v in values), encoding), end=end, file=stream,
          flush=flush)


def max_threads() -> int:
    """The largest ``--threads`` a command accepts: :data:`THREADS_PER_CPU` per CPU."""
    return THREADS_PER_CPU * (os.cpu_count() or 1)


def _probe_folder(folder):
    """Create and remove a file in ``folder``; the OSError if that fails."""
    fd, probe = tempfile.mkstemp(dir=folder, prefix=".grpo_lab-write-probe-")
    os.close(fd)
    os.unlink(probe)


def _probe_file(path):
    """Open ``path`` for writing without changing it (an existing file is not truncated; a new
    one is created and removed); the OSError if that fails."""
    if os.path.exists(path):            # O_NONBLOCK: a pipe with no reader says so at once
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK))
    else:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(path)


def check_out_path(path, kind="file"):
    """What is wrong with ``path`` as the file or folder (``kind``) a command will write, or
    None when it can be written.

    ==========  =========================================================================
    path        refused when
    ==========  =========================================================================
    any kind    empty; holding a NUL; a symbolic link to nothing; under /proc or /sys;
                not writable when tried
    "file"      a folder; in a folder that does not exist
    "folder"    an existing file; below a file (``notes.txt/run``)
    ==========  =========================================================================

    A folder that does not exist yet is fine when its nearest existing parent is a folder
    this process can write in (the command creates it). The messages quote the path with
    ``repr``, so a name that is not UTF-8 prints as escapes.

    >>> check_out_path("")
    "expected a path, got '' (an empty name)"
    >>> check_out_path("/proc/run.json")
    "expected a path outside /proc and /sys (the kernel's virtual file systems, where a write \
is a command to the kernel), got '/proc/run.json'"
    """
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")
    if not isinstance(path, (str, os.PathLike)):
        return f"expected a path (a str), got {path!r}"
    path = os.fsdecode(path)
    if path == "":
        return ("expected a path, got '' (an empty name"
                + ("; write . for the current folder)" if kind == "folder" else ")"))
    if "\0" in path:
        return f"expected a path without NUL characters, got {path!r}"
    if os.path.islink(path) and not os.path.exists(path):
        return (f"expected a path that exists or can be created, got {path!r}, a symbolic "
                f"link to {os.readlink(path)!r}, which does not exist")
    named = os.path.abspath(path)       # as named: /dev/stdout resolves into /proc, and works
    if any(named == root or named.startswith(root + "/") for root in VIRTUAL_ROOTS):
        return (f"expected a path outside /proc and /sys (the kernel's virtual file systems, "
                f"where a write is a command to the kernel), got {path!r}")
    try:
        if kind == "file":
            if os.path.isdir(path):
                return f"expected a file to write, got the folder {path!r}"
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                return f"expected a file in an existing folder, but {parent!r} is not one"
            _probe_file(path)
            return None
        if os.path.exists(path):
            if not os.path.isdir(path):
                return f"expected a folder, got {path!r}, an existing file"
            _probe_folder(path)
            return None
        above = os.path.dirname(os.path.abspath(path))         # the nearest existing parent
        while not os.path.exists(above):
            if os.path.islink(above):
                return (f"cannot write to {path!r}: {above!r} is a symbolic link to "
                        f"{os.readlink(above)!r}, which does not exist")
            above = os.path.dirname(above)
        if not os.path.isdir(above):
            return f"cannot write to {path!r}: {above!r} is not a folder"
        _probe_folder(above)
    except OSError as exc:
        return f"cannot write to {path!r}: {exc.strerror or exc}"
    return None
