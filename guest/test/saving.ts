/**
 * A test probe for `returnOkSaving` (test/guest/transcript.test.ts compiles it; it is not shipped):
 * the turn input's message picks what happens to the transcript before the loop returns
 * `{"ok": "done"}` with it — nothing, an append, an append saved by a host call, a dropped message.
 */
import { Json, message, readActivation, returnOkSaving, setTranscriptDelta, Transcript } from "../brain"

export { brain_abi_v1, brain_alloc } from "../brain"

export function brain_run(ptr: usize, len: usize): u64 {
  const activation = readActivation(ptr, len)
  const t = new Transcript(activation.transcript)
  const what = activation.message
  if (what == "appended" || what == "saved") t.push(message("assistant", "new"))
  if (what == "saved") setTranscriptDelta(t)
  if (what == "dropped") {
    const shorter = Json.array()
    for (let i = 0; i < t.length - 1; i++) shorter.push(t.at(i))
    t.replace(shorter)
  }
  if (what == "copied") t.replace(t.messages())
  return returnOkSaving(Json.string("done"), t)
}
