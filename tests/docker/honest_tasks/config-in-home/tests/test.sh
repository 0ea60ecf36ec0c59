#!/bin/sh
mkdir -p /logs/verifier
# as a Terminal-Bench test does: the file the task asked for under ~, found through the verifier's own HOME
python3 -c "
from pathlib import Path
f = Path.home() / '.maka-app' / 'app.conf'
print(1 if f.is_file() and f.read_text() == 'greeting = hello\n' else 0)
" > /logs/verifier/reward.txt
