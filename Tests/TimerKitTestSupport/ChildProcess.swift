import Foundation
import Glibc
import Testing
import TimerKit
import TimerKitConformance

/// In a child process (an exit test): runs `attempt` with exactly `room` descriptors free,
/// then checks that it added none of the kinds a backend opens. It reports on stderr
/// (`outcome: N`, and what changed), for `expectOutcome(_:)` in the parent: an exit test that
/// exits with an unexpected status gives the parent nothing to show. `attempt` returns 0 when
/// it failed as expected, 10 when it succeeded where there was too little room, and 20 when
/// it failed some other way.
///
/// The runtime may open or close a descriptor of its own while the table is full (seen under
/// load, about 1 run in 40 each way), which leaves the attempt more room or less than asked
/// for. An attempt whose outcome is not 0 while the table changed under it is therefore made
/// again, up to 3 times in all.
public func reportWithRoomForDescriptors(_ room: Int, _ attempt: () -> Int32) {
    warmUpDispatch()
    var report = ""
    var outcome: Int32 = 0
    for round in 1...3 {
        let before = openLoopDescriptors()
        let everyBefore = openDescriptors()
        let restore = leaveRoomForDescriptors(room)
        outcome = attempt()
        restore()
        // Read once the fillers are gone: reading /proc needs a descriptor of its own.
        let everyAfter = openDescriptors()
        let closedMeanwhile = Set(everyBefore.keys).subtracting(everyAfter.keys)
        let openedMeanwhile = Set(everyAfter.keys).subtracting(everyBefore.keys)
        // Only additions of the kinds a backend opens count as left behind: the test runtime
        // and Dispatch may close descriptors of their own meanwhile.
        let after = openLoopDescriptors()
        let added = after.filter { before[$0.key] != $0.value }
        if outcome == 0 && !added.isEmpty {
            outcome = 30
            report += "descriptors left behind: \(describeChange(from: before, to: after))\n"
        }
        guard outcome != 0, round < 3, !(closedMeanwhile.isEmpty && openedMeanwhile.isEmpty) else { break }
        report +=
            "round \(round): outcome \(outcome) while descriptors \(closedMeanwhile.sorted()) closed and "
            + "\(openedMeanwhile.sorted()) opened meanwhile; again\n"
    }
    FileHandle.standardError.write(Data((report + "outcome: \(outcome)\n").utf8))
}

/// In a child process: `reportWithRoomForDescriptors` for an attempt to make a backend that
/// must fail with EMFILE from `failingCall` (outcome 0); made anyway is 10, failed another way
/// 20, with the error on stderr.
public func reportMakingWithRoomForDescriptors(_ room: Int, failingCall: String, _ make: () throws(TimerError) -> Void) {
    reportWithRoomForDescriptors(room) {
        do throws(TimerError) {
            try make()
            return 10
        } catch .systemCall(let call, let code) where call == failingCall && code == EMFILE {
            return 0
        } catch {
            FileHandle.standardError.write(Data("failed otherwise: \(error)\n".utf8))
            return 20
        }
    }
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
