#!/bin/sh
# Verifier for csv-report (partial credit). Recomputes the three figures from the pristine
# copy of sales.csv with Python's csv module, then grades each required line on its own.
# Writes {"reward": correct/3, "lines_correct": n} to /logs/verifier/reward.json.
mkdir -p /logs/verifier
python3 - <<'PY'
import csv
import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

revenue_by_region: dict[str, Decimal] = defaultdict(Decimal)
units = 0
with open("/tests/sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        revenue_by_region[row["region"]] += int(row["units"]) * Decimal(row["unit_price"])
        units += int(row["units"])
total = sum(revenue_by_region.values(), Decimal(0))
top = max(revenue_by_region, key=revenue_by_region.__getitem__)
required = {
    "total_revenue": f"{total:.2f}",
    "top_region": top,
    "units_sold": str(units),
}

target = Path("/app/report.txt")
found: dict[str, str] = {}
if target.is_file():
    for line in target.read_text(errors="replace").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in required:
            found.setdefault(key.strip(), value.strip())
else:
    print(f"FAIL: {target} does not exist")

correct = 0
for key, want in required.items():
    got = found.get(key)
    ok = got == want
    correct += ok
    print(f"{'PASS' if ok else 'FAIL'}: {key}: expected {want!r}, found {got!r}")

reward = 1.0 if correct == len(required) else round(correct / len(required), 4)
result = {"reward": reward, "lines_correct": correct}
Path("/logs/verifier/reward.json").write_text(json.dumps(result) + "\n")
print(f"{correct}/{len(required)} lines correct; {json.dumps(result)}")
PY
status=$?
if [ "$status" -ne 0 ]; then
    echo "verifier script crashed (exit $status); no reward written"
    rm -f /logs/verifier/reward.json
fi
