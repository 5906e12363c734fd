import Testing

@testable import GatehouseCore

@Suite struct HealthStateTests {
  @Test func turnsUnhealthyAfterConsecutiveFailuresAndBackAfterSuccesses() {
    var health = HealthState(unhealthyAfter: 3, healthyAfter: 2)
    #expect(health.healthy)
    let changed1 = health.record(success: false, error: "refused")
    #expect(!changed1)
    let changed2 = health.record(success: false, error: "refused")
    #expect(!changed2)
    let changed3 = health.record(success: false, error: "timeout")
    #expect(changed3)
    #expect(!health.healthy)
    #expect(health.lastError == "timeout")
    let changed4 = health.record(success: true)
    #expect(!changed4)
    let changed5 = health.record(success: true)
    #expect(changed5)
    #expect(health.healthy)
  }

  @Test func aGoodCheckBreaksAFailureStreak() {
    var health = HealthState(unhealthyAfter: 2, healthyAfter: 1)
    _ = health.record(success: false)
    _ = health.record(success: true)
    let changed6 = health.record(success: false)
    #expect(!changed6)
    #expect(health.healthy)
  }
}
