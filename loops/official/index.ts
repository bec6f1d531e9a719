/**
 * The official Agentloop, compiled to WebAssembly (dist/loops/official.wasm): the same behaviour as
 * the TypeScript loop in src/loops/official.ts, which test/guest/official.test.ts checks call for
 * call and byte for byte.
 *
 * model → if the model asked for tools, save the request and dispatch them all together, append
 * one result message each, save them and call the model again … until an answer without tool
 * calls, which is saved and returned as `{"text"}`. Each save rides on the host call after it
 * (docs/abi.md, "A save that rides on a call"): the turn's user message on the first `model`
 * (`modelSaving`), so it is durable from that call on, the request's on `dispatch`
 * (`dispatchSaving`), the results' on the next `model`, the answer's on the output
 * (`returnOkSaving`), so a save costs no host call and no durable commit of its own. A turn
 * input's media go to the model as parts of the user message, after its text
 * (transcript.ts `userMessage`); such a message is saved only once a call has taken it. It first repairs what an
 * interruption left (transcript.ts). A host call that answers an error (the model failed, a limit,
 * a cancel) ends the activation with that error's code and message; nothing is retried. Tool
 * failures are results the model sees.
 *
 * A round's tool outputs are held once, as the dispatch answer's bytes, and carried to the model
 * as they came; results that one request cannot carry within BRAIN_MAX_WASM_IO_BYTES are saved in
 * pieces first, an output no piece holds as a note (`saveInPieces`; docs/agentloops.md, "A round's
 * outputs"). The TypeScript loop has no such bound and carries every output.
 *
 * It reads the transcript's tail, not all of it, and the transcript travels as a delta against the
 * saved one (guest/brain/transcript.ts): each model
 * call and each save sends only the messages added since the last save, so a host call costs what
 * changed, not the whole transcript. The host sees the same messages as with the whole form.
 */
import {
  Answer,
  call,
  dispatch,
  dispatchSaving,
  HostError,
  jsonLength,
  Json,
  message,
  modelContext,
  modelSaving,
  readActivation,
  returnHostError,
  returnOkSaving,
  setTranscriptDelta,
  Transcript
} from "../../guest/brain"
import { hasMedia, interruptionNote, notCarried, notRunNote, repairTranscript, setAssistantContent, setPresent, toolMessage, truthy, userMessage } from "./transcript"

// It reads only the transcript's tail: Brain gives it every message an interruption can have left
// unanswered (docs/abi.md, "The transcript's tail"), so a turn costs the same however long the
// conversation is. And it reads its Events only for how the previous turn ended (a `turn_failed`),
// so it takes them from the previous activation's end on ("The input's Events"), not each step.
// It never reads its configuration: Brain adds the session's model, tools and system prompt to each
// model call itself, so its input leaves it out (a few dozen tools with schemas are kilobytes).
// Nor its runtime envelope (the ids, the logical time, the seed): its input leaves that out too,
// more than half of a text turn's input bytes, which Brain would write and this loop scan for nothing.
// Of a model's answer it reads the text, the tool calls and the reasoning, never the metadata (the stop
// reason, the usage, the ids): Brain leaves those out of its answers (a provider's are 200–300 bytes).
export { brain_abi_v1, brain_alloc, brain_configuration_unread, brain_events_from_end, brain_model_metadata_unread, brain_runtime_unread, brain_transcript_tail } from "../../guest/brain"

// Of the saved messages it needs only those its repair may touch, which the tail always reaches
// back to (the first tool call no tool message answers, and everything after it): none of the
// last ones beyond them. Every message given is one Brain encodes and this loop parses for nothing.
export const brain_transcript_tail_length: i32 = 0

// Of its Events it reads only a `turn_failed` (how the previous turn ended when it did not finish):
// its input carries no other kind, so a turn that follows one that ended well is given none.
export const brain_events_kind_turn_failed: i32 = 1

export function brain_run(ptr: usize, len: usize): u64 {
  const activation = readActivation(ptr, len)
  const saved = activation.transcript
  const transcript = new Transcript(saved, activation.transcriptStart)
  // The repair keeps the saved messages' values: the delta keeps all of them up to its first
  // insertion. A transcript it leaves as it is (every call answered) is the Transcript's already.
  // The committed outcomes, each output kept as the input's bytes (a round cut short may be large).
  const committed = activation.toolResultsAsText
  const repaired = repairTranscript(saved, committed)
  if (repaired !== saved) transcript.replace(repaired)
  const note = interruptionNote(activation.eventsOfKind("turn_failed"))
  if (note !== null) transcript.push(message("system", note))
  const input = activation.input
  // The turn's media, not yet taken by a model call: its message is saved only once one has taken
  // it, since a provider may refuse a part of it, and a message kept with a refused part would
  // have every later call refused too.
  let mediaUntaken = false
  // Where the results of the tool messages not saved yet are: the committed ones, the last round's.
  const results = new Array<Json>()
  results.push(committed)
  if (truthy(input)) {
    transcript.push(userMessage(input!))
    mediaUntaken = hasMedia(input!)
  }
  while (true) {
    // What is not saved yet rides on the call (modelSaving): the turn's message, the repair and
    // the note on the first call, the tool results on the next.
    const saving = transcript.changed && !mediaUntaken
    let reply = saving ? modelSaving(transcript) : modelContext(transcript)
    if (!reply.ok && saving) {
      // What it appended (a large round's results) is more than one request holds: saved in
      // pieces within the bound, then the model is asked with the saved transcript.
      const limit = requestLimit(reply.error!)
      if (limit > 0) {
        const saved = saveInPieces(transcript, results, limit, reply.error!)
        if (!saved.ok) return failed(saved)
        reply = modelContext(transcript)
      }
    }
    if (!reply.ok) {
      // A failure on the model's side (`model_…`) ends the turn, but what it added (the user's
      // message) is kept: saved before the failure is passed on (the save that rode on the call
      // may not have landed), best effort (its own failure is not the turn's); not the message of
      // media the model refused (`model_rejected`). After a cancel or a journal failure nothing
      // more is written.
      const code = reply.error!.code
      if (transcript.changed && code.startsWith("model_") && !(mediaUntaken && code == "model_rejected")) setTranscriptDelta(transcript)
      return failed(reply)
    }
    mediaUntaken = false
    const text = reply.value.get("text")
    const requested = reply.value.get("tool_calls")
    const calls = requested !== null && requested.isArray() ? requested : Json.array()
    const assistant = Json.object().set("role", Json.string("assistant"))
    setAssistantContent(assistant, text, reply.value.get("reasoning"))
    if (calls.length > 0) assistant.set("tool_calls", calls)
    transcript.push(assistant)
    if (calls.length == 0) {
      // The answer's save rides on the output: Brain saves it before it takes the result, and a
      // failed save fails the turn with its error, as passing it on below would.
      const result = Json.object()
      setPresent(result, "text", text)
      return returnOkSaving(result, transcript)
    }
    // The request for tools is saved before they run (with their starts), so a crash leaves it visible.
    // Each output is kept as the answer's bytes and carried to the model as they are.
    let answered = dispatchSaving(calls, transcript, true)
    if (!answered.ok && requestLimit(answered.error!) > 0) {
      // The calls and their save are more than one request holds (each call's input rides in both,
      // so an input of half the bound is enough; nothing of the refused request was done): the
      // save first, on its own, then the calls.
      const saved = setTranscriptDelta(transcript)
      if (!saved.ok) return failed(saved)
      answered = dispatch(calls, true)
    }
    if (!answered.ok) {
      // Refused whole before any call of it was journaled: the model is told each was not run,
      // and why, not that it may have run (which a later turn's repair would say of a call
      // without a result). Saved before the refusal is passed on, best effort, as after a failed
      // model call.
      const e = answered.error!
      const note = notRunNote(e.code, e.message, e.ambiguous)
      if (note !== null) {
        for (let i = 0; i < calls.length; i++) {
          const c = calls.at(i)
          transcript.push(toolMessage(c.isObject() ? c.get("id") : null, Json.string(note), true, Json.string("error")))
        }
        setTranscriptDelta(transcript)
      }
      return failed(answered)
    }
    // Only this round's are unsaved now: the earlier ones were saved with the model call.
    results.length = 1
    results.push(answered.value)
    for (let i = 0; i < answered.value.length; i++) {
      const r = answered.value.at(i)
      transcript.push(toolMessage(r.get("call_id"), r.get("output"), truthy(r.get("is_error")), r.get("outcome")))
    }
  }
}

/**
 * The bound a request was refused for passing (BRAIN_MAX_WASM_IO_BYTES: the refusal's
 * `details.limit`), or 0 for any other error.
 */
function requestLimit(e: HostError): usize {
  const details = e.details
  if (e.code != "invalid_request" || details === null || !details.isObject()) return 0
  const limit = details.getI64("limit")
  return limit > 0 && limit < <i64>u32.MAX_VALUE ? <usize>limit : 0
}

/** The bytes of `{"keep":K,"append":[` and `]}` around a piece's messages, K at most ten digits. */
const PIECE_ENVELOPE: usize = 32

/**
 * Saves what `transcript` appended in pieces (`set_transcript` deltas), each request within
 * `limit`: the rest at once when it fits, else the most messages that fit, in order. Between the
 * pieces the round is still open (calls without results), so a piece must also fit the transcript's
 * room (docs/abi.md): when Brain refuses one `payload_too_large`, a shorter one is saved. When
 * nothing fits, a tool message carries, instead of its output, a note saying so (`notCarried`),
 * the largest first, its outcome found by its call's id in `results` (arrays of results as
 * `dispatch` answers them); when none is left to shorten, it answers `refusal`. Answers the failed
 * save's error, or ok.
 */
function saveInPieces(transcript: Transcript, results: Array<Json>, limit: usize, refusal: HostError): Answer {
  const sizes = new Array<usize>()
  const first = transcript.keep
  for (let i = first; i < transcript.length; i++) sizes.push(jsonLength(transcript.at(i)))
  const noted = new Set<i32>()
  let room: usize = usize.MAX_VALUE
  while (transcript.changed) {
    const from = transcript.keep
    const end = transcript.length
    let rest: usize = 0
    for (let i = from; i < end; i++) rest += sizes[i - first] + 1
    if (PIECE_ENVELOPE + rest <= limit) {
      const answer = call("set_transcript", transcript.deltaTo(end))
      if (answer.ok) transcript.markSavedTo(end)
      return answer
    }
    let to = from
    let piece: usize = 0
    while (to < end) {
      const next = piece + sizes[to - first] + 1
      if (PIECE_ENVELOPE + next > limit || next > room) break
      piece = next
      to++
    }
    if (to == from) {
      // Nothing fits: the largest tool result not yet shortened becomes a note.
      let largest = -1
      let result: Json | null = null
      for (let i = from; i < end; i++) {
        if (noted.has(i) || (largest >= 0 && sizes[i - first] <= sizes[largest - first])) continue
        const r = resultOf(transcript.at(i), results)
        if (r === null) continue
        largest = i
        result = r
      }
      if (result === null) return new Answer(Json.null(), refusal)
      const output = result.get("output")
      const note = notCarried(output === null ? 4 : jsonLength(output), limit, result.get("outcome"))
      const message = toolMessage(result.get("call_id"), Json.string(note), truthy(result.get("is_error")), result.get("outcome"))
      transcript.setAt(largest, message)
      sizes[largest - first] = jsonLength(message)
      noted.add(largest)
      continue
    }
    const answer = call("set_transcript", transcript.deltaTo(to))
    if (answer.ok) {
      transcript.markSavedTo(to)
      if (room != usize.MAX_VALUE) room -= piece
      continue
    }
    // Past the room the open round may take: Brain says by how much, so a shorter piece fits.
    const e = answer.error!
    const details = e.details
    if (e.code == "payload_too_large" && details !== null && details.isObject()) {
      const bytes = details.getI64("bytes")
      const most = details.getI64("limit")
      if (bytes > most && most >= 0) {
        const over = <usize>(bytes - most)
        room = piece > over ? piece - over : 0
        continue
      }
    }
    return answer
  }
  return new Answer(Json.null(), null)
}

/** The result (`{call_id, outcome, output, is_error}`) a tool message answers with, from `results`; null for any other message. */
function resultOf(m: Json, results: Array<Json>): Json | null {
  if (!m.isObject() || m.getString("role") != "tool") return null
  const id = m.get("tool_call_id")
  if (id === null || !id.isString()) return null
  const wanted = id.asString()
  for (let k = results.length - 1; k >= 0; k--) {
    const list = results[k]
    for (let i = 0; i < list.length; i++) {
      const r = list.at(i)
      if (r.isObject() && r.getString("call_id") == wanted) return r
    }
  }
  return null
}

/** Ends the activation with the host's error, flags and details as they came: the host turns it into the turn's failure. */
function failed(answer: Answer): u64 {
  return returnHostError(answer.error!)
}
