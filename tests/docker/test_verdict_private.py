"""The private verdict channel on a local engine (docs/security.md, "The verdict channel"), against
hostile processes the subject left running as root in the container: they keep running, and
nothing they do reaches the verification's /tests or /logs/verifier."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_maka.core.errors import InfraError, SubjectFault
from pytest_maka.executors.base import LeaseRequest
from pytest_maka.executors.docker import DockerExecutor
from pytest_maka.executors.docker.sandbox import DockerSandbox
from pytest_maka.testing.conformance import make_task
from pytest_maka.testing.conformance.base import make_cell
from pytest_maka.testing.conformance.tamper import VERIFIER, TamperTests
from pytest_maka.testing.conformance.verdict import detached

pytestmark = pytest.mark.docker

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Left running by the subject (as root, ignoring TERM/HUP): forges the reward and the tests in a
#: loop, and through every /proc/<pid>/root it can open; notes in /tmp/reached what it reached.
HOSTILE = detached(
    ".maka-hostile.sh",
    "while :; do\n"
    "  mkdir -p /logs/verifier /tests 2>/dev/null\n"
    "  echo 1 > /logs/verifier/reward.txt\n"
    "  printf 'mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh\n"
    "  for d in /proc/[0-9]*; do\n"
    '    if ls "$d/root/logs/verifier/" 2>/dev/null | grep -q private-marker; then\n'
    '      echo "$d" >> /tmp/reached; echo 1 > "$d/root/logs/verifier/reward.txt"\n'
    '      printf "echo 1 > /logs/verifier/reward.txt\\n" > "$d/root/tests/test.sh"\n'
    "    fi\n"
    "  done\n"
    "  sleep 0.02\n"
    "done",
)
#: The honest verifier (reward 0 without done.txt), slowed so the daemon has time to act, with a
#: marker the daemon looks for and a note of whether the daemon ran beside it.
SLOW_MARKED = (
    "#!/bin/sh\nmkdir -p /logs/verifier\ntouch /logs/verifier/private-marker\nsleep 1\n"
    + VERIFIER.split("\n", 1)[1]
    + "if grep -qs 'maka-[h]ostile' /proc/[0-9]*/cmdline; then echo yes; else echo no; fi > /logs/verifier/alive.txt\n"
    "sleep 1\n"
)


@pytest.fixture
def executor(make_executor: Callable[..., DockerExecutor]) -> DockerExecutor:
    executor = make_executor()
    executor.check()
    return executor


def test_a_hostile_leftover_never_reaches_the_verdict(executor: DockerExecutor, tmp_path: Path) -> None:
    """The subject solves nothing and leaves a root daemon forging the reward and the tests, also
    through /proc/<pid>/root: the verdict stays the honest failure, beside the daemon still running."""
    task = make_task(tmp_path / "task")
    record = TamperTests().attempt(executor, task, tmp_path, HOSTILE, verifier=SLOW_MARKED)
    assert (record["status"], record["score"]) == ("agent_failure", 0.0), record["error"]
    verifier = record["verifier"]
    assert verifier["verdict_channel"].startswith("private: "), verifier["verdict_channel"]
    assert verifier["reward_source"] == "reward.txt", verifier
    copied = sorted(tmp_path.glob("out-*/**/verifier/alive.txt"))
    assert copied and copied[-1].read_text().strip() == "yes", "the daemon ran beside the verification"


@pytest.fixture
def sandbox(executor: DockerExecutor, tmp_path: Path) -> Iterator[DockerSandbox]:
    task = make_task(tmp_path / "task")
    executor.prepare([task])
    request = LeaseRequest(
        cell=make_cell(task, tmp_path), attempt=1, attempt_dir=tmp_path / "attempt", scratch_dir=tmp_path / "scratch"
    )
    (tmp_path / "scratch").mkdir()
    with executor.lease(request) as leased:
        assert isinstance(leased, DockerSandbox)
        yield leased


def run(sandbox: DockerSandbox, command: str, tmp_path: Path, name: str) -> tuple[int | None, str]:
    out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
    result = sandbox.exec(command, env={"PATH": PATH}, timeout_sec=60, stdout_path=out, stderr_path=err)
    return result.exit_code, out.read_text() + err.read_text()


def test_the_channel_is_private_pinned_and_its_processes_end_with_it(sandbox: DockerSandbox, tmp_path: Path) -> None:
    """Kernel facts the channel rests on, seen from a root process the subject left: it cannot open
    /proc/<pid>/root of the verification (a capability it lacks), cannot move the mount points
    away (each is one in its namespace too), and a process the verification leaves is ended."""
    code, out = run(sandbox, HOSTILE, tmp_path, "subject")
    assert code == 0, out
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("echo honest\n")
    sandbox.open_verdict(tests, tmp_path / "scratch")
    code, out = run(
        sandbox,
        "touch /logs/verifier/private-marker; sleep 1.5; cat /tests/test.sh;"
        " grep -E 'Cap|NoNew|Seccomp:' /proc/self/status;"
        " (setsid sh -c 'sleep 3; echo 1 > /logs/verifier/late.txt' >/dev/null 2>&1 &) ;"
        " echo 0 > /logs/verifier/reward.txt",
        tmp_path,
        "verify",
    )
    assert code == 0 and "honest" in out, out
    assert "NoNewPrivs:\t1" in out and "Seccomp:\t2" in out, "confined as a docker exec of the container"
    got = tmp_path / "got"
    assert sandbox.get("/logs/verifier", got)
    assert (got / "reward.txt").read_text() == "0\n"
    assert (got / "private-marker").exists()
    sandbox.close_verdict()
    assert sandbox.verdict_channel().startswith("private: "), sandbox.verdict_channel()
    code, out = run(
        sandbox,
        "cat /tmp/reached 2>/dev/null; echo reached-end;"
        " for p in /logs/verifier /logs /tests; do mv $p $p.moved 2>&1; done;"
        " ls /logs/verifier; echo alive=$(grep -ls 'maka-[h]ostile' /proc/[0-9]*/cmdline | wc -l);"
        " sleep 2; grep -ls 'late[.]txt' /proc/[0-9]*/cmdline || echo no-late",
        tmp_path,
        "after",
    )
    reached, _, rest = out.partition("reached-end")
    assert reached.strip() == "", f"a leftover reached the verification's root: {reached}"
    assert rest.count("Device or resource busy") == 3, rest
    assert "private-marker" not in rest, "the container's own /logs/verifier never held the private one"
    assert "no-late" in rest, "a process the verification left outlived it"
    assert "alive=0" not in rest and "alive=" in rest, "the subject's leftover keeps running"


def test_a_link_planted_for_the_channel_is_the_subjects_failure(sandbox: DockerSandbox, tmp_path: Path) -> None:
    """/logs replaced by a link before the verifier's first command: the private mounts would land
    elsewhere, so the command does not run, and the subject is at fault (never an infrastructure failure)."""
    sandbox.open_verdict(None, tmp_path / "scratch")
    # a process the subject left swaps /logs for a link once the channel's directories were laid out
    code, out = sandbox._run(["sh", "-c", "mkdir -p /tmp/elsewhere; rm -rf /logs; ln -s /tmp/elsewhere /logs"])
    assert code == 0, out
    with pytest.raises(SubjectFault, match="/logs is not a directory"):
        run(sandbox, "echo 1 > /logs/verifier/reward.txt", tmp_path, "verify")
    sandbox.close_verdict()


def test_a_verifier_of_another_user_is_out_of_reach_of_that_users_leftovers(
    sandbox: DockerSandbox, tmp_path: Path
) -> None:
    """The verifier runs as ``nobody``, and so does the daemon the subject left: same user, so only
    the ambient capability the verification carries keeps it from /proc/<pid>/root."""
    with sandbox.as_user("nobody", "agent"):  # the workdir is root's: the daemon's script goes to /tmp
        code, out = run(sandbox, "cd /tmp\n" + HOSTILE, tmp_path, "subject")
    assert code == 0, out
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("echo honest\n")
    sandbox.open_verdict(tests, tmp_path / "scratch")
    with sandbox.as_user("nobody", "verifier"):
        code, out = run(
            sandbox,
            "id -u; touch /logs/verifier/private-marker; sleep 1.5; cat /tests/test.sh;"
            " echo 0 > /logs/verifier/reward.txt",
            tmp_path,
            "verify",
        )
    assert code == 0 and out.startswith("65534\n") and "honest" in out, out
    got = tmp_path / "got"
    assert sandbox.get("/logs/verifier", got)
    assert (got / "reward.txt").read_text() == "0\n"
    sandbox.close_verdict()
    code, out = run(
        sandbox,
        "cat /tmp/reached 2>/dev/null; echo alive=$(grep -ls 'maka-[h]ostile' /proc/[0-9]*/cmdline | wc -l)",
        tmp_path,
        "after",
    )
    assert out.startswith("alive=") and "alive=0" not in out, f"a leftover reached the verification's root: {out}"


def test_a_container_with_sys_ptrace_keeps_the_shared_channel_and_says_why(
    make_executor: Callable[..., DockerExecutor], tmp_path: Path
) -> None:
    """Its processes could open any /proc/<pid>/root: the channel stays the container's, the
    processes the subject left are ended before the tests go in, and the record says why."""
    executor = make_executor(cap_add=["SYS_PTRACE"])
    executor.check()
    record = TamperTests().attempt(executor, make_task(tmp_path / "task"), tmp_path, HOSTILE, verifier=SLOW_MARKED)
    assert (record["status"], record["score"]) == ("agent_failure", 0.0), record["error"]
    channel = record["verifier"]["verdict_channel"]
    assert channel.startswith("shared: the container's /tests and /logs/verifier (the container's processes hold"), (
        channel
    )
    # the hostile loop, and whichever of its short-lived children (sleep, ls, grep) ran at that instant
    assert re.search(r"; [1-9][0-9]* process\(es\) the subject left ended before the tests went in", channel), channel


def test_a_verifier_command_that_times_out_ends_with_everything_it_started(
    sandbox: DockerSandbox, tmp_path: Path
) -> None:
    sandbox.open_verdict(None, tmp_path / "scratch")
    out, err = tmp_path / "slow.out", tmp_path / "slow.err"
    result = sandbox.exec(
        "echo started; (setsid sleep 300 >/dev/null 2>&1 &); sleep 300",
        env={"PATH": PATH},
        timeout_sec=3,
        stdout_path=out,
        stderr_path=err,
    )
    assert (result.timed_out, result.exit_code) == (True, None), result
    assert out.read_text() == "started\n"
    sandbox.remove("/tests")  # a verification without tests has none to remove
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("/tests/test.sh", 100)
    sandbox.close_verdict()
    _code, seen = run(sandbox, "grep -ls 'sleep 30[0]' /proc/[0-9]*/cmdline || echo none-left", tmp_path, "after")
    assert seen.strip() == "none-left", seen


def test_files_of_an_open_channel_are_its_own_and_spawn_is_refused(sandbox: DockerSandbox, tmp_path: Path) -> None:
    """put / write_file / read_file / remove of /tests and /logs/verifier reach the verification's
    host directories (never the container's mount points, never through a link it left); spawn is refused."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("echo honest\n")
    (tmp_path / "extra.sh").write_text("echo extra\n")
    sandbox.open_verdict(tests, tmp_path / "scratch")
    sandbox.write_file("/logs/verifier/from-harness.txt", b"hi\n")
    sandbox.put(tmp_path / "extra.sh", "/tests/sub/extra.sh")
    sandbox.remove("/tests/test.sh")
    code, out = run(
        sandbox,
        "cat /logs/verifier/from-harness.txt /tests/sub/extra.sh; ls /tests; echo 0 > /logs/verifier/reward.txt;"
        " ln -s / /logs/verifier/root; ln -s /etc/hostname /logs/verifier/name",
        tmp_path,
        "verify",
    )
    assert (code, out) == (0, "hi\necho extra\nsub\n"), out
    assert sandbox.read_file("/logs/verifier/reward.txt", 100) == b"0\n"
    for linked in ("/logs/verifier/root/etc/hostname", "/logs/verifier/name"):
        with pytest.raises(FileNotFoundError):
            sandbox.read_file(linked, 100)
    assert not sandbox.get("/logs/verifier/root/etc/hostname", tmp_path / "never")
    with pytest.raises(InfraError, match="spawn is refused while the verification's private verdict channel is open"):
        sandbox.spawn("true", env={"PATH": PATH})
    sandbox.remove("/logs/verifier")
    code, out = run(sandbox, "ls -A /logs/verifier; echo listed", tmp_path, "emptied")
    assert (code, out) == (0, "listed\n"), out
    sandbox.close_verdict()
    code, out = run(sandbox, "ls -A /logs/verifier /tests; echo listed", tmp_path, "after")
    assert "from-harness" not in out and "extra" not in out and out.endswith("listed\n"), out
    proc = sandbox.spawn("true", env={"PATH": PATH})
    assert proc.wait(60) == 0


#: Left running by the subject: attaches to the container's main process (ptrace) and holds it.
TRACER = detached(
    ".maka-tracer.sh",
    "exec python3 -c 'import ctypes, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "assert libc.ptrace(0x4206, 1, None, None) == 0, ctypes.get_errno()\n"
    'open("/tmp/tracing", "w").close()\n'
    "time.sleep(600)'",
)


def test_a_subject_tracing_the_containers_main_process_fails_as_itself(sandbox: DockerSandbox, tmp_path: Path) -> None:
    """The seccomp filters a verifier command gets are read from the container's main process by
    ptrace: a process the subject left that holds that process first makes it the subject's failure."""
    code, out = run(sandbox, TRACER + "sleep 0.5; ls /tmp/tracing", tmp_path, "subject")
    assert code == 0, out
    sandbox.open_verdict(None, tmp_path / "scratch")
    with pytest.raises(SubjectFault, match="the container's main process is traced by one of its processes"):
        run(sandbox, "echo 1 > /logs/verifier/reward.txt", tmp_path, "verify")
    sandbox.close_verdict()


def test_the_helper_never_imports_a_file_of_the_container(sandbox: DockerSandbox, tmp_path: Path) -> None:
    """The helper runs as root on the host with the harness's interpreter, whose library paths
    resolve in the container once it is inside: modules the subject planted there (on the
    helper's own sys.path) never load, whether the command runs or its set-up fails."""
    paths = subprocess.run(
        [sys.executable, "-I", "-S", "-c", "import sys; print(' '.join(sys.path))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    names = ("warnings", "traceback", "linecache", "locale", "resource", "subprocess", "signal", "errno")
    plant = "for d in " + " ".join(paths) + "; do mkdir -p $d; for m in " + " ".join(names) + "; do"
    plant += ' echo \'open("/planted-ran", "a").write(__name__)\' > $d/$m.py; done; done'
    code, out = run(sandbox, plant, tmp_path, "subject")
    assert code == 0, out
    sandbox.open_verdict(None, tmp_path / "scratch")
    code, out = run(sandbox, "echo 0 > /logs/verifier/reward.txt; echo ran", tmp_path, "verify")
    assert (code, out) == (0, "ran\n"), out
    out_path, err_path = tmp_path / "nowhere.out", tmp_path / "nowhere.err"
    with pytest.raises(InfraError, match="could not be set up"):
        sandbox.exec(
            "true", env={"PATH": PATH}, timeout_sec=60, stdout_path=out_path, stderr_path=err_path, cwd="/no/such"
        )
    sandbox.close_verdict()
    code, out = run(sandbox, "cat /planted-ran 2>/dev/null; echo checked", tmp_path, "after")
    assert out == "checked\n", f"a planted module ran in the helper: {out}"


def test_the_leftover_count_is_the_channels_until_a_command_runs(sandbox: DockerSandbox, tmp_path: Path) -> None:
    """The taint rule's count of what the subject left running is the one the channel just took
    (no second listing), and a fresh one once any command ran since."""
    daemons = "".join(detached(f".maka-{n}.sh", f"echo $$ > /tmp/{n}.pid; exec sleep 300") for n in "ab")
    code, out = run(sandbox, daemons, tmp_path, "subject")
    assert code == 0, out
    sandbox.open_verdict(None, tmp_path / "scratch")
    assert "2 processes the subject left ran" in sandbox.verdict_channel(), sandbox.verdict_channel()
    assert sandbox.leftover_processes()[0] == 2
    code, out = run(sandbox, "kill -9 $(cat /tmp/a.pid) && echo killed", tmp_path, "verify")
    sandbox.close_verdict()
    assert code == 0 and "killed" in out, out
    assert sandbox.leftover_processes()[0] == 1
