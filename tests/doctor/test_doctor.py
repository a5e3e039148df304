"""The doctor on hand-made logs: what it reads, each rule on a firing and a near-miss series,
and the refusals of bad input (one line on stderr, exit status 2, no traceback)."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from grpo_lab import doctor
from grpo_lab.doctor import rules


def steps(**series):
    """Rows of a log from equal-length series: steps(reward=[...], loss=[...])."""
    n = len(next(iter(series.values())))
    return [{"step": i + 1, **{k: v[i] for k, v in series.items()}} for i in range(n)]


def healthy_rows(n=12):
    rng = np.random.default_rng(0)
    return steps(reward=list(0.2 + 0.01 * np.arange(n) + 0.01 * rng.standard_normal(n)),
                 reward_std=[0.25] * n, frac_reward_zero_std=[0.0] * n,
                 entropy=list(1.3 + 0.05 * rng.standard_normal(n)),
                 kl=list(0.05 * np.arange(n) / n), grad_norm=list(0.8 + 0.1 * rng.random(n)),
                 loss=[0.01] * n, **{"completions/mean_length": [6.0] * n,
                                     "completions/clipped_ratio": [0.1] * n})


# --- reading ------------------------------------------------------------------------------------

def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_trainer_state_list_and_json_lines_alike(tmp_path):
    rows = healthy_rows()
    summary = {"train_runtime": 4.7, "train_loss": 0.01, "step": 12}
    state = write(tmp_path, "trainer_state.json", json.dumps({"log_history": rows + [summary],
                                                               "global_step": 12}))
    listed = write(tmp_path, "whatever.txt", json.dumps(rows + [summary]))
    lines = write(tmp_path, "log.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    got = [doctor.read_log(p) for p in (state, listed, lines)]
    assert got[0] == got[1] == got[2] == rows            # the summary row is dropped
    assert doctor.report(got[0]).startswith("healthy:")


def test_nan_infinity_and_null_are_read_as_trl_writes_them(tmp_path):
    text = ('[{"step": 1, "loss": 0.1, "reward": 0.5}, {"step": 2, "loss": NaN, "reward": null},'
            ' {"step": 3, "loss": Infinity, "grad_norm": 1.0}]')
    rows = doctor.read_log(write(tmp_path, "log.json", text))
    assert len(rows) == 3
    assert math.isnan(doctor.series(rows, "reward")[1])
    assert doctor.series(rows, "loss")[2] == math.inf
    assert doctor.series(rows, "grad_norm").shape == (1,)      # only the rows that logged it
    found = doctor.diagnose(rows)
    assert [f.cause for f in found] == ["nan"]
    assert "loss is nan from step 2" in found[0].evidence


def test_rows_without_reward_data_are_kept_for_the_metrics_they_hold():
    rows = healthy_rows(6)
    rows.insert(3, {"step": 3.5, "loss": 0.0, "grad_norm": 0.5, "entropy": 1.3})
    assert len(doctor.series(rows, "reward")) == 6
    assert len(doctor.series(rows, "grad_norm")) == 7


@pytest.mark.parametrize("content, says", [
    ("", "empty"), ("   \n", "empty"), ("{not json", "not JSON"),
    ('{"log_history": []}', "log_history is empty"),
    ('[{"train_runtime": 1.0, "train_loss": 0.1}]', "no TRL metric"),
    ('[{"epoch": 1, "step": 3}]', "no TRL metric"), ('"text"', "got a JSON str"),
    ('{"log_history": 3}', "expected a list"),
])
def test_bad_files_are_one_line_and_status_2(tmp_path, capsys, content, says):
    path = write(tmp_path, "bad.json", content)
    assert doctor.main([str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and says in err, err


def test_a_folder_and_a_missing_path_are_refused(tmp_path, capsys):
    assert doctor.main([str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert doctor.main([str(tmp_path / "nope.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert doctor.main([]) == 2 and "usage" in capsys.readouterr().err


def test_the_command_prints_no_traceback(tmp_path):
    bad = write(tmp_path, "x.json", "{")
    proc = subprocess.run([sys.executable, "-m", "grpo_lab.doctor", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("grpo_lab.doctor: ") and proc.stderr.count("\n") == 1


def test_the_doctor_imports_neither_torch_nor_trl(tmp_path):
    good = write(tmp_path, "log.json", json.dumps(healthy_rows()))
    code = ("import sys; from grpo_lab.doctor import main; rc = main([sys.argv[1]]); "
            "assert 'torch' not in sys.modules and 'trl' not in sys.modules, 'imported'; "
            "sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, str(good)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("healthy:")


def test_read_log_refuses_a_non_path():
    with pytest.raises(TypeError, match="path: expected a str"):
        doctor.read_log(3)


# --- each rule: it fires, and a near-miss does not ----------------------------------------------

def replace(rows, key, values):
    return [{**r, key: v} for r, v in zip(rows, values)]


def test_truncation_fires_at_the_threshold_and_not_below():
    rows = healthy_rows()
    t = rules.THRESHOLDS["truncation"]
    assert rules.truncation(replace(rows, "completions/clipped_ratio", [t] * 12))
    assert rules.truncation(replace(rows, "completions/clipped_ratio", [t - 0.01] * 12)) is None


def test_zero_std_fires_on_mostly_all_equal_groups():
    rows = healthy_rows()
    t = rules.THRESHOLDS["zero_std"]
    assert "frac_reward_zero_std" in rules.zero_std(replace(rows, "frac_reward_zero_std", [t] * 12))
    assert rules.zero_std(replace(rows, "frac_reward_zero_std", [t - 0.05] * 12)) is None


def test_entropy_collapse_compares_the_last_third_with_the_first():
    rows = healthy_rows()
    falling = list(np.linspace(1.2, 0.1, 12))
    assert rules.entropy_collapse(replace(rows, "entropy", falling))
    assert rules.entropy_collapse(replace(rows, "entropy", list(np.linspace(1.2, 0.6, 12)))) is None
    assert rules.entropy_collapse(replace(rows, "entropy", [0.0] * 12)) is None   # no start


def test_kl_blowup_reads_the_largest_kl():
    rows = healthy_rows()
    t = rules.THRESHOLDS["kl_blowup"]
    assert rules.kl_blowup(replace(rows, "kl", [0.0] * 11 + [t]))
    assert rules.kl_blowup(replace(rows, "kl", [0.0] * 11 + [0.99 * t])) is None
    assert rules.kl_blowup([{k: v for k, v in r.items() if k != "kl"} for r in rows]) is None


def test_lr_too_high_needs_the_entropy_jump_and_the_reward_to_fall():
    rows = replace(healthy_rows(), "entropy", [1.3, 4.0] + [2.0] * 10)
    assert "entropy jumps from 1.30 to 4.00 nats at step 2" in rules.lr_too_high(
        replace(rows, "reward", [0.2] + [0.0] * 11))
    assert rules.lr_too_high(replace(rows, "reward", list(np.linspace(0.2, 0.4, 12)))) is None
    calm = replace(rows, "entropy", [1.3, 2.5] + [2.0] * 10)          # 1.9x: under 2
    assert rules.lr_too_high(replace(calm, "reward", [0.2] + [0.0] * 11)) is None


def test_reward_flat_scales_with_the_groups_spread():
    rows = healthy_rows()
    assert rules.reward_flat(replace(rows, "reward", [0.25] * 12))
    assert rules.reward_flat(replace(rows, "reward", list(np.linspace(0.2, 0.3, 12)))) is None
    assert rules.reward_flat(replace(rows, "reward", [0.25] * 12)[:5]) is None  # too few rows
    agree = replace(replace(rows, "reward", [0.25] * 12), "frac_reward_zero_std", [0.9] * 12)
    assert rules.reward_flat(agree) is None                       # zero-std's case, not this


def test_length_rules_read_the_mean_length():
    rows = healthy_rows()
    key = "completions/mean_length"
    assert rules.length_collapse(replace(rows, key, list(np.linspace(6, 1.5, 12))))
    assert rules.length_collapse(replace(rows, key, list(np.linspace(6, 4, 12)))) is None
    assert rules.length_blowup(replace(rows, key, list(np.linspace(6, 16, 12))))
    assert rules.length_blowup(replace(rows, key, list(np.linspace(6, 8, 12)))) is None


def test_reward_hacking_needs_one_reward_up_and_another_down():
    rows = healthy_rows()
    up, down, flat = np.linspace(0.2, 0.8, 12), np.linspace(0.4, 0.1, 12), np.full(12, 0.3)
    std = {"rewards/proxy/std": [0.4] * 12, "rewards/task/std": [0.4] * 12}
    both = [{**r, "rewards/proxy/mean": u, "rewards/task/mean": d, **{k: v[i] for k, v in
             std.items()}} for i, (r, u, d) in enumerate(zip(rows, up, down))]
    assert "rewards/proxy/mean rises" in rules.reward_hacking(both)
    one = [{**r, "rewards/task/mean": f} for r, f in zip(both, flat)]
    assert rules.reward_hacking(one) is None


def test_findings_print_cause_evidence_and_section():
    rows = replace(healthy_rows(), "completions/clipped_ratio", [0.9] * 12)
    lines = doctor.report(rows).splitlines()
    assert lines[0].startswith("truncation: completions/clipped_ratio is 0.90")
    assert lines[0].endswith("(read: " + doctor.CAUSES["truncation"].read + ")")


def test_causes_are_the_documented_ids():
    assert list(doctor.CAUSES) == ["nan", "truncation", "zero-std", "entropy-collapse",
                                   "kl-blowup", "lr-too-high", "reward-flat", "length-collapse",
                                   "length-blowup", "reward-hacking"]
    for cause in doctor.CAUSES.values():
        assert callable(cause.rule)


def _headings(chapter):
    import json
    from pathlib import Path
    nb = json.loads((Path(__file__).resolve().parents[2] / "chapters" / chapter)
                    .read_text(encoding="utf-8"))
    return {line.lstrip("#").strip().lower() for c in nb["cells"] if c["cell_type"] == "markdown"
            for line in "".join(c["source"]).splitlines() if line.startswith("#")}


def test_every_reading_pointer_names_a_real_section():
    """'(read: The clinic: X)' names a heading of chapter 6c, 'chapter 6: X' one of chapter 6:
    a reader who follows the pointer finds the section."""
    books = {"The clinic": "06c_clinic.ipynb", "chapter 6": "06_training_loop.ipynb"}
    reads = [c.read for c in doctor.CAUSES.values()] + [doctor.diagnose([{"reward": 0.5}])[0].read]
    for read in reads:
        book, _, section = read.partition(": ")
        assert book in books, read
        assert section.lower() in _headings(books[book]), read


def test_from_verl_renames_its_keys():
    rows = doctor.from_verl([{"critic/score/mean": 0.5, "response_length/clip_ratio": 0.9,
                              "step": 1}])
    assert rows == [{"reward": 0.5, "completions/clipped_ratio": 0.9, "step": 1}]
    with pytest.raises(TypeError, match="rows: expected a list of dicts"):
        doctor.from_verl({"a": 1})


def test_verl_sources_name_the_line_that_logs_each_verl_name():
    """Each file:line of VERL_SOURCES holds its verl name in the pinned verl 0.9.1 wheel."""
    assert set(doctor.VERL_SOURCES) == set(doctor.VERL_NAMES)
    wheels = pytest.importorskip("tests.reference.wheels")
    try:
        for name, where in doctor.VERL_SOURCES.items():
            relative, line = where.rsplit(":", 1)
            text = wheels.read("verl", relative).splitlines()[int(line) - 1]
            assert f'"{name}"' in text, (where, text)
    except wheels.ReferenceUnavailable as err:
        if wheels.required():
            raise
        pytest.skip(str(err))
