"""Hostile input: names cannot leave the store, SQL is parameterized, YAML is safe, input is read-only.

docs/security.md lists what each test defends against and what is out of scope.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tokenize
from pathlib import Path

import duckdb
import pytest
from testdata import STORE_FIXTURES

from broker_core.broker.broker import Broker, BrokerConfig
from broker_core.broker.send import SendRequest
from broker_core.clock import Simulator
from broker_core.errors import InvalidNameError, ScenarioError
from broker_core.rng import Streams
from broker_core.sim.scenario import load_scenario_text
from orchestration.cli import main

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "tests" / "assets"))
from tiny_runs import GROUP, write_tiny_run  # noqa: E402

STORE = STORE_FIXTURES
SIM_START_MS = 1_795_305_600_000
SUCCESS = 0  # RocketMQ's ResponseCode.SUCCESS
HOSTILE_NAMES = [
    "../escape", "../../../../tmp/escape", "/tmp/absolute", "a\x00b", "x" * 300, "..", ".", "a/b",
    "a\\b", "%RETRY%../x", "%DLQ%..%2f", "con\nsole", "",
]
INJECTION = "x'; drop table commitlog; --"


# --- names never reach outside the store ----------------------------------------------------------

def _tree(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=lambda n: repr(n)[:24])
def test_hostile_topic_and_group_names_through_the_broker_api(name, tmp_path):
    """Every broker request with a traversal, absolute, NUL or overlong name is refused and writes nothing outside the store."""
    root = tmp_path / "store"
    broker = Broker(root, BrokerConfig(commitlog_file_size_bytes=64 * 1024, cq_units_per_file=1000),
                    Simulator(SIM_START_MS), Streams(1))
    broker.start()
    ok = broker.send_message(SendRequest("OrderTopic", 0, b"body", {}, born_ts=1, born_host="10.0.0.9:5000"))
    assert ok.code == SUCCESS
    assert broker.send_message(SendRequest(name, 0, b"body", {}, born_ts=1,
                                           born_host="10.0.0.9:5000")).code != SUCCESS
    with pytest.raises(InvalidNameError):
        broker.create_topic(name)
    with pytest.raises(InvalidNameError):
        broker.put({"topic": name, "queue_id": 0, "body": b"x", "properties": {}, "born_ts": 1,
                    "born_host": "10.0.0.9:5000", "store_host": "10.0.0.1:10911"})
    # A send-back of a stored message under a hostile group name: refused (an error response, or
    # the store's own name check before any byte is written), nothing stored.
    # (A blank group is not refused: its retry topic is the plain "%RETRY%", a name inside the
    # store; docs/security.md notes it.)
    if name:
        try:
            assert broker.consumer_send_msg_back(ok.phys_offset, name, 0).code != SUCCESS
        except InvalidNameError:
            pass
    assert broker.pull_message("g", name, 0, 0, 1).records == []
    assert broker.pull_message(name, "OrderTopic", 0, 0, 1) is not None
    broker.shutdown()
    assert _tree(tmp_path) == {"store"} | {f"store/{p}" for p in _tree(root)}, "a file outside the store"
    for part in _tree(root):
        for component in Path(part).parts:
            assert component not in ("..", ".") and (not name or component != name), part


def test_send_back_with_an_invalid_group_is_an_error_response(tmp_path):
    """A send-back naming an invalid group gets an error response and leaves the config files clean."""
    root = tmp_path / "store"
    broker = Broker(root, BrokerConfig(commitlog_file_size_bytes=64 * 1024, cq_units_per_file=1000),
                    Simulator(SIM_START_MS), Streams(1))
    broker.start()
    ok = broker.send_message(SendRequest("OrderTopic", 0, b"body", {}, born_ts=1, born_host="10.0.0.9:5000"))
    try:
        assert broker.consumer_send_msg_back(ok.phys_offset, "../escape", 0).code != SUCCESS
    finally:
        broker.shutdown()
    def table(name: str, key: str) -> dict:
        path = root / "config" / name
        return json.loads(path.read_text())[key] if path.exists() else {}  # never written: clean

    topics = table("topics.json", "topicConfigTable")
    groups = table("subscriptionGroup.json", "subscriptionGroupTable")
    assert not [t for t in topics if "escape" in t] and "../escape" not in groups


@pytest.mark.parametrize("name", [n for n in HOSTILE_NAMES if n], ids=lambda n: repr(n)[:24])
def test_hostile_names_in_scenarios_are_scenario_errors(name):
    """A scenario naming a topic or group with a hostile name is refused before anything runs."""
    quoted = json.dumps(name)
    topic_text = f"name: s\ntopics:\n  - {{name: {quoted}, queues: 1}}\n"
    group_text = (f"name: s\ntopics:\n  - {{name: T, queues: 1}}\ngroups:\n"
                  f"  - {{name: {quoted}, subscribe: [T]}}\n")
    for text in (topic_text, group_text, f"name: {quoted}\n"):
        with pytest.raises(ScenarioError):
            load_scenario_text(text)


def test_hostile_run_names_never_write_outside_the_output_parent(tmp_path, capsys):
    """import-store --name with a path in it is refused; nothing appears outside the output's parent."""
    before = _tree(tmp_path)
    for name in ("../escape", "/tmp/absolute", "a\x00b", ".."):
        rc = main(["import-store", str(STORE / "store-clean"), "--out", str(tmp_path / "o"), "--name", name, "-q"])
        assert rc == 2
    assert _tree(tmp_path) == before
    assert not Path("/tmp/absolute").exists()


# --- SQL is parameterized -------------------------------------------------------------------------

def _rename_key(old: str, new: str):
    def walk(value):
        if value == old:
            return new
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, tuple):
            return tuple(walk(v) for v in value)
        return value

    def change(tables):
        for name, rows in tables.items():
            if name == "run.json" or rows is None:
                continue
            for row in rows:
                for key, value in list(row.items()):
                    row[key] = walk(value)
    return change


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _counts(db: Path) -> dict[str, int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        names = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
        return {n: con.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}
    finally:
        con.close()


@pytest.fixture
def hostile_warehouse(tmp_path):
    """A warehouse built from a run directory whose path holds a quote and a semicolon, and whose
    message UA is renamed to an SQL injection string."""
    from assets.warehouse import build_warehouse

    parent = tmp_path / "it's; drop table x; --"
    run = write_tiny_run(parent / "tiny", _rename_key("UA", INJECTION))
    db = parent / "w'h.duckdb"
    build_warehouse([run], db)
    return db


def test_trace_key_with_quotes_is_a_parameter(hostile_warehouse, capsys):
    """trace with quotes and semicolons in the key finds exactly that key and leaves the warehouse intact."""
    db = hostile_warehouse
    digest, counts = _digest(db), _counts(db)
    assert counts["commitlog"] > 0
    rc = main(["trace", INJECTION, "--db", str(db), "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    found = json.loads(out)["messages"]
    assert [m["message_key"] for m in found] == [INJECTION]
    rc = main(["trace", "nothing'; drop table commitlog; --", "--db", str(db), "-q"])
    assert rc == 1  # a key no message has: the lookup failed, the input was fine
    assert _digest(db) == digest and _counts(db) == counts


def test_resend_plan_group_with_quotes_is_a_parameter(hostile_warehouse, capsys):
    """resend-plan --group with quotes is refused as an unknown group; the warehouse is unchanged."""
    db = hostile_warehouse
    digest, counts = _digest(db), _counts(db)
    for group in (f"{GROUP}' OR '1'='1", f"{GROUP}'; drop table dlq_messages; --", '"; --'):
        rc = main(["resend-plan", "--db", str(db), "--group", group, "--json", "-q"])
        captured = capsys.readouterr()
        assert rc == 2, captured.err
        assert "no group" in captured.err and captured.out == ""
    rc = main(["resend-plan", "--db", str(db), "--group", GROUP, "--origin-topic", "x' OR '1'='1", "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out) == []
    assert _digest(db) == digest and _counts(db) == counts


def test_sql_command_is_read_only(hostile_warehouse, capsys):
    """retry-audit sql cannot change the warehouse: a DROP is refused and the file is unchanged."""
    db = hostile_warehouse
    digest, counts = _digest(db), _counts(db)
    assert main(["sql", "drop table commitlog", "--db", str(db), "-q"]) == 2
    assert main(["sql", "select 1; drop table commitlog", "--db", str(db), "-q"]) == 2
    capsys.readouterr()
    assert _digest(db) == digest and _counts(db) == counts


# --- YAML is loaded safely ------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "name: !!python/object/apply:os.system ['touch {marker}']\n",
    "name: !!python/object/apply:os.system 'touch {marker}'\n",
    "name: x\nseed: !!python/object/apply:os.system ['touch {marker}']\n",
    "name: x\nseed: !!python/object/new:os.system ['touch {marker}']\n",
    "!!python/object/apply:os.system ['touch {marker}']\n",
    "name: x\nhorizon: !!python/name:os.system\n",
], ids=["sequence", "scalar", "seed-sequence", "new", "root", "name"])
def test_python_yaml_tags_are_scenario_errors(text, tmp_path):
    """A !!python/* tag is a ScenarioError and never runs anything."""
    marker = tmp_path / "ran"
    with pytest.raises(ScenarioError):
        load_scenario_text(text.format(marker=marker))
    assert not marker.exists()


def test_python_tag_on_a_mapping_is_refused(tmp_path):
    """A !!python/object/apply tag on the scenario's top mapping is a ScenarioError."""
    marker = tmp_path / "ran"
    try:
        with pytest.raises(ScenarioError):
            load_scenario_text(f"--- !!python/object/apply:os.system\nname: x\nargs: ['touch {marker}']\n")
        with pytest.raises(ScenarioError):
            load_scenario_text("--- !!python/object/apply:os.system\nname: x\n")
    finally:
        assert not marker.exists()


# --- nothing is unpickled or evaluated ------------------------------------------------------------

UNSAFE = {
    "pickle": re.compile(r"\b(c?[Pp]ickle|dill|shelve|marshal)\b"),
    "eval/exec": re.compile(r"(?<![.\w])(eval|exec)\s*\("),
    "yaml.load without SafeLoader": re.compile(r"yaml\.(load|load_all|unsafe_load|full_load)\s*\((?![^)]*SafeLoader)"),
    "yaml Loader other than safe": re.compile(r"Loader\s*=\s*yaml\.(Loader|FullLoader|UnsafeLoader)"),
    "shell=True": re.compile(r"shell\s*=\s*True"),
}


def code_lines(path: Path) -> list[str]:
    """The file's lines with every string literal and comment blanked out (docstrings may name
    the banned calls to say they are not used)."""
    lines = [list(line) for line in path.read_text().splitlines()]
    with path.open("rb") as f:
        for tok in tokenize.tokenize(f.readline):
            if tok.type not in (tokenize.STRING, tokenize.COMMENT):
                continue
            (r0, c0), (r1, c1) = tok.start, tok.end
            for row in range(r0, r1 + 1):
                line = lines[row - 1]
                start = c0 if row == r0 else 0
                end = c1 if row == r1 else len(line)
                line[start:end] = " " * (end - start)
    return ["".join(line) for line in lines]


def test_no_unpickling_or_evaluation_in_the_packages():
    """No module of broker_core, assets or orchestration unpickles, evaluates or loads unsafe YAML."""
    found = []
    for package in ("broker_core", "assets", "orchestration"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for lineno, code in enumerate(code_lines(path), 1):
                line = code
                for what, pattern in UNSAFE.items():
                    if pattern.search(code):
                        found.append(f"{path.relative_to(ROOT)}:{lineno}: {what}: {line.strip()}")
    assert found == []


def test_the_unsafe_patterns_do_match_unsafe_code():
    """The grep above would catch each construct it bans (so an empty result means something)."""
    samples = {"pickle": "import pickle", "eval/exec": "x = eval(text)",
               "yaml.load without SafeLoader": "yaml.load(text)",
               "yaml Loader other than safe": "yaml.load(t, Loader=yaml.Loader)", "shell=True": "run(c, shell=True)"}
    for what, sample in samples.items():
        assert UNSAFE[what].search(sample), what
    assert not UNSAFE["yaml.load without SafeLoader"].search("yaml.load(t, Loader=yaml.SafeLoader)")
    assert not UNSAFE["eval/exec"].search("con.execute(q)")


# --- the UI listens on the loopback interface -----------------------------------------------------

def test_ui_binds_to_loopback():
    """make ui starts dagster dev with -h 127.0.0.1, and Spark's driver binds to 127.0.0.1 by default."""
    from assets.spark import SPARK_LOCAL_IP_DEFAULT
    from orchestration.ui import UI_HOST, ui_command, ui_environment

    command = ui_command(ROOT / "workspace.yaml", 3000)
    assert command[command.index("-h") + 1] == "127.0.0.1" == UI_HOST
    assert "0.0.0.0" not in command
    env_without = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env_without)
        assert ui_environment(Path("/tmp/home"))["SPARK_LOCAL_IP"] == "127.0.0.1"
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert SPARK_LOCAL_IP_DEFAULT == "127.0.0.1"
    makefile = (ROOT / "Makefile").read_text()
    assert "-m orchestration.ui" in makefile


# --- import-store never writes its input ----------------------------------------------------------

def _fingerprint(root: Path) -> dict[str, tuple]:
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        out[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return out


# store -> exit codes of import-store without and with --strict: the crashed store's torn tail is
# damage, an error under --strict.
IMPORT_EXIT_CODES = {"store-clean": (0, 0), "store-crashed": (0, 2)}


@pytest.mark.parametrize("store", sorted(IMPORT_EXIT_CODES))
def test_import_store_leaves_the_input_tree_unchanged(store, tmp_path, capsys):
    """import-store (also of a crashed store with an abort file, also refused under --strict) exits
    as the store's state says and leaves every input file's bytes, mode and mtime as they were."""
    src = tmp_path / "input"
    shutil.copytree(STORE / store, src)
    before = _fingerprint(src)
    codes = tuple(main(["import-store", str(src), "--out", str(tmp_path / f"out{len(extra)}"), "-q", *extra])
                  for extra in ([], ["--strict"]))
    capsys.readouterr()
    assert codes == IMPORT_EXIT_CODES[store]
    assert _fingerprint(src) == before


def test_import_store_refuses_an_output_inside_the_input(tmp_path, capsys):
    """An --out inside the store is refused (exit 2) and the store is unchanged."""
    src = tmp_path / "input"
    shutil.copytree(STORE / "store-clean", src)
    before = _fingerprint(src)
    assert main(["import-store", str(src), "--out", str(src / "config" / "run"), "-q"]) == 2
    capsys.readouterr()
    assert _fingerprint(src) == before


def test_store_reader_opens_files_read_only():
    """The store reader opens every file in binary read mode and maps it ACCESS_READ, never for writing."""
    source = "\n".join(code_lines(ROOT / "broker_core" / "store" / "reader.py"))
    text = (ROOT / "broker_core" / "store" / "reader.py").read_text()
    opens = re.findall(r"(?<![.\w])open\(([^)]*)\)", text)
    assert opens, "the reader opens no file?"
    assert all(re.search(r"""["']rb["']""", args) for args in opens), opens
    assert "ACCESS_WRITE" not in source and "ACCESS_COPY" not in source
    assert all("ACCESS_READ" in line for line in source.splitlines() if "mmap.mmap(" in line)
    assert not re.search(r"\.(write_bytes|write_text|unlink|rename|truncate|chmod)\(|os\.replace\(", source)
