"""``Sandbox.remove`` on Docker runs no program of the container: a subject that replaced every
``rm`` (and busybox, unlink, find, python3) sees none of them run, and the path is still gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_maka.executors.docker.protect_paths import stat_path
from pytest_maka.executors.docker.watch import AccessWatch

from .helpers import plain_task, request, run

pytestmark = pytest.mark.docker

#: Written only by the planted programs.
MARKER = "/var/tmp/planted-ran"
#: Every program a removal could run, replaced by a script that leaves the marker.
PLANT_RM = (
    "mkdir -p /opt/real && cp /bin/dash /opt/real/sh && cp /usr/bin/rm /opt/real/rm;"
    " for t in /usr/bin/rm /bin/rm /usr/local/bin/rm /usr/local/sbin/rm /usr/sbin/rm /bin/busybox /usr/bin/busybox"
    " /usr/bin/unlink /usr/bin/find /usr/local/bin/python3; do /opt/real/rm -f $t 2>/dev/null;"
    f" printf '#!/opt/real/sh\\necho \"$0 $*\" >> {MARKER}\\n' > $t && chmod 755 $t; done; true"
)


def test_remove_never_runs_a_replaced_rm(make_executor, docker_api, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    task = plain_task(tmp_path / "t")
    with make_executor().lease(request(task, tmp_path)) as sandbox:
        setup = "mkdir -p /tests/deep/er /srv/x && echo a > /tests/deep/er/f && ln -s /etc /srv/x/link && "
        result, _, err = run(sandbox, setup + PLANT_RM, tmp_path)
        assert result.exit_code == 0, err
        for path in ("/tests", "/srv/x/link", "/srv/x"):
            sandbox.remove(path)
            assert stat_path(docker_api, sandbox.id, path) is None, path
        assert stat_path(docker_api, sandbox.id, "/etc/passwd"), "the link was removed, never followed"
        assert sandbox.removed_with_rm is None, sandbox.removed_with_rm
        assert stat_path(docker_api, sandbox.id, MARKER) is None, "a planted program ran"
        # the plant is live: it runs when something in the container runs rm, as a verifier would
        run(sandbox, "rm -f /nothing", tmp_path)
        assert stat_path(docker_api, sandbox.id, MARKER) is not None, "the plant works"


def test_the_helper_container_probe_removes_without_running_the_container_s_programs(  # type: ignore[no-untyped-def]
    make_executor, docker_api, tmp_path: Path
) -> None:
    """The probe's path where the engine is on another host: a helper container of another
    image sharing only the attempt container's process table (run here on the local engine)."""
    task = plain_task(tmp_path / "t")
    with make_executor().lease(request(task, tmp_path)) as sandbox:
        result, _, err = run(sandbox, "mkdir -p /srv/gone && " + PLANT_RM, tmp_path)
        assert result.exit_code == 0, err
        watch = AccessWatch(sandbox.engine, sandbox.id, sandbox._watch_images())
        try:
            answer = watch._remote({"op": "unlink", "path": "/srv/gone"}, "removing /srv/gone")
            assert answer == {"removed": True}, answer
            again = watch._remote({"op": "unlink", "path": "/srv/gone"}, "removing /srv/gone")
            assert again == {"removed": False}, again
        finally:
            watch.close()
        assert stat_path(docker_api, sandbox.id, "/srv/gone") is None
        assert stat_path(docker_api, sandbox.id, MARKER) is None, "a planted program ran"
