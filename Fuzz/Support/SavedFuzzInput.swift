// The inputs the fuzz targets saved, as `swift test` finds them. This one file is compiled into
// each test target that replays them, through a symlink next to its replay tests
// (Tests/GatehouseHTTPTests/, Tests/GatehouseJSONTests/, Tests/GatehouseConfigTests/,
// Tests/GatehouseJWTTests/); the fuzz targets themselves do not use it.

import Foundation
import Testing

/// One input saved for a fuzz target: a seed in `Fuzz/corpus/<target>/` or a regression input
/// in `Fuzz/crashes/<target>/`.
struct SavedFuzzInput: Sendable, CustomTestStringConvertible {
  /// The target's name, which names its directories.
  let target: String
  /// Relative to the repository root.
  let path: String

  var testDescription: String { path }

  /// The repository root, two directories above this file's (`Fuzz/Support/`, or
  /// `Tests/<target>/` where it is symlinked).
  static let repositoryRoot = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

  /// Every input of `targets` in `Fuzz/<folder>/<target>/` (then in `subfolder` of that),
  /// READMEs and hidden files aside.
  static func all(targets: [String], in folder: String, subfolder: String? = nil) -> [SavedFuzzInput] {
    targets.flatMap { target in
      let directory = "Fuzz/\(folder)/\(target)" + (subfolder.map { "/\($0)" } ?? "")
      let names =
        (try? FileManager.default.contentsOfDirectory(
          atPath: repositoryRoot.appendingPathComponent(directory).path)) ?? []
      return names.sorted().compactMap { name -> SavedFuzzInput? in
        guard !name.hasPrefix("."), !name.hasPrefix("README") else { return nil }
        let path = "\(directory)/\(name)"
        var isDirectory: ObjCBool = false
        guard
          FileManager.default.fileExists(
            atPath: repositoryRoot.appendingPathComponent(path).path, isDirectory: &isDirectory),
          !isDirectory.boolValue
        else { return nil }
        return SavedFuzzInput(target: target, path: path)
      }
    }
  }

  func bytes() throws -> [UInt8] {
    let url = SavedFuzzInput.repositoryRoot.appendingPathComponent(path)
    return [UInt8](try Data(contentsOf: url))
  }
}
