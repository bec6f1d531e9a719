/**
 * An Agentloop activation's input (docs/abi.md, "The entries"), read through named getters so a
 * loop does not spell the field names. A field Brain did not send reads as empty (an empty
 * transcript, no turn input), never as a trap.
 */
import { readInput } from "./abi"
import { Json } from "./json"

export class Activation {
  constructor(public json: Json) {}

  /** The turn input `{"message", "media"?}`, or null when this activation has none. */
  get input(): Json | null {
    return present(this.json.get("input"))
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
    const v = present(this.json.get("transcript"))
    return v !== null && v.isArray() ? v : Json.array()
  }

  /** The index of `transcript`'s first message in the saved transcript (0 when it is all of it). */
  get transcriptStart(): i32 {
    const v = present(this.json.get("transcript_start"))
    return v !== null && v.isNumber() ? <i32>v.asI64() : 0
  }

  /** The session's configuration (`agentloop`, `model`, `system`, `tools`, …). */
  get configuration(): Json {
    const v = present(this.json.get("configuration"))
    return v !== null && v.isObject() ? v : Json.object()
  }

  /**
   * Public Events since the previous activation's start (or its end, for a loop that exports
   * `brain_events_from_end`): an array of `{session_id, sequence, recorded_at_ms, kind, data, origin}`.
   */
  get events(): Json {
    const v = present(this.json.get("events"))
    return v !== null && v.isArray() ? v : Json.array()
  }

  /** `{session_id, turn, activation, now_ms, seed}`. */
  get runtime(): Json {
    const v = present(this.json.get("runtime"))
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
  const json = readInput(ptr, len)
  if (!json.isObject()) {
    // Brain always sends an object; anything else is ABI misuse.
    throw new Error("the activation input is not a JSON object")
  }
  return new Activation(json)
}

/** `{"role": role, "content": content}`: a transcript message with text content. */
export function message(role: string, content: string): Json {
  return Json.object().set("role", Json.string(role)).set("content", Json.string(content))
}

function present(v: Json | null): Json | null {
  return v === null || v.isNull() ? null : v
}
