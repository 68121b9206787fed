-- The order of a chain's hops: hop_index, with the store time, broker and offset to break ties.
hop_index, store_ts, broker, phys_offset
