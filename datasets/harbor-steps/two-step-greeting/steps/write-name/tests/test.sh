#!/bin/bash
. /tests/common.sh
reward "$(cat /app/name.txt 2>/dev/null)" "Harbor"
