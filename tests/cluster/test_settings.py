"""Naming a cluster: ``executor.cluster`` in the spec, ``--maka-cluster`` (wins, ``off`` runs here), ini
``maka_cluster``; every bad value is one line naming the file and the key, exit 4, nothing runs."""

from __future__ import annotations

import pytest

from ..conftest import Cohort, needs_bwrap
from .conftest import free_port

pytestmark = [pytest.mark.sandbox, needs_bwrap]


def _one_error_line(cohort: Cohort, *args: str) -> str:
    result = cohort.run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    err = result.stderr.str()
    assert "Traceback" not in err + result.stdout.str()
    assert not (cohort.out / "attempts.jsonl").exists(), "no cell may run on a settings error"
    lines = [line for line in err.splitlines() if line.startswith("ERROR:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    ("cluster", "expected"),
    [
        ("tcp://127.0.0.1", "cohort.yaml: executor.cluster: expected a Dask scheduler address such as tcp://HOST:8786"),
        ("http://127.0.0.1:8786", "cohort.yaml: executor.cluster: expected a Dask scheduler address"),
        ("tcp://127.0.0.1:8786/x", "cohort.yaml: executor.cluster: expected a Dask scheduler address"),
        (8786, "cohort.yaml: executor.cluster: expected a Dask scheduler address (tcp://HOST:PORT) or a mapping"),
        ({"address": "tcp://h:1", "max_transfer_bytes": 10}, "executor.cluster.max_transfer_bytes: Input should be"),
        ({"address": "tcp://h:1", "colour": "red"}, "executor.cluster.colour: unknown key"),
        ({"max_transfer_bytes": 4096}, "cohort.yaml: executor.cluster.address: missing required key"),
    ],
)
def test_bad_executor_cluster_is_one_line(cohort: Cohort, cluster: object, expected: str) -> None:
    cohort.task("one")
    cohort.write(executor={"kind": "local", "cluster": cluster})
    assert expected in _one_error_line(cohort)


def test_unknown_executor_key_lists_cluster_among_the_expected(cohort: Cohort) -> None:
    cohort.task("one")
    cohort.write(executor={"kind": "local", "clustr": "tcp://127.0.0.1:8786"})
    line = _one_error_line(cohort)
    assert "cohort.yaml: executor.clustr: unknown key; expected one of: cluster, " in line
    assert ", kind, " in line and ", sandbox, " in line, "the kind's own keys are listed too"


def test_bad_option_and_ini_values_name_their_source(cohort: Cohort) -> None:
    cohort.task("one")
    cohort.write()
    line = _one_error_line(cohort, "--maka-cluster", "localhost:8786")
    assert "--maka-cluster: expected a Dask scheduler address such as tcp://HOST:8786" in line
    cohort.pytester.makeini("[pytest]\nmaka_cluster = tcp://nowhere\n")
    line = _one_error_line(cohort)
    assert "tox.ini: maka_cluster: expected a Dask scheduler address" in line


def test_off_runs_here_what_the_spec_sends_to_a_cluster(cohort: Cohort) -> None:
    """``--maka-cluster off`` beats the spec: no scheduler is contacted, Dask is not even imported."""
    cohort.task("one")
    cohort.write(executor={"kind": "local", "cluster": f"tcp://127.0.0.1:{free_port()}"})
    cohort.pytester.makeconftest(
        """
        import sys

        def pytest_sessionfinish(session):
            with open("dask-imported.txt", "w") as fh:
                fh.write(str("distributed" in sys.modules))
        """
    )
    result = cohort.run_subprocess("--maka-cluster", "off")
    result.assert_outcomes(passed=1, failed=1)
    assert {a.get("worker") for a in cohort.attempts()} == {None}, "ran here, not on a worker"
    assert (cohort.root / "dask-imported.txt").read_text() == "False"


def test_ini_off_and_ini_address_lose_to_the_spec(cohort: Cohort) -> None:
    """Precedence: option > spec > ini. An ini address is not used when the spec names another."""
    pytest.importorskip("distributed", reason="Dask is not installed: pip install 'pytest-maka[dask]'")
    cohort.task("one")
    dead = f"tcp://127.0.0.1:{free_port()}"
    cohort.write(executor={"kind": "local", "cluster": dead})
    cohort.pytester.makeini("[pytest]\nmaka_cluster = off\n")
    line = _one_error_line(cohort)
    assert f"cohort.yaml: executor.cluster: no Dask scheduler answers at {dead}" in line


def test_cluster_with_xdist_is_refused(cohort: Cohort) -> None:
    cohort.task("one")
    cohort.write(executor={"kind": "local", "cluster": f"tcp://127.0.0.1:{free_port()}"})
    line = _one_error_line(cohort, "-n", "2")
    assert "cohort.yaml: executor.cluster: drop -n/--tx: the cluster's workers are the parallelism" in line
