/// What the registry (a chunk's owner, for lookups by generated name and listings) and the
/// process's clock watcher hold of a scheduler: the scheduler itself, strongly, while it has
/// live timers, and nothing while it has none.
///
/// So a live timer keeps its scheduler, as it must for a lookup to reach it, and a scheduler
/// with no live timer is kept only by its users (its backend, its handles): when they go, it
/// goes, shut down or not. A backend that forgot to shut down is freed with its scheduler, its
/// records' chunks and, once no other backend uses it, its registry.
///
/// The scheduler sets the reference as its first timer goes live and takes it out as its last
/// ends, under its own lock, and lets it go after unlocking (`AfterUnlock`): a release there may
/// be the last. Readers copy the reference under this link's lock (a leaf: no other lock is
/// taken under it), so a copy is made only while the link's own reference keeps the scheduler
/// alive. Not weak: a weak reference would give the scheduler a side table, and every retain of
/// it would take the runtime's slow path.
final class SchedulerLink: @unchecked Sendable {
    // @unchecked: `held` is read and written only under `lock`.
    private let lock = FutexLock()
    private var held: TimerScheduler?

    /// The scheduler while it has live timers; nil otherwise.
    var scheduler: TimerScheduler? {
        lock.lock()
        defer { lock.unlock() }
        return held
    }

    /// Its first timer went live (under its lock): `scheduler` keeps it from now on.
    func hold(_ scheduler: TimerScheduler) {
        lock.lock()
        held = scheduler
        lock.unlock()
    }

    /// Its last live timer ended (under its lock): the reference the link held, for the caller
    /// to let go of after unlocking.
    func letGo() -> TimerScheduler? {
        lock.lock()
        defer { lock.unlock() }
        return held.take()
    }
}
