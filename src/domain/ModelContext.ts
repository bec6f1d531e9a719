/**
 * Model calls record `message_count` and `context: {through_sequence, delta}` instead of the
 * whole conversation. Applying the delta to the saved transcript as of `through_sequence`
 * rebuilds the exact request, from the journal alone.
 */
import type { ModelRequest } from "./Model.js"
import { foldAll, type SessionState } from "./Projection.js"
import { applyDelta, diffTranscript } from "./TranscriptDelta.js"
import type { Message } from "./Messages.js"
import type { JournalRecord } from "./Records.js"

/** The started payload of a model call about to be sent, against the saved transcript. */
export const modelCallContext = (
  state: Pick<SessionState, "transcript" | "transcriptThrough" | "configuration">,
  messages: ReadonlyArray<Message>,
  system: string | undefined
) => ({
  message_count: messages.length,
  context: { through_sequence: state.transcriptThrough, delta: diffTranscript(state.transcript, messages) },
  ...(system !== undefined && system !== state.configuration?.system ? { system } : {})
})

/**
 * Rebuilds the request of the model call started at `sequence`. `records` must hold the journal
 * from sequence 1 through at least that record. Returns undefined when there is no such call or
 * the rebuilt conversation does not have the recorded length.
 */
export const rebuildModelRequest = (records: ReadonlyArray<JournalRecord>, sequence: number): ModelRequest | undefined => {
  const started = records.find((r) => r.sequence === sequence)
  if (!started || started.kind !== "model_call_started") return undefined
  const { context, message_count, options, system: callSystem } = started.payload
  const before = foldAll(records.filter((r) => r.sequence <= context.through_sequence))
  const messages = applyDelta(before.transcript, context.delta)
  if (messages.length !== message_count) return undefined
  const config = foldAll(records.filter((r) => r.sequence <= sequence)).configuration
  const system = callSystem ?? config?.system
  return {
    messages,
    ...(system !== undefined ? { system } : {}),
    ...(config?.tools !== undefined ? { tools: config.tools } : {}),
    ...(options !== undefined ? { options } : {})
  }
}
