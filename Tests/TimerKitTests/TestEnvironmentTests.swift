import Foundation
import Testing
import TimerKitTestSupport

private let runsUnderThreadSanitizer = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "__tsan_init") != nil

@Suite("The test process")
struct TestEnvironmentTests {
    /// Tasks the tests start on the global executor do not wait behind the suite's blocking
    /// tests: the global executor is not the one-thread-per-core cooperative pool here (except
    /// under ThreadSanitizer, whose watchdogs wait ten times as long).
    @Test func runsTheGlobalExecutorOnOrdinaryQueues() {
        #expect(testsUseOrdinaryGlobalQueues || runsUnderThreadSanitizer)
    }
}
