-- Brokers whose commit log starts past offset 0: retention deleted their oldest files before the
-- import (runs.first_offset, one runs row per broker; null for a simulation). cut_brokers lists
-- every broker of a run that has such a broker, with its first offset (first_offset) and the same
-- written as the upper-case hex digits an offset msgId ends with ('' for a log from 0): fixed-width hex orders as the number
-- does, so an ORIGIN_MESSAGE_ID is compared with it as text and nothing is cast. host_cuts says,
-- for a record on `broker` whose ORIGIN_MESSAGE_ID starts with store host `host`, the first offset
-- of the broker that host names: the broker itself when its records have that host, else the first
-- by name among those whose records have it. A host no broker has names the record's own broker.
-- cut_runs: the runs with such a broker. restored_records: the offset msgIds (upper case) of the
-- records below their broker's first offset that the run holds all the same (an import with
-- --tiered brings them back from the broker's tiered store): an ORIGIN_MESSAGE_ID naming one of
-- them names no deleted record. Five CTEs, inserted after WITH or a comma; the lineage and the
-- checks read them (Spark SQL and DuckDB); they read runs and records (the lineage's records, a
-- check's CTE over the commit log).
cut_brokers AS (
    SELECT run_id, broker,
           max(CASE WHEN first_offset > 0 THEN lpad(hex(first_offset), {{msg_id_offset_hex_chars}}, '0')
                    ELSE '' END) AS first_offset_hex,
           max(coalesce(first_offset, 0)) AS first_offset
    FROM runs
    WHERE broker IS NOT NULL
      AND run_id IN (SELECT run_id FROM runs WHERE first_offset > 0)
    GROUP BY run_id, broker
),
cut_broker_hosts AS (
    SELECT DISTINCT run_id, broker, host
    FROM (SELECT run_id, broker, {{explode}}(msg_id_hosts) AS host
          FROM runs
          WHERE broker IS NOT NULL AND run_id IN (SELECT run_id FROM cut_brokers)) h
),
host_cuts AS (
    SELECT o.run_id, o.broker, t.host,
           min_by(b.first_offset_hex, (t.broker <> o.broker, t.broker)) AS first_offset_hex
    FROM cut_brokers o
    JOIN cut_broker_hosts t ON t.run_id = o.run_id
    JOIN cut_brokers b ON b.run_id = t.run_id AND b.broker = t.broker
    GROUP BY o.run_id, o.broker, t.host
),
cut_runs AS (
    SELECT DISTINCT run_id FROM cut_brokers
),
restored_records AS (
    -- The runs rows are few: broadcast, so only the records below a first offset (none without a
    -- tiered store) reach the aggregation.
    SELECT /*+ BROADCAST(b) */ DISTINCT r.run_id, upper(r.msg_id) AS msg_id
    FROM records r
    JOIN (SELECT run_id, broker, max(first_offset) AS first_offset
          FROM runs WHERE broker IS NOT NULL AND first_offset > 0 GROUP BY run_id, broker) b
      ON b.run_id = r.run_id AND b.broker = r.broker
    WHERE r.phys_offset < b.first_offset
)
