// A frame loop on a DisplayLink: a vsync source at 60 Hz on a thread of its own, at SCHED_FIFO
// where the process may ask for it (root, or CAP_SYS_NICE), else the best priority it could get.
// Prints a line a second (frames delivered and dropped in that second), then the totals and
// the priority. A dropped frame is a vsync the callback or the thread was too late for.
//
//     swift run FrameLoop --seconds 3
import Foundation
import Synchronization
import TimerKit
import TimerKitEpoll

var seconds = 3
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    guard argument == "--seconds", let value = arguments.popFirst().flatMap({ Int($0) }), (1...60).contains(value) else {
        FileHandle.standardError.write(Data("usage: FrameLoop [--seconds N] (N in 1...60; got '\(argument)')\n".utf8))
        exit(2)
    }
    seconds = value
}

/// Frames counted by the callback, on the vsync thread; read by the main thread once a second.
struct Frames {
    var delivered = 0
    var dropped = 0
    var first: MonotonicInstant?
    var last: MonotonicInstant?
}

let display = try DisplaySource(refreshRate: 60, priority: .realtime(80), registry: TimerRegistry())
let frames = Mutex(Frames())
let link = try display.addLink(name: "frame-loop") { frame in
    // A real loop would draw here, finishing before frame.targetTimestamp.
    frames.withLock { frames in
        frames.delivered += 1
        frames.dropped += frame.dropped
        if frames.first == nil { frames.first = frame.timestamp }
        frames.last = frame.timestamp
    }
}
print("display: 60 Hz, vsync thread at \(display.obtainedPriority)")

var previous = Frames()
for second in 1...seconds {
    Thread.sleep(forTimeInterval: 1)
    let now = frames.withLock { $0 }
    print("second \(second): \(now.delivered - previous.delivered) frames, \(now.dropped - previous.dropped) dropped")
    previous = now
}
link.invalidate()
display.shutdown()

let total = frames.withLock { $0 }
// Vsyncs from the first frame to the last: each was delivered or dropped.
let span = total.first.flatMap { first in total.last.map { first.duration(to: $0) } } ?? .zero
let vsyncs = Int((span / display.period).rounded()) + 1
print("frames: \(total.delivered) delivered, \(total.dropped) dropped, \(vsyncs) vsyncs from the first to the last")
print("priority: \(display.obtainedPriority)")
