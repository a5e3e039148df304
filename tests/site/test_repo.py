"""The repository keeps its promises: README commands, CI, pinned requirements, chapters."""

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))


def readme_commands():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.+?)\n```", text)


def test_readme_gives_the_two_commands_and_ci_runs_the_test_one():
    commands = readme_commands()
    build = [c for c in commands if "jupyter-book build" in c]
    test = [c for c in commands if "pytest" in c]
    assert len(build) == 1 and len(test) == 1, commands
    assert "_build/html" in (ROOT / "README.md").read_text()
    assert "-W" in build[0]  # warnings are errors
    ci_lines = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()]
    assert test[0].strip() in ci_lines, "'.ci/run' must run the README's test command verbatim"


def test_requirements_are_all_pinned():
    lines = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    reqs = [line for line in lines if line and not line.startswith("#")]
    assert "-e ." in reqs
    unpinned = [r for r in reqs if r != "-e ." and not re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==\S+", r)]
    assert not unpinned, unpinned
    book = [r for r in reqs if r.lower().startswith("jupyter-book==")]
    assert book and book[0].split("==")[1].startswith("1."), "Jupyter Book is pinned below 2"


def test_the_commands_install_the_pinned_versions_with_pinned_tools():
    """The two commands install torch with pip (pip's settings choose the wheel), then uv
    installs requirements.txt: every version a command names is requirements.txt's, uv is
    pinned too, and pip's step takes no dependencies of its own (uv installs the pinned ones)."""
    full = {ln.split("==")[0].lower(): ln.split("==")[1].strip()
            for ln in (ROOT / "requirements.txt").read_text().splitlines()
            if "==" in ln and not ln.startswith("#")}
    commands = [c for c in readme_commands() if "jupyter-book build" in c or "pytest" in c]
    assert len(commands) == 2, commands
    for command in commands:
        pip_step, uv_step = command.split(" && ")[:2]
        assert pip_step.startswith("python -m pip install ") and "--no-deps" in pip_step.split()
        named = dict(w.split("==") for w in pip_step.split() if "==" in w)
        assert set(named) == {"torch", "uv"}, named
        assert named["torch"] == full["torch"], (named, full["torch"])
        assert re.fullmatch(r"\d+\.\d+\.\d+", named["uv"]), named
        # byte-compiled at install: where PYTHONDONTWRITEBYTECODE is set (it is on the machines
        # these commands were measured on), Python never caches what it compiles, so every
        # worker, kernel and subprocess would compile each module it imports again
        assert uv_step == "python -m uv pip install --compile-bytecode -r requirements.txt"
        assert "--no-compile" not in pip_step


def test_the_light_install_pins_what_the_full_one_pins():
    """requirements-light.txt (chapters 1-5 in Jupyter) holds a subset of requirements.txt at
    the same versions, torch and the book's toolchain left out, and installs grpo_lab."""
    def pins(name):
        lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
        return {ln.split("==")[0].lower().replace("_", "-"): ln.split("==")[1].strip()
                for ln in lines if "==" in ln and not ln.startswith("#")}
    light, full = pins("requirements-light.txt"), pins("requirements.txt")
    assert light and set(light) <= set(full), sorted(set(light) - set(full))
    assert {k: v for k, v in light.items() if full[k] != v} == {}
    assert not {"torch", "trl", "transformers", "jupyter-book", "playwright"} & set(light)
    assert {"numpy", "matplotlib", "ipywidgets", "jupyterlab", "ml-dtypes"} <= set(light)
    assert "-e ." in (ROOT / "requirements-light.txt").read_text(encoding="utf-8").splitlines()


def test_every_chapter_is_in_the_toc_and_vice_versa():
    toc = (ROOT / "_toc.yml").read_text()
    listed = set(re.findall(r"file:\s*(chapters/\S+)", toc))
    present = {f"chapters/{p.stem}" for p in CHAPTERS}
    assert CHAPTERS, "no chapters found"
    assert listed == present


NBVAL_TAG = "nbval-check-output"   # the cell tag nbval reads for "# NBVAL_CHECK_OUTPUT"
NBVAL_MARKER = re.compile(r"^\s*#\s*(NBVAL_\w+|PYTEST_VALIDATE_\w+)", re.M)


def test_nbval_reads_the_tag_the_chapters_use():
    from nbval.plugin import find_metadata_tags

    assert dict(find_metadata_tags({"tags": [NBVAL_TAG]})) == {"check": True}


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_checks_its_key_numbers_with_nbval(path):
    """Cells that print key numbers carry the nbval-check-output tag (nbval compares their
    output); the marker is metadata, never a comment in the code a reader sees and copies."""
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    checked = [c for c in code if NBVAL_TAG in c.get("metadata", {}).get("tags", [])]
    assert len(checked) >= 3, f"{path.name}: tag the cells that print key numbers {NBVAL_TAG}"
    empty = [i for i, c in enumerate(checked) if not c.get("outputs")]
    assert not empty, f"{path.name}: checked cells {empty} have no stored output to compare"
    markers = [NBVAL_MARKER.search("".join(c["source"])).group(0).strip() for c in code
               if NBVAL_MARKER.search("".join(c["source"]))]
    assert not markers, (f"{path.name}: nbval markers in the code {markers}: make them cell "
                         f"tags ({NBVAL_TAG})")
    errors = [o for c in nb["cells"] if c["cell_type"] == "code"
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: stored outputs contain an error"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_imports_the_package_with_one_alias(path):
    src = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                    if c["cell_type"] == "code")
    assert "import grpo_lab as gl" in src
    assert not re.search(r"from grpo_lab[\w.]* import", src), "use the gl alias"


def test_pages_workflow_builds_with_the_readme_command_and_deploys_the_site():
    workflow = yaml.safe_load((ROOT / ".github/workflows/pages.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert triggers["push"]["branches"] == ["main"]
    steps = workflow["jobs"]["build"]["steps"]
    build = [c for c in readme_commands() if "jupyter-book build" in c][0]
    assert [s for s in steps if s.get("run", "").strip() == build.strip()], \
        "the workflow must build with the README's build command, verbatim"
    upload = [s for s in steps if s.get("uses", "").startswith("actions/upload-pages-artifact")]
    assert upload and upload[0]["with"]["path"] == "_build/html"
    python = [s for s in steps if s.get("uses", "").startswith("actions/setup-python")]
    assert python and python[0]["with"]["python-version"] == "3.11"
    deploy = workflow["jobs"]["deploy"]
    assert deploy["needs"] == "build"
    assert any(s.get("uses", "").startswith("actions/deploy-pages") for s in deploy["steps"])


def test_binder_gets_the_python_the_requirements_need():
    assert (ROOT / "runtime.txt").read_text().strip() == "python-3.11"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_installs_the_package_on_colab_only(path):
    """Colab's launch button opens the bare notebook: its first code cell installs grpo_lab
    from the repository that _config.yml names, on Colab only, and is left off the website."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    url = f"git+{config['url'].rstrip('/')}@{config['branch']}"
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    first = "".join(cells[0]["source"])
    assert 'if "google.colab" in sys.modules:' in first, f"{path.name}: no Colab set-up cell"
    assert f'%pip install --quiet "grpo_lab @ {url}"' in first, first
    assert "remove-cell" in cells[0]["metadata"].get("tags", [])


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_is_stored_as_one_complete_run(path):
    """A chapter is stored as one run top to bottom (what a reader opening it in Jupyter, or
    on Colab, sees before running it): every code cell executed, in order, in one kernel
    (execution counts 1, 2, 3, ...), and no error output. A chapter saved mid-run, with a cell
    run twice or one skipped, fails here; nbval re-executes it in the same test run."""
    cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
             if c["cell_type"] == "code"]
    counts = [c.get("execution_count") for c in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        f"{path.name}: execution counts {counts}; re-execute the chapter top to bottom "
        "(python scripts/execute_chapters.py)")
    errors = [i for i, c in enumerate(cells) for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: code cells {errors} stored an error"
