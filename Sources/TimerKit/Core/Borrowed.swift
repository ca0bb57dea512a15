extension Unmanaged {
    /// Runs `body` with the object, borrowed: no retain or release, where loading the reference
    /// costs one of each. The caller keeps the object alive for the call.
    @inline(__always)
    func withBorrowed<Result, Failure: Error>(
        _ body: (Instance) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        // `_withUnsafeGuaranteedRef` takes a closure that does not throw: the error rides out in
        // a Result.
        let result: Swift.Result<Result, Failure> = _withUnsafeGuaranteedRef { instance in
            Swift.Result { () throws(Failure) in try body(instance) }
        }
        return try result.get()
    }
}
