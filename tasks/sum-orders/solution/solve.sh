#!/bin/sh
# Reference solution for sum-orders.
set -eu
python3 - <<'PY'
import json
from decimal import Decimal

with open("/app/orders.json") as f:
    orders = json.load(f, parse_float=Decimal)
total = sum((Decimal(str(o["amount"])) for o in orders if o["status"] == "paid"), Decimal(0))
with open("/app/total.txt", "w") as f:
    f.write(f"{total:.2f}\n")
PY
