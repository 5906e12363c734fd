import Testing
@testable import GatehouseHTTP
@Test func versionIsSet() { #expect(!GatehouseVersion.string.isEmpty) }
