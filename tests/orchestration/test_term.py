"""Terminal output is coloured only on a terminal, and the progress bar is bounded."""

import io

from orchestration import term


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_colour_in_pipes_or_with_no_color(monkeypatch):
    """Pipes, files and NO_COLOR get plain text; a terminal gets ANSI colour."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert term.paint("x", "red", io.StringIO()) == "x"
    assert term.paint("x", "red", FakeTty()) == "\x1b[31mx\x1b[0m"
    monkeypatch.setenv("NO_COLOR", "1")
    assert term.paint("x", "red", FakeTty()) == "x"


def test_bar_is_clamped_and_proportional():
    """The bar has a fixed width and clamps fractions outside [0, 1]."""
    assert term.bar(0.5, 10) == "[#####.....]"
    assert term.bar(-1, 4) == "[....]" and term.bar(7, 4) == "[####]"


def test_progress_line_rewrites_in_place_on_a_terminal():
    """On a terminal the line is rewritten with a carriage return; elsewhere each update is a line."""
    tty, plain = FakeTty(), io.StringIO()
    for stream in (tty, plain):
        line = term.ProgressLine(stream)
        line.show("a")
        line.show("b")
        line.done()
    assert tty.getvalue() == "\r\x1b[2Ka\r\x1b[2Kb\n"
    assert plain.getvalue() == "a\nb\n"
