"""`make ui`: the embedded broker, a small producer and `dagster dev` on the demo definitions on 127.0.0.1.

Everything lives under `.cohort/ui/` and starts fresh (the embedded broker keeps nothing, so committed
offsets from an earlier session would point past its end): the store, the sink (`lake/`), the demo's
derived table (`derived/`) and the Dagster instance (`dagster/`). The demo's sensors (membership, topic,
and the automation sensor that keeps `events_by_kind` up to date) are declared running, so `dagster dev`'s
daemon ticks them from the start; the instance needs no `dagster.yaml` (Dagster's own
`default_automation_condition_sensor` would be created stopped; the demo declares its own instead).
`dagster dev` is started through
`env --default-signal=INT` so it can be interrupted even when this process was started in the
background, and it is stopped with SIGTERM (then SIGKILL after a timeout) by whoever started it.

Example:
    $ make ui        # open http://127.0.0.1:3000, an asset of group demo_ingest, Materialize (all partitions)
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from cohort.demo.definitions import DEMO_TOPIC
from cohort.devtools.topics import create_topic, produce

__all__ = ["PRODUCER_PARTITIONS", "sample_event", "serve_ui", "stop_process_group", "ui_environment"]

PRODUCER_PARTITIONS = 6
KINDS = ("view", "click", "purchase")


def sample_event(sequence: int) -> bytes:
    """One demo event as JSON: kinds and amounts vary so the demo's per-kind aggregate has something to show."""
    kind = KINDS[sequence % 7 % len(KINDS)]
    event = {"event_id": sequence, "user": f"user-{sequence % 50}", "kind": kind, "amount": sequence % 10 + 0.5}
    return json.dumps(event).encode()


def ui_environment(bootstrap: str, root: Path) -> dict[str, str]:
    """The environment `cohort.demo.definitions` and the Dagster instance read, for a session under `root`."""
    return {
        "COHORT_BOOTSTRAP_SERVERS": bootstrap,
        "COHORT_STORE_URL": f"sqlite:///{root / 'cohort.db'}",
        "COHORT_SINK": str(root / "lake"),
        "DAGSTER_HOME": str(root / "dagster"),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def serve_ui(bootstrap: str, root: Path, *, port: int = 3000, startup_timeout_s: float = 180.0) -> Iterator[str]:
    """Run `dagster dev` on 127.0.0.1:`port` for a session under `root`; yields its base URL."""
    env = {**os.environ, **ui_environment(bootstrap, root)}
    Path(env["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)
    dagster = str(Path(sys.executable).parent / "dagster")
    command = [
        "env",
        "--default-signal=INT",
        dagster,
        "dev",
        "-m",
        "cohort.demo.definitions",
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
    ]
    log = open(root / "dagster-dev.log", "wb")  # noqa: SIM115 - closed below, after the child
    process = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not _ready(f"{base}/server_info"):
            if process.poll() is not None:
                raise RuntimeError(f"dagster dev exited with {process.returncode}; see {root / 'dagster-dev.log'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"dagster dev did not answer within {startup_timeout_s:.0f} s")
            time.sleep(1)
        yield base
    finally:
        stop_process_group(process)
        log.close()


def stop_process_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM a Dagster server's process group (started with `start_new_session`), SIGKILL it if it does not
    exit within 30 s."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _produce_forever(config: dict[str, str], stop: threading.Event, interval_s: float = 2.0) -> None:
    """A small producer: one JSON event per partition every `interval_s` until `stop`."""
    sequence = 10_000
    while not stop.wait(interval_s):
        records = []
        for partition in range(PRODUCER_PARTITIONS):
            sequence += 1
            records.append((partition, None, sample_event(sequence)))
        with contextlib.suppress(Exception):  # the broker is stopping: nothing to report
            produce(config, DEMO_TOPIC, records)


def main() -> int:
    """Start the broker, the producer and the UI; stop everything on Ctrl-C or SIGTERM."""
    from cohort.devtools.embedded_broker import EmbeddedBroker

    root = Path.cwd() / ".cohort" / "ui"  # `make ui` runs from the repository root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with EmbeddedBroker() as broker:
        config = {"bootstrap.servers": broker.bootstrap_servers}
        create_topic(config, DEMO_TOPIC, PRODUCER_PARTITIONS)
        first = [(i % PRODUCER_PARTITIONS, None, sample_event(i)) for i in range(600)]
        produce(config, DEMO_TOPIC, [*first, (0, None, b"{not json")])
        producer = threading.Thread(target=_produce_forever, args=(config, stop), daemon=True)
        producer.start()
        port = int(os.environ.get("COHORT_UI_PORT", "3000"))
        with serve_ui(broker.bootstrap_servers, root, port=port) as url:
            print(f"Dagster UI on {url} (broker {broker.bootstrap_servers}, state in {root}); Ctrl-C to stop")
            print(
                "Materialize an asset of group demo_ingest (all partitions: one run hosts every worker slot), or "
                "turn on the schedule 'cohort_batches__demo_ingest'; events_by_kind follows by declarative automation."
            )
            while not stop.wait(1.0):
                pass
        producer.join(timeout=10)
    print("stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
