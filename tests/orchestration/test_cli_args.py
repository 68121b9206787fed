"""The common flags (--debug, -q/--quiet) on every subcommand, before and after its name."""

from __future__ import annotations

import pytest

from orchestration.cli import HANDLERS, build_parser

# The least each subcommand needs to parse (positionals and required options).
MINIMAL_ARGS = {
    "simulate": ["s.yaml", "--out", "o"],
    "swarm": [],
    "import-store": ["store", "--out", "o"],
    "lineage": ["run"],
    "warehouse": ["run"],
    "trace": ["key"],
    "report": ["run", "--out", "o"],
    "resend-plan": ["--group", "g"],
    "sql": ["select 1"],
    "conformance": ["--out", "o"],
}


def test_minimal_args_cover_every_subcommand():
    """Every subcommand the CLI dispatches is exercised by the flag tests below."""
    assert set(MINIMAL_ARGS) == set(HANDLERS)


@pytest.mark.parametrize("command", sorted(HANDLERS))
@pytest.mark.parametrize("where", ["before", "after"])
def test_common_flags_before_or_after_the_subcommand(command, where):
    """--debug and -q are accepted on either side of the subcommand and both end up set."""
    flags = ["--debug", "-q"]
    argv = (flags + [command] + MINIMAL_ARGS[command] if where == "before"
            else [command] + MINIMAL_ARGS[command] + flags)
    args = build_parser().parse_args(argv)
    assert (args.command, args.debug, args.quiet) == (command, True, True)


@pytest.mark.parametrize("command", sorted(HANDLERS))
def test_common_flags_default_off(command):
    """Without the flags, debug and quiet are off (a flag given before is not reset after)."""
    args = build_parser().parse_args([command] + MINIMAL_ARGS[command])
    assert (args.debug, args.quiet) == (False, False)
    args = build_parser().parse_args(["-q", command] + MINIMAL_ARGS[command])
    assert (args.debug, args.quiet) == (False, True)


def test_long_quiet_after_the_subcommand():
    """--quiet is the long spelling of -q after the subcommand as well."""
    args = build_parser().parse_args(["lineage", "run", "--quiet"])
    assert args.quiet is True
