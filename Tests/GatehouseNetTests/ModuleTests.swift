import Testing

@testable import GatehouseNet

@Test func netModuleLinks() { #expect(GatehouseNetModule.self == GatehouseNetModule.self) }
