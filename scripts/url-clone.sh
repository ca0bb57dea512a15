#!/usr/bin/env bash
# Makes the repository reachable by URL, as an app that adds it by URL sees it: a fresh git
# repository in DEST/TimerKit holding this checkout's files as they are on disk (committed or
# not, less what .gitignore leaves out), on the branch main, with no tag (the repository has
# none: an app asks for its branch main, as the README shows). Prints its URL
# (file://DEST/TimerKit). Used by the consumer checks.
#
#     url=$(bash scripts/url-clone.sh "$(mktemp -d)")
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$1/TimerKit"
mkdir -p "$dest"
cd "$root"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Tracked and untracked files, less the ignored ones and those deleted on disk.
    git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' file; do
        [ -e "$file" ] && printf '%s\0' "$file"
    done | tar --null --files-from=- -cf - | tar -xf - -C "$dest"
else
    # Not a git checkout (an unpacked archive): everything but the build folders.
    tar --exclude='./.build*' --exclude='./*/.build' --exclude='./Examples/*/.build' -cf - . | tar -xf - -C "$dest"
fi
cd "$dest"
git init -q -b main
git add -A
git -c user.name=timerkit-check -c user.email=check@timerkit.invalid commit -q -m "TimerKit as checked out"
echo "file://$dest"
