"""The shared executor conformance suite, against the Docker executor on a real engine."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_maka.executors.docker import DockerExecutor
from pytest_maka.testing.conformance import SECRET_NAME, SECRET_VALUE, EgressTarget, ExecutorConformance, make_task
from pytest_maka.testing.conformance.separate import SeparateVerifierTests
from pytest_maka.testing.conformance.tamper import SAME_SIZE_REWRITE, TamperTests

pytestmark = pytest.mark.docker


class TestDockerConformance(ExecutorConformance):
    #: Commands with network join a Docker network, not the host's: host 127.0.0.1 stays unreachable.
    supports_host_network = False
    #: Replaced by the test below rather than skipped.
    test_network_on_reaches_host_loopback = None  # type: ignore[assignment]
    #: The subject can write the container's /usr, /etc...: kept for the verifier (fidelity
    #: first), what it ran of them recorded as taint.
    system_dirs_writable = True
    #: The container stays live: what a command detached keeps running, as in Harbor.
    keeps_detached = True
    #: The engine cannot list the changes of a container holding 3,000 nested directories
    #: ("file name too long"); its writable layer is read instead and the attempt verified.
    verifies_deep_trees = True
    #: A helper in the container's namespace logs and refuses what is sent past the proxy.
    egress_logs_past_proxy = True
    #: /tests and /logs/verifier are host directories mounted only in the verification's own
    #: copy of the container's mount namespace (docs/security.md, "The verdict channel").
    private_verdict_channel = True
    #: What the subject left running keeps running for the verifier, as in Harbor.
    keeps_subject_services = True

    def test_network_on_joins_a_network_and_off_has_only_loopback(self, sandbox, tmp_path) -> None:  # type: ignore[no-untyped-def]
        off = self.run(sandbox, "ls /sys/class/net", tmp_path, network=False)
        on = self.run(sandbox, "ls /sys/class/net", tmp_path, network=True)
        again = self.run(sandbox, "ls /sys/class/net", tmp_path, network=False)
        assert off.stdout.split() == ["lo"], off.stdout
        assert "lo" in on.stdout.split() and len(on.stdout.split()) > 1, on.stdout
        assert again.stdout.split() == ["lo"], "the network is granted per command, then taken away"

    @pytest.fixture
    def executor(self, make_executor: Callable[..., DockerExecutor], egress_upstream) -> DockerExecutor:  # type: ignore[no-untyped-def]
        network, ip, _ = egress_upstream
        executor = make_executor(egress_network=network, egress_hosts={"allowed.test": ip})
        executor.check()
        return executor

    @pytest.fixture
    def egress_target(self, egress_upstream) -> EgressTarget:  # type: ignore[no-untyped-def,override]
        """The upstream container (the proxy cannot reach the host's loopback from its network)."""
        _, ip, port = egress_upstream
        return EgressTarget(name="allowed.test", ip=ip, port=port)

    def test_the_record_says_the_channel_was_private_and_who_ran_beside_it(  # type: ignore[no-untyped-def]
        self, executor, task, tmp_path
    ) -> None:
        """The channel is private on a local engine; the record says how many processes the
        subject left ran when the tests went in (they keep running, as in Harbor)."""
        record = self.attempt(executor, task, tmp_path, "echo done > done.txt; (sleep 600 &) ; true")
        assert record["status"] == "agent_success", record["error"]
        channel = record["verifier"]["verdict_channel"]
        assert channel.startswith("private: /tests and /logs/verifier were host directories"), channel
        assert channel.endswith("1 process the subject left ran when the tests went in"), channel

    def test_env_contains_only_what_was_passed(self, sandbox, tmp_path, monkeypatch, docker_api) -> None:  # type: ignore[override]
        """As the suite's, except that variables the image itself sets (``ENV``) are allowed.

        The base images of provision-docker.sh set SSL_CERT_FILE & co, which the CI host has
        too; the suite's heuristic (a name also in the host environment = a leak) misfires.
        """
        monkeypatch.setenv(SECRET_NAME, SECRET_VALUE)
        image = sandbox.isolation(agent_network=False, verifier_network=False)["image"]
        image_env = dict(e.split("=", 1) for e in docker_api.inspect_image(image)["Config"]["Env"] or [])
        env = {"PATH": self.path_env, "MAKA_GIVEN": "a value with spaces = and equals"}
        run = self.run(sandbox, "env", tmp_path, env=env)
        assert SECRET_VALUE not in run.stdout and SECRET_NAME not in run.stdout
        seen = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line)
        assert seen["MAKA_GIVEN"] == env["MAKA_GIVEN"]
        runtime = {"PWD", "OLDPWD", "SHLVL", "_", "HOME", "HOSTNAME", "PATH", "TERM"}
        leaked = {
            k for k in seen if k in os.environ and k not in env and k not in runtime and seen[k] != image_env.get(k)
        }
        assert not leaked, f"host variables reached the command: {sorted(leaked)}"


# The protected-path restore serves only formats whose own harness verifies a fresh system
# (SWE-bench): the tests of it below lease tasks of that format. A live environment (Harbor,
# Terminal-Bench) keeps every change; the conformance suite's taint tests cover it.


def test_content_check_catches_a_rewrite_keeping_size_and_mtime(
    make_executor: Callable[..., DockerExecutor], tmp_path: Path
) -> None:
    executor = make_executor(protected_check="content")
    executor.check()
    record = TamperTests().attempt(
        executor, make_task(tmp_path / "task", format="swe-bench"), tmp_path, SAME_SIZE_REWRITE
    )
    assert record["status"] == "agent_failure" and record["score"] == 0.0, record["error"]
    tamper = record["verifier"]["tamper"]
    assert tamper["mechanism"].startswith("docker: protected files compared with the image's by content")
    assert any("/python3." in path for path in tamper["restored"]), tamper


class TestDockerSeparateVerifier(SeparateVerifierTests):
    """Separate verifier environments (Harbor ``environment_mode = "separate"``) on the real engine."""

    @pytest.fixture
    def executor(self, make_executor: Callable[..., DockerExecutor]) -> DockerExecutor:
        executor = make_executor(kill_grace_sec=0.5)
        executor.check()
        return executor


def test_default_check_catches_a_rewrite_keeping_size_and_mtime(
    make_executor: Callable[..., DockerExecutor], tmp_path: Path
) -> None:
    """The default (``changes``) reads the container's writable layer: the rewrite is undone."""
    executor = make_executor()
    executor.check()
    record = TamperTests().attempt(
        executor, make_task(tmp_path / "task", format="swe-bench"), tmp_path, SAME_SIZE_REWRITE
    )
    assert record["status"] == "agent_failure" and record["score"] == 0.0, record["error"]
    tamper = record["verifier"]["tamper"]
    assert tamper["mechanism"].startswith("docker: the engine's list of changes and the container's writable layer")
    assert any("/python3." in path for path in tamper["restored"]), tamper


def test_default_check_restores_a_rewrite_and_the_honest_part_passes(
    make_executor: Callable[..., DockerExecutor], tmp_path: Path
) -> None:
    """The rewritten interpreter is put back: a subject that also solved the task passes."""
    executor = make_executor()
    executor.check()
    command = SAME_SIZE_REWRITE + "; echo done > done.txt"
    record = TamperTests().attempt(executor, make_task(tmp_path / "task", format="swe-bench"), tmp_path, command)
    assert record["status"] == "agent_success", record["error"]
    assert any("/python3." in change for change in record["verifier"]["tamper"]["changed"])


def test_an_honest_attempt_lists_no_change_and_a_changed_mode_is_named(
    make_executor: Callable[..., DockerExecutor], tmp_path: Path
) -> None:
    """Found in a user's trial: every Docker cell's record listed ``modified /usr/sbin``, which
    no subject touched (the engine's docker-init mount point sits there on a merged-/usr image).
    A directory whose mode is the image's and below which nothing changed is not named; one whose
    mode the subject changed is named."""
    executor = make_executor()
    executor.check()
    task = make_task(tmp_path / "task", format="swe-bench")
    honest = TamperTests().attempt(executor, task, tmp_path, "echo done > done.txt")
    assert honest["status"] == "agent_success", honest["error"]
    assert honest["verifier"]["tamper"]["changed"] == [], honest["verifier"]["tamper"]
    chmod = TamperTests().attempt(executor, task, tmp_path, "chmod 700 /usr/sbin; echo done > done.txt")
    assert "modified /usr/sbin" in chmod["verifier"]["tamper"]["changed"], chmod["verifier"]["tamper"]
    assert chmod["status"] == "agent_success", chmod["error"]
    live = TamperTests().attempt(executor, make_task(tmp_path / "live"), tmp_path, "echo done > done.txt")
    assert live["verifier"]["tamper"]["mechanism"].startswith("live"), live["verifier"]["tamper"]
    assert live["taint"]["changed"] == [] and not live["taint"]["tainted"], live["taint"]


#: 3,000 nested directories under a protected root (too deep for the engine's change list).
NESTED_PROTECTED = (
    "python3 -c \"import os\nfd = os.open('/usr/local/lib', os.O_RDONLY)\n"
    "os.mkdir('nest', dir_fd=fd); fd = os.open('nest', os.O_RDONLY, dir_fd=fd)\n"
    "for i in range(3000):\n"
    "    os.mkdir('d', dir_fd=fd); fd = os.open('d', os.O_RDONLY, dir_fd=fd)\n"
    "open(os.open('leaf', os.O_CREAT | os.O_WRONLY, dir_fd=fd), 'w').close()\"; echo done > done.txt"
)


def test_deep_tree_in_a_protected_root_is_removed_and_the_record_says_why(
    make_executor: Callable[..., DockerExecutor], tmp_path: Path
) -> None:
    """The engine cannot list the changes (file name too long): the writable layer is read
    instead, the tree is removed before verification, and the record says what happened."""
    executor = make_executor()
    executor.check()
    record = TamperTests().attempt(
        executor, make_task(tmp_path / "task", format="swe-bench"), tmp_path, NESTED_PROTECTED
    )
    assert record["status"] == "agent_success", record["error"]
    tamper = record["verifier"]["tamper"]
    assert "added /usr/local/lib/nest" in tamper["changed"], tamper
    assert "/usr/local/lib/nest" in tamper["restored"], tamper
    assert any("cannot list the container's changes (file name too long)" in n for n in tamper["notes"]), tamper


#: The subject edits the image's ENTRYPOINT script so that it would write a passing reward,
#: then ends the container's keeper (the container stops), and solves nothing.
EDIT_ENTRYPOINT = (
    "printf '#!/bin/sh\\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; touch /app/done.txt\\n"
    'exec "$@"\\n\' > /maka-entry.sh; '
    "for d in /proc/[0-9]*; do if [ \"$(tr '\\0' ' ' < $d/cmdline 2>/dev/null)\" = 'sleep infinity ' ]; then"
    " kill -9 ${d#/proc/}; fi; done; true"
)


def test_a_restart_never_runs_a_subject_edited_entrypoint(
    make_executor: Callable[..., DockerExecutor], tmp_path: Path, docker_api
) -> None:  # type: ignore[no-untyped-def]
    """The container stops with an edited ENTRYPOINT: it is not started again (that would run
    the edit), and the attempt is the subject's failure naming the script."""
    executor = make_executor()
    executor.check()
    task = make_task(tmp_path / "task")
    env = task.environment_dir
    assert env is not None
    (env / "maka-entry.sh").write_text('#!/bin/sh\nexec "$@"\n')
    (env / "maka-entry.sh").chmod(0o755)
    (env / "Dockerfile").write_text(
        'FROM python:3.11-slim\nCOPY maka-entry.sh /maka-entry.sh\nENTRYPOINT ["/maka-entry.sh"]\nWORKDIR /app\n'
        "COPY workspace/ /app/\n"
    )
    record = TamperTests().attempt(executor, task, tmp_path, EDIT_ENTRYPOINT)
    assert record["status"] == "agent_failure" and record["official"], record["error"]
    assert "not started again" in record["error"]["message"], record["error"]
    assert "/maka-entry.sh" in record["verifier"]["tamper"]["paths"], record["verifier"]["tamper"]
    assert record["score"] is None, "no verifier ran"
    image = record["isolation"]["image"]
    assert docker_api.inspect_image(image)["Config"]["Entrypoint"] == ["/maka-entry.sh"], image
