/**
 * An Agentloop activation's input (docs/abi.md, "The entries"), read through named getters so a
 * loop does not spell the field names. A field Brain did not send reads as empty (an empty
 * transcript, no turn input), never as a trap.
 *
 * The input is checked whole when it is read, but each field is parsed only when a loop first asks
 * for it: a loop pays for the fields it reads (the official loop never reads `configuration`,
 * which carries every tool's schema), and `eventsOfKind` parses only the Events it asks for.
 */
import { fail } from "./abi"
import { Json, Members, parseBytes, parseElementsWhere, parseMembers } from "./json"

export class Activation {
  private parsed: Array<Json | null>
  private whole: Json | null = null

  constructor(private members: Members) {
    this.parsed = new Array<Json | null>(members.keys.length)
  }

  /** The whole input as one JSON object (every field parsed). */
  get json(): Json {
    let whole = this.whole
    if (whole === null) {
      whole = Json.object()
      for (let i = 0; i < this.members.keys.length; i++) whole.set(this.members.keys[i], this.at(i))
      this.whole = whole
    }
    return whole
  }

  /** The field `name`, parsed on first use; null when the input has none. */
  field(name: string): Json | null {
    const i = this.members.find(name)
    return i < 0 ? null : this.at(i)
  }

  private at(i: i32): Json {
    let v = this.parsed[i]
    if (v === null) {
      const start = this.members.starts[i]
      const parsed = parseBytes(start, this.members.ends[i] - start)
      // The input was checked whole when it was read: a field that does not parse now is a bug here.
      if (!parsed.ok) fail("the input's " + this.members.keys[i] + " does not parse: " + parsed.error)
      v = parsed.value!
      this.parsed[i] = v
    }
    return v
  }

  /** The turn input `{"message", "media"?}`, or null when this activation has none. */
  get input(): Json | null {
    return present(this.field("input"))
  }

  /** The user's message, or null when this activation has no turn input. */
  get message(): string | null {
    const input = this.input
    return input === null || !input.isObject() ? null : input.getString("message")
  }

  /**
   * The saved transcript as the input gives it: an array of messages, all of them, or for a loop
   * that reads the tail (`brain_transcript_tail`) those from `transcriptStart` on.
   */
  get transcript(): Json {
    const v = present(this.field("transcript"))
    return v !== null && v.isArray() ? v : Json.array()
  }

  /** The index of `transcript`'s first message in the saved transcript (0 when it is all of it). */
  get transcriptStart(): i32 {
    const v = present(this.field("transcript_start"))
    return v !== null && v.isNumber() ? <i32>v.asI64() : 0
  }

  /**
   * The committed outcomes of the transcript's unanswered tool calls, each `{call_id, name, outcome,
   * output, is_error}` as `dispatch` answers: given only after a round of calls was cut short (a
   * cancel, a restart), until a save answers those calls; empty otherwise.
   */
  get toolResults(): Json {
    const v = present(this.field("tool_results"))
    return v !== null && v.isArray() ? v : Json.array()
  }

  /**
   * `toolResults` with each `output` kept as its JSON text (`Json.text`, not a parsed value), as
   * `dispatchSaving` keeps a round's when asked: a loop that only passes the outputs on to its
   * model holds them once, as the input's bytes. Parsed anew on each use.
   */
  get toolResultsAsText(): Json {
    const i = this.members.find("tool_results")
    if (i < 0) return Json.array()
    const start = this.members.starts[i]
    const parsed = parseBytes(start, this.members.ends[i] - start, "output")
    if (!parsed.ok) fail("the input's tool_results does not parse: " + parsed.error)
    const v = parsed.value!
    return v.isArray() ? v : Json.array()
  }

  /**
   * The session's configuration (`agentloop`, `model`, `system`, `tools`, …); an empty object for
   * a loop that exports `brain_configuration_unread`, whose input leaves it out.
   */
  get configuration(): Json {
    const v = present(this.field("configuration"))
    return v !== null && v.isObject() ? v : Json.object()
  }

  /**
   * Public Events since the previous activation's start (or its end, for a loop that exports
   * `brain_events_from_end`): an array of `{session_id, sequence, recorded_at_ms, kind, data, origin}`.
   */
  get events(): Json {
    const v = present(this.field("events"))
    return v !== null && v.isArray() ? v : Json.array()
  }

  /**
   * The Events of one kind among `events`, in order: only those are parsed, the others skipped
   * where they lie. Cheaper than `events` when a loop looks for a few (the official loop reads
   * only `turn_failed`).
   */
  eventsOfKind(kind: string): Json {
    const i = this.members.find("events")
    if (i < 0) return Json.array()
    const parsed = this.parsed[i]
    if (parsed !== null) return ofKind(parsed, kind)
    const start = this.members.starts[i]
    const found = parseElementsWhere(start, this.members.ends[i] - start, "kind", kind)
    return found === null ? Json.array() : found
  }

  /**
   * `{session_id, turn, activation, now_ms, seed}`; an empty object for a loop that exports
   * `brain_runtime_unread`, whose input leaves it out.
   */
  get runtime(): Json {
    const v = present(this.field("runtime"))
    return v !== null && v.isObject() ? v : Json.object()
  }

  get sessionId(): string { return this.runtime.getString("session_id") }
  /** The `turn_started` sequence. */
  get turn(): i64 { return this.runtime.getI64("turn") }
  /** The `activation_started` sequence. */
  get activation(): i64 { return this.runtime.getI64("activation") }
  /** Logical time: the activation's start, epoch milliseconds (there is no clock). */
  get nowMs(): i64 { return this.runtime.getI64("now_ms") }
  /** A deterministic seed for this activation (there is no other randomness). */
  get seed(): i64 { return this.runtime.getI64("seed") }
}

/** Reads `brain_run`'s input. */
export function readActivation(ptr: usize, len: usize): Activation {
  const members = parseMembers(ptr, len)
  if (members.error == "not a JSON object") {
    // Brain always sends an object; anything else is ABI misuse.
    throw new Error("the activation input is not a JSON object")
  }
  if (members.error.length > 0) fail("the input is not JSON: " + members.error + " at byte " + members.offset.toString())
  return new Activation(members)
}

/** `{"role": role, "content": content}`: a transcript message with text content. */
export function message(role: string, content: string): Json {
  return Json.object().set("role", Json.string(role)).set("content", Json.string(content))
}

/** The elements of `events` (an array, or anything) that are objects whose `kind` is the string `kind`. */
function ofKind(events: Json, kind: string): Json {
  const out = Json.array()
  if (!events.isArray()) return out
  for (let i = 0; i < events.length; i++) {
    const e = events.at(i)
    if (!e.isObject()) continue
    const k = e.get("kind")
    if (k !== null && k.isString() && k.asString() == kind) out.push(e)
  }
  return out
}

function present(v: Json | null): Json | null {
  return v === null || v.isNull() ? null : v
}
