"""Fidelity first: honest solutions that change the environment pass on Docker, as in Harbor 0.25.

The five tasks in ``honest_tasks/`` are shaped like Terminal-Bench 2 tasks whose solutions
leave the environment changed: a service left running and checked over HTTP on localhost, a
config file under ``/etc``, a config file under the user's HOME (read by the test through its
own ``Path.home()``, as the public jupyter-notebook-server task does), a command in
``/usr/local/bin``, a package pip-installed into the system site-packages. Harbor grades each
oracle 1 and each nop 0; so must this harness. Where the verifier ran code the subject placed
outside the workdir, the pass is recorded as tainted (with the paths), and refused only under
``policy.refuse_tainted``.

With the tasks of ``bench/harbor_parity_tasks/`` (an image ``ENV PATH``, a multi-key reward, a
separate verifier) they are the parity set that ``bench/harbor_parity.py`` runs through Harbor
0.25 and this harness (docs/benchmarks.md has the table); the tests here keep this harness's
half of it true without Harbor.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ..conftest import Cohort

pytestmark = pytest.mark.docker

TASKS = Path(__file__).parent / "honest_tasks"
#: The parity set's other folder: harness features rather than changes to the environment.
FEATURE_TASKS = Path(__file__).parents[2] / "bench" / "harbor_parity_tasks"
NAMES = ("command-in-usr-local-bin", "config-in-etc", "config-in-home", "package-in-system-site-packages")
#: A service the subject left running, which the verifier checks: it keeps running on Docker, whose
#: verdict channel is private (docs/security.md, "The verdict channel").
SERVICE = "service-left-running"


@pytest.fixture
def twins(cohort: Cohort, docker_api, tmp_path_factory: pytest.TempPathFactory) -> Cohort:  # type: ignore[no-untyped-def]
    for name in NAMES:
        shutil.copytree(TASKS / name, cohort.tasks / name)
    cohort.state = tmp_path_factory.mktemp("state")  # type: ignore[attr-defined]
    return cohort


def run(c: Cohort, names: tuple[str, ...] = NAMES, **policy: bool) -> dict[str, dict]:  # type: ignore[type-arg]
    c.write(
        executor={"kind": "docker", "kill_grace_sec": 0.5, "state_dir": str(c.state)},  # type: ignore[attr-defined]
        retries={"infra": 1},
        **({"policy": policy} if policy else {}),
    )
    result = c.run_subprocess("-n", "2", timeout=900)
    records = c.results()
    assert len(records) == 2 * len(names), result.stdout.str()[-3000:]
    return records


def test_honest_twins_pass_with_oracle_and_fail_with_nop_on_docker(twins: Cohort) -> None:
    records = run(twins)
    status = {cid: r["status"] for cid, r in records.items()}
    assert status == {
        **{f"{n}[oracle-r0]": "agent_success" for n in NAMES},
        **{f"{n}[nop-r0]": "agent_failure" for n in NAMES},
    }, {cid: (r["status"], r["error"]) for cid, r in records.items()}
    taint = {cid.split("[")[0]: r["taint"] for cid, r in records.items() if "oracle" in cid}
    # data the verifier read is listed, not taint; code it ran is taint, with the path
    assert not taint["config-in-etc"]["tainted"] and "/etc/maka-app/app.conf" in taint["config-in-etc"]["accessed"]
    assert "/root/.maka-app/app.conf" in taint["config-in-home"]["accessed"], taint["config-in-home"]
    assert taint["command-in-usr-local-bin"]["paths"] == ["/usr/local/bin/maka-greet"]
    assert taint["command-in-usr-local-bin"]["tainted"]
    package = taint["package-in-system-site-packages"]
    assert package["tainted"] and any("/dist-packages/makagreet/" in p for p in package["paths"]), (
        package["paths"],
        package["accessed"],
        package["changed"],
    )
    assert all(t["checked"] and t["schema"] == "pytest-maka/taint/1" for t in taint.values()), taint
    assert not any(c.startswith("/solution") for t in taint.values() for c in t["changed"]), "the harness's upload"


def test_refuse_tainted_refuses_only_the_passes_that_ran_subject_code(twins: Cohort) -> None:
    records = run(twins, refuse_tainted=True)
    oracle = {cid.split("[")[0]: r for cid, r in records.items() if "oracle" in cid}
    assert oracle["config-in-etc"]["status"] == "agent_success"
    for name in ("command-in-usr-local-bin", "package-in-system-site-packages"):
        r = oracle[name]
        assert (r["status"], r["official"], r["taint"]["refused"]) == ("agent_failure", True, True), r["error"]
        assert "tainted" in r["error"]["message"], r["error"]


def test_a_service_the_subject_left_running_answers_the_verifier(cohort: Cohort, docker_api, tmp_path) -> None:  # type: ignore[no-untyped-def]
    shutil.copytree(TASKS / SERVICE, cohort.tasks / SERVICE)
    cohort.state = tmp_path / "state"  # type: ignore[attr-defined]
    records = run(cohort, (SERVICE,))
    assert records[f"{SERVICE}[nop-r0]"]["status"] == "agent_failure"
    oracle = records[f"{SERVICE}[oracle-r0]"]
    assert oracle["status"] == "agent_success", oracle["error"]
    assert not oracle["taint"]["tainted"], oracle["taint"]


def test_the_parity_sets_feature_tasks_pass_with_oracle_and_fail_with_nop_on_docker(
    cohort: Cohort, docker_api: object, tmp_path: Path
) -> None:
    names = tuple(sorted(p.name for p in FEATURE_TASKS.iterdir() if (p / "task.toml").is_file()))
    assert {"image-env", "multi-reward", "separate-verifier"} <= set(names), names
    for name in names:
        shutil.copytree(FEATURE_TASKS / name, cohort.tasks / name)
    cohort.state = tmp_path / "state"  # type: ignore[attr-defined]
    records = run(cohort, names)
    assert {cid: r["status"] for cid, r in records.items()} == {
        **{f"{n}[oracle-r0]": "agent_success" for n in names},
        **{f"{n}[nop-r0]": "agent_failure" for n in names},
    }, {cid: (r["status"], r["error"]) for cid, r in records.items()}
