"""Finding leftover verification cgroups while other runs' containers come and go (no Docker needed:
the walk is over a real directory tree shaped as a cgroup hierarchy)."""

from __future__ import annotations

import shutil
from pathlib import Path

from pytest_maka.executors.docker.verdict_cgroup import GROUP_PREFIX, find_groups


def _tree(root: Path, *paths: str) -> None:
    for p in paths:
        (root / p).mkdir(parents=True)


def test_groups_are_found_at_levels_two_to_five_only(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        f"{GROUP_PREFIX}top",  # level 1: not a container's
        f"docker/c1/{GROUP_PREFIX}1-2-a",
        f"system.slice/docker-c2.scope/x/{GROUP_PREFIX}3-4-b",
        f"a/b/c/d/e/{GROUP_PREFIX}5-6-c",  # level 6: deeper than any engine puts one
    )
    (tmp_path / "docker" / "c1" / "cgroup.procs").write_text("")
    found = sorted(p.relative_to(tmp_path).as_posix() for p in find_groups(tmp_path))
    assert found == [f"docker/c1/{GROUP_PREFIX}1-2-a", f"system.slice/docker-c2.scope/x/{GROUP_PREFIX}3-4-b"]


def test_a_container_cgroup_removed_during_the_walk_is_passed_over(tmp_path: Path) -> None:
    """CI saw the sweep fail with FileNotFoundError when another run's container ended mid-walk."""
    _tree(tmp_path, f"docker/c1/{GROUP_PREFIX}1-2-a", f"docker/c2/{GROUP_PREFIX}3-4-b", "docker/c3/sub/deeper")
    walk = find_groups(tmp_path)
    first = next(walk)
    for other in ("c1", "c2", "c3"):  # every container but the one being read ends now
        if other != first.parent.name:
            shutil.rmtree(tmp_path / "docker" / other)
    assert list(walk) == []
    assert first.name.startswith(GROUP_PREFIX)
