"""Egress allowlist entries: ``host[:port]``, ``*.domain[:port]`` or an IP literal, parsed and matched.

Pure: used by the spec (validation) and by the egress proxy (rules). An entry without a
port allows the web ports 80 and 443 only; a wildcard ``*.example.org`` matches every name
below ``example.org`` but not ``example.org`` itself; an IP address is reached only when
that literal is listed (a listed name never grants the address it resolves to).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

#: Ports an entry without a port allows.
DEFAULT_PORTS = (80, 443)
_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_NAME = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")


@dataclass(frozen=True)
class HostPattern:
    """One allowlist entry: a name (``*.`` wildcard allowed) or an IP literal, and its ports."""

    host: str
    ports: tuple[int, ...]
    wildcard: bool = False
    is_ip: bool = False

    @property
    def text(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        shown = ("*." if self.wildcard else "") + host
        return shown if self.ports == DEFAULT_PORTS else f"{shown}:{self.ports[0]}"

    def matches(self, host: str, port: int) -> bool:
        """True when a request for ``host:port`` is allowed by this entry."""
        if port not in self.ports:
            return False
        host = host.strip("[]").lower().rstrip(".")
        if self.is_ip:
            return _ip(host) == self.host
        if _ip(host) is not None:
            return False
        return host.endswith("." + self.host) if self.wildcard else host == self.host


def _ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def parse(entry: str) -> HostPattern:
    """Parse one entry; ValueError says what is wrong in one line."""
    if not isinstance(entry, str) or not entry.strip():
        raise ValueError(f"expected a host name, *.domain or IP address with optional :port (got {entry!r})")
    text = entry.strip().lower()
    if "/" in text or "@" in text or "://" in text:
        raise ValueError(f"expected host[:port] without scheme, path or user (got {entry!r})")
    host, port = text, None
    if text.startswith("["):  # [v6]:port
        close = text.find("]")
        if close < 0:
            raise ValueError(f"unclosed '[' in {entry!r}")
        host, rest = text[1:close], text[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"expected :port after ']' in {entry!r}")
            port = rest[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    ports = DEFAULT_PORTS if port is None else (_port(port, entry),)
    ip = _ip(host)
    if ip is not None:
        return HostPattern(host=ip, ports=ports, is_ip=True)
    wildcard = host.startswith("*.")
    name = host[2:] if wildcard else host
    if "*" in name or not _NAME.match(name):
        raise ValueError(f"not a host name, *.domain or IP address: {entry!r}")
    if wildcard and "." not in name:
        raise ValueError(f"a wildcard must name a domain with at least two labels (got {entry!r})")
    return HostPattern(host=name, ports=ports, wildcard=wildcard)


def _port(text: str, entry: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"expected a port number 1-65535 in {entry!r}")
    return int(text)


def parse_all(entries: list[str]) -> tuple[HostPattern, ...]:
    """Parse a list of entries (first bad one raises), keeping order and dropping repeats."""
    out: dict[HostPattern, None] = {}
    for entry in entries:
        out[parse(entry)] = None
    return tuple(out)


def allowed(patterns: tuple[HostPattern, ...], host: str, port: int) -> bool:
    """True when any pattern allows ``host:port``."""
    return any(p.matches(host, port) for p in patterns)


def check_egress_hosts(hosts: dict[str, str]) -> dict[str, str]:
    """Validate an executor's ``egress_hosts`` mapping (host name -> IP address, or Docker's host-gateway)."""
    for name, ip in hosts.items():
        if not _NAME.match(name.lower()):
            raise ValueError(f"egress_hosts: {name!r} is not a host name")
        if _ip(ip) is None and ip != "host-gateway":
            raise ValueError(f"egress_hosts: {name} must map to an IP address (got {ip!r})")
    return {name.lower(): ip for name, ip in hosts.items()}


def entry_for_url(url: str) -> str:
    """The allowlist entry of a base URL: ``host:port`` (a URL without a port allows 80 and 443)."""
    split = urlsplit(url if "://" in url else f"http://{url}")
    host = split.hostname or ""
    try:
        port = split.port
    except ValueError:
        port = None
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port else shown
