/**
 * A test probe for a loop that reads the transcript's tail (test/guest/transcript.test.ts compiles
 * it; it is not shipped): it holds the tail from `transcriptStart`, appends a message, asks the
 * model with the delta, reads the two messages before the tail with `transcriptRange`, and answers
 * `{"ok": {keep, length, first, before}}`. With the turn message "whole" it asks for the whole
 * form instead, which a tail cannot give.
 */
import { Json, message, model, modelContext, readActivation, returnOk, Transcript, transcriptRange } from "../brain"

export { brain_abi_v1, brain_alloc, brain_transcript_tail } from "../brain"

export function brain_run(ptr: usize, len: usize): u64 {
  const activation = readActivation(ptr, len)
  const start = activation.transcriptStart
  const t = new Transcript(activation.transcript, start)
  if (activation.message == "whole") model(t.messages())
  t.push(message("user", "added"))
  modelContext(t)
  const before = transcriptRange(start - 2, start)
  const out = Json.object()
    .set("keep", Json.int(t.keep))
    .set("length", Json.int(t.length))
    .set("first", t.at(start))
    .set("before", before.ok ? before.value! : Json.string("failed"))
  return returnOk(out)
}
