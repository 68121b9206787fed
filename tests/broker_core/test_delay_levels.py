"""The delay-level table: one parser (``parseDelayLevel``) for the store model and scenario files."""

from __future__ import annotations

import pytest

from broker_core.delay_levels import DELAY_LEVEL_MS_MAX, DELAY_LEVELS_MAX, parse_delay_levels
from broker_core.errors import BadInputError


@pytest.mark.parametrize("text, message", [
    ("1s  2s", "token 2 is empty (two spaces, or a leading or trailing space)"),
    (" 1s", "token 1 is empty (two spaces, or a leading or trailing space)"),
    ("1s ", "token 2 is empty (two spaces, or a leading or trailing space)"),
    ("", "token 1 is empty (two spaces, or a leading or trailing space)"),
    ("1s 1S", "token 2 '1S' does not end in a unit s, m, h or d (lowercase)"),
    ("1x", "token 1 '1x' does not end in a unit s, m, h or d (lowercase)"),
    ("1s 2", "token 2 '2' does not end in a unit s, m, h or d (lowercase)"),
    ("s", "token 1 's' is not a whole number of s"),
    ("1.5s", "token 1 '1.5s' is not a whole number of s"),
    ("+s", "token 1 '+s' is not a whole number of s"),
    ("١s", "token 1 '١s' is not a whole number of s"),  # an Arabic-Indic digit: not ASCII
    ("1s -5s", "token 2 '-5s' is negative"),
    ("31d", f"token 1 '31d' is longer than {DELAY_LEVEL_MS_MAX} ms (30 days)"),
    (" ".join(["1s"] * (DELAY_LEVELS_MAX + 1)), f"{DELAY_LEVELS_MAX + 1} levels; at most {DELAY_LEVELS_MAX}"),
])
def test_a_bad_table_is_refused_with_the_token_and_the_reason(text, message):
    """Each way a table can be wrong is its own message, naming the token's position and text."""
    with pytest.raises(BadInputError) as err:
        parse_delay_levels(text)
    assert err.value.message == message
    assert err.value.where == "message_delay_level"


def test_the_default_table_and_every_unit_read_as_rocketmq_reads_them():
    """The default table has 18 levels from 1 s to 2 h; d is a day; a sign is allowed as in parseLong."""
    levels = parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
    assert len(levels) == 18 and levels[0] == 1000 and levels[2] == 10_000 and levels[-1] == 7_200_000
    assert parse_delay_levels("1d +2h 0s 30d") == (86_400_000, 7_200_000, 0, 30 * 86_400_000)
