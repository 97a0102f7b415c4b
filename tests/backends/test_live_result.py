"""A live run's records (backends/live_result.py) share pipedeck's metric names with the live backend's table."""

from pipedeck.backends.live.metrics import TABLE
from pipedeck.backends.live_result import NAMES


def test_every_metric_name_is_in_the_engines_table_in_the_same_order():
    """The records name the metrics a summary reports; live/metrics.py's table says how each engine spells them:
    a name added to one and not the other would be reported missing for every engine, or never read."""
    assert tuple(series.name for series in TABLE) == NAMES
