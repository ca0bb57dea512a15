import Dispatch
import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitEpoll

extension Checks {
    /// A DisplayLink delivered on another backend, like a CADisplayLink added to a run loop.
    enum DisplayDelivery {
        static func slowCallbacksDropFramesAndNothingArrivesAfterInvalidate(_ kind: BackendUnderTest) throws {
            let source = try DisplaySource(refreshRate: 100, priority: .normal, registry: TimerRegistry())
            defer { source.shutdown() }
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let frames = Locked<[DisplayFrame]>([])
            let returns = Locked<[MonotonicInstant]>([])
            let begun = Counter()
            // 25 ms of work per 10 ms frame: the loop is always behind.
            let link = try source.addLink(deliverOn: h.backend) { [backend = h.backend] frame in
                begun.increment()
                frames.withLock { $0.append(frame) }
                h.work(ms(25))
                returns.withLock { $0.append(backend.now()) }
            }
            #expect(link.handle.backendName == h.backend.name, "the link is a timer of the delivering backend")
            let first = try #require(link.handle.snapshot.nextDeadline)
            #expect(first - h.backend.now() <= ms(10), "the first frame is due on the delivering backend's clock")
            #expect(h.waitUntil { frames.current.count >= 4 })
            link.invalidate()
            let atInvalidate = begun.current
            h.pass(ms(100))
            #expect(begun.current == atInvalidate, "a callback began after invalidate() returned")
            link.handle.cancelAndWait()  // the statistics are final once no callback runs
            let delivered = frames.current
            let stats = link.statistics
            #expect(stats.framesDelivered == delivered.count)
            #expect(stats.framesDropped == delivered.map(\.dropped).reduce(0, +))
            #expect(stats.framesDropped >= 1, "slow callbacks drop frames instead of queueing them")
            for (previous, frame) in zip(delivered, delivered.dropFirst()) {
                #expect(
                    frame.timestamp - previous.timestamp == frame.duration * (frame.dropped + 1),
                    "every gap is whole frames, all of them counted as dropped")
            }
            // Each frame starts once it is due (its vsync before the ones it dropped) and the
            // callback before it has returned, and not long after.
            let returned = returns.current
            for (index, frame) in delivered.enumerated() {
                let firstDue = frame.timestamp + (.zero - frame.duration * frame.dropped)
                let due = returned.indices.contains(index - 1) ? max(firstDue, returned[index - 1]) : firstDue
                expectOnTime("frame \(index)", due: due, happened: max(frame.actual, due), on: kind)
                #expect(frame.actual >= frame.timestamp, "frame \(index) began before its vsync")
            }
            #expect(h.waitUntil { h.registry.count == 0 })
        }

        static func aPausedLinkIsSilentAndKeepsItsTarget(_ kind: BackendUnderTest) throws {
            let source = try DisplaySource(refreshRate: 200, priority: .normal, registry: TimerRegistry())
            defer { source.shutdown() }
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let begun = Counter()
            let link = try source.addLink(deliverOn: h.backend) { _ in begun.increment() }
            #expect(h.waitUntil { begun.current >= 2 })
            try link.setPaused(true)
            h.pass(ms(10))  // a callback under way when setPaused returned may still finish
            let atPause = begun.current
            h.pass(ms(60))
            #expect(begun.current == atPause)
            #expect(h.registry.count == 1, "a paused link stays registered")
            try link.setPaused(false)
            #expect(h.waitUntil { begun.current >= atPause + 2 })
            link.invalidate()
        }
    }
}
