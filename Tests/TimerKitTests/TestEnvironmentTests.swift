import Testing
import TimerKitTestSupport

@Suite("The test process")
struct TestEnvironmentTests {
    /// Tasks the tests start on the global executor do not wait behind the suite's blocking
    /// tests: the global executor is not the one-thread-per-core cooperative pool here.
    @Test func runsTheGlobalExecutorOnOrdinaryQueues() {
        #expect(testsUseOrdinaryGlobalQueues)
    }
}
