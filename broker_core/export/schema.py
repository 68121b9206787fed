"""The data contract: one pyarrow schema per Parquet table a run directory holds.

Column names and types here are the contract other tools (Spark, DuckDB, scripts) rely on;
``docs/data-contract.md`` explains each column. Times are ``timestamp[ms, tz=UTC]``.
"""

from __future__ import annotations

import pyarrow as pa

TS = pa.timestamp("ms", tz="UTC")

COMMITLOG = pa.schema([
    ("run_id", pa.string()),
    ("broker", pa.string()),
    ("phys_offset", pa.int64()),
    ("total_size", pa.int32()),
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("msg_id", pa.string()),
    ("uniq_key", pa.string()),
    ("origin_msg_id", pa.string()),
    ("real_topic", pa.string()),
    ("real_queue_id", pa.int32()),
    ("retry_topic", pa.string()),
    ("delay_level", pa.int32()),
    ("reconsume_times", pa.int32()),
    ("max_reconsume_times", pa.int32()),
    ("tags", pa.string()),
    ("keys", pa.string()),
    ("body_size", pa.int32()),
    ("body_crc", pa.int32()),
    ("sys_flag", pa.int32()),
    # The header's PREPARED_TRANSACTION_OFFSET: on a transaction's commit record, the commit-log
    # offset of the half (or check copy) it commits; 0 on other records. Null only in runs
    # written before the column existed.
    ("prepared_tx_offset", pa.int64()),
    ("born_ts", TS),
    ("born_host", pa.string()),
    ("store_ts", TS),
    ("store_host", pa.string()),
    ("properties", pa.map_(pa.string(), pa.string())),
    # Beyond the required columns: where the record came from, for post-mortems.
    ("magic", pa.string()),
    ("file_name", pa.string()),
])

CONSUME_ATTEMPTS = pa.schema([
    ("run_id", pa.string()),
    ("group", pa.string()),
    ("consumer_id", pa.string()),
    ("model", pa.string()),
    ("queue_topic", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("msg_id", pa.string()),
    ("uniq_key", pa.string()),
    ("topic", pa.string()),
    ("reconsume_times", pa.int32()),
    ("start_ts", TS),
    ("end_ts", TS),
    ("status", pa.string()),
    ("outcome", pa.string()),
    ("phys_offset", pa.int64()),
])

SCHEDULE_DELIVERIES = pa.schema([
    ("run_id", pa.string()),
    ("delay_level", pa.int32()),
    ("schedule_queue_offset", pa.int64()),
    ("schedule_msg_id", pa.string()),
    ("delivered_msg_id", pa.string()),
    ("real_topic", pa.string()),
    ("scheduled_store_ts", TS),
    ("due_ts", TS),
    ("delivered_ts", TS),
    ("lateness_ms", pa.int64()),
    ("put_attempts", pa.int32()),
    ("uniq_key", pa.string()),
])

# Offsets are per (group, topic, broker, queue_id): each broker keeps its own consumerOffset.json
# for its own queues (queue 0 of a topic on broker-a is not queue 0 on broker-b).
CONSUMER_OFFSETS = pa.schema([
    ("run_id", pa.string()),
    ("broker", pa.string()),
    ("group", pa.string()),
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("offset", pa.int64()),
    ("ts", TS),
    ("event", pa.string()),
])

FAULTS = pa.schema([
    ("run_id", pa.string()),
    ("ts", TS),
    ("kind", pa.string()),
    ("target", pa.string()),
    ("detail", pa.string()),
])

# runs.source: where a run's records came from.
RUN_SOURCE_SIMULATION = "simulation"
RUN_SOURCE_IMPORT = "import"

RUNS = pa.schema([
    ("run_id", pa.string()),
    ("scenario", pa.string()),
    ("seed", pa.int64()),
    ("sim_start_ts", TS),
    ("sim_end_ts", TS),
    ("wall_seconds", pa.float64()),
    ("messages_produced", pa.int64()),
    ("records_written", pa.int64()),
    ("version", pa.string()),
    ("source", pa.string()),  # "simulation" or "import"
    # An import: the smallest physical offset of its broker's commit log (the first file's name;
    # > 0 once retention deleted older files). Null for a simulation, whose log starts at 0.
    ("first_offset", pa.int64()),
    # One row per broker of the run: physical offsets, and so first_offset, are per broker.
    ("broker", pa.string()),
    # The store-host part (address and port, upper-case hex) of the offset msgIds of the broker's
    # records: an ORIGIN_MESSAGE_ID that starts with one of them names a record of this broker.
    ("msg_id_hosts", pa.list_(pa.string())),
    # The delay in ms of each delay level (element k-1 for level k): a simulation's
    # messageDelayLevel; an import's as read from its schedule queues (null for a level whose
    # queue holds nothing to read it from). The lineage pairs a SCHEDULE record with its delivery
    # by it: a delivery is never stored before its record's due time.
    ("delay_levels_ms", pa.list_(pa.int64())),
])

# One row per message a producer tried to send (simulation only): the ground truth that lets the
# warehouse tell a lost message from one never sent.
PRODUCED = pa.schema([
    ("run_id", pa.string()),
    ("uniq_key", pa.string()),
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("delay_level", pa.int32()),
    ("send_ts", TS),
    ("status", pa.string()),  # SEND_OK | FAILED
    ("msg_id", pa.string()),
    ("phys_offset", pa.int64()),
    ("attempts", pa.int32()),
])

# Delay-level offsets found in (or written to) config/delayOffset.json.
DELAY_OFFSETS = pa.schema([
    ("run_id", pa.string()),
    ("broker", pa.string()),
    ("delay_level", pa.int32()),
    ("offset", pa.int64()),
])

# Imported stores: damage found while reading (empty for a clean store).
STORE_PROBLEMS = pa.schema([
    ("run_id", pa.string()),
    ("broker", pa.string()),
    ("file_name", pa.string()),
    ("offset", pa.int64()),
    ("kind", pa.string()),
    ("detail", pa.string()),
    ("severity", pa.string()),  # error | warning
])

MESSAGE_HOPS = pa.schema([
    ("run_id", pa.string()),
    ("message_key", pa.string()),
    ("group", pa.string()),
    ("hop_index", pa.int32()),
    ("hop_kind", pa.string()),
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    # A hop's record is (broker, phys_offset): a run may hold several brokers' commit logs, and a
    # message's hops may be on several of them.
    ("broker", pa.string()),
    ("phys_offset", pa.int64()),
    ("msg_id", pa.string()),
    ("delay_level", pa.int32()),
    ("reconsume_times", pa.int32()),
    ("store_ts", TS),
    ("next_store_ts", TS),
    ("dwell_ms", pa.int64()),
])

MESSAGE_LINEAGE = pa.schema([
    ("run_id", pa.string()),
    ("message_key", pa.string()),
    ("group", pa.string()),
    ("origin_topic", pa.string()),
    ("origin_msg_id", pa.string()),
    ("hops", pa.int32()),
    ("retries", pa.int32()),
    ("path", pa.string()),
    ("final_topic", pa.string()),
    ("final_state", pa.string()),
    ("first_store_ts", TS),
    ("last_store_ts", TS),
    ("total_delay_ms", pa.int64()),
    # The chain's earliest hops are not in the commit log: retention deleted them before the import.
    ("truncated", pa.bool_()),
    # 5.x POP: the revive time of the unacked last checkpoint of the chain's last record, when the
    # group popped that record and no retry followed: ahead of the snapshot (IN_FLIGHT) or passed
    # with the revive still pending (RETRYING). Null on every other row.
    ("invisible_until", TS),
    # Forks (docs/lineage.md "forks"): records beyond one per (attempt, hop kind) in the chain, the
    # hop index and broker of the first such copy, and what explains it (FORK_CAUSES).
    ("forks", pa.int32()),
    ("fork_hop_index", pa.int32()),
    ("fork_broker", pa.string()),
    ("fork_cause", pa.string()),
    # A transactional message's outcome (docs/transactions.md), the same on every row of it:
    # COMMITTED (a commit record), ROLLED_BACK (an op record decided a half copy and nothing was
    # committed), DISCARDED (copied to TRANS_CHECK_MAX_TIME_TOPIC undecided), UNDECIDED (none of
    # these at the snapshot); null for a plain message.
    ("transaction_state", pa.string()),
    # The most checks the broker made of it (TRANSACTION_CHECK_TIMES of its last copy; 0 for a
    # message decided at once); null for a plain message.
    ("transaction_checks", pa.int32()),
    # Its fan-out (multi-dispatch, LMQ; docs/lineage.md "Fan-out is not a hop"), the same on every
    # row of it: the queues its INNER_MULTI_DISPATCH lists (its first record's that lists any;
    # null when none does), and the consume-queue positions the broker gave its records there
    # (0 when it did not dispatch). One record dispatched to N queues is one message with
    # dispatches = N; more than N: copies of it (its retries) were dispatched again.
    ("dispatch_queues", pa.list_(pa.string())),
    ("dispatches", pa.int32()),
])

# 5.x POP bookkeeping, decoded by an import (broker_core.store.pop): one row per checkpoint or ack
# record, in the timer topic (stage "timer") or the revive topic (stage "revive").
POP_EVIDENCE = pa.schema([
    ("run_id", pa.string()),
    ("broker", pa.string()),
    ("phys_offset", pa.int64()),  # null for stage kv (no record)
    ("store_ts", TS),  # null for stage kv
    ("stage", pa.string()),  # timer | revive | kv (an in-flight pop of the POP KV service, kvStore/)
    ("kind", pa.string()),  # ck | ack | bAck
    ("group", pa.string()),
    ("topic", pa.string()),  # the topic popped: a message topic or the group's POP retry topic
    ("queue_id", pa.int32()),
    ("start_offset", pa.int64()),
    ("offsets", pa.list_(pa.int64())),  # a checkpoint's popped offsets; an ack's acked offset(s)
    ("pop_ts", TS),  # a checkpoint's pop time; on an ack, the pop time of the checkpoint it acks
    ("invisible_ms", pa.int64()),  # checkpoints only
    ("revive_ts", TS),  # checkpoints only: pop_ts + invisible_ms
    ("broker_name", pa.string()),
])

# Who owns each %RETRY% topic an imported store knows (config files, commit log): the group and,
# for a POP retry topic, the topic it retries. ``resolution`` says how it was decided.
RETRY_TOPICS = pa.schema([
    ("run_id", pa.string()),
    ("broker", pa.string()),
    ("retry_topic", pa.string()),
    ("group", pa.string()),  # null when ambiguous
    ("origin_topic", pa.string()),  # null for a push group's %RETRY%<group>
    ("resolution", pa.string()),  # checkpoint | config | ambiguous | name
])

# 5.x inner batches, unwrapped by an import: one row per message inside the body of an inner-batch
# record (sysFlag NEED_UNWRAP | INNER_BATCH), as the consumer's client unwraps it
# (MessageDecoder.decodeMessage): the batch record's topic, queue, times and commit-log offset;
# the message's own flag, body and properties (its UNIQ_KEY); queue offset the record's + index.
INNER_MESSAGES = pa.schema([
    ("run_id", pa.string()),
    ("broker", pa.string()),
    ("phys_offset", pa.int64()),  # the batch record's (commitlog.phys_offset)
    ("inner_index", pa.int32()),  # 0-based position in the batch body
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),  # the batch record's queue offset + inner_index
    ("uniq_key", pa.string()),  # the message's own UNIQ_KEY (what the consumer's getMsgId gives)
    ("tags", pa.string()),
    ("keys", pa.string()),
    ("flag", pa.int32()),
    ("body_size", pa.int32()),
    ("body_crc", pa.int32()),  # CRC-32 of the message's body, as commitlog.body_crc
    ("born_ts", TS),  # the batch record's
    ("store_ts", TS),  # the batch record's
    ("properties", pa.map_(pa.string(), pa.string())),  # the message's own, in stored order
])

# One row per unit of a SCHEDULE_TOPIC_XXXX consume queue (queue id = delay level - 1) naming a
# record of the valid log, for simulations and imports alike: the unit's tags code is the record's
# deliver time, so due_ts - the record's store time is the delay its level had when it was stored
# (a broker restarted with another messageDelayLevel keeps each record's own).
SCHEDULE_UNITS = pa.schema([
    ("run_id", pa.string()),
    ("broker", pa.string()),
    ("delay_level", pa.int32()),
    ("queue_offset", pa.int64()),
    ("phys_offset", pa.int64()),
    ("due_ts", TS),
])

# Transaction op records (docs/transactions.md), for simulations and imports alike: one row per
# record of RMQ_SYS_TRANS_OP_HALF_TOPIC, its body read: the queue offsets in
# RMQ_SYS_TRANS_HALF_TOPIC of the half records (or check copies) a commit or rollback decided.
TRANSACTION_OPS = pa.schema([
    ("run_id", pa.string()),
    ("broker", pa.string()),
    ("phys_offset", pa.int64()),  # the op record's (commitlog.phys_offset)
    ("store_ts", TS),
    ("queue_id", pa.int32()),  # the op queue's id: the half queue's (0)
    ("queue_offset", pa.int64()),  # in the op queue
    ("tag", pa.string()),  # "d" for every op a broker writes
    # The decided records' queue offsets in the half queue of the same queue id: one (4.9.4) or a
    # batch (5.x, "12,13," in the body). Pieces that are not numbers are left out (store_problems).
    ("half_queue_offsets", pa.list_(pa.int64())),
])

# One row per call of a transactional producer's listener (simulation; a conformance run's real
# clients too): executeLocalTransaction right after the half was stored, checkLocalTransaction
# for each check the broker sent, and what it answered (docs/transactions.md).
TRANSACTION_CALLS = pa.schema([
    ("run_id", pa.string()),
    ("producer_group", pa.string()),
    ("uniq_key", pa.string()),
    ("stage", pa.string()),  # execute | check
    ("check_times", pa.int32()),  # 0 for the execution, n for the n-th check of the message
    ("answer", pa.string()),  # LocalTransactionState: COMMIT_MESSAGE | ROLLBACK_MESSAGE | UNKNOW
    ("ts", TS),
    # A check's: the half copy the broker asked about (its commit-log offset and its queue offset
    # in RMQ_SYS_TRANS_HALF_TOPIC); null for the execution.
    ("phys_offset", pa.int64()),
    ("queue_offset", pa.int64()),
])

# A DLedger store's entries (enableDLegerCommitLog), one row per entry holding a record, imported
# or not: its Raft index and term, whether it is committed (only committed entries' records are in
# commitlog, at the same phys_offset), and which replicas of the group hold it (docs/data-contract.md).
DLEDGER_STATES = ("committed", "uncommitted", "divergent")
DLEDGER_ENTRIES = pa.schema([
    ("run_id", pa.string()),
    ("broker", pa.string()),
    ("raft_index", pa.int64()),
    ("term", pa.int64()),
    ("phys_offset", pa.int64()),  # the record's: the entry's position + 48 (commitlog.phys_offset)
    ("entry_size", pa.int32()),  # the whole entry, its 48-byte header included
    ("state", pa.string()),  # committed | uncommitted | divergent (DLEDGER_STATES)
    ("replicas", pa.list_(pa.string())),  # the dLegerSelfIds of the stores holding this (index, term)
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("uniq_key", pa.string()),
    ("store_ts", TS),
])

# The clients' message trace (docs/client-trace.md): one row per trace record a client wrote to the
# trace topic (RMQ_SYS_TRACE_TOPIC), decoded from the bodies of that topic's records in a broker's
# store. Lossy and optional: a client with trace off, a broker without the topic, or a record the
# client's dispatcher dropped leaves no row. Columns a record type has no field for are null.
CLIENT_TRACE = pa.schema([
    ("run_id", pa.string()),
    ("broker", pa.string()),  # the broker whose store holds the trace message
    ("phys_offset", pa.int64()),  # the trace message's record (commitlog.phys_offset)
    ("record_index", pa.int32()),  # the record's position in that message's body, from 0
    ("trace_type", pa.string()),  # Pub | SubBefore | SubAfter | EndTransaction (others kept as written)
    ("ts", TS),  # when the client recorded it (a SubAfter's: since 4.9.x clients; else null)
    ("region_id", pa.string()),
    ("group", pa.string()),  # producer group (Pub, EndTransaction) or consumer group (SubBefore; SubAfter when written)
    ("request_id", pa.string()),  # joins a consume's SubBefore and SubAfter
    ("topic", pa.string()),  # Pub, EndTransaction: the message's topic
    ("msg_id", pa.string()),  # the client's message id (UNIQ_KEY)
    ("tags", pa.string()),
    ("keys", pa.string()),
    ("store_host", pa.string()),  # Pub, EndTransaction: the broker address the client sent to
    ("body_length", pa.int32()),  # Pub
    ("cost_ms", pa.int32()),  # Pub: the send's time; SubAfter: the listener's (per message of its batch)
    ("msg_type", pa.string()),  # Pub, EndTransaction: MessageType (Normal_Msg, Trans_Msg_Half, ...)
    ("offset_msg_id", pa.string()),  # Pub: the stored record's offset msgId (null for a half message's send)
    ("success", pa.bool_()),  # Pub: SEND_OK; SubAfter: the listener returned success
    ("retry_times", pa.int32()),  # SubBefore: the delivery's reconsume times
    ("context_code", pa.int32()),  # SubAfter: ConsumeReturnType ordinal
    ("consume_return", pa.string()),  # SubAfter: SUCCESS | TIME_OUT | EXCEPTION | RETURNNULL | FAILED
    ("transaction_id", pa.string()),  # EndTransaction
    ("transaction_state", pa.string()),  # EndTransaction: COMMIT_MESSAGE | ROLLBACK_MESSAGE | UNKNOW
    ("from_transaction_check", pa.bool_()),  # EndTransaction: the answer to a broker's check
    ("client_host", pa.string()),  # Pub, when the client writes it
    ("fields", pa.list_(pa.string())),  # every field after the type, as written
])

# A 5.x controller-mode store's epochs (epochFileCheckpoint), one row per epoch of each imported copy of
# a broker (its master's store, its slave's): the offsets the epoch's master wrote, this copy's records
# there and the store hosts they carry (the master that wrote them), and how many of them the merge left
# out as a tail cut at a failover (docs/data-contract.md "Controller mode").
REPLICA_EPOCHS = pa.schema([
    ("run_id", pa.string()),
    ("broker", pa.string()),
    ("role", pa.string()),  # the copy's import role: master | slave
    ("broker_id", pa.int64()),  # from its brokerIdentity file (the id the controller gave it); null without
    ("epoch", pa.int32()),
    ("start_offset", pa.int64()),
    ("end_offset", pa.int64()),  # the next epoch's start; the last epoch's: the copy's valid log end
    ("records", pa.int64()),  # this copy's commit-log records in [start_offset, end_offset)
    # Their STOREHOST values, deliveries from the schedule or timer left out (they keep the address of
    # the record they were put from): the epoch's master's address.
    ("store_hosts", pa.list_(pa.string())),
    ("truncated_records", pa.int64()),  # of them, those past the point where this copy's epochs leave the other's
])

# The records a controller-mode broker's merge left out: one copy's tail past the point where its
# epochs leave the history's (a master that lost its role before a replica had them). Each one's
# identity, so the warehouse can name the message (anomaly FAILOVER_CUT).
FAILOVER_CUT = pa.schema([
    ("run_id", pa.string()),
    ("broker", pa.string()),
    ("role", pa.string()),  # the copy that held it: master | slave
    ("cut_offset", pa.int64()),  # where this copy's epochs leave the history's
    ("phys_offset", pa.int64()),
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("uniq_key", pa.string()),
    ("real_topic", pa.string()),
    ("retry_topic", pa.string()),
    ("reconsume_times", pa.int32()),
    ("store_ts", TS),
    ("store_host", pa.string()),  # the master that wrote it
])

# An imported store's multi-dispatch positions (broker_core.export.lmq_dispatches; docs/data-contract.md):
# one row per (record, queue its INNER_MULTI_DISPATCH lists), and one per unit of an %LMQ% queue
# that no record claims (state STRAY: no record facts then but its physical offset).
LMQ_DISPATCHES = pa.schema([
    ("run_id", pa.string()),
    ("broker", pa.string()),
    ("dispatch_queue", pa.string()),  # the queue named in INNER_MULTI_DISPATCH, e.g. %LMQ%a
    ("dispatch_queue_id", pa.int32()),  # 0 for an %LMQ% queue, else the record's own queue id
    ("dispatch_offset", pa.int64()),  # from INNER_MULTI_QUEUE_OFFSET; null when the broker did not dispatch
    ("phys_offset", pa.int64()),  # the record's (commitlog.phys_offset); a STRAY unit's phys offset
    ("topic", pa.string()),  # the record's own topic, queue and offset
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("uniq_key", pa.string()),
    ("state", pa.string()),  # broker_core.export.lmq_dispatches.STATES
])

# Tables a run directory's parquet/ holds, by name.
RAW_TABLES: dict[str, pa.Schema] = {
    "commitlog": COMMITLOG,
    "consume_attempts": CONSUME_ATTEMPTS,
    "schedule_deliveries": SCHEDULE_DELIVERIES,
    "consumer_offsets": CONSUMER_OFFSETS,
    "faults": FAULTS,
    "runs": RUNS,
    "produced": PRODUCED,
    "delay_offsets": DELAY_OFFSETS,
    "store_problems": STORE_PROBLEMS,
    "pop_evidence": POP_EVIDENCE,
    "retry_topics": RETRY_TOPICS,
    "inner_messages": INNER_MESSAGES,
    "schedule_units": SCHEDULE_UNITS,
    "transaction_ops": TRANSACTION_OPS,
    "transaction_calls": TRANSACTION_CALLS,
    "dledger_entries": DLEDGER_ENTRIES,
    "client_trace": CLIENT_TRACE,
    "replica_epochs": REPLICA_EPOCHS,
    "failover_cut": FAILOVER_CUT,
    "lmq_dispatches": LMQ_DISPATCHES,
}
LINEAGE_TABLES: dict[str, pa.Schema] = {
    "message_hops": MESSAGE_HOPS,
    "message_lineage": MESSAGE_LINEAGE,
}

HOP_KINDS = ("PUBLISH", "SCHEDULE", "TIMER", "DELIVER", "RETRY", "DLQ", "HALF", "DISCARD")
# message_lineage.transaction_state values (docs/lineage.md "transaction_state"); null for a plain message.
TRANSACTION_STATES = ("COMMITTED", "ROLLED_BACK", "DISCARDED", "UNDECIDED")
# message_lineage.final_state values (docs/lineage.md "final_state"): IN_FLIGHT is a 5.x POP record
# still invisible at the snapshot, RECALLED a 5.x timer recalled in the wheel.
# message_lineage.fork_cause values: the first copy of a forked chain is a record the schedule put
# again (its broker restarted from older delay offsets) or a second send-back or re-put of a message
# handed out twice.
FORK_CAUSES = ("BROKER_RESTART", "DUPLICATE_DELIVERY")
FINAL_STATES = ("CONSUMED", "DLQ", "RETRYING", "IN_FLIGHT", "UNCONSUMED", "RECALLED", "LOST")
