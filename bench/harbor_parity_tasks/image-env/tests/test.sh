#!/bin/bash
if [ -f /app/done.txt ] && [ "$(check-tool)" = checked ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
