"""``Sandbox.remove`` on Docker runs no program of the container: a subject that replaced every
``rm`` (and busybox, unlink, find, python3) sees none of them run, and the path is still gone."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pytest_maka.executors.docker import labels as L
from pytest_maka.executors.docker.protect_paths import stat_path
from pytest_maka.executors.docker.watch import ROLE, local_root

from .cut_relay import cut_relay
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


def test_on_an_engine_elsewhere_a_helper_container_removes(make_executor, docker_api, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The engine reached over TCP (a relay on 127.0.0.1 in front of the real one) counts as
    another host's: the probe runs in a helper container of another image that shares only the
    attempt container's process table, and still nothing of the container runs."""
    with cut_relay() as relay:
        executor = make_executor(engines=[relay.url])
        try:
            with executor.lease(request(plain_task(tmp_path / "t"), tmp_path)) as sandbox:
                assert local_root(sandbox.api, sandbox.id) is None, "the engine counts as remote"
                result, _, err = run(
                    sandbox, "mkdir -p /srv/gone/deep && touch /srv/gone/deep/f && " + PLANT_RM, tmp_path
                )
                assert result.exit_code == 0, err
                sandbox.remove("/srv/gone")
                assert stat_path(docker_api, sandbox.id, "/srv/gone") is None
                assert sandbox.removed_with_rm is None, sandbox.removed_with_rm
                assert stat_path(docker_api, sandbox.id, MARKER) is None, "a planted program ran"
                mine = [f"{L.ROLE}={ROLE}", f"{L.RUN}={L.run_id()}"]
                helpers = docker_api.containers(all=True, filters={"label": mine})
                pid_modes = [docker_api.inspect_container(c["Id"])["HostConfig"]["PidMode"] for c in helpers]
                assert f"container:{sandbox.id}" not in pid_modes, "the helper container was removed"
        finally:
            executor.close()  # while the relay still answers


def test_the_protected_restore_deletes_what_the_subject_added_running_nothing(
    make_executor, docker_api, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """SWE-bench's restore deletes the files the subject added under the image's system
    directories with the harness's probe: the engine saw no command in the container while it
    did (its rm, even restored from the image, never runs), and the files are gone."""
    task = plain_task(tmp_path / "t")
    with make_executor().lease(request(task, tmp_path)) as sandbox:
        added = ["/usr/local/lib/planted.pth", "/usr/local/bin/helper", "/etc/added.conf"]
        result, _, err = run(sandbox, " && ".join(f"echo x > {p}" for p in added), tmp_path)
        assert result.exit_code == 0, err
        since = int(time.time()) - 1
        report = sandbox.restore_protected(tmp_path)  # type: ignore[attr-defined]
        assert set(added) <= set(report["restored"]), report
        assert not any("rm" in n for n in report.get("notes", [])), report
        for path in added:
            assert stat_path(docker_api, sandbox.id, path) is None, path
        events = docker_api.events(
            since=since,
            until=int(time.time()) + 1,
            decode=True,
            filters={"container": sandbox.id, "event": "exec_create"},
        )
        commands = [e["Action"].split(":", 1)[1].split() for e in events]
        assert not any(Path(c[0]).name == "rm" for c in commands if c), commands
