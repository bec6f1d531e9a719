/**
 * The room a WebAssembly loop's input leaves for the saved transcript (docs/abi.md, "Limits").
 *
 * A loop's input carries the saved transcript — all of it, or for a loop that reads the tail
 * (`brain_transcript_tail`) its tail — and an input above BRAIN_MAX_WASM_IO_BYTES fails the
 * activation before the guest runs. A transcript that no input could carry would fail every
 * later turn the same way, and nothing but a turn can change it: the session could never run
 * again. So the transcript is bounded where it is made, not where it is read: a save (a
 * `set_transcript`, one riding on `model` or `dispatch`, one with the loop's output) whose
 * transcript the loop's next input could not carry is refused as that call's error, nothing of it
 * journaled; a create whose opening transcript the loop could not receive is refused 400.
 *
 * The room: BRAIN_MAX_WASM_IO_BYTES, less what the rest of the next input may need — the
 * session's configuration (when the loop reads it), a turn's input of BRAIN_MAX_INPUT_BYTES (at
 * most a quarter of the bound, the default's ratio), and INPUT_ENVELOPE_BYTES for the runtime
 * envelope and a small turn's Events. The Events need no room of their own: the input carries only
 * as many as fit after the rest of it (WasmHostWorkers.ts `guestInputJson`), so a previous
 * activation's cannot make the next input too large. A turn whose message is larger than the
 * quarter set aside for it (BRAIN_MAX_INPUT_BYTES above it, or 0) beside a transcript near the
 * room still fails; the next turn with a small message runs.
 *
 * Counting costs what changed for a loop that reads the tail (its tail only) and, for one that
 * reads the whole transcript, what was appended: each transcript's byte count is remembered with
 * it (`counted`), so an append adds its messages' bytes to its base's. A loop given the whole
 * transcript already pays O(transcript) a turn to receive it.
 */
import { failure, type Failure } from "../../domain/Failure.js"
import { INPUT_ENVELOPE_BYTES } from "../../domain/Limits.js"
import type { Message } from "../../domain/Messages.js"
import { tailStart, type UnansweredCalls, unansweredAfter, unansweredOf } from "../../domain/TranscriptTail.js"
import type { LoopInput } from "../../services/Agentloop.js"

/** The bound on the transcript a loop's input carries, for one session. */
export interface TranscriptRoom {
  /** Bytes of JSON at most of the transcript (or its tail) as the input carries it. */
  readonly bytes: number
  /** The loop reads the tail of at least this many messages; undefined: the whole transcript. */
  readonly tailMessages: number | undefined
}

/** UTF-8 bytes of each transcript's messages' JSON, without the array's brackets and commas, by transcript. */
const counted = new WeakMap<ReadonlyArray<Message>, number>()

const messageBytes = (m: Message): number => Buffer.byteLength(JSON.stringify(m), "utf8")

const sumOf = (messages: ReadonlyArray<Message>, from = 0): number => {
  let n = 0
  for (let i = from; i < messages.length; i++) n += messageBytes(messages[i]!)
  return n
}

/** The messages' bytes of a transcript, counted once and remembered with it. */
const messagesBytes = (messages: ReadonlyArray<Message>): number => {
  const known = counted.get(messages)
  if (known !== undefined) return known
  const n = sumOf(messages)
  counted.set(messages, n)
  return n
}

/** The JSON bytes of an array of messages whose own bytes add up to `sum`: brackets and commas. */
const arrayBytes = (sum: number, length: number) => 2 + sum + Math.max(0, length - 1)

/**
 * The room a loop's input leaves for the transcript in a session with `configuration`, or
 * undefined when nothing bounds it (a loop run in process, given its input as values).
 */
export const transcriptRoom = (
  limits: { readonly maxWasmIoBytes: number; readonly maxInputBytes: number },
  input: LoopInput | undefined,
  configurationJson: () => string
): TranscriptRoom | undefined => {
  if (input === undefined) return undefined
  const io = limits.maxWasmIoBytes
  const turnInput = Math.min(limits.maxInputBytes > 0 ? limits.maxInputBytes : Number.POSITIVE_INFINITY, Math.floor(io / 4))
  const configuration = input.configurationRead ? Buffer.byteLength(configurationJson(), "utf8") : 0
  return { bytes: io - turnInput - configuration - INPUT_ENVELOPE_BYTES, tailMessages: input.tailMessages }
}

/**
 * The bytes of JSON the input carries of transcript `to`, saved over `from` (whose unanswered
 * calls are `fromUnanswered`) by keeping its first `keep` messages: the whole array, or its tail.
 */
export const carriedBytes = (
  room: TranscriptRoom,
  from: ReadonlyArray<Message>,
  fromUnanswered: UnansweredCalls,
  to: ReadonlyArray<Message>,
  keep: number
): number => {
  if (room.tailMessages !== undefined) {
    const calls = keep >= from.length ? unansweredAfter(fromUnanswered, from.length, to.slice(from.length)) : unansweredOf(to)
    const start = tailStart(to.length, calls, room.tailMessages)
    return arrayBytes(sumOf(to, start), to.length - start)
  }
  let sum = counted.get(to)
  if (sum === undefined) {
    sum = keep >= from.length ? messagesBytes(from) + sumOf(to, from.length) : sumOf(to)
    counted.set(to, sum)
  }
  return arrayBytes(sum, to.length)
}

/** The refusal of a save whose transcript the loop's next input could not carry, or undefined. */
export const roomRefusal = (
  room: TranscriptRoom | undefined,
  from: ReadonlyArray<Message>,
  fromUnanswered: UnansweredCalls,
  to: ReadonlyArray<Message>,
  keep: number
): Failure | undefined => {
  if (room === undefined) return undefined
  const bytes = carriedBytes(room, from, fromUnanswered, to, keep)
  if (bytes <= room.bytes) return undefined
  return failure("payload_too_large", `${refusalText(room, bytes)}; nothing was saved`, {
    details: { bytes, limit: room.bytes }
  })
}

/** Why a transcript of `bytes` does not fit `room`, in words. */
export const refusalText = (room: TranscriptRoom, bytes: number, what = "the transcript"): string =>
  `${what} would be ${bytes} bytes of JSON in the loop's next input (${
    room.tailMessages === undefined ? "all of it" : "its tail"
  }), above the ${room.bytes} bytes BRAIN_MAX_WASM_IO_BYTES leaves it (docs/abi.md, "Limits")`
