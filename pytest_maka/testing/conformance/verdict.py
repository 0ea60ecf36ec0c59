"""Conformance, through the whole attempt lifecycle: the verdict channel (the tests and the
reward files of a verification) is out of the subject's reach, and honest solutions pass.

Attacks: a daemon the subject leaves that rewrites the reward, or the tests once they are
copied in; a program of the subject's that the verifier imports and that writes the reward
file the test script does not write, or leaves a process that writes one after the script
ended; start-up files that would put variables into the verifier's environment. Each daemon
keeps running whatever signal it gets short of SIGKILL, and each verifier gives it time to
act (it sleeps before it reads the tests, or after it wrote its reward): where the channel
is not private and the daemon survives into the verification, the attack passes, so these
tests keep their meaning once an executor keeps the processes a subject leaves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from ...core.task import Task
from ...executors.base import Executor
from .tamper import VERIFIER, TamperTests


def detached(name: str, script: str) -> str:
    """A subject command that leaves ``script`` running as a daemon (own session, TERM and HUP ignored)."""
    return (
        f"cat > {name} <<'EOF'\ntrap '' TERM HUP INT\n{script}\nEOF\n"
        f"setsid sh {name} >/dev/null 2>&1 </dev/null &\nsleep 0.3\n"
    )


#: Rewrites both reward files to a pass, forever.
REWARD_DAEMON = detached(
    ".maka-reward-daemon.sh",
    "while :; do\n  mkdir -p /logs/verifier 2>/dev/null\n  echo 1 > /logs/verifier/reward.txt\n"
    "  echo '{\"reward\": 1}' > /logs/verifier/reward.json\n  sleep 0.02\ndone",
)
#: Rewrites every test file it finds into one that writes a passing reward, forever.
TESTS_DAEMON = detached(
    ".maka-tests-daemon.sh",
    "while :; do\n  for f in /tests/test.sh /tests/check.sh; do\n"
    '    if [ -f "$f" ] && ! grep -q planted "$f"; then\n'
    "      printf '# planted\\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n' > \"$f\"\n"
    "    fi\n  done\n  sleep 0.01\ndone",
)
#: The verifier of TESTS_DAEMON: it waits, then runs a second file of the tests.
WAITING_VERIFIER = "#!/bin/sh\nsleep 1\nsh /tests/check.sh\n"
#: The verifier of REWARD_DAEMON: it writes its reward, then gives a daemon time to overwrite it.
SLOW_VERIFIER = VERIFIER + "sleep 1\n"


def solution(body: str) -> str:
    """A subject command writing ``solution.py`` (``body``) in the workdir."""
    return f"cat > solution.py <<'EOF'\n{body}\nEOF\n"


#: Imported by the verifier: writes the reward file the test script does not write.
WRITES_REWARD_JSON = solution(
    "import json, os\nos.makedirs('/logs/verifier', exist_ok=True)\n"
    "with open('/logs/verifier/reward.json', 'w') as f:\n    json.dump({'reward': 1}, f)\n"
    "def answer():\n    return 41"
)
#: Imported by the verifier: leaves a process that writes both reward files after the script ended.
WRITES_LATE = solution(
    "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(2)\n"
    "        os.makedirs('/logs/verifier', exist_ok=True)\n"
    "        open('/logs/verifier/reward.txt', 'w').write('1\\n')\n"
    "        open('/logs/verifier/reward.json', 'w').write('{\"reward\": 1}')\n    os._exit(0)\n"
    "def answer():\n    return 41"
)
#: Imported by the verifier: turns the reward into a link (its copy-out would read as a malformed reward).
LINKS_REWARD = solution(
    "import os\nos.makedirs('/logs/verifier', exist_ok=True)\nopen('/tmp/maka-reward', 'w').write('1')\n"
    "os.symlink('/tmp/maka-reward', '/logs/verifier/reward.txt')"
)
HONEST_SOLUTION = solution("def answer():\n    return 42") + "echo done > done.txt\n"
#: A Terminal-Bench 2 style test: imports the subject's program and checks it; both reward files.
IMPORTING_VERIFIER = """#!/bin/sh
mkdir -p /logs/verifier
if python3 -c "import sys; sys.path.insert(0, '.'); import solution; sys.exit(solution.answer() != 42)"; then
  echo 1 > /logs/verifier/reward.txt; echo '{"reward": 1}' > /logs/verifier/reward.json
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
#: A late writer needs time after the import only where the verifier's processes outlive it.
IMPORT_THEN_VERIFY = (
    "#!/bin/sh\npython3 -c \"import sys; sys.path.insert(0, '.'); import solution\"\n" + VERIFIER.split("\n", 1)[1]
)

#: Start-up files a shell or PAM could read: none of them may reach the verifier's environment.
PLANT_ENV = (
    "for f in /etc/environment /etc/profile /etc/bash.bashrc /root/.bashrc /root/.profile /etc/profile.d/maka.sh; do\n"
    "  mkdir -p \"$(dirname $f)\" 2>/dev/null; echo 'export MAKA_PLANTED=1' >> $f 2>/dev/null\n"
    "done\necho 'MAKA_PLANTED=1' >> /etc/environment 2>/dev/null; true\n"
)
ENV_VERIFIER = VERIFIER + "env > /logs/verifier/env.txt\n"

#: A service the subject leaves running, and a verifier that checks it (Harbor keeps it).
SERVICE = (
    "echo served > served.txt\n"
    "setsid python3 -m http.server 18765 --bind 127.0.0.1 >/dev/null 2>&1 </dev/null &\n"
    "for i in $(seq 50); do python3 -c \"import urllib.request as u; u.urlopen('http://127.0.0.1:18765/served.txt')\""
    " 2>/dev/null && break; sleep 0.1; done\n"
)
SERVICE_VERIFIER = """#!/bin/sh
mkdir -p /logs/verifier
if python3 -c "import urllib.request as u; assert u.urlopen('http://127.0.0.1:18765/served.txt').read() == b'served\\n'"
then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""


class VerdictChannelTests(TamperTests):
    """Only the verification's own script decides its reward; honest solutions still pass."""

    #: The verification's /tests and /logs/verifier are its own (``VerdictChannel``); False: the
    #: environment's, kept safe only by stopping every process the subject left before verifying.
    private_verdict_channel: ClassVar[bool] = True
    #: The processes a subject leaves running are still there for the verifier (Harbor's shared
    #: environment); False where every command's processes end with it.
    keeps_subject_services: ClassVar[bool] = False

    def require_kill(self) -> None:
        """Never start a daemon where the executor cannot stop it (it would outlive the test)."""
        if not self.kills_whole_tree:
            pytest.skip("this executor does not stop setsid'd daemons: the probe would outlive the test")

    def verdict_record(self, record: dict[str, Any]) -> dict[str, Any]:
        verifier: dict[str, Any] = record["verifier"]
        word = "private" if self.private_verdict_channel else "shared"
        assert verifier["verdict_channel"].startswith(word), verifier["verdict_channel"]
        return verifier

    def verifier_file(self, tmp_path: Path, name: str) -> str:
        """A file the last attempt's verifier wrote (as copied out to the output directory)."""
        found = sorted(tmp_path.glob(f"out-*/**/verifier/{name}"))
        assert found, f"no verifier/{name} was copied out"
        return found[-1].read_text()

    # -- attacks ---------------------------------------------------------------------------

    def test_a_daemon_rewriting_the_reward_never_passes(self, executor: Executor, task: Task, tmp_path: Path) -> None:
        self.require_kill()
        record = self.attempt(executor, task, tmp_path, REWARD_DAEMON, verifier=SLOW_VERIFIER)
        self.assert_rejected(record)
        assert record["score"] == 0.0, "the verifier's own reward (0) is the one read"
        assert self.verdict_record(record)["reward_source"] == "reward.txt", "the daemon's reward.json was not seen"

    def test_a_daemon_rewriting_the_tests_never_passes(self, executor: Executor, task: Task, tmp_path: Path) -> None:
        self.require_kill()
        record = self.attempt(
            executor, task, tmp_path, TESTS_DAEMON, verifier=WAITING_VERIFIER, tests={"check.sh": VERIFIER}
        )
        self.assert_rejected(record)
        assert record["score"] == 0.0
        assert self.verifier_file(tmp_path, "found.txt").strip() == "false", "the task's own check ran"
        self.verdict_record(record)

    def test_an_imported_program_writing_reward_json_never_passes(
        self, executor: Executor, task: Task, tmp_path: Path
    ) -> None:
        """Its reward.json says 1 beside the test script's reward.txt of 0: a contradiction, a failure."""
        record = self.attempt(executor, task, tmp_path, WRITES_REWARD_JSON, verifier=IMPORT_THEN_VERIFY)
        self.assert_rejected(record)
        verifier = self.verdict_record(record)
        assert verifier["reward_contradiction"] is True, verifier
        assert verifier["reward_files"]["reward.txt"].startswith("0 "), verifier["reward_files"]
        assert "contradict" in record["error"]["message"], record["error"]

    def test_a_process_the_verifier_leaves_writes_no_reward(
        self, executor: Executor, task: Task, tmp_path: Path
    ) -> None:
        """The imported program leaves a process that writes a passing reward after the script ended:
        the reward is read as the script ends, and nothing of the verification outlives it."""
        self.require_kill()
        record = self.attempt(executor, task, tmp_path, WRITES_LATE, verifier=IMPORT_THEN_VERIFY)
        self.assert_rejected(record)
        assert record["score"] == 0.0 and record["verifier"]["reward_source"] == "reward.txt", record["verifier"]

    def test_an_imported_program_linking_the_reward_stays_official(
        self, executor: Executor, task: Task, tmp_path: Path
    ) -> None:
        """A reward file that is a link is the subject's failure, never a verifier failure outside the denominator."""
        record = self.attempt(executor, task, tmp_path, LINKS_REWARD, verifier=IMPORT_THEN_VERIFY)
        self.assert_rejected(record)
        assert record["verifier"]["reward_links"] == ["reward.txt"], record["verifier"]
        assert "symbolic link" in record["error"]["message"], record["error"]

    def test_start_up_files_do_not_reach_the_verifier(self, executor: Executor, task: Task, tmp_path: Path) -> None:
        self.require_own_root()
        record = self.attempt(executor, task, tmp_path, PLANT_ENV + "echo done > done.txt\n", verifier=ENV_VERIFIER)
        assert record["status"] == "agent_success", record["error"]
        env = self.verifier_file(tmp_path, "env.txt")
        assert "MAKA_PLANTED" not in env, "a start-up file the subject edited reached the verifier's environment"

    # -- honest twins ------------------------------------------------------------------------

    def test_an_honest_program_the_verifier_imports_passes(
        self, executor: Executor, task: Task, tmp_path: Path
    ) -> None:
        """The test imports the subject's program and writes both reward files, which agree."""
        record = self.attempt(executor, task, tmp_path, HONEST_SOLUTION, verifier=IMPORTING_VERIFIER)
        assert record["status"] == "agent_success", record["error"]
        verifier = self.verdict_record(record)
        assert verifier["reward_source"] == "reward.json+reward.txt" and "reward_contradiction" not in verifier

    def test_an_honest_failure_with_both_reward_files_is_official(
        self, executor: Executor, task: Task, tmp_path: Path
    ) -> None:
        record = self.attempt(
            executor, task, tmp_path, solution("def answer():\n    return 41"), verifier=IMPORTING_VERIFIER
        )
        self.assert_rejected(record)
        assert record["score"] == 0.0

    def test_a_service_left_running_is_what_the_verifier_checks(
        self, executor: Executor, task: Task, tmp_path: Path
    ) -> None:
        if not self.keeps_subject_services:
            pytest.skip("on this executor every process a command starts ends with it")
        record = self.attempt(executor, task, tmp_path, SERVICE, verifier=SERVICE_VERIFIER)
        assert record["status"] == "agent_success", record["error"]
