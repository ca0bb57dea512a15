#!/usr/bin/env bash
# The public API of every Swift library product against its baseline: the last commit that
# changed .api-baseline (see that file). `swift package diagnose-api-breaking-changes` builds the
# baseline and compares each module's API; both traits are on for both builds
# (TIMERKIT_ENABLE_ALL_TRAITS, read by Package.swift), so TimerKitNIO and TimerKitObservability
# are compared too. Run by `make test` (`make api-check`), in the library's own build folder.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
version="$(sed -n 's/^version: *//p' .api-baseline)"
if ! grep -q "^## \[$version\]" CHANGELOG.md; then
    echo "api-check: .api-baseline names version '$version', which CHANGELOG.md has no section for" >&2
    exit 1
fi
# The products compared are the package's library products, less libevent's C module map
# (CLibevent); a product added since the baseline has nothing to break and is listed apart until
# the next baseline names it.
products="TimerKit TimerKitEpoll TimerKitLibevent TimerKitURing TimerKitConformance TimerKitNIO TimerKitObservability"
added_since_baseline=""
declared="$(swift package dump-package | python3 -c '
import json, sys
package = json.load(sys.stdin)
print(" ".join(sorted(p["name"] for p in package["products"] if "library" in p["type"] and p["name"] != "CLibevent")))')"
if [ "$declared" != "$(tr ' ' '\n' <<< "$products $added_since_baseline" | sed '/^$/d' | sort | tr '\n' ' ' | sed 's/ $//')" ]; then
    echo "api-check: the library products are now '$declared': update the list in scripts/check-api.sh" >&2
    exit 1
fi
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "api-check: not a git checkout, so there is no baseline to compare with: skipped"
    exit 0
fi
if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
    echo "api-check: a shallow clone may not hold the baseline: fetch the whole history (git fetch --unshallow)" >&2
    exit 1
fi
if ! git diff --quiet HEAD -- .api-baseline; then
    echo "api-check: .api-baseline is changed in the working tree: this change is the new baseline (version $version); nothing to compare"
    exit 0
fi
baseline="$(git log -1 --format=%H -- .api-baseline)"
if [ -z "$baseline" ]; then
    echo "api-check: no commit holds .api-baseline" >&2
    exit 1
fi
if git diff --quiet "$baseline" -- Package.swift Sources CShims && [ -z "$(git ls-files --others --exclude-standard Sources CShims)" ]; then
    echo "api-check: the library's sources are as at the baseline ${baseline:0:10} (version $version): no change to compare"
    exit 0
fi
echo "api-check: comparing the public API with the baseline ${baseline:0:10} (version $version)"
# .api-allowlist lists breaks the digester reports in `package` declarations, which no user of
# the package can name (swiftlang/swift#81003: it compares them as public API). Only such lines
# belong there, each as the digester prints it (without the emoji); a public break never does.
TIMERKIT_ENABLE_ALL_TRAITS=1 swift package -Xswiftc -warnings-as-errors diagnose-api-breaking-changes "$baseline" --products $products \
    --breakage-allowlist-path "$root/.api-allowlist"
