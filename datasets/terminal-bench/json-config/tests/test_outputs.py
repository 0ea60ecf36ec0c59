import json
from pathlib import Path


def load():
    return json.loads(Path("/app/config.json").read_text())


def test_exact_keys():
    assert sorted(load()) == ["name", "port"]


def test_name():
    assert load()["name"] == "maka"


def test_port_is_integer():
    port = load()["port"]
    assert isinstance(port, int) and not isinstance(port, bool) and port == 8080
