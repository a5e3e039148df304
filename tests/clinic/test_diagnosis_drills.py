"""Chapter 6c's diagnosis drills, proven on the clinic's stored logs of the mysteries' stages
(TRL 1.16.0, seed 0; the chapter runs them with other seeds): every right spelling passes,
every wrong diagnosis is rejected with a hint that names what the log shows. No TRL run."""

import json
from pathlib import Path

import pytest

import grpo_lab as gl
from grpo_lab.drills import ch06c_clinic as drill
from tests.drills.catalogue.ch06c_clinic import DIAGNOSES

FIXTURES = Path(__file__).resolve().parents[1] / "doctor" / "fixtures"
RIGHTS = [(d, a) for d in DIAGNOSES for a in d.rights]
WRONGS = [(d, w) for d in DIAGNOSES for w in d.wrongs]


def log_of(d):
    return json.loads((FIXTURES / f"{d.log}.json").read_text())


def test_the_catalogue_covers_every_mystery_with_five_rights_and_ten_wrongs():
    assert sorted(d.k for d in DIAGNOSES) == sorted(drill.MYSTERIES) and len(DIAGNOSES) >= 4
    for d in DIAGNOSES:
        assert drill.MYSTERIES[d.k].stage == d.log
        assert len(d.rights) >= 5 and len(d.wrongs) >= 10
        assert {w.fn for w in d.wrongs if isinstance(w.fn, str)} >= (
            set(gl.doctor.CAUSES) | {"healthy"}) - {drill.MYSTERIES[d.k].cause}


@pytest.mark.parametrize("d, answer", RIGHTS, ids=lambda x: str(getattr(x, "k", x)))
def test_right_answers_pass_with_the_evidence(d, answer, capsys):
    assert gl.drills.check_diagnosis(d.k, answer, log_of(d)) is True
    out = capsys.readouterr().out
    assert out.startswith(f"PASS: {drill.MYSTERIES[d.k].cause}: ") and out.count("\n") == 1


@pytest.mark.parametrize("d, wrong", WRONGS, ids=lambda x: str(getattr(x, "k", getattr(
    x, "mistake", x))))
def test_each_wrong_diagnosis_gets_the_hint_of_what_the_log_shows(d, wrong, capsys):
    assert gl.drills.check_diagnosis(d.k, wrong.fn, log_of(d)) is False
    out = capsys.readouterr().out
    assert out.startswith("NOT YET: ") and out.count("\n") == 1, out
    assert wrong.hint in out, f"expected {wrong.hint!r} in:\n{out}"


def test_the_checker_is_quiet_and_refuses_a_wrong_call(capsys):
    d = DIAGNOSES[0]
    assert drill.check_diagnosis(d.k, d.rights[0], log_of(d), verbose=False) is True
    assert drill.check_diagnosis(d.k, "healthy", log_of(d), verbose=False) is False
    assert capsys.readouterr().out == ""
    with pytest.raises(ValueError, match="k: expected"):
        drill.check_diagnosis(9, "nan", log_of(d))
    with pytest.raises(TypeError, match="log: expected"):
        drill.check_diagnosis(1, "nan", {"reward": 0})
    with pytest.raises(TypeError, match="verbose: expected True or False"):
        drill.check_diagnosis(1, "nan", log_of(d), verbose="yes")


def test_normalise_reads_the_ways_a_reader_writes_a_cause():
    assert drill.normalise(" KL blow-up ") == "kl-blowup"
    assert drill.normalise("zero_std") == "zero-std"
    assert drill.normalise("Length blowup.") == "length-blowup"
    assert drill.normalise("dunno") == "dunno"
