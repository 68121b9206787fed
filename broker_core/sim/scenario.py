"""Scenario files: YAML in, frozen dataclasses out, every mistake reported with its file and line.

The YAML is composed into nodes (not loaded into plain dicts) so that every value keeps its
source mark: an error names the key path, the offending value, the file and the line. Every field
has a default; unknown keys, wrong types and out-of-range values are :class:`ScenarioError`.
PyYAML's safe loader is the only non-standard import of the broker model: scenario files are
inputs, and parsing them precisely is worth the dependency.

The format is DESIGN.md's, plus a few fields with defaults: ``broker.cluster``,
``broker.cq_units_per_file`` (small values make consume-queue files roll in short runs),
``producers[].group`` (producer group) and ``producers[].start`` (when it begins sending), and the
per-kind fault fields documented in ``docs/faults.md`` (``pause``, ``consumer``, ``delta``,
``topic``/``messages``/``rate`` for a burst). Values: durations ``1h10m``/``30s``/``5ms``/``2d``
(largest unit first, each once), sizes ``64MiB`` or bytes, rates ``1000/s`` (also ``/ms``, ``/m``,
``/h``), ``delay_level`` a level or a weight table ``{0: 0.9, 3: 0.1}``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from broker_core import names
from broker_core.constants import (
    BODY_SIZE_BYTES_MAX,
    COMMITLOG_FILE_SIZE_BYTES_DEFAULT,
    CONSUME_TIMEOUT_MS_DEFAULT,
    CQ_UNITS_PER_FILE_DEFAULT,
    MESSAGE_DELAY_LEVEL_DEFAULT,
    SIM_MESSAGES_MAX,
)
from broker_core.delay_levels import parse_delay_levels
from broker_core.errors import BadInputError, InvalidNameError, ScenarioError

# --- limits of a scenario (each one keeps a typo from turning into a run that never ends) --------
SCENARIO_FILE_BYTES_MAX = 1024 * 1024  # a scenario is a hand-written file, not a data dump
SCENARIO_NAME_LENGTH_MAX = 100  # the name becomes a directory and a partition key
SCENARIO_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]+")
HORIZON_MS_MAX = 30 * 24 * 3600 * 1000  # 30 simulated days
HORIZON_MS_DEFAULT = 6 * 3600 * 1000  # 6 h: long enough for a full 16-retry lifecycle (4 h 46 min)
SEED_MAX = 2**63 - 1  # seeds are stored as int64 in the runs table
TOPICS_MAX = 1000
GROUPS_MAX = 1000
PRODUCERS_MAX = 1000
FAULTS_MAX = 10_000
QUEUES_PER_TOPIC_MAX = 1024  # far above RocketMQ's usual 4-16; bounds the consume-queue count
CONSUMERS_PER_GROUP_MAX = 256
MAX_RECONSUME_TIMES_MAX = 10_000  # an explicit bound; -1 keeps RocketMQ's own default
CONSUME_TIME_MS_MAX = 24 * 3600 * 1000
CONSUME_TIMEOUT_MS_MAX = 24 * 3600 * 1000
RATE_PER_S_MAX = 10_000_000.0  # messages per simulated second per producer
TAGS_PER_PRODUCER_MAX = 1000
TAG_LENGTH_MAX = 255
COMMITLOG_FILE_SIZE_BYTES_MIN = 64 * 1024  # must hold the largest record we simulate plus a BLANK
COMMITLOG_FILE_SIZE_BYTES_MAX = COMMITLOG_FILE_SIZE_BYTES_DEFAULT  # 1 GiB, RocketMQ's default
CQ_UNITS_PER_FILE_MIN = 16
CQ_UNITS_PER_FILE_MAX = CQ_UNITS_PER_FILE_DEFAULT
FAULT_PAUSE_MS_DEFAULT = 5000  # a crashed broker is back after this (an operator restarting it)
BURST_MESSAGES_MAX = 10_000_000
STRING_LENGTH_MAX = 1000

SCENARIO_COMMITLOG_FILE_SIZE_DEFAULT = 64 * 1024 * 1024  # smaller than RocketMQ's 1 GiB: many rolls

DURATION_UNITS_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
_DURATION = re.compile(r"(\d+)(ms|d|h|m|s)")
SIZE_UNITS_BYTES = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
_SIZE = re.compile(r"(\d+)\s*(B|KiB|MiB|GiB)")
RATE_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*/\s*(ms|s|m|h)")

MODELS = ("clustering", "broadcasting")
MODES = ("concurrently", "orderly")
SEND_MODES = ("sync", "async", "oneway")
FLUSH_MODES = ("async", "sync")
SEMANTICS = ("4.9", "5.x")

INSTANT_FAULTS = ("broker_crash", "broker_restart", "consumer_crash", "consumer_restart",
                  "torn_write", "clock_jump", "burst")
WINDOW_FAULTS = ("send_back_failure", "put_failure", "consumer_hang")
FAULT_KINDS = INSTANT_FAULTS + WINDOW_FAULTS
# Keys each fault kind accepts besides kind/at/from/to.
_FAULT_KEYS = {
    "broker_crash": {"pause"},
    "broker_restart": {"pause"},
    "torn_write": {"pause"},
    "consumer_crash": {"group", "consumer"},
    "consumer_restart": {"group", "consumer"},
    "clock_jump": {"delta"},
    "burst": {"topic", "messages", "rate"},
    "send_back_failure": {"group", "probability"},
    "put_failure": {"probability"},
    "consumer_hang": {"group", "probability"},
}


# --- the result ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class BrokerSpec:
    name: str = "broker-a"
    cluster: str = "DefaultCluster"
    store_host: str = "10.0.0.1:10911"
    message_delay_level: str = MESSAGE_DELAY_LEVEL_DEFAULT
    delay_levels_ms: tuple[int, ...] = ()
    commitlog_file_size_bytes: int = SCENARIO_COMMITLOG_FILE_SIZE_DEFAULT
    cq_units_per_file: int = CQ_UNITS_PER_FILE_DEFAULT
    flush: str = "async"
    semantics: str = "4.9"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    queues: int = 4


@dataclass(frozen=True)
class BehaviorSpec:
    consume_time_ms: int = 5
    fail_probability: float = 0.0
    exception_probability: float = 0.0
    return_null_probability: float = 0.0
    hang_probability: float = 0.0
    poison_fraction: float = 0.0


@dataclass(frozen=True)
class GroupSpec:
    name: str
    subscribe: tuple[str, ...]
    model: str = "clustering"
    mode: str = "concurrently"
    consumers: int = 1
    max_reconsume_times: int = -1
    consume_timeout_ms: int = CONSUME_TIMEOUT_MS_DEFAULT
    behavior: BehaviorSpec = field(default_factory=BehaviorSpec)


@dataclass(frozen=True)
class ProducerSpec:
    topic: str
    messages: int = 1000
    rate_per_s: float = 1000.0
    body_size: int = 256
    tags: tuple[str, ...] = ()
    delay_weights: tuple[tuple[int, float], ...] = ((0, 1.0),)  # (level, weight); 0 = not delayed
    send: str = "sync"
    producer_group: str = "DEFAULT_PRODUCER"
    start_ms: int = 0


@dataclass(frozen=True)
class FaultSpec:
    kind: str
    at_ms: int  # start (instant faults: the moment; windows: from)
    until_ms: int | None = None  # end of a window; None for instant faults
    group: str | None = None
    consumer: int = 0
    probability: float = 1.0
    delta_ms: int = 0
    pause_ms: int = FAULT_PAUSE_MS_DEFAULT
    topic: str | None = None
    messages: int = 0
    rate_per_s: float = 1000.0
    line: int = 0  # where the fault was declared, for messages about it


@dataclass(frozen=True)
class Scenario:
    name: str
    seed: int = 42
    horizon_ms: int = HORIZON_MS_DEFAULT
    broker: BrokerSpec = field(default_factory=BrokerSpec)
    topics: tuple[TopicSpec, ...] = ()
    groups: tuple[GroupSpec, ...] = ()
    producers: tuple[ProducerSpec, ...] = ()
    faults: tuple[FaultSpec, ...] = ()
    source: str = "<string>"
    scaled_messages: int | None = None  # set by with_messages: the run is not the file as written

    @property
    def messages_total(self) -> int:
        """Messages the producers and bursts will try to send."""
        return (sum(p.messages for p in self.producers)
                + sum(f.messages for f in self.faults if f.kind == "burst"))

    def topic(self, name: str) -> TopicSpec:
        return next(t for t in self.topics if t.name == name)

    def with_seed(self, seed: int) -> Scenario:
        """The same scenario with another seed (the CLI's --seed)."""
        if not 0 <= seed <= SEED_MAX:
            raise ScenarioError(f"seed {seed} is outside 0..{SEED_MAX}", where="--seed")
        return _replace(self, seed=seed)

    def with_name(self, name: str) -> Scenario:
        """The same scenario under another run id (a set of runs of one scenario needs one each)."""
        if not SCENARIO_NAME_PATTERN.fullmatch(name) or len(name) > SCENARIO_NAME_LENGTH_MAX:
            raise ScenarioError(f"run name {name!r} must match [A-Za-z0-9_-]+ "
                                f"(at most {SCENARIO_NAME_LENGTH_MAX} characters)", where="--name")
        return _replace(self, name=name)

    def with_messages(self, total: int) -> Scenario:
        """The scale knob (the CLI's --messages): the producers send ``total`` messages in all.

        Each producer keeps its share of the scenario's messages (the remainder goes to the first
        ones), its rate, topic and everything else; bursts in ``faults`` are left as they are.
        """
        if not self.producers:
            raise ScenarioError("the scenario has no producers to scale", where="--messages")
        if not 0 <= total <= SIM_MESSAGES_MAX:
            raise ScenarioError(f"{total} messages is outside 0..{SIM_MESSAGES_MAX}", where="--messages")
        weights = [p.messages for p in self.producers]
        if sum(weights) == 0:
            weights = [1] * len(weights)
        shares = [total * w // sum(weights) for w in weights]
        for i in range(total - sum(shares)):
            shares[i % len(shares)] += 1
        return _replace(self, scaled_messages=total,
                        producers=tuple(_replace(p, messages=n)
                                        for p, n in zip(self.producers, shares, strict=True)))


def _replace(obj: Any, **changes: Any) -> Any:
    return dataclasses.replace(obj, **changes)


# --- value parsers (public: faults and tests use them) ------------------------------------------

def parse_duration_ms(text: str, *, signed: bool = False) -> int:
    """``"1h10m"`` -> 4_200_000. Units d, h, m, s, ms, largest first, each at most once."""
    if not isinstance(text, str):
        raise ValueError("a duration is a string such as 30s, 15m or 1h10m")
    s = text.strip()
    sign = 1
    if signed and s.startswith("-"):
        sign, s = -1, s[1:]
    if s == "0":
        return 0
    pos, total, last_rank = 0, 0, -1
    order = list(DURATION_UNITS_MS)
    if not s:
        raise ValueError("empty duration")
    while pos < len(s):
        m = _DURATION.match(s, pos)
        if not m:
            raise ValueError(f"cannot read a duration at {s[pos:]!r}; use units d, h, m, s, ms")
        rank = order.index(m.group(2))
        if rank <= last_rank:
            raise ValueError("duration units must go from largest to smallest, each once")
        last_rank = rank
        total += int(m.group(1)) * DURATION_UNITS_MS[m.group(2)]
        pos = m.end()
    return sign * total


def parse_size_bytes(value: Any) -> int:
    """``"64MiB"`` -> 67108864; a bare integer is bytes."""
    if isinstance(value, bool):
        raise ValueError("a size is an integer of bytes or a string such as 64MiB")
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise ValueError("a size is an integer of bytes or a string such as 64MiB")
    m = _SIZE.fullmatch(value.strip())
    if not m:
        raise ValueError("cannot read a size; use B, KiB, MiB or GiB (e.g. 64MiB)")
    return int(m.group(1)) * SIZE_UNITS_BYTES[m.group(2)]


def parse_rate_per_s(value: Any) -> float:
    """``"1000/s"`` -> 1000.0 messages per second (also /ms, /m, /h)."""
    if not isinstance(value, str):
        raise ValueError("a rate is a string such as 1000/s, 50/m or 2/h")
    m = _RATE.fullmatch(value.strip())
    if not m:
        raise ValueError("cannot read a rate; write <count>/<unit> with unit ms, s, m or h")
    return float(m.group(1)) / RATE_UNITS_S[m.group(2)]


# --- loading -------------------------------------------------------------------------------------

def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; raise :class:`ScenarioError` naming key, value and line."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ScenarioError("scenario file not found", where=str(path)) from None
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario file: {exc.strerror}", where=str(path)) from None
    if path.is_dir():
        raise ScenarioError("scenario path is a directory, not a YAML file", where=str(path))
    if not path.is_file():
        # A FIFO, socket or device would block the read or never end: refuse it up front.
        raise ScenarioError("scenario path is not a regular file", where=str(path))
    if size > SCENARIO_FILE_BYTES_MAX:
        raise ScenarioError(f"scenario file is {size} bytes; at most {SCENARIO_FILE_BYTES_MAX}",
                            where=str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"scenario file is not UTF-8 text ({exc.reason})", where=str(path)) from None
    return load_scenario_text(text, source=str(path))


def load_scenario_text(text: str, *, source: str = "<string>") -> Scenario:
    """Validate scenario YAML given as text (``source`` names it in errors)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        raise ScenarioError(f"not valid YAML: {exc.problem or exc}", where=f"{source}:{line}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"not valid YAML: {exc}", where=source) from None
    if root is None:
        raise ScenarioError("scenario is empty; it needs at least a name", where=f"{source}:1")
    return _Reader(source).scenario(root)


# --- the node walker ----------------------------------------------------------------------------

class _Reader:
    """Walks composed YAML nodes, turning each into a checked value (errors carry the line)."""

    def __init__(self, source: str):
        self.source = source
        self._constructor = yaml.constructor.SafeConstructor()

    # errors and generic checks

    def fail(self, node: yaml.Node | None, key: str, message: str, value: Any = None) -> ScenarioError:
        line = node.start_mark.line + 1 if node is not None else 0
        shown = "" if value is None else f" {_show(value)}"
        return ScenarioError(f"{key}:{shown} {message}",
                             where=f"{self.source}:{line}")

    def scalar(self, node: yaml.Node, key: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, key, "expected a single value, not a list or mapping")
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise self.fail(node, key, f"cannot read value ({exc})") from None

    def mapping(self, node: yaml.Node, key: str, allowed: set[str]) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, key, "expected a mapping (key: value lines)")
        if node.tag != yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG:
            # Only plain mappings: a tag such as !!python/object is refused, never constructed.
            raise self.fail(node, key or "document", f"tag {node.tag} is not allowed")
        out: dict[str, yaml.Node] = {}
        for knode, vnode in node.value:
            k = self.scalar(knode, key)
            path = f"{key}.{k}" if key else str(k)
            if not isinstance(k, str):
                raise self.fail(knode, path, "keys must be names", k)
            if k not in allowed:
                raise self.fail(knode, path, "unknown key; expected one of " + ", ".join(sorted(allowed)))
            if k in out:
                raise self.fail(knode, path, "key given twice")
            out[k] = vnode
        return out

    def sequence(self, node: yaml.Node, key: str, limit: int) -> list[yaml.Node]:
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null"):
            return []
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, key, "expected a list")
        if len(node.value) > limit:
            raise self.fail(node, key, f"has {len(node.value)} entries; at most {limit}")
        return list(node.value)

    def integer(self, node: yaml.Node, key: str, lo: int, hi: int) -> int:
        v = self.scalar(node, key)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(node, key, "is not an integer", v)
        if not lo <= v <= hi:
            raise self.fail(node, key, f"is outside {lo}..{hi}", v)
        return v

    def probability(self, node: yaml.Node, key: str) -> float:
        v = self.scalar(node, key)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(node, key, "is not a number", v)
        if not 0.0 <= float(v) <= 1.0:  # also rejects NaN
            raise self.fail(node, key, "is not a probability (0..1)", v)
        return float(v)

    def string(self, node: yaml.Node, key: str, choices: tuple[str, ...] | None = None) -> str:
        v = self.scalar(node, key)
        if not isinstance(v, str):
            raise self.fail(node, key, "is not a string (quote it)", v)
        if len(v) > STRING_LENGTH_MAX:
            raise self.fail(node, key, f"is longer than {STRING_LENGTH_MAX} characters")
        if choices is not None and v not in choices:
            raise self.fail(node, key, "must be one of " + " | ".join(choices), v)
        return v

    def duration(self, node: yaml.Node, key: str, lo: int, hi: int, *, signed: bool = False) -> int:
        v = self.scalar(node, key)
        if isinstance(v, int) and not isinstance(v, bool) and v == 0:
            return 0
        if not isinstance(v, str):
            raise self.fail(node, key, "is not a duration; write e.g. 30s, 15m, 1h10m, 5ms", v)
        try:
            ms = parse_duration_ms(v, signed=signed)
        except ValueError as exc:
            raise self.fail(node, key, f"is not a duration: {exc}", v) from None
        if not lo <= ms <= hi:
            raise self.fail(node, key, f"is outside {lo}..{hi} ms", v)
        return ms

    def topic_name(self, node: yaml.Node, key: str) -> str:
        v = self.string(node, key)
        try:
            names.validate_topic(v)
        except InvalidNameError as exc:
            raise self.fail(node, key, exc.message, v) from None
        if names.is_system_topic(v) or names.group_of(v) is not None:
            raise self.fail(node, key, "is a system, retry or DLQ topic; producers cannot own it", v)
        return v

    def group_name(self, node: yaml.Node, key: str) -> str:
        v = self.string(node, key)
        try:
            names.validate_group(v)
        except InvalidNameError as exc:
            raise self.fail(node, key, exc.message, v) from None
        return v

    # sections

    def scenario(self, root: yaml.Node) -> Scenario:
        m = self.mapping(root, "", {"name", "seed", "horizon", "broker", "topics", "groups",
                                    "producers", "faults"})
        if "name" not in m:
            raise self.fail(root, "name", "is required ([A-Za-z0-9_-]+; it becomes the run id)")
        name = self.string(m["name"], "name")
        if not SCENARIO_NAME_PATTERN.fullmatch(name) or len(name) > SCENARIO_NAME_LENGTH_MAX:
            raise self.fail(m["name"], "name",
                            f"must match [A-Za-z0-9_-]+ (at most {SCENARIO_NAME_LENGTH_MAX} characters)", name)
        seed = self.integer(m["seed"], "seed", 0, SEED_MAX) if "seed" in m else 42
        horizon = (self.duration(m["horizon"], "horizon", 1, HORIZON_MS_MAX)
                   if "horizon" in m else HORIZON_MS_DEFAULT)
        broker = self.broker(m["broker"]) if "broker" in m else _default_broker()
        topics = self.topics(m.get("topics"))
        topic_names = {t.name for t in topics}
        groups = self.groups(m.get("groups"), topic_names)
        producers = self.producers(m.get("producers"), topic_names, len(broker.delay_levels_ms))
        faults = self.faults(m.get("faults"), topic_names, {g.name: g for g in groups}, horizon)
        total = sum(p.messages for p in producers) + sum(f.messages for f in faults)
        if total > SIM_MESSAGES_MAX:
            raise self.fail(m.get("producers"), "producers",
                            f"ask for {total} messages in all; at most {SIM_MESSAGES_MAX}")
        return Scenario(name=name, seed=seed, horizon_ms=horizon, broker=broker, topics=topics,
                        groups=groups, producers=producers, faults=faults, source=self.source)

    def broker(self, node: yaml.Node) -> BrokerSpec:
        m = self.mapping(node, "broker", {"name", "cluster", "store_host", "message_delay_level",
                                          "commitlog_file_size", "cq_units_per_file", "flush",
                                          "semantics"})
        d = _default_broker()
        levels_text = d.message_delay_level
        if "message_delay_level" in m:
            levels_text = self.string(m["message_delay_level"], "broker.message_delay_level")
            try:
                parse_delay_levels(levels_text)
            except BadInputError as exc:
                raise self.fail(m["message_delay_level"], "broker.message_delay_level", exc.message,
                                levels_text) from None
        size = d.commitlog_file_size_bytes
        if "commitlog_file_size" in m:
            raw = self.scalar(m["commitlog_file_size"], "broker.commitlog_file_size")
            try:
                size = parse_size_bytes(raw)
            except ValueError as exc:
                raise self.fail(m["commitlog_file_size"], "broker.commitlog_file_size", str(exc), raw) from None
            if not COMMITLOG_FILE_SIZE_BYTES_MIN <= size <= COMMITLOG_FILE_SIZE_BYTES_MAX:
                raise self.fail(m["commitlog_file_size"], "broker.commitlog_file_size",
                                f"is outside {COMMITLOG_FILE_SIZE_BYTES_MIN}..{COMMITLOG_FILE_SIZE_BYTES_MAX} bytes", raw)
        store_host = d.store_host
        if "store_host" in m:
            store_host = self.string(m["store_host"], "broker.store_host")
            if not _valid_host(store_host):
                raise self.fail(m["store_host"], "broker.store_host",
                                "is not host:port (IPv4 a.b.c.d:port or [IPv6]:port)", store_host)
        bname = d.name
        if "name" in m:
            bname = self.string(m["name"], "broker.name")
            if not SCENARIO_NAME_PATTERN.fullmatch(bname):
                raise self.fail(m["name"], "broker.name", "must match [A-Za-z0-9_-]+", bname)
        return BrokerSpec(
            name=bname,
            cluster=self.string(m["cluster"], "broker.cluster") if "cluster" in m else d.cluster,
            store_host=store_host,
            message_delay_level=levels_text,
            delay_levels_ms=parse_delay_levels(levels_text),
            commitlog_file_size_bytes=size,
            cq_units_per_file=(self.integer(m["cq_units_per_file"], "broker.cq_units_per_file",
                                            CQ_UNITS_PER_FILE_MIN, CQ_UNITS_PER_FILE_MAX)
                               if "cq_units_per_file" in m else d.cq_units_per_file),
            flush=self.string(m["flush"], "broker.flush", FLUSH_MODES) if "flush" in m else d.flush,
            semantics=(self.string(m["semantics"], "broker.semantics", SEMANTICS)
                       if "semantics" in m else d.semantics),
        )

    def topics(self, node: yaml.Node | None) -> tuple[TopicSpec, ...]:
        if node is None:
            return ()
        out, seen = [], set()
        for i, item in enumerate(self.sequence(node, "topics", TOPICS_MAX)):
            key = f"topics[{i}]"
            m = self.mapping(item, key, {"name", "queues"})
            if "name" not in m:
                raise self.fail(item, f"{key}.name", "is required")
            tname = self.topic_name(m["name"], f"{key}.name")
            if tname in seen:
                raise self.fail(m["name"], f"{key}.name", "is declared twice", tname)
            seen.add(tname)
            queues = (self.integer(m["queues"], f"{key}.queues", 1, QUEUES_PER_TOPIC_MAX)
                      if "queues" in m else 4)
            out.append(TopicSpec(tname, queues))
        return tuple(out)

    def groups(self, node: yaml.Node | None, topics: set[str]) -> tuple[GroupSpec, ...]:
        if node is None:
            return ()
        out, seen = [], set()
        for i, item in enumerate(self.sequence(node, "groups", GROUPS_MAX)):
            key = f"groups[{i}]"
            m = self.mapping(item, key, {"name", "subscribe", "model", "mode", "consumers",
                                         "max_reconsume_times", "consume_timeout", "behavior"})
            for required in ("name", "subscribe"):
                if required not in m:
                    raise self.fail(item, f"{key}.{required}", "is required")
            gname = self.group_name(m["name"], f"{key}.name")
            if gname in seen:
                raise self.fail(m["name"], f"{key}.name", "is declared twice", gname)
            seen.add(gname)
            subs = []
            for j, snode in enumerate(self.sequence(m["subscribe"], f"{key}.subscribe", TOPICS_MAX)):
                t = self.string(snode, f"{key}.subscribe[{j}]")
                if t not in topics:
                    raise self.fail(snode, f"{key}.subscribe[{j}]", "is not a declared topic", t)
                if t in subs:
                    raise self.fail(snode, f"{key}.subscribe[{j}]", "is subscribed twice", t)
                subs.append(t)
            if not subs:
                raise self.fail(m["subscribe"], f"{key}.subscribe", "needs at least one topic")
            out.append(GroupSpec(
                name=gname, subscribe=tuple(subs),
                model=self.string(m["model"], f"{key}.model", MODELS) if "model" in m else "clustering",
                mode=self.string(m["mode"], f"{key}.mode", MODES) if "mode" in m else "concurrently",
                consumers=(self.integer(m["consumers"], f"{key}.consumers", 0, CONSUMERS_PER_GROUP_MAX)
                           if "consumers" in m else 1),
                max_reconsume_times=(self.integer(m["max_reconsume_times"], f"{key}.max_reconsume_times",
                                                  -1, MAX_RECONSUME_TIMES_MAX)
                                     if "max_reconsume_times" in m else -1),
                consume_timeout_ms=(self.duration(m["consume_timeout"], f"{key}.consume_timeout", 1,
                                                  CONSUME_TIMEOUT_MS_MAX)
                                    if "consume_timeout" in m else CONSUME_TIMEOUT_MS_DEFAULT),
                behavior=self.behavior(m["behavior"], f"{key}.behavior") if "behavior" in m else BehaviorSpec(),
            ))
        return tuple(out)

    def behavior(self, node: yaml.Node, key: str) -> BehaviorSpec:
        probs = ("fail_probability", "exception_probability", "return_null_probability",
                 "hang_probability", "poison_fraction")
        m = self.mapping(node, key, {"consume_time", *probs})
        values = {p: self.probability(m[p], f"{key}.{p}") for p in probs if p in m}
        outcome_sum = sum(values.get(p, 0.0) for p in probs[:4])
        if outcome_sum > 1.0 + 1e-9:
            raise self.fail(node, key, f"fail, exception, return_null and hang probabilities add up to "
                                       f"{outcome_sum:g}; at most 1")
        consume = (self.duration(m["consume_time"], f"{key}.consume_time", 0, CONSUME_TIME_MS_MAX)
                   if "consume_time" in m else BehaviorSpec.consume_time_ms)
        return BehaviorSpec(consume_time_ms=consume, **values)

    def producers(self, node: yaml.Node | None, topics: set[str], levels: int) -> tuple[ProducerSpec, ...]:
        if node is None:
            return ()
        out = []
        for i, item in enumerate(self.sequence(node, "producers", PRODUCERS_MAX)):
            key = f"producers[{i}]"
            m = self.mapping(item, key, {"topic", "messages", "rate", "body_size", "tags", "delay_level",
                                         "send", "group", "start"})
            if "topic" not in m:
                raise self.fail(item, f"{key}.topic", "is required")
            topic = self.string(m["topic"], f"{key}.topic")
            if topic not in topics:
                raise self.fail(m["topic"], f"{key}.topic", "is not a declared topic", topic)
            body = 256
            if "body_size" in m:
                raw = self.scalar(m["body_size"], f"{key}.body_size")
                try:
                    body = parse_size_bytes(raw)
                except ValueError as exc:
                    raise self.fail(m["body_size"], f"{key}.body_size", str(exc), raw) from None
                if not 1 <= body <= BODY_SIZE_BYTES_MAX:
                    # RocketMQ's client refuses an empty body ("the message body length is zero").
                    raise self.fail(m["body_size"], f"{key}.body_size", f"is outside 1..{BODY_SIZE_BYTES_MAX} bytes", raw)
            tags: list[str] = []
            if "tags" in m:
                for j, tnode in enumerate(self.sequence(m["tags"], f"{key}.tags", TAGS_PER_PRODUCER_MAX)):
                    tag = self.string(tnode, f"{key}.tags[{j}]")
                    if not tag or len(tag) > TAG_LENGTH_MAX or "||" in tag or tag == "*":
                        raise self.fail(tnode, f"{key}.tags[{j}]", "is not a usable tag", tag)
                    tags.append(tag)
            group = "DEFAULT_PRODUCER"
            if "group" in m:
                group = self.group_name(m["group"], f"{key}.group")
            out.append(ProducerSpec(
                topic=topic,
                messages=(self.integer(m["messages"], f"{key}.messages", 0, SIM_MESSAGES_MAX)
                          if "messages" in m else 1000),
                rate_per_s=self.rate(m["rate"], f"{key}.rate") if "rate" in m else 1000.0,
                body_size=body, tags=tuple(tags),
                delay_weights=(self.delay_weights(m["delay_level"], f"{key}.delay_level", levels)
                               if "delay_level" in m else ((0, 1.0),)),
                send=self.string(m["send"], f"{key}.send", SEND_MODES) if "send" in m else "sync",
                producer_group=group,
                start_ms=self.duration(m["start"], f"{key}.start", 0, HORIZON_MS_MAX) if "start" in m else 0,
            ))
        return tuple(out)

    def rate(self, node: yaml.Node, key: str) -> float:
        raw = self.scalar(node, key)
        try:
            rate = parse_rate_per_s(raw)
        except ValueError as exc:
            raise self.fail(node, key, str(exc), raw) from None
        if not 0 < rate <= RATE_PER_S_MAX:
            raise self.fail(node, key, f"must be above 0 and at most {RATE_PER_S_MAX:g}/s", raw)
        return rate

    def delay_weights(self, node: yaml.Node, key: str, levels: int) -> tuple[tuple[int, float], ...]:
        if isinstance(node, yaml.ScalarNode):
            level = self.integer(node, key, 0, levels)
            return ((level, 1.0),)
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, key, "is a level (integer) or a weight table such as {0: 0.9, 3: 0.1}")
        table: dict[int, float] = {}
        for knode, vnode in node.value:
            level = self.integer(knode, f"{key} level", 0, levels)
            if level in table:
                raise self.fail(knode, f"{key}", "lists a level twice", level)
            w = self.scalar(vnode, f"{key}[{level}]")
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < float("inf"):
                raise self.fail(vnode, f"{key}[{level}]", "is not a weight (a number >= 0)", w)
            table[level] = float(w)
        if not table or sum(table.values()) <= 0:
            raise self.fail(node, key, "needs at least one level with a weight above 0")
        return tuple(sorted(table.items()))

    def faults(self, node: yaml.Node | None, topics: set[str], groups: dict[str, GroupSpec],
               horizon: int) -> tuple[FaultSpec, ...]:
        if node is None:
            return ()
        out = []
        for i, item in enumerate(self.sequence(node, "faults", FAULTS_MAX)):
            key = f"faults[{i}]"
            if not isinstance(item, yaml.MappingNode):
                raise self.fail(item, key, "expected a mapping such as {at: 30m, kind: broker_crash}")
            kinds = [v for k, v in item.value if isinstance(k, yaml.ScalarNode) and k.value == "kind"]
            if not kinds:
                raise self.fail(item, f"{key}.kind", "is required; one of " + ", ".join(FAULT_KINDS))
            kind = self.string(kinds[0], f"{key}.kind", FAULT_KINDS)
            timing = {"at"} if kind in INSTANT_FAULTS else {"from", "to"}
            m = self.mapping(item, key, {"kind"} | timing | _FAULT_KEYS[kind])
            for t in sorted(timing):
                if t not in m:
                    raise self.fail(item, f"{key}.{t}", f"is required for a {kind} fault")
            if kind in INSTANT_FAULTS:
                at, until = self.duration(m["at"], f"{key}.at", 0, horizon), None
            else:
                at = self.duration(m["from"], f"{key}.from", 0, horizon)
                until = self.duration(m["to"], f"{key}.to", 0, HORIZON_MS_MAX)
                if until <= at:
                    raise self.fail(m["to"], f"{key}.to", "must be after from", self.scalar(m["to"], key))
            group = None
            if "group" in m:
                group = self.string(m["group"], f"{key}.group")
                if group not in groups:
                    raise self.fail(m["group"], f"{key}.group", "is not a declared group", group)
            elif kind in ("consumer_crash", "consumer_restart", "consumer_hang"):
                raise self.fail(item, f"{key}.group", f"is required for a {kind} fault")
            consumer = 0
            if "consumer" in m:
                hi = max(groups[group].consumers - 1, 0) if group else 0
                consumer = self.integer(m["consumer"], f"{key}.consumer", 0, hi)
            topic = None
            if kind == "burst":
                if "topic" not in m:
                    raise self.fail(item, f"{key}.topic", "is required for a burst")
                topic = self.string(m["topic"], f"{key}.topic")
                if topic not in topics:
                    raise self.fail(m["topic"], f"{key}.topic", "is not a declared topic", topic)
            out.append(FaultSpec(
                kind=kind, at_ms=at, until_ms=until, group=group, consumer=consumer,
                probability=self.probability(m["probability"], f"{key}.probability") if "probability" in m else 1.0,
                delta_ms=(self.duration(m["delta"], f"{key}.delta", -HORIZON_MS_MAX, HORIZON_MS_MAX, signed=True)
                          if "delta" in m else 0),
                pause_ms=(self.duration(m["pause"], f"{key}.pause", 0, HORIZON_MS_MAX)
                          if "pause" in m else FAULT_PAUSE_MS_DEFAULT),
                topic=topic,
                messages=(self.integer(m["messages"], f"{key}.messages", 0, BURST_MESSAGES_MAX)
                          if "messages" in m else (1000 if kind == "burst" else 0)),
                rate_per_s=self.rate(m["rate"], f"{key}.rate") if "rate" in m else 1000.0,
                line=item.start_mark.line + 1,
            ))
        return tuple(out)


def _default_broker() -> BrokerSpec:
    return BrokerSpec(delay_levels_ms=parse_delay_levels(MESSAGE_DELAY_LEVEL_DEFAULT))


_HOST4 = re.compile(r"(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3}):(\d{1,5})")
_HOST6 = re.compile(r"\[([0-9a-fA-F:.]+)\]:(\d{1,5})")


def _valid_host(text: str) -> bool:
    m = _HOST4.fullmatch(text)
    if m:
        return all(int(g) <= 255 for g in m.groups()[:4]) and int(m.group(5)) <= 65535
    m = _HOST6.fullmatch(text)
    if m:
        try:
            ipaddress.IPv6Address(m.group(1))
        except ValueError:
            return False
        return int(m.group(2)) <= 65535
    return False


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."
