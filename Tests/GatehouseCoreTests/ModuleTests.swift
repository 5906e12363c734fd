import Testing
@testable import GatehouseCore

@Test func coreModuleLinks() { #expect(GatehouseCoreModule.self == GatehouseCoreModule.self) }
