#!/bin/sh
# The service the agent left running must answer over HTTP on localhost.
mkdir -p /logs/verifier
python3 - <<'PY'
import time, urllib.request
reward = 0
for _ in range(30):
    try:
        body = urllib.request.urlopen("http://127.0.0.1:8765/", timeout=2).read().decode()
        print("got:", body.strip())
        reward = int(body.strip() == "hello from maka")
        break
    except OSError as exc:
        print("not reachable:", exc)
        time.sleep(0.2)
open("/logs/verifier/reward.txt", "w").write(f"{reward}\n")
PY
