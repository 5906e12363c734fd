@testable import GatehouseJSON

/// One JSONTestSuite-style case: `y_` must be accepted, `n_` rejected with `reason` at `offset`
/// (when given).
struct ValidationCase: Sendable, CustomStringConvertible {
  let name: String
  let bytes: [UInt8]
  let reason: JSONError.Reason?
  let offset: Int?

  var description: String { name }

  static func y(_ name: String, _ text: String) -> Self {
    Self(name: "y_" + name, bytes: Array(text.utf8), reason: nil, offset: nil)
  }

  static func y(_ name: String, bytes: [UInt8]) -> Self {
    Self(name: "y_" + name, bytes: bytes, reason: nil, offset: nil)
  }

  static func n(_ name: String, _ text: String, _ reason: JSONError.Reason, at offset: Int? = nil) -> Self {
    Self(name: "n_" + name, bytes: Array(text.utf8), reason: reason, offset: offset)
  }

  static func n(_ name: String, bytes: [UInt8], _ reason: JSONError.Reason, at offset: Int? = nil) -> Self {
    Self(name: "n_" + name, bytes: bytes, reason: reason, offset: offset)
  }
}

/// `"` + bytes + `"`: a string literal around raw bytes.
func quoted(_ bytes: [UInt8]) -> [UInt8] { [0x22] + bytes + [0x22] }

let nestedArrays512 = String(repeating: "[", count: 512) + String(repeating: "]", count: 512)
let nestedArrays513 = String(repeating: "[", count: 513) + String(repeating: "]", count: 513)
let nestedObjects513 = String(repeating: #"{"a":"#, count: 513) + "1" + String(repeating: "}", count: 513)

let validCases: [ValidationCase] = [
  .y("array_empty", "[]"),
  .y("array_empty_ws", "[ \t\n\r]"),
  .y("array_nested", "[[[]],[]]"),
  .y("array_mixed", #"[1,"a",true,false,null,{},[],-0.5]"#),
  .y("array_ws_everywhere", " [ 1 , [ 2 ] , { } ] "),
  .y("object_empty", "{}"),
  .y("object_basic", #"{"a":1}"#),
  .y("object_ws", #" { "a" : 1 , "b" : [ ] } "#),
  .y("object_duplicate_keys", #"{"a":1,"a":2}"#),
  .y("object_empty_key", #"{"":0}"#),
  .y("object_nested", #"{"a":{"b":{"c":[1,{"d":null}]}}}"#),
  .y("object_escaped_key", #"{"\u0061\n":true}"#),
  .y("string_empty", #""""#),
  .y("string_all_simple_escapes", #""\"\\\/\b\f\n\r\t""#),
  .y("string_u_escape", #""\u0041""#),
  .y("string_u_escape_upper_hex", #""\u00E9\uABCD""#),
  .y("string_u_escape_lower_hex", #""\u00e9\uabcd""#),
  .y("string_u_escape_nul", #""\u0000""#),
  .y("string_surrogate_pair", #""\uD83D\uDE00""#),
  .y("string_surrogate_pair_lower", #""\ud83d\ude00""#),
  .y("string_last_surrogates", #""\uDBFF\uDFFF""#),
  .y("string_utf8_two_bytes", #""é""#),
  .y("string_utf8_three_bytes", #""€ 中文""#),
  .y("string_utf8_four_bytes", #""😀""#),
  .y("string_utf8_max_code_point", bytes: quoted([0xF4, 0x8F, 0xBF, 0xBF])),
  .y("string_utf8_smallest_three_byte", bytes: quoted([0xE0, 0xA0, 0x80])),
  .y("string_utf8_before_surrogates", bytes: quoted([0xED, 0x9F, 0xBF])),
  .y("string_utf8_after_surrogates", bytes: quoted([0xEE, 0x80, 0x80])),
  .y("string_utf8_smallest_four_byte", bytes: quoted([0xF0, 0x90, 0x80, 0x80])),
  .y("string_noncharacter", bytes: quoted([0xEF, 0xBF, 0xBF])),
  .y("string_del", bytes: quoted([0x7F])),
  .y("string_long", "\"" + String(repeating: "abcdefghij", count: 100) + "\""),
  .y("string_slash_unescaped", #""a/b""#),
  .y("string_escape_after_eight", #""12345678\n12345678\"""#),
  .y("number_zero", "0"),
  .y("number_negative_zero", "-0"),
  .y("number_one", "1"),
  .y("number_negative", "-123"),
  .y("number_fraction", "1.5"),
  .y("number_zero_fraction", "0.0"),
  .y("number_exponent", "1e5"),
  .y("number_exponent_upper_plus", "1E+2"),
  .y("number_exponent_minus", "1e-2"),
  .y("number_zero_exponent", "0e0"),
  .y("number_full", "-123.456e-789"),
  .y("number_big_exponent", "1E400"),
  .y("number_huge_integer", String(repeating: "9", count: 100)),
  .y("number_long_fraction", "0." + String(repeating: "1", count: 80)),
  .y("number_in_array", "[0,-0,1.0e+1,2E-2]"),
  .y("number_ws", " 12 \n"),
  .y("literal_true", "true"),
  .y("literal_false", "false"),
  .y("literal_null", "null"),
  .y("literals_in_array", "[true,false,null]"),
  .y("ws_all_kinds", " \t\n\r{} \t\n\r"),
  .y("depth_512", nestedArrays512),
]

let invalidCases: [ValidationCase] = [
  .n("empty", "", .unexpectedEnd, at: 0),
  .n("ws_only", " \n", .unexpectedEnd, at: 2),
  .n("bom", "\u{FEFF}{}", .byteOrderMark, at: 0),
  .n("bom_after_ws", " \u{FEFF}{}", .unexpectedByte, at: 1),
  .n("array_trailing_comma", "[1,]", .trailingComma, at: 3),
  .n("object_trailing_comma", #"{"a":1,}"#, .trailingComma, at: 7),
  .n("nested_trailing_comma", "[[],]", .trailingComma, at: 4),
  .n("array_leading_comma", "[,1]", .unexpectedByte, at: 1),
  .n("array_double_comma", "[1,,2]", .unexpectedByte, at: 3),
  .n("array_comma_only", "[,]", .unexpectedByte, at: 1),
  .n("array_unclosed", "[1", .unexpectedEnd, at: 2),
  .n("array_unclosed_comma", "[1,", .unexpectedEnd, at: 3),
  .n("array_unclosed_empty", "[", .unexpectedEnd, at: 1),
  .n("array_closed_by_brace", "[1}", .mismatchedClose, at: 2),
  .n("object_closed_by_bracket", #"{"a":1]"#, .mismatchedClose, at: 6),
  .n("array_missing_comma", "[1 2]", .expectedCommaOrClose, at: 3),
  .n("array_colon", "[1:2]", .expectedCommaOrClose, at: 2),
  .n("array_extra_close", "[]]", .trailingContent, at: 2),
  .n("close_only", "]", .unexpectedByte, at: 0),
  .n("object_missing_colon", #"{"a" 1}"#, .expectedColon, at: 5),
  .n("object_comma_for_colon", #"{"a",1}"#, .expectedColon, at: 4),
  .n("object_double_colon", #"{"a"::1}"#, .unexpectedByte, at: 5),
  .n("object_number_key", "{1:2}", .expectedKey, at: 1),
  .n("object_single_quoted_key", "{'a':1}", .expectedKey, at: 1),
  .n("object_unquoted_key", "{a:1}", .expectedKey, at: 1),
  .n("object_missing_value", #"{"a":}"#, .unexpectedByte, at: 5),
  .n("object_comma_only", "{,}", .expectedKey, at: 1),
  .n("object_missing_key_after_comma", #"{"a":1,2}"#, .expectedKey, at: 7),
  .n("object_unclosed", #"{"a":1"#, .unexpectedEnd, at: 6),
  .n("object_key_only", #"{"a""#, .unexpectedEnd, at: 4),
  .n("object_open_key", #"{"a"#, .unexpectedEnd, at: 3),
  .n("object_trailing_garbage", "{}x", .trailingContent, at: 2),
  .n("two_values", "1 2", .trailingContent, at: 2),
  .n("two_objects", "{}{}", .trailingContent, at: 2),
  .n("nul_after_value", "1\u{0}", .trailingContent, at: 1),
  .n("line_comment", "[1]//x", .trailingContent, at: 3),
  .n("block_comment", "/*x*/[]", .unexpectedByte, at: 0),
  .n("formfeed_whitespace", "[\u{0C}]", .unexpectedByte, at: 1),
  .n("nbsp_whitespace", "[\u{A0}1]", .unexpectedByte, at: 1),
  .n("number_leading_zero", "01", .leadingZero, at: 1),
  .n("number_negative_leading_zero", "-01", .leadingZero, at: 2),
  .n("number_double_zero_in_array", "[00]", .leadingZero, at: 2),
  .n("number_plus", "+1", .unexpectedByte, at: 0),
  .n("number_dot_first", ".5", .unexpectedByte, at: 0),
  .n("number_dot_last", "1.", .unexpectedEnd, at: 2),
  .n("number_dot_last_in_array", "[1.]", .invalidNumber, at: 3),
  .n("number_minus_only", "-", .unexpectedEnd, at: 1),
  .n("number_minus_space", "- 1", .invalidNumber, at: 1),
  .n("number_minus_dot", "-.5", .invalidNumber, at: 1),
  .n("number_dot_exponent", "1.e5", .invalidNumber, at: 2),
  .n("number_exponent_empty", "1e", .unexpectedEnd, at: 2),
  .n("number_exponent_empty_in_array", "[1e]", .invalidNumber, at: 3),
  .n("number_exponent_sign_only", "[1e+]", .invalidNumber, at: 4),
  .n("number_exponent_double_sign", "1e+-1", .invalidNumber, at: 3),
  .n("number_hex", "0x1", .trailingContent, at: 1),
  .n("number_two_dots", "1.2.3", .trailingContent, at: 3),
  .n("number_infinity", "Infinity", .unexpectedByte, at: 0),
  .n("number_negative_infinity", "-Infinity", .invalidNumber, at: 1),
  .n("number_nan", "NaN", .unexpectedByte, at: 0),
  .n("number_arabic_indic_digit", "٣", .unexpectedByte, at: 0),
  .n("literal_capitalized", "True", .unexpectedByte, at: 0),
  .n("literal_truncated", "tru", .unexpectedEnd, at: 3),
  .n("literal_wrong_letter", "trux", .invalidLiteral, at: 3),
  .n("literal_null_truncated", "nul", .unexpectedEnd, at: 3),
  .n("literal_null_extra", "nulll", .trailingContent, at: 4),
  .n("literal_false_in_array", "[fals]", .invalidLiteral, at: 5),
  .n("literal_nil", "nil", .invalidLiteral, at: 1),
  .n("string_unterminated", #""abc"#, .unexpectedEnd, at: 4),
  .n("string_unterminated_long", "\"" + String(repeating: "x", count: 40), .unexpectedEnd, at: 41),
  .n("string_single_quoted", "'a'", .unexpectedByte, at: 0),
  .n("string_raw_tab", "\"a\tb\"", .controlCharacterInString, at: 2),
  .n("string_raw_newline", "\"a\nb\"", .controlCharacterInString, at: 2),
  .n("string_raw_nul", "\"\u{0}\"", .controlCharacterInString, at: 1),
  .n("string_raw_unit_separator", "\"\u{1F}\"", .controlCharacterInString, at: 1),
  .n("string_raw_control_after_eight", "\"abcdefghijkl\u{01}\"", .controlCharacterInString, at: 13),
  .n("string_escape_a", #""\a""#, .invalidEscape, at: 2),
  .n("string_escape_x", #""\x41""#, .invalidEscape, at: 2),
  .n("string_escape_single_quote", #""\'""#, .invalidEscape, at: 2),
  .n("string_escape_capital_u", #""\U0041""#, .invalidEscape, at: 2),
  .n("string_escape_zero", #""\0""#, .invalidEscape, at: 2),
  .n("string_escape_at_end", #""\"#, .unexpectedEnd, at: 2),
  .n("string_escaped_raw_newline", "\"\\\n\"", .invalidEscape, at: 2),
  .n("string_u_short", #""\u12""#, .invalidUnicodeEscape, at: 5),
  .n("string_u_nonhex", #""\u12G4""#, .invalidUnicodeEscape, at: 5),
  .n("string_u_truncated", #""\u00"#, .unexpectedEnd, at: 5),
  .n("string_lone_high_surrogate", #""\uD800""#, .loneSurrogate, at: 7),
  .n("string_lone_high_then_text", #""\uD800abc""#, .loneSurrogate, at: 7),
  .n("string_lone_low_surrogate", #""\uDC00""#, .loneSurrogate, at: 6),
  .n("string_two_high_surrogates", #""\uD800\uD800""#, .loneSurrogate, at: 12),
  .n("string_high_then_other_escape", #""\uD800\n""#, .loneSurrogate, at: 8),
  .n("string_reversed_pair", #""\uDE00\uD83D""#, .loneSurrogate, at: 6),
  .n("string_high_then_plain_u_escape", #""\uD800\u0041""#, .loneSurrogate, at: 12),
  .n("utf8_lone_continuation", bytes: quoted([0x80]), .invalidUTF8, at: 1),
  .n("utf8_lone_continuation_bf", bytes: quoted([0x61, 0xBF]), .invalidUTF8, at: 2),
  .n("utf8_overlong_c0", bytes: quoted([0xC0, 0x80]), .invalidUTF8, at: 1),
  .n("utf8_overlong_c1", bytes: quoted([0xC1, 0xBF]), .invalidUTF8, at: 1),
  .n("utf8_overlong_three_bytes", bytes: quoted([0xE0, 0x80, 0x80]), .invalidUTF8, at: 2),
  .n("utf8_overlong_three_bytes_max", bytes: quoted([0xE0, 0x9F, 0xBF]), .invalidUTF8, at: 2),
  .n("utf8_overlong_four_bytes", bytes: quoted([0xF0, 0x80, 0x80, 0x80]), .invalidUTF8, at: 2),
  .n("utf8_overlong_four_bytes_max", bytes: quoted([0xF0, 0x8F, 0xBF, 0xBF]), .invalidUTF8, at: 2),
  .n("utf8_surrogate_high", bytes: quoted([0xED, 0xA0, 0x80]), .invalidUTF8, at: 2),
  .n("utf8_surrogate_low", bytes: quoted([0xED, 0xBF, 0xBF]), .invalidUTF8, at: 2),
  .n("utf8_above_max", bytes: quoted([0xF4, 0x90, 0x80, 0x80]), .invalidUTF8, at: 2),
  .n("utf8_f5", bytes: quoted([0xF5, 0x80, 0x80, 0x80]), .invalidUTF8, at: 1),
  .n("utf8_fe", bytes: quoted([0xFE]), .invalidUTF8, at: 1),
  .n("utf8_ff", bytes: quoted([0xFF]), .invalidUTF8, at: 1),
  .n("utf8_truncated_two_bytes", bytes: quoted([0xC3]), .invalidUTF8, at: 2),
  .n("utf8_truncated_three_bytes", bytes: quoted([0xE2, 0x82]), .invalidUTF8, at: 3),
  .n("utf8_truncated_four_bytes", bytes: quoted([0xF0, 0x9F, 0x98]), .invalidUTF8, at: 4),
  .n("utf8_bad_second_continuation", bytes: quoted([0xE2, 0x82, 0x41]), .invalidUTF8, at: 3),
  .n("utf8_truncated_at_end", bytes: [0x22, 0xC3], .unexpectedEnd, at: 2),
  .n("utf8_outside_string", bytes: [0x5B, 0xC3, 0xA9, 0x5D], .unexpectedByte, at: 1),
  .n("depth_513_arrays", nestedArrays513, .depthLimitExceeded, at: 512),
  .n("depth_513_objects", nestedObjects513, .depthLimitExceeded, at: 512 * 5),
  .n("depth_unclosed_512", String(repeating: "[", count: 512), .unexpectedEnd, at: 512),
]

let allValidationCases = validCases + invalidCases
