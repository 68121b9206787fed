"""Terminal output is coloured and redrawn only on a terminal; pipes and files get plain text."""

import io
import re

from orchestration import term


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_colour_in_pipes_or_with_no_color(monkeypatch):
    """Pipes, files, NO_COLOR and TERM=dumb get plain text; a terminal gets ANSI colour."""
    for name in ("NO_COLOR", "FORCE_COLOR", "COLORTERM", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert term.paint("x", "red", io.StringIO()) == "x"
    assert term.paint("x", "red", FakeTty()) == "\x1b[31mx\x1b[0m"
    monkeypatch.setenv("TERM", "dumb")
    assert term.paint("x", "red", FakeTty()) == "x"
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("NO_COLOR", "1")
    assert term.paint("x", "red", FakeTty()) == "x"


def test_pad_counts_cells_not_escape_codes(monkeypatch):
    """A painted verdict padded before painting takes its width on screen, not its bytes."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    painted = term.verdict(True, term.pad("passed", 16), FakeTty())
    assert painted == "\x1b[32m" + "passed".ljust(16) + "\x1b[0m"
    assert term.pad("\u6d88\u606f", 6) == "\u6d88\u606f  "  # two wide characters fill four cells


def test_progress_bar_plain_lines_off_a_terminal():
    """Off a terminal each update is one plain line (clamped to 100%), with no escape codes."""
    plain = io.StringIO()
    bar = term.ProgressBar(200, plain)
    bar.update(50, "a [x]")
    bar.update(400, "b")
    bar.done()
    assert plain.getvalue() == "   25%  a [x]\n  100%  b\n"


def test_progress_bar_redraws_in_place_on_a_terminal(monkeypatch):
    """On a terminal the bar is drawn in place (cursor control) and its last state is left on screen."""
    monkeypatch.setenv("TERM", "xterm")
    tty = FakeTty()
    bar = term.ProgressBar(100, tty)
    bar.update(50, "half")
    bar.update(100, "all")
    bar.done()
    out = tty.getvalue()
    assert "\r\x1b[2K" in out  # the line is rewritten, not appended to
    frames = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", f).strip() for f in out.split("\r")]
    assert frames[1].endswith("50% half") and frames[-1].endswith("100% all")
    assert out.endswith("\n\x1b[?25h")  # the last state stays, on its own line, cursor shown


def test_say_prints_text_as_written():
    """Messages are printed verbatim: no markup, emoji codes or highlighting applied."""
    out = io.StringIO()
    term.say("run [bold]x[/bold] :x: 10.0.0.1:10911", out)
    assert out.getvalue() == "run [bold]x[/bold] :x: 10.0.0.1:10911\n"
