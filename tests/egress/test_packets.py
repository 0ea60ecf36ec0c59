"""The packets the local guard reads and the refusals it writes back (the kernel's side is in test_past_proxy)."""

from __future__ import annotations

import socket
import struct

from pytest_maka.egress import packets
from pytest_maka.egress.log import PAST_PROXY, PastProxyFlows


def _ip(proto: int, payload: bytes, src: str = "192.0.0.8", dst: str = "203.0.113.7", frag: int = 0x4000) -> bytes:
    header = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, frag, 64, proto, 0, socket.inet_aton(src), socket.inet_aton(dst)
    )
    return header[:10] + struct.pack("!H", packets.checksum(header)) + header[12:] + payload


def _syn(sport: int = 40000, dport: int = 80, seq: int = 1000) -> bytes:
    return _ip(6, struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x02, 64240, 0, 0))


def test_a_syn_is_answered_with_a_reset_acknowledging_it() -> None:
    p = packets.parse(_syn())
    assert p is not None and (p.method, p.destination, p.sport, p.length) == ("TCP", "203.0.113.7:80", 40000, 40)
    rst = packets.refusal(_syn(), p)
    assert rst is not None and len(rst) == 40
    assert packets.checksum(rst[:20]) == 0, "a valid IP header checksum"
    assert rst[12:16] == socket.inet_aton("203.0.113.7") and rst[16:20] == socket.inet_aton("192.0.0.8")
    sport, dport, seq, ack, _, flags = struct.unpack_from("!HHIIBB", rst, 20)
    assert (sport, dport, seq, ack, flags) == (80, 40000, 0, 1001, 0x14)  # RST+ACK of the SYN
    pseudo = rst[12:16] + rst[16:20] + struct.pack("!BBH", 0, 6, 20)
    assert packets.checksum(pseudo + rst[20:]) == 0, "a valid TCP checksum"
    assert packets.refusal(rst, packets.parse(rst)) is None, "a reset is never answered"  # type: ignore[arg-type]


def test_udp_gets_port_unreachable_quoting_its_header_and_icmp_errors_get_nothing() -> None:
    datagram = _ip(17, struct.pack("!HHHH", 5353, 53, 8 + 4, 0) + b"abcd")
    p = packets.parse(datagram)
    assert p is not None and (p.method, p.destination, p.length) == ("UDP", "203.0.113.7:53", 32)
    icmp = packets.refusal(datagram, p)
    assert icmp is not None and icmp[9] == 1 and icmp[20:22] == b"\x03\x03"
    assert icmp[28:] == datagram[:28], "the original IP header and 8 bytes"
    assert packets.checksum(icmp[20:]) == 0
    assert packets.refusal(icmp, packets.parse(icmp)) is None  # type: ignore[arg-type]


def test_echo_is_prohibited_other_protocols_unreachable_fragments_and_ipv6_ignored() -> None:
    echo = _ip(1, bytes.fromhex("0800f7fe00010000"))
    p = packets.parse(echo)
    assert p is not None and (p.method, p.destination) == ("ICMP", "203.0.113.7")
    assert packets.refusal(echo, p)[20:22] == b"\x03\x0d"  # type: ignore[index]
    sctp = _ip(132, b"\0" * 12)
    assert packets.parse(sctp).method == "SCTP"  # type: ignore[union-attr]
    assert packets.refusal(sctp, packets.parse(sctp))[20:22] == b"\x03\x02"  # type: ignore[arg-type,index]
    gre = _ip(47, b"\0" * 4)
    assert packets.parse(gre).method == "IP/47"  # type: ignore[union-attr]
    later = _ip(17, b"\0" * 16, frag=0x0010)  # a later fragment: no ports, no answer
    assert packets.parse(later).destination == "203.0.113.7"  # type: ignore[union-attr]
    assert packets.refusal(later, packets.parse(later)) is None  # type: ignore[arg-type]
    assert packets.parse(b"\x60" + b"\0" * 39) is None and packets.parse(b"\x45\0") is None


def test_flows_are_counted_once_and_capped() -> None:
    flows = PastProxyFlows(cap=2)
    flows.add(2.0, "UDP", 1, "203.0.113.7:53", 30)
    flows.add(1.0, "TCP", 2, "198.51.100.9:80", 60)
    flows.add(3.0, "UDP", 1, "203.0.113.7:53", 30)
    flows.add(4.0, "UDP", 9, "203.0.113.9:53", 30)
    events = flows.events("agent")
    assert [(e.method, e.destination, e.bytes, e.bytes_out, e.bytes_in) for e in events] == [
        ("TCP", "198.51.100.9:80", 60, 60, 0),
        ("UDP", "203.0.113.7:53", 60, 60, 0),
    ]
    assert all(e.reason == PAST_PROXY and not e.allowed and e.phase == "agent" for e in events)
    assert events[0].time.endswith("Z") and flows.unlogged == 1
