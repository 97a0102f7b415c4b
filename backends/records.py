"""`RequestRecord`: one served request as every backend reports it, whether simulated or measured on a server."""

from __future__ import annotations

from typing import NamedTuple


class RequestRecord(NamedTuple):
    """One served request; times in seconds from the start of the run."""

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    first_token_s: float
    finish_s: float

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first; None for a one-token output, which decodes nothing."""
        if self.output_tokens <= 1:
            return None
        return (self.finish_s - self.first_token_s) / (self.output_tokens - 1)
