#!/bin/sh
cat > /app/backup.sh <<'SCRIPT'
#!/bin/sh
mkdir -p /app/backup
cp /app/data/*.txt /app/backup/
SCRIPT
sh /app/backup.sh
