# Shared by the consumer checks (sourced): a clone of this checkout reachable by URL (see
# url-clone.sh), the dependency on it that the README shows, the scratch folders the consumer
# packages build in, a reader of a consumer's Package.resolved and a builder of a consumer.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
# The clone's URL names a fresh folder each run, so SwiftPM's cache of repositories never
# serves an older clone; its cache entry for that URL goes with the folder.
cleanup() {
    local cache="${HOME:-/root}/.cache/org.swift.swiftpm/repositories"
    if [ -d "$cache" ]; then
        for entry in "$cache"/TimerKit-*; do
            [ -d "$entry" ] || continue
            if [ "$(git -C "$entry" config --get remote.origin.url 2>/dev/null)" = "$url" ]; then rm -rf "$entry"; fi
        done
    fi
    rm -rf "$work"
}
trap cleanup EXIT
url="$(bash "$root/scripts/url-clone.sh" "$work/remote")"
# What an app asks of the repository, as the README's dependency line does: its branch main.
requirement='branch: "main"'
# Packages outside the library build in two shared scratch folders, kept between runs: those that
# use SwiftNIO (the bench, IdleTimeoutServer, the NIO consumer) in .build-nio, so that it is built
# once for all of them, and the others in .build-plain. (A package that resolves without SwiftNIO
# removes its checkout from the folder it builds in, and the next one to use it built it again.)
scratch_nio="$root/.build-nio"
scratch_plain="$root/.build-plain"

# The identities Package.resolved pins, sorted, space-separated.
resolved_identities() {
    python3 -c 'import json, sys; print(" ".join(sorted(pin["identity"] for pin in json.load(open(sys.argv[1]))["pins"])))' \
        "$1/Package.resolved"
}

# Builds the consumer package in folder $1, in scratch folder $2, with warnings as errors and
# any further arguments (--build-tests), and prints its binary folder.
build_consumer() {
    (cd "$1" && swift build --scratch-path "$2" -Xswiftc -warnings-as-errors "${@:3}" >&2 && swift build --scratch-path "$2" --show-bin-path)
}
