"""Rules for Debian's tinyproxy (``tinyproxy-bin``) and its log read back as egress events.

tinyproxy handles HTTP CONNECT (the tunnel is never opened: no TLS interception) and plain
HTTP; with ``FilterURLs On`` its filter sees ``host:port`` for CONNECT and the absolute URL
for plain HTTP, so one anchored regular expression per allowed (host, port) decides both.
``FilterDefaultDeny Yes`` refuses everything else, including IP literals nobody listed.
The relay passes tinyproxy only canonical request lines (``wire.request_target``), and each
expression ends the authority at ``/`` (where tinyproxy ends it): the text matched is the
host and port tinyproxy connects to.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from ..core.hostpattern import HostPattern, allowed
from .log import EgressEvent
from .wire import request_target

#: Port the proxy listens on inside its own network namespace or container.
PROXY_PORT = 3128
_LINE = re.compile(r"^(?P<level>[A-Z]+)\s+(?P<stamp>\w{3} \d\d \d\d:\d\d:\d\d\.\d{3}) \[\d+\]: (?P<msg>.*)$")
_REQUEST = re.compile(r"^Request \(file descriptor (?P<fd>\d+)\): (?P<line>.*)$")
_REFUSED = re.compile(r'^Proxying refused on filtered (?:url|domain) "(?P<url>.*)"$')


def _host_regex(p: HostPattern) -> str:
    if p.is_ip:
        return re.escape(f"[{p.host}]" if ":" in p.host else p.host)
    name = re.escape(p.host)
    return rf"([a-z0-9-]+\.)+{name}" if p.wildcard else name


def filter_lines(patterns: tuple[HostPattern, ...]) -> list[str]:
    """One extended regex per allowed (host, port), for CONNECT targets and for http:// URLs."""
    lines: list[str] = []
    for p in patterns:
        host = _host_regex(p)
        for port in p.ports:
            lines.append(rf"^{host}:{port}$")
            lines.append(rf"^http://{host}:{port}(/.*)?$")
            if port == 80:
                lines.append(rf"^http://{host}(/.*)?$")
    return lines or [r"^$"]  # an empty filter file would allow nothing anyway; keep it explicit


def render_config(
    *,
    listen: str,
    port: int,
    filter_path: str,
    log_path: str | None,
    pid_path: str | None = None,
    user: str | None = None,
) -> str:
    """A tinyproxy.conf that refuses what the filter does not name and logs every request.

    Without ``log_path`` tinyproxy logs to stdout (run it with ``-d``); with ``user`` it drops to
    that user (and the group of the same name's primary group) after binding.
    """
    lines = [
        f"Port {port}",
        f"Listen {listen}",
        "Timeout 600",
        "MaxClients 64",
        "LogLevel Connect",
        "FilterURLs On",
        "FilterType ere",
        "FilterCaseSensitive No",
        "FilterDefaultDeny Yes",
        f'Filter "{filter_path}"',
        "DisableViaHeader Yes",
    ]
    if log_path:
        lines.append(f'LogFile "{log_path}"')
    if pid_path:
        lines.append(f'PidFile "{pid_path}"')
    if user:
        lines += [f"User {user}", f"Group {user_group(user)}"]
    return "\n".join(lines) + "\n"


def user_group(user: str) -> str:
    """The name of ``user``'s primary group (``nogroup`` for Debian's nobody)."""
    import grp
    import pwd

    try:
        return grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name
    except KeyError:
        return user


def destination(request_line: str) -> tuple[str, str, str]:
    """(method, host:port, url) of a request line; destination ``?`` unless it is canonical.

    The same reading as the relay's (``wire.request_target``): a line it does not read never
    reached tinyproxy, so it names no destination.
    """
    parts = request_line.split()
    method = parts[0] if parts else "?"
    url = parts[1] if len(parts) > 1 else ""
    parsed = request_target(request_line)
    if parsed is None:
        return method, "?", url
    _, host, port = parsed
    return method, f"[{host}]:{port}" if ":" in host else f"{host}:{port}", url


def _iso(stamp: str) -> str:
    now = datetime.now(UTC)
    parsed = datetime.strptime(f"{now.year} {stamp}", "%Y %b %d %H:%M:%S.%f").replace(tzinfo=UTC)
    return parsed.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _split(dest: str) -> tuple[str, int] | None:
    host, _, port = dest.rpartition(":")
    return (host, int(port)) if host and port.isdigit() else None


def parse_log(text: str, phase: str, patterns: tuple[HostPattern, ...]) -> list[EgressEvent]:
    """Every request in a tinyproxy log; allowed only when the rules allow it and tinyproxy did not refuse it."""
    return [event for event, _ in parse_requests(text, phase, patterns)]


def parse_requests(text: str, phase: str, patterns: tuple[HostPattern, ...]) -> list[tuple[EgressEvent, str]]:
    """``parse_log``, each event with the request line it came from (to join it to the relay's record)."""
    pending: list[dict[str, object]] = []
    for raw in text.splitlines():
        m = _LINE.match(raw)
        if not m:
            continue
        msg = m["msg"]
        req = _REQUEST.match(msg)
        if req:
            method, dest, url = destination(req["line"])
            pending.append(
                {"time": _iso(m["stamp"]), "method": method, "destination": dest, "url": url, "line": req["line"]}
            )
            continue
        refused = _REFUSED.match(msg)
        if refused:
            for item in reversed(pending):
                if item["url"] == refused["url"] and "reason" not in item:
                    item["reason"] = "not in the allowlist"
                    break
    events: list[tuple[EgressEvent, str]] = []
    for item in pending:
        reason = item.get("reason")
        target = _split(str(item["destination"]))
        if reason is None and (target is None or not allowed(patterns, *target)):
            reason = "not in the allowlist" if target else "not a proxy request"
        event = (
            EgressEvent(
                time=str(item["time"]),
                phase=phase,
                method=str(item["method"]),
                destination=str(item["destination"]),
                allowed=reason is None,
                reason=None if reason is None else str(reason),
            ),
            str(item["line"]),
        )
        events.append(event)
    return events
