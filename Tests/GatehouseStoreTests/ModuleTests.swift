import Testing

@testable import GatehouseStore

@Test func storeModuleLinks() { #expect(GatehouseStoreModule.self == GatehouseStoreModule.self) }
