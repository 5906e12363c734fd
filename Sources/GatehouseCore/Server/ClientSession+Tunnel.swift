import GatehouseHTTP
import GatehouseNet

/// A session's WebSocket side (Docs/websockets.md): whether a request head is a handshake the route
/// takes, the tunnel it becomes on the upstream's `101`, and the tunnel's end. The
/// decisions are `WebSocketHandshake`'s and the exchange machine's; this performs them.
extension ClientSession {
  /// What the machine learns of a request head's `Upgrade`: `upgrade` for a handshake the
  /// route takes (a `max_websockets` slot is taken for it), or why it is refused.
  /// An HTTP/2 stream is never tunnelled (RFC 8441 is not offered): its heads are left alone,
  /// and an `Upgrade` field there is dropped as hop-by-hop, like `h2c` everywhere.
  func webSocketVerdict(
    _ head: HTTPRequestHead, plan: RoutePlan?, exchange: Exchange
  ) -> (upgrade: Bool, refusal: ExchangeMachine.Refusal?) {
    guard http1 != nil, let plan else { return (false, nil) }
    let request = WebSocketHandshake.classify(head)
    switch request {
    case .none:
      return (false, nil)
    case .websocket, .malformed:
      guard plan.websocket else { return (false, .webSocketNotEnabled) }
      guard request == .websocket else { return (false, .webSocketMalformed) }
      guard context.shared.takeWebSocketSlot() else { return (false, .webSocketsAtLimit) }
      exchange.holdsWebSocketSlot = true
      return (true, nil)
    }
  }

  /// The slot of a handshake that did not become a tunnel, or of a tunnel that ended.
  func releaseWebSocketSlot(of exchange: Exchange) {
    guard exchange.holdsWebSocketSlot else { return }
    exchange.holdsWebSocketSlot = false
    context.shared.releaseWebSocketSlot()
  }

  /// The machine's `openTunnel`: the `101` goes to the client, and both connections leave
  /// their owners (the HTTP/1.1 layer, the pool) for a `WebSocketTunnel`.
  func openTunnel(_ exchange: Exchange) {
    guard let head = exchange.switchingHead, let upstream = exchange.upstream, let pool = exchange.pool,
      let (client, held) = http1?.handOver()
    else {
      // Nothing can be joined: both sides go (`serverClosed` records the exchange).
      abort()
      return
    }
    exchange.upstream = nil
    guard let upstreamSocket = pool.handOverForTunnel(upstream) else {
      // Still the layer's: its close reaches `serverClosed`, which records the exchange.
      client.abort()
      return
    }
    exchange.switchingHead = nil
    flushOutput()
    var out: [UInt8] = []
    WebSocketHandshake.writeSwitchingHead(head, requestID: exchange.requestID, into: &out)
    exchange.status = 101
    exchange.bytesSent = Int64(out.count)
    let tunnel = WebSocketTunnel(
      session: self, client: client, upstream: upstreamSocket,
      idleNanoseconds: exchange.snapshot.webSocketIdleNanoseconds, now: loop.iterationTime)
    exchange.tunnel = tunnel
    _ = client.write(out)
    tunnel.start(clientInput: held, upstreamInput: exchange.upstreamTunnelInput)
    exchange.upstreamTunnelInput = []
    if let routeIndex = exchange.routeIndex {
      context.shared.countTunnel(route: exchange.snapshot.routePlans[routeIndex].name, 1)
    }
  }

  /// Both sides of the tunnel are closed: the machine ends the exchange (`finishTunnel`).
  func tunnelClosed() {
    // The tunnel calls without holding the session, and `finishTunnel` lets the loop drop
    // it: it is kept alive until the driver's run is over.
    withExtendedLifetime(self) {
      guard let exchange else { return }
      driver.run(.tunnelEnded, on: exchange)
    }
  }

  /// The machine's `finishTunnel`: the access line (status 101, bytes each way, duration)
  /// and the gauge; the session ends with its connection.
  func finishTunnel(_ exchange: Exchange) {
    if let routeIndex = exchange.routeIndex {
      context.shared.countTunnel(route: exchange.snapshot.routePlans[routeIndex].name, -1)
    }
    record(exchange, status: 101)
    self.exchange = nil
    closed = true
    releaseHeldBufferCharge()
    context.connectionClosed(self)
  }

  /// The tunnel's deadline passed (silence, a drain or reload's end, a close's grace): the
  /// machine decides what follows.
  func checkTunnelDeadline(_ tunnel: WebSocketTunnel, now: UInt64) {
    guard now >= tunnel.deadline else { return }
    driver.run(.deadlinePassed)
  }

  /// A reload: open tunnels run on for `drain_timeout_ms` from now, then close (the issue's
  /// rule, as a drain's), so that none outlives the config it was opened under by more
  /// than that; clients reconnect under the new one. The upstream it reaches, its headers
  /// and its token may all have changed, and a tunnel carries no request to check again.
  func reloaded(to next: GatewaySnapshot) {
    guard let exchange, let tunnel = exchange.tunnel else { return }
    tunnel.retire(by: loop.iterationTime &+ EventLoop.nanoseconds(of: next.config.limits.drainTimeout))
  }
}
