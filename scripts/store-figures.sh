#!/usr/bin/env bash
# The timer store's figures at several commits, in the same minutes: builds
# Benchmarks/StoreFigures/main.swift (release) against each commit given, then runs every
# configuration (manual and epoll; 1k, 100k and 1M live timers; handles, and keys where the commit
# has them) REPEATS times, interleaved and in a rotating order of commits, and prints the median of
# each figure as a Markdown table. Raw runs go to $OUT/runs.jsonl.
#
#     scripts/store-figures.sh [-r REPEATS] [-n "1000 100000 1000000"] [-b "manual epoll"] [-g] COMMIT...
#
# -g: the resets and cancels read their operands in the order they use them (the harness's
# `gathered`), so that their times hold the store's cache misses and not the harness's own.
#
# A quiet machine gives the steadiest figures; the medians of interleaved runs are what to compare.
set -euo pipefail
repeats=5
counts="1000 100000 1000000"
backends="manual epoll"
operands=""
while getopts "r:n:b:g" option; do
    case $option in
        r) repeats=$OPTARG ;;
        n) counts=$OPTARG ;;
        b) backends=$OPTARG ;;
        g) operands=gathered ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-r REPEATS] [-n COUNTS] [-b BACKENDS] [-g] COMMIT..." >&2; exit 2; }

root=$(git rev-parse --show-toplevel)
harness=$root/Benchmarks/StoreFigures/main.swift
harness_version=$(sha1sum "$harness" | cut -c1-8)
out=${OUT:-/tmp/store-figures}
mkdir -p "$out"
: > "$out/runs.jsonl"

commits=()
for commit in "$@"; do
    sha=$(git -C "$root" rev-parse --short=7 "$commit^{commit}")
    commits+=("$sha")
    # A build is kept for its commit and this harness: a changed harness builds anew.
    dir=$out/$sha-$harness_version
    if [ ! -x "$dir/bin/store-figures" ]; then
        rm -rf "$dir"
        mkdir -p "$dir/TimerKit" "$dir/harness/Sources"
        git -C "$root" archive "$sha" | tar -x -C "$dir/TimerKit"
        cp "$harness" "$dir/harness/Sources/main.swift"
        keys=false
        [ -f "$dir/TimerKit/Sources/TimerKit/API/TimerKey.swift" ] && keys=true
        settings=""
        $keys && settings='swiftSettings: [.define("KEYS")],'
        cat > "$dir/harness/Package.swift" <<MANIFEST
// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "StoreFigures",
    dependencies: [.package(path: "../TimerKit")],
    targets: [
        .executableTarget(
            name: "store-figures",
            dependencies: [.product(name: "TimerKit", package: "TimerKit"), .product(name: "TimerKitEpoll", package: "TimerKit")],
            path: "Sources", $settings
            linkerSettings: [.unsafeFlags(["-Xlinker", "-rpath", "-Xlinker", "\$ORIGIN"])])
    ]
)
MANIFEST
        echo "building $sha (keys: $keys)" >&2
        (cd "$dir/harness" && swift build -c release --product store-figures > "$dir/build.log" 2>&1) || {
            echo "build of $sha failed: $dir/build.log" >&2
            exit 1
        }
        mkdir -p "$dir/bin"
        cp "$dir/harness/.build/release/store-figures" "$dir/bin/"
        $keys && touch "$dir/bin/has-keys"
    fi
done

rotation=0
for ((repeat = 1; repeat <= repeats; repeat++)); do
    for backend in $backends; do
        for count in $counts; do
            order=("${commits[@]:rotation}" "${commits[@]:0:rotation}")
            for sha in "${order[@]}"; do
                for path in handles keys; do
                    [ $path = keys ] && [ ! -f "$out/$sha-$harness_version/bin/has-keys" ] && continue
                    extra=""
                    [ $path = keys ] && extra=keys
                    line=$("$out/$sha-$harness_version/bin/store-figures" "$backend" "$count" $extra $operands)
                    echo "{\"commit\": \"$sha\", \"backend\": \"$backend\", \"count\": $count, \"path\": \"$path\", \"repeat\": $repeat, \"figures\": $line}" >> "$out/runs.jsonl"
                done
            done
        done
    done
    rotation=$(((rotation + 1) % ${#commits[@]}))
    echo "repeat $repeat of $repeats done" >&2
done

python3 - "$out/runs.jsonl" "${commits[@]}" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
commits = sys.argv[2:]
rows = {}
for run in runs:
    rows.setdefault((run["backend"], run["count"], run["path"]), {}).setdefault(run["commit"], []).append(run["figures"])
def table(cell):
    """One row per configuration, one column per commit; `cell` renders a commit's runs of it."""
    print("| backend, live, path | " + " | ".join(commits) + " |")
    print("|---|" + "---|" * len(commits))
    for (backend, count, path), by_commit in sorted(rows.items()):
        cells = [cell(by_commit[commit], count) if commit in by_commit else "—" for commit in commits]
        print(f"| {backend}, {count:,}, {path} | " + " | ".join(cells) + " |")

def medians(figures, count):
    median = lambda key: statistics.median(f[key] for f in figures)
    cell = f"{median('schedule'):.0f} / {median('reset'):.0f} / {median('cancel'):.0f}"
    return cell + (f", {median('bytes'):.0f} B" if count >= 100000 else "")

def ranges(figures, count):
    spread = lambda key: f"{min(f[key] for f in figures):.0f}–{max(f[key] for f in figures):.0f}"
    return " / ".join(spread(key) for key in ("schedule", "reset", "cancel"))

table(medians)
print()
per_cell = max(len(figures) for by_commit in rows.values() for figures in by_commit.values())
print(f"ns per schedule / reset / cancel (and, from 100,000 timers on, resident bytes per live timer): the median of {per_cell} interleaved runs of each.")
print()
print("The range of each figure over those runs (min–max):")
print()
table(ranges)
refused = sum(run["figures"]["refused_resets"] for run in runs)
if refused:
    print()
    print(f"{refused} resets were refused in all (a timer that fired before its reset); they are timed with the rest.")
PY
