"""Run ``retry-audit ARGV`` in this process, stopped at one kill point, for the crash-safety tests.

``python kill_point_child.py SPEC_JSON MARKER ARGV...``: SPEC_JSON names a function (``module:Qual.name``)
and which of its calls is the kill point (the nth call whose chosen argument matches, before the
call or after it returns). At that point this process writes MARKER and waits; the test, which
polls for MARKER, then kills the process group with SIGKILL. Every kill point is reached for sure
and the command is killed exactly there, whatever the machine's speed.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time


def _stop_here(marker: str, label: str) -> None:
    tmp = f"{marker}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(label)
    os.replace(tmp, marker)  # the test sees the marker whole or not at all
    while True:  # the test kills this process group now
        time.sleep(3600)


def _matches(spec: dict, args: tuple) -> bool:
    if spec["arg"] is None:
        return True
    value = args[spec["arg"]] if spec["arg"] < len(args) else None
    if spec["attr"] is not None:
        value = getattr(value, spec["attr"], None)
    return spec["contains"] is None or spec["contains"] in str(value)


def install(spec: dict, marker: str) -> None:
    """Wrap the spec's function so that its kill-point call stops this process."""
    module_name, path = spec["target"].split(":")
    owner = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    original = getattr(owner, name)  # a method is found on its class: a plain function
    seen = 0

    def wrapper(*args, **kwargs):
        nonlocal seen
        hit = _matches(spec, args)
        if hit:
            seen += 1
        if hit and seen == spec["nth"] and spec["when"] == "before":
            _stop_here(marker, spec["label"])
        result = original(*args, **kwargs)
        if hit and seen == spec["nth"] and spec["when"] == "after":
            _stop_here(marker, spec["label"])
        return result

    setattr(owner, name, wrapper)


def main() -> int:
    spec, marker, argv = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3:]
    install(spec, marker)
    from orchestration.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
