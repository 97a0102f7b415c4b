"""Signals during a tune: SIGINT and SIGTERM set the tune's stop flag, which its loop reads between steps.

Raised as KeyboardInterrupt wherever it lands, a signal could cut a run store
write short or land inside a DuckDB query, which turns it into an error of
its own ("Query interrupted") and a traceback.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM set `stop` (on the main thread; elsewhere signals are not ours)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOPPING_SIGNALS}
    for sig in STOPPING_SIGNALS:
        signal.signal(sig, lambda signum, frame: stop.set())
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
