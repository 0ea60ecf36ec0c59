"""The in-container preparation step of SWE-bench grading (bash; run as ``prepare.sh BASE WORKDIR``).

Exit codes: 0 ready; 10 the subject left no change; 11 the subject's change cannot be taken
as a patch on the base commit; 12 the test patch does not apply; anything else: harness trouble.
Nothing the subject planted runs here: git hooks and fsmonitor are off; the system and global
git configuration are not read; the repository's own attributes are overridden for every
path (``$GIT_DIR/info/attributes``, which outranks every ``.gitattributes``) so that no clean
or smudge filter, diff driver, textconv or merge driver named in the repository's config
runs; and diffs are taken without external diff programs or textconv.
"""

PREPARE_SH = r"""#!/bin/bash
set -uo pipefail
BASE="$1"
REPO="$2"
OUT=/logs/verifier
say() { echo "maka: $*"; }
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
g() { git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c advice.detachedHead=false "$@"; }
cd "$REPO" 2>/dev/null || { say "the repository $REPO is missing"; exit 11; }
GITDIR=$(g rev-parse --absolute-git-dir 2>/dev/null) || { say "$REPO is not a git repository"; exit 11; }
# no filter, diff or merge driver of the repository's (or the subject's .gitattributes) runs:
# the harness's attributes outrank every other; a link planted at info/ or its file is replaced
rm -rf -- "$GITDIR/info/attributes" 2>/dev/null; [ -L "$GITDIR/info" ] && rm -f -- "$GITDIR/info"
mkdir -p -- "$GITDIR/info" && printf '* !filter !diff !merge\n' > "$GITDIR/info/attributes" \
  || { say "cannot write $GITDIR/info/attributes"; exit 13; }
g rev-parse -q --verify "$BASE^{commit}" >/dev/null || { say "base commit $BASE is not in $REPO's history"; exit 11; }

# 1. The subject's change as a diff against the base commit (new files included, ignored files not).
g add -A . || { say "git add failed in $REPO"; exit 11; }
g diff --no-ext-diff --no-textconv --cached --binary "$BASE" > "$OUT/agent.patch" \
  || { say "git diff against $BASE failed"; exit 11; }
if [ ! -s "$OUT/agent.patch" ]; then say "the subject left no change"; exit 10; fi
say "the subject's change: $(g diff --no-ext-diff --no-textconv --cached --shortstat "$BASE")"

# 2. Back to the base commit, then the subject's change on top of it.
g reset -q --hard "$BASE" && g clean -fdq || { say "could not reset $REPO to $BASE"; exit 13; }
g apply --binary "$OUT/agent.patch" || { say "the subject's change does not apply to $BASE"; exit 11; }

# 3. The files the test patch touches go back to the base commit; then the test patch.
while IFS= read -r f; do
  [ -n "$f" ] || continue
  if g cat-file -e "$BASE:$f" 2>/dev/null; then
    g checkout -q "$BASE" -- "$f" || { say "could not reset $f"; exit 13; }
  else
    rm -rf -- "$f"
  fi
done < /tests/test_files.txt
g apply --verbose /tests/test.patch || { say "the test patch does not apply to $BASE"; exit 12; }
say "ready"
"""
