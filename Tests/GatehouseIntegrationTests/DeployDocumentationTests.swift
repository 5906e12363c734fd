import Foundation
import Testing

/// Deploy/README.md says what the deployment really needs. (Scripts/deploy-check.sh builds
/// the binary the systemd section describes and runs it without the toolchain's libraries.)
@Suite struct DeployDocumentationTests {
  static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

  static func text(_ path: String) throws -> String {
    try String(contentsOf: repository.appendingPathComponent(path), encoding: .utf8)
  }

  /// The lines of the `## systemd` section.
  static func systemdSection() throws -> [Substring] {
    let lines = try text("Deploy/README.md").split(separator: "\n", omittingEmptySubsequences: false)
    guard let start = lines.firstIndex(where: { $0.hasPrefix("## systemd") }) else { return [] }
    let end = lines[(start + 1)...].firstIndex { $0.hasPrefix("## ") } ?? lines.endIndex
    return Array(lines[start..<end])
  }

  /// A server without the Swift toolchain can only run a binary with the runtime linked in:
  /// the section builds it that way before it installs it.
  @Test func systemdSectionBuildsWithTheStaticSwiftRuntime() throws {
    let section = try Self.systemdSection()
    let build = section.firstIndex { $0.hasPrefix("swift build ") && $0.contains("-c release") }
    let install = section.firstIndex { $0.contains("install -m 0755 .build/release/gatehouse") }
    #expect(build.map { section[$0].contains("--static-swift-stdlib") } == true, "\(section.joined(separator: "\n"))")
    #expect(build != nil && install != nil && build! < install!, "the binary is built before it is installed")
    let dockerfile = try Self.text("Deploy/Dockerfile")
    #expect(dockerfile.contains("swift build -c release --product gatehouse --static-swift-stdlib"))
    let unit = try Self.text("Deploy/gatehouse.service")
    #expect(unit.contains("--static-swift-stdlib"), "the unit's install notes name the same build")
  }

  /// Every protected admin endpoint needs the token, on loopback too: nothing says it is
  /// needed only off loopback.
  @Test func adminTokenIsDescribedAsAlwaysNeeded() throws {
    let readme = try Self.text("Deploy/README.md")
    let tokenLines = readme.split(separator: "\n").filter { $0.contains("GATEHOUSE_ADMIN_TOKEN") }
    #expect(!tokenLines.isEmpty)
    for line in tokenLines {
      #expect(
        !line.contains("only if") && !line.contains("needed only") && !line.contains("whenever admin listens"),
        "\(line)")
    }
    #expect(readme.contains("on loopback too"))
  }

  /// The gateway imports no Foundation (GatewayBinaryTests checks the running process); the
  /// deployment notes must not say otherwise.
  @Test func noStaleFoundationClaims() throws {
    let readme = try Self.text("Deploy/README.md")
    #expect(!readme.contains("imports all of `Foundation`"))
    #expect(!readme.contains("and Foundation are inside the binary"))
    let sources = Self.repository.appendingPathComponent("Sources")
    let files =
      FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?.compactMap { $0 as? URL }
      .filter { $0.pathExtension == "swift" } ?? []
    #expect(!files.isEmpty)
    for file in files {
      let text = try String(contentsOf: file, encoding: .utf8)
      #expect(!text.split(separator: "\n").contains { $0.hasPrefix("import Foundation") }, "\(file.path)")
    }
  }
}
