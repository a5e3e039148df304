"""The real reference code: the pinned TRL, verl and OpenRLHF wheels, and their tensor functions.

Issue 17. The wheels are downloaded once with ``pip download --no-deps`` into a cache
(``$GRPO_LAB_REFERENCE_CACHE``, default ``~/.cache/grpo_lab_reference``), checked against the
sha256 recorded here, and unpacked there. None of their dependency trees is installed: each
module is executed from its file with small stand-ins for the imports it does not use in the
functions we call (deepspeed, omegaconf, verl's config classes). Logic that lives inline in a
method (TRL's advantages and loss, OpenRLHF's group normalisation) is cut out of the real file
at run time between two anchor lines, so a release that rewrites it fails with a message that
names the anchor, never silently.

Without network the tests skip with a message, except where ``CI`` (or
``GRPO_LAB_REQUIRE_REFERENCE``) is set to a true value: there they fail.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import subprocess
import sys
import textwrap
import types
import zipfile
from contextlib import contextmanager
from pathlib import Path

#: package -> (version, sha256 of the wheel, the wheel's file name, the package root inside it)
PINS = {
    "trl": ("1.16.0", "c4726e139dd40e1a41661511c639c8a68416782b2e3e8c0befebd77bb7ba0396",
            "trl-1.16.0-py3-none-any.whl", ""),
    "verl": ("0.9.1", "db6e6f2a8d9d5808d9ec32d357a42319fdc6967df688ff9d9810050f49bfdd14",
             "verl-0.9.1-py3-none-any.whl", ""),
    "openrlhf": ("0.11.2", "c969d70db03a70724c3d8a5a01186c6e0728bce624fb3dff95e39b5396acefa6",
                 "openrlhf-0.11.2-cp311-cp311-manylinux1_x86_64.whl",
                 "openrlhf-0.11.2.data/purelib/"),
}
# OpenRLHF ships one CPython 3.11 wheel; ask pip for exactly it, whatever runs the tests.
_PLATFORM = ["--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
             "--abi", "cp311", "--platform", "manylinux1_x86_64", "--platform", "any"]


class ReferenceUnavailable(RuntimeError):
    """The wheels could not be fetched (no network, no pip): skip, or fail in CI."""


class AnchorMissing(AssertionError):
    """A line the extraction relies on is no longer in the reference file."""


def required() -> bool:
    """True in CI (``CI`` or ``GRPO_LAB_REQUIRE_REFERENCE`` set to a true value)."""
    return any(os.environ.get(v, "").strip().lower() not in ("", "0", "false", "no")
               for v in ("CI", "GRPO_LAB_REQUIRE_REFERENCE"))


def cache_dir() -> Path:
    return Path(os.environ.get("GRPO_LAB_REFERENCE_CACHE",
                               Path.home() / ".cache" / "grpo_lab_reference"))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wheel(package: str) -> Path:
    """The pinned wheel of ``package`` in the cache, downloaded if missing, its hash checked."""
    version, sha, name, _ = PINS[package]
    path = cache_dir() / name
    if not path.exists():
        cache_dir().mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--quiet", "--timeout", "30", "--retries", "2", *_PLATFORM,
               "-d", str(cache_dir()), f"{package}=={version}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ReferenceUnavailable(f"pip download {package}=={version}: {err}") from None
        if proc.returncode != 0 or not path.exists():
            raise ReferenceUnavailable(f"pip download --no-deps {package}=={version} failed "
                                       f"(no network?): {proc.stderr.strip()[-400:]}")
    if _sha256(path) != sha:
        raise AssertionError(f"{path}: sha256 {_sha256(path)} is not the pinned {sha} of "
                             f"{package}=={version}; delete it to download it again")
    return path


def package_root(package: str) -> Path:
    """The unpacked wheel's directory that holds ``<package>/`` (unpacked once)."""
    version, sha, name, inner = PINS[package]
    where = cache_dir() / f"{package}-{version}-{sha[:12]}"
    if not (where / "UNPACKED").exists():
        with zipfile.ZipFile(wheel(package)) as zf:
            zf.extractall(where)
        (where / "UNPACKED").write_text(name)
    return where / inner


def path(package: str, relative: str) -> Path:
    """A file of the pinned release, e.g. ``path("trl", "trl/trainer/grpo_config.py")``."""
    return package_root(package) / relative


def read(package: str, relative: str) -> str:
    return path(package, relative).read_text(encoding="utf-8")


# --- cutting code out of a file by its text ------------------------------------------------------

def _line_of(lines, anchor, where, start=0):
    hits = [i for i in range(start, len(lines)) if anchor in lines[i]]
    if len(hits) != 1:
        raise AnchorMissing(f"{where}: expected the anchor {anchor!r} exactly once after line "
                            f"{start}, found it {len(hits)} times: the reference code changed; "
                            f"re-read it and update tests/reference")
    return hits[0]


def block(package: str, relative: str, start: str, end: str) -> str:
    """The exact lines of a file from the one holding ``start`` up to (not including) the one
    holding ``end``, dedented; each anchor must occur once (``end`` once after ``start``)."""
    lines = read(package, relative).splitlines()
    where = f"{package} {PINS[package][0]} {relative}"
    i = _line_of(lines, start, where)
    j = _line_of(lines, end, where, start=i + 1)
    return textwrap.dedent("\n".join(lines[i:j])) + "\n"


def function(package: str, relative: str, qualname: str) -> str:
    """The source of a function (or ``Class.method``) of a file, found by name with ``ast``."""
    text = read(package, relative)
    nodes, found = ast.parse(text).body, None
    for part in qualname.split("."):
        found = next((n for n in nodes if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                      and n.name == part), None)
        if found is None:
            raise AnchorMissing(f"{package} {PINS[package][0]} {relative}: no {qualname!r} "
                                f"(missing {part!r}): update tests/reference")
        nodes = found.body
    return textwrap.dedent(ast.get_source_segment(text, found)) + "\n"


@functools.cache
def _compiled(code: str):
    return compile(code, "<reference>", "exec")


def run(code: str, namespace: dict) -> dict:
    """Execute ``code`` in ``namespace`` and return it (the variables the code set)."""
    exec(_compiled(code), namespace)
    return namespace


# --- executing whole modules with stand-ins for unused imports --------------------------------------

@contextmanager
def stand_ins(modules: dict):
    """Put ``modules`` (name -> module) in ``sys.modules`` for the duration, then remove them."""
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old


def stub(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


def package_stub(name: str, directory: Path) -> types.ModuleType:
    """A package whose ``__init__`` is not run, so ``name.sub`` loads only ``sub``'s file."""
    module = stub(name)
    module.__path__ = [str(directory)]
    return module


def load(package: str, relative: str, name: str, modules: dict) -> types.ModuleType:
    """Execute one file of the release as module ``name``, with ``modules`` standing in."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path(package, relative))
    module = importlib.util.module_from_spec(spec)
    with stand_ins({**modules, name: module}):
        spec.loader.exec_module(module)
    return module


# --- where a cited fact stands ------------------------------------------------------------------------

def yaml_line(text: str, dotted: str) -> int:
    """The 1-based line of the key ``a.b.c`` in a block-style YAML file (by indentation)."""
    stack: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith(("#", "- ")) or ":" not in stripped:
            continue
        indent, key = len(line) - len(stripped), stripped.split(":", 1)[0].strip("'\"")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        if ".".join(k for _, k in stack) == dotted:
            return number
    raise AnchorMissing(f"no key {dotted!r} in the YAML file")


def anchor_line(package: str, relative: str, anchor: str) -> int:
    """The 1-based line a citation's anchor stands on: a dotted key in a YAML file, else the
    one line that contains the anchor text."""
    text = read(package, relative)
    if relative.endswith(".yaml"):
        return yaml_line(text, anchor)
    return _line_of(text.splitlines(), anchor, f"{package} {PINS[package][0]} {relative}") + 1
