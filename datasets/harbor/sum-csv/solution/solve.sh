#!/bin/sh
python3 - <<'PY'
import csv

with open("/app/sales.csv", newline="") as f:
    total = sum(float(row["amount"]) for row in csv.DictReader(f))
with open("/app/total.txt", "w") as f:
    f.write(f"{total:.2f}\n")
PY
