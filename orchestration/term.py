"""Terminal output through rich: colour and a redrawn progress bar only where a person is looking.

:func:`console` decides with rich's own detection: a terminal gets colour (unless ``NO_COLOR`` is
set or ``TERM=dumb``) and cursor control; pipes, files and CI logs get plain text with no escape
codes. Machine outputs (``--json``, ``sql``'s CSV/JSON) do not go through here: they are printed as
they are, byte for byte.
"""

from __future__ import annotations

import sys
from typing import TextIO

from rich.cells import cell_len
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.text import Text

BAR_WIDTH = 24


def console(stream: TextIO | None = None) -> Console:
    """A rich console on ``stream`` (default: the current stdout) that prints text as given.

    Made per call, so it writes to whatever ``sys.stdout``/``sys.stderr`` is at the time (pytest's
    capture swaps them). No markup, highlighting or emoji: a message holding ``[...]`` or ``:x:``
    is printed as written, and soft wrapping leaves long lines to the terminal.
    """
    return Console(file=sys.stdout if stream is None else stream, highlight=False, markup=False,
                   emoji=False, soft_wrap=True)


def say(text: str, stream: TextIO | None = None) -> None:
    """One message line on ``stream`` (default: the current stderr), where progress goes."""
    console(sys.stderr if stream is None else stream).print(text)


def paint(text: str, colour: str, stream: TextIO | None = None) -> str:
    """``text`` in ``colour`` when ``stream`` (default stdout) shows colour, else unchanged.

    Pad before painting (``paint(f"{x:<16}", ...)``): escape codes have no width on screen, but
    ``format`` would count them.
    """
    out = console(stream)
    if out.color_system is None or out.no_color:
        return text
    with out.capture() as captured:
        out.print(Text(text, style=colour), end="")
    return captured.get()


def verdict(passed: bool, text: str, stream: TextIO | None = None) -> str:
    """A check verdict: green when it passed, red when it did not."""
    return paint(text, "green" if passed else "red", stream)


def pad(text: str, width: int) -> str:
    """``text`` left-aligned in ``width`` terminal cells (wide characters count twice)."""
    return text + " " * max(0, width - cell_len(text))


class ProgressBar:
    """A bar of ``completed`` out of ``total`` on stderr: redrawn in place on a terminal (rich's
    progress display); elsewhere each update is one plain line, so a log shows the trickle."""

    def __init__(self, total: float, stream: TextIO | None = None):
        self.console = console(sys.stderr if stream is None else stream)
        self.total = max(total, 1)
        self._progress: Progress | None = None
        if self.console.is_terminal and not self.console.is_dumb_terminal:
            self._progress = Progress(
                TextColumn(" "), BarColumn(bar_width=BAR_WIDTH), TaskProgressColumn(),
                TextColumn("{task.description}", markup=False),
                console=self.console, auto_refresh=False)
        self._task = None

    def update(self, completed: float, text: str) -> None:
        completed = min(max(completed, 0), self.total)
        if self._progress is None:
            self.console.print(f"  {completed / self.total:4.0%}  {text}")
            return
        if self._task is None:
            self._task = self._progress.add_task(text, total=self.total, completed=completed)
            self._progress.start()
        self._progress.update(self._task, completed=completed, description=text, refresh=True)

    def done(self) -> None:
        """Leave the last state of the bar on screen and end its line."""
        if self._progress is not None and self._task is not None:
            self._progress.stop()
            self._task = None
