import Foundation
import GatehouseJSON

/// The `json` case: validation plus two key-path lookups with GatehouseJSON, against
/// `JSONSerialization.jsonObject` plus the same two dictionary lookups, on realistic API
/// bodies of about 1 KB, 100 KB and 5 MB. The second path (`meta.next_cursor`) sits after the
/// big array, so the lookup has to skip every user.

/// `{"status":"ok","data":{"total":N,"items":[user, ...]},"meta":{...}}`, deterministic.
func makeUsersDocument(targetBytes: Int) -> [UInt8] {
  var out = Array(#"{"status":"ok","data":{"items":["#.utf8)
  var index = 0
  var generator = SplitMix64(seed: 0x6A73_6F6E)
  let firstNames = ["Ann", "Bob", "Chloé", "Dmitri", "Eve", "François", "Gül", "Hiro", "Inès", "José"]
  let cities = ["Springfield", "Lyon", "München", "Osaka", "São Paulo", "Toronto"]
  let tags = [#""admin""#, #""beta""#, #""staff""#, #""trial""#, #""vip""#]
  repeat {
    if index > 0 { out.append(0x2C) }
    let id = 10_000 + index
    let name = firstNames[Int(generator.next() % 10)]
    let score = Double(generator.next() % 10_000) / 100
    let balance = -Double(generator.next() % 1_000_000) / 10
    let tagList = (0..<Int(generator.next() % 4)).map { _ in tags[Int(generator.next() % 5)] }.joined(separator: ",")
    let user = """
      {"id":\(id),"uuid":"6f1c2a8e-9b7d-4e21-8a3f-\(String(generator.next() % 0xFFFF_FFFF_FFFF, radix: 16))",\
      "name":"\(name) User\(index)","email":"user\(index)@example.com","active":\(index % 3 != 0),\
      "score":\(score),"balance":\(balance),"created_at":"2026-01-02T03:04:05Z","tags":[\(tagList)],\
      "address":{"street":"\(index % 500) Main St","city":"\(cities[index % 6])","zip":"\(10_000 + index % 89_999)",\
      "geo":{"lat":37.7749,"lng":-122.4194}},\
      "bio":"Likes \\"quotes\\", tabs\\tand unicode \\u00e9 — \(index).","manager_id":\(index % 4 == 0 ? "null" : "\(id - 1)")}
      """
    out.append(contentsOf: user.utf8)
    index += 1
  } while out.count < targetBytes - 60
  out.append(contentsOf: #"],"total":\#(index)},"meta":{"page":1,"next_cursor":"c\#(index)"}}"#.utf8)
  return out
}

func benchJSON() {
  let items = JSONKeyPath("data.items")!
  let cursor = JSONKeyPath("meta.next_cursor")!
  for (label, size, batch) in [("1KB", 1_000, 2_000), ("100KB", 100_000, 20), ("5MB", 5_000_000, 1)] {
    let document = makeUsersDocument(targetBytes: size)
    let data = Data(document)
    let ours = document.withUnsafeBytes { raw in
      measure(batch: batch) {
        guard JSONValidator.isValid(raw),
          let itemsRange = JSONDocument.range(of: items, in: raw),
          let cursorRange = JSONDocument.range(of: cursor, in: raw)
        else { fatalError("document rejected") }
        return itemsRange.count &+ cursorRange.count
      }
    }
    let foundation = measure(batch: batch) {
      guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
        let data = object["data"] as? [String: Any], let list = data["items"] as? [Any],
        let meta = object["meta"] as? [String: Any], let next = meta["next_cursor"] as? String
      else { fatalError("Foundation rejected the document") }
      return list.count &+ next.utf8.count
    }
    let oursMBps = ours.opsPerSecond * Double(document.count) / 1_000_000
    let foundationMBps = foundation.opsPerSecond * Double(document.count) / 1_000_000
    let ratio = (oursMBps / foundationMBps * 10).rounded() / 10
    print(
      "json-\(label) (\(document.count) bytes): GatehouseJSON validate+2 paths \(Int(oursMBps)) MB/s, "
        + "JSONSerialization+lookups \(Int(foundationMBps)) MB/s, ratio \(ratio)x "
        + "(check \((ours.sink ^ foundation.sink) & 0xFF))")
  }
  // The parts on their own, on the 5 MB document.
  let document = makeUsersDocument(targetBytes: 5_000_000)
  document.withUnsafeBytes { raw in
    let validate = measure(batch: 1) { JSONValidator.isValid(raw) ? 1 : 0 }
    report("json-5MB-validate-only", bytesPerOp: raw.count, validate)
    let lookup = measure(batch: 1) { JSONDocument.range(of: cursor, in: raw)?.count ?? 0 }
    report("json-5MB-skip-to-last-member", bytesPerOp: raw.count, lookup)
  }
}
