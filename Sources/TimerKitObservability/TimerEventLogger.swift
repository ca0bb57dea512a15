#if Observability
    import Logging
    import TimerKit

    /// Writes a backend's events (`TimerBackendEvent`) to a swift-log `Logger`, with
    /// the figures as metadata:
    ///
    /// | event | level | message | metadata |
    /// |---|---|---|---|
    /// | a slow handler or task | warning | `slow timer handler` / `slow task on the timer loop` | `backend`, `timer`, `duration_ms`, `delayed_timers` |
    /// | the loop failed | error | `timer loop failed` | `backend`, `cause` |
    /// | shutdown that ended live timers | notice | `timer backend shut down with live timers` | `backend`, `ended_timers` |
    /// | a step of the wall clock, a resume | notice | `wall clock stepped` / `machine resumed from suspend` | `backend`, `clock`, `step_ms` |
    ///
    /// A shutdown with no live timer is logged at debug level. Slow handlers are reported only
    /// once the backend has a `slowHandlerThreshold`: set one to hear of them.
    public enum TimerEventLogger {
        /// Logs `backend`'s later events to `logger`, until it shuts down (that, it logs too).
        public static func log(_ backend: any TimerBackend, to logger: Logger) {
            backend.addEventObserver { event in Self.log(event, to: logger) }
        }

        /// Logs one event.
        public static func log(_ event: TimerBackendEvent, to logger: Logger) {
            switch event {
            case .slowHandler(let report):
                var metadata: Logger.Metadata = [
                    "backend": "\(report.backend)",
                    "duration_ms": "\(Double(report.duration.nanosecondsValue) / 1e6)",
                    "delayed_timers": "\(report.delayedTimers)",
                ]
                switch report.source {
                case .handler(let timer):
                    metadata["timer"] = "\(timer)"
                    logger.warning("slow timer handler", metadata: metadata)
                case .task:
                    logger.warning("slow task on the timer loop", metadata: metadata)
                }
            case .loopFailed(let backend, let cause):
                logger.error("timer loop failed", metadata: ["backend": "\(backend)", "cause": "\(cause)"])
            case .clockChanged(let backend, let clock, let step):
                logger.notice(
                    clock == .wall ? "wall clock stepped" : "machine resumed from suspend",
                    metadata: ["backend": "\(backend)", "clock": "\(clock)", "step_ms": "\(Double(step.nanosecondsValue) / 1e6)"])
            case .shutDown(let backend, let ended):
                let metadata: Logger.Metadata = ["backend": "\(backend)", "ended_timers": "\(ended)"]
                if ended > 0 {
                    logger.notice("timer backend shut down with live timers", metadata: metadata)
                } else {
                    logger.debug("timer backend shut down", metadata: metadata)
                }
            }
        }
    }
#endif
