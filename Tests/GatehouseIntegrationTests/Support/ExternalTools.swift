import Foundation
import Synchronization

/// Why an external tool run by a test failed.
struct ToolError: Error, CustomStringConvertible {
  let description: String
}

/// Runs the system's command-line tools on bytes, for data the tests must produce or check
/// independently of the gateway's own code: gzip streams and SHA-256 digests. Input and
/// output go through temporary files, so a big output can never block on a full pipe.
enum ExternalTool {
  /// Runs `executable` with `arguments`, `input` on stdin; its stdout. Throws unless it
  /// exits 0 within `timeout` seconds.
  static func run(_ executable: String, _ arguments: [String], input: [UInt8], timeout: Double = 30) throws -> [UInt8] {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-tool-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let inputURL = directory.appendingPathComponent("in")
    let outputURL = directory.appendingPathComponent("out")
    try Data(input).write(to: inputURL)
    _ = FileManager.default.createFile(atPath: outputURL.path, contents: nil)
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let stdin = try FileHandle(forReadingFrom: inputURL)
    let stdout = try FileHandle(forWritingTo: outputURL)
    defer {
      try? stdin.close()
      try? stdout.close()
    }
    process.standardInput = stdin
    process.standardOutput = stdout
    process.standardError = FileHandle.nullDevice
    try DescriptorCreation.lock.withLock { _ in try process.run() }
    guard waitUntil(timeout: timeout, { !process.isRunning }) else {
      process.terminate()
      throw ToolError(description: "\(executable) did not finish in \(timeout) s")
    }
    guard process.terminationReason == .exit, process.terminationStatus == 0 else {
      throw ToolError(description: "\(executable) \(arguments) exited with \(process.terminationStatus)")
    }
    return Array(try Data(contentsOf: outputURL))
  }

  /// `bytes` gzip-compressed by `/usr/bin/gzip`.
  static func gzip(_ bytes: [UInt8]) throws -> [UInt8] {
    try run("/usr/bin/gzip", ["-c", "-n"], input: bytes)
  }

  /// `bytes` (a gzip stream) decompressed by `/usr/bin/gzip`.
  static func gunzip(_ bytes: [UInt8]) throws -> [UInt8] {
    try run("/usr/bin/gzip", ["-d", "-c"], input: bytes)
  }

  /// The lowercase hex SHA-256 of `text`, by `/usr/bin/sha256sum`.
  static func sha256Hex(_ text: String) throws -> String {
    let output = String(decoding: try run("/usr/bin/sha256sum", ["-b"], input: Array(text.utf8)), as: UTF8.self)
    guard let digest = output.split(separator: " ").first, digest.count == 64 else {
      throw ToolError(description: "sha256sum printed '\(output)'")
    }
    return String(digest)
  }
}

/// A value shared between a test and the threads of its backends (a backend's mode that the
/// test switches, for example), behind a mutex.
final class Shared<Value: Sendable>: Sendable {
  private let storage: Mutex<Value>

  init(_ value: Value) {
    storage = Mutex(value)
  }

  var value: Value {
    get { storage.withLock { $0 } }
    set { storage.withLock { $0 = newValue } }
  }

  /// Changes the value in place and returns what `body` returns.
  func update<Result: Sendable>(_ body: (inout Value) -> Result) -> Result {
    storage.withLock { body(&$0) }
  }
}

/// One sample line of the Prometheus text format.
struct MetricSample: Equatable {
  let name: String
  let labels: [String: String]
  let value: Double
}

/// A parsed `/metrics` page: samples, and the `# TYPE` of each family.
struct MetricsPage {
  let samples: [MetricSample]
  let types: [String: String]

  /// Parses the Prometheus text exposition format (0.0.4); throws on a line it cannot read.
  init(_ text: String) throws {
    var samples: [MetricSample] = []
    var types: [String: String] = [:]
    for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
      if line.hasPrefix("# TYPE ") {
        let parts = line.split(separator: " ")
        if parts.count == 4 { types[String(parts[2])] = String(parts[3]) }
        continue
      }
      if line.hasPrefix("#") { continue }
      samples.append(try Self.parseSample(String(line)))
    }
    self.samples = samples
    self.types = types
  }

  private static func parseSample(_ line: String) throws -> MetricSample {
    let characters = Array(line)
    var index = 0
    var name = ""
    while index < characters.count, characters[index] != "{", characters[index] != " " {
      name.append(characters[index])
      index += 1
    }
    var labels: [String: String] = [:]
    if index < characters.count, characters[index] == "{" {
      index += 1
      while index < characters.count, characters[index] != "}" {
        var key = ""
        while index < characters.count, characters[index] != "=" {
          key.append(characters[index])
          index += 1
        }
        index += 1  // =
        guard index < characters.count, characters[index] == "\"" else {
          throw TestSocketError.malformed("metrics line '\(line)'")
        }
        index += 1
        var value = ""
        while index < characters.count, characters[index] != "\"" {
          if characters[index] == "\\", index + 1 < characters.count {
            index += 1
            value.append(characters[index] == "n" ? "\n" : characters[index])
          } else {
            value.append(characters[index])
          }
          index += 1
        }
        index += 1  // closing quote
        labels[key] = value
        if index < characters.count, characters[index] == "," { index += 1 }
      }
      index += 1  // }
    }
    let rest = String(characters[min(index, characters.count)...]).trimmingCharacters(in: .whitespaces)
    let valueText = rest.split(separator: " ").first.map(String.init) ?? ""
    guard !name.isEmpty, let value = Double(valueText.replacingOccurrences(of: "+Inf", with: "inf")) else {
      throw TestSocketError.malformed("metrics line '\(line)'")
    }
    return MetricSample(name: name, labels: labels, value: value)
  }

  /// The samples named `name` whose labels include `labels`.
  func samples(_ name: String, _ labels: [String: String] = [:]) -> [MetricSample] {
    samples.filter { sample in
      sample.name == name && labels.allSatisfy { sample.labels[$0.key] == $0.value }
    }
  }

  /// The value of the one sample named `name` with exactly-matching `labels` (0 when absent,
  /// as a counter that never moved may not be listed).
  func value(_ name: String, _ labels: [String: String] = [:]) -> Double {
    samples(name, labels).first { $0.labels == labels }?.value ?? 0
  }
}
