"""Write tests/data/rocketmq-controller-5.3.3 from a controller-mode conformance run's output.

    .venv/bin/retry-audit conformance --rocketmq 5.3.3 --controller-nodes 2 --broker-outage broker-a@9s \
        --scenario scenarios/conformance-controller.yaml --out var/conformance/controller
    .venv/bin/python tests/conformance/make_controller_fixture.py var/conformance/controller [OUT_DIR]

Each node's store is copied with what the audit of a controller-mode pair reads: the epoch file (and
its .bak), brokerIdentity, the commit log (64 KiB files), the config JSON files, the checkpoint and the
abort file of the killed master. Left out: consumequeue/ and index/ (60 KB per queue file, and the
merge reads neither), the timer wheel and log. ``manifest.json`` holds the report's role changes,
faults and node addresses, each copied file's size and SHA-256, and every send the clients made
(status, msgId, UNIQ_KEY, topic, queue) with the UNIQ_KEYs a listener was handed; ``clients/``
the clients' own ``produced`` and ``consume_attempts`` tables, as the run wrote them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
OUT_DEFAULT = ROOT / "tests" / "data" / "rocketmq-controller-5.3.3"
KEPT_FILES = ("epochFileCheckpoint", "epochFileCheckpoint.bak", "brokerIdentity", "checkpoint", "abort")
KEPT_DIRS = ("commitlog", "config")


def copy_store(src: Path, dest: Path) -> dict[str, dict]:
    files = {}
    for name in KEPT_FILES:
        if (src / name).is_file():
            files[name] = src / name
    for d in KEPT_DIRS:
        for p in sorted((src / d).glob("*")):
            if p.is_file() and (d != "config" or p.suffix == ".json"):
                files[f"{d}/{p.name}"] = p
    out = {}
    for rel, p in files.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, target)
        data = target.read_bytes()
        out[rel] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return out


def main(run: Path, out: Path) -> None:
    report = json.loads((run / "report.json").read_text())
    if out.exists():
        shutil.rmtree(out)
    stores = {}
    for node_dir in sorted((run / "stores").iterdir()):
        stores[node_dir.name] = copy_store(node_dir, out / node_dir.name)
    sends = [{k: p[k] for k in ("status", "msg_id", "uniq_key", "topic", "queue_id")}
             for p in pq.read_table(run / "clients" / "produced").to_pylist()]
    consumed = sorted({c["uniq_key"] for c in pq.read_table(run / "clients" / "consume_attempts").to_pylist()})
    manifest = {"rocketmq": report["rocketmq_version"], "scenario": report["scenario"],
                "roles": report["controller"], "faults": report["faults"], "node_addrs": report["node_addrs"],
                "imports": {n: {k: v for k, v in i.items() if k in ("records", "errors", "warnings", "controller",
                                                                     "epochs")}
                            for n, i in report["imports"].items()},
                "stores": stores, "sends": sends, "consumed_uniq_keys": consumed}
    for table in ("produced", "consume_attempts"):
        (out / "clients" / table).mkdir(parents=True)
        for part in sorted((run / "clients" / table).glob("*.parquet")):
            shutil.copyfile(part, out / "clients" / table / part.name)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True, default=str) + "\n")
    total = sum(f["bytes"] for s in stores.values() for f in s.values())
    print(f"wrote {out}: {total} bytes of store files")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else OUT_DEFAULT)
