import csv
import sys

with open(sys.argv[1], newline="") as f:
    print(f"{sum(float(row['amount']) for row in csv.DictReader(f)):.2f}")
