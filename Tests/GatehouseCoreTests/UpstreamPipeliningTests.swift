import GatehouseHTTP
import Testing

@testable import GatehouseCore

@Suite struct UpstreamPipeliningTests {
  // MARK: Which requests may be pipelined

  @Test func onlyBodilessGETsNotDroppedBeforeMayJoin() {
    #expect(PipelinePolicy.mayJoin(method: .get, hasBody: false, isResend: false))
    #expect(!PipelinePolicy.mayJoin(method: .post, hasBody: false, isResend: false))
    #expect(!PipelinePolicy.mayJoin(method: .get, hasBody: true, isResend: false))
    #expect(!PipelinePolicy.mayJoin(method: .get, hasBody: false, isResend: true))
    // HEAD's answer has no body to mark its end: a body sent anyway would shift answers.
    #expect(!PipelinePolicy.mayJoin(method: .head, hasBody: false, isResend: false))
  }

  // MARK: The queue behind an answer

  @Test func waitingRequestsOwnTheConnectionInOrder() {
    var queue = PipelineQueue<Int>()
    queue.append(2)
    queue.append(3)
    guard case .promote(let next) = queue.headFinished(reusable: true) else {
      Issue.record("expected the second request to be promoted")
      return
    }
    #expect(next == 2)
    guard case .promote(let last) = queue.headFinished(reusable: true) else {
      Issue.record("expected the third request to be promoted")
      return
    }
    #expect(last == 3)
    guard case .release = queue.headFinished(reusable: true) else {
      Issue.record("an empty queue releases the connection")
      return
    }
  }

  @Test func anAnswerThatEndsTheConnectionDropsEveryWaitingRequest() {
    var queue = PipelineQueue<Int>()
    queue.append(2)
    queue.append(3)
    guard case .close(let dropped) = queue.headFinished(reusable: false) else {
      Issue.record("a connection that cannot be reused closes")
      return
    }
    #expect(dropped == [2, 3])
    #expect(queue.isEmpty)
  }

  @Test func unreusableWithNothingWaitingClosesWithoutDrops() {
    var queue = PipelineQueue<Int>()
    guard case .close(let dropped) = queue.headFinished(reusable: false) else {
      Issue.record("expected close")
      return
    }
    #expect(dropped.isEmpty)
  }

  @Test func aWaitingRequestThatGivesUpSpoilsTheConnectionAfterTheCurrentAnswer() {
    var queue = PipelineQueue<Int>()
    queue.append(2)
    queue.append(3)
    queue.append(4)
    let abandoned = queue.abandon(where: { $0 == 3 })
    let unknown = queue.abandon(where: { $0 == 9 })
    #expect(abandoned)
    #expect(queue.spoiled)
    #expect(!unknown)
    // The answers on the wire are now 1, 2, 3, 4 for requests 1, 2, 4: after the current
    // one they no longer line up, so the rest go elsewhere.
    guard case .close(let dropped) = queue.headFinished(reusable: true) else {
      Issue.record("a spoiled queue closes the connection")
      return
    }
    #expect(dropped == [2, 4])
  }

  @Test func aSpoiledConnectionIsNotReleasedForReuse() {
    var queue = PipelineQueue<Int>()
    queue.append(2)
    let abandoned = queue.abandon(where: { $0 == 2 })
    #expect(abandoned)
    guard case .close(let dropped) = queue.headFinished(reusable: true) else {
      Issue.record("a spoiled connection closes")
      return
    }
    #expect(dropped.isEmpty)
  }

  @Test func dropAllEmptiesTheQueue() {
    var queue = PipelineQueue<Int>()
    queue.append(5)
    queue.append(6)
    #expect(queue.dropAll() == [5, 6])
    #expect(queue.isEmpty)
    #expect(queue.dropAll().isEmpty)
  }

  // MARK: The batch of a loop turn

  @Test func requestsOfTheSameTurnJoinUpToTheDepth() {
    var batch = PipelineBatch<Int>(maxDepth: 3)
    #expect(batch.join(turn: 10) == nil)  // nothing started yet: lease
    batch.start(7, turn: 10)
    #expect(!batch.isFull)
    #expect(batch.join(turn: 10) == 7)
    #expect(!batch.isFull)
    #expect(batch.join(turn: 10) == 7)
    #expect(batch.isFull)
    #expect(batch.join(turn: 10) == nil)
  }

  @Test func aNewTurnStartsANewBatch() {
    var batch = PipelineBatch<Int>(maxDepth: 8)
    batch.start(7, turn: 10)
    #expect(batch.join(turn: 11) == nil)
    batch.start(8, turn: 11)
    #expect(batch.join(turn: 11) == 8)
  }

  @Test func anEndedConnectionTakesNoMoreRequests() {
    var batch = PipelineBatch<Int>(maxDepth: 8)
    batch.start(7, turn: 10)
    batch.end(3)  // another connection: no effect
    #expect(batch.join(turn: 10) == 7)
    batch.end(7)
    #expect(batch.join(turn: 10) == nil)
    #expect(batch.connection == nil)
  }

  @Test func depthOneOrZeroNeverStartsABatch() {
    for depth in [0, 1] {
      var batch = PipelineBatch<Int>(maxDepth: depth)
      batch.start(7, turn: 10)
      #expect(batch.connection == nil)
      #expect(batch.join(turn: 10) == nil)
    }
  }

  // MARK: The answer-time gate

  @Test func anUpstreamIsFastOnlyOnceMeasuredUnderTheCeiling() {
    var average = AnswerTimeAverage()
    #expect(!average.isFast)  // unknown: not fast
    average.record(100_000)
    #expect(average.isFast)
    #expect(average.nanoseconds == 100_000)
  }

  @Test func slowAnswersMoveTheAverageAboveTheCeilingAndFastOnesBack() {
    var average = AnswerTimeAverage()
    average.record(500_000)
    var slowSamples = 0
    while average.isFast && slowSamples < 100 {
      average.record(50_000_000)
      slowSamples += 1
    }
    #expect(!average.isFast)
    // One answer a hundred times slower than usual is enough to stop pipelining.
    #expect(slowSamples == 1)
    #expect(average.nanoseconds == 500_000 + (50_000_000 - 500_000) / 8)
    var fastSamples = 0
    while !average.isFast && fastSamples < 200 {
      average.record(100_000)
      fastSamples += 1
    }
    #expect(average.isFast)
    #expect(fastSamples > 1)
  }

  @Test func theAverageWeighsANewSampleByAnEighth() {
    var average = AnswerTimeAverage()
    average.record(800)
    average.record(1600)
    #expect(average.nanoseconds == 900)
    average.record(100)
    #expect(average.nanoseconds == 800)
  }
}
