-- A hop's previous hop along its chain: its kind, broker and commit-log offset (lineage_rows.sql
-- reads them: a RETRY whose SCHEDULE retention deleted). Over the window `chain` of the step that
-- uses it, a (message, group)'s hops h in chain order: chained.sql numbers the hops in that window,
-- so the lag costs no sort of its own there.
lag(h.hop_kind) OVER chain AS prev_kind, lag(h.broker) OVER chain AS prev_broker,
lag(h.phys_offset) OVER chain AS prev_phys
