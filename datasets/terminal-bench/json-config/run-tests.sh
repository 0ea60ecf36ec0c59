#!/bin/bash
cd /app
python -m pytest "$TEST_DIR/test_outputs.py" -rA -p no:cacheprovider
