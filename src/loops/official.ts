/**
 * The official Agentloop, in TypeScript (the in-process implementation; the WebAssembly host ships the same
 * behaviour compiled to WebAssembly): model → dispatch the tools it asked for → append their
 * results → model again … until a final answer or a limit.
 *
 * It keeps the transcript as the WebAssembly loop does, each save riding on the host call after
 * it: the turn's user message (with the repair and the note below) on the first `model` call, so
 * it is durable from that call on; the request for tools on `dispatch`, their results on the next
 * `model` call, the final answer on the activation's end (setTranscriptAtEnd); a save costs no
 * commit of its own. A turn input's media go to the model as parts of the user message, after its
 * text (userMessage). Before anything else it repairs what an interruption left:
 * every assistant tool call without a result gets one (a model refuses a tool call without its
 * result): its committed outcome, or that it was interrupted; and a system note tells the model
 * the last turn was interrupted.
 */
import { Effect } from "effect"
import type { Message, TurnInput } from "../domain/Messages.js"
import type { ModelResult } from "../domain/Model.js"
import { transcriptChange } from "../domain/TranscriptDelta.js"
import type { AgentloopShape, Host, ToolResult } from "../services/Agentloop.js"

/**
 * The assistant message's content: the model's text; or, when the model sent reasoning to keep
 * (Anthropic's thinking blocks), those parts first and then the text as a part, if there is any.
 */
const assistantContent = (reply: ModelResult): Message["content"] =>
  reply.reasoning !== undefined && reply.reasoning.length > 0
    ? [...reply.reasoning, ...(reply.text !== "" ? [{ type: "text", text: reply.text }] : [])]
    : reply.text

const INTERRUPTED = "the call was interrupted; it may or may not have run"

/**
 * What a call of a round Brain refused whole before journaling any of its calls is answered with
 * (docs/abi.md, "dispatch"): that it was not run, and Brain's reason. Such a refusal is one of
 * `tool_call_limit` (more calls than BRAIN_MAX_TOOL_CALLS_PER_DISPATCH) and `turn_write_limit`
 * (their starts would pass the turn's or the session's journal bound), not ambiguous; undefined
 * for any other failure, whose calls a later repair answers from their records or as interrupted.
 */
export const notRunNote = (failure: { readonly code: string; readonly message: string; readonly ambiguous: boolean }): string | undefined =>
  failure.ambiguous || (failure.code !== "tool_call_limit" && failure.code !== "turn_write_limit")
    ? undefined
    : `the call was not run: ${failure.code}: ${failure.message}`

/** Whether a turn input carries media. */
const hasMedia = (input: TurnInput): boolean => input.media !== undefined && input.media.length > 0

/**
 * The user message for a turn input: its message as the content; with media, parts — the message
 * as a text part (none for an empty message: an empty text part carries nothing, and Anthropic's
 * API refuses one), then each media item as it came. Whether a provider can carry a part is its
 * adapter's to say (docs/models.md): one it cannot fails the call before sending.
 */
const userMessage = (input: TurnInput): Message =>
  hasMedia(input)
    ? { role: "user", content: [...(input.message !== "" ? [{ type: "text", text: input.message }] : []), ...input.media!] }
    : { role: "user", content: input.message }

const toolMessage = (callId: string, output: unknown, isError: boolean, outcome: string): Message => ({
  role: "tool",
  tool_call_id: callId,
  content: JSON.stringify(isError ? { outcome, error: output } : output) ?? "null"
})

/**
 * Adds a result to every tool call that has none, so the transcript is always valid for a model:
 * the call's committed outcome when the input gives one (`tool_results`: the journal's record of
 * a call that finished, or was cancelled, timed out or recovered as unknown, before its round was
 * cut short), else that it was interrupted. A call is answered by a tool message with its id
 * anywhere after it.
 */
export const repairTranscript = (transcript: ReadonlyArray<Message>, committed: ReadonlyArray<ToolResult> = []): ReadonlyArray<Message> => {
  // From the end: the ids of the tool messages after each assistant message.
  const open = new Map<number, ReadonlyArray<string>>()
  const later = new Set<string>()
  for (let i = transcript.length - 1; i >= 0; i--) {
    const m = transcript[i]!
    if (m.role === "tool" && m.tool_call_id) later.add(m.tool_call_id)
    else if (m.role === "assistant" && m.tool_calls?.length) {
      const unanswered = m.tool_calls.filter((c) => !later.has(c.id)).map((c) => c.id)
      if (unanswered.length > 0) open.set(i, unanswered)
    }
  }
  const out: Array<Message> = []
  for (let i = 0; i < transcript.length; i++) {
    const m = transcript[i]!
    out.push(m)
    const unanswered = open.get(i)
    if (unanswered === undefined) continue
    // Results belong right after their assistant message, before the next non-tool message.
    let j = i + 1
    while (j < transcript.length && transcript[j]!.role === "tool") out.push(transcript[j++]!)
    for (const id of unanswered) {
      const r = committed.find((c) => c.call_id === id)
      out.push(r !== undefined ? toolMessage(id, r.output, r.is_error, r.outcome) : toolMessage(id, INTERRUPTED, true, "unknown"))
    }
    i = j - 1
  }
  return out
}

const interruptionNote = (events: ReadonlyArray<{ kind: string; data: any }>): string | undefined => {
  const failed = events.filter((e) => e.kind === "turn_failed" && e.data?.failure)
  if (failed.length === 0) return undefined
  const last = failed[failed.length - 1]!.data.failure
  return `Note from Brain: the previous turn did not finish (${last.code}: ${last.message}). Effects it started may or may not have happened; check before repeating them.`
}

export const officialLoop: AgentloopShape = {
  // It reads its Events only for how the previous turn ended (a `turn_failed`), as the WebAssembly loop does.
  eventsFromEnd: true,
  eventKinds: new Set(["turn_failed"]),
  activate: (input, host: Host) => Effect.gen(() => activationOf(input, host))
}

/** The loop's body: a module function, made once (docs/benchmarks.md, "Generator bodies made once"). */
function* activationOf(input: Parameters<AgentloopShape["activate"]>[0], host: Host) {
  let transcript = repairTranscript(input.transcript, input.tool_results)
  /** The transcript as last saved. */
  let saved = input.transcript
  const note = interruptionNote(input.events)
  if (note) transcript = [...transcript, { role: "system", content: note }]
  if (input.input) transcript = [...transcript, userMessage(input.input)]
  /**
   * The turn's media, not yet taken by a model call: its message is saved only once one has taken
   * it, since a provider may refuse a part of it, and a message kept with a refused part would
   * have every later call refused too.
   */
  let mediaUntaken = input.input ? hasMedia(input.input) : false
  for (;;) {
    // What is not saved yet rides on the call (the loop only adds messages, so a longer transcript
    // is an unsaved one): the turn's message, the repair and the note on the first call, the
    // tool results on the next.
    const save = transcript.length !== saved.length && !mediaUntaken ? transcript : undefined
    // A model call the model's side failed (`model_…`) ends the turn, but what the turn added
    // (the user's message) is kept: saved before the failure is passed on (the save that rode on
    // the call may not have landed), best effort (its own failure is not the turn's); not the
    // message of media the model refused (`model_rejected`). After a cancel or a journal failure
    // nothing more is written.
    const reply = yield* host.model({ messages: transcript }, save).pipe(
      Effect.tapError((e) =>
        e.failure.code.startsWith("model_") && !(mediaUntaken && e.failure.code === "model_rejected") &&
          transcriptChange(saved, transcript) !== undefined
          ? Effect.ignore(host.setTranscript(transcript))
          : Effect.void
      )
    )
    if (save !== undefined) saved = save
    mediaUntaken = false
    const content = assistantContent(reply)
    const assistant: Message = reply.tool_calls.length > 0
      ? { role: "assistant", content, tool_calls: reply.tool_calls }
      : { role: "assistant", content }
    transcript = [...transcript, assistant]
    if (reply.tool_calls.length === 0) {
      // The answer's save rides on the activation's closing append, as the Wasm loop's output does.
      yield* host.setTranscriptAtEnd(transcript)
      return { text: reply.text }
    }
    // The request for tools is saved before they run (with their starts), so a crash leaves it visible.
    // Refused whole before any call of it was journaled: the model is told each was not run, and
    // why, not that it may have run (which a later turn's repair would say of a call without a
    // result). Saved before the refusal is passed on, best effort, as after a failed model call.
    const asked = transcript
    const results = yield* host.dispatch(reply.tool_calls, transcript).pipe(
      Effect.tapError((e) => {
        const note = notRunNote(e.failure)
        return note === undefined
          ? Effect.void
          : Effect.ignore(host.setTranscript([...asked, ...reply.tool_calls.map((c) => toolMessage(c.id, note, true, "error"))]))
      })
    )
    saved = transcript
    transcript = [...transcript, ...results.map((r) => toolMessage(r.call_id, r.output, r.is_error, r.outcome))]
  }
}
