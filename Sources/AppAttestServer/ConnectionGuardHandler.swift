#if Service
import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// Bounds what a connection whose client does not read its answers can hold (<doc:RunningTheVerificationService>,
/// “Connections”):
///
/// - **Requests read ahead.** Once `maximumPipelined` requests have been read whose responses have not been written
///   yet, the connection reads nothing more until one is (but for the body of a request being read): pipelined
///   requests wait in the client's socket, not in the server's memory. Bytes already read may hold more requests; a
///   connection whose unanswered requests reach four times the bound (a depth no real client pipelines) is closed.
/// - **Write progress.** A connection whose socket stays full (the client reads nothing) for `writeTimeout` is closed.
///   The idle timeout cannot do this: it does not fire while a response is pending.
/// - **Lifetime.** A connection older than `lifetime` reads no further request and is closed once the answers of
///   those it has read are written, so that no client holds one forever by keeping it busy.
final class ConnectionGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let maximumPipelined: Int
    private let writeTimeout: TimeAmount
    private let lifetime: TimeAmount
    /// Requests whose head was read and whose response's end was not written yet.
    private var pending = 0
    /// A read the pipeline asked for while `pending` was at the bound, issued once it falls below.
    private var heldRead = false
    private var writeDeadline: Scheduled<Void>?
    private var lifetimeTimer: Scheduled<Void>?
    /// The lifetime has passed: read nothing more, close once nothing is pending.
    private var expired = false
    /// A head was read whose request's end was not: its body must still be read, whatever the bound.
    private var readingRequest = false

    init(maximumPipelined: Int, writeTimeout: TimeAmount, lifetime: TimeAmount) {
        self.maximumPipelined = max(1, maximumPipelined)
        self.writeTimeout = writeTimeout
        self.lifetime = lifetime
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        lifetimeTimer = context.eventLoop.scheduleTask(in: lifetime) {
            let (handler, context) = loopBound.value
            handler.expired = true
            if handler.pending == 0 { context.close(promise: nil) }
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        cancelTimers()
    }

    func channelInactive(context: ChannelHandlerContext) {
        cancelTimers()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            pending += 1
            readingRequest = true
            guard pending <= 4 * maximumPipelined else {
                context.close(promise: nil)
                return
            }
        case .end:
            readingRequest = false
        case .body:
            break
        }
        context.fireChannelRead(data)
    }

    func read(context: ChannelHandlerContext) {
        if readingRequest || (!expired && pending < maximumPipelined) {
            context.read()
        } else {
            heldRead = true
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .end = unwrapOutboundIn(data) else {
            context.write(data, promise: promise)
            return
        }
        pending = max(0, pending - 1)
        if expired, pending == 0 {
            // The last answer is written out before the connection closes (the write deadline bounds how long).
            let written = context.eventLoop.makePromise(of: Void.self)
            if let promise { written.futureResult.cascade(to: promise) }
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            written.futureResult.whenComplete { _ in loopBound.value.close(promise: nil) }
            context.write(data, promise: written)
            context.flush()
            return
        }
        context.write(data, promise: promise)
        if heldRead, !expired, pending < maximumPipelined {
            heldRead = false
            context.read()
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            writeDeadline?.cancel()
            writeDeadline = nil
        } else if writeDeadline == nil {
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            writeDeadline = context.eventLoop.scheduleTask(in: writeTimeout) { loopBound.value.close(promise: nil) }
        }
        context.fireChannelWritabilityChanged()
    }

    private func cancelTimers() {
        writeDeadline?.cancel()
        writeDeadline = nil
        lifetimeTimer?.cancel()
        lifetimeTimer = nil
    }
}
#endif  // Service
