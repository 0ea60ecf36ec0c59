#!/usr/bin/env bash
# Docker Compose v2 (the `docker compose` CLI plugin) for multi-container task environments.
# No PyPI or npm package ships it and Debian bookworm has only compose v1, so the static plugin
# comes from Debian trixie's docker-compose package (apt's own client, with a private source
# list and state: the system's apt configuration is not touched). Cached between CI runs.
set -euo pipefail
VERSION=2.26.1-4
SHA256=47681197cb2b1ab88206b42a1a92fc75f50d9530a6322d03494a473eed0408ea
PLUGIN=/usr/libexec/docker/cli-plugins/docker-compose
CACHE=/var/cache/pytest-maka/compose
DEB="$CACHE/docker-compose_${VERSION}_amd64.deb"

if docker compose version 2>/dev/null | grep -q 'version v\?2'; then
  echo "docker compose: $(docker compose version)"; exit 0
fi
mkdir -p "$CACHE"
if ! echo "$SHA256  $DEB" | sha256sum -c --status 2>/dev/null; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
    > "$work/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
  apt-get -qq "${apt_opts[@]}" update
  (cd "$work" && apt-get -qq "${apt_opts[@]}" download "docker-compose=$VERSION")
  mv "$work"/docker-compose_*.deb "$DEB"
  echo "$SHA256  $DEB" | sha256sum -c --status
fi
x=$(mktemp -d)
dpkg-deb -x "$DEB" "$x"
install -D -m 755 "$x/usr/libexec/docker/cli-plugins/docker-compose" "$PLUGIN"
rm -rf "$x"
echo "docker compose: $(docker compose version)"
