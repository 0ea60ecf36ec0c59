#!/bin/sh
set -eu
mkdir -p /etc/maka-app
printf 'greeting = hello\n' > /etc/maka-app/app.conf
