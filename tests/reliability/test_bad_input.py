"""Bad input: every mistake is exit 2 (1 for an internal failure), one stderr line, no partial output.

The cases go through ``orchestration.cli.main`` in-process (fast), and a few through the installed
``retry-audit`` script in a real subprocess. Damaged stores start from the real RocketMQ 4.9.4
fixture store under tests/data and break one thing each.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from testdata import CLEAN_STORE

from orchestration.cli import main

ROOT = Path(__file__).parents[2]
SMALL = (ROOT / "scenarios" / "small.yaml").read_text()
STORE = CLEAN_STORE
SCRIPT = Path(sys.executable).parent / "retry-audit"
FIRST_FILE = "00000000000000000000"
# A FIFO nobody writes to blocks a reader forever; a bounded wait turns that into a failure.
HANG_TIMEOUT_S = 20


# --- checking one failure -------------------------------------------------------------------------

def run_cli(capsys, argv: list[str]) -> tuple[int, list[str], str]:
    capsys.readouterr()
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, [line for line in captured.err.splitlines() if line.strip()], captured.out


def assert_one_line_error(rc: int, lines: list[str], code: int, *fragments: str) -> None:
    """Exit ``code``; one ``retry-audit: error:`` line holding every fragment; at most a hint after."""
    assert rc == code, (rc, lines)
    assert lines, "no error line on stderr"
    assert lines[0].startswith(("retry-audit: error: ", "retry-audit: internal error: ")), lines
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert len(lines) <= 2 and all(line.startswith("hint: ") for line in lines[1:]), lines
    assert not any("Traceback" in line for line in lines), lines


def assert_no_output(out: Path) -> None:
    """Neither the run directory nor anything that could pass for it is left beside it."""
    assert not out.exists(), f"{out} was left behind"
    if not out.parent.exists():
        return
    leftovers = [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    assert not leftovers, leftovers


# --- scenarios ------------------------------------------------------------------------------------

SCENARIO_CASES = {
    "unknown-key": (SMALL.replace("seed: 7", "seed: 7\nsede: 3"), ["sede", "unknown key", ":5"]),
    "unknown-nested-key": (SMALL.replace("subscribe: [OrderTopic]\n    consumers: 2",
                                         "subscribe: [OrderTopic]\n    colour: red\n    consumers: 2"),
                           ["groups[0].colour", "unknown key"]),
    "wrong-type": (SMALL.replace("seed: 7", "seed: seven"), ["seed", "'seven'", "not an integer", ":4"]),
    "wrong-type-queues": (SMALL.replace("{name: OrderTopic, queues: 4}", "{name: OrderTopic, queues: four}"),
                          ["topics[0].queues", "'four'"]),
    "negative-count": (SMALL.replace("messages: 250", "messages: -5"), ["producers[0].messages", "-5"]),
    "huge-count": (SMALL.replace("messages: 250", "messages: 100000000000000000000"),
                   ["producers[0].messages", "100000000000000000000"]),
    "huge-consumers": (SMALL.replace("consumers: 2", "consumers: 100000", 1), ["groups[0].consumers"]),
    "bad-duration": (SMALL.replace("horizon: 30m", "horizon: 30 minutes"), ["horizon", "not a duration"]),
    "negative-duration": (SMALL.replace("horizon: 30m", "horizon: -30m"), ["horizon", "'-30m'"]),
    "fractional-duration": (SMALL.replace("horizon: 30m", "horizon: 1.5h"), ["horizon", "'1.5h'"]),
    "bad-delay-level-unit": (SMALL.replace("  cq_units_per_file: 1000",
                                           '  cq_units_per_file: 1000\n  message_delay_level: "1s 5x 10s"'),
                             ["broker.message_delay_level: '1s 5x 10s' token 2 '5x' does not end in a unit s, "
                              "m, h or d (lowercase)"]),
    "empty-delay-levels": (SMALL.replace("  cq_units_per_file: 1000",
                                         '  cq_units_per_file: 1000\n  message_delay_level: ""'),
                           ["broker.message_delay_level: '' token 1 is empty (two spaces, or a leading or "
                            "trailing space)"]),
    "double-space-delay-levels": (SMALL.replace("  cq_units_per_file: 1000",
                                                '  cq_units_per_file: 1000\n  message_delay_level: "1s  5s"'),
                                  ["broker.message_delay_level: '1s  5s' token 2 is empty (two spaces, or a "
                                   "leading or trailing space)"]),
    "duplicate-group": (SMALL.replace("name: pay-service ", "name: order-service "),
                        ["groups[1].name", "declared twice"]),
    "duplicate-topic": (SMALL.replace("{name: PayTopic, queues: 2}", "{name: OrderTopic, queues: 2}"),
                        ["topics[1].name", "declared twice"]),
    "duplicate-key": (SMALL.replace("seed: 7", "seed: 7\nseed: 8"), ["seed", "given twice"]),
    "not-yaml": ("name: [unclosed\n", ["not valid YAML"]),
    "empty-file": ("", ["empty"]),
    "list-at-top": ("- a\n- b\n", ["expected a mapping"]),
    "nan-probability": (SMALL.replace("fail_probability: 0.15", "fail_probability: .nan"),
                        ["fail_probability", "nan"]),
    "path-in-name": (SMALL.replace("name: small", "name: ../../etc"), ["name", "'../../etc'"]),
}


@pytest.mark.parametrize("case", sorted(SCENARIO_CASES))
def test_bad_scenario_is_one_line_exit_2(case, tmp_path, capsys):
    """A scenario with a mistake is exit 2 with one line naming the key, value and file line, and no run dir."""
    text, fragments = SCENARIO_CASES[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    out = tmp_path / "runs" / case
    rc, lines, _ = run_cli(capsys, ["simulate", str(path), "--out", str(out), "-q"])
    assert_one_line_error(rc, lines, 2, str(path), *fragments)
    assert not out.parent.exists() or not any(out.parent.iterdir())


def test_missing_unreadable_and_non_utf8_scenario_files(tmp_path, capsys):
    """A missing file, a directory and a non-UTF-8 file are each exit 2 with one line naming the path."""
    (tmp_path / "adir.yaml").mkdir()
    (tmp_path / "latin1.yaml").write_bytes(b"name: caf\xe9\n")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")
    for name, fragment in [("nope.yaml", "not found"), ("adir.yaml", "directory"),
                           ("latin1.yaml", "not UTF-8"), ("dangling.yaml", "not found")]:
        out = tmp_path / f"out-{name}"
        rc, lines, _ = run_cli(capsys, ["simulate", str(tmp_path / name), "--out", str(out), "-q"])
        assert_one_line_error(rc, lines, 2, str(tmp_path / name), fragment)
        assert_no_output(out)


def test_bad_seed_is_one_line(tmp_path, capsys):
    """A --seed outside 0..2**63-1 is exit 2 with one error line (no reproduce command for bad input)."""
    out = tmp_path / "o"
    rc, lines, _ = run_cli(capsys, ["simulate", str(ROOT / "scenarios" / "small.yaml"), "--out", str(out),
                                    "--seed", "-1", "-q"])
    assert_one_line_error(rc, lines, 2, "--seed", "-1")


def test_fifo_scenario_does_not_hang(tmp_path):
    """A FIFO given as the scenario file is refused at once instead of blocking on read."""
    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)
    try:
        proc = subprocess.run([str(SCRIPT), "simulate", str(fifo), "--out", str(tmp_path / "o")],
                              capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"simulate blocked for {HANG_TIMEOUT_S} s on a FIFO")
    assert proc.returncode == 2


# --- damaged stores -------------------------------------------------------------------------------

def store_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "store"
    shutil.copytree(STORE, dest)
    for path in dest.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


def _first_record(store: Path) -> tuple[Path, bytes]:
    path = store / "commitlog" / FIRST_FILE
    return path, path.read_bytes()


def _patch(path: Path, offset: int, data: bytes) -> None:
    b = bytearray(path.read_bytes())
    b[offset:offset + len(data)] = data
    path.write_bytes(bytes(b))


def damage_bad_magic(store):
    _patch(store / "commitlog" / FIRST_FILE, 4, b"\xde\xad\xbe\xef")
    return "bad-magic", f"commitlog/{FIRST_FILE}@0"


def damage_crc(store):
    _patch(store / "commitlog" / FIRST_FILE, 8, struct.pack(">i", 1))
    return "crc-mismatch", f"commitlog/{FIRST_FILE}@0"


def damage_truncated(store):
    last = sorted((store / "commitlog").iterdir())[-1]
    last.write_bytes(last.read_bytes()[:1000])
    return "wrong-size-file", f"commitlog/{last.name}"


def damage_wrong_size(store):
    middle = sorted((store / "commitlog").iterdir())[1]
    middle.write_bytes(middle.read_bytes() + b"\0" * 100)
    return "wrong-size-file", f"commitlog/{middle.name}"


def _replace_file(store, make) -> tuple[str, str]:
    victim = sorted((store / "commitlog").iterdir())[2]
    victim.unlink()
    make(victim)
    return "", f"commitlog/{victim.name}"


def damage_directory_as_file(store):
    return _replace_file(store, lambda p: p.mkdir())


def damage_fifo_as_file(store):
    return _replace_file(store, os.mkfifo)


def damage_dangling_symlink(store):
    return _replace_file(store, lambda p: p.symlink_to(p.parent / "gone"))


def damage_absurd_total_size(store):
    _patch(store / "commitlog" / FIRST_FILE, 0, struct.pack(">i", 0x7FFFFFFF))
    return "2147483647", f"commitlog/{FIRST_FILE}@0"


def damage_negative_total_size(store):
    _patch(store / "commitlog" / FIRST_FILE, 0, struct.pack(">i", -5))
    return "TOTALSIZE -5", f"commitlog/{FIRST_FILE}@0"


def damage_absurd_body_length(store):
    _patch(store / "commitlog" / FIRST_FILE, 84, struct.pack(">i", 0x7FFFFFFF))
    return "body length 2147483647", f"commitlog/{FIRST_FILE}@0"


def _properties_offset(store) -> int:
    _, b = _first_record(store)
    body = struct.unpack(">i", b[84:88])[0]
    topic_len = b[88 + body]
    return 88 + body + 1 + topic_len


def damage_absurd_properties_length(store):
    _patch(store / "commitlog" / FIRST_FILE, _properties_offset(store), struct.pack(">h", 32767))
    return "bad-record", f"commitlog/{FIRST_FILE}@0"


def damage_non_utf8_properties(store):
    _patch(store / "commitlog" / FIRST_FILE, _properties_offset(store) + 2, b"\xff\xfe")
    return "not valid UTF-8", f"commitlog/{FIRST_FILE}@0"


def damage_invalid_config_json(store):
    for name in ("delayOffset.json", "delayOffset.json.bak"):
        (store / "config" / name).write_text("{not json")
    return "invalid JSON", "config/delayOffset.json"


def damage_cq_past_commitlog(store):
    _patch(store / "consumequeue" / "OrderTopic" / "0" / FIRST_FILE, 0, struct.pack(">q", 10**9))
    return "cq-past-commitlog", "consumequeue/OrderTopic/0"


DAMAGES = {f.__name__.removeprefix("damage_"): f for f in [
    damage_bad_magic, damage_crc, damage_truncated, damage_wrong_size, damage_directory_as_file,
    damage_fifo_as_file, damage_dangling_symlink, damage_absurd_total_size, damage_negative_total_size,
    damage_absurd_body_length, damage_absurd_properties_length, damage_non_utf8_properties,
    damage_invalid_config_json, damage_cq_past_commitlog]}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damaged_store_strict_is_one_line_exit_2(damage, tmp_path, capsys):
    """Under --strict, damage is exit 2 with one line naming the file and offset, and no run directory."""
    store = store_copy(tmp_path)
    what, where = DAMAGES[damage](store)
    out = tmp_path / "runs" / "imported"
    rc, lines, _ = run_cli(capsys, ["import-store", str(store), "--out", str(out), "--strict", "-q"])
    assert_one_line_error(rc, lines, 2, where, what)
    assert_no_output(out)


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damaged_store_lax_imports_and_lists_the_damage(damage, tmp_path, capsys):
    """Without --strict, a damaged store imports (exit 0) and the damage is a store_problems row."""
    store = store_copy(tmp_path)
    DAMAGES[damage](store)
    out = tmp_path / "runs" / "imported"
    rc, lines, _ = run_cli(capsys, ["import-store", str(store), "--out", str(out), "-q"])
    assert rc == 0, lines
    problems = pq.read_table(out / "parquet" / "store_problems").num_rows
    assert problems >= 1


def test_fastjson_dialect_config_is_read(tmp_path, capsys):
    """consumerOffset.json in fastjson's dialect (unquoted integer keys) is read, not refused."""
    store = store_copy(tmp_path)
    (store / "config" / "consumerOffset.json").write_text(
        '{"offsetTable":{"OrderTopic@GroupA":{0:5,1:7}}}')
    out = tmp_path / "runs" / "fj"
    rc, lines, _ = run_cli(capsys, ["import-store", str(store), "--out", str(out), "--strict", "-q"])
    assert rc == 0, lines
    offsets = pq.read_table(out / "parquet" / "consumer_offsets").to_pylist()
    assert sorted((r["group"], r["topic"], r["queue_id"], r["offset"]) for r in offsets) == [
        ("GroupA", "OrderTopic", 0, 5), ("GroupA", "OrderTopic", 1, 7)]


def test_fifo_config_file_does_not_hang(tmp_path):
    """A FIFO where a config file is expected is reported as damage instead of blocking the import."""
    store = store_copy(tmp_path)
    (store / "config" / "delayOffset.json").unlink()
    os.mkfifo(store / "config" / "delayOffset.json")
    try:
        proc = subprocess.run([str(SCRIPT), "import-store", str(store), "--out", str(tmp_path / "o"),
                               "--strict", "-q"], capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"import-store blocked for {HANG_TIMEOUT_S} s on a FIFO")
    assert proc.returncode == 2


def test_missing_store_and_not_a_store(tmp_path, capsys):
    """A missing store directory, or one without commitlog/, is exit 2 with one line naming it."""
    for store, fragment in [(tmp_path / "nope", "does not exist"), (tmp_path, "no commitlog/")]:
        out = tmp_path / "runs" / "x"
        rc, lines, _ = run_cli(capsys, ["import-store", str(store), "--out", str(out), "-q"])
        assert_one_line_error(rc, lines, 2, str(store), fragment)
        assert_no_output(out)


def test_bad_run_id_is_refused(tmp_path, capsys):
    """An --name that is not [A-Za-z0-9_-]+ is exit 2 and nothing is written."""
    out = tmp_path / "runs" / "x"
    rc, lines, _ = run_cli(capsys, ["import-store", str(STORE), "--out", str(out), "--name", "../x", "-q"])
    assert_one_line_error(rc, lines, 2, "'../x'")
    assert_no_output(out)


# --- the pipeline commands ------------------------------------------------------------------------

def test_pipeline_commands_on_wrong_directories(tmp_path, capsys):
    """lineage, warehouse, trace and sql on something that is not their input are exit 2, one line."""
    (tmp_path / "garbage.duckdb").write_bytes(b"garbage" * 1000)
    cases = [
        (["lineage", str(tmp_path)], "not a run directory"),
        (["warehouse", str(tmp_path), "--db", str(tmp_path / "w.duckdb")], "not a run directory"),
        (["trace", "x", "--db", str(tmp_path / "none.duckdb")], "no warehouse file"),
        (["trace", "x", "--db", str(tmp_path / "garbage.duckdb")], "not a valid DuckDB"),
        (["sql", "select 1", "--db", str(tmp_path / "none.duckdb")], "no warehouse file"),
    ]
    for argv, fragment in cases:
        rc, lines, _ = run_cli(capsys, argv + ["-q"])
        assert_one_line_error(rc, lines, 2, fragment)
    assert not (tmp_path / "w.duckdb").exists()


def _garbage_run(tmp_path: Path) -> Path:
    run = tmp_path / "garbage-run"
    for table in ("parquet/commitlog", "lineage/message_hops", "lineage/message_lineage"):
        (run / table).mkdir(parents=True)
        (run / table / "part-00000.parquet").write_bytes(b"junk")
    return run


def test_internal_failure_is_exit_1_one_line_and_no_warehouse(tmp_path, capsys):
    """An unexpected failure (Parquet files that are not Parquet) is exit 1, one line, no warehouse file."""
    run = _garbage_run(tmp_path)
    db = tmp_path / "w.duckdb"
    rc, lines, _ = run_cli(capsys, ["warehouse", str(run), "--db", str(db), "-q"])
    assert_one_line_error(rc, lines, 1, "--debug")
    assert not db.exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".w.duckdb")]


# --- the real script ------------------------------------------------------------------------------

def script(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def test_script_bad_scenario_no_traceback_unless_debug(tmp_path):
    """The installed script prints one line for a bad scenario; --debug adds the traceback."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(SCENARIO_CASES["unknown-key"][0])
    out = tmp_path / "o"
    proc = script("simulate", str(bad), "--out", str(out))
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert_one_line_error(proc.returncode, lines, 2, f"{bad}:5", "sede")
    assert_no_output(out)
    debug = script("simulate", str(bad), "--out", str(out), "--debug")
    assert debug.returncode == 2
    assert "Traceback" in debug.stderr and "ScenarioError" in debug.stderr


def test_script_damaged_store_strict(tmp_path):
    """The installed script exits 2 on a CRC mismatch under --strict, with one line and no run dir."""
    store = store_copy(tmp_path)
    damage_crc(store)
    out = tmp_path / "o"
    proc = script("import-store", str(store), "--out", str(out), "--strict")
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert_one_line_error(proc.returncode, lines, 2, "crc-mismatch")
    assert_no_output(out)


def test_script_internal_failure_exit_1(tmp_path):
    """The installed script turns an unexpected exception into exit 1 and one line."""
    run = _garbage_run(tmp_path)
    proc = script("warehouse", str(run), "--db", str(tmp_path / "w.duckdb"))
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert_one_line_error(proc.returncode, lines, 1, "internal error")
    assert not (tmp_path / "w.duckdb").exists()
