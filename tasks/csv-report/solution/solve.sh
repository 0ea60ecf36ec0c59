#!/bin/sh
# Reference solution for csv-report.
set -eu
python3 - <<'PY'
import csv
from collections import defaultdict
from decimal import Decimal

by_region: dict[str, Decimal] = defaultdict(Decimal)
units = 0
with open("/app/sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        by_region[row["region"]] += int(row["units"]) * Decimal(row["unit_price"])
        units += int(row["units"])
total = sum(by_region.values(), Decimal(0))
top = max(by_region, key=by_region.__getitem__)
with open("/app/report.txt", "w") as f:
    f.write(f"total_revenue: {total:.2f}\ntop_region: {top}\nunits_sold: {units}\n")
PY
