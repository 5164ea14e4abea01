#if Service
import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// Closes a connection whose request body does not arrive in full within a deadline after its head.
///
/// Hummingbird's idle timeout already closes connections that sit between requests, including those whose next
/// request head never completes; this handler bounds the other half, a body sent slowly or never finished, so that
/// no connection holds a descriptor forever.
final class RequestDeadlineHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    private let timeout: TimeAmount
    private var deadline: Scheduled<Void>?
    /// A head announced a body whose end has not arrived yet.
    private var awaitingEnd = false

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            cancelDeadline()
            // Only a request that announces a body can leave one unfinished; the others cost no timer.
            let length = head.headerFields[.contentLength]
            awaitingEnd = head.headerFields[.transferEncoding] != nil || (length != nil && length != "0")
        case .end:
            awaitingEnd = false
            cancelDeadline()
        case .body:
            break
        }
        context.fireChannelRead(data)
    }

    /// The timer is armed once the bytes read so far are handled, and only if the body is still incomplete: a
    /// request that arrives whole in one read, the usual small POST, costs no timer.
    func channelReadComplete(context: ChannelHandlerContext) {
        if awaitingEnd, deadline == nil {
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            deadline = context.eventLoop.scheduleTask(in: timeout) { loopBound.value.close(promise: nil) }
        }
        context.fireChannelReadComplete()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        cancelDeadline()
    }

    func channelInactive(context: ChannelHandlerContext) {
        cancelDeadline()
        context.fireChannelInactive()
    }

    private func cancelDeadline() {
        deadline?.cancel()
        deadline = nil
    }
}
#endif  // Service
