import Foundation
import GatehouseJSON
import Testing

@testable import GatehouseConfig
@testable import GatehouseCore

@Suite struct DefaultConfigTests {
  @Test func embeddedDefaultsMatchTheDocumentedDefaultConfig() throws {
    let config = DefaultConfig.make(adminToken: "tok", storePath: "/tmp/x/gatehouse.sqlite")
    #expect(config.listen.map(\.address.description) == ["127.0.0.1:8080"])
    #expect(config.admin.listen.description == "127.0.0.1:9901")
    #expect(config.admin.token?.value == "tok")
    #expect(config.store.path == "/tmp/x/gatehouse.sqlite")
    #expect(config.routes.map(\.match.path.source) == ["/users", "/users/:id"])
    #expect(config.routes.allSatisfy { $0.stub.mode == .always && $0.upstream == nil && $0.envelope.enabled })
    let list = try JSONParser.parse(try #require(config.routes[0].stub.body))
    guard case .array(let users) = list else {
      Issue.record("/users stub is not a list")
      return
    }
    #expect(users.count == 2)
    let table = RouteTable(config: config)
    #expect(table.match(method: "GET", path: "/users/7")?.routeIndex == 1)
  }

  @Test func storePathIsNotExpandedAsEnvironment() {
    let config = DefaultConfig.make(adminToken: "t", storePath: "/tmp/${HOME}/s.sqlite")
    #expect(config.store.path == "/tmp/${HOME}/s.sqlite")
  }

  @Test func adminTokensAreRandomHex() {
    let first = DefaultConfig.randomAdminToken()
    let second = DefaultConfig.randomAdminToken()
    #expect(first.count == 64)
    #expect(first.allSatisfy { $0.isHexDigit && !$0.isUppercase })
    #expect(first != second)
  }

  @Test func serveDefaultsUseAFreshPrivateTempDirectory() throws {
    let (config, token, ignored) = try DefaultConfig.makeForServe()
    #expect(token != nil && config.admin.token?.value == token)
    #expect(!ignored)
    let directory = (config.store.path as NSString).deletingLastPathComponent
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let attributes = try FileManager.default.attributesOfItem(atPath: directory)
    #expect((attributes[.posixPermissions] as? Int) == 0o700)
    #expect(config.store.path.hasSuffix("/gatehouse.sqlite"))
  }

  /// `GATEHOUSE_ADMIN_TOKEN`, when usable, is the admin token (not printed); otherwise a
  /// random one is made and returned for printing.
  @Test func serveDefaultsTakeTheAdminTokenFromTheEnvironment() throws {
    var directories: [String] = []
    defer { for directory in directories { try? FileManager.default.removeItem(atPath: directory) } }
    for (variable, expectUsed) in [("env-admin-token-5d", true), ("", false), ("has space", false), ("a\nb", false)] {
      let (config, generated, ignored) = try DefaultConfig.makeForServe(environmentToken: variable)
      directories.append((config.store.path as NSString).deletingLastPathComponent)
      if expectUsed {
        #expect(config.admin.token?.value == variable && generated == nil && !ignored)
      } else {
        #expect(generated != nil && config.admin.token?.value == generated && ignored, "\(variable)")
      }
    }
  }

  /// Every example in `Config/` must pass `gatehouse check` with nothing set in the environment.
  @Test func everyFileInConfigDirectoryIsValid() throws {
    let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
      .deletingLastPathComponent()
    let directory = repository.appendingPathComponent("Config")
    let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter {
      $0.hasSuffix(".json")
    }
    .sorted()
    #expect(files.count >= 2)
    for file in files {
      let path = directory.appendingPathComponent(file).path
      do {
        _ = try ConfigLoader.load(contentsOf: path, environment: [:])
      } catch {
        Issue.record("\(file): \(error.lines.joined(separator: "\n"))")
      }
    }
  }
}
