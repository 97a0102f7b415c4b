"""The tuning vocabulary: objectives with Optuna's StudyDirection, an SLO parsed once where it enters, no strings
compared in between."""

from __future__ import annotations

import ast
import pickle

import numpy as np
import pytest
from optuna.study import StudyDirection

from pipedeck.console.errors import run_cli
from pipedeck.console.tune import tune
from pipedeck.store import StudyRow
from pipedeck.tuner import GOODPUT, OBJECTIVES, Slo, SLOError, TuneSpec, objective_named, parse_slo, stored_verdict
from pipedeck.tuner.objectives import THROUGHPUT, TTFT, ObjectiveError
from pipedeck.tuner.spec import saved_slo
from pipedeck.tuner.verdict import Finished, decide
from tests.paths import ROOT

PACKAGES = ("scenarios", "backends", "store", "tuner", "console")
DIRECTION_HOME = "tuner/objectives.py"
# where SLO text enters: its own module, the CLI's option callback, the console's fields, a stored study's settings
SLO_EDGES = ("tuner/slo.py", "console/tunespec.py", "console/tui/tune.py", "console/tui/live.py", "tuner/spec.py")


def direction_comparisons(tree: ast.AST) -> list[int]:
    """Lines that compare anything with the text "maximize" or "minimize"."""
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(
            isinstance(side, ast.Constant) and side.value in ("maximize", "minimize")
            for side in (node.left, *node.comparators)
        )
    )


def slo_parses(tree: ast.AST) -> list[int]:
    """Lines that call parse_slo (by name or as an attribute)."""
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == "parse_slo")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "parse_slo")
        )
    )


def sources() -> dict[str, ast.AST]:
    files = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    assert len(files) > 50, "the packages' sources were not found"
    return {path.relative_to(ROOT).as_posix(): ast.parse(path.read_text(encoding="utf-8")) for path in files}


def test_the_finders_see_what_they_look_for():
    tree = ast.parse('if direction == "maximize" or "minimize" != d:\n    slo = parse_slo(text)\nx = m.parse_slo(t)')
    assert direction_comparisons(tree) == [1, 1] and slo_parses(tree) == [2, 3]


def test_no_direction_is_compared_as_text_and_slo_text_is_parsed_only_where_it_enters():
    found = sources()
    directions = {name: lines for name, tree in found.items() if (lines := direction_comparisons(tree))}
    parses = {name: lines for name, tree in found.items() if name not in SLO_EDGES and (lines := slo_parses(tree))}
    assert not directions, f"compare an Objective's direction through {DIRECTION_HOME}, not as text: {directions}"
    assert not parses, f"parse SLO text where it enters ({', '.join(SLO_EDGES)}) and pass an Slo: {parses}"
    assert all(slo_parses(found[edge]) for edge in SLO_EDGES), "an edge that parses nothing is no longer one"


@pytest.mark.parametrize(
    "objective, best, ratio, worded, percent, running",
    [
        (GOODPUT, 3.0, 2.0, "2.00x higher goodput", "+100% goodput", [1.0, 3.0, 3.0]),
        (TTFT, 1.0, 2.0, "2.00x lower mean TTFT", "-50% mean TTFT", [1.0, 1.0, 1.0]),
        (THROUGHPUT, 3.0, 2.0, "2.00x higher throughput", "+100% throughput", [1.0, 3.0, 3.0]),
    ],
)
def test_the_direction_decides_best_ratio_and_wording(objective, best, ratio, worded, percent, running):
    values = [1.0, 3.0, 2.0]
    assert objective.best(values) == best
    assert sorted(values, key=objective.sort_key)[0] == best
    assert objective.better(best, 2.0) and not objective.better(2.0, best)
    high, low = (4.0, 2.0) if objective.maximize else (2.0, 4.0)  # a better value, then a worse one
    assert objective.ratio(high, low) == ratio
    assert objective.better_by(objective.ratio(high, low)) == worded
    assert objective.better_by(objective.ratio(high, low), percent=True) == percent
    assert objective.running_best(np.array(values)).tolist() == running
    assert objective.clearly_better(0.1, 0.5) is objective.maximize
    assert objective.clearly_better(-0.5, -0.1) is not objective.maximize


def test_each_objective_is_declared_once_with_an_optuna_direction_and_the_cli_offers_them_all():
    assert all(isinstance(o.direction, StudyDirection) and OBJECTIVES[o.name] is o for o in OBJECTIVES.values())
    assert [o.direction_name for o in (GOODPUT, TTFT)] == ["maximize", "minimize"]
    [option] = [p for p in tune.params if p.name == "objective"]
    assert list(option.type.choices) == list(OBJECTIVES)
    assert pickle.loads(pickle.dumps(TTFT)) is TTFT, "a worker process gets the declared objective back"


def test_a_verdict_picks_the_best_in_the_objectives_direction():
    trials = [Finished(n, {"chunk": n}, {}, value) for n, value in enumerate([2.0, 5.0, 3.0])]
    assert decide(trials, GOODPUT, 0.02, {}, None).winner.number == 1
    assert decide(trials, TTFT, 0.02, {}, None).winner.number == 0


def test_an_unknown_objective_is_one_line_naming_it_and_the_allowed_ones():
    with pytest.raises(ObjectiveError) as err:
        objective_named("latency")
    assert str(err.value) == "objective: unknown 'latency'; allowed: goodput, ttft, throughput"
    assert err.value.field == "objective"
    row = StudyRow("s", None, "azure-conv", "speed", {}, {}, "", "0", 0, 0)
    with pytest.raises(ObjectiveError, match=r"^objective: unknown 'speed'; allowed: goodput, ttft, throughput$"):
        stored_verdict(row, [])


@pytest.mark.parametrize("text", ["ttft=2s,tpot=200ms", "ttft@p99=3s", "tpot=0.25s,ttft=1500ms"])
def test_an_slo_round_trips_what_the_stores_keep(text):
    slo = parse_slo(text)
    assert Slo.from_dict(slo.to_dict()) == slo
    assert parse_slo(slo.text()) == slo == slo.as_stored()
    spec = TuneSpec(study="s", storage="", scenario="azure-conv", model="m", hardware="h", devices=1, slo=slo)
    assert spec.settings()["slo"] == slo.text() and saved_slo(spec.settings()) == slo
    assert pickle.loads(pickle.dumps(spec)) == spec


def test_an_slo_with_more_digits_than_its_text_measures_by_its_stored_text():
    slo = parse_slo("ttft=1.23456789s")
    assert slo.text() == "ttft=1.23457s" and slo.as_stored().seconds() == {"ttft": 1.23457}


def test_bad_slo_text_is_one_line_naming_the_field_and_what_is_allowed(capsys, tmp_path):
    with pytest.raises(SLOError) as err:
        parse_slo("latency=2s")
    assert str(err.value) == "slo: unknown metric 'latency'; allowed: ttft, tpot" and err.value.field == "slo"
    assert run_cli(tune, ["--slo", "ttft=fast", "--db", str(tmp_path / "x.duckdb")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("pipedeck: error: slo: ") and "expected metric[@pNN]=value with unit s or ms" in line
