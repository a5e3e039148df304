"""``python -m grpo_lab.hf``: every argument checked before any training, the JSON written
whole or not at all, and nothing left in $TMPDIR (issue 37)."""

import json
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("trl")

from grpo_lab.hf.__main__ import main, write_atomically  # noqa: E402


@pytest.mark.parametrize("out, why", [("", "empty string"), (".", "which is a folder"),
                                      ("no/such/folder/x.json", "existing folder"),
                                      ("dir/", "which is a folder")])
def test_out_is_refused_before_any_training(tmp_path, monkeypatch, capsys, out, why):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dir").mkdir()
    start = time.perf_counter()
    with pytest.raises(SystemExit) as exit_:
        main(["--steps", "1", "--out", out])
    assert exit_.value.code == 2 and why in capsys.readouterr().err
    assert time.perf_counter() - start < 5            # refused, not trained (a run takes longer)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_folder_is_refused(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(SystemExit):
        main(["--out", str(locked / "x.json")])
    assert "can be written" in capsys.readouterr().err


@pytest.mark.parametrize("argv, name", [(["--steps", "0"], "--steps"),
                                        (["--threads", "0"], "--threads")])
def test_numbers_are_refused_by_name(argv, name, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert capsys.readouterr().err.strip().splitlines()[-1].split(": error: ")[1].startswith(name)


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "trl.json"
    target.write_text("old")

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", disk_full)
        with pytest.raises(OSError, match="No space"):
            write_atomically(target, "new")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["trl.json"]
    write_atomically(target, "new\n")
    assert target.read_text() == "new\n" and os.listdir(tmp_path) == ["trl.json"]


def test_a_run_writes_its_json_and_leaves_nothing_in_tmpdir(tmp_path):
    tmp, out = tmp_path / "tmp", tmp_path / "out" / "trl.json"
    tmp.mkdir()
    out.parent.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.run([sys.executable, "-m", "grpo_lab.hf", "--steps", "1", "--out",
                           str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["steps"] == 1 and len(report["history"]) == 1
    assert os.listdir(out.parent) == ["trl.json"]
    assert os.listdir(tmp) == []                      # the model copy went with its folder
