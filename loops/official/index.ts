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
 * It reads the transcript's tail, not all of it, and the transcript travels as a delta against the
 * saved one (guest/brain/transcript.ts): each model
 * call and each save sends only the messages added since the last save, so a host call costs what
 * changed, not the whole transcript. The host sees the same messages as with the whole form.
 */
import {
  Answer,
  dispatchSaving,
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
import { hasMedia, interruptionNote, repairTranscript, setAssistantContent, setPresent, toolMessage, truthy, userMessage } from "./transcript"

// It reads only the transcript's tail: Brain gives it every message an interruption can have left
// unanswered (docs/abi.md, "The transcript's tail"), so a turn costs the same however long the
// conversation is. And it reads its Events only for how the previous turn ended (a `turn_failed`),
// so it takes them from the previous activation's end on ("The input's Events"), not each step.
// It never reads its configuration: Brain adds the session's model, tools and system prompt to each
// model call itself, so its input leaves it out (a few dozen tools with schemas are kilobytes).
export { brain_abi_v1, brain_alloc, brain_configuration_unread, brain_events_from_end, brain_transcript_tail } from "../../guest/brain"

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
  const repaired = repairTranscript(saved, activation.toolResults)
  if (repaired !== saved) transcript.replace(repaired)
  const note = interruptionNote(activation.eventsOfKind("turn_failed"))
  if (note !== null) transcript.push(message("system", note))
  const input = activation.input
  // The turn's media, not yet taken by a model call: its message is saved only once one has taken
  // it, since a provider may refuse a part of it, and a message kept with a refused part would
  // have every later call refused too.
  let mediaUntaken = false
  if (truthy(input)) {
    transcript.push(userMessage(input!))
    mediaUntaken = hasMedia(input!)
  }
  while (true) {
    // What is not saved yet rides on the call (modelSaving): the turn's message, the repair and
    // the note on the first call, the tool results on the next.
    const reply = transcript.changed && !mediaUntaken ? modelSaving(transcript) : modelContext(transcript)
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
    const results = dispatchSaving(calls, transcript)
    if (!results.ok) return failed(results)
    for (let i = 0; i < results.value.length; i++) {
      const r = results.value.at(i)
      transcript.push(toolMessage(r.get("call_id"), r.get("output"), truthy(r.get("is_error")), r.get("outcome")))
    }
  }
}

/** Ends the activation with the host's error, flags and details as they came: the host turns it into the turn's failure. */
function failed(answer: Answer): u64 {
  return returnHostError(answer.error!)
}
