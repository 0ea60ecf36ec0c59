#!/usr/bin/env bash
set -euo pipefail
# Runs in the workdir after this step's files were uploaded, before the agent starts.
test -f template.txt
echo "greet" > .step
rm -- "$0"
