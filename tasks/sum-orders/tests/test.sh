#!/bin/sh
# Verifier for sum-orders. The expected total is recomputed with exact decimal arithmetic
# from the pristine copy of orders.json shipped with the tests.
mkdir -p /logs/verifier
python3 - <<'PY'
import json
import re
from decimal import Decimal
from pathlib import Path

orders = json.loads(Path("/tests/orders.json").read_text(), parse_float=Decimal)
paid = [o for o in orders if o["status"] == "paid"]
expected = f"{sum((Decimal(str(o['amount'])) for o in paid), Decimal(0)):.2f}"
print(f"{len(paid)} of {len(orders)} orders are paid; expected total {expected}")

reward = 0
target = Path("/app/total.txt")
if not target.is_file():
    print(f"FAIL: {target} does not exist")
else:
    got = target.read_text(errors="replace").strip()
    print(f"found in {target}: {got!r}")
    if not re.fullmatch(r"-?\d+\.\d{2}", got):
        print("FAIL: not a number with exactly two decimals")
    elif got != expected:
        print(f"FAIL: expected {expected}")
    else:
        print("PASS: the total is correct")
        reward = 1

Path("/logs/verifier/reward.txt").write_text(f"{reward}\n")
print(f"reward={reward}")
PY
status=$?
if [ "$status" -ne 0 ]; then
    echo "verifier script crashed (exit $status); no reward written"
    rm -f /logs/verifier/reward.txt
fi
