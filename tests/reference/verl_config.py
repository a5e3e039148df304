"""verl 0.9.1's own config check, run on the overrides the book prints (issue 36, item 3).

``compose(overrides)`` composes verl's Hydra trainer config with the overrides and runs
``verl.utils.config.validate_config`` on it in a child process (``verl_compose.py``). The
child's environment is the project's, plus a folder in the reference cache that holds what
verl's config modules import and the project does not install: Hydra 1.3.8 with OmegaConf
2.3.1 and antlr4 4.9.3 (Hydra's grammar; the project pins antlr4 4.13.2 for math-verify, so
the two live apart), and the small pure-Python modules on the import path of
``verl.workers.config`` (codetiming, orjson, msgpack, cloudpickle, tensordict, pyvers). They
are fetched with ``pip install --no-deps --target`` once, at the versions pinned here; like
the wheels, without network they skip, and in CI they fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.reference import wheels

#: what the child needs beside the project's environment, at pinned versions
CONFIG_ENV = ("hydra-core==1.3.8", "omegaconf==2.3.1", "antlr4-python3-runtime==4.9.3",
              "codetiming==1.4.0", "orjson==3.13.0", "msgpack==1.2.4", "cloudpickle==3.1.3",
              "tensordict==0.15.3", "pyvers==0.2.3")
_CHILD = Path(__file__).with_name("verl_compose.py")


def config_env() -> Path:
    """The folder holding :data:`CONFIG_ENV`, installed once into the reference cache."""
    tag = hashlib.sha256("\n".join(CONFIG_ENV).encode()).hexdigest()[:12]
    where = wheels.cache_dir() / f"verl-config-env-{tag}"
    if (where / "INSTALLED").exists():
        return where
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check",
           "--quiet", "--timeout", "30", "--retries", "2", "--target", str(where), *CONFIG_ENV]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise wheels.ReferenceUnavailable(f"pip install {' '.join(CONFIG_ENV)}: {err}") from None
    if proc.returncode != 0:
        raise wheels.ReferenceUnavailable(f"pip install --target {where} failed (no network?): "
                                          f"{proc.stderr.strip()[-400:]}")
    (where / "INSTALLED").write_text("\n".join(CONFIG_ENV))
    return where


def compose(overrides) -> dict:
    """verl's verdict on ``overrides`` (pairs or ``key=value`` strings): the child's JSON."""
    items = [o if isinstance(o, str) else f"{o[0]}={o[1]}" for o in overrides]
    env = dict(os.environ)
    project = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([str(config_env()), project])
    env["VERL_USE_EXTERNAL_PLUGINS"] = "none"
    proc = subprocess.run([sys.executable, str(_CHILD), str(wheels.package_root("verl")), *items],
                          capture_output=True, text=True, timeout=300, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("VERL-COMPOSE ")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"verl's config check did not run (exit {proc.returncode}):\n"
                             f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("VERL-COMPOSE "):])
