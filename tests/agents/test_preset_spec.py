"""Preset entries in a spec: pinned versions, credentials checked at collection, matrix variants."""

from __future__ import annotations

import pytest

from tests.conftest import Cohort


def test_missing_credentials_fail_at_collection_naming_subject_and_variable(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    cohort.task("t")
    cohort.write(subjects=[{"name": "claude", "kind": "claude-code", "env": ["ANTHROPIC_API_KEY"]}])
    result = cohort.run()
    assert result.ret == 4
    errors = [line for line in result.errlines if "ANTHROPIC_API_KEY" in line]
    assert len(errors) == 1, result.errlines
    assert "subject claude" in errors[0] and "cohort.yaml" in errors[0] and "subjects[0].env[0]" in errors[0]
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert not (cohort.out / "results.jsonl").exists() or not cohort.results(), "no cell ran"


def test_a_preset_without_its_key_listed_is_refused(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "codex", "kind": "codex"}])
    result = cohort.run()
    assert result.ret == 4
    assert any("codex needs OPENAI_API_KEY" in line and "subjects[0].env" in line for line in result.errlines)


@pytest.mark.parametrize("version", ["latest", "^2.1.0", ""])
def test_unpinned_versions_are_refused(cohort: Cohort, monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k-test")
    cohort.task("t")
    cohort.write(subjects=[{"name": "c", "kind": "claude-code", "version": version, "env": ["ANTHROPIC_API_KEY"]}])
    result = cohort.run()
    assert result.ret == 4
    assert any("subjects[0].version" in line and "pinned" in line for line in result.errlines), result.errlines


def test_matrix_expands_into_named_subjects(cohort: Cohort, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k-test")
    cohort.task("t")
    entry = {
        "name": "claude",
        "kind": "claude-code",
        "env": ["ANTHROPIC_API_KEY"],
        "matrix": {"model": ["claude-sonnet-4-5", "claude-haiku-4-5"], "version": ["2.1.332", "2.1.197"]},
    }
    cohort.write(subjects=[entry])
    result = cohort.pytester.runpytest(*cohort.args("--collect-only", "-q"))
    ids = sorted(line.split("::")[-1] for line in result.outlines if "::" in line)
    assert ids == [
        "t[claude-claude-haiku-4-5-2.1.197-r0]",
        "t[claude-claude-haiku-4-5-2.1.332-r0]",
        "t[claude-claude-sonnet-4-5-2.1.197-r0]",
        "t[claude-claude-sonnet-4-5-2.1.332-r0]",
    ]


def test_a_matrix_cannot_vary_the_kind(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "x", "kind": "nop", "matrix": {"kind": ["nop", "oracle"]}}])
    result = cohort.run()
    assert result.ret == 4
    assert any("subjects[0].matrix.kind" in line for line in result.errlines), result.errlines


def test_presets_name_their_provider_hosts_for_the_egress_allowlist(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from pytest_maka.core.spec import SubjectSpec
    from pytest_maka.subjects.presets import preset_kinds

    monkeypatch.setenv("OPENAI_API_KEY", "k-test")
    kinds = preset_kinds()
    options = kinds["codex"].Options.model_validate({"env": ["OPENAI_API_KEY"]})
    codex = kinds["codex"](SubjectSpec("c", "codex", options, Path("cohort.yaml"), "0" * 64))
    assert codex.egress() == ["api.openai.com"]
    options = kinds["codex"].Options.model_validate(
        {"env": ["OPENAI_API_KEY"], "base_url": "https://gw.example:8443/x"}
    )
    gateway = kinds["codex"](SubjectSpec("c", "codex", options, Path("cohort.yaml"), "0" * 64))
    assert gateway.egress() == ["gw.example:8443"]
    assert "model_providers.maka" in gateway.command(type("T", (), {"workdir": "/app"})())  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["codex", "mini-swe-agent", "aider", "opencode", "qwen-code", "claude-code"])
@pytest.mark.parametrize("given", ["http://127.0.0.1:4000/v1", "http://127.0.0.1:4000/v1/", "http://127.0.0.1:4000"])
def test_a_base_url_ending_in_v1_never_makes_v1_v1_requests(
    monkeypatch: pytest.MonkeyPatch, kind: str, given: str
) -> None:
    from pathlib import Path

    from pytest_maka.core.spec import SubjectSpec
    from pytest_maka.subjects.presets import preset_kinds

    cls = preset_kinds()[kind]
    key = cls.preset.key_env
    monkeypatch.setenv(key, "k-test")
    options = cls.Options.model_validate({"env": [key], "base_url": given})
    subject = cls(SubjectSpec("s", kind, options, Path("cohort.yaml"), "0" * 64))
    task = type("T", (), {"workdir": "/app", "mcp_servers": ()})()
    said = subject.command(task) + " " + " ".join(f"{k}={v}" for k, v in subject.env().items())  # type: ignore[arg-type]
    assert "/v1/v1" not in said, said
    assert "127.0.0.1:4000" in said
    assert subject.egress() == ["127.0.0.1:4000"]


@pytest.mark.parametrize("bad", ["127.0.0.1:4000", "ftp://h/x", "https://h/x?key=1"])
def test_a_base_url_that_is_no_http_url_fails_at_load_naming_the_key(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k-test")
    cohort.task("t")
    cohort.write(subjects=[{"name": "c", "kind": "codex", "env": ["OPENAI_API_KEY"], "base_url": bad}])
    result = cohort.run()
    assert result.ret == 4
    assert any("subjects[0].base_url: expected" in line and bad in line for line in result.errlines), result.errlines
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_subjects_own_egress_list_survives_expansion(cohort: Cohort, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_maka.core.spec import load_spec
    from pytest_maka.executors.local import LocalExecutor
    from pytest_maka.subjects.presets import preset_kinds

    LocalOptions = LocalExecutor.Options
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k-test")
    cohort.task("t")
    entry = {"name": "c", "kind": "claude-code", "env": ["ANTHROPIC_API_KEY"], "egress": ["mcp.example.com"]}
    matrix = {**entry, "name": "m", "matrix": {"model": ["claude-sonnet-4-5", "claude-haiku-4-5"]}}
    path = cohort.write(subjects=[entry, matrix, {k: v for k, v in entry.items() if k != "egress"} | {"name": "d"}])
    kinds = {k: v.Options for k, v in preset_kinds().items()}
    loaded = load_spec(path, kinds, {"local": LocalOptions})
    by_name = {s.name: s for s in loaded.subjects}
    assert by_name["c"].egress == ("mcp.example.com",)
    assert all(by_name[n].egress == ("mcp.example.com",) for n in by_name if n.startswith("m-")), by_name
    assert by_name["d"].egress == ()
    assert by_name["c"].digest != by_name["d"].digest  # what it may reach is part of its identity
