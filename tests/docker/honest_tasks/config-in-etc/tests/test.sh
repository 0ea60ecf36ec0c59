#!/bin/sh
mkdir -p /logs/verifier
if grep -qx 'greeting = hello' /etc/maka-app/app.conf 2>/dev/null; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
