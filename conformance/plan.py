"""What the real clients play: the scenario's topics, groups and messages, and the model's verdicts.

The model runs the scenario first. Its run fixes every message's UNIQ_KEY, tags, keys, body and
send time, and every listener verdict it drew (a random draw per delivery in the model). The plan
hands all of it to the Java driver, which sends the same messages with the same UNIQ_KEY and makes
its listeners return the model's verdict for the same (group, message, attempt): the real run and
the model run then differ only where the broker and clients behave differently, which is what the
comparison looks for.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from broker_core.broker.proxy import PROXY_INVISIBLE_MS_DEFAULT, max_attempts
from broker_core.client.pop_consumer import (
    GRPC_CLIENTS,
    GRPC_PUSH_CLIENTS,
    POP_DELAY_MS_DEFAULT,
    POP_INVISIBLE_MS_DEFAULT,
    POP_MODE,
)
from broker_core.client.retry_policy import EXPONENTIAL
from broker_core.constants import PROP_TIMER_DEL_UNIQKEY, PROP_TIMER_DELAY_MS
from broker_core.delay_levels import parse_delay_levels
from broker_core.errors import BadInputError
from broker_core.sim.scenario import Scenario

BROADCASTING = "BROADCASTING"
CLUSTERING = "CLUSTERING"
SUCCESS = "CONSUME_SUCCESS"
SENT_BACK_BY_CLIENT = "SENT_BACK_BY_CLIENT"
CONCURRENTLY = "CONCURRENTLY"
TIMEOUT_MARGIN_S = 120  # beyond the model's simulated duration, before the driver gives up
# The driver stops once no listener was called for this long: a few seconds, and more than twice
# the longest delay level (or 5.x timer), so a retry waiting in the schedule (or a record a crash makes the broker
# hand out again, after the client's 3 s pull back-off) is consumed before the end.
IDLE_MS_MIN = 8_000
IDLE_MS_PER_DELAY = 2
DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
POP_SUSPEND_MS = 15_000  # DefaultMQPushConsumerImpl.BROKER_SUSPEND_MAX_TIME_MILLIS: a pop's long polling


@dataclass
class Plan:
    text: str
    messages: int
    expected_calls: dict[tuple[str, str], int]
    timeout_ms: int


def _body_head(keys: str) -> str:
    # The model's body is "p<producer>-m<index>|" padded with '.'; its KEYS are "p<producer>-<index>".
    producer, index = keys[1:].split("-", 1)
    return f"p{producer}-m{index}|"


def is_grpc(g) -> bool:
    """Whether a scenario group is a gRPC consumer served through the proxy."""
    return g.mode == POP_MODE and g.client in GRPC_CLIENTS


def grpc_groups(scenario: Scenario) -> list:
    """The scenario's gRPC groups: when there is one, the run needs the proxy and the gRPC driver."""
    return [g for g in scenario.groups if is_grpc(g)]


def _retry_policy_field(g) -> str:
    """A gRPC push group's retry policy for the driver (``exponential:INITIAL_MS,MAX_MS,MULTIPLIER``
    or ``customized:MS,MS,...``, as GrpcPlanDriver sets it on the subscription group); ``-`` for a
    SimpleConsumer, whose failures wait out their invisible duration whatever the policy."""
    if g.client not in GRPC_PUSH_CLIENTS:
        return "-"
    p = g.retry_policy
    if p.type == EXPONENTIAL:
        return f"exponential:{p.initial_ms},{p.max_ms},{int(p.multiplier)}"
    return "customized:" + ",".join(str(d) for d in p.delays_ms)


def _pop_fields(g, source: str) -> list[str]:
    """A POP group's invisible time (ms) and retry delay table (s) for the driver; nothing for others.

    The real remoting client's table holds whole seconds. A gRPC group (played by GrpcPlanDriver
    through the proxy) has no such table: its fields are its receive's invisible time, ``-``, its
    client and its retry policy.
    """
    if g.mode != POP_MODE:
        return []
    if is_grpc(g):
        if g.client in GRPC_PUSH_CLIENTS and g.retry_policy.type == EXPONENTIAL \
                and g.retry_policy.multiplier != int(g.retry_policy.multiplier):
            raise BadInputError(f"group {g.name!r}: the broker's exponential retry policy takes a whole "
                                f"multiplier, not {g.retry_policy.multiplier}",
                                where=f"{source}: groups.{g.name}.retry_policy.multiplier")
        invisible = PROXY_INVISIBLE_MS_DEFAULT if g.client in GRPC_PUSH_CLIENTS else (
            g.invisible_ms or POP_INVISIBLE_MS_DEFAULT)
        return [str(invisible), "-", g.client, _retry_policy_field(g)]
    delays = g.retry_delays_ms or POP_DELAY_MS_DEFAULT
    if any(d % 1000 for d in delays):
        raise BadInputError(f"group {g.name!r}: the real POP client's retry delays are whole seconds, "
                            f"not {list(delays)} ms", where=f"{source}: groups.{g.name}.retry_delays")
    return [str(g.invisible_ms or POP_INVISIBLE_MS_DEFAULT), ",".join(str(d // 1000) for d in delays)]


def check_groups(scenario: Scenario) -> None:
    """Refuse, before anything starts, a group the driver cannot play (``_pop_fields``)."""
    for g in scenario.groups:
        _pop_fields(g, scenario.source)


def _max_field(g) -> int:
    """The group's retry maximum as the driver sets it on the subscription group: a gRPC group's
    ``retryMaxTimes`` (the proxy's maxAttempts is one more), else the client's maxReconsumeTimes."""
    return g.retry_max_times if is_grpc(g) else g.max_reconsume_times


def _pop_wait_ms(g) -> int:
    """How long a POP group's record can wait to come back: a gRPC push consumer's longest retry
    policy delay (over its attempts), a SimpleConsumer's invisible time, a remoting consumer's
    invisible time or longest retry delay."""
    if is_grpc(g):
        if g.client in GRPC_PUSH_CLIENTS:
            return max(g.retry_policy.next_attempt_delay_ms(a) for a in range(1, max_attempts(g.retry_max_times) + 1))
        return g.invisible_ms or POP_INVISIBLE_MS_DEFAULT
    return max(g.invisible_ms or POP_INVISIBLE_MS_DEFAULT, *(g.retry_delays_ms or POP_DELAY_MS_DEFAULT))


def build_plan(scenario: Scenario, model_run: Path, *, namesrv: str, brokers: dict[str, str],
               sides: list[tuple[str, int]] = (), side_dir: Path | None = None) -> Plan:
    """The driver's plan for ``scenario``, from the model's run of it in ``model_run``."""
    parquet = Path(model_run) / "parquet"
    produced = pq.read_table(parquet / "produced").to_pylist()
    publish = {}
    for row in pq.read_table(parquet / "commitlog", columns=["uniq_key", "tags", "keys", "body_size",
                                                             "reconsume_times", "origin_msg_id",
                                                             "properties"]).to_pylist():
        # The first record of a message is its publish (or its SCHEDULE record for a delayed one,
        # or its rmq_sys_wheel_timer record for a 5.x timer).
        if row["uniq_key"] not in publish and row["origin_msg_id"] is None and row["reconsume_times"] == 0:
            publish[row["uniq_key"]] = row
    # The messages the model's producers recalled: their recall record carries their UNIQ_KEY.
    recalled = {row["uniq_key"] for row in pq.read_table(parquet / "commitlog", columns=["uniq_key", "properties"])
                .to_pylist() if PROP_TIMER_DEL_UNIQKEY in dict(row["properties"] or ())}
    attempts = pq.read_table(parquet / "consume_attempts").to_pylist()
    attempts.sort(key=lambda r: (r["start_ts"], r["group"], r["consumer_id"]))

    lines = [f"namesrv\t{namesrv}"]
    lines += [f"broker\t{name}\t{addr}" for name, addr in brokers.items()]
    lines += [f"topic\t{t.name}\t{t.queues}" for t in scenario.topics]
    models, modes = {}, {}
    for g in scenario.groups:
        modes[g.name] = g.mode.upper()
        model = BROADCASTING if g.model == "broadcasting" else CLUSTERING
        models[g.name] = model
        lines.append("\t".join(["group", g.name, model, g.mode.upper(), str(g.consumers),
                                str(_max_field(g)), str(g.behavior.consume_time_ms),
                                ",".join(g.subscribe), *_pop_fields(g, scenario.source)]))
    verdicts: dict[tuple[str, str], str] = {}
    refusals: list[tuple[str, str]] = []
    calls_by_key: dict[tuple[str, str], int] = defaultdict(int)
    attempts_seen: dict[tuple[str, str], set] = defaultdict(set)
    for a in attempts:
        group, uniq = a["group"], a["uniq_key"]
        if models.get(group) == BROADCASTING:
            key = f"{uniq}/{a['consumer_id'].rsplit('-c', 1)[1]}"
        else:
            key = f"{uniq}/{a['reconsume_times']}"
        attempts_seen[(group, uniq)].add(key)
        # A redelivery of the same attempt (after a consumer crash) is the next call with that key.
        nth = calls_by_key[(group, key)]
        calls_by_key[(group, key)] += 1
        verdicts[(group, f"{key}/{nth}")] = a["status"]
        if a["outcome"] == SENT_BACK_BY_CLIENT and models.get(group) == CLUSTERING \
                and modes.get(group) == CONCURRENTLY:
            # The model's broker refused this send-back (a send_back_failure fault) and the client
            # sent the retry itself: the real broker is made to refuse the same one.
            refusals.append((group, f"{key}/{nth}"))
    # Successes are the default, except after a failure of the same attempt: then a success is
    # written too, so that the driver's "repeat the last verdict" does not repeat the failure.
    failed_keys = {(g, k.rsplit("/", 1)[0]) for (g, k), s in verdicts.items() if s != SUCCESS}
    lines += [f"verdict\t{g}\t{k}\t{s}" for (g, k), s in verdicts.items()
              if s != SUCCESS or (g, k.rsplit("/", 1)[0]) in failed_keys]
    lines += [f"refuse\t{g}\t{k}" for g, k in refusals]
    expected = {gk: len(keys) for gk, keys in attempts_seen.items()}
    lines += [f"expect\t{g}\t{u}\t{n}" for (g, u), n in expected.items()]

    start = min(r["send_ts"] for r in produced)
    # A real client refuses to start in the group DEFAULT_PRODUCER (DefaultMQProducerImpl.checkConfig),
    # the model's default; the group never reaches the store of a plain send, so any name will do.
    groups_of_producer = {i: (f"conformance-producer-{i}" if p.producer_group == DEFAULT_PRODUCER_GROUP
                              else p.producer_group) for i, p in enumerate(scenario.producers)}
    for row in sorted(produced, key=lambda r: (r["send_ts"], r["uniq_key"])):
        if row["status"] != "SEND_OK":
            continue
        first = publish[row["uniq_key"]]
        producer = int(first["keys"][1:].split("-", 1)[0])
        at_ms = int((row["send_ts"] - start).total_seconds() * 1000)
        lines.append("\t".join(["msg", str(at_ms), str(producer), groups_of_producer[producer],
                                row["topic"], first["tags"] or "-", first["keys"], str(row["delay_level"]),
                                row["uniq_key"], _body_head(first["keys"]), str(first["body_size"]),
                                dict(first["properties"] or ()).get(PROP_TIMER_DELAY_MS, "0"),
                                "1" if row["uniq_key"] in recalled else "0"]))
    runs = pq.read_table(parquet / "runs").to_pylist()[0]
    simulated_s = (runs["sim_end_ts"] - runs["sim_start_ts"]).total_seconds()
    timeout_ms = int((simulated_s + TIMEOUT_MARGIN_S) * 1000)
    # A 5.x timer (rolls included) is delivered one slot after its due time: the longest counts as a delay.
    timer_ms_max = max((ms for p in scenario.producers for ms, w in p.timer_weights if w > 0), default=0)
    # A POP retry comes back once its delay (or the invisible time of a pop nobody answered) has
    # run out and the revive service has read the checkpoint: that counts as a delay too.
    # A pop finds it only on its next try: the broker's long polling is not woken for a POP retry
    # topic (apache/rocketmq #6681), so a pop waiting there ends at the client's suspend time.
    # A gRPC group's last attempt is followed by one more revive, which the proxy dead-letters
    # without a listener call: that wait counts too.
    pop_ms_max = max((_pop_wait_ms(g) for g in scenario.groups if g.mode == POP_MODE), default=None)
    pop_idle_ms = 0 if pop_ms_max is None else IDLE_MS_PER_DELAY * pop_ms_max + POP_SUSPEND_MS
    # The delay levels count where a record can wait in the schedule: a delayed publish, or a push
    # group's retry (a POP group's retries never go through it).
    scheduled = (any(g.mode != POP_MODE for g in scenario.groups)
                 or any(level > 0 and w > 0 for p in scenario.producers for level, w in p.delay_weights))
    level_ms_max = max(parse_delay_levels(scenario.broker.message_delay_level)) if scheduled else 0
    idle_ms = max(IDLE_MS_MIN, IDLE_MS_PER_DELAY * level_ms_max, IDLE_MS_PER_DELAY * timer_ms_max, pop_idle_ms)
    lines += [f"setting\ttimeout_ms\t{timeout_ms}", f"setting\tidle_ms\t{idle_ms}"]
    lines += [f"side\t{group}\t{index}" for group, index in sides]
    if side_dir is not None:
        lines.append(f"sidedir\t{side_dir}")
    return Plan("\n".join(lines) + "\n", len(produced), expected, timeout_ms)
