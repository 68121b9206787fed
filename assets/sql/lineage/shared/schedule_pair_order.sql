-- The order in which SCHEDULE records and re-put records meet (chained.sql): waiting time (a
-- SCHEDULE's due time), a SCHEDULE before a re-put at the same time, then record order.
waits_from_ms ASC NULLS FIRST, pair_role ASC NULLS FIRST, store_ts ASC NULLS FIRST, broker ASC NULLS FIRST,
phys_offset ASC NULLS FIRST
