"""The observer a Live run reports to: paces the simulator to wall time and batches progress for the UI."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ...backends import RequestRecord, RunObserver, Snapshot, Span

Event = RequestRecord | Span | Snapshot
FRAMES_PER_S = 30.0  # at most this many frames a second reach the UI


@dataclass(frozen=True)
class Frame:
    """What the backend reported since the previous frame, in its order."""

    events: tuple[Event, ...]


class PacedObserver(RunObserver):
    """Runs simulated time at `speed` x wall time (None: as fast as it can) and hands progress to `emit`.

    Pacing happens in `snapshot`: the run's thread sleeps until the wall
    clock catches up with the snapshot's simulated time, waking at once when
    `stop` is set so that `should_stop` cancels the run promptly. `emit` is
    called from the run's thread with everything reported since the last
    frame, at most FRAMES_PER_S times a second.
    """

    def __init__(
        self,
        speed: float | None,
        emit: Callable[[Frame], object],  # its result is ignored (the Live view posts a message: a bool)
        stop: threading.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.speed, self.emit, self.stop, self.clock = speed, emit, stop, clock
        self.started = clock()
        self.sim_time = 0.0
        self._events: list[Event] = []
        self._last_emit = -math.inf

    def request_done(self, record: RequestRecord) -> None:
        self._events.append(record)

    def span(self, span: Span) -> None:
        self._events.append(span)

    def snapshot(self, snap: Snapshot) -> None:
        self._events.append(snap)
        self.sim_time = snap.time_s
        if self.speed is not None:
            behind = self.started + snap.time_s / self.speed - self.clock()
            if behind > 0:
                self.stop.wait(behind)
        if self.clock() - self._last_emit >= 1.0 / FRAMES_PER_S:
            self.flush()

    def should_stop(self) -> bool:
        return self.stop.is_set()

    def flush(self) -> None:
        """Emit whatever has not been emitted yet."""
        if self._events:
            frame = Frame(tuple(self._events))
            self._events = []
            self._last_emit = self.clock()
            self.emit(frame)
