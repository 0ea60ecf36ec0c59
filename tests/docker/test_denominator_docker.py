"""A subject cannot push its failure out of the official denominator, on Docker (issue 22, §4).

The executor-level attacks (a FIFO or a link to /dev/zero where the verifier reads, network
failure text, an absurd usage.json, nested reports) are in the conformance suite
(``testing/conformance/denominator.py``, run on Docker by ``test_conformance.py``). Here, whole
cohorts with ``executor: {kind: docker}``: nested reports with the reports and ``maka report``
still written, and a full disk, on a second engine whose data-root is a small loop disk.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import Cohort
from ..executors.test_denominator import READS_OUTPUT
from .second_engine import SecondEngine

pytestmark = pytest.mark.docker


def _one(cohort: Cohort, state: Path, command: str) -> dict:
    cohort.task("t", test=READS_OUTPUT)
    executor = {"kind": "docker", "kill_grace_sec": 0.5, "state_dir": str(state)}
    cohort.write(subjects=[{"name": "s", "kind": "command", "command": command}], executor=executor)
    result = cohort.run_subprocess("-p", "no:cacheprovider", timeout=600)
    records = cohort.results() if (cohort.out / "results.jsonl").is_file() else {}
    assert "t[s-r0]" in records, result.stdout.str()[-3000:]
    return records["t[s-r0]"]


@pytest.fixture
def state(docker_api, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    return tmp_path_factory.mktemp("state")


@pytest.mark.parametrize("name", ["usage.json", "claim.json", "trajectory.json"])
def test_deeply_nested_reports_are_the_subjects_own_problem(cohort: Cohort, state: Path, name: str) -> None:
    deep = "python3 -c \"print('[' * 200000 + ']' * 200000)\""
    record = _one(cohort, state, f"echo wrong > /app/output.txt; {deep} > $MAKA_LOGS_DIR/{name}")
    assert record["status"] == "agent_failure" and record["official"], record
    for view in ("report.html", "summary.md"):
        assert (cohort.out / view).is_file()
        (cohort.out / view).unlink()
    rebuilt = subprocess.run([sys.executable, "-m", "pytest_maka.cli", "report", str(cohort.out)],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert rebuilt.returncode == 0 and "Traceback" not in rebuilt.stderr, rebuilt.stderr[-2000:]
    assert "t[s-r0]" in (cohort.out / "report.html").read_text() and (cohort.out / "summary.md").is_file()


SMALL_IMAGE = "debian:bookworm-slim"


@pytest.fixture
def small_engine(docker_api) -> Iterator[SecondEngine]:  # type: ignore[no-untyped-def]
    """A second engine whose data-root is a 400 MB ext4 disk of its own (loop-mounted in its
    root, unmounted and deleted by ``stop``): filling it fills nothing else."""
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("dockerd", "ip", "mkfs.ext4", "mount")):
        pytest.skip("a second dockerd on a loop disk needs root, dockerd, ip, mkfs.ext4 and mount")
    engine = SecondEngine()
    try:
        image, data = engine.root / "disk.img", engine.root / "data"
        subprocess.run(["truncate", "-s", "400M", str(image)], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-m", "0", "-N", "40000", str(image)], check=True)
        data.mkdir()
        subprocess.run(["mount", "-o", "loop", str(image), str(data)], check=True)
        engine.start()
        engine.load_from(docker_api, SMALL_IMAGE)
        yield engine
    finally:
        engine.stop()


def _on_small_disk(
    cohort: Cohort, engine: SecondEngine, state: Path, command: str, *, extra_toml: str = "", **spec: object
) -> dict:
    cohort.task("t", test=READS_OUTPUT, agent_timeout=180, extra_toml=extra_toml)
    executor = {"kind": "docker", "engines": [engine.url], "default_image": SMALL_IMAGE, "state_dir": str(state),
                "kill_grace_sec": 0.5}  # fmt: skip
    cohort.write(subjects=[{"name": "s", "kind": "command", "command": command}], executor=executor, **spec)
    result = cohort.run_subprocess("-p", "no:cacheprovider", timeout=600)
    records = cohort.results() if (cohort.out / "results.jsonl").is_file() else {}
    assert "t[s-r0]" in records, result.stdout.str()[-3000:]
    return records["t[s-r0]"]


@pytest.mark.parametrize(
    "fill",
    [
        "dd if=/dev/zero of=/app/fill bs=1M 2>/dev/null; dd if=/dev/zero of=/app/fill2 bs=4k 2>/dev/null",
        "mkdir /app/many; cd /app/many; i=0; while : > f$i 2>/dev/null; do i=$((i+1)); done",
    ],
    ids=["space", "inodes"],
)
def test_a_full_disk_the_container_s_layer_filled_is_the_subject_s_result(
    cohort: Cohort, small_engine: SecondEngine, state: Path, fill: str
) -> None:
    """The subject fills the engine's disk from its writable layer: a harness step after it
    fails (the reference container that reads the image's workdir for the diff, the archive of
    the verification's mount points), and the evidence (the layer holds what was free at the
    lease's start) makes it the subject's: a note beside the verifier's rejection, or the
    attempt refused, either way its official failure, run once."""
    record = _on_small_disk(cohort, small_engine, state, f"echo wrong > /app/output.txt; {fill}; true",
                            retries={"infra": 1})  # fmt: skip
    assert record["status"] == "agent_failure" and record["official"], record
    assert record["attempt_count"] == 1
    assert "the subject filled it" in json.dumps(record), record


def test_a_full_disk_at_the_separate_verifier_s_container_is_the_subject_s_result(
    cohort: Cohort, small_engine: SecondEngine, state: Path
) -> None:
    """A separate verifier environment shares the engine's disk: the subject's layer filled it,
    so the verifier's container cannot be made, and the attempt is refused as its failure."""
    fill = "dd if=/dev/zero of=/app/fill bs=1M 2>/dev/null; dd if=/dev/zero of=/app/fill2 bs=4k 2>/dev/null"
    separate = f'[verifier.environment]\ndocker_image = "{SMALL_IMAGE}"\n'
    record = _on_small_disk(cohort, small_engine, state, f"echo wrong > /app/output.txt; {fill}; true",
                            extra_toml=separate, retries={"infra": 1})  # fmt: skip
    assert record["status"] == "agent_failure" and record["official"], record
    assert record["attempt_count"] == 1
    message = record["error"]["message"]
    assert "verifier's container" in message and "the subject filled it" in message, message


def test_a_disk_something_else_filled_stays_an_infrastructure_failure(
    cohort: Cohort, small_engine: SecondEngine, state: Path
) -> None:
    """While the subject waits after writing its output, a host process fills the engine's disk
    (a file beside the containers' layers): the harness's write fails, the layer accounts for
    nothing of it, so no verdict is given and the attempt is not official."""
    data = small_engine.root / "data"
    filler = data / "filler"

    def fill() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(data.glob("overlay2/*/diff/app/output.txt")):
            time.sleep(0.1)
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M"], capture_output=True, check=False)
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}.tail", "bs=4k"], capture_output=True, check=False)

    thread = threading.Thread(target=fill, daemon=True)
    thread.start()
    wait_full = 'while [ "$(stat -f -c %a /)" -gt 64 ]; do sleep 0.2; done'  # until the filler is done
    record = _on_small_disk(
        cohort, small_engine, state, f"echo wrong > /app/output.txt; {wait_full}", retries={"infra": 0}
    )
    thread.join(timeout=60)
    assert filler.is_file(), "the host filler never ran"
    assert record["status"] == "infra_failure" and not record["official"], record
    assert "no space left on device" in json.dumps(record), record
