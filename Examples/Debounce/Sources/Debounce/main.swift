// Reads what the user has typed so far, one line per keystroke (a search field's text), and
// runs the search once the typing has paused for the quiet period: a burst of keystrokes makes
// one search, for the last text. A progress line reports the keystrokes at most once per 100 ms
// (the first at once, the latest at the end of each window). Ends at the end of input, once the
// last search has run.
//
//     printf 's\nsw\nswi\n' | swift run Debounce --quiet-ms 300
import Foundation
import Synchronization
import TimerKit

let words = [
    "scheduler", "search", "select", "signal", "sleep", "spin", "stall", "swift", "switch", "swizzle", "task", "tick",
    "timeout", "timer", "timerfd", "token", "tolerance",
]

/// What was typed and what was searched: the end of input waits until they agree.
struct Progress {
    var keystrokes = 0
    var typed = ""
    var searched: String?
}

var quietPeriod = Duration.milliseconds(300)
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    guard argument == "--quiet-ms", let value = arguments.popFirst().flatMap({ Int($0) }), value > 0 else {
        FileHandle.standardError.write(Data("usage: Debounce [--quiet-ms N] (N > 0; got '\(argument)')\n".utf8))
        exit(2)
    }
    quietPeriod = .milliseconds(value)
}

let backend = DispatchBackend()
let state = Mutex(Progress())
let progress = try Throttler(every: .milliseconds(100), edge: .both, name: "progress", on: backend)

func search(_ text: String) {
    let matches = words.filter { $0.hasPrefix(text) }
    print("search '\(text)': \(matches.count) \(matches.count == 1 ? "match" : "matches") \(matches)")
    state.withLock { $0.searched = text }
}

while let line = readLine() {
    let count = state.withLock { progress in
        progress.keystrokes += 1
        progress.typed = line
        return progress.keystrokes
    }
    try progress.call { print("progress: \(count) \(count == 1 ? "keystroke" : "keystrokes")") }
    // Each call replaces the waiting search and moves its deadline: the quiet period starts again.
    try backend.debounce("search", for: quietPeriod) { search(line) }
}

// The end of input: wait for the search of the last text (bounded, so that a bug cannot hang).
let typedAnything = state.withLock { $0.keystrokes > 0 }
let deadline = ContinuousClock.now + quietPeriod + .seconds(10)
while typedAnything, state.withLock({ $0.searched != $0.typed }), ContinuousClock.now < deadline {
    try await Task.sleep(for: .milliseconds(10))
}
let (keystrokes, caughtUp) = state.withLock { ($0.keystrokes, !typedAnything || $0.searched == $0.typed) }
backend.shutdown()
print("done: \(keystrokes) keystrokes\(caughtUp ? "" : "; the last search never ran")")
exit(caughtUp ? 0 : 1)
