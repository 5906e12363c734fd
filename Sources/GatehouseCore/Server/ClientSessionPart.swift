import GatehouseHTTPServer
import GatehouseNet

/// A part of a client session (its `ExchangeDriver`, its `UpstreamAnswerReader`): it reaches
/// what the session holds through the session, which owns it.
protocol ClientSessionPart: AnyObject {
  var session: ClientSession { get }
}

extension ClientSessionPart {
  var exchange: Exchange? { session.exchange }
  var context: LoopContext { session.context }
  var loop: EventLoop { session.loop }
  var server: any ExchangeChannel { session.server }
  var answers: AnswerWriter { session.answers }
  var routeCache: RouteCache { session.routeCache }
  var driver: ExchangeDriver { session.driver }
  var closed: Bool { session.closed }
}
