"""harbor-cookbook's compose recipes with what cannot be fetched here substituted, run in both harnesses.

    python bench/cookbook_standins.py --work /tmp/cookbook               # write the stand-ins, run them here
    python bench/cookbook_standins.py --work /tmp/cookbook --harbor /tmp/harbor-venv/bin/harbor

The recipes come from the fetched mirror (``MIRRORS/harbor-framework+harbor-cookbook/repo``) at
the commits pinned in ``bench/survey_repos.yaml``. Unchanged they do not run here (bench/RESULTS.md):
``ghcr.io`` images cannot be pulled and ``astral.sh`` does not resolve. Each stand-in changes only
that, and every change is printed: the public base images become local ones, Alpine's ``apk``
becomes Debian's ``apt-get``, and the verifier's uv download becomes Debian's ``python3-pytest``
(the recipe's ``tests/test_outputs.py`` and reward rule unchanged); sidecar-dns's DNS server
answers ``example.com`` itself, since no DNS server here resolves it. Recipes whose sidecar is
built ``FROM ghcr.io/astral-sh/uv`` are left out, with that reason.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harbor_parity import AGENTS, maka_verdict, run_harbor, run_maka

REPO = "harbor-framework/harbor-cookbook"
#: stand-in name -> (recipe, the commit it is taken at: survey_repos.yaml)
RECIPES = {
    "multi-container": ("multi-container", "e093c9a860b988d9d74901010ddddb9c7f124f92"),
    "simulated-user": ("simulated-user", "e093c9a860b988d9d74901010ddddb9c7f124f92"),
    # the last on main: main's resolv.conf names Docker's resolver (127.0.0.11), not the sidecar
    "sidecar-dns": ("sidecar-dns", "bfd953c62e1068309ba1225a3e970df175fb7e14"),
    # pull request 14's: main's resolver is the sidecar (`dns: 10.0.0.53`)
    "sidecar-dns-pr14": ("sidecar-dns", "7566f6fe5bb8583908687bc501394e4460c1415c"),
}
LEFT_OUT = {
    name: "a sidecar built FROM ghcr.io/astral-sh/uv:latest (no registry here)"
    for name in ("mcp-tools", "computer-use-ubuntu", "computer-use-windows")
}
BASES = {
    "ubuntu:24.04": "debian:bookworm-slim",
    "python:3.12-slim": "python:3.11-slim",
    "alpine:3.20": "debian:bookworm-slim",
}
APK = (
    "apk add --no-cache dnsmasq bind-tools",
    "apt-get update && apt-get install -y --no-install-recommends dnsmasq bind9-dnsutils",
)
#: example.com resolves on no DNS server here and 8.8.8.8 is out of reach: the sidecar answers
#: example.com itself, instead of forwarding it (``local=``: its AAAA query is answered empty, not
#: refused, so the recipe's ``nslookup`` healthcheck passes); the blocked names stay blocked.
ANSWER = "local=/example.com/\naddress=/example.com/10.0.0.80"
DNSMASQ = (("server=/example.com/127.0.0.11", ANSWER), ("server=8.8.8.8", ANSWER))
UV_BUILD = re.compile(r"RUN curl -LsSf https://astral\.sh/uv/[^\n]*\nENV PATH=[^\n]*\nRUN uvx [^\n]*\n")
PYTEST_BUILD = "RUN apt-get update && apt-get install -y --no-install-recommends python3-pytest\n"
TEST_SH = """\
#!/bin/bash
{install}python3 -m pytest /tests/test_outputs.py -rA

if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def standin(mirror: Path, name: str, recipe: str, commit: str, work: Path) -> tuple[Path, list[str]]:
    """The recipe extracted under ``work`` with the substitutions made; and what they were."""
    dest = work / name
    subprocess.run(["rm", "-rf", str(dest)], check=True)
    dest.mkdir(parents=True)
    prefix = f"harbor_cookbook/recipes/{recipe}/"
    archive = subprocess.run(["git", "-C", str(mirror), "archive", commit, prefix], capture_output=True, check=True)
    subprocess.run(
        ["tar", "-x", "-C", str(dest), f"--strip-components={prefix.count('/')}"], input=archive.stdout, check=True
    )
    changes: list[str] = []
    for dockerfile in sorted(dest.rglob("Dockerfile")):
        text = original = dockerfile.read_text()
        for public, local in BASES.items():
            text = text.replace(f"FROM {public}", f"FROM {local}")
        text = text.replace(*APK)
        text = UV_BUILD.sub(PYTEST_BUILD, text)
        if text != original:
            dockerfile.write_text(text)
            changes.append(f"{dockerfile.relative_to(dest)}: base image local; apk/uv download replaced by apt-get")
    dnsmasq = dest / "environment" / "dns-server" / "dnsmasq.conf"
    for forward, answer in DNSMASQ if dnsmasq.is_file() else ():
        if forward in dnsmasq.read_text():
            dnsmasq.write_text(dnsmasq.read_text().replace(forward, answer))
            changes.append(f"dnsmasq.conf: {forward} replaced by answering example.com itself")
    test = dest / "tests" / "test.sh"
    preinstalled = "python3-pytest" in (dest / "environment" / "Dockerfile").read_text()
    install = "" if preinstalled else "apt-get update\napt-get install -y --no-install-recommends python3-pytest\n"
    test.write_text(TEST_SH.format(install=install))
    changes.append("tests/test.sh: uvx pytest (astral.sh) replaced by Debian's python3-pytest")
    return dest, changes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--harbor", help="the harbor executable: the same cells through Harbor 0.25")
    parser.add_argument("--only", action="append", default=[], help="run only these recipes")
    args = parser.parse_args()
    mirror = args.mirrors / REPO.replace("/", "+") / "repo"
    args.work.mkdir(parents=True, exist_ok=True)
    dirs = []
    for name, (recipe, commit) in RECIPES.items():
        if args.only and name not in args.only:
            continue
        task, changes = standin(mirror, name, recipe, commit, args.work / "tasks")
        dirs.append(task)
        print(f"{name} ({commit[:7]}): " + "; ".join(changes))
    for name, why in LEFT_OUT.items():
        print(f"{name}: left out: {why}")
    records, wall = run_maka(dirs, args.work, "maka-out")
    theirs = {}
    if args.harbor:
        for task in dirs:
            for agent in AGENTS:
                theirs[task.name, agent] = run_harbor(
                    args.harbor, task, agent, args.work / "harbor-jobs", f"{task.name}-{agent}"
                )
    print(f"\n| recipe | here {' / '.join(AGENTS)} | Harbor 0.25 {' / '.join(AGENTS)} |\n|---|---|---|")
    for task in dirs:
        here = " / ".join(maka_verdict(records.get((task.name, a))) for a in AGENTS)
        there = " / ".join(theirs[task.name, a]["verdict"] if theirs else "-" for a in AGENTS)
        print(f"| {task.name} | {here} | {there} |")
    print(f"\npytest-maka wall: {wall:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
