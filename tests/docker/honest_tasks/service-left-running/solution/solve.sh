#!/bin/sh
set -eu
mkdir -p /srv/www
printf 'hello from maka\n' > /srv/www/index.html
nohup python3 -m http.server 8765 --bind 127.0.0.1 --directory /srv/www >/tmp/server.log 2>&1 &
# wait until it answers, as an agent would check its work
for i in $(seq 1 100); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8765/', timeout=1)" 2>/dev/null && exit 0
    sleep 0.1
done
echo "the server did not come up" >&2
exit 1
