/**
 * The official loop's transcript rules, as src/loops/official.ts has them, value for value: the
 * messages it adds have the same keys in the same order (`role`, `content`, `tool_calls`; a tool
 * result is `role`, `tool_call_id`, `content`), and a field the TypeScript loop would leave
 * `undefined` (so `JSON.stringify` drops it) is left out here too.
 */
import { Json, stringify, stringifyBytes } from "../../guest/brain"

const INTERRUPTED = "the call was interrupted; it may or may not have run"

/**
 * What a call of a round Brain refused whole before journaling any of its calls is answered with
 * (docs/abi.md, "dispatch"): that it was not run, and Brain's reason. Such a refusal is one of
 * `tool_call_limit` (more calls than BRAIN_MAX_TOOL_CALLS_PER_DISPATCH) and `turn_write_limit`
 * (their starts would pass the turn's or the session's journal bound), not ambiguous; null for any
 * other error, whose calls a later repair answers from their records or as interrupted.
 */
export function notRunNote(code: string, message: string, ambiguous: bool): string | null {
  if (ambiguous || (code != "tool_call_limit" && code != "turn_write_limit")) return null
  return "the call was not run: " + code + ": " + message
}

/**
 * A tool result message: the output's JSON text, or `{"outcome", "error": output}` when it failed.
 * The content is held as UTF-8 bytes, not UTF-16: an output `dispatchSaving` kept as its text
 * (`Json.text`) is used where it lies in the answer, with no copy, and anything else is written
 * once. A round's outputs then cost the loop their size once, not six times (docs/agentloops.md,
 * "A round's outputs").
 */
export function toolMessage(callId: Json | null, output: Json | null, isError: bool, outcome: Json | null): Json {
  let content: Json | null = output
  if (isError) {
    const failed = Json.object()
    setPresent(failed, "outcome", outcome)
    setPresent(failed, "error", output)
    content = failed
  }
  const m = Json.object().set("role", Json.string("tool"))
  setPresent(m, "tool_call_id", callId)
  // JSON.stringify(undefined) is undefined, which the TypeScript loop writes as "null".
  if (content === null) return m.set("content", Json.string("null"))
  return m.set("content", content.isText() ? Json.stringBytes(content.textPointer, content.textLength) : stringifyBytes(content))
}

/**
 * The content a tool result carries instead of an output of `bytes` bytes of JSON that no request
 * within `limit` (BRAIN_MAX_WASM_IO_BYTES) could carry to the model, naming the Event that holds
 * it as Brain's own such notes do (docs/abi.md, "The input's tool results").
 */
export function notCarried(bytes: usize, limit: usize, outcome: Json | null): string {
  const kind = outcome !== null && outcome.isString() ? outcome.asString() : ""
  const event = kind == "ok" ? "tool_call_ended" : kind == "error" ? "tool_call_ended or tool_call_failed" : "tool_call_failed"
  return "[not carried: this output is " + bytes.toString() + " bytes as JSON, more than a request to Brain holds beside the rest (BRAIN_MAX_WASM_IO_BYTES, " +
    limit.toString() + " bytes); the call's " + event + " Event holds it]"
}

/**
 * Adds a result to every tool call that has none, right after its assistant message's results:
 * its committed outcome when `committed` (the input's `tool_results`) has one, else that it was
 * interrupted. A call is answered by a tool message with its id anywhere after it. Answers
 * `transcript` itself when every call has its result.
 */
export function repairTranscript(transcript: Json, committed: Json): Json {
  const n = transcript.length
  // From the end: the ids of the tool messages after each assistant message. Both made at their
  // first entry: a transcript with no tool call left unanswered (a text turn's) makes neither.
  let open: Map<i32, Array<Json | null>> | null = null
  let later: Set<string> | null = null
  for (let i = n - 1; i >= 0; i--) {
    const m = transcript.at(i)
    const role = roleOf(m)
    if (role == "tool") {
      const id = m.get("tool_call_id")
      if (id !== null && id.isString() && id.asString().length > 0) {
        if (later === null) later = new Set<string>()
        later.add(id.asString())
      }
      continue
    }
    if (role != "assistant") continue
    const calls = m.get("tool_calls")
    if (calls === null || !calls.isArray() || calls.length == 0) continue
    const unanswered = new Array<Json | null>()
    for (let k = 0; k < calls.length; k++) {
      const c = calls.at(k)
      const id = c.isObject() ? c.get("id") : null
      if (id !== null && id.isString() && later !== null && later.has(id.asString())) continue
      unanswered.push(id)
    }
    if (unanswered.length > 0) {
      if (open === null) open = new Map<i32, Array<Json | null>>()
      open.set(i, unanswered)
    }
  }
  // Nothing to add: the transcript itself (the loop's Transcript then keeps every message as saved).
  if (open === null) return transcript
  const out = Json.array()
  for (let i = 0; i < n; i++) {
    const m = transcript.at(i)
    out.push(m)
    if (!open.has(i)) continue
    let j = i + 1
    while (j < n && roleOf(transcript.at(j)) == "tool") out.push(transcript.at(j++))
    const unanswered = open.get(i)
    for (let k = 0; k < unanswered.length; k++) {
      const id = unanswered[k]
      const r = committedFor(committed, id)
      out.push(r !== null
        ? toolMessage(id, r.get("output"), truthy(r.get("is_error")), r.get("outcome"))
        : toolMessage(id, Json.string(INTERRUPTED), true, Json.string("unknown")))
    }
    i = j - 1
  }
  return out
}

/** The entry of `committed` whose `call_id` is `id`, or null. */
function committedFor(committed: Json, id: Json | null): Json | null {
  if (id === null || !id.isString()) return null
  const wanted = id.asString()
  for (let i = 0; i < committed.length; i++) {
    const r = committed.at(i)
    if (!r.isObject()) continue
    const callId = r.get("call_id")
    if (callId !== null && callId.isString() && callId.asString() == wanted) return r
  }
  return null
}

/** The system note about the last failed turn among `events`, or null when none failed. */
export function interruptionNote(events: Json): string | null {
  let last: Json | null = null
  for (let i = 0; i < events.length; i++) {
    const e = events.at(i)
    if (!e.isObject() || e.getString("kind") != "turn_failed") continue
    const data = e.get("data")
    if (data === null || !data.isObject()) continue
    const failure = data.get("failure")
    if (truthy(failure)) last = failure
  }
  if (last === null) return null
  const code = last.isObject() ? last.get("code") : null
  const message = last.isObject() ? last.get("message") : null
  return "Note from Brain: the previous turn did not finish (" + templateText(code) + ": " + templateText(message) +
    "). Effects it started may or may not have happened; check before repeating them."
}

/** Whether a turn input carries media (a non-empty `media` list). */
export function hasMedia(input: Json): bool {
  const media = input.isObject() ? input.get("media") : null
  return media !== null && media.isArray() && media.length > 0
}

/**
 * The user message for a turn input: its `message` as the content; with media, parts — the
 * message as a text part (none for an empty message), then each media item as it came.
 */
export function userMessage(input: Json): Json {
  const user = Json.object().set("role", Json.string("user"))
  const message = input.isObject() ? input.get("message") : null
  if (!hasMedia(input)) {
    setPresent(user, "content", message)
    return user
  }
  const parts = Json.array()
  if (message === null || !message.isString() || message.asString().length > 0) {
    const text = Json.object().set("type", Json.string("text"))
    setPresent(text, "text", message)
    parts.push(text)
  }
  const media = input.get("media")!
  for (let i = 0; i < media.length; i++) parts.push(media.at(i))
  return user.set("content", parts)
}

/** Sets `key` unless `value` is absent (where the TypeScript loop's field would be undefined). */
export function setPresent(target: Json, key: string, value: Json | null): void {
  if (value !== null) target.set(key, value)
}

/**
 * The assistant message's content: the model's text; or, when the model sent reasoning to keep
 * (Anthropic's thinking blocks), those parts first and then the text as a part, if there is any.
 */
export function setAssistantContent(assistant: Json, text: Json | null, reasoning: Json | null): void {
  if (reasoning === null || !reasoning.isArray() || reasoning.length == 0) {
    setPresent(assistant, "content", text)
    return
  }
  const parts = Json.array()
  for (let i = 0; i < reasoning.length; i++) parts.push(reasoning.at(i))
  if (text !== null && text.isString() && text.asString().length > 0) {
    parts.push(Json.object().set("type", Json.string("text")).set("text", text))
  }
  assistant.set("content", parts)
}

/** JavaScript truthiness, for the checks the TypeScript loop makes with `if (x)`. */
export function truthy(v: Json | null): bool {
  if (v === null || v.isNull()) return false
  if (v.isBool()) return v.asBool()
  if (v.isNumber()) return !isZero(v.numberText())
  if (v.isString()) return v.asString().length > 0
  return true
}

/** Whether JSON number text is zero (every digit before the exponent is 0); JSON has no NaN. */
function isZero(text: string): bool {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c == 101 || c == 69) break // e E
    if (c >= 49 && c <= 57) return false // 1-9
  }
  return true
}

function roleOf(m: Json): string {
  return m.isObject() ? m.getString("role") : ""
}

/** A value as a JavaScript template literal writes it (`${v}`); absent is "undefined". */
function templateText(v: Json | null): string {
  if (v === null) return "undefined"
  if (v.isString()) return v.asString()
  if (v.isObject()) return "[object Object]"
  if (v.isArray()) {
    let s = ""
    for (let i = 0; i < v.length; i++) {
      if (i > 0) s += ","
      const item = v.at(i)
      if (!item.isNull()) s += templateText(item)
    }
    return s
  }
  return stringify(v)
}
