import GatehouseHTTP
import GatehouseNet
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Runs the gateway: one event loop per worker, each with its own listener socket on every
/// listen address (SO_REUSEPORT), plus a control loop on the calling thread for signals,
/// reloads and the drain at shutdown.
public final class GatewayServer {
  public let shared: GatewayShared
  private let configPath: String?
  private var snapshot: GatewaySnapshot
  private let group: EventLoopGroup
  private let contexts: [LoopContext]
  private let control: EventLoop
  private let signals: SignalReceiver
  /// Listen addresses as bound (port 0 replaced by the kernel's choice).
  public private(set) var boundAddresses: [String] = []
  private var draining = false

  /// Binds every listener; throws with a readable message when one cannot be bound.
  public init(config: GatehouseConfig, configPath: String?, logger: Logger) throws {
    // Signals are blocked before any loop thread starts, so only the control loop sees them.
    signals = try SignalReceiver(signals: [.terminate, .interrupt, .hangup])
    self.configPath = configPath
    snapshot = try GatewaySnapshot(config: config)
    let shared = GatewayShared(logger: logger, maxConnections: config.limits.maxConnections)
    let snapshot = self.snapshot
    self.shared = shared
    control = try EventLoop()
    group = try EventLoopGroup(loopCount: config.workers)
    contexts = group.loops.map { LoopContext(loop: $0, shared: shared, snapshot: snapshot) }
    var perLoopListeners = Array(repeating: [TCPListener](), count: contexts.count)
    do {
      for listen in config.listen {
        let address = try SocketAddress(parsing: listen.address.description)
        let listeners = try TCPListener.bindReusePortGroup(address: address, count: contexts.count)
        boundAddresses.append(address.withPort(listeners[0].localPort).description)
        for (index, listener) in listeners.enumerated() { perLoopListeners[index].append(listener) }
      }
    } catch {
      group.shutdown()
      throw error
    }
    for (context, listeners) in zip(contexts, perLoopListeners) {
      nonisolated(unsafe) let handedOver = listeners
      context.loop.execute {
        context.listeners = handedOver
        for listener in handedOver {
          do {
            try listener.startAccepting(on: context.loop) { socket in context.accept(socket) }
          } catch {
            context.shared.logger.error("cannot accept on listener", ["error": .string("\(error)")])
          }
        }
        context.start()
      }
    }
  }

  /// Serves until SIGTERM or SIGINT has drained the connections; returns the exit status.
  public func run() -> Int32 {
    for address in boundAddresses {
      shared.logger.info("listening", ["address": .string(address), "workers": .int(contexts.count)])
    }
    nonisolated(unsafe) let server = self
    control.execute {
      do {
        try server.signals.start(on: server.control) { signal in
          switch signal {
          case .terminate, .interrupt: server.beginShutdown()
          case .hangup: server.reload()
          }
        }
      } catch {
        server.shared.logger.error("cannot receive signals", ["error": .string("\(error)")])
      }
    }
    control.run()
    signals.close()
    group.shutdown()
    shared.logger.info("stopped")
    return 0
  }

  /// Reads the config file again; a bad one is logged and the running config stays.
  public func reload() {
    guard let configPath else {
      shared.logger.warn("reload ignored: running on the embedded config")
      return
    }
    do {
      let config = try ConfigLoader.load(contentsOf: configPath)
      let next = try GatewaySnapshot(config: config)
      snapshot = next
      shared.maxConnections.store(config.limits.maxConnections, ordering: .relaxed)
      for context in contexts { context.loop.execute { context.install(next) } }
      shared.logger.info("config reloaded", ["path": .string(configPath)])
    } catch let error as ConfigLoadError {
      shared.logger.error(
        "reload refused; the running config stays", ["errors": .string(error.lines.joined(separator: "; "))])
    } catch {
      shared.logger.error("reload refused; the running config stays", ["error": .string("\(error)")])
    }
  }

  /// Stops accepting, lets in-flight requests finish (up to `drain_timeout_ms`), then stops.
  private func beginShutdown() {
    guard !draining else { return }
    draining = true
    shared.logger.info("draining", ["connections": .int(shared.openClientConnections)])
    for context in contexts { context.loop.execute { context.beginDrain() } }
    let deadline = EventLoop.deadline(after: snapshot.drainTimeout)
    waitForDrain(until: deadline)
  }

  private func waitForDrain(until deadline: UInt64) {
    if shared.openClientConnections == 0 || EventLoop.monotonicNanoseconds() >= deadline {
      if shared.openClientConnections > 0 {
        shared.logger.warn("drain timeout; closing the rest", ["connections": .int(shared.openClientConnections)])
        for context in contexts { context.loop.execute { context.abortAll() } }
      }
      for context in contexts { context.loop.execute { context.stopSweeping() } }
      control.stop()
      return
    }
    control.scheduleTimer(after: .milliseconds(20)) { [self] in waitForDrain(until: deadline) }
  }
}
