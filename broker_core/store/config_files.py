"""The broker's JSON config files (``<root>/config/*.json``) as RocketMQ 4.9.4 reads and writes them.

RocketMQ serializes these files with fastjson 1.x in PrettyFormat (§3.1): tab
indentation, no space after ``:``, bean properties sorted alphabetically, and ``Integer`` map keys
written *unquoted* (``{3:22,4:8\n\t}``), which is not standard JSON. This module reads both that
dialect and standard JSON with a small parser of its own (no ``eval``, no pickle), so a damaged file
is reported with its exact position, and writes the fastjson layout byte for byte.

Writes follow 4.9.4's ``MixAll.string2File`` (``.tmp``, previous content to ``.bak``, replace),
with one change: the replace is atomic (``os.replace``), so no reader sees the file missing. Like
string2File, and like the commit log's flush here, nothing is fsynced: the model's crashes are
kill -9s, which lose only what the process had not written (docs/decisions.md). Loads follow ``ConfigManager.load``:
a missing, empty or undecodable file falls back to ``<file>.bak``; neither file is an empty state.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_core.constants import PERM_READ, PERM_WRITE, RETRY_MAX_TIMES_DEFAULT, RETRY_QUEUES_DEFAULT
from broker_core.errors import CorruptStoreError

# File names inside <root>/config (BrokerPathConfigHelper, StorePathConfigHelper).
DELAY_OFFSET_FILE = "delayOffset.json"
CONSUMER_OFFSET_FILE = "consumerOffset.json"
# A broker with enableLmq keeps every consumer offset here instead (LmqConsumerOffsetManager's
# configFilePath): its offsetTable as consumerOffset.json's, and an lmqOffsetTable of the offsets
# LMQ groups (named %LMQ%...) committed on LMQ queues, "topic@group" -> offset in queue 0.
LMQ_CONSUMER_OFFSET_FILE = "lmqConsumerOffset.json"
TOPICS_FILE = "topics.json"
SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"
CONFIG_FILES = (TOPICS_FILE, SUBSCRIPTION_GROUP_FILE, CONSUMER_OFFSET_FILE, DELAY_OFFSET_FILE,
                LMQ_CONSUMER_OFFSET_FILE)
BAK_SUFFIX = ".bak"
TMP_SUFFIX = ".tmp"
TOPIC_GROUP_SEPARATOR = "@"  # ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR
BROADCAST_OFFSET_SUFFIX = "@broadcast"  # 5.x: a broadcasting group's offsets kept by the broker

# A config file larger than this is refused rather than read into memory: even a broker with
# tens of thousands of groups and queues writes consumerOffset.json well below it.
CONFIG_FILE_BYTES_MAX = 512 * 1024 * 1024
# Deeper nesting than this never occurs in RocketMQ's files; the bound keeps the parser's
# recursion finite on hostile input.
CONFIG_JSON_DEPTH_MAX = 64

# TopicConfig defaults (CM/TopicConfig.java, §3.4).
TOPIC_CONFIG_QUEUES_DEFAULT = 16  # defaultReadQueueNums / defaultWriteQueueNums
TOPIC_CONFIG_PERM_DEFAULT = PERM_READ | PERM_WRITE
TOPIC_FILTER_TYPE_DEFAULT = "SINGLE_TAG"
# SubscriptionGroupConfig defaults (CM/subscription/SubscriptionGroupConfig.java, §3.5).
GROUP_BROKER_ID_DEFAULT = 0  # MixAll.MASTER_ID
GROUP_WHICH_BROKER_WHEN_CONSUME_SLOWLY_DEFAULT = 1


class ConfigFileError(CorruptStoreError):
    """A config file that is neither standard JSON nor fastjson's dialect, or has the wrong shape."""

    def __init__(self, message: str, *, path: Path, offset: int | None = None,
                 line: int | None = None, column: int | None = None):
        self.path = Path(path)
        self.offset = offset
        self.line = line
        self.column = column
        where = str(path)
        if line is not None:
            where = f"{where}:{line}:{column} (char {offset})"
        super().__init__(message, where=where,
                         hint=f"fix or remove the file; {self.path.name}{BAK_SUFFIX} is read when it is absent")


# --------------------------------------------------------------------------------------------
# Reading: standard JSON plus fastjson's unquoted integer keys
# --------------------------------------------------------------------------------------------

_WS = frozenset(" \t\r\n")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_INT_KEY = re.compile(r"-?\d+")
_LITERALS = {"true": True, "false": False, "null": None}


class _SyntaxError(Exception):
    def __init__(self, reason: str, pos: int):
        self.reason = reason
        self.pos = pos
        super().__init__(reason)


class _Parser:
    """Recursive descent over one document; object keys are ``str`` or, when bare, ``int``."""

    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def skip_ws(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text) and text[pos] in _WS:
            pos += 1
        self.pos = pos

    def document(self) -> Any:
        self.skip_ws()
        value = self.value(0)
        self.skip_ws()
        if self.pos != len(self.text):
            raise _SyntaxError("unexpected text after the end of the document", self.pos)
        return value

    def value(self, depth: int) -> Any:
        if depth > CONFIG_JSON_DEPTH_MAX:
            raise _SyntaxError(f"nesting deeper than {CONFIG_JSON_DEPTH_MAX}", self.pos)
        if self.pos >= len(self.text):
            raise _SyntaxError("unexpected end of file, expected a value", self.pos)
        ch = self.text[self.pos]
        if ch == "{":
            return self.obj(depth + 1)
        if ch == "[":
            return self.array(depth + 1)
        if ch == '"':
            return self.string()
        for word, val in _LITERALS.items():
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return val
        match = _NUMBER.match(self.text, self.pos)
        if match:
            self.pos = match.end()
            token = match.group()
            return int(token) if token.lstrip("-").isdigit() else float(token)
        raise _SyntaxError(f"expected a value, found {ch!r}", self.pos)

    def string(self) -> str:
        try:
            value, end = json.decoder.scanstring(self.text, self.pos + 1, True)
        except json.JSONDecodeError as exc:
            raise _SyntaxError(exc.msg, exc.pos) from None
        self.pos = end
        return value

    def key(self) -> str | int:
        if self.pos < len(self.text) and self.text[self.pos] == '"':
            return self.string()
        # fastjson writes non-String map keys (Integer queue ids and delay levels) bare.
        match = _INT_KEY.match(self.text, self.pos)
        if not match:
            found = self.text[self.pos] if self.pos < len(self.text) else "end of file"
            raise _SyntaxError(f"expected a quoted or integer key, found {found!r}", self.pos)
        self.pos = match.end()
        return int(match.group())

    def expect(self, ch: str, what: str) -> None:
        self.skip_ws()
        if self.pos >= len(self.text) or self.text[self.pos] != ch:
            found = repr(self.text[self.pos]) if self.pos < len(self.text) else "end of file"
            raise _SyntaxError(f"expected {what}, found {found}", self.pos)
        self.pos += 1

    def obj(self, depth: int) -> dict:
        self.pos += 1
        result: dict = {}
        self.skip_ws()
        if self.pos < len(self.text) and self.text[self.pos] == "}":
            self.pos += 1
            return result
        while True:
            self.skip_ws()
            key = self.key()
            self.expect(":", "':' after a key")
            self.skip_ws()
            result[key] = self.value(depth)
            self.skip_ws()
            if self.pos < len(self.text) and self.text[self.pos] == ",":
                self.pos += 1
                continue
            self.expect("}", "',' or '}' in an object")
            return result

    def array(self, depth: int) -> list:
        self.pos += 1
        result: list = []
        self.skip_ws()
        if self.pos < len(self.text) and self.text[self.pos] == "]":
            self.pos += 1
            return result
        while True:
            self.skip_ws()
            result.append(self.value(depth))
            self.skip_ws()
            if self.pos < len(self.text) and self.text[self.pos] == ",":
                self.pos += 1
                continue
            self.expect("]", "',' or ']' in an array")
            return result


def parse_config_json(text: str, path: Path | str = "<text>") -> Any:
    """Parse standard JSON or fastjson's dialect; bare integer object keys become ``int`` keys."""
    try:
        return _Parser(text).document()
    except _SyntaxError as exc:
        line = text.count("\n", 0, exc.pos) + 1
        column = exc.pos - (text.rfind("\n", 0, exc.pos) + 1) + 1
        raise ConfigFileError(f"invalid JSON: {exc.reason}", path=Path(path), offset=exc.pos,
                              line=line, column=column) from None


# --------------------------------------------------------------------------------------------
# Writing: fastjson 1.2.x PrettyFormat
# --------------------------------------------------------------------------------------------

class Bean(dict):
    """A dict serialized as a Java bean: properties sorted by name, each on its own line.

    Plain dicts are serialized as Java maps (MapSerializer), which keep their entry order and
    put no line break before integer keys.
    """


def to_fastjson(value: Any) -> str:
    """Serialize like ``JSON.toJSONString(value, prettyFormat=true)`` in fastjson 1.2.x."""
    out: list[str] = []
    _write(value, out, 0)
    return "".join(out)


def _newline(out: list[str], indent: int) -> None:
    out.append("\n" + "\t" * indent)


def _write(value: Any, out: list[str], indent: int) -> None:
    if isinstance(value, Bean):
        # JavaBeanSerializer: alphabetical properties, null ones omitted, newline before each.
        items = sorted(((k, v) for k, v in value.items() if v is not None), key=lambda kv: str(kv[0]))
        out.append("{")
        for i, (name, item) in enumerate(items):
            if i:
                out.append(",")
            _newline(out, indent + 1)
            out.append(json.dumps(name, ensure_ascii=False) + ":")
            _write(item, out, indent + 1)
        if items:
            _newline(out, indent)
        out.append("}")
    elif isinstance(value, Mapping):
        # MapSerializer: String keys start a new line, other keys (Integer) follow the comma
        # directly and are written bare; a non-empty map closes on a new line.
        entries = list(value.items())
        if all(isinstance(k, int) and not isinstance(k, bool) for k, _ in entries):
            # Java's HashMap iterates small non-negative Integer keys in ascending order.
            entries.sort(key=lambda kv: kv[0])
        out.append("{")
        first = True
        for key, item in entries:
            if item is None:
                continue
            if not first:
                out.append(",")
            first = False
            if isinstance(key, str):
                _newline(out, indent + 1)
                out.append(json.dumps(key, ensure_ascii=False) + ":")
            else:
                assert isinstance(key, int) and not isinstance(key, bool), f"map key {key!r}"
                out.append(f"{key}:")
            _write(item, out, indent + 1)
        if entries:
            _newline(out, indent)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _newline(out, indent + 1)
            _write(item, out, indent + 1)
        if value:
            _newline(out, indent)
        out.append("]")
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif value is None:
        out.append("null")
    else:
        assert isinstance(value, float), f"cannot serialize {type(value).__name__} as config JSON"
        out.append(repr(value))


# --------------------------------------------------------------------------------------------
# Files: .tmp / .bak / atomic replace, and load with .bak fallback
# --------------------------------------------------------------------------------------------

def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable (fsync of the directory itself)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_config_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` as MixAll.string2File does, but atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    tmp.write_bytes(text.encode("utf-8"))
    try:
        previous = path.read_bytes()
    except FileNotFoundError:
        previous = b""
    # An empty previous file is not copied: it would replace a good backup with nothing.
    if previous.strip():
        path.with_name(path.name + BAK_SUFFIX).write_bytes(previous)
    os.replace(tmp, path)


@dataclass(frozen=True)
class ConfigLoad:
    """What loading one config file found: the decoded value, where it came from, what was damaged."""

    value: Any  # None when neither the file nor its .bak holds anything
    source: Path | None
    damaged: tuple[ConfigFileError, ...] = ()


def _read_text(path: Path) -> str | None:
    """The file's text, or None when it is missing or blank (both mean "use the backup")."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        # A FIFO or device would block the read: damage, reported like any other.
        raise ConfigFileError("not a regular file", path=path)
    size = st.st_size
    if size > CONFIG_FILE_BYTES_MAX:
        raise ConfigFileError(f"file is {size} bytes, more than {CONFIG_FILE_BYTES_MAX}", path=path)
    # Opened 'rb': reading a store must never change it.
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"not UTF-8 at byte {exc.start}", path=path, offset=exc.start) from None
    return text if text.strip() else None


def read_config(path: Path, decode: Callable[[Any, Path], Any] = lambda doc, _path: doc) -> ConfigLoad:
    """Read ``path`` (falling back to ``path.bak``) and decode it; never writes anything.

    ``decode(document, path)`` turns the parsed JSON into typed values and raises
    :class:`ConfigFileError` for a wrong shape; that too makes the backup the source.
    """
    path = Path(path)
    damaged: list[ConfigFileError] = []
    for candidate in (path, path.with_name(path.name + BAK_SUFFIX)):
        try:
            text = _read_text(candidate)
            if text is None:
                continue
            return ConfigLoad(decode(parse_config_json(text, candidate), candidate), candidate,
                              tuple(damaged))
        except ConfigFileError as exc:
            damaged.append(exc)
    return ConfigLoad(None, None, tuple(damaged))


def load_config(path: Path, decode: Callable[[Any, Path], Any]) -> Any:
    """Like :func:`read_config` but raise when the file is damaged and no backup could stand in."""
    loaded = read_config(path, decode)
    if loaded.source is None and loaded.damaged:
        raise loaded.damaged[0]
    return loaded.value


# --------------------------------------------------------------------------------------------
# Typed values
# --------------------------------------------------------------------------------------------

def _shape(path: Path, message: str) -> ConfigFileError:
    return ConfigFileError(f"unexpected content: {message}", path=path)


def _int(value: Any, path: Path, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _shape(path, f"{what} is {value!r}, not an integer")
    return value


def _int_key(key: Any, path: Path, what: str) -> int:
    # Standard JSON writers quote the keys; fastjson reads "3" and 3 alike.
    if isinstance(key, str) and _INT_KEY.fullmatch(key):
        return int(key)
    return _int(key, path, what)


def _obj(value: Any, path: Path, what: str) -> dict:
    if not isinstance(value, dict):
        raise _shape(path, f"{what} is {type(value).__name__}, not an object")
    return value


def _offset_table(doc: Any, path: Path) -> dict:
    return _obj(_obj(doc, path, "the document").get("offsetTable", {}), path, "offsetTable")


@dataclass
class DataVersion:
    """``DataVersion``: bumped on every change so name servers notice; stateVersion is 5.x only."""

    counter: int = 0
    timestamp: int = 0
    state_version: int | None = None

    def to_bean(self) -> Bean:
        return Bean(counter=self.counter, timestamp=self.timestamp, stateVersion=self.state_version)

    @classmethod
    def from_json(cls, doc: Any, path: Path) -> DataVersion:
        doc = _obj(doc or {}, path, "dataVersion")
        state = doc.get("stateVersion")
        return cls(_int(doc.get("counter", 0), path, "dataVersion.counter"),
                   _int(doc.get("timestamp", 0), path, "dataVersion.timestamp"),
                   None if state is None else _int(state, path, "dataVersion.stateVersion"))


def _decode_delay_offsets(doc: Any, path: Path) -> dict[int, int]:
    return {_int_key(k, path, "a delay level"): _int(v, path, f"offset of level {k}")
            for k, v in _offset_table(doc, path).items()}


def load_delay_offsets(config_dir: Path) -> dict[int, int]:
    """``delayOffset.json``: delay level -> CQ offset of the next message to deliver (§3.2)."""
    return load_config(Path(config_dir) / DELAY_OFFSET_FILE, _decode_delay_offsets) or {}


def save_delay_offsets(config_dir: Path, table: Mapping[int, int]) -> None:
    """Write ``delayOffset.json`` in 4.9.4's layout (``{"offsetTable":{3:22,4:8}}``, pretty)."""
    doc = Bean(offsetTable={int(k): int(v) for k, v in table.items()})
    write_config_text(Path(config_dir) / DELAY_OFFSET_FILE, to_fastjson(doc))


def _decode_consumer_offsets(doc: Any, path: Path) -> dict[str, dict[int, int]]:
    result: dict[str, dict[int, int]] = {}
    for key, queues in _offset_table(doc, path).items():
        if not isinstance(key, str) or TOPIC_GROUP_SEPARATOR not in key:
            raise _shape(path, f"offsetTable key {key!r} is not 'topic@group'")
        result[key] = {_int_key(q, path, f"a queue id of {key}"): _int(v, path, f"offset of {key}/{q}")
                       for q, v in _obj(queues, path, key).items()}
    return result


def _decode_lmq_consumer_offsets(doc: Any, path: Path) -> dict[str, dict[int, int]]:
    """``lmqConsumerOffset.json``: its offsetTable, and each lmqOffsetTable entry as queue 0 of
    its key (an LMQ has one queue, LMQ_QUEUE_ID 0)."""
    result = _decode_consumer_offsets(doc, path)
    lmq_table = _obj(_obj(doc, path, "the document").get("lmqOffsetTable", {}), path, "lmqOffsetTable")
    for key, offset in lmq_table.items():
        if not isinstance(key, str) or TOPIC_GROUP_SEPARATOR not in key:
            raise _shape(path, f"lmqOffsetTable key {key!r} is not 'topic@group'")
        result.setdefault(key, {})[0] = _int(offset, path, f"offset of {key}")
    return result


def load_consumer_offsets(config_dir: Path) -> dict[str, dict[int, int]]:
    """``consumerOffset.json``: "topic@group" -> {queueId: next offset to consume} (§3.3)."""
    return load_config(Path(config_dir) / CONSUMER_OFFSET_FILE, _decode_consumer_offsets) or {}


def save_consumer_offsets(config_dir: Path, table: Mapping[str, Mapping[int, int]]) -> None:
    """Write ``consumerOffset.json`` as the 4.9.4 ConsumerOffsetManager does (offsetTable only)."""
    for key in table:
        assert TOPIC_GROUP_SEPARATOR in key, f"consumer offset key {key!r} is not 'topic@group'"
    doc = Bean(offsetTable={k: {int(q): int(o) for q, o in v.items()} for k, v in table.items()})
    write_config_text(Path(config_dir) / CONSUMER_OFFSET_FILE, to_fastjson(doc))


def split_topic_group(key: str) -> tuple[str, str]:
    """Split a consumerOffset.json key; topic names cannot contain '@', so the first one splits.

    A 5.x broker also keeps a broadcasting group's offsets, under ``topic@group@broadcast``
    (seen in a real 5.3.3 store); group names cannot contain '@' either, so the suffix is not part
    of the group.
    """
    topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
    return topic, group.removesuffix(BROADCAST_OFFSET_SUFFIX)


# Java property name <-> Python field name for the two beans.
_TOPIC_FIELDS = {"topicName": "topic_name", "readQueueNums": "read_queue_nums",
                 "writeQueueNums": "write_queue_nums", "perm": "perm",
                 "topicFilterType": "topic_filter_type", "topicSysFlag": "topic_sys_flag",
                 "order": "order", "attributes": "attributes"}
_GROUP_FIELDS = {"groupName": "group_name", "consumeEnable": "consume_enable",
                 "consumeFromMinEnable": "consume_from_min_enable",
                 "consumeBroadcastEnable": "consume_broadcast_enable",
                 "retryQueueNums": "retry_queue_nums", "retryMaxTimes": "retry_max_times",
                 "brokerId": "broker_id",
                 "whichBrokerWhenConsumeSlowly": "which_broker_when_consume_slowly",
                 "notifyConsumerIdsChangedEnable": "notify_consumer_ids_changed_enable"}


@dataclass
class TopicConfig:
    """``TopicConfig`` with 4.9.4's defaults; ``attributes`` is 5.x only (None: not written)."""

    topic_name: str
    read_queue_nums: int = TOPIC_CONFIG_QUEUES_DEFAULT
    write_queue_nums: int = TOPIC_CONFIG_QUEUES_DEFAULT
    perm: int = TOPIC_CONFIG_PERM_DEFAULT
    topic_filter_type: str = TOPIC_FILTER_TYPE_DEFAULT
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] | None = None
    # Properties this model does not know (a newer broker's), kept so a rewrite loses nothing.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class SubscriptionGroupConfig:
    """``SubscriptionGroupConfig`` with 4.9.4's defaults (retryQueueNums 1, retryMaxTimes 16)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = RETRY_QUEUES_DEFAULT
    retry_max_times: int = RETRY_MAX_TIMES_DEFAULT
    broker_id: int = GROUP_BROKER_ID_DEFAULT
    which_broker_when_consume_slowly: int = GROUP_WHICH_BROKER_WHEN_CONSUME_SLOWLY_DEFAULT
    notify_consumer_ids_changed_enable: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


def _bean_from_json(cls: type, names: dict[str, str], key: str, doc: Any, path: Path,
                    name_property: str) -> Any:
    doc = _obj(doc, path, key)
    kwargs: dict[str, Any] = {"extra": {}}
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for prop, value in doc.items():
        attr = names.get(prop) if isinstance(prop, str) else None
        if attr is None:
            kwargs["extra"][prop] = value
            continue
        default = defaults[attr]
        if isinstance(default, bool) and not isinstance(value, bool):
            raise _shape(path, f"{key}.{prop} is {value!r}, not a boolean")
        if isinstance(default, int) and not isinstance(default, bool):
            value = _int(value, path, f"{key}.{prop}")
        if isinstance(default, str) and not isinstance(value, str):
            raise _shape(path, f"{key}.{prop} is {value!r}, not a string")
        kwargs[attr] = value
    # fastjson fills a missing name from nothing; RocketMQ keys the table by it, so use the key.
    kwargs.setdefault(names[name_property], key)
    return cls(**kwargs)


def _bean_to_json(obj: Any, names: dict[str, str]) -> Bean:
    bean = Bean({prop: getattr(obj, attr) for prop, attr in names.items()})
    if bean.get("attributes") is not None:
        bean["attributes"] = dict(bean["attributes"])
    bean.update(obj.extra)
    return bean


def topic_config_from_json(name: str, doc: Any, path: Path) -> TopicConfig:
    """One ``TopicConfig`` bean (a value of topics.json's table, or a RocksDB entry's JSON)."""
    return _bean_from_json(TopicConfig, _TOPIC_FIELDS, name, doc, path, "topicName")


def group_config_from_json(name: str, doc: Any, path: Path) -> SubscriptionGroupConfig:
    """One ``SubscriptionGroupConfig`` bean (a value of subscriptionGroup.json's table, or a RocksDB
    entry's JSON)."""
    return _bean_from_json(SubscriptionGroupConfig, _GROUP_FIELDS, name, doc, path, "groupName")


def _decode_topics(doc: Any, path: Path) -> dict[str, TopicConfig]:
    table = _obj(_obj(doc, path, "the document").get("topicConfigTable", {}), path, "topicConfigTable")
    return {str(k): topic_config_from_json(str(k), v, path) for k, v in table.items()}


def load_topics(config_dir: Path) -> dict[str, TopicConfig]:
    """``topics.json``: topic name -> :class:`TopicConfig` (§3.4)."""
    return load_config(Path(config_dir) / TOPICS_FILE, _decode_topics) or {}


def save_topics(config_dir: Path, topics: Mapping[str, TopicConfig], *,
                data_version: DataVersion | None = None) -> None:
    """Write ``topics.json`` as TopicConfigSerializeWrapper (dataVersion + topicConfigTable)."""
    doc = Bean(dataVersion=(data_version or DataVersion()).to_bean(),
               topicConfigTable={name: _bean_to_json(cfg, _TOPIC_FIELDS) for name, cfg in topics.items()})
    write_config_text(Path(config_dir) / TOPICS_FILE, to_fastjson(doc))


def _decode_groups(doc: Any, path: Path) -> dict[str, SubscriptionGroupConfig]:
    table = _obj(_obj(doc, path, "the document").get("subscriptionGroupTable", {}), path,
                 "subscriptionGroupTable")
    return {str(k): group_config_from_json(str(k), v, path) for k, v in table.items()}


def load_subscription_groups(config_dir: Path) -> dict[str, SubscriptionGroupConfig]:
    """``subscriptionGroup.json``: group name -> :class:`SubscriptionGroupConfig` (§3.5)."""
    return load_config(Path(config_dir) / SUBSCRIPTION_GROUP_FILE, _decode_groups) or {}


def save_subscription_groups(config_dir: Path, groups: Mapping[str, SubscriptionGroupConfig], *,
                             data_version: DataVersion | None = None) -> None:
    """Write ``subscriptionGroup.json`` as the 4.9.4 SubscriptionGroupManager does."""
    doc = Bean(dataVersion=(data_version or DataVersion()).to_bean(),
               subscriptionGroupTable={name: _bean_to_json(cfg, _GROUP_FIELDS)
                                       for name, cfg in groups.items()})
    write_config_text(Path(config_dir) / SUBSCRIPTION_GROUP_FILE, to_fastjson(doc))


# Decoders by file name, for readers that scan every config file of a store.
DECODERS: dict[str, Callable[[Any, Path], Any]] = {
    DELAY_OFFSET_FILE: _decode_delay_offsets,
    CONSUMER_OFFSET_FILE: _decode_consumer_offsets,
    LMQ_CONSUMER_OFFSET_FILE: _decode_lmq_consumer_offsets,
    TOPICS_FILE: _decode_topics,
    SUBSCRIPTION_GROUP_FILE: _decode_groups,
}
