import NIOCore
import NIOHTTP1

/// Deadlines for the phases of a plain HTTP connection of `voicepipe serve`, so that no client holds a
/// socket by being slow: the whole request (head and body) must arrive within `timeout` of the
/// connection opening (or of the previous response ending), however the bytes trickle in; a connection
/// whose request cannot be parsed is closed once the 400 answer is out. A response in progress (the
/// console's event stream) and a connection upgraded to WebSocket (the session's own idle timeout
/// applies) have no deadline here.
///
/// Placed after the HTTP codec and before the request handlers.
final class HTTPDeadlineHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    let timeout: TimeAmount
    private var deadline: Scheduled<Void>?

    init(timeout: TimeAmount) { self.timeout = timeout }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { arm(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        arm(context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) { disarm() }

    func channelInactive(context: ChannelHandlerContext) {
        disarm()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .end = unwrapInboundIn(data) { disarm() }   // the whole request is in
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        // The response is complete: the next request must come within the deadline too.
        if case .end = unwrapOutboundIn(data) { arm(context) }
        context.write(data, promise: promise)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is HTTPServerUpgradeEvents {
            disarm()
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A request that cannot be parsed has been answered 400 with `Connection: close`: close it.
        // (Other errors, such as a refused WebSocket upgrade answered 503, go on to be answered.)
        if error is HTTPParserError {
            disarm()
            context.close(promise: nil)
        }
        context.fireErrorCaught(error)
    }

    private func arm(_ context: ChannelHandlerContext) {
        disarm()
        let channel = context.channel
        deadline = context.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
    }

    private func disarm() {
        deadline?.cancel()
        deadline = nil
    }
}
