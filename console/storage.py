"""--storage on the commands that read a study (studies, report): one that exists and opens, or one line."""

from __future__ import annotations

import click

from ..backends import ConfigError
from ..tuner import check_storage


def check_existing_storage(url: str) -> None:
    """--storage of a reading command: a storage that exists and opens, else one line naming --storage."""
    try:
        check_storage(url, existing=True)
    except ConfigError as err:
        raise click.BadParameter(str(err).removeprefix("storage: "), param_hint="--storage") from None
