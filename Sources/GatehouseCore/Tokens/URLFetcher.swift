import Dispatch
import GatehouseConfig
import GatehouseHTTP
import GatehouseNet

/// One request to a configured URL from the control loop (a token endpoint, an identity
/// provider's JWKS): the host looked up off the loop, TLS with the system trust store and
/// the URL's host checked for `https`, then `HTTPOneShotClient`.
final class URLFetcher {
  let limits: HTTPOneShotClient.Limits
  private let resolve: @Sendable (String, UInt16) throws -> SocketAddress
  /// One client context for every https endpoint (made on first use: it reads the system
  /// CA bundle).
  private var sharedClientTLS: TLSContext?

  init(limits: HTTPOneShotClient.Limits, resolve: @escaping @Sendable (String, UInt16) throws -> SocketAddress) {
    self.limits = limits
    self.resolve = resolve
  }

  /// Sends `request` to `url`'s host. `completion` runs exactly once, on `loop`, never from
  /// inside this call; a failure's text names no request or answer content.
  func send(
    _ request: HTTPOneShotClient.Request, to url: HTTPURL, on loop: EventLoop,
    completion: @escaping (Result<HTTPOneShotClient.Answer, URLFetchError>) -> Void
  ) {
    // The endpoint's address may change over the life of the process, so it is looked up
    // for every request; and a lookup can take seconds (a slow or unreachable resolver), so
    // it runs on a helper thread while the loop goes on serving. If the loop has stopped by
    // the time the lookup ends, the request ends with it.
    let resolve = resolve
    let (host, port) = (url.host, url.port)
    let resume = LoopBound { [self] (resolved: Result<SocketAddress, any Error>) in
      switch resolved {
      case .success(let address):
        send(request, to: address, url: url, on: loop, completion: completion)
      case .failure(let error):
        completion(.failure(URLFetchError("cannot resolve host: \(error)")))
      }
    }
    DispatchQueue.global(qos: .utility).async {
      let resolved = Result { try resolve(host, port) }
      loop.execute { resume.value(resolved) }
    }
  }

  private func send(
    _ request: HTTPOneShotClient.Request, to address: SocketAddress, url: HTTPURL, on loop: EventLoop,
    completion: @escaping (Result<HTTPOneShotClient.Answer, URLFetchError>) -> Void
  ) {
    var tls: TLSClientOptions?
    if url.scheme == .https {
      do {
        if sharedClientTLS == nil { sharedClientTLS = try TLSContext(client: TLSClientConfiguration()) }
        tls = TLSClientOptions(context: sharedClientTLS!, serverName: url.host, handshakeTimeout: limits.connectTimeout)
      } catch {
        completion(.failure(URLFetchError("TLS setup failed: \(error)")))
        return
      }
    }
    HTTPOneShotClient.send(request, to: address, on: loop, limits: limits, tls: tls) { result in
      completion(result.mapError { URLFetchError($0.description) })
    }
  }
}

/// Carries a fetch's continuation through the resolver thread to the loop. Unchecked because
/// the value is only ever called on the loop (handed there by `EventLoop.execute`); the
/// resolver thread only holds it.
private final class LoopBound<Value>: @unchecked Sendable {
  let value: Value
  init(_ value: Value) { self.value = value }
}

/// Why a request to a configured URL failed; the text names no request or answer content.
struct URLFetchError: Error, Equatable, CustomStringConvertible {
  let description: String

  init(_ description: String) {
    self.description = description
  }
}
