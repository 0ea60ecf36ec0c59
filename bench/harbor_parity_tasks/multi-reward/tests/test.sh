#!/bin/bash
a=0; b=0
[ -f /app/a.txt ] && a=1
[ -f /app/b.txt ] && b=1
echo "{\"a\": $a, \"b\": $b}" > /logs/verifier/reward.json
