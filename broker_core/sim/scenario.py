"""Scenario files: YAML in, frozen dataclasses out, every mistake reported with its file and line.

The YAML is composed into nodes (not loaded straight into dicts) so that every value keeps its
source mark: the nodes become plain values plus a map from each key path to its line, pydantic
models (strict types, unknown keys forbidden) validate the values, and the first mistake becomes a
:class:`ScenarioError` naming the key path, the offending value, the file and the line. Each field
is declared once, on the result dataclass, with its YAML key and type; the models are built from
those declarations. Every field but the names has a default. PyYAML's safe loader and pydantic are the only non-standard imports of
the broker model outside export/: scenario files are inputs, and checking them precisely is worth
the dependencies. The unit parsers (durations, sizes, rates; delay levels in delay_levels.py) are
called by the models' validators.

The format is DESIGN.md's, plus a few fields with defaults: ``broker.cluster``,
``broker.cq_units_per_file`` (small values make consume-queue files roll in short runs),
``broker.timer_roll_window_slot`` (5.x ``timerRollWindowSlot``; a few slots make timers roll in short runs),
``producers[].group`` (producer group), ``producers[].start`` (when it begins sending) and
``producers[].timer`` (5.x timer messages: a delay or a weight table ``{0s: 0.8, 5s: 0.2}``) and
``producers[].recall`` (the share of them recalled at once, 5.3.2+ ``recallMessage``) and
``producers[].transaction`` (a transactional producer's decision per message: ``commit``,
``rollback``, ``unknown``, ``commit@N``/``rollback@N`` at the N-th check, or a weight table of them),
the broker's ``transaction_check_interval``, ``transaction_timeout``, ``transaction_check_max``
and ``transaction_op_batch_interval`` (docs/transactions.md), a POP
group's ``client`` (``grpc-simple``/``grpc-push``/``grpc-fifo`` through the proxy, with
``retry_max_times`` and, for the push consumers, ``retry_policy``), and the
per-kind fault fields documented in ``docs/faults.md`` (``pause``, ``consumer``, ``delta``,
``topic``/``messages``/``rate`` for a burst). Values: durations ``1h10m``/``30s``/``5ms``/``2d``
(largest unit first, each once), sizes ``64MiB`` or bytes, rates ``1000/s`` (also ``/ms``, ``/m``,
``/h``), ``delay_level`` a level or a weight table ``{0: 0.9, 3: 0.1}``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    create_model,
    model_validator,
)

from broker_core import names
from broker_core.broker.pop import POP_INVISIBLE_MS_MAX, POP_INVISIBLE_MS_MIN, POP_RETRY_DELAY_MS_MAX
from broker_core.broker.semantics import semantics_for
from broker_core.client.pop_consumer import CLIENTS as POP_CLIENTS
from broker_core.client.pop_consumer import GRPC_PUSH_CLIENTS
from broker_core.client.retry_policy import (
    CUSTOMIZED,
    EXPONENTIAL,
    RETRY_POLICY_DELAY_MS_MAX,
    RETRY_POLICY_MULTIPLIER_MAX,
    RETRY_POLICY_TYPES,
    RetryPolicy,
)
from broker_core.client.transaction_producer import answers_of
from broker_core.constants import (
    BODY_SIZE_BYTES_MAX,
    COMMITLOG_FILE_SIZE_BYTES_DEFAULT,
    CONSUME_TIMEOUT_MS_DEFAULT,
    CQ_UNITS_PER_FILE_DEFAULT,
    MESSAGE_DELAY_LEVEL_DEFAULT,
    RETRY_MAX_TIMES_DEFAULT,
    SIM_MESSAGES_MAX,
    TIMER_MAX_DELAY_MS,
    TIMER_ROLL_WINDOW_SLOT_DEFAULT,
    TIMER_ROLL_WINDOW_SLOT_MAX,
    TIMER_ROLL_WINDOW_SLOT_MIN,
    TRANSACTION_CHECK_MAX_DEFAULT,
    TRANSACTION_OP_BATCH_INTERVAL_MS_DEFAULT,
    TRANSACTION_TIMEOUT_MS_DEFAULT,
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
# Transactional messages (docs/transactions.md): the broker's check settings' ranges. An interval
# under 100 ms or a check count over 1000 is a typo; a timeout up to a day covers any real setting.
TRANSACTION_CHECK_INTERVAL_MS_MIN = 100
TRANSACTION_TIMEOUT_MS_MAX = 24 * 3600 * 1000
TRANSACTION_CHECK_MAX_MAX = 1000
TRANSACTION_OP_BATCH_INTERVAL_MS_MIN = 100

SCENARIO_COMMITLOG_FILE_SIZE_DEFAULT = 64 * 1024 * 1024  # smaller than RocketMQ's 1 GiB: many rolls

DURATION_UNITS_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
_DURATION = re.compile(r"(\d+)(ms|d|h|m|s)")
SIZE_UNITS_BYTES = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
_SIZE = re.compile(r"(\d+)\s*(B|KiB|MiB|GiB)")
RATE_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*/\s*(ms|s|m|h)")

MODELS = ("clustering", "broadcasting")
MODES = ("concurrently", "orderly", "pop")
POP_MODE = "pop"  # a 5.x remoting POP consumer group (broker_core/client/pop_consumer.py)
# Fault kinds a scenario with a POP group may ask for (besides faults naming a push group): the
# model keeps POP checkpoints and pending revives in memory (no broker stop) and plays no consumer
# faults or put failures for POP clients.
POP_FAULTS = ("burst",)
POP_RETRY_DELAYS_MAX = 32
RETRY_POLICY_DELAYS_MAX = 64  # a customized table's entries (the default has 18)
_RETRY_POLICY_KEYS = {CUSTOMIZED: {"type", "delays"}, EXPONENTIAL: {"type", "initial", "max", "multiplier"}}
_RETRY_POLICY_EXAMPLE = "expected a mapping such as {type: exponential, initial: 1s, max: 30s, multiplier: 2}"
SEND_MODES = ("sync", "async", "oneway")
FLUSH_MODES = ("async", "sync")
SEMANTICS = ("4.9", "5.x", "5.4")

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
    lines = _Lines(source)
    data = _plain(root, (), lines, yaml.constructor.SafeConstructor())
    try:
        model = _Scenario.model_validate(data, context={"levels": _level_count(data),
                                                        "horizon": _horizon(data)})
    except ValidationError as exc:
        raise _error(exc, data, lines) from None
    return _spec_of(Scenario, model, (), lines)


def _horizon(data: Any) -> int:
    """The scenario's horizon, which bounds its faults' start (a bad one is reported on its own)."""
    try:
        horizon = data.get("horizon", HORIZON_MS_DEFAULT)
        return horizon if isinstance(horizon, int) else parse_duration_ms(horizon)
    except (AttributeError, ValueError):
        return HORIZON_MS_DEFAULT


def _level_count(data: Any) -> int:
    """How many delay levels the scenario's broker has (a broken table is reported on its own)."""
    try:
        return len(parse_delay_levels(data["broker"]["message_delay_level"]))
    except (BadInputError, KeyError, TypeError):
        return len(parse_delay_levels(MESSAGE_DELAY_LEVEL_DEFAULT))


# --- YAML nodes to plain values, with the line of every key path ---------------------------------

Path_ = tuple[str | int, ...]  # a key path: ("groups", 0, "subscribe", 1)


def _key_text(path: Path_) -> str:
    """``("groups", 0, "subscribe", 1)`` -> ``groups[0].subscribe[1]`` (the name errors use)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class _Lines:
    """Where each key path stands in the file: its value's line and, for mapping keys, the key's."""

    def __init__(self, source: str):
        self.source = source
        self.value: dict[Path_, int] = {}
        self.key: dict[Path_, int] = {}

    def of(self, path: Path_, *, key: bool = False) -> int:
        if key and path in self.key:
            return self.key[path]
        # A missing key is reported on the mapping that lacks it: the longest known prefix.
        for n in range(len(path), -1, -1):
            if path[:n] in self.value:
                return self.value[path[:n]]
        return 0

    def error(self, path: Path_, message: str, value: Any = None, *, key: bool = False,
              name: str | None = None) -> ScenarioError:
        shown = "" if value is None else f" {_show(value)}"
        return ScenarioError(f"{_key_text(path) if name is None else name}:{shown} {message}",
                             where=f"{self.source}:{self.of(path, key=key)}")


class _Mapping(dict):
    """A YAML mapping as a dict, with what a dict cannot hold: its keys in the order written, each
    with the mistake it makes (a key that is not a name, a key given twice) and a refused tag.
    They are reported only where a mapping is expected: elsewhere the whole mapping is the mistake
    ("expected a single value")."""

    order: list[tuple[Any, _Problem | None]]
    tag_problem: _Problem | None


def _plain(node: yaml.Node, path: Path_, lines: _Lines, constructor: yaml.constructor.SafeConstructor) -> Any:
    """The node as dicts, lists and scalars; records the line of each key path."""
    lines.value[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out = _Mapping()
        out.order, out.tag_problem = [], None
        if node.tag != yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG:
            # Only plain mappings: a tag such as !!python/object is refused, never constructed.
            out.tag_problem = _Problem(f"tag {node.tag} is not allowed", at=path,
                                       name=_key_text(path) or "document")
        # delay_level's weight table is the one mapping keyed by numbers (levels).
        table = bool(path) and path[-1] == "delay_level"
        for knode, vnode in node.value:
            k = _scalar_node(knode, path, lines, constructor)
            lines.value.setdefault(path + (k,), knode.start_mark.line + 1)
            lines.key[path + (k,)] = knode.start_mark.line + 1
            problem = None
            if table:
                if k in out:
                    problem = _Problem("lists a level twice", k, at=path + (k,), key=True, name=_key_text(path))
            elif not isinstance(k, str):
                problem = _Problem("keys must be names", k, at=path + (k,), key=True,
                                   name=f"{_key_text(path)}.{k}" if path else str(k))
            elif k in out:
                problem = _Problem("key given twice", at=path + (k,), key=True)
            out.order.append((k, problem))
            if k not in out:
                out[k] = _plain(vnode, path + (k,), lines, constructor)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_plain(item, path + (i,), lines, constructor) for i, item in enumerate(node.value)]
    try:
        return constructor.construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        # Reported when validation reaches it: under an unknown key, the key is the mistake.
        return _Unreadable(_Problem(f"cannot read value ({exc})", at=path))


class _Unreadable:
    """A scalar YAML could not construct (an unknown tag, bad base64): the mistake it makes."""

    def __init__(self, problem: _Problem):
        self.problem = problem


def _scalar_node(node: yaml.Node, path: Path_, lines: _Lines,
                 constructor: yaml.constructor.SafeConstructor) -> Any:
    """A mapping key: a single value, constructed now (a dict needs it)."""
    if not isinstance(node, yaml.ScalarNode):
        line = node.start_mark.line + 1
        raise ScenarioError(f"{_key_text(path)}: expected a single value, not a list or mapping",
                            where=f"{lines.source}:{line}")
    try:
        return constructor.construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{_key_text(path)}: cannot read value ({exc})",
                            where=f"{lines.source}:{node.start_mark.line + 1}") from None


def _readable(values: Any) -> None:
    for v in values:
        if isinstance(v, _Unreadable):
            raise v.problem


# --- the models: types, ranges and units of every field -----------------------------------------

class _Problem(ValueError):
    """A mistake found by a validator: its message, the value to show, and where below the
    validated object it is (``sub``), when that is deeper than pydantic's own location."""

    def __init__(self, message: str, value: Any = None, sub: Path_ = (), name: str | None = None,
                 key: bool = False, at: Path_ | None = None):
        super().__init__(message)
        self.message, self.value, self.sub, self.name, self.key = message, value, sub, name, key
        self.at = at  # the whole key path, for mistakes found before validation (_plain)


def _check_keys(data: Any, allowed: set[str]) -> None:
    """A mapping's keys in the order written: each a name, known here, given once."""
    if not isinstance(data, _Mapping):
        return
    if data.tag_problem is not None:
        raise data.tag_problem
    for k, problem in data.order:
        if problem is not None and problem.message == "keys must be names":
            raise problem
        if k not in allowed:
            raise _Problem("unknown key; expected one of " + ", ".join(sorted(allowed)), sub=(k,), key=True)
        if problem is not None:
            raise problem
    _readable(data.values())


def _single(v: Any) -> Any:
    _readable([v])
    if isinstance(v, (list, dict)):
        raise _Problem("expected a single value, not a list or mapping")
    return v


def _int_in(lo: int, hi: int) -> Any:
    """A strict integer (never a bool or a string) in ``lo..hi``."""
    def check(v: int) -> int:
        if not lo <= v <= hi:
            raise _Problem(f"is outside {lo}..{hi}", v)
        return v
    return Annotated[int, AfterValidator(check)]


def _check_str(v: Any) -> str:
    if not isinstance(_single(v), str):
        raise _Problem("is not a string (quote it)", v)
    if len(v) > STRING_LENGTH_MAX:
        raise _Problem(f"is longer than {STRING_LENGTH_MAX} characters")
    return v


# Strings are strict (pydantic refuses a number or a bool); the validators add length and form.
Str = Annotated[str, AfterValidator(_check_str)]


def _choice(v: Any, choices: tuple[str, ...]) -> str:
    v = _check_str(v)
    if v not in choices:
        raise _Problem("must be one of " + " | ".join(choices), v)
    return v


def _one_of(choices: tuple[str, ...]) -> Any:
    return Annotated[str, AfterValidator(lambda v: _choice(v, choices))]


def _check_probability(v: Any) -> float:
    if isinstance(_single(v), bool) or not isinstance(v, (int, float)):
        raise _Problem("is not a number", v)
    if not 0.0 <= float(v) <= 1.0:  # also rejects NaN
        raise _Problem("is not a probability (0..1)", v)
    return float(v)


Probability = Annotated[Any, BeforeValidator(_check_probability)]


def _duration(lo: int, hi: int | None, *, signed: bool = False) -> Any:
    """A duration in ``lo..hi`` ms; ``hi=None`` is the scenario's horizon (from the context)."""
    def check(v: Any, info: ValidationInfo) -> int:
        if isinstance(_single(v), int) and not isinstance(v, bool) and v == 0:
            return 0
        if not isinstance(v, str):
            raise _Problem("is not a duration; write e.g. 30s, 15m, 1h10m, 5ms", v)
        try:
            ms = parse_duration_ms(v, signed=signed)
        except ValueError as exc:
            raise _Problem(f"is not a duration: {exc}", v) from None
        top = info.context["horizon"] if hi is None else hi
        if not lo <= ms <= top:
            raise _Problem(f"is outside {lo}..{top} ms", v)
        return ms
    return Annotated[Any, BeforeValidator(check)]


def _size(lo: int, hi: int) -> Any:
    def check(v: Any) -> int:
        _single(v)
        try:
            size = parse_size_bytes(v)
        except ValueError as exc:
            raise _Problem(str(exc), v) from None
        if not lo <= size <= hi:
            raise _Problem(f"is outside {lo}..{hi} bytes", v)
        return size
    return Annotated[Any, BeforeValidator(check)]


def _check_rate(v: Any) -> float:
    _single(v)
    try:
        rate = parse_rate_per_s(v)
    except ValueError as exc:
        raise _Problem(str(exc), v) from None
    if not 0 < rate <= RATE_PER_S_MAX:
        raise _Problem(f"must be above 0 and at most {RATE_PER_S_MAX:g}/s", v)
    return rate


Rate = Annotated[Any, BeforeValidator(_check_rate)]


def _list(limit: int) -> Any:
    """A list of at most ``limit`` entries; an empty value (``key:`` alone) is an empty list."""
    def check(v: Any) -> list:
        if v is None:
            return []
        if not isinstance(v, list):
            raise _Problem("expected a list")
        if len(v) > limit:
            raise _Problem(f"has {len(v)} entries; at most {limit}")
        _readable(v)
        return v
    return BeforeValidator(check)


def _check_topic_name(v: Any) -> str:
    v = _check_str(v)
    try:
        names.validate_topic(v)
    except InvalidNameError as exc:
        raise _Problem(exc.message, v) from None
    if names.is_system_topic(v) or names.group_of(v) is not None:
        raise _Problem("is a system, retry or DLQ topic; producers cannot own it", v)
    return v


def _check_group_name(v: Any) -> str:
    v = _check_str(v)
    try:
        names.validate_group(v)
    except InvalidNameError as exc:
        raise _Problem(exc.message, v) from None
    return v


TopicName = Annotated[str, AfterValidator(_check_topic_name)]
GroupName = Annotated[str, AfterValidator(_check_group_name)]


def _check_delay(v: Any, info: ValidationInfo) -> tuple[tuple[int, float], ...]:
    """A level or a weight table ``{level: weight}``; levels up to the broker's level count."""
    levels = info.context["levels"]
    if not isinstance(v, (dict, list)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise _Problem("is not an integer", v)
        if not 0 <= v <= levels:
            raise _Problem(f"is outside 0..{levels}", v)
        return ((v, 1.0),)
    if not isinstance(v, dict):
        raise _Problem("is a level (integer) or a weight table such as {0: 0.9, 3: 0.1}")
    table: dict[int, float] = {}
    for level, problem in getattr(v, "order", [(k, None) for k in v]):
        w = v[level]
        _readable([w])
        if isinstance(level, bool) or not isinstance(level, int):
            raise _Problem("is not an integer", level, sub=(level,), key=True, name="{key} level")
        if not 0 <= level <= levels:
            raise _Problem(f"is outside 0..{levels}", level, sub=(level,), key=True, name="{key} level")
        if problem is not None:
            raise problem
        if isinstance(w, (list, dict)):
            raise _Problem("expected a single value, not a list or mapping", sub=(level,), name=f"{{key}}[{level}]")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < float("inf"):
            raise _Problem("is not a weight (a number >= 0)", w, sub=(level,), name=f"{{key}}[{level}]")
        table[level] = float(w)
    if not table or sum(table.values()) <= 0:
        raise _Problem("needs at least one level with a weight above 0")
    return tuple(sorted(table.items()))


def _timer_ms(v: Any, **where: Any) -> int:
    if not isinstance(v, str):
        raise _Problem("is not a duration such as 3s (0s: no timer)", v, **where)
    try:
        ms = parse_duration_ms(v)
    except ValueError as exc:
        raise _Problem(str(exc), v, **where) from None
    if not 0 <= ms <= TIMER_MAX_DELAY_MS:
        raise _Problem(f"is outside 0s..{TIMER_MAX_DELAY_MS // 1000}s (the broker refuses a timer further "
                       f"ahead: timerMaxDelaySec)", v, **where)
    return ms


def _check_timer(v: Any) -> tuple[tuple[int, float], ...]:
    """A timer (``3s``) or a weight table ``{0s: 0.5, 3s: 0.3, 10s: 0.2}``; 0s means none."""
    if not isinstance(v, dict):
        return ((_timer_ms(v), 1.0),)
    table: dict[int, float] = {}
    for key, problem in getattr(v, "order", [(k, None) for k in v]):
        w = v[key]
        _readable([w])
        ms = _timer_ms(key, sub=(key,), key=True, name="{key} timer")
        if problem is not None:
            raise problem
        if ms in table:
            raise _Problem("lists a timer twice", key, sub=(key,), key=True, name="{key} timer")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < float("inf"):
            raise _Problem("is not a weight (a number >= 0)", w, sub=(key,), name=f"{{key}}[{key}]")
        table[ms] = float(w)
    if not table or sum(table.values()) <= 0:
        raise _Problem("needs at least one timer with a weight above 0")
    return tuple(sorted(table.items()))


def _decision(v: Any, **where: Any) -> str:
    if not isinstance(v, str):
        raise _Problem("is not a transaction decision (commit, rollback, unknown, commit@N, rollback@N)", v, **where)
    try:
        answers_of(v)
    except ValueError as exc:
        raise _Problem(str(exc), v, **where) from None
    return v


def _check_transaction(v: Any) -> tuple[tuple[str, float], ...]:
    """A decision (``commit``) or a weight table ``{commit: 0.6, rollback@2: 0.2, unknown: 0.2}``:
    commit or roll back at once, answer UNKNOW until the N-th check and then decide (``commit@N``),
    or never decide (``unknown``)."""
    if not isinstance(v, dict):
        return ((_decision(v), 1.0),)
    table: dict[str, float] = {}
    for key, problem in getattr(v, "order", [(k, None) for k in v]):
        w = v[key]
        _readable([w])
        _decision(key, sub=(key,), key=True, name="{key} decision")
        if problem is not None:
            raise problem
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < float("inf"):
            raise _Problem("is not a weight (a number >= 0)", w, sub=(key,), name=f"{{key}}[{key}]")
        table[key] = float(w)
    if not table or sum(table.values()) <= 0:
        raise _Problem("needs at least one decision with a weight above 0")
    return tuple(sorted(table.items()))


def _check_host(v: Any) -> str:
    v = _check_str(v)
    if not _valid_host(v):
        raise _Problem("is not host:port (IPv4 a.b.c.d:port or [IPv6]:port)", v)
    return v


def _check_broker_name(v: Any) -> str:
    v = _check_str(v)
    if not SCENARIO_NAME_PATTERN.fullmatch(v):
        raise _Problem("must match [A-Za-z0-9_-]+", v)
    return v


def _check_levels(v: Any) -> str:
    v = _check_str(v)
    try:
        parse_delay_levels(v)
    except BadInputError as exc:
        raise _Problem(exc.message, v) from None
    return v


def _check_scenario_name(v: Any) -> str:
    v = _check_str(v)
    if not SCENARIO_NAME_PATTERN.fullmatch(v) or len(v) > SCENARIO_NAME_LENGTH_MAX:
        raise _Problem(f"must match [A-Za-z0-9_-]+ (at most {SCENARIO_NAME_LENGTH_MAX} characters)", v)
    return v


class _Model(BaseModel):
    # Strict: YAML's 1 is never a string and "1" never an integer; unknown keys are mistakes.
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: Any) -> Any:
        """Unknown keys first, in the order written (before a missing key or a bad value)."""
        _check_keys(data, {f.alias or n for n, f in cls.model_fields.items()})
        return data


# --- the result, and how each field is read -----------------------------------------------------
#
# Each field of a spec is declared once, on the spec: its metadata names the YAML key it is read
# from (the field's own name unless said), the type that validates it (strict types and ranges,
# above) and, where the file's value is not yet the field's, how it becomes one. The pydantic
# model of each section is built from those declarations (_model_of) and the specs from a
# validated model (_spec_of); a section's rules across fields sit in its model's base class.

_YAML = "scenario_yaml"  # the dataclass metadata key of a field read from the scenario file
_SPEC_DEFAULT = object()  # "the model's default is the spec field's own"


@dataclass(frozen=True)
class _Key:
    """A spec field read from one YAML key."""

    annotation: Any
    key: str | None = None  # None: the field's own name
    default: Any = _SPEC_DEFAULT  # the default when the key is left out (None where "not given" matters)
    to: Callable[[Any], Any] | None = None  # the validated value -> the field's value

    def model_fields(self, f: dataclasses.Field) -> tuple[tuple[str, Any, Any], ...]:
        default = _default_of(f) if self.default is _SPEC_DEFAULT else self.default
        return ((self.key or f.name, self.annotation, default),)

    def value(self, f: dataclasses.Field, model: BaseModel, at: Path_, lines: _Lines | None) -> Any:
        value = getattr(model, self.key or f.name)
        return value if self.to is None else self.to(value)


@dataclass(frozen=True)
class _Derived:
    """A spec field computed from the validated section (and where it stands in the file)."""

    read: Callable[[Any, Path_, _Lines | None], Any]
    keys: tuple[tuple[str, Any, Any], ...] = ()  # the model fields (key, type, default) it reads

    def model_fields(self, f: dataclasses.Field) -> tuple[tuple[str, Any, Any], ...]:
        return self.keys

    def value(self, f: dataclasses.Field, model: BaseModel, at: Path_, lines: _Lines | None) -> Any:
        return self.read(model, at, lines)


def _key(annotation: Any, **how: Any) -> dict:
    return {_YAML: _Key(annotation, **how)}


def _derived(read: Callable[[Any, Path_, _Lines | None], Any], *keys: tuple[str, Any, Any]) -> dict:
    return {_YAML: _Derived(read, keys)}


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return ...  # required


def _model_of(spec: type, rules: type[_Model], name: str) -> type[_Model]:
    """The pydantic model of a spec's section: its fields' keys in the spec's order, on ``rules``."""
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(spec):
        how = f.metadata.get(_YAML)
        if how is not None:
            for key, annotation, default in how.model_fields(f):
                fields[key] = (annotation, default)
    return create_model(name, __base__=rules, __module__=__name__, **fields)


def _spec_of(spec: type, model: BaseModel, at: Path_ = (), lines: _Lines | None = None) -> Any:
    """The spec a validated section gives (``at`` is its key path in the file)."""
    return spec(**{f.name: f.metadata[_YAML].value(f, model, at, lines)
                   for f in dataclasses.fields(spec) if _YAML in f.metadata})


def _parsed_levels(model: BaseModel, at: Path_, lines: _Lines | None) -> tuple[int, ...]:
    return parse_delay_levels(model.message_delay_level)


@dataclass(frozen=True)
class BrokerSpec:
    name: str = field(default="broker-a", metadata=_key(Annotated[str, AfterValidator(_check_broker_name)]))
    cluster: str = field(default="DefaultCluster", metadata=_key(Str))
    store_host: str = field(default="10.0.0.1:10911", metadata=_key(Annotated[str, AfterValidator(_check_host)]))
    message_delay_level: str = field(default=MESSAGE_DELAY_LEVEL_DEFAULT,
                                     metadata=_key(Annotated[str, AfterValidator(_check_levels)]))
    delay_levels_ms: tuple[int, ...] = field(default=(), metadata=_derived(_parsed_levels))
    commitlog_file_size_bytes: int = field(
        default=SCENARIO_COMMITLOG_FILE_SIZE_DEFAULT,
        metadata=_key(_size(COMMITLOG_FILE_SIZE_BYTES_MIN, COMMITLOG_FILE_SIZE_BYTES_MAX), key="commitlog_file_size"))
    cq_units_per_file: int = field(default=CQ_UNITS_PER_FILE_DEFAULT,
                                   metadata=_key(_int_in(CQ_UNITS_PER_FILE_MIN, CQ_UNITS_PER_FILE_MAX)))
    flush: str = field(default="async", metadata=_key(_one_of(FLUSH_MODES)))
    semantics: str = field(default="4.9", metadata=_key(_one_of(SEMANTICS)))
    # timerRollWindowSlot (5.x): a timer this many seconds or more ahead rolls through the wheel.
    timer_roll_window_slot: int = field(
        default=TIMER_ROLL_WINDOW_SLOT_DEFAULT,
        metadata=_key(_int_in(TIMER_ROLL_WINDOW_SLOT_MIN, TIMER_ROLL_WINDOW_SLOT_MAX)))
    # Transactional messages (docs/transactions.md): transactionCheckInterval (None: the release's
    # default, 60 s for 4.9.4, 30 s for 5.x), transactionTimeOut, transactionCheckMax and 5.x's
    # transactionOpBatchInterval (a 4.9.4 broker writes each op record at once).
    transaction_check_interval_ms: int | None = field(default=None, metadata=_key(
        _duration(TRANSACTION_CHECK_INTERVAL_MS_MIN, HORIZON_MS_MAX), key="transaction_check_interval"))
    transaction_timeout_ms: int = field(default=TRANSACTION_TIMEOUT_MS_DEFAULT, metadata=_key(
        _duration(0, TRANSACTION_TIMEOUT_MS_MAX), key="transaction_timeout"))
    transaction_check_max: int = field(default=TRANSACTION_CHECK_MAX_DEFAULT,
                                       metadata=_key(_int_in(1, TRANSACTION_CHECK_MAX_MAX)))
    transaction_op_batch_interval_ms: int = field(default=TRANSACTION_OP_BATCH_INTERVAL_MS_DEFAULT, metadata=_key(
        _duration(TRANSACTION_OP_BATCH_INTERVAL_MS_MIN, HORIZON_MS_MAX), key="transaction_op_batch_interval"))


_Broker = _model_of(BrokerSpec, _Model, "_Broker")


@dataclass(frozen=True)
class TopicSpec:
    name: str = field(metadata=_key(TopicName))
    queues: int = field(default=4, metadata=_key(_int_in(1, QUEUES_PER_TOPIC_MAX)))


_Topic = _model_of(TopicSpec, _Model, "_Topic")

_OUTCOMES = ("fail_probability", "exception_probability", "return_null_probability", "hang_probability",
             "dlq_probability")


@dataclass(frozen=True)
class BehaviorSpec:
    consume_time_ms: int = field(default=5, metadata=_key(_duration(0, CONSUME_TIME_MS_MAX), key="consume_time"))
    fail_probability: float = field(default=0.0, metadata=_key(Probability))
    exception_probability: float = field(default=0.0, metadata=_key(Probability))
    return_null_probability: float = field(default=0.0, metadata=_key(Probability))
    hang_probability: float = field(default=0.0, metadata=_key(Probability))
    poison_fraction: float = field(default=0.0, metadata=_key(Probability))
    # concurrent clustering push groups: setDelayLevelWhenNextConsume(-1)
    dlq_probability: float = field(default=0.0, metadata=_key(Probability))


class _BehaviorRules(_Model):
    @model_validator(mode="after")
    def _outcomes_fit(self) -> _BehaviorRules:
        total = sum(getattr(self, p) for p in _OUTCOMES)
        if total > 1.0 + 1e-9:
            raise _Problem(f"fail, exception, return_null, hang and dlq probabilities add up to {total:g}; "
                           "at most 1")
        return self


_Behavior = _model_of(BehaviorSpec, _BehaviorRules, "_Behavior")


def _check_multiplier(v: Any) -> float:
    if isinstance(_single(v), bool) or not isinstance(v, (int, float)):
        raise _Problem("is not a number", v)
    if not 1.0 <= float(v) <= RETRY_POLICY_MULTIPLIER_MAX:  # also rejects NaN
        raise _Problem(f"is outside 1..{RETRY_POLICY_MULTIPLIER_MAX:g}", v)
    return float(v)


class _RetryPolicy(_Model):
    """A group retry policy (``groupRetryPolicy``): a customized table or an exponential backoff."""

    type: _one_of(RETRY_POLICY_TYPES)
    delays: Annotated[list[_duration(1, RETRY_POLICY_DELAY_MS_MAX)], _list(RETRY_POLICY_DELAYS_MAX)] = []
    initial: _duration(1, RETRY_POLICY_DELAY_MS_MAX) = None
    max: _duration(1, RETRY_POLICY_DELAY_MS_MAX) = None
    multiplier: Annotated[Any, BeforeValidator(_check_multiplier)] = None

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: Any) -> Any:
        """The keys a policy takes depend on its type: check the type first, then the keys."""
        if not isinstance(data, dict):
            raise _Problem(_RETRY_POLICY_EXAMPLE)
        if "type" not in data:
            raise _Problem("is required; one of " + ", ".join(RETRY_POLICY_TYPES), sub=("type",))
        try:
            kind = _choice(data["type"], RETRY_POLICY_TYPES)
        except _Problem as exc:
            exc.sub = ("type",)
            raise
        _check_keys(data, _RETRY_POLICY_KEYS[kind])
        if kind == EXPONENTIAL:
            for key in ("initial", "max", "multiplier"):
                if key not in data:
                    raise _Problem("is required for an exponential policy", sub=(key,))
        return data

    @model_validator(mode="after")
    def _fits(self) -> _RetryPolicy:
        if self.type == CUSTOMIZED and "delays" in self.model_fields_set and not self.delays:
            raise _Problem("needs at least one delay (leave it out for the delay-level table)", sub=("delays",))
        if self.type == EXPONENTIAL and self.max < self.initial:
            raise _Problem("must not be less than initial", _RAW, sub=("max",))
        return self

    def to_policy(self) -> RetryPolicy:
        if self.type == EXPONENTIAL:
            return RetryPolicy(EXPONENTIAL, initial_ms=self.initial, max_ms=self.max, multiplier=self.multiplier)
        return RetryPolicy(CUSTOMIZED, delays_ms=tuple(self.delays)) if self.delays else RetryPolicy()


@dataclass(frozen=True)
class GroupSpec:
    name: str = field(metadata=_key(GroupName))
    subscribe: tuple[str, ...] = field(metadata=_key(Annotated[list[Str], _list(TOPICS_MAX)], to=tuple))
    model: str = field(default="clustering", metadata=_key(_one_of(MODELS)))
    mode: str = field(default="concurrently", metadata=_key(_one_of(MODES)))
    consumers: int = field(default=1, metadata=_key(_int_in(0, CONSUMERS_PER_GROUP_MAX)))
    max_reconsume_times: int = field(default=-1, metadata=_key(_int_in(-1, MAX_RECONSUME_TIMES_MAX)))
    consume_timeout_ms: int = field(default=CONSUME_TIMEOUT_MS_DEFAULT,
                                    metadata=_key(_duration(1, CONSUME_TIMEOUT_MS_MAX), key="consume_timeout"))
    behavior: BehaviorSpec = field(default_factory=BehaviorSpec, metadata=_key(
        _Behavior, default=_Behavior(), to=lambda b: _spec_of(BehaviorSpec, b)))
    # POP groups: popInvisibleTime (None: the client's default)
    invisible_ms: int | None = field(default=None, metadata=_key(
        _duration(POP_INVISIBLE_MS_MIN, POP_INVISIBLE_MS_MAX), key="invisible_time"))
    # POP groups: popDelayLevel (empty: the client's default)
    retry_delays_ms: tuple[int, ...] = field(default=(), metadata=_key(
        Annotated[list[_duration(1, POP_RETRY_DELAY_MS_MAX)], _list(POP_RETRY_DELAYS_MAX)], key="retry_delays",
        to=tuple))
    # POP groups: the remoting client, or grpc-simple / grpc-push through the proxy
    client: str = field(default="remoting", metadata=_key(_one_of(POP_CLIENTS)))
    # gRPC groups: the subscription group's retryMaxTimes
    retry_max_times: int = field(default=RETRY_MAX_TIMES_DEFAULT, metadata=_key(_int_in(0, MAX_RECONSUME_TIMES_MAX)))
    # grpc-push groups: the group retry policy
    retry_policy: RetryPolicy = field(default=RetryPolicy(), metadata=_key(
        _RetryPolicy, default=None, to=lambda p: p.to_policy() if p is not None else RetryPolicy()))


class _GroupRules(_Model):
    @model_validator(mode="after")
    def _subscriptions(self) -> _GroupRules:
        if not self.subscribe:
            raise _Problem("needs at least one topic", sub=("subscribe",))
        for j, t in enumerate(self.subscribe):
            if t in self.subscribe[:j]:
                raise _Problem("is subscribed twice", t, sub=("subscribe", j))
        if self.mode != POP_MODE:
            for key in ("invisible_time", "retry_delays", "client"):
                if key in self.model_fields_set:
                    raise _Problem("is a POP group's setting (mode: pop)", sub=(key,))
        grpc = self.client != "remoting"
        if not grpc:
            for key in ("retry_max_times", "retry_policy"):
                if key in self.model_fields_set:
                    raise _Problem("is a gRPC group's setting (mode: pop, client: grpc-simple, grpc-push "
                                   "or grpc-fifo): "
                                   "the proxy reads it from the broker's subscription group", sub=(key,))
        else:
            # A gRPC client has no maximum and no delay table of its own: the proxy gives it the
            # group's retryMaxTimes + 1 and, to a push consumer, the group's retry policy.
            for key, use in (("max_reconsume_times", "retry_max_times"), ("retry_delays", "retry_policy")):
                if key in self.model_fields_set:
                    raise _Problem(f"is a remoting client's setting; a gRPC group has {use}", sub=(key,))
            if self.client in GRPC_PUSH_CLIENTS and "invisible_time" in self.model_fields_set:
                raise _Problem("is the proxy's 60 s for a gRPC push consumer (it asks for auto renewal)",
                               sub=("invisible_time",))
            if self.client not in GRPC_PUSH_CLIENTS and "retry_policy" in self.model_fields_set:
                raise _Problem("is a gRPC push consumer's setting (client: grpc-push or grpc-fifo): a SimpleConsumer's "
                               "failure waits out its invisible duration", sub=("retry_policy",))
        if "dlq_probability" in self.behavior.model_fields_set and \
                (self.mode != "concurrently" or self.model != "clustering"):
            # Only ConsumeConcurrentlyContext has a delay level for the send-back; an orderly
            # context has none, a broadcasting consumer drops failures, a POP client acks or
            # changes the invisible time.
            kind = {"orderly": "an orderly", POP_MODE: "a POP"}.get(self.mode, "a broadcasting")
            raise _Problem("is a concurrent clustering push group's setting (setDelayLevelWhenNextConsume(-1)); "
                           f"{kind} group has no delay level to send back", self.behavior.dlq_probability,
                           sub=("behavior", "dlq_probability"))
        if self.mode != POP_MODE:
            return self
        if self.model != "clustering":
            raise _Problem("a POP group is a clustering group", self.model, sub=("model",))
        if self.behavior.hang_probability > 0:
            raise _Problem("is not modelled for a POP group (a listener past its invisible time)",
                           self.behavior.hang_probability, sub=("behavior", "hang_probability"))
        return self



_Group = _model_of(GroupSpec, _GroupRules, "_Group")


def consumer_id(group: str, index: int) -> str:
    """The client id of consumer ``index`` of ``group`` (stable: faults name consumers by index)."""
    return f"{group}-c{index}"


def _check_tag(v: Any) -> str:
    v = _check_str(v)
    if not v or len(v) > TAG_LENGTH_MAX or "||" in v or v == "*":
        raise _Problem("is not a usable tag", v)
    return v


@dataclass(frozen=True)
class ProducerSpec:
    topic: str = field(metadata=_key(Str))
    messages: int = field(default=1000, metadata=_key(_int_in(0, SIM_MESSAGES_MAX)))
    rate_per_s: float = field(default=1000.0, metadata=_key(Rate, key="rate"))
    # RocketMQ's client refuses an empty body ("the message body length is zero").
    body_size: int = field(default=256, metadata=_key(_size(1, BODY_SIZE_BYTES_MAX)))
    tags: tuple[str, ...] = field(default=(), metadata=_key(
        Annotated[list[Annotated[str, AfterValidator(_check_tag)]], _list(TAGS_PER_PRODUCER_MAX)], to=tuple))
    # (level, weight); 0 = not delayed
    delay_weights: tuple[tuple[int, float], ...] = field(default=((0, 1.0),), metadata=_key(
        Annotated[Any, BeforeValidator(_check_delay)], key="delay_level"))
    # 5.x timer messages (setDelayTimeMs): (timer ms, weight); 0 = no timer. In the file a delay or
    # a weight table of delays, 0s for none.
    timer_weights: tuple[tuple[int, float], ...] = field(default=((0, 1.0),), metadata=_key(
        Annotated[Any, BeforeValidator(_check_timer)], key="timer"))
    # 5.x recallMessage: the share of its timer messages the producer recalls as soon as sent.
    recall_fraction: float = field(default=0.0, metadata=_key(Probability, key="recall"))
    # A transactional producer (TransactionMQProducer): its listener's decision per message, a
    # weight table of decisions (commit, rollback, unknown, commit@N, rollback@N); empty: plain sends.
    transaction_weights: tuple[tuple[str, float], ...] = field(default=(), metadata=_key(
        Annotated[Any, BeforeValidator(_check_transaction)], key="transaction"))
    send: str = field(default="sync", metadata=_key(_one_of(SEND_MODES)))
    producer_group: str = field(default="DEFAULT_PRODUCER", metadata=_key(GroupName, key="group"))
    start_ms: int = field(default=0, metadata=_key(_duration(0, HORIZON_MS_MAX), key="start"))


_Producer = _model_of(ProducerSpec, _Model, "_Producer")

_FAULT_EXAMPLE = "expected a mapping such as {at: 30m, kind: broker_crash}"


def _burst_messages(f: BaseModel) -> int:
    if f.messages is not None:
        return f.messages
    return 1000 if f.kind == "burst" else 0


@dataclass(frozen=True)
class FaultSpec:
    kind: str = field(metadata=_key(_one_of(FAULT_KINDS)))
    # start (instant faults: the moment, ``at``; windows: ``from``)
    at_ms: int = field(metadata=_derived(
        lambda f, at, lines: f.at if f.kind in INSTANT_FAULTS else f.from_,
        ("at", _duration(0, None), None), ("from_", _duration(0, None), Field(default=None, alias="from"))))
    # end of a window (``to``); None for instant faults
    until_ms: int | None = field(default=None, metadata=_derived(
        lambda f, at, lines: None if f.kind in INSTANT_FAULTS else f.to, ("to", _duration(0, HORIZON_MS_MAX), None)))
    group: str | None = field(default=None, metadata=_key(Str))
    # the range is the group's consumers (see _references)
    consumer: int = field(default=0, metadata=_key(_int_in(-SEED_MAX, SEED_MAX), default=None, to=lambda c: c or 0))
    probability: float = field(default=1.0, metadata=_key(Probability))
    delta_ms: int = field(default=0, metadata=_key(_duration(-HORIZON_MS_MAX, HORIZON_MS_MAX, signed=True),
                                                    key="delta"))
    pause_ms: int = field(default=FAULT_PAUSE_MS_DEFAULT, metadata=_key(_duration(0, HORIZON_MS_MAX), key="pause"))
    topic: str | None = field(default=None, metadata=_key(Str))
    messages: int = field(default=0, metadata=_derived(
        lambda f, at, lines: _burst_messages(f), ("messages", _int_in(0, BURST_MESSAGES_MAX), None)))
    rate_per_s: float = field(default=1000.0, metadata=_key(Rate, key="rate"))
    # where the fault was declared, for messages about it
    line: int = field(default=0, metadata=_derived(lambda f, at, lines: lines.of(at)))


class _FaultRules(_Model):
    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: Any) -> Any:
        """The keys a fault takes depend on its kind: check the kind first, then the keys."""
        if not isinstance(data, dict):
            raise _Problem(_FAULT_EXAMPLE)
        if "kind" not in data:
            raise _Problem("is required; one of " + ", ".join(FAULT_KINDS), sub=("kind",))
        try:
            kind = _choice(data["kind"], FAULT_KINDS)
        except _Problem as exc:
            exc.sub = ("kind",)
            raise
        timing = {"at"} if kind in INSTANT_FAULTS else {"from", "to"}
        _check_keys(data, {"kind"} | timing | _FAULT_KEYS[kind])
        for t in sorted(timing):
            if t not in data:
                raise _Problem(f"is required for a {kind} fault", sub=(t,))
        if kind == "burst" and "topic" not in data:
            raise _Problem("is required for a burst", sub=("topic",))
        if "group" not in data and kind in ("consumer_crash", "consumer_restart", "consumer_hang"):
            raise _Problem(f"is required for a {kind} fault", sub=("group",))
        return data

    @model_validator(mode="after")
    def _window(self) -> _FaultRules:
        if self.from_ is not None and self.to is not None and self.to <= self.from_:
            raise _Problem("must be after from", _RAW, sub=("to",))
        return self


_Fault = _model_of(FaultSpec, _FaultRules, "_Fault")

_RAW = object()  # "show the value as written in the file" (filled in from the plain data)


def _sections(spec: type, key: str) -> Callable[[Any, Path_, _Lines | None], tuple]:
    """How a list of sections (topics, groups, ...) becomes a tuple of their specs."""
    return lambda model, at, lines: tuple(_spec_of(spec, item, (*at, key, i), lines)
                                          for i, item in enumerate(getattr(model, key)))


@dataclass(frozen=True)
class Scenario:
    name: str = field(metadata=_key(Annotated[str, AfterValidator(_check_scenario_name)]))
    seed: int = field(default=42, metadata=_key(_int_in(0, SEED_MAX)))
    horizon_ms: int = field(default=HORIZON_MS_DEFAULT, metadata=_key(_duration(1, HORIZON_MS_MAX), key="horizon"))
    broker: BrokerSpec = field(default_factory=BrokerSpec, metadata=_derived(
        lambda s, at, lines: _spec_of(BrokerSpec, s.broker, (*at, "broker"), lines), ("broker", _Broker, _Broker())))
    topics: tuple[TopicSpec, ...] = field(default=(), metadata=_derived(
        _sections(TopicSpec, "topics"), ("topics", Annotated[list[_Topic], _list(TOPICS_MAX)], [])))
    groups: tuple[GroupSpec, ...] = field(default=(), metadata=_derived(
        _sections(GroupSpec, "groups"), ("groups", Annotated[list[_Group], _list(GROUPS_MAX)], [])))
    producers: tuple[ProducerSpec, ...] = field(default=(), metadata=_derived(
        _sections(ProducerSpec, "producers"), ("producers", Annotated[list[_Producer], _list(PRODUCERS_MAX)], [])))
    faults: tuple[FaultSpec, ...] = field(default=(), metadata=_derived(
        _sections(FaultSpec, "faults"), ("faults", Annotated[list[_Fault], _list(FAULTS_MAX)], [])))
    source: str = field(default="<string>", metadata=_derived(lambda s, at, lines: lines.source))
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

    def with_semantics(self, semantics: str) -> Scenario:
        """The same scenario under another broker rule set ("4.9", "5.x"): a conformance run
        plays the model with the rules of the release it runs against."""
        if semantics not in SEMANTICS:
            raise ScenarioError(f"broker semantics {semantics!r} is not one of {', '.join(SEMANTICS)}",
                                where="broker.semantics")
        if not semantics_for(semantics).timer_wheel():
            for i, p in enumerate(self.producers):
                if any(ms > 0 and w > 0 for ms, w in p.timer_weights):
                    raise ScenarioError(f"producers[{i}].timer: RocketMQ {semantics} has no timer messages",
                                        where=f"{self.source}: broker.semantics")
        if not semantics_for(semantics).pop_consumption():
            for i, g in enumerate(self.groups):
                if g.mode == POP_MODE:
                    raise ScenarioError(f"groups[{i}].mode: RocketMQ {semantics} has no POP consumption",
                                        where=f"{self.source}: broker.semantics")
        unmodelled = semantics_for(semantics).unmodelled_faults()
        for i, f in enumerate(self.faults):
            if f.kind in unmodelled:
                raise ScenarioError(f"faults[{i}].kind: {f.kind!r} is not modelled under broker semantics "
                                    f"{semantics!r}: {unmodelled[f.kind]}", where=f"{self.source}:{f.line}")
        return _replace(self, broker=_replace(self.broker, semantics=semantics))

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


class _ScenarioRules(_Model):
    @model_validator(mode="after")
    def _references(self) -> _ScenarioRules:
        """What one section says about another: names declared once, references to declared
        names, consumers the group has, messages in all."""
        topics: set[str] = set()
        for i, t in enumerate(self.topics):
            if t.name in topics:
                raise _Problem("is declared twice", t.name, sub=("topics", i, "name"))
            topics.add(t.name)
        groups: dict[str, _Group] = {}
        for i, g in enumerate(self.groups):
            if g.name in groups:
                raise _Problem("is declared twice", g.name, sub=("groups", i, "name"))
            groups[g.name] = g
            for j, t in enumerate(g.subscribe):
                if t not in topics:
                    raise _Problem("is not a declared topic", t, sub=("groups", i, "subscribe", j))
        semantics = semantics_for(self.broker.semantics)
        pop_groups = [g.name for g in self.groups if g.mode == POP_MODE]
        for i, g in enumerate(self.groups):
            if g.mode == POP_MODE and not semantics.pop_consumption():
                raise _Problem(f"needs broker semantics '5.x': RocketMQ {self.broker.semantics} has no POP "
                               f"consumption", g.mode, sub=("groups", i, "mode"))
        if self.broker.timer_roll_window_slot != TIMER_ROLL_WINDOW_SLOT_DEFAULT and not semantics.timer_wheel():
            raise _Problem(f"needs broker semantics '5.x': RocketMQ {self.broker.semantics} has no timer wheel",
                           self.broker.timer_roll_window_slot, sub=("broker", "timer_roll_window_slot"))
        timers = False
        for i, p in enumerate(self.producers):
            if p.topic not in topics:
                raise _Problem("is not a declared topic", p.topic, sub=("producers", i, "topic"))
            if any(ms > 0 and w > 0 for ms, w in p.timer):
                timers = True
                if not semantics.timer_wheel():
                    raise _Problem(f"needs broker semantics '5.x': RocketMQ {self.broker.semantics} has no "
                                   f"timer messages (it stores them at once, the timer unread)",
                                   sub=("producers", i, "timer"))
                if any(level > 0 and w > 0 for level, w in p.delay_level):
                    raise _Problem("cannot be combined with delay_level: a delay level clears a message's "
                                   "timer (HookUtils.checkIfTimerMessage)", sub=("producers", i, "timer"))
            elif p.recall > 0:
                raise _Problem("needs timer messages to recall (producers[].timer): only a message in the "
                               "timer wheel has a recall handle", p.recall, sub=("producers", i, "recall"))
            if p.transaction:
                if p.send != "sync":
                    raise _Problem("is sync for a transactional producer: sendMessageInTransaction sends "
                                   "synchronously", p.send, sub=("producers", i, "send"))
                if any(ms > 0 and w > 0 for ms, w in p.timer):
                    raise _Problem("cannot be combined with timer: a timer on a half message is not modelled",
                                   sub=("producers", i, "transaction"))
        unmodelled = semantics_for(self.broker.semantics).unmodelled_faults()
        for i, f in enumerate(self.faults):
            here = ("faults", i)
            if f.kind in unmodelled:
                raise _Problem(f"is not modelled under broker semantics {self.broker.semantics!r}: "
                               f"{unmodelled[f.kind]}", f.kind, sub=(*here, "kind"))
            if pop_groups and f.kind not in POP_FAULTS and (f.group is None or f.group in pop_groups):
                raise _Problem(f"is not modelled with POP groups ({', '.join(pop_groups)}): the model keeps "
                               f"checkpoints and pending revives in memory and plays no fault but a burst "
                               f"or one naming a push group", f.kind, sub=(*here, "kind"))
            if timers and f.kind == "broker_restart":
                raise _Problem("is not modelled with timer messages: the model keeps pending timers in "
                               "memory, not in the wheel's files (timerlog, timerwheel)", f.kind,
                               sub=(*here, "kind"))
            if f.group is not None and f.group not in groups:
                raise _Problem("is not a declared group", f.group, sub=(*here, "group"))
            if f.consumer is not None:
                hi = max(groups[f.group].consumers - 1, 0) if f.group else 0
                if not 0 <= f.consumer <= hi:
                    raise _Problem(f"is outside 0..{hi}", f.consumer, sub=(*here, "consumer"))
            if f.topic is not None and f.topic not in topics:
                raise _Problem("is not a declared topic", f.topic, sub=(*here, "topic"))
        total = sum(p.messages for p in self.producers) + sum(_burst_messages(f) for f in self.faults)
        if total > SIM_MESSAGES_MAX:
            raise _Problem(f"ask for {total} messages in all; at most {SIM_MESSAGES_MAX}", sub=("producers",))
        return self



_Scenario = _model_of(Scenario, _ScenarioRules, "_Scenario")


# What pydantic's own error types say, in the words the rest of the loader uses. A type error
# shows the value; a list or mapping where one value belongs is its own mistake.
_TYPE_MESSAGES = {"int_type": "is not an integer", "string_type": "is not a string (quote it)"}
_PYDANTIC_MESSAGES = {
    "model_type": "expected a mapping (key: value lines)",
    "dict_type": "expected a mapping (key: value lines)",
    "list_type": "expected a list",
}


def _error(exc: ValidationError, data: dict, lines: _Lines) -> ScenarioError:
    """The first of pydantic's errors as a ScenarioError naming key path, value and line."""
    err = exc.errors(include_url=False)[0]
    loc: Path_ = tuple("from" if p == "from_" else p for p in err["loc"])
    problem = (err.get("ctx") or {}).get("error")
    if isinstance(problem, _Problem):
        return _error_of_problem(problem, loc, data, lines)
    value = err.get("input")
    if isinstance(value, _Unreadable):
        return _error_of_problem(value.problem, loc, data, lines)
    if err["type"] in _TYPE_MESSAGES:
        if isinstance(value, (list, dict)):
            return lines.error(loc, "expected a single value, not a list or mapping")
        return lines.error(loc, _TYPE_MESSAGES[err["type"]], value)
    if err["type"] == "missing":
        if loc == ("name",):
            return lines.error(loc, "is required ([A-Za-z0-9_-]+; it becomes the run id)")
        return lines.error(loc, "is required")
    if err["type"] == "extra_forbidden":
        model = _model_at(loc[:-1])
        allowed = sorted(f.alias or n for n, f in model.model_fields.items())
        return lines.error(loc, "unknown key; expected one of " + ", ".join(allowed), key=True)
    message = _PYDANTIC_MESSAGES.get(err["type"], err["msg"])
    return lines.error(loc, message)


def _error_of_problem(problem: _Problem, loc: Path_, data: Any, lines: _Lines) -> ScenarioError:
    path = problem.at if problem.at is not None else loc + problem.sub
    value = _lookup(data, path) if problem.value is _RAW else problem.value
    name = problem.name.replace("{key}", _key_text(path[:-1])) if problem.name else None
    return lines.error(path, problem.message, value, key=problem.key, name=name)


def _lookup(data: Any, path: Path_) -> Any:
    for part in path:
        data = data[part]
    return data


def _model_at(path: Path_) -> type[BaseModel]:
    model: type[BaseModel] = _Scenario
    for part in path:
        if isinstance(part, int):
            continue
        annotation = model.model_fields[part].annotation
        inner = getattr(annotation, "__args__", None)
        model = inner[0] if inner and isinstance(inner[0], type) else annotation
    return model


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
