"""Harbor 0.25 tasks in a cohort: invalid tasks skipped (or a usage error under --maka-strict),
skips recorded as skips on every -n, multi-key rewards, and a verifier starved of network."""

from __future__ import annotations

import json
import shutil

import pytest

from ..conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]


def _skips(cohort: Cohort) -> dict[str, str]:
    return json.loads((cohort.out / "lock.json").read_text())["runs"][-1]["skipped"]


@pytest.mark.parametrize("workers", [None, "2"])
def test_one_invalid_task_is_skipped_and_the_rest_runs(cohort: Cohort, workers: str | None) -> None:
    cohort.task("good")
    typo = cohort.task("typo")
    toml = typo / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\ntimeout_sec = ", "[verifier]\ntimeout_sec = -"))
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    args = ("-rs", "-n", workers) if workers else ("-rs",)
    result = cohort.run_subprocess(*args)
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == 9, "a dropped task is exit 9, no harness failure (exit 7 was the xdist bug)"
    assert "maka: exit code 9: the results do not cover every selected cell" in result.stdout.str()
    assert "shown by pytest -rs; 1 of these task(s) invalid, dropped" in result.stdout.str()
    line = f"{toml}: verifier.timeout_sec: expected a number greater than 0"
    assert any(f"maka: invalid task skipped: {line}" in out for out in result.outlines), result.stdout.str()
    assert any("SKIPPED" in out and "typo: invalid task: " in out for out in result.outlines)
    assert cohort.status() == {"good[oracle-r0]": "agent_success"}, "nothing recorded as infra_failure"
    assert list(_skips(cohort)) == ["typo[oracle-r0]"]
    assert "not run" not in result.stdout.str()


def test_a_run_whose_every_cell_is_skipped_says_so_in_its_summary(cohort: Cohort) -> None:
    """Found on AbdulGhaffarcs/harbor-tasks (CC0), whose every task was skipped: the run printed
    ``ssssssssss`` and no pytest-maka section at all, and its summary pointed at no reason; now it
    counts the skipped cells and tasks and says where the reasons are."""
    for name in ("one", "two"):
        toml = cohort.task(name) / "task.toml"
        toml.write_text(toml.read_text().replace("[verifier]\ntimeout_sec = ", "[verifier]\ntimeout_sec = -"))
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}])
    result = cohort.run_subprocess("-q", "-n", "2")
    result.assert_outcomes(skipped=4)
    assert result.ret == 9, "nothing ran: exit 9, not 0"
    out = result.stdout.str()
    assert "4 cell(s) of 2 task(s) skipped, nothing run for them: the reasons are in lock.json" in out, out
    assert "(no report: no cell ran)" in out and not (cohort.out / "report.html").exists()
    assert "maka: exit code 9: no cell ran (--maka-exit=never keeps 0" in out
    assert all("verifier.timeout_sec: expected a number" in why for why in _skips(cohort).values()), _skips(cohort)


def test_top_level_keys_harbor_ignores_are_ignored_and_named_and_a_misspelt_section_is_not(cohort: Cohort) -> None:
    """Published tasks carry top-level keys of their own, which Harbor ignores: ``[[sources]]``
    (AbdulGhaffarcs/harbor-tasks), a top-level ``author_name`` (Kibetkipsang/harbor-tasks). They
    were skipped here as invalid; they run, and the record names what was ignored. A key one letter
    off a section (``[verifer]``) still makes the task invalid: its author meant a section."""
    sources = cohort.task("sources") / "task.toml"
    text = sources.read_text()
    sources.write_text('author_name = "someone"\n' + text + '[[sources]]\nsource_name = "synthetic"\n')
    typo = cohort.task("typo") / "task.toml"
    typo.write_text(typo.read_text().replace("[verifier]\n", "[verifer]\n"))
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    result = cohort.run_subprocess("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    assert cohort.status() == {"sources[oracle-r0]": "agent_success"}
    record = cohort.attempts()[0]
    assert record["task_metadata"]["ignored_keys"] == ["author_name", "sources"], record["task_metadata"]
    assert "verifer: unknown section; did you mean 'verifier'?" in _skips(cohort)["typo[oracle-r0]"]


def test_maka_strict_turns_an_invalid_task_into_a_usage_error(cohort: Cohort) -> None:
    cohort.task("good")
    typo = cohort.task("typo")
    (typo / "task.toml").write_text((typo / "task.toml").read_text() + "[environment.healthcheck]\ncommand = 1\n")
    cohort.write()
    result = cohort.run("--maka-strict")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and "typo/task.toml: environment.healthcheck.command: expected a non-empty" in errors[0]
    assert not (cohort.out / "attempts.jsonl").exists()


def test_unknown_keys_run_are_named_once_and_refused_under_maka_strict(cohort: Cohort) -> None:
    """Keys Harbor ignores in any table (``[task] format``, ``[metadata]``-like keys in
    ``[environment]``) run, are kept in the record and named once per run, with -q too; in
    lock.json; and ``--maka-strict`` refuses each of them, every one named."""
    for name in ("one", "two"):
        toml = cohort.task(name) / "task.toml"
        text = toml.read_text().replace("[verifier]\n", "[verifier]\ntimeout_secs = 5\n")
        toml.write_text('[task]\nname = "maka/t"\nformat = "harbor"\n' + text)
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    result = cohort.run_subprocess("-q")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    for key in ("task.format: not used by pytest-maka", "verifier.timeout_secs: not used by pytest-maka"):
        lines = [line for line in result.outlines if key in line]
        assert len(lines) == 1 and lines[0].endswith("(2 task(s): one, two)"), out
    assert "(did you mean 'timeout_sec'?)" in out
    record = cohort.attempts()[0]
    assert record["task_metadata"]["ignored_keys"] == ["task.format", "verifier.timeout_secs"]
    assert record["task_metadata"]["task"]["format"] == "harbor"
    lock = json.loads((cohort.out / "lock.json").read_text())["runs"][-1]
    assert lock["ignored_keys"]["one"][0] == "task.format: not used by pytest-maka"
    strict = cohort.run("--maka-strict")
    assert strict.ret == pytest.ExitCode.USAGE_ERROR
    err = strict.stderr.str()
    first = [line for line in strict.stderr.lines if line.startswith("ERROR:")]
    assert len(first) == 1 and "one/task.toml: task.format: not used by pytest-maka" in first[0], err
    assert "(--maka-strict; 3 more below)" in first[0], err
    assert f"{cohort.tasks / 'two' / 'task.toml'}: verifier.timeout_secs: not used by pytest-maka" in err


def test_collect_only_quiet_shows_every_skip_reason_with_rs(cohort: Cohort) -> None:
    """``--collect-only -q -rs`` prints each skip reason (the header that named invalid tasks is
    hidden by -q, and collection evaluates no skip marker); every problem of a task is in it."""
    cohort.task("good")
    bad = cohort.task("bad")
    (bad / "tests" / "test.sh").unlink()
    (bad / "instruction.md").unlink()
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}])
    result = cohort.run_subprocess("--collect-only", "-q", "-rs")
    assert result.ret == 0
    lines = [line for line in result.outlines if line.startswith("SKIPPED [2] ")]
    assert len(lines) == 1, result.stdout.str()
    assert "bad: invalid task: " in lines[0] and "instruction.md: missing" in lines[0], lines
    assert "tests/test.sh: missing" in lines[0] and "more problem" not in lines[0], lines
    quiet = cohort.run_subprocess("--collect-only", "-q")
    assert "2 cell(s) will be skipped: -rs shows why" in quiet.stdout.str()


def test_features_the_executor_lacks_skip_with_the_feature_named_under_xdist(cohort: Cohort) -> None:
    cohort.task("plain")
    compose = cohort.task("compose")  # (multi-step tasks, first used here, now run on both executors)
    (compose / "environment" / "docker-compose.yaml").write_text("services:\n  main:\n    build: .\n")
    cohort.task("as-user")
    user_toml = cohort.tasks / "as-user" / "task.toml"
    user_toml.write_text(user_toml.read_text().replace("[verifier]\n", '[verifier]\nuser = "tester"\n'))
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    result = cohort.run_subprocess("-rs", "-n", "2")
    result.assert_outcomes(passed=1, skipped=2)
    assert result.ret == 9, "skipped cells: the results do not cover the cohort"
    skips = _skips(cohort)
    assert skips["compose[oracle-r0]"] == (
        "compose: multi-container environments (environment/docker-compose.yaml) "
        "not supported on the local executor yet"
    )
    assert "running a phase as another user" in skips["as-user[oracle-r0]"]


def test_multi_key_reward_passes_by_the_source_rule(cohort: Cohort) -> None:
    test = 'mkdir -p /logs/verifier; echo \'{"tests": 1, "style": 0.5}\' > /logs/verifier/reward.json\n'
    cohort.task("multi", test=test)
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["multi[oracle-r0]"]
    assert (record["status"], record["score"]) == ("agent_failure", 0.75), "default: every key must be 1"
    assert record["verifier"]["rewards"] == {"tests": 1.0, "style": 0.5}
    (cohort.out).rename(cohort.root / "out-default")
    cohort.write(
        tasks=[{"path": "tasks", "reward_rule": "mean", "reward_threshold": 0.7}],
        subjects=[{"name": "oracle", "kind": "oracle"}],
    )
    cohort.run().assert_outcomes(passed=1)
    assert cohort.results()["multi[oracle-r0]"]["score"] == 0.75


def test_unknown_harbor_source_option_names_the_key(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(tasks=[{"path": "tasks", "reward_rul": "mean"}])
    result = cohort.run("--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*tasks[[]0[]].reward_rul: unknown key for the harbor format*reward_rule*"])


def test_a_verifier_starved_of_the_network_it_declared_is_no_verdict_and_says_why(cohort: Cohort) -> None:
    """Harbor's own shared-mode template test.sh, offline. Its output saying a host did not resolve
    is text the subject's code could print, but the harness confirms it on its own side: the host
    is named by the task's own test.sh and the phase was given no network. No verdict
    (infra_failure, not retried), and the record names the network it lacked."""
    test = (
        "curl -LsSf https://astral.sh/uv/0.9.7/install.sh | sh\n"
        "if command -v uvx >/dev/null; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
    )
    cohort.task("downloads", test="mkdir -p /logs/verifier\n" + test)
    offline = cohort.task("offline", test="mkdir -p /logs/verifier\n" + test)
    toml = offline / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nnetwork_mode = "no-network"\n'))
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    result = cohort.run()
    result.assert_outcomes(failed=1, errors=1)
    starved = cohort.results()["downloads[oracle-r0]"]
    assert starved["status"] == "infra_failure" and starved["official"] is False
    assert starved["attempt_count"] == 1
    assert "Could not resolve host: astral.sh" in starved["verifier"]["network_failure"]
    assert starved["verifier"]["reward_written"] == 0.0
    error = starved["verifier"]["error"]
    assert "the verifier needed a network it was not given (declared public, granted none)" in error
    assert "confirmed: the phase had no network and the verifier's files name astral.sh" in error
    declared_offline = cohort.results()["offline[oracle-r0]"]
    assert declared_offline["status"] == "agent_failure", "the task said its verifier needs no network"


def test_oracle_gets_the_solution_env(cohort: Cohort) -> None:
    test = "mkdir -p /logs/verifier\n"
    test += 'if [ "$(cat /app/done.txt)" = hello ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
    solve = 'echo "$GREETING" > /app/done.txt\n'
    package = '[task]\nname = "maka/env"\nversion = "1.2"\ndescription = "greets from the solution env"\n'
    mcp = '[[environment.mcp_servers]]\nname = "files"\ntransport = "stdio"\ncommand = "mcp-files"\n'
    extra = package + '[solution]\nenv = {GREETING = "hello"}\n' + mcp
    cohort.task("env", solve=solve, test=test, extra_toml=extra)
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.run().assert_outcomes(passed=1)
    record = cohort.results()["env[oracle-r0]"]
    assert record["task_metadata"]["task"]["name"] == "maka/env"
    assert record["task_declares"] == {
        "schema_version": "1.0",
        "mcp_servers": [{"name": "files", "transport": "stdio"}],
    }
    assert "1.2: greets from the solution env" in (cohort.out / "report.html").read_text(), "the report shows [task]"


def test_task_directories_whose_names_are_not_ids_run_under_safe_ids(cohort: Cohort) -> None:
    """Found on a public task repository whose directories are named ``001. tasks-...``: the
    whole run was refused (``task id ... must match``). Such a directory now runs under an id
    with each run of other characters made one ``-``, and
    ``-k`` selects it by that id; two directories that come to the same id are a spec error
    naming both."""
    cohort.task("001. ledger audit")
    cohort.task("plain")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.run_subprocess("-k", "ledger").assert_outcomes(passed=1)
    assert cohort.status() == {"001.-ledger-audit[oracle-r0]": "agent_success"}
    assert cohort.results()["001.-ledger-audit[oracle-r0]"]["task"] == "001.-ledger-audit"
    cohort.run_subprocess("-n", "2").assert_outcomes(passed=2)
    assert cohort.status() == {"001.-ledger-audit[oracle-r0]": "agent_success", "plain[oracle-r0]": "agent_success"}

    cohort.task("001.-ledger-audit")
    result = cohort.run_subprocess()
    assert result.ret == 4, result.stdout.str()
    err = result.stderr.str() + result.stdout.str()
    assert "task id '001.-ledger-audit'" in err and "001. ledger audit" in err and "also comes from" in err, err
    assert "Traceback" not in err


def test_a_task_whose_files_only_its_image_has_is_skipped_on_the_local_executor(cohort: Cohort) -> None:
    """Found in a user's trial: a Harbor task whose Dockerfile COPYs its files into /app ran on
    the local executor in an empty /app (the subject was judged on a task it never saw). It is
    skipped there with the reason; with an environment/workspace/ it runs, COPY or not."""
    copies = cohort.task("copies")
    shutil.rmtree(copies / "environment" / "workspace")
    (copies / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\ncopy src/ /app/\n")
    seeded = cohort.task("seeded")
    (seeded / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nCOPY src/ /app/\n")
    plain = cohort.task("plain")
    shutil.rmtree(plain / "environment" / "workspace")
    (plain / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    result = cohort.run_subprocess("-rs", "-n", "2")
    result.assert_outcomes(passed=2, skipped=1)
    assert any("SKIPPED" in line and "copies: " in line and "COPYs or ADDs" in line for line in result.outlines), (
        result.stdout.str()
    )
    assert cohort.status() == {"plain[oracle-r0]": "agent_success", "seeded[oracle-r0]": "agent_success"}


ENV_TEST = (
    'echo "token is $MAKA_T_TOKEN"\n'
    'if [ "$MAKA_T_TOKEN" = "s3cret-value-4711" ] && [ "$MAKA_T_OTHER" = "fallback" ]; then\n'
    "  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n"
)


def test_env_templates_are_filled_from_the_host_as_harbor_fills_them(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``KEY = "${VAR}"`` takes VAR from the host (found on johnbuck/harbor-tasks: 55 task dirs), and
    ``${VAR:-default}`` its default; the host's value is scrubbed from every artifact and record. A
    template whose variable the host does not set skips the task, naming it (Harbor refuses it)."""
    env = '[environment.env]\nMAKA_T_TOKEN = "${MAKA_T_HOST_TOKEN}"\nMAKA_T_OTHER = "${MAKA_T_UNSET_1:-fallback}"\n'
    cohort.task("filled", test=ENV_TEST, extra_toml=env)
    cohort.task("unset", extra_toml='[environment.env]\nNEEDED = "${MAKA_T_UNSET_2}"\n')
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    monkeypatch.setenv("MAKA_T_HOST_TOKEN", "s3cret-value-4711")
    monkeypatch.delenv("MAKA_T_UNSET_1", raising=False)
    monkeypatch.delenv("MAKA_T_UNSET_2", raising=False)
    result = cohort.run_subprocess("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    assert cohort.status() == {"filled[oracle-r0]": "agent_success"}
    why = _skips(cohort)["unset[oracle-r0]"]
    assert "environment.env.NEEDED = '${MAKA_T_UNSET_2}': takes a variable the host environment does not set" in why
    written = [p for p in cohort.out.rglob("*") if p.is_file()]
    assert not [p for p in written if b"s3cret-value-4711" in p.read_bytes()], "the host's value leaked"
    shown = [p.relative_to(cohort.out) for p in written if b"token is [REDACTED]" in p.read_bytes()]
    assert shown, [str(p.relative_to(cohort.out)) for p in written]
