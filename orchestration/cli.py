"""The ``retry-audit`` command: thin argument parsing over the same functions the assets call.

Exit codes: 0 success, 1 failure, 2 bad input (or damage found under ``--strict``).
Operating errors print one line (``retry-audit: error: …``) and a hint; ``--debug`` shows the
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from assets.lineage_engine import ENGINE_DEFAULT, ENGINES
from broker_core.errors import RetryAuditError

EXAMPLES = """\
examples:
  retry-audit simulate scenarios/default.yaml --out var/runs/default --seed 7
  retry-audit import-store /var/rocketmq/store --out var/runs/broker-a
  retry-audit lineage var/runs/default
  retry-audit warehouse var/runs/default var/runs/broker-a --db var/warehouse.duckdb
  retry-audit trace C0A8000A0000000000000000000A0001 --db var/warehouse.duckdb
  retry-audit resend-plan --db var/warehouse.duckdb --group notice-service --json
  retry-audit sql --db var/warehouse.duckdb "select final_state, count(*) from message_lineage group by 1"
  retry-audit conformance --rocketmq 4.9.4 --out var/conformance/4.9.4
"""

QUIET_HELP = "print only errors (nothing from Spark's JVM either, unless --debug)"
# Where `make demo` leaves the warehouse, and what every command that reads one opens by default.
WAREHOUSE_DB_DEFAULT = "var/warehouse.duckdb"

# subcommand -> "module:function"; each function takes the parsed args and returns an exit code.
HANDLERS = {
    "simulate": "orchestration.cmd_sim:simulate",
    "swarm": "orchestration.cmd_sim:swarm",
    "import-store": "orchestration.cmd_import:import_store",
    "lineage": "orchestration.cmd_pipeline:lineage",
    "warehouse": "orchestration.cmd_pipeline:warehouse",
    "trace": "orchestration.cmd_pipeline:trace",
    "report": "orchestration.report:report",
    "resend-plan": "orchestration.cmd_pipeline:resend_plan",
    "sql": "orchestration.cmd_pipeline:sql",
    "conformance": "orchestration.cmd_conformance:conformance",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retry-audit",
        description="What happened to this message, and to all the others like it? "
                    "A retry audit warehouse for RocketMQ-style brokers.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--quiet", "-q", action="store_true", help=QUIET_HELP)
    # The same two flags are accepted after the subcommand too; SUPPRESS keeps a flag given before
    # the subcommand from being reset by the subparser's default.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks on errors")
    common.add_argument("--quiet", "-q", action="store_true", default=argparse.SUPPRESS,
                        help=QUIET_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add_command(name: str, **kwargs) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kwargs)

    p = add_command("simulate", help="run a scenario on the broker model into RUN_DIR")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--out", required=True, help="run directory to write (replaced atomically)")
    p.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    p.add_argument("--messages", type=int, default=None, metavar="N",
                   help="scale the producers to N messages in all (each keeps its share)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")

    p = add_command("import-store", help="read a RocketMQ store directory (read-only) into RUN_DIR")
    p.add_argument("store_dir", help="RocketMQ store root (holds commitlog/ or a DLedger broker's "
                                     "dledger-<selfId>/, consumequeue/, config/)")
    p.add_argument("--out", required=True, help="run directory to write (replaced atomically)")
    p.add_argument("--name", default=None, help="run id (default: the output directory's name)")
    p.add_argument("--broker", default=None, metavar="NAME",
                   help="the store is broker NAME of the run: replaces NAME's earlier import and "
                        "keeps the other brokers' (default: the run is this one store, replaced whole)")
    p.add_argument("--role", choices=("master", "slave", "replica"), default="master",
                   help="slave: the store is a slave of broker NAME (--broker): merged with its master, "
                        "each record once, what only one side has kept and reported; replica: the store is "
                        "one replica of broker NAME's DLedger group, merged with the replicas imported "
                        "before by (index, term) (default master)")
    p.add_argument("--dledger-data", default=None, metavar="DIR",
                   help="a DLedger store's entries when its broker kept them outside dledger-<selfId>/data "
                        "(storePathDLedgerCommitLog)")
    p.add_argument("--tiered", default=None, metavar="DIR",
                   help="a 5.x broker's tiered store (tieredStoreFilePath, POSIX backend): its copies of records "
                        "local retention deleted are imported too (the store is then read whole)")
    p.add_argument("--strict", action="store_true", help="any damage is an error (exit 2)")
    p.add_argument("--live", action="store_true",
                   help="the broker is running: the record it is writing at the end of the log is not damage")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--decoder", choices=("columnar", "reference"), default="columnar",
                   help="commit-log decoder: whole slices as Arrow columns (default), or one record "
                        "at a time (the reference; same tables, about 5x the CPU)")
    p.add_argument("--engine", choices=("local", "spark"), default="local",
                   help="local: this process decodes the files one after another (default); spark: "
                        "one Spark task per commit-log file, the same tables (the store and the run "
                        "directory must be paths every Spark worker sees)")
    p.add_argument("--spark-master", default=None,
                   help="Spark master URL for --engine spark (default RETRY_AUDIT_SPARK_MASTER, else local[*])")

    p = add_command("lineage", help="build message_hops and message_lineage (Spark, DuckDB or auto)")
    p.add_argument("run_dir")
    p.add_argument("--engine", choices=ENGINES, default=ENGINE_DEFAULT,
                   help="spark (default: the pipeline's engine, local or a cluster), duckdb (in this "
                        "process, the same SQL and the same tables), or auto: duckdb for a local run "
                        "whose commit-log Parquet is below assets.lineage_engine."
                        "AUTO_DUCKDB_COMMITLOG_BYTES_MAX, else spark")
    p.add_argument("--spark-master", default=None, help="Spark master URL for --engine spark (default local[*])")
    p.add_argument("--memory-limit", default=None, metavar="SIZE",
                   help="DuckDB's memory limit for --engine duckdb (or auto when it picks DuckDB), e.g. "
                        "3GB: past it DuckDB spills to disk under the run directory (default: DuckDB's "
                        "own, 80%% of RAM; a 10M-record run peaks at about 9 GiB without one)")

    p = add_command("warehouse", help="load runs into the DuckDB audit warehouse",
                       description="Load runs into the DuckDB audit warehouse and run the checks. "
                                   "Exit 0 when every blocking check passes, 1 when a blocking "
                                   "(ERROR) check fails on a run (the warehouse is kept, to look "
                                   "into it), 2 on bad input.")
    p.add_argument("run_dirs", nargs="+")
    p.add_argument("--db", default=WAREHOUSE_DB_DEFAULT)

    p = add_command("trace", help="one message's journey as a timeline",
                       description="One message's journey as a timeline. Exit 0 when a message "
                                   "has the key, 1 when none has (the lookup failed), 2 on bad "
                                   "input (no warehouse file).")
    p.add_argument("key", help="UNIQ_KEY, offset msgId or ORIGIN_MESSAGE_ID")
    p.add_argument("--db", default=WAREHOUSE_DB_DEFAULT)
    p.add_argument("--json", action="store_true")

    p = add_command("report", help="one-file HTML report with the plots of a run")
    p.add_argument("run_dir")
    p.add_argument("--out", required=True)
    p.add_argument("--db", default=None, help="warehouse to read (default: build from the run)")

    p = add_command("resend-plan", help="DLQ messages to resend to their RETRY_TOPIC")
    p.add_argument("--db", default=WAREHOUSE_DB_DEFAULT)
    p.add_argument("--group", required=True)
    p.add_argument("--origin-topic", default=None)
    p.add_argument("--json", action="store_true", help="JSON instead of CSV")

    p = add_command("sql", help="run a query on the warehouse (read-only)")
    p.add_argument("query")
    p.add_argument("--db", default=WAREHOUSE_DB_DEFAULT)
    p.add_argument("--json", action="store_true")

    p = add_command("conformance", help="real RocketMQ brokers and clients vs the audit and the model",
                       description="Run a scenario on real RocketMQ (a name server and two brokers "
                                   "from Maven Central jars, real clients) and on the model; audit "
                                   "the real stores and compare message by message. Writes "
                                   "OUT/report.json, OUT/stores/<broker>/, OUT/clients/<table>/. "
                                   "Exit 0 when the audit agrees with the clients and every "
                                   "model/real difference is explained, 1 otherwise, 2 on bad input. "
                                   "Needs java, javac and mvn.")
    p.add_argument("--rocketmq", default="4.9.4", help="RocketMQ release (default 4.9.4)")
    p.add_argument("--scenario", default="scenarios/conformance.yaml", help="scenario YAML file")
    p.add_argument("--out", required=True, help="output directory (an earlier run's is replaced)")
    p.add_argument("--broker-outage", action="append", default=[], metavar="BROKER@FROM-TO",
                   help="kill a real broker with SIGKILL at FROM and restart it at TO (times from the "
                        "first send, e.g. broker-a@3s-6s; BROKER@FROM: not restarted); repeatable")
    p.add_argument("--dledger-nodes", type=int, default=0, metavar="N",
                   help="the real cluster is one broker, broker-a, a DLedger group of N nodes "
                        "(enableDLegerCommitLog); an outage of it kills its master (default 0: two brokers)")
    p.add_argument("--client-trace", action="store_true",
                   help="brokers host the message-trace topic and every real client traces its sends, "
                        "consumes and transaction decisions; the report compares the trace with the clients' log")
    p.add_argument("--controller-nodes", type=int, default=0, metavar="N",
                   help="5.x: the real cluster is one broker, broker-a, as N brokers in controller mode (the "
                        "controller in the name server): a master and its slaves; an outage of it kills its "
                        "master and the controller elects a slave (default 0: two brokers)")

    p = add_command("swarm", help="run random scenarios with faults and check every invariant")
    p.add_argument("--seeds", default="1..20", help="A..B (inclusive)")
    p.add_argument("--json", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    module_name, func_name = HANDLERS[args.command].split(":")
    try:
        handler = getattr(importlib.import_module(module_name), func_name)
        return int(handler(args) or 0)
    except RetryAuditError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"retry-audit: error: {exc}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("retry-audit: interrupted; no partial output was left in place", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence prints one line
        if args.debug:
            traceback.print_exc()
        print(f"retry-audit: internal error: {type(exc).__name__}: {exc} (rerun with --debug)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
