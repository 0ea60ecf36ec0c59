"""SWE-bench's git steps (prepare.sh) never run a git driver the subject planted in the repository."""

from __future__ import annotations

import pytest

from pytest_maka.verifiers.swebench_prepare import PREPARE_SH

pytestmark = pytest.mark.docker

#: A repository at a base commit; then the subject's work: a real change, plus a clean/smudge
#: filter, a textconv and an external diff program in .git/config, a .gitattributes naming
#: them, and a hook; each would write a marker file if git ran it.
SETUP = r"""
set -e
mkdir -p /testbed /logs/verifier /tests && cd /testbed
git init -q . && git config user.email t@t && git config user.name t
echo 'def f(): return 1' > m.py && echo 'def test_f(): pass' > test_m.py
git add -A && git commit -qm base && git rev-parse HEAD > /base
echo 'def f(): return 2' > m.py
cat >> .git/config <<'CFG'
[filter "evil"]
	clean = sh -c 'touch /pwned-clean; cat'
	smudge = sh -c 'touch /pwned-smudge; cat'
	process = sh -c 'touch /pwned-process'
[diff "evil"]
	textconv = sh -c 'touch /pwned-textconv; cat "$0"'
	command = sh -c 'touch /pwned-diffcmd'
[diff]
	external = sh -c 'touch /pwned-external'
CFG
printf '* filter=evil diff=evil\n' > .gitattributes
mkdir -p .git/hooks && printf '#!/bin/sh\ntouch /pwned-hook\n' > .git/hooks/post-checkout
chmod +x .git/hooks/post-checkout
printf 'test_m.py\n' > /tests/test_files.txt
printf 'diff --git a/test_m.py b/test_m.py\n--- a/test_m.py\n+++ b/test_m.py\n' > /tests/test.patch
printf '@@ -1 +1 @@\n-def test_f(): pass\n+def test_f(): assert True\n' >> /tests/test.patch
"""


def test_prepare_runs_no_git_driver_the_subject_planted(docker_api) -> None:  # type: ignore[no-untyped-def]
    cid = docker_api.create_container("python:3.11-slim", command=["sleep", "300"], network_disabled=True)["Id"]
    try:
        docker_api.start(cid)

        def sh(script: str, *args: str) -> tuple[int, str]:
            eid = docker_api.exec_create(cid, ["bash", "-c", script, *args])["Id"]
            out = docker_api.exec_start(eid).decode(errors="replace")
            return docker_api.exec_inspect(eid)["ExitCode"], out

        code, out = sh(SETUP)
        assert code == 0, out
        base = sh("cat /base")[1].strip()
        code, out = sh(PREPARE_SH, "prepare.sh", base, "/testbed")
        assert code == 0 and "maka: ready" in out, out
        code, out = sh("ls / | grep pwned || true; cat /testbed/m.py /testbed/test_m.py")
        assert "pwned" not in out, f"a planted git driver ran: {out}"
        assert "return 2" in out and "assert True" in out, "the subject's change and the test patch are applied"
    finally:
        docker_api.remove_container(cid, force=True)
