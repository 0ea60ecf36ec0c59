"""Separate verifier environments through whole cohorts, with tasks laid out as ``harbor tasks init`` writes them."""

from __future__ import annotations

import contextlib
import os
import textwrap
from pathlib import Path

import docker.errors
import pytest
import requests.exceptions

from ..conftest import Cohort

pytestmark = pytest.mark.docker

BASE = "python:3.11-slim"


def harbor_task(
    root: Path,
    name: str,
    *,
    toml_extra: str,
    test_sh: str,
    solve: str,
    tests_dockerfile: str | None = None,
    collect: str = "",
    tail: str = "",
    environment_dockerfile: str = f"FROM {BASE}\nWORKDIR /app\n",
) -> Path:
    """A task as Harbor 0.25's template lays it out (schema 1.4, [task], separate verifier)."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "task.toml").write_text(
        textwrap.dedent(
            f"""\
            schema_version = "1.4"
            {toml_extra}
            [task]
            name = "maka-tests/{name}"
            version = "1.0.0"
            description = ""

            [metadata]

            [verifier]
            timeout_sec = 120.0
            environment_mode = "separate"
            {collect}
            [agent]
            timeout_sec = 120.0

            [environment]
            build_timeout_sec = 600.0
            """
        )
        + tail
    )
    (task / "instruction.md").write_text("Write the answer to /app/out/answer.txt.\n")
    (task / "environment" / "Dockerfile").write_text(environment_dockerfile)
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + textwrap.dedent(test_sh))
    if tests_dockerfile is not None:
        (task / "tests" / "Dockerfile").write_text(tests_dockerfile)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + textwrap.dedent(solve))
    return task


@pytest.fixture
def docker_cohort(cohort: Cohort, docker_api, tmp_path_factory: pytest.TempPathFactory) -> Cohort:  # type: ignore[no-untyped-def]
    cohort.state = tmp_path_factory.mktemp("state")  # type: ignore[attr-defined]
    return cohort


def _run(c: Cohort, *extra: str) -> pytest.RunResult:
    c.write(
        subjects=[{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}],
        executor={"kind": "docker", "kill_grace_sec": 0.5, "state_dir": str(c.state)},  # type: ignore[attr-defined]
    )
    return c.run_subprocess(*extra, timeout=400)


def _remove_images(docker_api, task: str) -> None:  # type: ignore[no-untyped-def]
    """Remove the images this test built (best effort: a slow engine does not fail a test that passed)."""
    for image in docker_api.images(filters={"label": f"io.pytest-maka.task={task}"}):
        with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
            docker_api.remove_image(image["Id"], force=True)


def test_verifier_image_from_tests_dockerfile_sees_only_the_artifacts(docker_cohort: Cohort, docker_api) -> None:  # type: ignore[no-untyped-def]
    c = docker_cohort
    token = os.urandom(8).hex()  # a fresh image: one left by an interrupted run would hide the build
    harbor_task(
        c.tasks,
        "own-image",
        toml_extra='artifacts = ["/app/out"]',
        tests_dockerfile=(
            f"FROM {BASE}\nRUN echo verifier-image > /verifier-marker && echo {token} > /token\n"
            "RUN mkdir -p /opt/vtools/bin && printf '#!/bin/sh\\necho tool-ok\\n' > /opt/vtools/bin/vtool"
            " && chmod +x /opt/vtools/bin/vtool\n"
            "ENV VERIFIER_IMAGE_VAR=from-image PATH=/opt/vtools/bin:$PATH\n"
            "WORKDIR /app\nCOPY . /tests/\n"
        ),
        solve="""\
            mkdir -p /app/out && echo 42 > /app/out/answer.txt
            echo planted > /app/planted.txt
            echo planted > /tmp/planted.txt
            (trap '' TERM; while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done) >/dev/null 2>&1 &
            """,
        test_sh="""\
            ok=1
            [ "$(cat /verifier-marker)" = verifier-image ] || ok=0
            [ "$(cat /app/out/answer.txt)" = 42 ] || ok=0
            [ -e /app/planted.txt ] && ok=0
            [ -e /tmp/planted.txt ] && ok=0
            [ -f /tests/test.sh ] || ok=0
            # the verifier image's own ENV holds in its container (a venv on PATH, its variables)
            [ "$VERIFIER_IMAGE_VAR" = from-image ] || ok=0
            [ "$(vtool)" = tool-ok ] || ok=0
            echo $ok > /logs/verifier/reward.txt
            """,
    )
    result = _run(c, "-n", "2")
    status = c.status()
    assert status == {"own-image[oracle-r0]": "agent_success", "own-image[nop-r0]": "agent_failure"}, (
        result.stdout.str()[-3000:]
    )
    verifier = c.results()["own-image[oracle-r0]"]["verifier"]
    assert verifier["environment"]["mode"] == "separate"
    assert verifier["environment"]["definition"] == "tests/Dockerfile"
    assert verifier["environment"]["image"].startswith("sha256:")
    carried = {a["source"]: a for a in verifier["artifacts"]}
    assert carried["/app/out"]["bytes"] == 3 and carried["/app/out"]["entries"] == 2, carried
    nop = c.results()["own-image[nop-r0]"]["verifier"]["artifacts"]
    assert {a["source"]: a.get("not_carried") for a in nop}["/app/out"] == "absent"
    # one verifier image build for both cells (built once per digest, under the images' lock)
    assert len(list(c.out.glob("cells/*/attempt-*/verifier-build.log"))) == 1
    assert docker_api.containers(all=True, filters={"label": "io.pytest-maka.task=own-image"}) == []
    _remove_images(docker_api, "own-image")


def test_copy_of_the_task_environment_skips_links_and_excluded_files(docker_cohort: Cohort, docker_api) -> None:  # type: ignore[no-untyped-def]
    c = docker_cohort
    harbor_task(
        c.tasks,
        "copy-env",
        toml_extra=textwrap.dedent(
            """\
            [[artifacts]]
            source = "/app/out"
            exclude = ["*.tmp"]
            [[artifacts]]
            source = "results.txt"
            [[artifacts]]
            source = "/app/linked/inner.txt"
            """
        ),
        collect='[[verifier.collect]]\ncommand = "cat /app/results.txt > /logs/artifacts/collected.txt"\n',
        environment_dockerfile=f"FROM {BASE}\nRUN echo from-env > /env-marker\nWORKDIR /app\n",
        solve="""\
            mkdir -p /app/out/sub && echo 42 > /app/out/answer.txt && echo junk > /app/out/sub/x.tmp
            ln -s /etc/passwd /app/out/passwd
            ln -s answer.txt /app/out/alias
            echo fine > /app/results.txt
            mkdir -p /srv/real && echo sneaky > /srv/real/inner.txt && ln -s /srv/real /app/linked
            """,
        test_sh="""\
            ok=1
            [ "$(cat /env-marker)" = from-env ] || ok=0
            [ "$(cat /app/out/answer.txt)" = 42 ] || ok=0
            [ "$(cat /app/results.txt)" = fine ] || ok=0
            [ "$(cat /logs/artifacts/collected.txt)" = fine ] || ok=0
            [ -e /app/out/passwd ] || [ -L /app/out/passwd ] && ok=0
            [ -e /app/out/alias ] && ok=0
            [ -e /app/out/sub/x.tmp ] && ok=0
            [ -e /app/linked/inner.txt ] && ok=0
            [ -e /srv/real ] && ok=0
            echo $ok > /logs/verifier/reward.txt
            """,
    )
    result = _run(c)
    assert c.status()["copy-env[oracle-r0]"] == "agent_success", result.stdout.str()[-3000:]
    verifier = c.results()["copy-env[oracle-r0]"]["verifier"]
    assert verifier["environment"]["definition"] == "a copy of the task's environment (environment/Dockerfile)"
    carried = {a["source"]: a for a in verifier["artifacts"]}
    assert sorted(carried["/app/out"]["skipped_links"]) == ["out/alias -> answer.txt", "out/passwd -> /etc/passwd"]
    assert carried["/app/out"]["excluded"] == ["sub/x.tmp"]
    assert "not_carried" not in carried["/app/results.txt"], "a relative source lies under the workdir"
    assert verifier["collect_hooks"][0]["exit_code"] == 0, verifier["collect_hooks"]
    assert carried["/app/linked/inner.txt"]["not_carried"] == "/app/linked on the way is a symbolic link"
    kept = c.out / c.results()["copy-env[oracle-r0]"]["artifacts"]["dir"] / "carried"
    assert (kept / "1" / "answer.txt").read_text() == "42\n", "what was carried is kept with the attempt"
    _remove_images(docker_api, "copy-env")


def test_verifier_environment_table_gives_image_and_env(docker_cohort: Cohort, docker_api) -> None:  # type: ignore[no-untyped-def]
    c = docker_cohort
    harbor_task(
        c.tasks,
        "own-table",
        toml_extra='artifacts = ["/app/out/answer.txt"]',
        collect=f'[verifier.environment]\ndocker_image = "{BASE}"\nenv = {{ MARK = "verifier-env" }}\n',
        tail='env = { MARK = "agent-env" }\n',
        environment_dockerfile=f"FROM {BASE}\nRUN echo from-env > /env-marker\nWORKDIR /app\n",
        solve='mkdir -p /app/out && [ "$MARK" = agent-env ] && echo 42 > /app/out/answer.txt\n',
        test_sh="""\
            ok=1
            [ "$MARK" = verifier-env ] || ok=0
            [ -e /env-marker ] && ok=0
            [ "$(cat /app/out/answer.txt)" = 42 ] || ok=0
            echo $ok > /logs/verifier/reward.txt
            """,
    )
    result = _run(c)
    assert c.status() == {"own-table[oracle-r0]": "agent_success", "own-table[nop-r0]": "agent_failure"}, (
        result.stdout.str()[-3000:]
    )
    environment = c.results()["own-table[oracle-r0]"]["verifier"]["environment"]
    assert environment["definition"] == f"image {BASE}"
    assert environment["image"] == docker_api.inspect_image(BASE)["Id"]
    _remove_images(docker_api, "own-table")
