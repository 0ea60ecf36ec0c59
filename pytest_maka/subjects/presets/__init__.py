"""Presets for agent CLIs: one module each, declared as data plus a small output parser."""

from __future__ import annotations

from . import aider, claude_code, codex, gemini_cli, mini_swe_agent, opencode, pi, qwen_code
from .base import Preset, PresetOptions, PresetSubject

PRESETS: tuple[Preset, ...] = tuple(
    m.PRESET for m in (claude_code, codex, gemini_cli, opencode, aider, mini_swe_agent, qwen_code, pi)
)


def subject_class(preset: Preset) -> type[PresetSubject]:
    """The Subject class for one preset kind (registered under ``preset.kind``)."""
    name = "".join(part.capitalize() for part in preset.kind.split("-")) + "Subject"
    return type(
        name, (PresetSubject,), {"kind": preset.kind, "preset": preset, "__doc__": f"The {preset.kind} preset."}
    )


def preset_kinds() -> dict[str, type[PresetSubject]]:
    return {p.kind: subject_class(p) for p in PRESETS}


__all__ = ["PRESETS", "Preset", "PresetOptions", "PresetSubject", "preset_kinds"]
