#!/bin/sh
# Runs the subject's script again on fresh data so a hand-made /app/backup cannot pass.
ok=1
rm -rf /app/backup /app/data && mkdir -p /app/data
printf 'x\n' > /app/data/x.txt; printf 'y\n' > /app/data/y.txt; printf 'z\n' > /app/data/z.md
sh /app/backup.sh || ok=0
[ "$(cat /app/backup/x.txt 2>/dev/null)" = x ] || ok=0
[ "$(cat /app/backup/y.txt 2>/dev/null)" = y ] || ok=0
[ ! -e /app/backup/z.md ] || ok=0
echo $ok > /logs/verifier/reward.txt
