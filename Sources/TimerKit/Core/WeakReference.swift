/// Holds a timer's target weakly, as NSProxy does for NSTimer, so a timer never keeps its
/// target alive.
///
/// Load `object` only outside every TimerKit lock: the strong reference a load makes can be
/// the last one if another thread lets the target go meanwhile, and then the target's
/// `deinit` (user code) runs where the reference is dropped.
final class WeakReference: @unchecked Sendable {
    // @unchecked: `object` is immutable and the referent was `Sendable` when stored (the
    // only initialiser takes a `Sendable` object); a weak load is thread-safe.
    weak let object: AnyObject?
    init(_ object: some AnyObject & Sendable) { self.object = object }
}
