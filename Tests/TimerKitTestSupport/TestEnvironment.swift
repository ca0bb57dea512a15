import CTestEnvironment

/// Whether this test process runs Swift's global executor on Dispatch's ordinary global queues
/// rather than its cooperative pool (set before the runtime starts: see CTestEnvironment).
package var testsUseOrdinaryGlobalQueues: Bool { ctk_tests_use_ordinary_global_queues() != 0 }
