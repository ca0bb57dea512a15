#!/usr/bin/env bash
# Builds each example named on the command line (warnings as errors) and runs it for a few
# seconds, checking what it prints; and checks the same of the output its README shows (the text
# block under "## What it prints"). The examples depend on this checkout by path. IdleTimeoutServer
# builds with the bench's smoke run in .build-nio, so SwiftNIO and TimerKit with the trait NIO
# are built once for both; the others share .build-plain (see consumer-common.sh). Run by
# `make test` (`make examples`).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

fail() {
    echo "check-examples: $1" >&2
    echo "--- its output:" >&2
    cat "$2" >&2
    exit 1
}

# Checks what example $1 printed, in file $2 ($3 says whose output it is, for the message).
check_output() {
    local example="$1" log="$2" whose="$3"
    case "$example" in
    Debounce)
        searches="$(grep '^search ' "$log" | cut -d"'" -f2 | tr '\n' ' ')"
        [ "$searches" = "swi swiz timer " ] || fail "$whose: expected one search per burst (swi, swiz, timer), got: $searches" "$log"
        progress="$(grep -c '^progress: ' "$log")"
        [ "$progress" -ge 3 ] && [ "$progress" -le 10 ] ||
            fail "$whose: expected a throttled progress line, 3 to 10 of them for 11 keystrokes in 3 bursts, got $progress" "$log"
        grep -q '^done: 11 keystrokes$' "$log" || fail "$whose: expected 'done: 11 keystrokes'" "$log"
        ;;
    FrameLoop)
        [ "$(grep -c '^second [123]: [0-9]* frames, [0-9]* dropped$' "$log")" -eq 3 ] || fail "$whose: expected a line for each of 3 seconds" "$log"
        grep -q '^priority: .' "$log" || fail "$whose: expected the priority the vsync thread got" "$log"
        python3 - "$log" <<'CHECK' || fail "$whose: frames delivered and dropped should account for every vsync" "$log"
import re, sys
text = open(sys.argv[1]).read()
delivered, dropped, vsyncs = map(int, re.search(r"^frames: (\d+) delivered, (\d+) dropped, (\d+) vsyncs", text, re.M).groups())
# 3 s at 60 Hz from the first frame to the last; each vsync delivered or dropped (the first
# frame may count a drop before it).
sys.exit(0 if delivered > 0 and vsyncs >= 120 and abs(delivered + dropped - vsyncs) <= 3 else 1)
CHECK
        ;;
    TestingWithVirtualTime)
        grep -q 'Test run with 3 tests in 1 suite passed' "$log" || fail "$whose: expected its 3 tests to run and pass" "$log"
        ;;
    IdleTimeoutServer)
        grep -q '^self-test: passed' "$log" || fail "$whose: expected 'self-test: passed'" "$log"
        ;;
    *)
        echo "check-examples: no check for '$example'" >&2
        exit 1
        ;;
    esac
}

# Writes the text block under "## What it prints" in README $1 to file $2.
readme_output() {
    python3 - "$1" "$2" <<'EXTRACT'
import re, sys
readme, out = sys.argv[1], sys.argv[2]
try:
    text = open(readme, encoding="utf-8").read()
except FileNotFoundError:
    sys.exit(f"check-examples: {readme} is missing")
section = text.split("\n## What it prints\n", 1)
block = re.search(r"```text\n(.*?)```", section[1], re.S) if len(section) == 2 else None
if not block:
    sys.exit(f"check-examples: {readme} has no text block under '## What it prints'")
open(out, "w", encoding="utf-8").write(block.group(1))
EXTRACT
}

for example in "$@"; do
    dir="$root/Examples/$example"
    [ -f "$dir/Package.swift" ] || { echo "check-examples: no example '$example'" >&2; exit 1; }
    echo "check-examples: $example"
    if [ "$example" = IdleTimeoutServer ]; then scratch="$root/.build-nio"; else scratch="$root/.build-plain"; fi
    (cd "$dir" && swift build --build-tests --scratch-path "$scratch" -Xswiftc -warnings-as-errors)
    bin="$(cd "$dir" && swift build --scratch-path "$scratch" --show-bin-path)"
    log="$out/$example.log"
    case "$example" in
    Debounce)
        # Three bursts of typing, 1.5 s apart: one search each, for the burst's last text.
        {
            printf 's\nsw\nswi\n'
            sleep 1.5
            printf 'swift\nswitc\nswiz\n'
            sleep 1.5
            printf 't\nti\ntim\ntime\ntimer\n'
        } | timeout 60 "$bin/Debounce" --quiet-ms 500 > "$log" || fail "Debounce failed" "$log"
        cat "$log"
        ;;
    FrameLoop)
        timeout 60 "$bin/FrameLoop" --seconds 3 > "$log" || fail "FrameLoop failed" "$log"
        cat "$log"
        ;;
    TestingWithVirtualTime)
        (cd "$dir" && timeout 120 swift test --skip-build --scratch-path "$scratch") > "$log" 2>&1 || fail "its tests failed" "$log"
        grep -E '✔|✘' "$log" || true
        ;;
    IdleTimeoutServer)
        timeout 60 "$bin/IdleTimeoutServer" --self-test > "$log" || fail "the self-test failed" "$log"
        cat "$log"
        ;;
    *)
        echo "check-examples: no check for '$example'" >&2
        exit 1
        ;;
    esac
    check_output "$example" "$log" "$example"
    readme_output "$dir/README.md" "$out/$example.readme.txt"
    check_output "$example" "$out/$example.readme.txt" "the output Examples/$example/README.md shows"
done
