// An HTTP/1.1 server on SwiftNIO that closes connections idle for N seconds, its idle timeouts
// TimerKit timers on each connection's event loop.
//
//     swift run IdleTimeoutServer --port 8080 --idle-seconds 5    # serve until interrupted
//     swift run IdleTimeoutServer --self-test                     # check it, then exit
//
// The self-test serves on 127.0.0.1 (a port the system picks) and opens a few connections to
// it: some keep talking, some fall silent after one request. It checks that exactly the silent
// ones are closed, each no sooner than the idle timeout after its last request and no later
// than 2 s after that, and that the talking ones stay open. It exits 0 if so, 1 if not, and
// within 30 s in any case.
import Foundation
import NIOCore
import NIOPosix
import Synchronization
import TimerKit

struct Options {
    var port = 8080
    var idleSeconds = 5
    var selfTest = false

    init(_ arguments: [String]) throws(UsageError) {
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            switch argument {
            case "--self-test": selfTest = true
            case "--port":
                guard let value = rest.popFirst().flatMap({ Int($0) }), (0...65_535).contains(value) else { throw UsageError(argument) }
                port = value
            case "--idle-seconds":
                guard let value = rest.popFirst().flatMap({ Int($0) }), (1...3_600).contains(value) else { throw UsageError(argument) }
                idleSeconds = value
            default: throw UsageError(argument)
            }
        }
        if selfTest && !arguments.contains("--idle-seconds") { idleSeconds = 2 }
    }
}

struct UsageError: Error, CustomStringConvertible {
    let argument: String
    init(_ argument: String) { self.argument = argument }
    var description: String {
        "usage: IdleTimeoutServer [--port 0...65535] [--idle-seconds 1...3600] [--self-test] (bad: '\(argument)')"
    }
}

let options: Options
do {
    options = try Options(Array(CommandLine.arguments.dropFirst()))
} catch {
    FileHandle.standardError.write(Data("\(error)\n".utf8))
    exit(2)
}

let idle = Duration.seconds(options.idleSeconds)
if options.selfTest {
    // The watchdog: a self-test that hangs fails in 30 s instead.
    Thread.detachNewThread {
        Thread.sleep(forTimeInterval: 30)
        print("self-test: FAILED: still running after 30 s")
        exit(1)
    }
    let server = try Server(host: "127.0.0.1", port: 0, idleTimeout: idle, threads: 2)
    print("listening on 127.0.0.1:\(server.port), idle timeout \(options.idleSeconds) s")
    let passed = try SelfTest(port: server.port, idle: idle).run()
    try server.shutdown()
    exit(passed ? 0 : 1)
} else {
    let server = try Server(host: "127.0.0.1", port: options.port, idleTimeout: idle, threads: System.coreCount)
    print("listening on 127.0.0.1:\(server.port), idle timeout \(options.idleSeconds) s")
    try server.channel.closeFuture.wait()
}
