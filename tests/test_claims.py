"""The chapters' numbers and readings: glue, checks with margins, notices, seeds."""

from __future__ import annotations

import json
import math

import pytest
import torch

from attention_course import claims as cl
from attention_course.device import seed_base, seed_everything, set_threads


def test_seed_base_shifts_seed_everything_and_course_seeds(monkeypatch) -> None:
    monkeypatch.delenv("ATTENTION_COURSE_SEED_BASE", raising=False)
    assert seed_base() == 0 and cl.course_seeds(3) == (0, 1, 2)
    first = seed_everything(0).initial_seed()
    monkeypatch.setenv("ATTENTION_COURSE_SEED_BASE", "100")
    assert cl.course_seeds(3) == (100, 101, 102)
    assert cl.course_seeds(2, start=5) == (105, 106)
    assert seed_everything(0).initial_seed() == 100 != first
    assert torch.initial_seed() == 100


@pytest.mark.parametrize("text", ["-1", "ten", "1.5"])
def test_a_bad_seed_base_is_named(monkeypatch, text) -> None:
    monkeypatch.setenv("ATTENTION_COURSE_SEED_BASE", text)
    with pytest.raises(ValueError, match="ATTENTION_COURSE_SEED_BASE"):
        seed_base()


def test_set_threads_yields_to_the_environment(monkeypatch) -> None:
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("ATTENTION_COURSE_THREADS", raising=False)
        assert set_threads(1) == 1
        monkeypatch.setenv("ATTENTION_COURSE_THREADS", "3")
        assert set_threads(1) == 3 and set_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_mean_se() -> None:
    mean, se = cl.mean_se([1.0, 2.0, 3.0])
    assert mean == 2.0 and math.isclose(se, 1 / math.sqrt(3))
    assert cl.mean_se([4.0]) == (4.0, 0.0)
    with pytest.raises(ValueError, match="empty"):
        cl.mean_se([])


def test_separated_needs_a_margin_against_the_spread() -> None:
    # the failure of the first edition: MHA 90.2 against MQA 91.2 on one seed
    # means apart by less than their spread do not make a reading
    wide = cl.separated([0.95, 0.90, 0.93], [0.92, 0.91, 0.89])
    assert not wide and wide["gap"] > 0
    clear = cl.separated([0.95, 0.96, 0.94], [0.80, 0.82, 0.81])
    assert clear and clear["needed"] < clear["gap"]
    assert "standard errors" in str(clear)
    # a floor: a tiny but consistent gap is not a difference worth a sentence
    assert not cl.separated([1.001, 1.001], [1.0, 1.0], floor=0.01)


def test_paired_compares_run_by_run() -> None:
    a = torch.tensor([0.50, 0.70, 0.90])
    b = a - torch.tensor([0.05, 0.06, 0.04])  # always a little below
    assert cl.paired(a, b, every=True)
    assert not cl.separated(a, b)  # the spread between runs hides it
    assert not cl.paired(a, torch.tensor([0.45, 0.75, 0.85]), every=True)
    with pytest.raises(ValueError, match="as many"):
        cl.paired([1.0, 2.0], [1.0])


def test_growth_exponent() -> None:
    n = torch.tensor([256.0, 512, 1024, 2048])
    assert math.isclose(cl.growth_exponent(n, 3e-9 * n**2), 2.0, rel_tol=1e-6)
    assert math.isclose(cl.growth_exponent(n, 5 + 0 * n), 0.0, abs_tol=1e-9)
    noisy = 1e-6 * n * torch.tensor([1.0, 1.3, 0.9, 1.1])
    assert 0.8 < cl.growth_exponent(n, noisy) < 1.2
    with pytest.raises(ValueError, match="positive"):
        cl.growth_exponent(n, n - 256)


def test_a_reading_that_holds_shows_nothing(capsys, tmp_path, monkeypatch) -> None:
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv(cl.LOG_ENV, str(log))
    page = cl.Claims("99_test")
    assert page.check("up", True, says="it goes up", got={"slope": 1.5})
    assert capsys.readouterr().out == ""
    record = json.loads(log.read_text())
    assert record["status"] == "holds" and record["got"] == "slope 1.5"
    assert record["page"] == "99_test" and record["seed_base"] == seed_base()


def test_a_reading_that_does_not_hold_says_so_and_goes_on(capsys, tmp_path,
                                                          monkeypatch) -> None:
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv(cl.LOG_ENV, str(log))
    page = cl.Claims("99_test")
    held = page.check("mha-ahead", torch.tensor(False),
                      says="multi-head attention is ahead of multi-query",
                      got="MHA 90.2%, MQA 91.2%")
    assert not held and "does not hold" in repr(held)
    out = capsys.readouterr().out
    assert "did not hold" in out and "MHA 90.2%, MQA 91.2%" in out
    assert "multi-head attention is ahead" in out and "seed base" in out
    assert json.loads(log.read_text())["status"] == "does not hold"
    assert "mha-ahead" in page.summary()
    with pytest.raises(ValueError, match="twice"):
        page.check("mha-ahead", True, says="again", got="")


def test_a_device_specific_reading_is_skipped_with_a_sentence(capsys) -> None:
    page = cl.Claims("99_test", device="cpu")
    assert not page.check("gpu-only", False, says="x", got="",
                          only_on=("cuda",), elsewhere="On a CPU it differs.")
    assert "On a CPU it differs." in capsys.readouterr().out
    assert page.records[0]["status"] == "not checked on this device"
    with pytest.raises(ValueError, match="say what differs"):
        page.check("gpu-only-2", True, says="x", got="", only_on=("cuda",))


def test_glue_takes_plain_numbers() -> None:
    page = cl.Claims("99_test")
    page.glue("a", torch.tensor(0.25))
    page.glue("b", torch.tensor(3))
    assert page.values == {"a": 0.25, "b": 3} and isinstance(page.values["b"], int)
    with pytest.raises(ValueError, match="twice"):
        page.glue("a", 1.0)
    with pytest.raises(ValueError, match="shape"):
        page.glue("c", torch.ones(2))
    with pytest.raises(ValueError, match="non-finite"):
        page.glue("d", float("nan"))


def test_notices_are_found_in_executed_notebooks(tmp_path) -> None:
    record = {"page": "09_decoding", "name": "x", "says": "s", "got": "g",
              "status": "does not hold"}
    held = {**record, "name": "y", "status": "holds"}
    nb = {"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "display_data", "data": {"text/plain": ""},
         "metadata": {cl.METADATA_KEY: {"claim": record}}},
        {"output_type": "display_data", "data": {"text/plain": ""},
         "metadata": {cl.METADATA_KEY: {"claim": held}}}]}]}
    path = tmp_path / "jupyter_execute" / "book" / "09_decoding.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(nb))
    found = cl.notices_in_build(tmp_path)
    assert [r["name"] for r in found] == ["x"]
    assert found[0]["notebook"] == "jupyter_execute/book/09_decoding.ipynb"


def test_a_reading_that_got_nan_says_so(capsys) -> None:
    page = cl.Claims("99_test")
    assert not page.check("nan", False, says="finite", got={"loss": float("nan"),
                                                            "t": torch.tensor(float("inf"))})
    assert "loss nan, t inf" in capsys.readouterr().out
