#!/usr/bin/env bash
# Builds each example named on the command line (warnings as errors) and runs it for a few
# seconds, checking what it prints. The examples depend on this checkout by path. IdleTimeoutServer
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
        searches="$(grep '^search ' "$log" | cut -d"'" -f2 | tr '\n' ' ')"
        [ "$searches" = "swi swiz timer " ] || fail "expected one search per burst (swi, swiz, timer), got: $searches" "$log"
        progress="$(grep -c '^progress: ' "$log")"
        [ "$progress" -ge 3 ] && [ "$progress" -le 10 ] ||
            fail "expected a throttled progress line, 3 to 10 of them for 11 keystrokes in 3 bursts, got $progress" "$log"
        grep -q '^done: 11 keystrokes$' "$log" || fail "expected 'done: 11 keystrokes'" "$log"
        ;;
    FrameLoop)
        timeout 60 "$bin/FrameLoop" --seconds 3 > "$log" || fail "FrameLoop failed" "$log"
        cat "$log"
        [ "$(grep -c '^second [123]: [0-9]* frames, [0-9]* dropped$' "$log")" -eq 3 ] || fail "expected a line for each of 3 seconds" "$log"
        grep -q '^priority: .' "$log" || fail "expected the priority the vsync thread got" "$log"
        python3 - "$log" <<'CHECK' || fail "frames delivered and dropped should account for every vsync" "$log"
import re, sys
text = open(sys.argv[1]).read()
delivered, dropped, vsyncs = map(int, re.search(r"^frames: (\d+) delivered, (\d+) dropped, (\d+) vsyncs", text, re.M).groups())
# 3 s at 60 Hz from the first frame to the last; each vsync delivered or dropped (the first
# frame may count a drop before it).
sys.exit(0 if delivered > 0 and vsyncs >= 120 and abs(delivered + dropped - vsyncs) <= 3 else 1)
CHECK
        ;;
    TestingWithVirtualTime)
        (cd "$dir" && timeout 120 swift test --skip-build --scratch-path "$scratch") > "$log" 2>&1 || fail "its tests failed" "$log"
        grep -E '✔|✘' "$log" || true
        grep -q 'Test run with 3 tests in 1 suite passed' "$log" || fail "expected its 3 tests to run and pass" "$log"
        ;;
    IdleTimeoutServer)
        timeout 60 "$bin/IdleTimeoutServer" --self-test > "$log" || fail "the self-test failed" "$log"
        cat "$log"
        grep -q '^self-test: passed' "$log" || fail "expected 'self-test: passed'" "$log"
        ;;
    *)
        echo "check-examples: no check for '$example'" >&2
        exit 1
        ;;
    esac
done
