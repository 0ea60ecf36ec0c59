"""Multi-step tasks in Harbor 0.25's layout (``harbor tasks init --steps``) for the tests."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: A two-step task whose task.toml Harbor 0.25 itself wrote (see its README.md).
GREETING = ROOT / "datasets" / "harbor-steps" / "two-step-greeting"

#: A step's test.sh: reward 1 iff /app/<name>.txt says "<name>"; the shared helper comes from the root tests/.
STEP_TEST = '#!/bin/bash\n. /tests/common.sh\nreward "$(cat /app/{name}.txt 2>/dev/null)" "{name}"\n'
COMMON = (
    "reward() { mkdir -p /logs/verifier\n"
    '  if [ "$1" = "$2" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n}\n'
)


def copy_greeting(dest: Path) -> Path:
    shutil.copytree(GREETING, dest)
    return dest


def write_steps_task(
    root: Path,
    name: str,
    steps: list[dict[str, Any]],
    *,
    strategy: str | None = None,
    top_solution: str | None = None,
    extra_toml: str = "",
) -> Path:
    """A multi-step task; each step dict: name, and optionally min_reward, solve, test, setup,
    workdir {rel: content}, agent_timeout, verifier_timeout, verifier_env, no_solution,
    step_toml / agent_toml / verifier_toml (extra lines of [[steps]] / [steps.agent] / [steps.verifier]),
    tests_files {rel: content}."""
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "environment").mkdir()
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (task / "tests" / "common.sh").write_text(COMMON)
    toml = ['schema_version = "1.4"']
    if strategy:
        toml.append(f'multi_step_reward_strategy = "{strategy}"')
    toml += ["", "[task]", f'name = "maka-tests/{name}"', 'version = "1.0.0"', ""]
    for step in steps:
        n = step["name"]
        toml += ["[[steps]]", f'name = "{n}"']
        if "min_reward" in step:
            toml.append(f"min_reward = {step['min_reward']}")
        toml += step.get("step_toml", ())
        toml += [
            "",
            "[steps.agent]",
            f"timeout_sec = {step.get('agent_timeout', 30.0)}",
            *step.get("agent_toml", ()),
            "",
        ]
        toml += [
            "[steps.verifier]",
            f"timeout_sec = {step.get('verifier_timeout', 30.0)}",
            *step.get("verifier_toml", ()),
        ]
        for key, value in (step.get("verifier_env") or {}).items():
            toml += ["[steps.verifier.env]", f'{key} = "{value}"']
        toml.append("")
        d = task / "steps" / n
        (d / "tests").mkdir(parents=True)
        (d / "instruction.md").write_text(f"Write {n} to /app/{n}.txt.\n")
        (d / "tests" / "test.sh").write_text(step.get("test", STEP_TEST.format(name=n)))
        for rel, content in (step.get("tests_files") or {}).items():
            (d / "tests" / rel).write_text(content)
        if not step.get("no_solution"):
            (d / "solution").mkdir()
            (d / "solution" / "solve.sh").write_text("#!/bin/bash\n" + step.get("solve", f"echo {n} > /app/{n}.txt\n"))
        for rel, content in (step.get("workdir") or {}).items():
            path = d / "workdir" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        if "setup" in step:
            (d / "workdir").mkdir(exist_ok=True)
            (d / "workdir" / "setup.sh").write_text("#!/bin/bash\n" + step["setup"])
    toml += ["[agent]", "timeout_sec = 30.0", "", "[verifier]", "timeout_sec = 30.0", "", "[environment]"]
    toml += ['workdir = "/app"', 'network_mode = "no-network"', ""]
    (task / "task.toml").write_text("\n".join(toml) + textwrap.dedent(extra_toml))
    if top_solution is not None:
        (task / "solution").mkdir()
        (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + top_solution)
    return task
