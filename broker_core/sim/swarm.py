"""Swarm testing: one random scenario per seed, faults included, every checker on every run.

Each seed decides a whole scenario (topics, groups, behaviours, traffic, faults) through its own
seeded stream, so ``SEED=n`` alone reproduces a failure. The scenario is written as YAML next to
its run, so the reproduce command is the ordinary ``retry-audit simulate``. Passing runs are
deleted; failing ones are kept for a post-mortem.
"""

from __future__ import annotations

import re
import shutil
import traceback
from collections.abc import Callable
from pathlib import Path

from broker_core.errors import BadInputError
from broker_core.rng import Streams
from broker_core.sim.invariants import check_run, format_violations
from broker_core.sim.run import reproduce_command, simulate
from broker_core.sim.scenario import load_scenario

SEEDS_PER_SWARM_MAX = 100_000
TOPICS_MAX = 3
GROUPS_MAX = 4
MESSAGES_PER_PRODUCER_MIN = 50
MESSAGES_PER_PRODUCER_MAX = 300
FAULTS_MAX = 3
TRAFFIC_WINDOW_S = 60  # producers run about this long; faults land inside it
HORIZON = "45m"  # long enough for a max_reconsume_times of 5 (levels 3..7: under 7 minutes)
_SEED_RANGE = re.compile(r"(\d+)(?:\.\.(\d+))?")


def parse_seed_range(text: str) -> list[int]:
    """``"1..20"`` -> [1, ..., 20] (inclusive); ``"7"`` -> [7]."""
    m = _SEED_RANGE.fullmatch(text.strip())
    if not m:
        raise BadInputError(f"--seeds {text!r} is not A..B or N", where="--seeds")
    lo = int(m.group(1))
    hi = int(m.group(2)) if m.group(2) is not None else lo
    if hi < lo or hi - lo + 1 > SEEDS_PER_SWARM_MAX:
        raise BadInputError(f"--seeds {text!r}: need A <= B and at most {SEEDS_PER_SWARM_MAX} seeds",
                            where="--seeds")
    return list(range(lo, hi + 1))


def random_scenario_yaml(seed: int) -> str:
    """The scenario seed ``seed`` stands for, as YAML (valid by construction; the loader checks)."""
    rng = Streams(seed).stream("swarm.scenario")
    topics = [(f"T{i}", rng.choice((1, 2, 4))) for i in range(rng.randint(1, TOPICS_MAX))]
    lines = [f"name: swarm-{seed}", f"seed: {seed}", f"horizon: {HORIZON}", "broker:",
             f"  commitlog_file_size: {rng.choice((64, 256, 1024))}KiB",
             f"  cq_units_per_file: {rng.choice((16, 100, 1000))}",
             f"  flush: {rng.choice(('async', 'sync'))}", "topics:"]
    lines += [f"  - {{name: {name}, queues: {queues}}}" for name, queues in topics]
    lines.append("groups:")
    groups = []
    for i in range(rng.randint(1, GROUPS_MAX)):
        name = f"g{i}"
        subscribe = sorted(rng.sample([t for t, _ in topics], rng.randint(1, len(topics))))
        model = "broadcasting" if rng.random() < 0.2 else "clustering"
        mode = "orderly" if model == "clustering" and rng.random() < 0.25 else "concurrently"
        consumers = rng.randint(1, 3)
        groups.append((name, model, consumers))
        fail = round(rng.choice((0.0, 0.05, 0.2, 0.5)), 2)
        exc = round(rng.choice((0.0, 0.0, 0.05)), 2)
        poison = round(rng.choice((0.0, 0.0, 0.02, 0.1)), 2)
        lines += [f"  - name: {name}", f"    subscribe: [{', '.join(subscribe)}]",
                  f"    model: {model}", f"    mode: {mode}", f"    consumers: {consumers}",
                  f"    max_reconsume_times: {rng.choice((1, 2, 3, 5))}",
                  f"    consume_timeout: {rng.choice(('1m', '2m', '15m'))}",
                  f"    behavior: {{consume_time: {rng.choice((1, 3, 10))}ms, fail_probability: {fail}, "
                  f"exception_probability: {exc}, poison_fraction: {poison}}}"]
    lines.append("producers:")
    for name, _ in topics:
        messages = rng.randint(MESSAGES_PER_PRODUCER_MIN, MESSAGES_PER_PRODUCER_MAX)
        rate = max(1, messages // TRAFFIC_WINDOW_S)
        delay = rng.choice(("0", "{0: 0.8, 2: 0.2}", "{0: 0.5, 1: 0.25, 4: 0.25}"))
        lines.append(f"  - {{topic: {name}, messages: {messages}, rate: {rate}/s, "
                     f"body_size: {rng.choice((16, 200, 5000))}, tags: [a, b], delay_level: {delay}, "
                     f"send: {rng.choice(('sync', 'sync', 'async', 'oneway'))}}}")
    lines.append("faults:")
    clustering = [(g, n) for g, model, n in groups if model == "clustering"]
    for _ in range(rng.randint(0, FAULTS_MAX)):
        at = rng.randint(5, TRAFFIC_WINDOW_S)
        kind = rng.choice(("broker_crash", "broker_restart", "torn_write", "consumer_crash",
                           "send_back_failure", "put_failure", "consumer_hang", "clock_jump", "burst"))
        if kind in ("consumer_crash", "consumer_hang", "send_back_failure") and not clustering:
            kind = "broker_restart"
        if kind in ("broker_crash", "broker_restart", "torn_write"):
            lines.append(f"  - {{at: {at}s, kind: {kind}, pause: {rng.randint(1, 10)}s}}")
        elif kind == "consumer_crash":
            group, n = rng.choice(clustering)
            consumer = rng.randrange(n)
            lines.append(f"  - {{at: {at}s, kind: consumer_crash, group: {group}, consumer: {consumer}}}")
            lines.append(f"  - {{at: {at + rng.randint(1, 30)}s, kind: consumer_restart, group: {group}, "
                         f"consumer: {consumer}}}")
        elif kind in ("send_back_failure", "consumer_hang"):
            group, _n = rng.choice(clustering)
            lines.append(f"  - {{from: {at}s, to: {at + rng.randint(1, 30)}s, kind: {kind}, group: {group}, "
                         f"probability: {rng.choice((0.2, 0.5, 1.0))}}}")
        elif kind == "put_failure":
            lines.append(f"  - {{from: {at}s, to: {at + rng.randint(1, 20)}s, kind: put_failure, "
                         f"probability: {rng.choice((0.1, 0.3))}}}")
        elif kind == "clock_jump":
            lines.append(f"  - {{at: {at}s, kind: clock_jump, delta: {rng.choice(('-20s', '-1s', '5s', '30s'))}}}")
        else:
            lines.append(f"  - {{at: {at}s, kind: burst, topic: {rng.choice(topics)[0]}, "
                         f"messages: {rng.randint(100, 500)}, rate: 500/s}}")
    if lines[-1] == "faults:":
        lines[-1] = "faults: []"
    return "\n".join(lines) + "\n"


def run_seed(seed: int, base: Path) -> dict | None:
    """Run one seed; None when every checker passes, else a failure record (run kept on disk)."""
    base.mkdir(parents=True, exist_ok=True)
    scenario_path = base / f"swarm-{seed}.yaml"
    scenario_path.write_text(random_scenario_yaml(seed))
    run_dir = base / f"swarm-{seed}"
    reproduce = reproduce_command(scenario_path, run_dir, seed)
    try:
        scenario = load_scenario(scenario_path)
        simulate(scenario_path, run_dir, scenario=scenario)
        violations = check_run(run_dir)
    except Exception as exc:  # noqa: BLE001 - a crash of the model is a swarm finding, not an abort
        last = traceback.extract_tb(exc.__traceback__)[-1]
        return {"seed": seed, "summary": f"{type(exc).__name__}: {exc} (at {last.filename}:{last.lineno})",
                "reproduce": reproduce, "scenario": str(scenario_path)}
    if violations:
        return {"seed": seed, "summary": f"{len(violations)} violations",
                "detail": format_violations(violations), "reproduce": reproduce,
                "scenario": str(scenario_path)}
    shutil.rmtree(run_dir, ignore_errors=True)
    scenario_path.unlink()
    return None


def run_swarm(seeds: list[int], *, base: Path, log: Callable[[str], None] | None = None) -> dict:
    """Run every seed under ``base``; the report lists the failures with their reproduce commands.

    ``base`` is the caller's (the CLI puts it under the data home): the model reads no
    environment.
    """
    failures = []
    for seed in seeds:
        failure = run_seed(seed, base)
        if failure is not None:
            failures.append(failure)
        if log is not None:
            log(f"  SEED={seed} {'ok' if failure is None else 'FAILED: ' + failure['summary']}")
    return {"runs": len(seeds), "failures": failures, "dir": str(base)}
