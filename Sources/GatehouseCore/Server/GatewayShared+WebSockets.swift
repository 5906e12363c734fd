import Synchronization

/// The process-wide WebSocket figures (Docs/websockets.md): the `limits.max_websockets` slots and the
/// per-route gauge.
extension GatewayShared {
  /// Takes a slot for a handshake; false (and nothing taken) when `max_websockets` are
  /// open or opening. The slot passes to the tunnel, and is given back when either ends.
  func takeWebSocketSlot() -> Bool {
    let open = webSockets.add(1, ordering: .relaxed).newValue
    guard open <= maxWebSockets.load(ordering: .relaxed) else {
      webSockets.subtract(1, ordering: .relaxed)
      return false
    }
    return true
  }

  func releaseWebSocketSlot() {
    webSockets.subtract(1, ordering: .relaxed)
  }

  /// A tunnel of `route` opened (`delta` 1) or closed (-1).
  func countTunnel(route: String, _ delta: Int) {
    webSocketsByRoute.withLock { counts in
      let next = (counts[route] ?? 0) + delta
      // A route whose tunnels are all gone stays listed at 0, as a gauge that was seen.
      counts[route] = max(0, next)
    }
  }

  /// `gatehouse_websockets{route}` samples, by route name.
  var tunnelsByRoute: [(String, Int)] {
    webSocketsByRoute.withLock { counts in counts.sorted { $0.key < $1.key }.map { ($0.key, $0.value) } }
  }
}
