import Foundation
import Glibc
import Testing
import TimerKitConformance

/// In a child process (an exit test): runs `attempt` with exactly `room` descriptors free,
/// then checks that it added none of the kinds a backend opens. It reports on stderr
/// (`outcome: N`, and what changed), for `expectOutcome(_:)` in the parent: an exit test that
/// exits with an unexpected status gives the parent nothing to show. `attempt` returns 10 when
/// it succeeded where there was too little room: that counts as 0 if a descriptor the runtime
/// held before was closed meanwhile, which left more room than asked for.
public func reportWithRoomForDescriptors(_ room: Int, _ attempt: () -> Int32) {
    warmUpDispatch()
    let before = openLoopDescriptors()
    let everyBefore = openDescriptors()
    let restore = leaveRoomForDescriptors(room)
    var outcome = attempt()
    restore()
    // Read once the fillers are gone: reading /proc needs a descriptor of its own.
    let closedMeanwhile = Set(everyBefore.keys).subtracting(openDescriptors().keys)
    if outcome == 10 && !closedMeanwhile.isEmpty {
        // Seen under load, 1 run in 40: the runtime closed a descriptor of its own after the
        // table was filled, so the attempt had room for one more.
        FileHandle.standardError.write(Data("more room than asked: descriptors \(closedMeanwhile.sorted()) closed meanwhile\n".utf8))
        outcome = 0
    }
    // Only additions count: the test runtime and Dispatch may close descriptors of their own
    // meanwhile (an eventfd of theirs has been seen to go).
    let after = openLoopDescriptors()
    let added = after.filter { before[$0.key] != $0.value }
    var report = ""
    if outcome == 0 && !added.isEmpty {
        outcome = 30
        report = "descriptors left behind: \(describeChange(from: before, to: after))\n"
    }
    FileHandle.standardError.write(Data((report + "outcome: \(outcome)\n").utf8))
}

/// In the parent: expects the child to have reported `outcome: 0`, and shows its report if not.
public func expectOutcome(_ result: ExitTest.Result?, sourceLocation: SourceLocation = #_sourceLocation) {
    let report = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(report.contains("outcome: 0\n"), "\(report)", sourceLocation: sourceLocation)
}

/// In a child process: fills the descriptor table so that exactly `room` descriptors are
/// free, by lowering RLIMIT_NOFILE and opening fillers up to it. Returns a closure that
/// closes the fillers and restores the limit. Other threads of the child must not open
/// descriptors meanwhile (call `warmUpDispatch()` first).
public func leaveRoomForDescriptors(_ room: Int) -> () -> Void {
    var limit = rlimit()
    getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    let original = limit
    let highest = openDescriptors().keys.max() ?? 2
    limit.rlim_cur = rlim_t(highest + 64)
    setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    var fillers: [Int32] = []
    while true {
        let fd = open("/dev/null", O_RDONLY | O_CLOEXEC)
        if fd < 0 { break }
        fillers.append(fd)
    }
    for _ in 0..<min(room, fillers.count) { close(fillers.removeLast()) }
    return {
        for fd in fillers { close(fd) }
        var restored = original
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &restored)
    }
}
