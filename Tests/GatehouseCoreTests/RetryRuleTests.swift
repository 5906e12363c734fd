import GatehouseHTTP
import Testing

@testable import GatehouseCore

@Suite struct RetryRuleTests {
  struct Row: CustomStringConvertible, Sendable {
    let failure: AttemptFailure
    let method: HTTPMethod
    var idempotencyKey = false
    var bodyHeld = true
    var tryNumber = 1
    var attempts = 2
    var on: [String] = ["connect", "reset", "503"]
    let expected: RetryDecision

    var description: String {
      "\(failure) \(method) key:\(idempotencyKey) body:\(bodyHeld) try \(tryNumber)/\(attempts) on:\(on)"
    }
  }

  static let table: [Row] = [
    // A connect failure: nothing was sent, any method, body or not.
    Row(failure: .connect, method: .post, bodyHeld: false, expected: .retry),
    Row(failure: .connect, method: .patch, expected: .retry),
    Row(failure: .connect, method: .other("PURGE"), expected: .retry),
    Row(failure: .connect, method: .get, on: ["reset", "503"], expected: .stop(.notListed)),
    Row(failure: .connect, method: .get, tryNumber: 2, expected: .stop(.attemptsUsed)),
    Row(failure: .connect, method: .get, attempts: 1, expected: .stop(.attemptsUsed)),
    Row(failure: .connect, method: .get, attempts: 0, expected: .stop(.attemptsUsed)),
    // Sent: listed, replayable and with its body.
    Row(failure: .reset, method: .get, expected: .retry),
    Row(failure: .reset, method: .head, expected: .retry),
    Row(failure: .reset, method: .options, expected: .retry),
    Row(failure: .reset, method: .put, expected: .retry),
    Row(failure: .reset, method: .delete, expected: .retry),
    Row(failure: .reset, method: .post, expected: .stop(.notReplayable)),
    Row(failure: .reset, method: .post, idempotencyKey: true, expected: .retry),
    Row(failure: .reset, method: .post, idempotencyKey: true, bodyHeld: false, expected: .stop(.bodyReleased)),
    Row(failure: .reset, method: .put, bodyHeld: false, expected: .stop(.bodyReleased)),
    Row(failure: .reset, method: .trace, expected: .stop(.notReplayable)),
    Row(failure: .reset, method: .connect, expected: .stop(.notReplayable)),
    Row(failure: .status503, method: .delete, expected: .retry),
    Row(failure: .status503, method: .patch, expected: .stop(.notReplayable)),
    Row(failure: .status503, method: .patch, idempotencyKey: true, expected: .retry),
    Row(failure: .status503, method: .other("PURGE"), expected: .stop(.notReplayable)),
    Row(failure: .status503, method: .other("PURGE"), idempotencyKey: true, expected: .retry),
    // Not in the default list.
    Row(failure: .timeout, method: .get, expected: .stop(.notListed)),
    Row(failure: .status502, method: .get, expected: .stop(.notListed)),
    Row(failure: .status504, method: .get, expected: .stop(.notListed)),
    Row(failure: .timeout, method: .get, on: ["timeout"], expected: .retry),
    Row(failure: .status502, method: .get, on: ["502"], expected: .retry),
    Row(failure: .status504, method: .head, on: ["504"], expected: .retry),
    Row(failure: .timeout, method: .post, on: ["timeout"], expected: .stop(.notReplayable)),
    // Tries: `attempts` counts every try, the first included.
    Row(failure: .reset, method: .get, tryNumber: 2, attempts: 3, expected: .retry),
    Row(failure: .reset, method: .get, tryNumber: 3, attempts: 3, expected: .stop(.attemptsUsed)),
    Row(failure: .timeout, method: .post, tryNumber: 2, on: [], expected: .stop(.attemptsUsed)),
  ]

  @Test(arguments: table)
  func decides(_ row: Row) throws {
    let rule = RetryRule(on: try #require(RetryConditions(configValues: row.on)), attempts: row.attempts)
    let decision = rule.decide(
      after: row.failure, tryNumber: row.tryNumber, method: row.method, hasIdempotencyKey: row.idempotencyKey,
      bodyHeld: row.bodyHeld)
    #expect(decision == row.expected)
  }

  @Test func holdsOverEveryCombination() {
    let methods: [HTTPMethod] = [.get, .head, .post, .put, .delete, .options, .patch, .trace, .connect, .other("X")]
    let lists: [RetryConditions] = [
      [], .default, [.connect], [.timeout, .status502, .status504], RetryConditions(rawValue: 63),
    ]
    for failure in AttemptFailure.allCases {
      for on in lists {
        for method in methods {
          for key in [false, true] {
            for held in [false, true] {
              for attempts in 0...3 {
                for tryNumber in 1...3 {
                  let decision = RetryRule(on: on, attempts: attempts).decide(
                    after: failure, tryNumber: tryNumber, method: method, hasIdempotencyKey: key, bodyHeld: held)
                  let expected: RetryDecision
                  if tryNumber >= attempts {
                    expected = .stop(.attemptsUsed)
                  } else if !on.contains(failure) {
                    expected = .stop(.notListed)
                  } else if failure == .connect {
                    expected = .retry
                  } else if !RetryRule.isReplayable(method: method, hasIdempotencyKey: key) {
                    expected = .stop(.notReplayable)
                  } else {
                    expected = held ? .retry : .stop(.bodyReleased)
                  }
                  #expect(decision == expected, "\(failure) \(method) \(key) \(held) \(tryNumber)/\(attempts)")
                }
              }
            }
          }
        }
      }
    }
  }

  @Test func replayableMethods() {
    let replayable: [HTTPMethod] = [.get, .head, .options, .put, .delete]
    let others: [HTTPMethod] = [.post, .patch, .trace, .connect, .other("PROPFIND")]
    for method in replayable { #expect(RetryRule.isReplayable(method: method, hasIdempotencyKey: false)) }
    for method in others {
      #expect(!RetryRule.isReplayable(method: method, hasIdempotencyKey: false))
      #expect(RetryRule.isReplayable(method: method, hasIdempotencyKey: true))
    }
  }

  @Test func readsRetryOn() {
    #expect(RetryConditions(configValues: ["connect", "reset", "503"]) == .default)
    #expect(RetryConditions(configValues: ["timeout", "502", "504"]) == [.timeout, .status502, .status504])
    #expect(RetryConditions(configValues: []) == [])
    #expect(RetryConditions(configValues: ["connect", "500"]) == nil)
    #expect(RetryConditions(configValues: ["Connect"]) == nil)
    #expect(RetryRule().on == .default && RetryRule().attempts == 2)
  }

  @Test func theBudgetIsAskedLastAndCountsOnlyRetriesMade() {
    let rule = RetryRule()
    var budget = RetryBudget()
    // Refused by the rule: the budget is not touched.
    let refused = rule.decide(
      after: .reset, tryNumber: 1, method: .post, hasIdempotencyKey: false, bodyHeld: true, budget: &budget, now: 0)
    #expect(refused == .stop(.notReplayable))
    #expect(budget.retriesInWindow == 0)
    // Granted: counted. A new budget allows three in its first second, connect failures included.
    var decisions: [RetryDecision] = []
    for _ in 0..<4 {
      decisions.append(
        rule.decide(
          after: .connect, tryNumber: 1, method: .post, hasIdempotencyKey: false, bodyHeld: false, budget: &budget,
          now: 0))
    }
    #expect(decisions == [.retry, .retry, .retry, .stop(.budgetExhausted)])
    #expect(budget.retriesInWindow == 3)
  }
}
