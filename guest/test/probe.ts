/**
 * A test probe for the guest library (test/guest/json.test.ts compiles it; it is not shipped).
 * `brain_run` parses its input and answers the value written back (`{"ok": value}`) or the parse
 * error (`{"error": {"code": "parse", "message": "<error> at byte <n>"}}`); the `probe_*` exports
 * reach the pieces a loop uses directly.
 */
import { fail, Json, jsonLength, parse, parseBytes, parseElementsWhere, parseMembers, readActivation, returnError, returnOk, stringify, Utf8Writer, writeString, writeStringBytes } from "../brain"

export { brain_abi_v1, brain_alloc } from "../brain"

export function brain_run(ptr: usize, len: usize): u64 {
  const parsed = parseBytes(ptr, len)
  if (!parsed.ok) return returnError("parse", parsed.error + " at byte " + parsed.offset.toString())
  return returnOk(parsed.value!)
}

/** Parses through the string API (`parse(text)`), then answers `stringify(value)` as a JSON string. */
export function probe_string_api(ptr: usize, len: usize): u64 {
  const parsed = parse(String.UTF8.decodeUnsafe(ptr, len))
  if (!parsed.ok) return returnError("parse", parsed.error + " at byte " + parsed.offset.toString())
  return returnOk(Json.string(stringify(parsed.value!)))
}

/**
 * Writes the input (a JSON string) as a string literal with a writer that starts at `initial`
 * bytes, then answers whether the write stayed within the writer's room (`fits`: checked before
 * anything else is written, which could grow the room after the fact) and what was written.
 */
export function probe_write_string(ptr: usize, len: usize, initial: usize): u64 {
  const value = parseBytes(ptr, len).value!
  const w = new Utf8Writer(initial)
  writeString(w, value.asString())
  const fits = w.len <= w.cap
  return returnOk(Json.object().set("fits", Json.bool(fits)).set("text", Json.string(w.toString())))
}

export function probe_float(x: f64): u64 {
  return returnOk(Json.float(x))
}

export function probe_int(x: i64): u64 {
  return returnOk(Json.int(x))
}

/** The number in the input read every way: `{"integer", "i64" (as a string), "f64"}`. */
export function probe_number(ptr: usize, len: usize): u64 {
  const v = parseBytes(ptr, len).value!
  return returnOk(
    Json.object()
      .set("integer", Json.bool(v.isInteger()))
      .set("i64", Json.string(v.asI64().toString()))
      .set("f64", Json.float(v.asF64()))
  )
}

/** Builds values with the builder API: key order, replacement in place, the key index, shallow copies. */
export function probe_build(): u64 {
  const big = Json.object()
  for (let i = 0; i < 40; i++) big.set("k" + i.toString(), Json.int(i))
  big.set("k3", Json.string("replaced")).set("k39", Json.null()).set("new", Json.bool(true))
  const small = Json.object().set("b", Json.int(1)).set("a", Json.int(2)).set("b", Json.int(3))
  const list = Json.array().push(small).push(Json.float(0.5))
  const copy = list.shallowCopy().push(Json.string("only in the copy"))
  const readBack = Json.object()
    .set("k3", Json.string(big.getString("k3")))
    .set("k20", Json.int(big.getI64("k20")))
    .set("has k39", Json.bool(big.has("k39")))
    .set("k39 is null", Json.bool(big.get("k39")!.isNull()))
    .set("missing", Json.bool(big.get("nope") === null))
    .set("fallbacks", Json.array().push(Json.string(big.getString("k1", "fb"))).push(Json.int(big.getI64("k3", -1))).push(Json.bool(big.getBool("new"))))
    .set("lengths", Json.array().push(Json.int(big.length)).push(Json.int(list.length)).push(Json.int(copy.length)))
    .set("keyAt", Json.string(big.keyAt(40)))
  return returnOk(Json.object().set("big", big).set("small", small).set("list", list).set("copy", copy).set("read", readBack))
}

/** Misuses a value (`which` picks how); each aborts, which reaches Brain as brain.fail. */
export function probe_misuse(which: i32): u64 {
  const n = Json.int(1)
  if (which == 0) return returnOk(Json.string(n.asString()))
  if (which == 1) return returnOk(Json.array().at(0))
  if (which == 2) return returnOk(Json.array().get("x")!)
  if (which == 3) return returnOk(Json.bool(Json.string("x").asBool()))
  if (which == 4) throw new Error("a thrown error")
  // A long message with a lone surrogate: cut on a character boundary, still UTF-8.
  fail("\ud800 " + "😀".repeat(2000))
  return 0
}

/**
 * The input read as an object's members, each parsed from its own range: the object written back
 * (`{"ok": object}`), or the error as `brain_run` answers it.
 */
export function probe_members(ptr: usize, len: usize): u64 {
  const members = parseMembers(ptr, len)
  if (members.error.length > 0) return returnError("parse", members.error + " at byte " + members.offset.toString())
  const out = Json.object()
  for (let i = 0; i < members.keys.length; i++) {
    const start = members.starts[i]
    out.set(members.keys[i], parseBytes(start, members.ends[i] - start).value!)
  }
  return returnOk(out)
}

/**
 * The input `{"array": [...], "key": k, "value": v}`: the elements of `array` whose member `k` is
 * the string `v`, found by `parseElementsWhere` (`{"ok": [...]}`), or `{"ok": null}` when `array`
 * is not an array.
 */
export function probe_where(ptr: usize, len: usize): u64 {
  const members = parseMembers(ptr, len)
  const at = members.find("array")
  const key = parseBytes(members.starts[members.find("key")], members.ends[members.find("key")] - members.starts[members.find("key")]).value!.asString()
  const value = parseBytes(members.starts[members.find("value")], members.ends[members.find("value")] - members.starts[members.find("value")]).value!.asString()
  const found = parseElementsWhere(members.starts[at], members.ends[at] - members.starts[at], key, value)
  return returnOk(found === null ? Json.null() : found)
}

/**
 * An activation's input read through `readActivation`, as a loop reads it: `{"json": the whole
 * input, "events": eventsOfKind(kind)}` for the `kind` named by the input's `probe_kind`, the
 * Events read first when `probe_events_first` is true.
 */
export function probe_activation(ptr: usize, len: usize): u64 {
  const activation = readActivation(ptr, len)
  const kind = activation.field("probe_kind")!.asString()
  const first = activation.field("probe_events_first")
  if (first !== null && first.isBool() && first.asBool()) activation.events
  const events = activation.eventsOfKind(kind)
  return returnOk(Json.object().set("json", activation.json).set("events", events).set("all", activation.events))
}

/**
 * Values held as bytes: the input (JSON text) parsed with every member `v` kept as its text, then
 * `{"value": <it written back>, "length": jsonLength(it), "string": <the input's bytes as a
 * string held as them, written with a writer of `initial` bytes>, "stringLength": jsonLength of
 * that string, "fits": whether that write stayed within the writer's room}`.
 */
export function probe_bytes(ptr: usize, len: usize, initial: usize): u64 {
  const parsed = parseBytes(ptr, len, "v")
  if (!parsed.ok) return returnError("parse", parsed.error + " at byte " + parsed.offset.toString())
  const value = parsed.value!
  const held = Json.stringBytes(ptr, len)
  const w = new Utf8Writer(initial)
  writeStringBytes(w, ptr, len)
  const fits = w.len <= w.cap
  return returnOk(
    Json.object()
      .set("value", value)
      .set("length", Json.int(<i64>jsonLength(value)))
      .set("string", Json.text(w.ptr, w.len))
      .set("stringLength", Json.int(<i64>jsonLength(held)))
      .set("asString", Json.bool(held.asString() == String.UTF8.decodeUnsafe(ptr, len)))
      .set("fits", Json.bool(fits))
  )
}
