"""Scheduler knobs beyond the cluster shape: their kinds, ranges and help, declared once.

`ServingConfig.resolve()` validates them from this table and the CLI builds
its flags from it, so a knob added here is validated and settable
everywhere (the tuner registers the ones it searches in tuner/space.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import ConfigError
from .tokens import parse_tokens


@dataclass(frozen=True)
class Knob:
    """One scheduler knob: the ServingConfig field, what values it takes, and what it does."""

    field: str
    kind: str  # tokens, int, float, bool or choice
    help: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # the low bound itself is not allowed
    choices: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")

    def allowed(self) -> str:
        if self.kind == "choice":
            return f"one of {', '.join(self.choices)}"
        if self.kind == "bool":
            return "on or off"
        if self.high is None and self.low is not None:
            positive = self.low > 0 or self.low_open
            noun = "integer" if self.kind in ("int", "tokens") else "number"
            return f"a {'positive' if positive else 'non-negative'} {noun}" + (
                f" of at least {self.low:g}" if self.low > 1 else ""
            )
        return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"

    def check(self, value: object) -> object:
        """The value normalised, or a one-line ConfigError naming the field and what is allowed."""
        if self.kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("on", "true", "1", "yes"):
                return True
            if text in ("off", "false", "0", "no"):
                return False
            raise ConfigError(f"{self.field}: must be {self.allowed()}, got {value!r}")
        if self.kind == "choice":
            if value not in self.choices:
                raise ConfigError(f"{self.field}: must be {self.allowed()}, got {value!r}")
            return value
        if self.kind == "tokens":
            number: float = parse_tokens(value, self.field)  # type: ignore[arg-type]
        else:
            try:
                number = float(value) if self.kind == "float" else int(str(value))
            except (TypeError, ValueError):
                raise ConfigError(f"{self.field}: must be a number {self.allowed()}, got {value!r}") from None
            if isinstance(value, bool) or not math.isfinite(number):
                raise ConfigError(f"{self.field}: must be a number {self.allowed()}, got {value!r}")
        too_low = self.low is not None and (number <= self.low if self.low_open else number < self.low)
        if too_low or (self.high is not None and number > self.high):
            raise ConfigError(f"{self.field}: must be {self.allowed()}, got {value!r}")
        return number


KNOBS: tuple[Knob, ...] = (
    Knob("max_running", "int", "Max running requests (--max-num-seqs).", 1),
    Knob("decode_in_budget", "bool", "Decodes count against the chunk budget (vLLM, SGLang --enable-mixed-chunk: on)."),
    Knob("mixed_batches", "bool", "Steps mix decodes with prefill chunks (vLLM, SGLang --enable-mixed-chunk: on)."),
    Knob(
        "sticky_decodes",
        "bool",
        "Each request decodes in the micro-batch it joined, whose every step decodes its "
        "whole running batch (SGLang's PP scheduler: on; vLLM: off).",
    ),
    Knob(
        "output_reserve",
        "float",
        "KV admission keeps this share of running outputs free (1: never preempt; SGLang settles at 0.098, vLLM 0).",
        0,
        1,
    ),
    Knob("smooth_factor", "float", "DCPP: pull dynamic chunks towards the base chunk, in (0, 1].", 0, 1, low_open=True),
    Knob("min_chunk", "tokens", "DCPP: smallest dynamic chunk (tokens).", 1),
    Knob("slo_ttft_s", "float", "FastPP controllers: the TTFT target they steer by (s).", 0, low_open=True),
    Knob("slo_tpot_s", "float", "FastPP controllers: the TPOT target they steer by (s).", 0, low_open=True),
    Knob("controller_min_chunk", "tokens", "FastPP: smallest chunk the controller may choose.", 1),
    Knob("controller_base_chunk", "tokens", "FastPP greedy: the chunk it starts from.", 1),
    Knob("controller_step", "tokens", "FastPP: chunk sizes move in steps of this many tokens.", 1),
    Knob("kv_free_threshold", "float", "FastPP greedy: free-KV fraction below which chunks reset small.", 0, 1),
    Knob("tpot_violation", "float", "FastPP greedy: shrink when TPOT > this x the TPOT SLO.", 0, low_open=True),
    Knob("ttft_low", "float", "FastPP greedy: shrink when TTFT < this x the TTFT SLO.", 0),
    Knob("ttft_high", "float", "FastPP greedy: grow when TTFT > this x the TTFT SLO ...", 0),
    Knob("tpot_safe", "float", "FastPP greedy: ... and TPOT < this x the TPOT SLO.", 0, low_open=True),
    Knob("alp_window_s", "float", "FastPP ALP: seconds of arrivals and backlog it plans for.", 0, low_open=True),
    Knob("slo_tpot_coeff", "float", "FastPP ALP: TPOT budget as a multiple of the TPOT SLO.", 0, low_open=True),
    Knob("rls_forgetting", "float", "FastPP ALP: recursive least squares forgetting factor.", 0, 1, low_open=True),
    Knob("delay_scheduling", "bool", "Delay scheduling: rebalance decode micro-batches (on/off)."),
    Knob("waiting_tok_threshold", "int", "Delay scheduling: off while this many prompt tokens wait.", 0),
    Knob("load_alpha", "float", "Delay scheduling: how far a micro-batch may exceed the mean.", 0),
    Knob("base_unit", "int", "Delay scheduling: hardware-efficient micro-batch size unit.", 1),
    Knob("delay_mode", "choice", "Delay scheduling: whom to delay.", choices=("auto", "tpot_first", "e2e_first")),
    Knob(
        "adaptive_threshold",
        "float",
        "vpp-adaptive: relative deviation from the linear law that triggers resizing.",
        0,
        low_open=True,
    ),
    Knob("adaptive_fit_chunks", "int", "vpp-adaptive: chunks the linear law is fitted on.", 2),
)
KNOB_BY_FIELD: dict[str, Knob] = {knob.field: knob for knob in KNOBS}


def setting_text(value: object) -> str:
    """A knob's value as `--fix` takes it: on/off for a switch, floats to four digits (0.9975 for an RLS
    forgetting factor), anything else as it is."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:.4g}" if isinstance(value, float) else str(value)
