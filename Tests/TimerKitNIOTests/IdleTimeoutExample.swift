#if NIO
    import NIOCore
    import TimerKit
    import TimerKitNIO

    // The README's and the article's example, compiled and tested here: an idle timeout per
    // connection, reset by every read, cancelled when the connection closes.

    /// Closes a connection that has been silent for `timeout`.
    final class IdleTimeoutHandler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        private let timers: NIOBackend  // one per event loop, shared by its connections
        private let timeout: Duration
        private var timer: TimerHandle?

        init(timers: NIOBackend, timeout: Duration) {
            self.timers = timers
            self.timeout = timeout
        }

        func channelActive(context: ChannelHandlerContext) {
            let channel = context.channel
            timer = try? timers.schedule(.after(timeout)) { _ in channel.close(promise: nil) }
            context.fireChannelActive()
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            try? timer?.reschedule(.after(timeout))  // traffic: start the wait again
            context.fireChannelRead(data)
        }

        func channelInactive(context: ChannelHandlerContext) {
            timer?.cancel()
            context.fireChannelInactive()
        }
    }
#endif
