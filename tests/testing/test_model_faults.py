"""The scripted model server as a failing provider, seen by each provider's own SDK and by a raw socket."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from pytest_maka.testing.model_faults import Fault
from pytest_maka.testing.model_server import Script, model_server, script_from_json, script_to_json

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

MESSAGES = [{"role": "user", "content": "hi"}]


def test_401_on_every_request_is_the_providers_authentication_error() -> None:
    with model_server(Script(fault=Fault("401"))) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="sk-test", max_retries=0)
        for _ in range(3):
            with pytest.raises(anthropic.AuthenticationError) as caught:
                client.messages.create(model="m", max_tokens=10, messages=MESSAGES)
            assert caught.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
        chat = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-test", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as failed:
            chat.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
        assert failed.value.code == "invalid_api_key"
        assert len(server.seen("anthropic")) == 3 and len(server.seen("openai-chat")) == 1


def test_429_on_every_second_request_lets_a_retrying_client_through() -> None:
    with model_server(Script(final_text="fine", fault=Fault("429", every=2))) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="sk-test", max_retries=0)
        first = client.messages.create(model="m", max_tokens=10, messages=MESSAGES)
        assert first.content[0].text == "fine"  # type: ignore[union-attr]
        with pytest.raises(anthropic.RateLimitError) as caught:
            client.messages.create(model="m", max_tokens=10, messages=MESSAGES)
        assert caught.value.response.headers["retry-after"] == "1"
        retrying = anthropic.Anthropic(base_url=server.url, api_key="sk-test", max_retries=2)
        assert retrying.messages.create(model="m", max_tokens=10, messages=MESSAGES).content[0].text == "fine"  # type: ignore[union-attr]


def test_529_and_500_carry_the_protocols_error_types() -> None:
    for kind, expected in (("529", "overloaded_error"), ("500", "api_error")):
        with model_server(Script(fault=Fault(kind))) as server:
            body = json.dumps({"model": "m", "messages": MESSAGES}).encode()
            request = urllib.request.Request(f"{server.url}/v1/messages", data=body, method="POST")
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(request, timeout=5)
            assert caught.value.code == int(kind)
            assert json.loads(caught.value.read())["error"]["type"] == expected


def test_side_requests_are_not_faulted() -> None:
    with model_server(Script(fault=Fault("401"))) as server:
        body = json.dumps({"model": "m", "messages": MESSAGES}).encode()
        request = urllib.request.Request(f"{server.url}/v1/messages/count_tokens", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=5) as reply:
            assert json.loads(reply.read())["input_tokens"] > 0


def test_hang_reads_the_request_and_never_answers_until_the_server_stops() -> None:
    with model_server(Script(fault=Fault("hang"))) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="sk-test", max_retries=0, timeout=1.5)
        started = time.monotonic()
        with pytest.raises(anthropic.APITimeoutError):
            client.messages.create(model="m", max_tokens=10, messages=MESSAGES)
        assert time.monotonic() - started >= 1.5
        assert len(server.seen("anthropic")) == 1  # it arrived: the provider just never answered


def test_no_answer_closes_the_connection_without_a_response() -> None:
    with model_server(Script(fault=Fault("no-answer"))) as server:
        body = json.dumps({"model": "m", "messages": MESSAGES}).encode()
        head = f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
            conn.sendall(head + body)
            assert conn.recv(100) == b""  # closed, nothing said
        client = anthropic.Anthropic(base_url=server.url, api_key="sk-test", max_retries=0)
        with pytest.raises(anthropic.APIConnectionError):
            client.messages.create(model="m", max_tokens=10, messages=MESSAGES)


def test_a_fault_survives_the_script_as_json() -> None:
    script = Script(fault=Fault("429", every=3))
    assert script_from_json(script_to_json(script)).fault == Fault("429", every=3)
    assert script_from_json(script_to_json(Script())).fault is None


def test_a_fault_of_no_known_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="fault kind must be one of"):
        Fault("418")
    with pytest.raises(ValueError, match="every must be 1 or more"):
        Fault("429", every=0)


def test_the_cli_takes_a_fault_and_refuses_a_bad_one() -> None:
    bad = [sys.executable, "-m", "pytest_maka.testing.model_server", "--fault", "429", "--fault-every", "0"]
    done = subprocess.run(bad, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "--fault-every: expected 1 or more (got 0)" in done.stderr
    argv = [sys.executable, "-m", "pytest_maka.testing.model_server", "--port", "0", "--fault", "401"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.rsplit(" ", 1)[-1].strip()
        client = anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError):
            client.messages.create(model="m", max_tokens=10, messages=MESSAGES)
    finally:
        proc.terminate()
        proc.wait(10)
