/**
 * The host services (docs/abi.md, "Host services"), one function each, building the request
 * shapes the ABI names. Each returns the `Answer` as it came: the loop decides what an error means
 * (the official loop ends the turn with it; nothing here retries).
 */
import { Answer, call } from "./abi"
import { Json } from "./json"
import { Transcript } from "./transcript"

/** `{"messages", "system"?, "options"?}`: Brain adds the session's system prompt (unless given) and tools. */
export function model(messages: Json, system: string | null = null, options: Json | null = null): Answer {
  const request = Json.object().set("messages", messages)
  if (system !== null) request.set("system", Json.string(system))
  if (options !== null) request.set("options", options)
  return call("model", request)
}

/**
 * `{"context": {"keep", "append"}, "system"?, "options"?}`: the model is asked with the whole of
 * `transcript`, but only what was appended since the last save is sent (Brain takes the kept
 * messages from the saved transcript).
 */
export function modelContext(transcript: Transcript, system: string | null = null, options: Json | null = null): Answer {
  const request = Json.object().set("context", transcript.delta())
  if (system !== null) request.set("system", Json.string(system))
  if (options !== null) request.set("options", options)
  return call("model", request)
}

/**
 * `modelContext` with `transcript` saved first, in the same host call and the same durable commit
 * as the model call's start (`{"transcript": {"keep", "append"}, "context": {"keep", "append": []}}`):
 * the model is asked with the whole of `transcript`, now the saved one. When the call answers ok
 * the transcript is marked saved; after an error the save may or may not have been made, and the
 * next save sends the same difference again (Brain writes only what is not saved yet).
 */
export function modelSaving(transcript: Transcript, system: string | null = null, options: Json | null = null): Answer {
  const request = Json.object()
    .set("transcript", transcript.delta())
    .set("context", Json.object().set("keep", Json.int(transcript.length)).set("append", Json.array()))
  if (system !== null) request.set("system", Json.string(system))
  if (options !== null) request.set("options", options)
  const answer = call("model", request)
  if (answer.ok) transcript.markSaved()
  return answer
}

/**
 * Runs `calls` (`[{id, name, input}]`) together; the value is their results in call order. With
 * `outputsAsText`, each `output` is its JSON text as it came, as in `dispatchSaving`.
 */
export function dispatch(calls: Json, outputsAsText: bool = false): Answer {
  return call("dispatch", Json.object().set("calls", calls), outputsAsText ? "output" : null)
}

/**
 * `dispatch` with `transcript` saved first, in the same host call and the same durable commit as
 * the calls' starts (`{"calls", "transcript": {"keep", "append"}}`); marked saved as `modelSaving` does.
 * With `outputsAsText`, each result's `output` is its JSON text as it came (`Json.text`, written
 * back byte for byte), not a parsed value: a loop that only passes outputs on to its model holds
 * a round's outputs once, as the answer's bytes.
 */
export function dispatchSaving(calls: Json, transcript: Transcript, outputsAsText: bool = false): Answer {
  const answer = call("dispatch", Json.object().set("calls", calls).set("transcript", transcript.delta()), outputsAsText ? "output" : null)
  if (answer.ok) transcript.markSaved()
  return answer
}

/** Emits an extension Event; the value is `{"sequence": n}`. */
export function emit(kind: string, payload: Json): Answer {
  return call("emit", Json.object().set("kind", Json.string(kind)).set("payload", payload))
}

/** Best effort and never journaled: the value is `null`; after a cancel it answers the cancel's error, as every call does. */
export function telemetry(data: Json): Answer {
  return call("telemetry", data)
}

/** The value is `{"found": true, "value": v}` or `{"found": false}` (a stored null is found). */
export function kvRead(key: string): Answer {
  return call("kv_read", Json.object().set("key", Json.string(key)))
}

export function kvPut(key: string, value: Json): Answer {
  return call("kv_put", Json.object().set("key", Json.string(key)).set("value", value))
}

export function kvDelete(key: string): Answer {
  return call("kv_delete", Json.object().set("key", Json.string(key)))
}

/** Saves the transcript (an array of messages); Brain commits only the difference from the saved one. */
export function setTranscript(messages: Json): Answer {
  return call("set_transcript", Json.object().set("messages", messages))
}

/**
 * Saves `transcript` as `{"keep", "append"}` (only what changed is sent); when the save succeeds
 * the whole of `transcript` is the saved one (its `keep` is its length).
 */
export function setTranscriptDelta(transcript: Transcript): Answer {
  const answer = call("set_transcript", transcript.delta())
  if (answer.ok) transcript.markSaved()
  return answer
}

/** A page of this session's public Events after sequence `after`. */
export function events(after: i64, limit: i64): Answer {
  return call("events", Json.object().set("after", Json.int(after)).set("limit", Json.int(limit)))
}

/**
 * The saved transcript's messages from `from` up to `to` (excluded), as this activation last saw
 * it: how a loop that reads the tail reaches older messages (the value is an array).
 */
export function transcriptRange(from: i64, to: i64): Answer {
  return call("transcript", Json.object().set("from", Json.int(from)).set("to", Json.int(to)))
}
