"""A broker model writing a store in a loop, as a separate process: ``python live_writer.py ROOT N``.

It appends N records (small commit-log files, so it rolls over to new ones; some delayed, some
retries), flushing after each so a reader in another process sees every record as it lands, and
rewrites config/consumerOffset.json every 50 records. It writes in four quarters and waits before
quarter q until ROOT/../imported holds at least q lines (the test appends one per import), so
imports certainly run while it writes. It shuts the store down cleanly at the end.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from broker_core.store.config_files import save_consumer_offsets
from broker_core.store.message_store import MessageInner, MessageStore, StoreConfig

FILE_SIZE_BYTES = 64 * 1024
WAIT_STEP_S = 0.01
WAIT_FOR_IMPORTS_S_MAX = 120  # the test imports in a loop; a limit keeps a broken test from hanging


def main(root: Path, count: int) -> None:
    now = [1_700_000_000_000]
    store = MessageStore(root, StoreConfig(commitlog_file_size_bytes=FILE_SIZE_BYTES), lambda: now[0])
    assert store.load()
    store.start()
    marker = root.parent / "imported"
    quarters = {count * q // 4: q for q in (1, 2, 3)}
    for i in range(count):
        quarter = quarters.get(i)
        if quarter:
            waited = 0.0
            while not marker.exists() or len(marker.read_text().splitlines()) < quarter:
                time.sleep(WAIT_STEP_S)
                waited += WAIT_STEP_S
                if waited > WAIT_FOR_IMPORTS_S_MAX:
                    raise SystemExit(f"no import for {WAIT_FOR_IMPORTS_S_MAX} s")
        now[0] += 3
        props = {"UNIQ_KEY": f"W-{i}", "TAGS": "t"}
        if i % 7 == 0:
            props["DELAY"] = "2"
        topic = "%RETRY%g1" if i % 4 == 0 else "Orders"
        assert store.put_message(MessageInner(topic, i % 2, b"x" * (50 + i % 300), props)).ok
        store.flush()
        if i % 50 == 0:
            save_consumer_offsets(root / "config", {"Orders@g1": {0: i // 4, 1: i // 5}})
    save_consumer_offsets(root / "config", {"Orders@g1": {0: count // 4, 1: count // 5}})
    store.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
