/// The actions one event of the exchange machine returns, in order: a short list kept
/// inline, so a transition allocates nothing (an array would cost a heap allocation per
/// event, several per request).
struct ExchangeActions: Sequence, Equatable, ExpressibleByArrayLiteral, CustomStringConvertible {
  typealias Action = ExchangeMachine.Action

  /// No transition returns more (the longest: an upstream given up, a queue left, a local
  /// answer closing the connection, and the exchange's end).
  /// (Computed: a stored `static let` would be checked for lazy initialization on every
  /// append.)
  static var capacity: Int { 6 }

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
    // A switch on the slot, not a pointer into the tuple: `withUnsafe…Bytes(of:)` would copy
    // the whole list for each access.
    switch count {
    case 0: storage.0 = action
    case 1: storage.1 = action
    case 2: storage.2 = action
    case 3: storage.3 = action
    case 4: storage.4 = action
    case 5: storage.5 = action
    default: preconditionFailure("an exchange transition returned too many actions")
    }
    count += 1
  }

  subscript(index: Int) -> Action {
    precondition(index >= 0 && index < count)
    switch index {
    case 0: return storage.0
    case 1: return storage.1
    case 2: return storage.2
    case 3: return storage.3
    case 4: return storage.4
    default: return storage.5
    }
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
