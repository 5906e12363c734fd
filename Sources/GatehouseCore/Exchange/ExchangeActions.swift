/// The actions one event of the exchange machine returns, in order: a short list kept
/// inline, so a transition allocates nothing (an array would cost a heap allocation per
/// event, several per request).
struct ExchangeActions: Sequence, Equatable, ExpressibleByArrayLiteral, CustomStringConvertible {
  typealias Action = ExchangeMachine.Action

  /// No transition returns more (the longest: an upstream given up, a queue left, a local
  /// answer closing the connection, and the exchange's end).
  static let capacity = 6

  private var storage: (Action, Action, Action, Action, Action, Action) = (
    .finish, .finish, .finish, .finish, .finish, .finish
  )
  private(set) var count = 0

  init() {}

  // Fixed-arity initializers for the machine's transitions: an array literal would go
  // through a variadic parameter, which allocates an array per call.
  init(_ first: Action) {
    append(first)
  }

  init(_ first: Action, _ second: Action) {
    append(first)
    append(second)
  }

  init(_ first: Action, _ second: Action, _ third: Action) {
    append(first)
    append(second)
    append(third)
  }

  /// For tests and other callers off the request path (see the fixed-arity initializers).
  init(arrayLiteral elements: Action...) {
    for element in elements { append(element) }
  }

  mutating func append(_ action: Action) {
    precondition(count < Self.capacity, "an exchange transition returned too many actions")
    withUnsafeMutableBytes(of: &storage) { raw in
      raw.baseAddress!.assumingMemoryBound(to: Action.self)[count] = action
    }
    count += 1
  }

  subscript(index: Int) -> Action {
    precondition(index >= 0 && index < count)
    return withUnsafeBytes(of: storage) { raw in raw.baseAddress!.assumingMemoryBound(to: Action.self)[index] }
  }

  static func + (lhs: ExchangeActions, rhs: ExchangeActions) -> ExchangeActions {
    var sum = lhs
    for action in rhs { sum.append(action) }
    return sum
  }

  static func == (lhs: ExchangeActions, rhs: ExchangeActions) -> Bool {
    guard lhs.count == rhs.count else { return false }
    for index in 0..<lhs.count where lhs[index] != rhs[index] { return false }
    return true
  }

  func contains(_ action: Action) -> Bool {
    for element in self where element == action { return true }
    return false
  }

  var description: String { "[" + map { "\($0)" }.joined(separator: ", ") + "]" }

  struct Iterator: IteratorProtocol {
    let actions: ExchangeActions
    var index = 0

    mutating func next() -> Action? {
      guard index < actions.count else { return nil }
      defer { index += 1 }
      return actions[index]
    }
  }

  func makeIterator() -> Iterator { Iterator(actions: self) }
}
