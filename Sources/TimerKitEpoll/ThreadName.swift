internal import CTimerShims

/// Names the calling thread (truncated to the kernel's 15 characters).
package func nameCurrentThread(_ name: String) {
    _ = ctk_set_thread_name(String(name.prefix(15)))
}
