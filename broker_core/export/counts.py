"""A run's summary counts, read back from its Parquet tables with memory that does not grow.

The counts join three tables on the message key (UNIQ_KEY): the messages produced, the successful
consumes and the dead-lettered copies. Holding every key of a large run at once would make memory
grow with the run, so the keys are split into buckets by their last two characters (UNIQ_KEYs end
in a counter's low byte, so the buckets come out even) and the tables are read once per bucket, a
row group at a time; only one bucket's keys are ever held, as Arrow arrays. A run of the default
scenario fits in one bucket and is read once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker_core.constants import SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK
from broker_core.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, TRANS_HALF_TOPIC

SEND_OK = "SEND_OK"
CONSUME_SUCCESS = "CONSUME_SUCCESS"
# Rows of produced + consume_attempts + commitlog per bucket: about 100 MiB of keys held at once.
BUCKET_ROWS = 2_000_000
KEY_SUFFIX_CHARS = 2  # a bucket is a set of key endings: two hex digits give up to 256 buckets
BUCKETS_MAX = 16 ** KEY_SUFFIX_CHARS
BATCH_ROWS = 64 * 1024  # rows read at a time


def run_counts(run_dir: str | Path, subscriptions: Mapping[str, Sequence[str]],
               consumed_outcomes: Sequence[str], *, bucket_rows: int = BUCKET_ROWS,
               given_up_outcomes: Sequence[str] = ()) -> dict[str, int]:
    """produced / send_failed / consumed / retried / dlq / in_flight of a run directory.

    ``subscriptions`` maps each clustering group to the topics it subscribes; a (group, message)
    pair counts as consumed when an attempt of that group succeeded with one of
    ``consumed_outcomes``, and as in flight when it was neither consumed nor dead-lettered nor
    given up (an attempt with one of ``given_up_outcomes``, whatever its status: a POP client's
    ack of a message it failed at its maximum).
    ``produced`` counts distinct (topic, UNIQ_KEY) pairs sent SEND_OK.
    """
    assert bucket_rows > 0, f"bucket_rows {bucket_rows}"
    tables = Path(run_dir) / "parquet"
    total_rows = sum(_rows(tables / t) for t in ("produced", "consume_attempts", "commitlog"))
    buckets = 1
    while buckets < BUCKETS_MAX and total_rows > buckets * bucket_rows:
        buckets *= 2
    counts = dict.fromkeys(("produced", "send_failed", "consumed", "retried", "dlq", "in_flight"), 0)
    outcomes = pa.array(list(consumed_outcomes), pa.string())
    given_up_set = pa.array(list(given_up_outcomes), pa.string())
    for bucket in range(buckets):
        first = bucket == 0  # per-row counts need no key: take them on the first pass only
        keys_of_bucket = _Bucket(bucket, buckets)

        sent = []
        for batch in _batches(tables / "produced", ["topic", "uniq_key", "status"]):
            ok = pc.equal(batch["status"], SEND_OK)
            if first:
                counts["send_failed"] += batch.num_rows - _true(ok)
            sent.append(batch.filter(pc.and_kleene(ok, keys_of_bucket.mask(batch["uniq_key"]))))
        produced = _table(sent, ["topic", "uniq_key"]).group_by(["topic", "uniq_key"]).aggregate([])
        counts["produced"] += produced.num_rows

        acked, abandoned = [], []
        for batch in _batches(tables / "consume_attempts", ["group", "uniq_key", "status", "outcome"]):
            done = pc.and_kleene(pc.equal(batch["status"], CONSUME_SUCCESS),
                        pc.is_in(batch["outcome"], value_set=outcomes))
            mine = keys_of_bucket.mask(batch["uniq_key"])
            acked.append(batch.filter(pc.and_kleene(done, mine)))
            abandoned.append(batch.filter(pc.and_kleene(pc.is_in(batch["outcome"], value_set=given_up_set), mine)))
        consumed = _table(acked, ["group", "uniq_key"])
        given_up = _table(abandoned, ["group", "uniq_key"])

        dead, halves, commits = [], [], []
        for batch in _batches(tables / "commitlog", ["topic", "uniq_key", "sys_flag"]):
            mine = keys_of_bucket.mask(batch["uniq_key"])
            # A transactional message reaches its topic only when committed: one rolled back or
            # discarded is not in flight (docs/transactions.md).
            halves.append(batch.filter(pc.and_kleene(pc.equal(batch["topic"], TRANS_HALF_TOPIC), mine))["uniq_key"])
            commit = pc.equal(pc.bit_wise_and(batch["sys_flag"], SYSFLAG_TRANSACTION_MASK), SYSFLAG_TRANSACTION_COMMIT)
            commits.append(batch.filter(pc.and_kleene(commit, mine))["uniq_key"])
            dlq = pc.starts_with(batch["topic"], DLQ_GROUP_TOPIC_PREFIX)
            if first:
                counts["retried"] += _true(pc.starts_with(batch["topic"], RETRY_GROUP_TOPIC_PREFIX))
                counts["dlq"] += _true(dlq)
            rows = batch.filter(pc.and_kleene(dlq, keys_of_bucket.mask(batch["uniq_key"])))
            group = pc.utf8_slice_codeunits(rows["topic"], len(DLQ_GROUP_TOPIC_PREFIX))
            dead.append(pa.RecordBatch.from_arrays([group, rows["uniq_key"]], ["group", "uniq_key"]))
        dead_lettered = _table(dead, ["group", "uniq_key"])
        half_keys = pa.chunked_array(halves, pa.string()).combine_chunks()
        never_committed = pc.filter(half_keys, pc.invert(pc.is_in(
            half_keys, value_set=pa.chunked_array(commits, pa.string()).combine_chunks())))

        for group, topics in subscriptions.items():
            consumed_keys = _keys_of(consumed, "group", group)
            dead_keys = _keys_of(dead_lettered, "group", group)
            given_up_keys = _keys_of(given_up, "group", group)
            for topic in topics:
                keys = _keys_of(produced, "topic", topic)
                was_consumed = pc.is_in(keys, value_set=consumed_keys)
                was_dead = pc.is_in(keys, value_set=dead_keys)
                counts["consumed"] += _true(was_consumed)
                was_given_up = pc.is_in(keys, value_set=given_up_keys)
                ended = pc.or_(pc.or_(pc.or_(was_consumed, was_dead), was_given_up),
                               pc.is_in(keys, value_set=never_committed))
                counts["in_flight"] += _true(pc.invert(ended))
    return counts


def _rows(table_dir: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in sorted(table_dir.glob("*.parquet")))


def _batches(table_dir: Path, columns: list[str]) -> Iterator[pa.RecordBatch]:
    for path in sorted(table_dir.glob("*.parquet")):
        yield from pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, columns=columns)


def _table(batches: list[pa.RecordBatch], columns: list[str]) -> pa.Table:
    schema = pa.schema([(c, pa.string()) for c in columns])
    return pa.Table.from_batches([b.select(columns) for b in batches], schema=schema)


def _keys_of(table: pa.Table, column: str, value: str) -> pa.Array:
    return table.filter(pc.equal(table[column], value))["uniq_key"].combine_chunks()


def _true(mask) -> int:
    """Rows where ``mask`` is true (null counts as false)."""
    return int(pc.sum(mask).as_py() or 0)


class _Bucket:
    """One bucket of keys: those whose last two characters are in ``endings``.

    Bucket 0 also takes every key that does not end in two hex digits, so each key lands in
    exactly one bucket; it is described by the endings it does not own.
    """

    HEX_DIGITS = "0123456789abcdefABCDEF"

    def __init__(self, bucket: int, buckets: int):
        self.whole = buckets == 1
        pairs = [a + b for a in self.HEX_DIGITS for b in self.HEX_DIGITS]
        if bucket == 0:
            chosen = [p for p in pairs if int(p, 16) % buckets != 0]
        else:
            chosen = [p for p in pairs if int(p, 16) % buckets == bucket]
        self.complement = bucket == 0
        self.endings = pa.array(chosen, pa.string())

    def mask(self, keys: pa.Array):
        """True for the non-null ``keys`` of this bucket."""
        present = pc.is_valid(keys)
        if self.whole:
            return present
        hit = pc.is_in(pc.utf8_slice_codeunits(keys, -KEY_SUFFIX_CHARS), value_set=self.endings)
        return pc.and_(present, pc.invert(hit) if self.complement else hit)
