/**
 * A test probe for the guest library's `Transcript` (test/guest/transcript.test.ts compiles it; it
 * is not shipped). `brain_run` walks one transcript through the delta requests a loop sends: an
 * append, a save that fails and its retry, a change in the middle, and a message replaced by an
 * equal copy; it answers `{"ok": [keep after each step]}`.
 */
import { Json, message, modelContext, parse, readActivation, returnOk, setTranscriptDelta, stringify, Transcript } from "../brain"

export { brain_abi_v1, brain_alloc } from "../brain"

export function brain_run(ptr: usize, len: usize): u64 {
  const activation = readActivation(ptr, len)
  const keeps = Json.array()
  const t = new Transcript(activation.transcript)
  keeps.push(Json.int(t.keep))
  t.push(message("user", "added"))
  modelContext(t, "terse")
  keeps.push(Json.int(t.keep))
  setTranscriptDelta(t) // the script fails this one: nothing is saved
  keeps.push(Json.int(t.keep))
  setTranscriptDelta(t)
  keeps.push(Json.int(t.keep))

  // A change at index 1: the messages after it are the same values, sent again.
  const changed = Json.array().push(t.at(0)).push(message("assistant", "changed"))
  for (let i = 2; i < t.length; i++) changed.push(t.at(i))
  t.replace(changed)
  keeps.push(Json.int(t.keep))
  setTranscriptDelta(t)
  keeps.push(Json.int(t.keep))

  // An equal copy is not the same value: nothing is kept from it on.
  const copied = t.messages()
  const copy = parse(stringify(t.at(0))).value!
  const fresh = Json.array().push(copy)
  for (let i = 1; i < copied.length; i++) fresh.push(copied.at(i))
  t.replace(fresh)
  keeps.push(Json.int(t.keep))
  keeps.push(Json.int(t.length))
  return returnOk(keeps)
}
