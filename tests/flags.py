"""Checking that stored trial parameters are `--fix` flags that give back the config the trial ran."""

from __future__ import annotations

from collections.abc import Mapping

from pipedeck.tuner import parse_fixes


def assert_flags_give_back(flags: Mapping[str, object], config: Mapping[str, object]) -> None:
    """Each `name: value` of `flags`, passed as `--fix name=value`, pins the value `config` has."""
    for flag, value in flags.items():
        text = ("on" if value else "off") if isinstance(value, bool) else str(value)
        ((field, parsed),) = parse_fixes([f"{flag}={text}"]).items()
        want = config[field]
        assert parsed == (tuple(want) if isinstance(want, list) else want), (flag, value, want)
