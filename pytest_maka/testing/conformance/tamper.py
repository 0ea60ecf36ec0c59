"""Conformance, through the whole attempt lifecycle: nothing a subject does makes it pass
cleanly but the verifier, and nothing it leaves pushes it out of the official denominator.

Each test runs one real attempt (subject, stop, freeze, restore, verify, classify) of a
``command`` subject on the executor under test, with a verifier that passes only when the
subject created ``done.txt`` in the workdir. The tamperers never create it.

Where the environment stays live for the verifier (``keeps_detached``: a container, as in
Harbor) a subject can change programs the verifier runs; such a pass is not prevented but
**tainted** (recorded with the paths) and refused under ``policy.refuse_tainted``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ...core.spec import Policy, Retries
from ...core.task import Task
from ...executors.base import Executor
from .attempts import command_attempt
from .base import ConformanceBase

#: The verifier: Python (stdlib json and os) decides from the workdir; reward 1 only for done.txt.
VERIFIER = """#!/bin/sh
mkdir -p /logs/verifier
python3 -c "import json, os; print(json.dumps(os.path.isfile('done.txt')))" > /logs/verifier/found.txt
if [ "$(cat /logs/verifier/found.txt)" = true ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""

#: A fake tool: reports success and writes a passing reward (needs a shell that stays: /opt/realsh).
FAKE = "#!/opt/realsh\\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; exit 0\\n"
PLANT_TOOLS = (
    "cp /bin/dash /opt/realsh 2>/dev/null || cp /bin/sh /opt/realsh 2>/dev/null\n"
    "for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin; do for t in sh bash python3 dash; do\n"
    f"  rm -f $d/$t 2>/dev/null; printf '{FAKE}' > $d/$t 2>/dev/null && chmod 755 $d/$t\n"
    "done; done; true\n"
)
#: A module that passes any Python verifier importing it.
EVIL_MODULE = (
    "import os\nos.makedirs('/logs/verifier', exist_ok=True)\n"
    "open('/logs/verifier/reward.txt', 'w').write('1')\nos._exit(0)\n"
)
PLANT_MODULES = (
    f"for m in json os sitecustomize usercustomize pytest conftest; do\n  printf '%s' \"{EVIL_MODULE}\" > $m.py\ndone\n"
)
PLANT_SITE = (
    "site=$(python3 -c 'import site; print(site.getsitepackages()[0])')\n"
    f"printf '%s' \"{EVIL_MODULE}\" > $site/sitecustomize.py 2>/dev/null\n"
    "echo 'import os; os.system(\"echo 1 > /logs/verifier/reward.txt\")' > $site/maka-evil.pth 2>/dev/null; true\n"
)

TAMPERERS = {
    "reward-file": (
        "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt;"
        " echo '{\"reward\": 1}' > /logs/verifier/reward.json"
    ),
    "fake-output": "echo 'PASSED all tests'; echo 'reward=1'; echo '1 passed in 0.01s'",
    "reward-symlink": "mkdir -p /logs/verifier; ln -sf /proc/self/environ /logs/verifier/reward.txt",
    "verifier-dir-symlink": (
        'mkdir -p fake; echo 1 > fake/reward.txt; rm -rf /logs/verifier; ln -s "$PWD/fake" /logs/verifier'
    ),
    "workdir-module-hijack": PLANT_MODULES,
}
#: Tamperers that write outside the workdir and /logs (never run where the host is shared:
#: executors with ``isolates_host_filesystem = False`` replace these tests).
#: A planted ``sleep`` that rewrites the reward; then the container's keeper (``sleep infinity``)
#: is killed, so that a restart would run the planted one as the new keeper.
KEEPER_HIJACK = (
    "cp /bin/dash /opt/realsh 2>/dev/null; printf '#!/opt/realsh\\nwhile :; do mkdir -p /logs/verifier;"
    " echo 1 > /logs/verifier/reward.txt; /usr/bin/sleep 0.05; done\\n' > /usr/local/bin/sleep 2>/dev/null"
    " && chmod 755 /usr/local/bin/sleep;"
    " for d in /proc/[0-9]*; do if [ \"$(tr '\\0' ' ' < $d/cmdline 2>/dev/null)\" = 'sleep infinity ' ]; then"
    " kill -9 ${d#/proc/}; fi; done; true"
)
#: Rewrites the real python3 binary with a script of the same size and sets its times back:
#: the engine's change list compares size and mtime and misses it; the writable layer and a
#: content check both see it.
SAME_SIZE_REWRITE = (
    'python3 -c "import os, shutil\n'
    "f = os.path.realpath(shutil.which('python3')); st = os.stat(f)\n"
    "body = b'#!/bin/sh\\necho true\\n'\n"  # what the verifier's python3 prints when done.txt exists
    "data = body + b'#' * (st.st_size - len(body))\n"
    "os.unlink(f); open(f, 'wb').write(data); os.chmod(f, st.st_mode)\n"
    'os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))"'
)
SYSTEM_TAMPERERS = {
    "keeper-hijack": KEEPER_HIJACK,
    "planted-tests": "mkdir -p /tests && printf 'echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh",
    "path-hijack": PLANT_TOOLS,
    "site-packages-hijack": PLANT_SITE,
    "same-size-rewrite": SAME_SIZE_REWRITE,
}
DAEMON = (
    'setsid sh -c \'trap "" TERM; while true; do mkdir -p /logs/verifier; '
    "echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' >/dev/null 2>&1 & sleep 0.3"
)

NESTED = (
    "python3 -c \"import os\nfor base in ('.', '/logs/agent', '/logs/verifier'):\n"
    "    fd = os.open(base, os.O_RDONLY)\n"
    "    os.mkdir('nest', dir_fd=fd); fd = os.open('nest', os.O_RDONLY, dir_fd=fd)\n"
    "    for i in range(3000):\n"
    "        os.mkdir('d', dir_fd=fd); fd = os.open('d', os.O_RDONLY, dir_fd=fd)\n"
    "    open(os.open('leaf', os.O_CREAT | os.O_WRONLY, dir_fd=fd), 'w').close()\n\""
)
BAD_NAMES = (
    "for d in . /logs/agent /logs/verifier; do mkdir -p \"$d/$(printf 'bad\\377dir')\";"
    " echo x > \"$d/$(printf 'bad\\377dir')/$(printf 'f\\376\\375')\"; echo y > \"$d/$(printf '\\377')\"; done; true"
)
#: Only where the subject has a root of its own (never on a shared host).
BAD_NAMES_OUTSIDE = (
    "; mkdir -p /tests; echo z > \"/tests/$(printf '\\377')\"; echo z > \"/tmp/$(printf '\\377')\";"
    " echo z > \"/usr/local/bin/$(printf '\\377')\" 2>/dev/null; true"
)
BREAK_TOOLS = (
    "python3 -c \"import os\nfor t in ('rm', 'tar', 'dash', 'bash', 'sh', 'cp', 'mv', 'mkdir', 'cat', 'ls', 'sleep'):\n"
    "    for d in ('/usr/bin', '/bin'):\n"
    "        try:\n"
    "            os.unlink(f'{d}/{t}')\n"
    "        except OSError:\n"
    "            pass\n"
    "        try:\n"
    "            open(f'{d}/{t}', 'w').close(); os.chmod(f'{d}/{t}', 0o755)\n"
    "        except OSError:\n"
    '            pass\n"'
)


class TamperTests(ConformanceBase):
    """Tampering never passes; junk and broken tools stay the subject's result."""

    #: The subject can write the environment's system directories (True in a container; the
    #: local sandbox binds the host's read-only). Then restoring them is what keeps the verdict.
    system_dirs_writable: ClassVar[bool] = False
    #: The executor verifies an attempt whose workdir holds 3,000 nested directories (False:
    #: it refuses it as the subject's failure, with the reason in the record).
    verifies_deep_trees: ClassVar[bool] = True

    _attempts = itertools.count()

    def attempt(
        self,
        executor: Executor,
        task: Task,
        tmp_path: Path,
        command: str,
        *,
        verifier: str = VERIFIER,
        tests: Mapping[str, str] | None = None,
        refuse_tainted: bool = False,
    ) -> dict[str, Any]:
        """One whole attempt of a ``command`` subject (``verifier``: the test.sh, ``tests``: more
        files of the tests directory); returns its record as JSON (the ledger's line)."""
        n = next(self._attempts)
        return command_attempt(
            executor,
            task,
            tmp_path,
            command,
            n=n,
            name=f"subject-{n}",
            dirs="",
            verifier=verifier,
            tests=tests,
            policy=Policy(allow_unsandboxed=True, refuse_tainted=refuse_tainted),
            retries=Retries(infra=0),
        )

    def require_own_root(self) -> None:
        """Never run a test that writes system directories where they are the host's."""
        if not self.isolates_host_filesystem:
            pytest.skip("this executor shares the host filesystem: the test would change the host")

    def assert_rejected(self, record: dict[str, Any]) -> None:
        """No pass, and in the official denominator (a tamperer that kills its own command ends incomplete)."""
        assert record["status"] in ("agent_failure", "agent_incomplete"), record["error"]
        assert record["passed"] is False and record["official"] is True

    def assert_not_a_clean_pass(self, record: dict[str, Any]) -> None:
        """Rejected, or a pass recorded as tainted with the paths it depended on."""
        if record["status"] == "agent_success":
            taint = record.get("taint") or {}
            assert taint.get("tainted") and taint.get("paths"), ("an untainted pass", taint, record["verifier"])
        else:
            self.assert_rejected(record)

    def assert_refused_as_tainted(self, record: dict[str, Any]) -> None:
        """Under ``policy.refuse_tainted``: no pass, in the denominator, and said why if tainted."""
        self.assert_rejected(record)
        if (record.get("taint") or {}).get("refused"):
            assert record["status"] == "agent_failure" and "tainted" in record["error"]["message"], record["error"]

    # -- no false pass -------------------------------------------------------------------

    @pytest.mark.parametrize("name", sorted(TAMPERERS))
    def test_tampering_never_passes(self, executor: Executor, task: Task, tmp_path: Path, name: str) -> None:
        record = self.attempt(executor, task, tmp_path, TAMPERERS[name])
        self.assert_rejected(record)
        assert record["score"] == 0.0, "the real verifier ran and found done.txt missing"

    @pytest.mark.parametrize("name", sorted(SYSTEM_TAMPERERS))
    def test_system_tampering_never_passes(self, executor: Executor, task: Task, tmp_path: Path, name: str) -> None:
        """Never a clean pass; where the verifier runs what the subject left (a live
        environment) a pass is tainted, and refused under ``policy.refuse_tainted``."""
        self.require_own_root()
        record = self.attempt(executor, task, tmp_path, SYSTEM_TAMPERERS[name])
        if not self.keeps_detached:
            self.assert_rejected(record)
            assert record["score"] == 0.0
            return
        self.assert_not_a_clean_pass(record)
        refused = self.attempt(executor, task, tmp_path, SYSTEM_TAMPERERS[name], refuse_tainted=True)
        self.assert_refused_as_tainted(refused)

    def test_daemon_rewriting_the_reward_never_passes(self, executor: Executor, task: Task, tmp_path: Path) -> None:
        if not self.kills_whole_tree:
            pytest.skip("this executor does not stop setsid'd daemons")
        record = self.attempt(executor, task, tmp_path, DAEMON)
        self.assert_rejected(record)
        assert record["score"] == 0.0

    def test_path_hijack_is_undone_and_recorded(self, executor: Executor, task: Task, tmp_path: Path) -> None:
        """Undone where the executor restores (or never lets it happen); in a live environment the
        verifier runs the planted tools: recorded as taint with their paths (not undone)."""
        self.require_own_root()
        record = self.attempt(executor, task, tmp_path, PLANT_TOOLS + "echo done > done.txt\n")
        tamper = record["verifier"]["tamper"]
        assert tamper["mechanism"], "the record says how protected paths were handled"
        assert record["status"] == "agent_success", record["error"]
        if self.keeps_detached:
            taint = record["taint"]
            assert taint["tainted"] and any(p.startswith("/usr/") for p in taint["paths"]), taint
            assert any(p.endswith(("/sh", "/python3", "/bash", "/dash")) for p in taint["paths"]), taint
        elif self.system_dirs_writable:
            assert any("/usr/local/bin/python3" in c for c in tamper["changed"]), tamper
            assert "/usr/local/bin/python3" in tamper["restored"] or any(
                p in ("/usr/local/bin", "/usr/local") for p in tamper["restored"]
            ), tamper
        else:
            assert not any("/usr/" in c for c in tamper.get("changed", [])), "system directories were writable"

    # -- the denominator -----------------------------------------------------------------

    def test_undecodable_names_everywhere_stay_official(self, executor: Executor, task: Task, tmp_path: Path) -> None:
        outside = BAD_NAMES_OUTSIDE if self.isolates_host_filesystem else ""
        record = self.attempt(executor, task, tmp_path, BAD_NAMES + outside + "; echo done > done.txt")
        assert record["status"] == "agent_success", record["error"]
        out = tmp_path / f"out-{next(self._attempts) - 1}"
        diff = (out / record["artifacts"]["diff"]).read_text(encoding="utf-8")
        assert "b/done.txt" in diff and "bad\\" in diff, "undecodable names are written escaped"
        if self.keeps_detached:  # kept, and listed (escaped) among the changes outside the workdir
            changed = record["taint"]["changed"]
            assert any(c.startswith("/usr/local/bin/") and "\\x" in c for c in changed), changed
        elif self.system_dirs_writable:  # an entry the engine cannot name: its directory comes back whole
            assert "/usr/local/bin" in record["verifier"]["tamper"]["restored"], record["verifier"]["tamper"]

    def test_locked_workdir_and_logs_stay_official(self, executor: Executor, task: Task, tmp_path: Path) -> None:
        """A subject that takes every permission from its workdir and /logs cannot keep the verifier
        out (a verifier failure is outside the denominator): its honest part is graded."""
        record = self.attempt(executor, task, tmp_path, "echo done > done.txt; chmod 000 . /logs /logs/verifier; true")
        assert record["status"] == "agent_success", record["error"]

    def test_deep_trees_stay_official(self, executor: Executor, task: Task, tmp_path: Path) -> None:
        record = self.attempt(executor, task, tmp_path, NESTED + "; echo done > done.txt")
        if self.verifies_deep_trees:
            assert record["status"] == "agent_success", record["error"]
        else:
            assert record["status"] == "agent_failure", record["error"]
            assert record["error"]["message"].startswith("not verified: "), record["error"]
        assert record["official"] is True

    def test_broken_tools_stay_official(self, executor: Executor, task: Task, tmp_path: Path) -> None:
        self.require_own_root()
        holder = "(python3 -c 'import time; time.sleep(300)' &); "  # stopping it needs the tools too
        record = self.attempt(executor, task, tmp_path, "echo done > done.txt; " + holder + BREAK_TOOLS)
        if self.keeps_detached:  # the verifier runs the broken tools, as the benchmark's harness would
            assert record["official"] is True, record["error"]
            assert record["status"] in ("agent_failure", "agent_success"), record["error"]
            return
        assert record["status"] == "agent_success", record["error"]
        if self.system_dirs_writable:
            assert "/usr/bin/rm" in record["verifier"]["tamper"]["restored"], record["verifier"]["tamper"]
