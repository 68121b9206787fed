"""The sensors: ``runs_on_disk`` keeps the run partitions equal to the runs on disk, and
``stores_grown`` imports a store that has grown again, then rebuilds its lineage and the warehouse.

``runs_on_disk`` (on by default) looks at the disk every ``RUNS_SENSOR_INTERVAL_S`` and adds a
dynamic partition for each scenario, store or imported run that appeared
(``assets.run_source.discover_runs``), and deletes the partitions whose run went: a store linked
under ``var/stores/`` shows up in the UI by itself, without "Reload definitions".

``stores_grown`` (off until turned on) watches every store partition
(``<data home>/stores/<name>/``, a directory or a symlink to a broker's store root, and the
conformance stores) and every broker's store of a cluster partition
(``<data home>/stores/<cluster>/<broker>/``; a run of the cluster when any of them grew). On each tick it walks the store's commit log
from where it last looked (:func:`broker_core.store.log_end.log_end`, record headers only) and,
when the records reach further than then (or retention deleted files, or the store was never
imported), asks for one run of ``store_pipeline`` for that partition: ``raw/run`` with
``live: true`` (the import goes on from where the run's last import ended), the lineage and the
warehouse. The cursor is JSON, one entry per store: the file, position and physical offset the
walk reached and the log's first file. A store whose run is still queued or running is looked at
again on the next tick, with its cursor entry unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg

from assets.resources import DataHome
from assets.run_source import CLUSTER, STORE, RunSource, cluster_brokers
from broker_core.export.increments import load_state
from broker_core.store.log_end import LogEnd, log_end
from orchestration.partitions import partition_changes

RUNS_SENSOR_NAME = "runs_on_disk"
# How soon a run added on disk becomes a partition: each look lists a few directories and reads
# the `source` column of each run directory's `runs` table.
RUNS_SENSOR_INTERVAL_S = 10
STORE_JOB_NAME = "store_pipeline"
SENSOR_NAME = "stores_grown"
# How often the daemon evaluates the sensor: a watch, not a stream; each look reads only the
# record headers written since the last one.
SENSOR_INTERVAL_S = 30
RAW_RUN_OP = "raw__run"
TAG_STORE = "retry-audit/store"
TAG_LOG_END = "retry-audit/log_end"
_ACTIVE = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
           dg.DagsterRunStatus.STARTED]


def store_job():
    """Import a store partition (live), build its lineage and the warehouse: every asset, one partition."""
    return dg.define_asset_job(
        STORE_JOB_NAME, selection=dg.AssetSelection.all(),
        description="A store partition imported again (only what it gained since its last import), "
                    "its lineage and the warehouse; launched by the stores_grown sensor.")


def _baseline(key: str, broker: str, store: Path, run_dir: Path, cursor: dict) -> dict | None:
    """Where the last look at a store ended: its cursor entry, else where the run's last import of it
    ended (so a store imported before is not imported again until it grows)."""
    if key in cursor:
        return cursor[key]
    state = load_state(run_dir, broker)
    if state is None or state.store_dir != str(Path(store).resolve()):
        return None
    return {"file": state.resume.file_name, "position": state.resume.position, "offset": state.resume.offset,
            "first_file": f"{state.first_offset:020d}"}


def watched_stores(sources: dict[str, RunSource]) -> dict[str, tuple[str, str, Path]]:
    """Every store the sensor watches: {cursor key: (partition, broker, store root)}. A store
    partition is one store (its broker is the partition); a cluster partition is its brokers'
    stores (a DLedger group's nodes each), keyed ``<cluster>/<broker>[/<node>]``."""
    watched = {}
    for name, source in sorted(sources.items()):
        if source.kind == STORE:
            watched[name] = (name, name, source.path)
        elif source.kind == CLUSTER:
            for broker, stores in cluster_brokers(source.path).items():
                for store in stores:
                    key = f"{name}/{broker}" + (f"/{store.name}" if store != source.path / broker else "")
                    watched[key] = (name, broker, store)
    return watched


def grown_stores(sources: dict[str, RunSource], runs_dir: Path, cursor: dict) -> dict[str, tuple[LogEnd, str]]:
    """The stores whose log reaches further than the cursor says (or whose first file changed, or
    that were never looked at): {cursor key: (where the log ends now, why)}."""
    found = {}
    for key, (partition, broker, store) in watched_stores(sources).items():
        seen = _baseline(key, broker, store, runs_dir / partition, cursor)
        same_start = seen is not None and seen.get("file")
        end = log_end(store, (seen["file"], seen["position"]) if same_start else None)
        if end.file_name is None:
            continue  # no commit-log files yet
        if seen is None:
            found[key] = (end, "never imported")
        elif end.first_file != seen["first_file"]:
            # Retention deleted files: the import drops their rows (or, if the file it ended in
            # went too, reads the store whole).
            found[key] = (end, f"the log now starts at {end.first_file}")
        elif end.offset > seen["offset"]:
            found[key] = (end, f"grew from {seen['offset']} to {end.offset}")
    return found


def cursor_entry(end: LogEnd) -> dict:
    return {"file": end.file_name, "position": end.position, "offset": end.offset, "first_file": end.first_file}


def partition_requests(partitions_def: dg.DynamicPartitionsDefinition, add: list[str],
                       delete: list[str]) -> list:
    """The requests that add and delete run partitions (the daemon applies them before any run request)."""
    return ([partitions_def.build_add_request(add)] if add else []) + \
           ([partitions_def.build_delete_request(delete)] if delete else [])


def runs_sensor(partitions_def: dg.DynamicPartitionsDefinition):
    @dg.sensor(name=RUNS_SENSOR_NAME, minimum_interval_seconds=RUNS_SENSOR_INTERVAL_S,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description="Keeps the run partitions equal to the runs on disk: a scenario file, a store "
                           "under <data home>/stores/ (or a conformance run's) or an imported run becomes a "
                           "partition when it appears, and stops being one when it goes.")
    def runs_on_disk(context: dg.SensorEvaluationContext, home: DataHome):
        add, delete = partition_changes(home.sources(), context.instance.get_dynamic_partitions(partitions_def.name))
        if not add and not delete:
            return dg.SkipReason("the partitions are the runs on disk")
        if add:
            context.log.info(f"new runs: {', '.join(add)}")
        if delete:
            context.log.info(f"runs gone from disk: {', '.join(delete)}")
        return dg.SensorResult(dynamic_partitions_requests=partition_requests(partitions_def, add, delete))

    return runs_on_disk


def stores_sensor(partitions_def: dg.DynamicPartitionsDefinition):
    @dg.sensor(name=SENSOR_NAME, job_name=STORE_JOB_NAME, minimum_interval_seconds=SENSOR_INTERVAL_S,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description="Imports a store partition again when its commit log has grown (the cursor "
                           "holds, per store, the offset its log reached), then rebuilds its lineage and "
                           "the warehouse. Turn it on to keep the audit of a running broker current.")
    def stores_grown(context: dg.SensorEvaluationContext, home: DataHome):
        cursor = json.loads(context.cursor) if context.cursor else {}
        requests = []
        sources = home.sources()
        watched = watched_stores(sources)
        grown: dict[str, list] = {}
        for key, (end, why) in grown_stores(sources, home.runs_dir, cursor).items():
            grown.setdefault(watched[key][0], []).append((key, end, why))
        for name, stores in grown.items():
            active = context.instance.get_run_records(
                dg.RunsFilter(job_name=STORE_JOB_NAME, tags={"dagster/partition": name}, statuses=_ACTIVE),
                limit=1)
            whys = "; ".join(f"{key}: {why}" for key, _end, why in stores)
            if active:
                context.log.info(f"{whys}; the last run of {name} has not finished, looked at again next tick")
                continue
            cursor.update({key: cursor_entry(end) for key, end, _why in stores})
            ends = ",".join(f"{key}@{end.first_file}:{end.offset}" for key, end, _why in stores)
            requests.append(dg.RunRequest(
                run_key=ends if len(stores) > 1 else f"{name}@{stores[0][1].first_file}:{stores[0][1].offset}",
                partition_key=name, run_config={"ops": {RAW_RUN_OP: {"config": {"live": True}}}},
                tags={TAG_STORE: str(sources[name].path), TAG_LOG_END: str(max(e.offset for _k, e, _w in stores))}))
            context.log.info(whys)
        context.update_cursor(json.dumps(cursor, sort_keys=True))
        if not requests:
            return dg.SkipReason("no store has grown since the last look")
        # A store linked since runs_on_disk last looked gets its partition with its first run.
        have = set(context.instance.get_dynamic_partitions(partitions_def.name))
        new = sorted({r.partition_key for r in requests} - have)
        return dg.SensorResult(run_requests=requests,
                               dynamic_partitions_requests=partition_requests(partitions_def, new, []))

    return stores_grown
