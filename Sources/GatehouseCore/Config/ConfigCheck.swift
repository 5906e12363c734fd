import Foundation

/// What `gatehouse check --config FILE` prints and how it exits, kept here (not in the
/// executable) so tests can call it.
public struct ConfigCheckResult: Sendable, Equatable {
  /// 0 for a valid config, 1 otherwise.
  public let exitCode: Int32
  /// Lines for standard output: `ok` for a valid config.
  public let output: [String]
  /// Lines for standard error: one per problem.
  public let errors: [String]

  /// Validates the file at `path`. A JSON syntax error is printed compiler-style,
  /// `FILE:LINE:COLUMN: not valid JSON: reason`, so editors can jump to it.
  public static func checking(
    configPath path: String, environment: [String: String] = ProcessInfo.processInfo.environment
  ) -> ConfigCheckResult {
    do {
      let config = try ConfigLoader.load(contentsOf: path, environment: environment)
      let problems = fileProblems(config)
      guard problems.isEmpty else { return ConfigCheckResult(exitCode: 1, output: [], errors: problems) }
      return ConfigCheckResult(exitCode: 0, output: ["ok"], errors: [])
    } catch .invalidJSON(let error) {
      return ConfigCheckResult(
        exitCode: 1, output: [],
        errors: ["\(path):\(error.line):\(error.column): not valid JSON: \(error.reason)"])
    } catch {
      return ConfigCheckResult(exitCode: 1, output: [], errors: error.lines)
    }
  }

  /// The files a valid config names that `serve` would fail to load: certificates, keys and
  /// CA bundles, read and parsed as `serve` does (so `check` in a pre-flight catches them).
  /// Host names are not resolved here: that needs the network `serve` runs in.
  static func fileProblems(_ config: GatehouseConfig) -> [String] {
    var problems: [String] = []
    for (index, listen) in config.listen.enumerated() {
      guard let tls = listen.tls else { continue }
      do {
        _ = try GatewayServer.serverTLS(tls)
      } catch {
        problems.append("listen[\(index)].tls: \(error)")
      }
    }
    for upstream in config.upstreams where upstream.url.scheme == .https {
      do {
        _ = try UpstreamPlan.clientTLS(upstream.tls, host: upstream.url.host, handshakeTimeout: .seconds(1))
      } catch {
        problems.append("upstreams.\(upstream.name).tls: \(error)")
      }
    }
    return problems
  }
}
