/**
 * An example Agentloop (dist/loops/examples/echo-with-memory.wasm): it counts its turns in kv and
 * answers "Turn <n>: <the model's text>".
 *
 * Each turn: read the count (`kv_read "turns"`; missing means 0) and store count + 1, ask the model
 * with the saved transcript plus the user's message, save the transcript with the answer, emit an
 * `echo.turn` Event with the count, and return `{"text", "turn"}`. Any host error ends the turn with
 * that error. Tool calls are ignored: this loop only talks.
 */
import {
  Answer,
  emit,
  Json,
  kvPut,
  kvRead,
  message,
  model,
  readActivation,
  returnHostError,
  returnOk,
  setTranscript
} from "../../guest/brain"

export { brain_abi_v1, brain_alloc } from "../../guest/brain"

const COUNTER = "turns"

export function brain_run(ptr: usize, len: usize): u64 {
  const activation = readActivation(ptr, len)

  const stored = kvRead(COUNTER)
  if (!stored.ok) return failed(stored)
  const previous = stored.value.getBool("found") ? stored.value.getI64("value") : 0
  const turn = previous + 1
  const put = kvPut(COUNTER, Json.int(turn))
  if (!put.ok) return failed(put)

  // The saved transcript is shared, not copied: a new array keeps the input as it came.
  const transcript = activation.transcript.shallowCopy()
  const userText = activation.message
  if (userText !== null) transcript.push(message("user", userText))
  const reply = model(transcript)
  if (!reply.ok) return failed(reply)

  const answer = "Turn " + turn.toString() + ": " + reply.value.getString("text")
  transcript.push(message("assistant", answer))
  const saved = setTranscript(transcript)
  if (!saved.ok) return failed(saved)
  const emitted = emit("echo.turn", Json.object().set("turn", Json.int(turn)))
  if (!emitted.ok) return failed(emitted)

  return returnOk(Json.object().set("text", Json.string(answer)).set("turn", Json.int(turn)))
}

function failed(answer: Answer): u64 {
  return returnHostError(answer.error!)
}
