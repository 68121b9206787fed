"""Terminal output: colour only where a person is looking, and a one-line progress bar.

Colour is used when the stream is a terminal and neither ``NO_COLOR`` is set nor ``TERM=dumb``;
scripts, pipes and CI logs get plain text.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

COLOURS = {"green": "32", "red": "31", "yellow": "33", "bold": "1", "dim": "2"}
BAR_WIDTH = 24


def use_colour(stream: TextIO) -> bool:
    return (hasattr(stream, "isatty") and stream.isatty() and "NO_COLOR" not in os.environ
            and os.environ.get("TERM") != "dumb")


def paint(text: str, colour: str, stream: TextIO | None = None) -> str:
    """``text`` in ``colour`` when ``stream`` (default stdout) is a terminal, else unchanged."""
    stream = sys.stdout if stream is None else stream
    if not use_colour(stream):
        return text
    return f"\x1b[{COLOURS[colour]}m{text}\x1b[0m"


def verdict(passed: bool, text: str, stream: TextIO | None = None) -> str:
    """A check verdict: green when it passed, red when it did not."""
    return paint(text, "green" if passed else "red", stream)


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """``[#########...............]`` for a fraction in [0, 1]."""
    fraction = min(1.0, max(0.0, fraction))
    done = int(round(fraction * width))
    return "[" + "#" * done + "." * (width - done) + "]"


class ProgressLine:
    """Rewrites one status line in place on a terminal; prints plain lines elsewhere."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = sys.stderr if stream is None else stream
        self.tty = use_colour(self.stream) or (hasattr(self.stream, "isatty") and self.stream.isatty())
        self._shown = False

    def show(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r\x1b[2K" + text)
            self._shown = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty and self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False
