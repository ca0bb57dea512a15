/// The executor a `ManualBackend`'s tasks under test run on, so that a test can wait until
/// they have all stopped: see `ManualBackend/taskExecutor` and `ManualBackend/settle()`.
///
/// Its jobs run one at a time, in order, on a thread of its own, as soon as they are enqueued:
/// tasks on it make progress by themselves. What it adds is knowledge of when it is **idle**
/// (no job queued, none running): at that moment every task that runs on it has either
/// finished or is suspended, waiting for something. `settle()` waits for that moment.
public final class ManualTaskExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked: `queue`, `isRunning`, `idleWaiters`, `loop` and `isStopped` are touched
    // only while holding `mutex`.
    private let mutex = FutexLock()
    private let workArrived = FutexCondition()
    private var queue: [UnownedJob] = []
    private var nextJob = 0
    private var isRunning = false
    private var idleWaiters: [UnsafeContinuation<Void, Never>] = []
    private var loop: OwnedLoop?
    private var isStopped = false

    init() {}

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        mutex.lock()
        if isStopped {
            mutex.unlock()
            // After shutdown the tasks still get to run, on the global executor.
            globalConcurrentExecutor.enqueue(job)
            return
        }
        queue.append(job)
        let needsThread = loop == nil
        if needsThread {
            loop = try? OwnedLoop({ [self] loop in run(loop) }, release: {})
        }
        workArrived.broadcast()
        let failedToStart = loop == nil
        mutex.unlock()
        if failedToStart { globalConcurrentExecutor.enqueue(job) }
    }

    /// Waits until no job is queued or running: every task on this executor has finished or
    /// is suspended. A task on this executor may call it too: it suspends while it waits, so
    /// the others run, and it resumes once they are all done or waiting.
    func settle() async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            mutex.lock()
            let idle = nextJob == queue.count && !isRunning
            if !idle { idleWaiters.append(continuation) }
            mutex.unlock()
            if idle { continuation.resume() }
        }
    }

    /// How many `settle()` calls are waiting for the executor to go idle (for tests).
    var settleWaiterCount: Int { mutex.withLock { idleWaiters.count } }

    /// Stops the thread once the queued jobs have run; later jobs go to the global executor.
    func stop() {
        mutex.lock()
        isStopped = true
        let loop = self.loop
        workArrived.broadcast()
        mutex.unlock()
        loop?.stop { self.mutex.withLock { self.workArrived.broadcast() } }
    }

    private func run(_ loop: OwnedLoop) {
        mutex.lock()
        while true {
            if nextJob < queue.count {
                let job = queue[nextJob]
                nextJob += 1
                if nextJob == queue.count {
                    queue.removeAll(keepingCapacity: true)
                    nextJob = 0
                }
                isRunning = true
                mutex.unlock()
                job.runSynchronously(on: asUnownedTaskExecutor())
                mutex.lock()
                isRunning = false
                continue
            }
            // Idle: every task on this executor has finished or is suspended.
            if !idleWaiters.isEmpty {
                let waiters = idleWaiters
                idleWaiters = []
                mutex.unlock()
                for waiter in waiters { waiter.resume() }
                mutex.lock()
                continue
            }
            if isStopped || loop.isStopping { break }
            workArrived.wait(mutex)
        }
        mutex.unlock()
    }
}
