"""The doctor on the clinic's real TRL runs, stored once by ``tests/doctor/make_fixtures.py``
(TRL 1.16.0's ``GRPOTrainer``, the in-code model, seed 0): each staged failure is named, each
run healed by its one knob reads ``healthy``. No TRL run here."""

import json
from pathlib import Path

import pytest

from grpo_lab import doctor

FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: stage -> the cause the doctor must name on its log (the clinic's STAGES, written out so
#: that this test needs no import of the clinic).
SICK = {"truncation": "truncation", "zero_std": "zero-std", "reward_flat": "reward-flat",
        "lr_too_high": "lr-too-high", "kl_blowup": "kl-blowup",
        "length_blowup": "length-blowup", "length_collapse": "length-collapse", "nan": "nan",
        "reward_none": "nan", "reward_hacking": "reward-hacking"}
HEALTHY = ["loss_zero", "loss_zero_healthy", "truncation_healthy", "batch_size_healthy",
           "length_blowup_healthy", "length_collapse_healthy", "nan_healthy",
           "reward_none_healthy", "reward_crash_healthy", "reward_hacking_healthy"]


def causes(name):
    return [f.cause for f in doctor.diagnose(doctor.read_log(FIXTURES / f"{name}.json"))]


@pytest.mark.parametrize("stage", sorted(SICK))
def test_each_staged_failure_is_named(stage):
    assert SICK[stage] in causes(stage), doctor.report(doctor.read_log(FIXTURES / f"{stage}.json"))


@pytest.mark.parametrize("name", HEALTHY)
def test_each_healed_run_reads_healthy(name):
    assert causes(name) == ["healthy"], doctor.report(doctor.read_log(FIXTURES / f"{name}.json"))


def test_the_fixtures_hold_trl_summary_rows_and_null(tmp_path):
    rows = json.loads((FIXTURES / "truncation.json").read_text())
    assert "train_runtime" in rows[-1]                               # TRL's summary row
    assert len(doctor.read_log(FIXTURES / "truncation.json")) == len(rows) - 1
    assert "null" in (FIXTURES / "reward_none.json").read_text()        # TRL's None metrics
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"log_history": rows, "global_step": rows[-1]["step"]}))
    assert doctor.main([str(state)]) == 0
