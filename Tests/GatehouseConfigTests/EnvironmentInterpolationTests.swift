import Testing

@testable import GatehouseConfig

@Suite struct EnvironmentInterpolationTests {
  let interpolation = EnvironmentInterpolation(environment: ["HOST": "db", "EMPTY": "", "PORT": "5432"])

  private func failure(_ text: String) -> EnvironmentInterpolation.Failure? {
    do {
      _ = try interpolation.expand(text)
      return nil
    } catch {
      return error
    }
  }

  @Test func expandsSetVariables() throws {
    #expect(try interpolation.expand("${HOST}:${PORT}/x") == "db:5432/x")
  }

  @Test func leavesStringsWithoutReferencesAlone() throws {
    #expect(try interpolation.expand("a $HOST $ {x} $") == "a $HOST $ {x} $")
  }

  @Test func usesTheDefaultWhenUnsetOrEmpty() throws {
    #expect(try interpolation.expand("${MISSING:-fallback}") == "fallback")
    #expect(try interpolation.expand("${EMPTY:-fallback}") == "fallback")
    #expect(try interpolation.expand("${HOST:-fallback}") == "db")
    #expect(try interpolation.expand("${MISSING:-}") == "")
  }

  @Test func defaultIsNotExpandedAgain() throws {
    #expect(try interpolation.expand("${MISSING:-$HOST:x}") == "$HOST:x")
  }

  @Test func setButEmptyWithoutDefaultIsEmpty() throws {
    #expect(try interpolation.expand("[${EMPTY}]") == "[]")
  }

  @Test func unsetVariableIsAnError() {
    #expect(failure("x${MISSING}") == .unsetVariable(name: "MISSING"))
  }

  @Test func escapeWritesALiteralReference() throws {
    #expect(try interpolation.expand("$${HOST} ${HOST}") == "${HOST} db")
  }

  @Test func rejectsMalformedReferences() {
    #expect(failure("${HOST") == .unterminatedReference)
    #expect(failure("${}") == .invalidVariableName)
    #expect(failure("${1A}") == .invalidVariableName)
    #expect(failure("${A-B}") == .invalidVariableName)
    #expect(failure("${A:B}") == .invalidVariableName)
  }

  @Test func messagesDoNotContainTheText() {
    let failure = failure("secret-value-${OOPS")
    #expect(failure.map { !$0.description.contains("secret-value") } == true)
  }
}
