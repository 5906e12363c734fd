import Testing

@testable import GatehouseCore

/// The tier going down and up again, said once for the whole process however many loops'
/// connections see it (`SharedTierWarnings.linkWentDown`, `linkCameUp`, `linkStopped`).
@Suite struct SharedTierLinkLogTests {
  private final class Link {}

  @Test func oneLineWhenTheTierGoesAndOneWhenEveryConnectionIsBack() {
    let log = PipeLogger(level: .info)
    let warnings = SharedTierWarnings(logger: log.logger)
    let (first, second, replacement) = (Link(), Link(), Link())
    let (a, b, c) = (ObjectIdentifier(first), ObjectIdentifier(second), ObjectIdentifier(replacement))
    let url = "redis://cache:6379/0"
    /// Every line so far, as `down` or `up`.
    func messages() -> [String] {
      log.lines().map { line in
        line.contains(SharedTierWarnings.tierDown) ? "down" : line.contains(SharedTierWarnings.tierUp) ? "up" : line
      }
    }

    // Connections coming up at start say nothing.
    warnings.linkCameUp(a, url: url)
    warnings.linkCameUp(b, url: url)
    #expect(messages().isEmpty)

    // Both loops lose the tier: one warning, with the first one's problem.
    warnings.linkWentDown(a, problem: "commands timed out 3 times in a row (no reply within 50 ms)", url: url)
    warnings.linkWentDown(b, problem: "the server closed the connection", url: url)
    let lines = log.lines()
    #expect(messages() == ["down"])
    #expect(lines.first?.contains(#""level":"warn""#) == true)
    #expect(lines.first?.contains("commands timed out 3 times in a row") == true)
    #expect(lines.first?.contains("cache:6379") == true)

    // Up again only once both are.
    warnings.linkCameUp(a, url: url)
    #expect(messages() == ["down"])
    warnings.linkCameUp(b, url: url)
    #expect(messages() == ["down", "up"])
    #expect(log.lines().last?.contains(#""level":"info""#) == true)

    // A new outage; the connection that saw it is replaced by a reload, and its
    // replacement coming up ends it.
    warnings.linkWentDown(a, problem: "the server closed the connection", url: url)
    warnings.linkStopped(a)
    #expect(messages() == ["down", "up", "down"])
    warnings.linkCameUp(c, url: url)
    #expect(messages() == ["down", "up", "down", "up"])
  }
}
