"""Refuse and log what an allowlist phase sends past the egress proxy (UDP, raw IP, other TCP).

A helper container shares the attempt container's network namespace (``network_mode:
container:<id>``) and holds the one capability the subject lacks, ``NET_ADMIN``. It loads
an nftables table there whose output hook, for packets leaving from the attempt's internal
network (source in its subnet), lets through only TCP to the proxy's port and DNS to the
proxy, and sends everything else to NFLOG and then refuses it: a TCP reset (the client's
``connect`` fails with ``ECONNREFUSED``) or a local drop (``send`` fails with ``EPERM``).
ulogd2 in the helper writes the NFLOG packets as JSON lines, read and cleared per phase.
Packets need a route to reach the output hook: after each join of the internal network
the helper sets a default route via the proxy unless the engine already gave one. Nothing
is ever forwarded: the proxy container's ``ip_forward`` is off (checked when a phase starts)
and the host drops bridged packets addressed outside the internal subnet.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import ipaddress
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import docker.errors

from ...core.errors import InfraError
from ...egress.log import EgressEvent, PastProxyFlows
from ...egress.packets import PROTOCOLS
from . import inroot
from . import labels as L
from .engines import Engine, one_line
from .proxies import Channel

if TYPE_CHECKING:
    from .guardhost import GuardHost

NFLOG_GROUP = 7
#: The logger's files: ``$D`` is /run/maka in a helper of its own, a directory per namespace in the shared one.
LOG_FILE = "$D/packets.json"
#: Flows kept per collection (the rest is dropped: a flood must not fill the log).
MAX_FLOWS = 100_000
ULOGD_CONF = f"""[global]
logfile="$D/ulogd.out"
loglevel=3
plugin="/usr/lib/x86_64-linux-gnu/ulogd/ulogd_inppkt_NFLOG.so"
plugin="/usr/lib/x86_64-linux-gnu/ulogd/ulogd_raw2packet_BASE.so"
plugin="/usr/lib/x86_64-linux-gnu/ulogd/ulogd_filter_IP2STR.so"
plugin="/usr/lib/x86_64-linux-gnu/ulogd/ulogd_output_JSON.so"
stack=log1:NFLOG,base1:BASE,ip2str1:IP2STR,json1:JSON
[log1]
group={NFLOG_GROUP}
netlink_qthreshold=1
netlink_qtimeout=1
[json1]
sync=1
file="{LOG_FILE}"
"""
#: Load the rules, start ulogd2 and wait until it listens (its "initialization finished" line).
#: The plugins' directory is looked up once per helper (``find`` costs ~20 ms).
START_SCRIPT = (
    "set -e; d=$(cat /run/maka/plugins 2>/dev/null) || "
    "{ d=$(dirname $(find /usr/lib -name ulogd_output_JSON.so | head -n1)); echo $d > /run/maka/plugins; }; "
    'printf %s "$MAKA_ULOGD" | sed "s#/usr/lib/x86_64-linux-gnu/ulogd#$d#; s#[$]D#$D#g" > $D/ulogd.conf; '
    'printf %s "$MAKA_NFT" > $D/guard.nft; nft -f $D/guard.nft; : > $D/ulogd.out; '
    "ulogd -d -c $D/ulogd.conf -p $D/ulogd.pid; i=0; "
    "until grep -q 'entering main loop' $D/ulogd.out; do "
    "i=$((i+1)); [ $i -lt 500 ] || { cat $D/ulogd.out; exit 5; }; sleep 0.01; done"
)
#: After a join: a default route via the proxy, unless the engine gave the only default route,
#: via the internal network's gateway ($2) ("native"), which reaches the output hook as well.
ROUTE_SCRIPT = (
    'd=$(ip -4 route show default); if [ -n "$2" ] && [ "$(echo "$d" | wc -l)" = 1 ] '
    '&& echo "$d" | grep -q "^default via $2 "; then echo native; '
    'else ip route replace default via "$1" && echo set; fi'
)
#: What ulogd2 wrote since the last call. The kernel hands NFLOG packets over asynchronously:
#: wait (up to 2 s) until the file holds as many lines as the log rule's counter says it
#: logged, then print the bytes past the last call's end (the file is never truncated
#: under ulogd2's open descriptor, so nothing it writes meanwhile is lost).
COLLECT_SCRIPT = (
    f"L={LOG_FILE}; touch $L; "
    "want=$(nft list chain ip maka_guard out "
    "| sed -n 's/.*counter packets \\([0-9]*\\) bytes [0-9]* log group.*/\\1/p'); "
    'i=0; while [ "$(wc -l < $L)" -lt "${want:-0}" ] && [ $i -lt 200 ]; do i=$((i+1)); sleep 0.01; done; '
    "off=$(cat $D/offset 2>/dev/null || echo 0); size=$(stat -c %s $L); "
    "tail -c +$((off + 1)) $L | head -c $((size - off)); echo $size > $D/offset"
)


#: In the guard host only (``MAKA_PID``: the sandbox's process there): its resolv.conf and /etc/hosts
#: read or written in its root by ``inroot`` (an ``exec`` in the container costs the engine far more).
INROOT_SCRIPT = 'exec python3 -I -S -c "$MAKA_INROOT" "$MAKA_PID" "$1" "$2"'


#: The logger's loop: runs the script of <command> for each line "<command> [arg] [arg]" on its
#: standard input and answers one line, "<exit code> <output in base64>" (the harness attaches once).
#: The scripts, the rules and ulogd2's configuration come in its environment (no archive to put);
#: ``MAKA_DIR`` names its files' directory. At ``stop`` or the end of its input it stops ulogd2,
#: removes that directory and ends (in the shared helper, nothing of the namespace is left).
LOOP = (
    'D=${MAKA_DIR:-/run/maka}; export D; mkdir -p "$D"; '
    'while read -r cmd a b; do case "$cmd" in start) s=$MAKA_START;; route) s=$MAKA_ROUTE;; '
    "collect) s=$MAKA_COLLECT;; files) s=$MAKA_FILES;; stop) break;; *) echo 2; continue;; esac; "
    'out=$(sh -c "$s" "$cmd" "$a" "$b" 2>&1); code=$?; '
    'printf "%s %s\\n" "$code" "$(printf %s "$out" | base64 -w0)"; done; '
    '[ ! -s "$D/ulogd.pid" ] || kill "$(cat "$D/ulogd.pid")" 2>/dev/null; '
    '[ "$D" = /run/maka ] || rm -rf "$D"; echo "0 "'
)


def exec_as_root(engine: Engine, container: str, argv: list[str]) -> tuple[int, str]:
    """Run ``argv`` as root in one of the harness's own containers: (exit code, output)."""
    with engine.guard(f"running {argv[0]} in a helper container", refusals=False):
        api = engine.api
        eid = api.exec_create(container, argv, stdout=True, stderr=True, user="0")["Id"]
        out = api.exec_start(eid).decode(errors="replace")
        return int(api.exec_inspect(eid)["ExitCode"] or 0), out


def rules(subnet: str, proxy_ip: str, proxy_port: int) -> str:
    """The nftables table: from the internal subnet, only the proxy's port and DNS; log and refuse the rest."""
    src = f"ip saddr {subnet}"
    return (
        "table ip maka_guard {\n"
        "  chain out {\n"
        "    type filter hook output priority 0; policy accept;\n"
        '    oifname "lo" accept\n'
        f"    {src} ip daddr {proxy_ip} tcp dport {{ {proxy_port}, 53 }} accept\n"
        f"    {src} ip daddr {proxy_ip} udp dport 53 accept\n"
        f"    {src} counter log group {NFLOG_GROUP}\n"
        f"    {src} meta l4proto tcp reject with tcp reset\n"
        f"    {src} drop\n"
        "  }\n"
        "}\n"
    )


def parse_packets(text: str, phase: str) -> list[EgressEvent]:
    """ulogd2's JSON lines -> one refused event per flow (protocol, source port, destination)."""
    flows = PastProxyFlows(cap=MAX_FLOWS)
    for line in text.splitlines():
        try:
            pkt = json.loads(line)
        except ValueError:
            continue
        if not isinstance(pkt, dict) or "dest_ip" not in pkt:
            continue
        proto = PROTOCOLS.get(pkt.get("ip.protocol"), f"IP/{pkt.get('ip.protocol')}")
        port = pkt.get("dest_port")
        host = str(pkt["dest_ip"])
        when = float(pkt.get("oob.time.sec", 0)) + float(pkt.get("oob.time.usec", 0)) / 1e6
        nbytes = int(pkt.get("ip.totlen") or pkt.get("raw.pktlen") or 0)
        flows.add(when, proto, pkt.get("src_port"), f"{host}:{port}" if port is not None else host, nbytes)
    return flows.events(phase)


def _env(subnet: str, proxy_ip: str, proxy_port: int) -> dict[str, str]:
    """The logger loop's environment: its rules, ulogd2's configuration and its scripts."""
    return {"MAKA_NFT": rules(subnet, proxy_ip, proxy_port), "MAKA_ULOGD": ULOGD_CONF,
            "MAKA_START": START_SCRIPT, "MAKA_ROUTE": ROUTE_SCRIPT, "MAKA_COLLECT": COLLECT_SCRIPT,
            "MAKA_FILES": INROOT_SCRIPT, "MAKA_INROOT": inroot_source()}  # fmt: skip


@functools.cache
def inroot_source() -> str:
    return Path(inroot.__file__).read_text()


class NetGuard:
    """The helper container in one attempt container's network namespace."""

    def __init__(self, engine: Engine, image: str, labels: Mapping[str, str], generation: int = 0) -> None:
        self.engine = engine
        #: The attempt container's restart count when this logger joined its namespace.
        self.generation = generation
        self.image = image
        self.labels = dict(labels)
        self.id: str | None = None
        self.container: str | None = None
        #: The engine gives a default route on the internal network itself: no route to set per join.
        self.native_route = False
        self.channel: Channel | None = None

    def start(self, container: str, subnet: str, proxy_ip: str, proxy_port: int, host: GuardHost | None = None) -> None:
        """Start the logger in ``container``'s namespace (in ``host``, else a helper container of its
        own), load the rules, start ulogd2 (raises on failure)."""
        ipaddress.ip_network(subnet)  # a subnet the engine reported, checked before it reaches nft
        if host is not None:
            self.channel = host.open(container, LOOP, _env(subnet, proxy_ip, proxy_port))
            self.container = container
        else:
            self._create(container, subnet, proxy_ip, proxy_port)
        code, out = self._call("start")
        if code != 0:
            raise RuntimeError(f"the packet logger did not start: {out.strip()[:300]}")

    def _create(self, container: str, subnet: str, proxy_ip: str, proxy_port: int) -> None:
        with self.engine.guard("creating the packet logger", refusals=False):
            api = self.engine.api
            host_config = api.create_host_config(
                init=True,
                network_mode=f"container:{container}",
                cap_drop=["ALL"],
                cap_add=["NET_ADMIN"],
                security_opt=["no-new-privileges:true"],
                pids_limit=64,
                tmpfs={"/run/maka": "size=16m"},
            )
            self.id = api.create_container(
                self.image,
                entrypoint=["sh", "-c", LOOP],
                environment=_env(subnet, proxy_ip, proxy_port),
                stdin_open=True,
                labels={**self.labels, L.ROLE: "egress-guard"},
                host_config=host_config,
            )["Id"]
            self.container = container
        self.channel = Channel(self.engine, self.id, "packet logger")  # before the start: nothing is missed
        with self.engine.guard("starting the packet logger", refusals=False):
            api.start(self.id)

    def route(self, proxy_ip: str, gateway: str | None) -> None:
        """After the container joined the internal network: make sure its default route leads there."""
        if self.native_route:
            return
        code, out = self._call("route", proxy_ip, gateway or "")
        if code != 0:
            raise RuntimeError(f"setting the sandbox's route to the egress proxy failed: {out.strip()[:200]}")
        self.native_route = out.strip() == "native"

    def write_files(self, resolv: str, hosts: str | None) -> bool:
        """The sandbox's resolv.conf and (``hosts``: the sidecars' lines, None to leave it) /etc/hosts,
        written from the guard host; False where this logger cannot (its own helper, refused)."""
        spec = "keep" if hosts is None else "strip:" + base64.b64encode(hosts.encode()).decode()
        return self._in_root("resolv:" + base64.b64encode(resolv.encode()).decode(), spec) is not None

    def read_resolver(self) -> str | None:
        """The sandbox's resolv.conf, read from the guard host (None where this logger cannot)."""
        out = self._in_root("read", "")
        return None if out is None else base64.b64decode(out).decode(errors="replace")

    def _in_root(self, *args: str) -> str | None:
        """``inroot`` on the sandbox's files: its output, None where it cannot run or refused."""
        if self.id is not None or self.channel is None:  # a helper of its own sees no other process
            return None
        code, out = self._call("files", *args)
        return out.strip() if code == 0 else None

    def collect(self, phase: str) -> list[EgressEvent]:
        """The refused packets logged since the last call, as events of ``phase``."""
        code, out = self._call("collect")
        return parse_packets(out, phase) if code == 0 else []

    def _call(self, *words: str) -> tuple[int, str]:
        """One command of the helper's loop: (exit code, output); a helper gone raises RuntimeError."""
        if self.channel is None:
            raise RuntimeError("the packet logger is not running")
        try:
            answer = self.channel.exchange(" ".join(words).encode(), f"the packet logger's {words[0]}")
            code, _, out = answer.partition(b" ")
            return int(code), base64.b64decode(out).decode(errors="replace")
        except (InfraError, ValueError) as exc:
            raise RuntimeError(str(exc)) from None

    def close(self) -> None:
        if self.channel is not None:
            if self.id is None:  # in the guard host: stop ulogd2 and remove its files now
                with contextlib.suppress(RuntimeError):
                    self._call("stop")
            self.channel.close()
            self.channel = None
        if self.id is not None:
            try:
                with self.engine.guard("removing the packet logger", refusals=False):
                    self.engine.api.remove_container(self.id, force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:  # left behind: `maka docker-cleanup` removes it
                raise RuntimeError(one_line(exc)) from None
            self.id = None
