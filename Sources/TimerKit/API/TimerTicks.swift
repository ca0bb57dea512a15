extension TimerBackend {
    /// A timer as an `AsyncSequence` of ticks, for `for await` loops.
    ///
    /// ```swift
    /// for await tick in try backend.ticks(.every(.seconds(1)), name: "refresh") {
    ///     if tick.missed > 0 { log("fell \(tick.missed) ticks behind") }
    ///     await refresh()
    /// }
    /// ```
    ///
    /// A slow consumer is a late handler: the timer waits, suspended, while the loop body
    /// runs, and `missedTicks` decides what the next iteration gets. `.skip` (the default)
    /// delivers the latest due tick with `Tick/missed` counting the ones passed over — never a
    /// queue of stale ticks; `.burst` delivers every one, back to back; `.delay` restarts the
    /// grid from the late tick. If the timer is resumed from outside while the body runs (by
    /// name, or `TimerRegistry/resumeAll()`), the tick that comes meanwhile is kept for the next
    /// iteration, and one that comes after it replaces it and counts it in `missed`: a tick's
    /// `index` never jumps by more than its `missed` count allows.
    ///
    /// The sequence ends when its timer does: a counted schedule's last tick, a cancel (by
    /// name through the registry, too), or its backend shutting down. Ending the iteration
    /// — `break`, the task cancelled, the sequence dropped — cancels the timer, which leaves
    /// the registry. A sequence is iterated once: a second iterator ends at once.
    ///
    /// - Throws: `TimerError` for bad input or a backend that has shut down, as `schedule` does.
    public func ticks(
        _ schedule: TimerSchedule, name: String? = nil, tolerance: Duration = .zero, missedTicks: MissedTickPolicy = .skip
    ) throws(TimerError) -> TimerTicks {
        let stream = TickStream()
        let timer = try scheduler.schedule(
            schedule, name: name, tolerance: tolerance, policy: missedTicks, target: nil, startSuspended: true
        ) { [weak stream] tick in
            stream?.deliver(tick)
        }
        stream.start(timer)
        return TimerTicks(stream: stream)
    }
}

/// The ticks of one timer as an `AsyncSequence`: see `TimerBackend/ticks(_:name:tolerance:missedTicks:)`.
public struct TimerTicks: AsyncSequence, Sendable {
    public typealias Element = Tick
    public typealias Failure = Never

    fileprivate let stream: TickStream

    /// The timer behind the sequence: its registry entry, to cancel or inspect it.
    public var timer: TimerHandle { stream.timer }

    public func makeAsyncIterator() -> Iterator { Iterator(iteration: stream.claim().map(Iteration.init)) }

    /// Delivers the ticks; releasing it (the loop ended, by `break` or otherwise) cancels the
    /// timer, even while the sequence itself is still around.
    ///
    /// It is not `Sendable`: one task iterates. Calling `next()` from two tasks at once (copies
    /// made through unsafe means) stops the program with a message, rather than leaving one
    /// of them waiting forever.
    public struct Iterator: AsyncIteratorProtocol {
        fileprivate let iteration: Iteration?

        public mutating func next() async -> Tick? {
            guard let iteration else { return nil }
            return await iteration.stream.next()
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async -> Tick? {
            guard let iteration else { return nil }
            return await iteration.stream.next()
        }
    }

    /// One iteration of the sequence: when its last copy goes, the loop is over.
    fileprivate final class Iteration: Sendable {
        let stream: TickStream
        init(_ stream: TickStream) { self.stream = stream }
        deinit { stream.timer.cancel() }
    }
}

@available(*, unavailable, message: "one task iterates a TimerTicks; hand the sequence over, not its iterator")
extension TimerTicks.Iterator: Sendable {}

/// The timer of a `TimerTicks` and the one consumer waiting for its next tick.
///
/// Between ticks the timer is suspended; `next()` resumes it and waits, and the handler
/// suspends it again as it hands the tick over. So the core's missed-tick policy sees the
/// consumer's slowness as the lateness of a handler, and no tick is ever queued.
///
/// A tick that comes while no consumer waits (the timer was resumed from outside, by
/// `resumeAll()` or by name, while the loop body ran) is kept for the next `next()`. If a
/// second one comes before that, the newer is kept and counts the older in its `missed`: the
/// indices a consumer sees and their `missed` counts always add up.
private final class TickStream: @unchecked Sendable {
    // @unchecked: the mutable fields are touched only while holding `mutex`, except `timer`,
    // set once in `start` before the stream is shared.

    /// The consumer's wait for its next tick: in the stream, not in an object of its own per
    /// tick, so that a tick allocates nothing in a release build (`make bench-check` counts it).
    private let mutex = FutexLock()
    private(set) var timer: TimerHandle!
    private var wait = OnceWait<Tick?, Never>(opened: false)
    private var kept: Tick?
    private var hasEnded = false
    private var isClaimed = false

    func start(_ timer: TimerHandle) {
        self.timer = timer
        timer.scheduler.whenEnded(timer.key) { [weak self] in self?.finish() }
    }

    /// The first iterator gets the stream; later ones end at once.
    func claim() -> TickStream? {
        mutex.withLock {
            defer { isClaimed = true }
            return isClaimed ? nil : self
        }
    }

    /// The consumer's next tick, or nil once the timer has ended or the task is cancelled.
    func next() async -> Tick? {
        if Task.isCancelled {
            timer.cancel()
            return nil
        }
        mutex.lock()
        if let tick = kept {
            kept = nil
            mutex.unlock()
            return tick
        }
        guard !hasEnded else {
            mutex.unlock()
            return nil
        }
        guard wait.isIdle else {
            mutex.unlock()
            preconditionFailure("TimerTicks: next() was called while another call of it was waiting; an iterator belongs to one task")
        }
        wait.open()
        mutex.unlock()
        // Resumed once the wait is in place: the tick may come at once.
        do throws(TimerError) { try timer.resume() } catch { finish() }
        return await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Tick?, Never>) in
                mutex.lock()
                let early = wait.join(continuation)
                mutex.unlock()
                if let early { continuation.resume(with: early) }
            }
        } onCancel: {
            // The consumer's task was cancelled: its wait ends with nil, and the timer with it.
            if settle(nil) { timer?.cancel() }
        }
    }

    /// Ends the consumer's wait with `tick`, unless no wait is open or it has been settled.
    /// Returns whether this call ended it. The continuation resumes outside the lock.
    @discardableResult
    private func settle(_ tick: Tick?) -> Bool {
        mutex.lock()
        let settled = wait.settle(.success(tick))
        mutex.unlock()
        guard let settled else { return false }
        settled?.resume(returning: tick)
        return true
    }

    /// The timer's handler, on the backend's loop: hands the tick to the waiting consumer.
    func deliver(_ tick: Tick) {
        try? tick.timer.suspend()  // no further tick until the consumer asks
        mutex.lock()
        guard let settled = wait.settle(.success(tick)) else {
            // Resumed from outside while the consumer was busy: keep the tick for it, in the
            // same critical section, so that a `next()` cannot open a wait in between.
            let passedOver = kept.map { $0.missed + 1 } ?? 0
            kept = Tick(
                index: tick.index, scheduled: tick.scheduled, actual: tick.actual, missed: tick.missed + passedOver,
                interval: tick.interval, clock: tick.clock, clockChanged: tick.clockChanged || kept?.clockChanged == true,
                timer: tick.timer)
            mutex.unlock()
            return
        }
        mutex.unlock()
        settled?.resume(returning: tick)
    }

    /// The timer ended (counted out, cancelled, backend shut down): the consumer gets nil.
    private func finish() {
        mutex.withLock { hasEnded = true }
        settle(nil)
    }

    deinit { timer?.cancel() }
}
