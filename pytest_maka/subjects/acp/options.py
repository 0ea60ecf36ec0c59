"""``kind: acp`` options: what the spec may say, validated without importing the ACP library."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..install.cache import NODE_VERSION, InstallSpec


class AcpOptions(BaseModel):
    """``command`` (the agent's ACP entry point), optional ``install`` (a preset kind, ``npm:PKG@VER``
    or ``pypi:PKG==VER``), ``env`` by name, ``set_env``, ``mode`` (a session mode to switch to), and
    ``permissions`` (``policy``: allow inside an isolating sandbox, deny otherwise)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str = Field(min_length=1)
    install: str | None = None
    env: list[str] = Field(default_factory=list)
    set_env: dict[str, str] = Field(default_factory=dict)
    mode: str | None = None
    permissions: Literal["policy", "allow", "deny"] = "policy"
    #: Where this agent reads skills (sandbox paths; ``~/`` is its $HOME): the task's skills_dir is copied there.
    skills_to: list[str] = Field(default_factory=list)
    cache_dir: str | None = Field(default=None, exclude=True)


def install_spec(value: str) -> InstallSpec:
    """``npm:@scope/pkg@1.2.3``, ``pypi:pkg==1.2.3`` or a preset kind -> what to install."""
    from ..presets import PRESETS

    presets = {p.kind: p for p in PRESETS}
    if value in presets:
        return presets[value].install_spec(None)
    registry, _, spec = value.partition(":")
    if registry == "npm" and "@" in spec.lstrip("@"):
        package, _, version = spec.rpartition("@")
        return InstallSpec(package.strip("@").replace("/", "-"), "npm", package, version, NODE_VERSION)
    if registry == "pypi" and "==" in spec:
        package, _, version = spec.partition("==")
        return InstallSpec(package, "pypi", package, version, "python:3.11-slim")
    raise ValueError(f"expected a preset kind, npm:PACKAGE@VERSION or pypi:PACKAGE==VERSION (got {value!r})")
