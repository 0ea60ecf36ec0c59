#!/bin/bash
# Partial credit per line in reward.json; `reward` is 1 only when every line is right.
names=(Ada Grace Ken)
right=0
for i in 0 1 2; do
  line=$(sed -n "$((i + 1))p" /app/greetings.txt 2>/dev/null)
  [ "$line" = "Hello, ${names[$i]}!" ] && right=$((right + 1))
done
lines=$(wc -l < /app/greetings.txt 2>/dev/null || echo 0)
reward=0; [ "$right" = 3 ] && [ "$lines" = 3 ] && reward=1
printf '{"reward": %s, "lines_right": %s}\n' "$reward" "$(awk "BEGIN {print $right / 3}")" > /logs/verifier/reward.json
