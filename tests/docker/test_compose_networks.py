"""The networks a task's ``main`` service lists, as harbor-cookbook's sidecar-dns recipe uses them.

The recipe (harbor-cookbook 3af1b0e and 7566f6f) puts a DNS server on a network of its own
(``dnsnet``, a fixed subnet and address) and points main's resolver at it, by a bound
``resolv.conf`` or by the ``dns`` key. Here main joins exactly the networks it lists, each an
internal bridge of the attempt's project (no route out), with its aliases and fixed address;
two attempts wanting the same fixed subnet take turns. The DNS server is a small Python one
(the recipe's dnsmasq image is not buildable offline); the shapes of the files are the recipe's.
"""

from __future__ import annotations

import textwrap

import pytest

from pytest_maka.benchmarks.harbor import load_task

from ..conftest import Cohort
from .test_image_run import harbor_task

pytestmark = [
    pytest.mark.docker,
    pytest.mark.needs("compose"),
]

SUBNET = "10.213.53"
DNS_SERVER = f"""\
import socket, struct
ANSWERS = {{"example.com": "{SUBNET}.80"}}
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 53))
while True:
    data, peer = s.recvfrom(512)
    qid = struct.unpack(">H", data[:2])[0]
    i, labels = 12, []
    while data[i]:
        labels.append(data[i + 1 : i + 1 + data[i]].decode())
        i += 1 + data[i]
    question, qtype = data[12 : i + 5], struct.unpack(">H", data[i + 1 : i + 3])[0]
    address = ANSWERS.get(".".join(labels).lower())
    if address is None:
        s.sendto(struct.pack(">HHHHHH", qid, 0x8183, 1, 0, 0, 0) + question, peer)
    elif qtype != 1:
        s.sendto(struct.pack(">HHHHHH", qid, 0x8180, 1, 0, 0, 0) + question, peer)
    else:
        answer = b"\\xc0\\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + socket.inet_aton(address)
        s.sendto(struct.pack(">HHHHHH", qid, 0x8180, 1, 1, 0, 0) + question + answer, peer)
"""
HEALTH = """\
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
s.sendto(bytes.fromhex("abcd01000001000000000000076578616d706c6503636f6d0000010001"), ("127.0.0.1", 53))
assert s.recv(512)[:2] == bytes.fromhex("abcd")
"""
DNS_DOCKERFILE = 'FROM python:3.11-slim\nCOPY dns.py health.py /\nCMD ["python3", "-u", "/dns.py"]\n'
SIDECAR = f"""\
  dns-server:
    build:
      context: ./dns-server
    expose:
      - "53"
    networks:
      dnsnet:
        ipv4_address: {SUBNET}.53
    healthcheck:
      test: ["CMD", "python3", "/health.py"]
      interval: 1s
      timeout: 5s
      retries: 30

networks:
  dnsnet:
    driver: bridge
    ipam:
      config:
        - subnet: {SUBNET}.0/24
"""
SHAPES = {
    # 3af1b0e: main's resolver is a bound resolv.conf naming the server
    "resolv-bind": f"""\
services:
  main:
    volumes:
      - ./resolv.conf:/etc/resolv.conf:ro
    depends_on:
      dns-server:
        condition: service_healthy
    networks:
      dnsnet:
{SIDECAR}""",
    # 7566f6f: the `dns` key instead, and main's own fixed address and an alias
    "dns-directive": f"""\
services:
  main:
    dns: {SUBNET}.53
    depends_on:
      dns-server:
        condition: service_healthy
    networks:
      dnsnet:
        ipv4_address: {SUBNET}.10
        aliases: [sandbox-main]
{SIDECAR}""",
}
SOLVE = """\
for domain in example.com google.com wikipedia.org; do
  if getent hosts "$domain" > /dev/null 2>&1; then
    echo "$domain"
  fi
done > /app/resolved.txt
"""
#: The recipe's check, and: the project's network has no route out.
TEST = """\
if python3 -c "import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)" 2>/dev/null; then
  echo "the internet is reachable" >&2; echo 0 > /logs/verifier/reward.txt
elif [ "$(cat /app/resolved.txt 2>/dev/null)" = example.com ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "resolved: $(cat /app/resolved.txt 2>/dev/null)" >&2; echo 0 > /logs/verifier/reward.txt
fi
"""
DOCKERFILE = "FROM python:3.11-slim\nWORKDIR /app\n"


def _sidecar_dns(root, name: str, compose: str):  # type: ignore[no-untyped-def]
    task = harbor_task(root, name, dockerfile=DOCKERFILE, solve=SOLVE, test=TEST)
    env = task / "environment"
    (env / "docker-compose.yaml").write_text(compose)
    (env / "resolv.conf").write_text(f"nameserver {SUBNET}.53\n")
    (env / "dns-server").mkdir()
    (env / "dns-server" / "Dockerfile").write_text(DNS_DOCKERFILE)
    (env / "dns-server" / "dns.py").write_text(DNS_SERVER)
    (env / "dns-server" / "health.py").write_text(HEALTH)
    return task


def test_main_joins_the_networks_it_lists_internal_with_its_address_and_dns(cohort: Cohort, docker_api) -> None:
    for name, compose in SHAPES.items():
        _sidecar_dns(cohort.tasks, name, compose)
    cohort.write(
        subjects=[{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}],
        executor={"kind": "docker", "state_dir": str(cohort.root / "docker-state")},
        retries={"infra": 0},
    )
    try:
        result = cohort.run_subprocess("-n", "2", timeout=900)
        expected = {
            f"{name}[{s}-r0]": v for name in SHAPES for s, v in (("oracle", "agent_success"), ("nop", "agent_failure"))
        }
        assert cohort.status() == expected, result.stdout.str()[-4000:]
        # no network of the projects is left, and none was on the host's default bridge
        assert [n["Name"] for n in docker_api.networks() if n["Name"].endswith("_dnsnet")] == []
    finally:
        for img in docker_api.images():
            for t in img.get("RepoTags") or []:
                if t.startswith("pytest-maka-sidecar-dns-server:"):
                    docker_api.remove_image(t, force=True)


@pytest.mark.parametrize(
    ("networks", "top", "expected"),
    [
        ("networks: [outside]", "networks:\n  outside:\n    external: true\n", "outside is external"),
        ("networks: [lan]", "networks:\n  lan:\n    driver: macvlan\n", "lan: driver 'macvlan' is not supported"),
        ("networks:\n  lan:\n    priority: 5", "networks:\n  lan: {}\n", "lan.priority is not supported"),
    ],
)
def test_networks_main_cannot_be_given_as_compose_would_skip_the_task(tmp_path, networks, top, expected) -> None:  # type: ignore[no-untyped-def]
    task = harbor_task(tmp_path, "net", dockerfile=DOCKERFILE, solve="true\n", test="true\n")
    main = textwrap.indent(networks, "    ")
    (task / "environment" / "docker-compose.yaml").write_text(f"services:\n  main:\n{main}\n{top}")
    loaded = load_task(task)
    assert loaded.unsupported and f"services.main.networks: {expected}" in loaded.unsupported, loaded.unsupported
