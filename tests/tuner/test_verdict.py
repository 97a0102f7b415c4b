"""The study's verdict: ties within the search's precision, the tie-break, and the knobs free among the ties."""

from __future__ import annotations

from pipedeck.backends import ServingConfig
from pipedeck.console.plots.study import best_vs_default
from pipedeck.console.report import confidence_note
from pipedeck.store import TrialRow
from pipedeck.tuner import GOODPUT, clear_win, win_text
from pipedeck.tuner.confidence import interval
from pipedeck.tuner.objective import search_precision
from pipedeck.tuner.objectives import TTFT
from pipedeck.tuner.verdict import Finished, changes, decide, free_knobs, in_force

LIMITS = {"ttft": 2.0, "tpot": 0.2}
BASE = ServingConfig.of(chunk=2048, max_running=256).to_dict()


def trial(number: int, value: float, ttft: float = 1.0, tpot: float = 0.1, **config: object) -> Finished:
    return Finished(number, {**BASE, **config}, {"ttft_p90_s": ttft, "tpot_p90_s": tpot}, value)


def test_configs_within_the_precision_tie_and_the_one_with_most_headroom_wins():
    trials = [
        trial(0, 2.0),
        trial(1, 3.00, ttft=1.9, chunk=8192),
        trial(2, 2.97, ttft=1.0, chunk=16384),
        trial(3, 2.90, ttft=0.5, chunk=4096),
    ]
    verdict = decide(trials, GOODPUT, 0.02, LIMITS, BASE)
    assert [t.number for t in verdict.ties] == [1, 2]  # 2.90 is more than 2% below 3.00
    assert verdict.winner.number == 2 and verdict.free == ("chunk",)


def test_equal_headroom_goes_to_the_fewest_changes_from_the_baseline():
    trials = [trial(1, 3.0, chunk=8192, max_running=64, delay_scheduling=True), trial(2, 3.0, chunk=8192)]
    verdict = decide(trials, GOODPUT, 0.02, LIMITS, BASE)
    assert verdict.winner.number == 2 and set(verdict.free) == {"max-running", "delay-scheduling"}
    assert changes(trials[0].config, BASE) == 3 and changes(trials[1].config, BASE) == 1


def test_a_lower_is_better_objective_ties_from_below_and_one_config_has_no_free_knobs():
    trials = [trial(0, 1.00), trial(1, 1.01, chunk=4096), trial(2, 1.5, chunk=512)]
    verdict = decide(trials, TTFT, 0.02, LIMITS, BASE)
    assert [t.number for t in verdict.ties] == [0, 1] and verdict.winner.number == 0
    assert decide([trials[2]], TTFT, 0.02, LIMITS, BASE).free == ()
    assert free_knobs([BASE, BASE]) == () and decide([], GOODPUT, 0.02, LIMITS, BASE) is None


def test_the_same_config_twice_is_one_tie():
    verdict = decide([trial(3, 3.0, chunk=8192), trial(5, 3.0, chunk=8192)], GOODPUT, 0.02, LIMITS, BASE)
    assert [t.number for t in verdict.ties] == [3] and verdict.free == ()


def test_ties_on_a_live_server_use_its_coarser_goodput_bracket():
    assert search_precision("sim") == 0.02 and search_precision("live") == 0.05
    trials = [trial(1, 3.0), trial(2, 2.9, chunk=8192)]  # 3.4% apart: a tie only at the live bracket
    assert len(decide(trials, GOODPUT, search_precision("sim"), LIMITS, BASE).ties) == 1
    assert len(decide(trials, GOODPUT, search_precision("live"), LIMITS, BASE).ties) == 2


def test_dcpp_whose_min_chunk_reaches_its_chunk_counts_as_the_cpp_it_is():
    """Its floor is the whole chunk, so DCPP changes nothing: the tie goes to it for its one real change."""
    inert_dcpp = trial(1, 3.0, mode="dcpp", chunk=4096, min_chunk=8192, smooth_factor=0.5, pp=2)
    other = trial(2, 3.0, chunk=4096, max_running=64, pp=2)
    assert in_force(inert_dcpp.config) == (
        {**BASE, "chunk": 4096, "pp": 2},
        "mode cpp. It sets dcpp with min_chunk 8192 >= chunk 4096, so it never shrinks a chunk and runs as cpp.",
    )
    live_dcpp = {**inert_dcpp.config, "min_chunk": 2048}
    assert in_force(live_dcpp) == (live_dcpp, "")
    verdict = decide([inert_dcpp, other], GOODPUT, 0.02, LIMITS, {**BASE, "pp": 2})
    assert verdict.winner.number == 1 and changes(inert_dcpp.config, {**BASE, "pp": 2}) == 1
    assert verdict.free == ("max-running",)


def ci(values: list[float]) -> dict[str, object]:
    return interval(values, list(range(len(values))))


DEFAULT_CI = ci([2.0, 3.0, 4.0, 2.5, 3.5])  # seeds differ a lot from one another


def test_a_clear_win_pairs_the_seeds_both_configs_ran_on():
    best = ci([2.1, 3.12, 4.09, 2.61, 3.6])  # about 0.1 req/s better on every seed
    assert best["low"] < DEFAULT_CI["high"], "the unpaired intervals overlap"
    assert clear_win(best, DEFAULT_CI, GOODPUT) is True
    assert clear_win(DEFAULT_CI, best, GOODPUT) is False
    assert clear_win(ci([1.9, 2.85, 3.9, 2.45, 3.41]), DEFAULT_CI, TTFT) is True  # lower is better
    mixed = ci([2.5, 2.6, 4.4, 2.0, 3.9])  # higher mean, but better on some seeds and worse on others
    assert mixed["mean"] > DEFAULT_CI["mean"] and clear_win(mixed, DEFAULT_CI, GOODPUT) is False
    assert clear_win(ci([3.0]), ci([2.0]), GOODPUT) is None, "one seed gives no interval"


def test_intervals_apart_are_a_paired_win_too():
    """The paired half-width is at most the sum of the two unpaired ones, so separate intervals stay a win."""
    best = ci([5.1, 5.3, 4.9, 5.2, 5.0])
    assert best["low"] > DEFAULT_CI["high"]
    assert clear_win(best, DEFAULT_CI, GOODPUT) is True


def test_the_report_and_tune_give_the_same_verdict_on_the_same_figures():
    mixed = ci([2.5, 2.6, 4.4, 2.0, 3.9])
    text = win_text(mixed, DEFAULT_CI, GOODPUT)
    assert text.startswith("not a clear win: ")
    config = ServingConfig.of(chunk=2048, max_running=256).resolve().to_dict()
    best = TrialRow("s", 3, "COMPLETE", {}, config, {"goodput_ci": mixed}, mixed["values"][0], None, None, None)
    default = TrialRow(
        "s", 0, "COMPLETE", {}, config, {"goodput_ci": DEFAULT_CI}, DEFAULT_CI["values"][0], None, None, None
    )
    table = best_vs_default(best, default, GOODPUT).data[0].cells.values
    assert "1.25x higher goodput: not a clear win" in table[-1]
    assert text in confidence_note(best, default, objective=GOODPUT)
