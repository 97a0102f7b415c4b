"""The one interface every backend implements, and the observer it reports to."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from ..errors import Cancelled
from .knobs import Knob
from .records import RequestRecord
from .result import RunResult, Span

if TYPE_CHECKING:
    from ..scenarios import Scenario
    from .config import ResolvedConfig, ServingConfig


class Snapshot(NamedTuple):
    """A periodic view of a run in progress; None where the backend cannot see a figure (a server without it)."""

    time_s: float
    done: int  # requests finished
    running: int | None  # requests the engine is serving (admitted, KV held)
    waiting: int | None  # requests queued in the engine, not yet admitted
    kv_used: float | None  # fraction of KV capacity reserved


class RunObserver:
    """Receives progress as a run happens; override what you need."""

    def request_done(self, record: RequestRecord) -> None:
        """A request emitted its last token."""

    def span(self, span: Span) -> None:
        """A block of a rank's timeline was placed (its start and end are known)."""

    def snapshot(self, snap: Snapshot) -> None:
        """Periodic metrics (every `snapshot_interval_s` of run time)."""

    def should_stop(self) -> bool:
        """Return True to cancel the run; the backend then raises RunCancelled."""
        return False


class RunCancelled(Cancelled):
    """The observer asked the run to stop."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do."""

    modes: tuple[str, ...]
    timeline: bool  # returns per-rank spans
    reconfigurable: bool  # can switch configs between runs without a restart
    paced: bool  # runs in real time (live clusters) rather than as fast as it can
    endpoint: bool = False  # drives a server: made with `endpoint=URL`, or `launch=ENGINE, model_path=W` to start one
    simulated: bool = False  # a model of a cluster: any run can be repeated here at will, with the same figures
    launch_knobs_only: bool = False  # a real engine: it reads only the knobs an engine is launched with

    def reads(self, knob: Knob) -> bool:
        """Whether a run here applies `knob`: a model of the engine's scheduler reads every knob, a real engine
        only those a serving engine is launched with (`Knob.set_at_launch`)."""
        return not self.launch_knobs_only or knob.set_at_launch


class Backend(Protocol):
    """Runs a scenario under a serving config; `check()` before the first run, `close()` when done."""

    name: str
    capabilities: Capabilities

    def check(self) -> None:
        """Verify it can run (a server answers, an engine's program exists); a one-line PipedeckError otherwise."""

    def close(self) -> None:
        """Release what it holds (a server it launched); closing twice is harmless."""

    def run(
        self,
        scenario: Scenario,
        config: ServingConfig | ResolvedConfig,
        rate: float | None = None,
        seed: int = 0,
        num_requests: int | None = None,
        observer: RunObserver | None = None,
        timeline: bool = True,
    ) -> RunResult: ...


class Footprint(NamedTuple):
    """A backend's estimate of the bytes a run needs at its peak, and what it is made of (for the error line)."""

    bytes: int
    basis: str  # e.g. "to simulate (625 B a request, measured by benchmarks/sim_memory.py)"


class FootprintEstimate(Protocol):
    """A backend's memory estimate of a run (`BackendDeclaration.footprint`; backends/footprint.py checks it)."""

    def __call__(
        self,
        scenario: Scenario,
        config: ResolvedConfig | None,
        num_requests: int,
        seed: int,
        rate: float | None,
        timeline: bool,
    ) -> Footprint: ...


@dataclass(frozen=True)
class BackendDeclaration:
    """What a backend's package announces through the `pipedeck.backends` entry-point group.

    `make` takes the backend's keyword options (an endpoint, say) and refuses
    others in one line; `footprint` estimates a run's memory (None: it holds
    nothing per request). `shown`: listings and study names tag runs with the
    backend's name (False for the default backend, whose runs go untagged).
    """

    name: str
    title: str  # one line, e.g. "embedded simulator"
    capabilities: Capabilities
    make: Callable[..., Backend]
    footprint: FootprintEstimate | None = None
    shown: bool = True
