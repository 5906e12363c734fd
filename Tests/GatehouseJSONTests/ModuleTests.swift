import Testing

@testable import GatehouseJSON

@Test func jsonModuleLinks() { #expect(GatehouseJSONModule.self == GatehouseJSONModule.self) }
