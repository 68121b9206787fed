"""Write tests/data/rocketmq-5.3.3-tiered: a real RocketMQ 5.3.3 broker's store and its POSIX tier
after local retention deleted every commit-log file but the newest.

    .venv/bin/python tests/conformance/make_tiered_fixture.py [OUT_DIR]

The steps are tiered_run.py's (its docstring). The copy leaves out what the audit reads none of and
what would make it large: the store's IndexFile directory ``index/``, ``lock`` and ``timerwheel``
(37 MiB), and the tier's key index ``rmq_sys_INDEX/`` (one 38 MiB file the broker uploaded as it
stopped).
``manifest.json`` holds the broker settings, the steps with their timings, and the clients' lines
(every send's msgId, queue and queue offset; every listener call).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from tiered_run import BROKER, CLUSTER, GROUP, MAX_RECONSUME, PLAN, TOPIC, VERSION, play_tiered  # noqa: E402

from broker_core.store.tiered import INDEX_TOPIC  # noqa: E402

OUT_DEFAULT = ROOT / "tests" / "data" / "rocketmq-5.3.3-tiered"


def main(out: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="tiered-fixture-"))
    run = play_tiered(work)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copytree(run.store, out / "store", ignore=shutil.ignore_patterns("index", "lock", "timerwheel"))
    shutil.copytree(run.tier, out / "tier", ignore=shutil.ignore_patterns(INDEX_TOPIC))
    manifest = {"rocketmq": VERSION, "broker": BROKER, "cluster": CLUSTER, "topic": TOPIC, "group": GROUP,
                "max_reconsume_times": MAX_RECONSUME, "plan": list(PLAN),
                "settings": {k: ("<tier>" if k == "tieredStoreFilePath" else v) for k, v in run.settings.items()},
                "steps": run.steps, "events": run.events}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT_DEFAULT)
