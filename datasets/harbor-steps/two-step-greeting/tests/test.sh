#!/bin/bash
# Fallback test.sh: every step here has its own.
echo 0 > /logs/verifier/reward.txt
