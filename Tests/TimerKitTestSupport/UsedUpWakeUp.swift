import Testing
import TimerKit
import TimerKitConformance
import TimerKitEpoll

/// One-shots, each the only timer, one after another: every expiry is one wait and one
/// `fireDueTimers()` call. The defect this pins: the loop kept the request it had acted on,
/// found it past as it went back to sleep, and called `fireDueTimers()` a second time, with
/// no wait between, for nothing.
package func fireCallsPerExpiry(_ backend: some TimerBackend, counts: LoopCounts) throws -> (expiries: Int, fireCalls: Int) {
    let fired = Counter()
    let (callsBefore, rounds) = (counts.fireCalls, 5)
    for round in 1...rounds {
        try backend.schedule(.after(.milliseconds(5))) { _ in fired.increment() }
        #expect(waitFor { fired.current == round })
        // The loop is back asleep (or about to be): a second call would come now.
        blockRealTime(.milliseconds(20))
    }
    return (rounds, counts.fireCalls - callsBefore)
}
