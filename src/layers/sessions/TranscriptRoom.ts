/**
 * The room a WebAssembly loop's input leaves for the saved transcript (docs/abi.md, "The transcript's room").
 *
 * A loop's input carries the saved transcript — all of it, or for a loop that reads the tail
 * (`brain_transcript_tail`) its tail — and an input above BRAIN_MAX_WASM_IO_BYTES fails the
 * activation before the guest runs. A transcript that no input could carry would fail every
 * later turn the same way, and nothing but a turn can change it: the session could never run
 * again. So the transcript is bounded where it is made, not where it is read: a save (a
 * `set_transcript`, one riding on `model` or `dispatch`, one with the loop's output) whose
 * transcript the loop's next input could not carry is refused as that call's error, nothing of it
 * journaled; a create whose opening transcript the loop could not receive is refused 400, and so
 * is one whose configuration, for a loop that reads it, leaves no room for even an empty one
 * (`noRoom`: every turn's input would be above the bound, or no save could be taken).
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
  /** Bytes of the session's configuration as JSON the input carries (0 for a loop that does not read it). */
  readonly configurationBytes?: number
}

/** The JSON of an empty transcript, `[]`: the least a room must hold. */
const EMPTY_TRANSCRIPT_BYTES = 2

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
  const configuration = input.configurationRead ? Buffer.byteLength(configurationJson(), "utf8") : 0
  return {
    bytes: configurationRoom(limits) + EMPTY_TRANSCRIPT_BYTES - configuration,
    tailMessages: input.tailMessages,
    ...(input.configurationRead ? { configurationBytes: configuration } : {})
  }
}

/**
 * The bytes of JSON a session's configuration may have at most for a loop that reads it: what
 * leaves room for an empty transcript beside a turn's input and the envelope.
 */
export const configurationRoom = (limits: { readonly maxWasmIoBytes: number; readonly maxInputBytes: number }): number => {
  const io = limits.maxWasmIoBytes
  const turnInput = Math.min(limits.maxInputBytes > 0 ? limits.maxInputBytes : Number.POSITIVE_INFINITY, Math.floor(io / 4))
  return io - turnInput - INPUT_ENVELOPE_BYTES - EMPTY_TRANSCRIPT_BYTES
}

/**
 * Why `room` holds no transcript at all, not even an empty one, or undefined when it holds one:
 * the configuration a loop reads is too large (`configuration`: a create refuses it), or the
 * settings leave no room even without one (`settings`).
 */
export const noRoom = (room: TranscriptRoom): { readonly blames: "configuration" | "settings"; readonly text: string } | undefined => {
  if (room.bytes >= EMPTY_TRANSCRIPT_BYTES) return undefined
  const configuration = room.configurationBytes ?? 0
  const most = configuration + room.bytes - EMPTY_TRANSCRIPT_BYTES
  if (room.configurationBytes === undefined || most < 0) {
    return {
      blames: "settings",
      text: `BRAIN_MAX_WASM_IO_BYTES leaves no room for a transcript beside a turn's input (BRAIN_MAX_INPUT_BYTES, at most a quarter of it) and the runtime envelope (${INPUT_ENVELOPE_BYTES} bytes) (docs/abi.md, "The transcript's room")`
    }
  }
  return {
    blames: "configuration",
    text: `the session's configuration is ${configuration} bytes of JSON, which every input of a loop that reads it carries: beside a turn's input (BRAIN_MAX_INPUT_BYTES, at most a quarter of the bound) and the runtime envelope it leaves no room for a transcript within BRAIN_MAX_WASM_IO_BYTES; for this loop it may be at most ${most} bytes (docs/abi.md, "The transcript's room")`
  }
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
    details: { bytes, limit: Math.max(0, room.bytes) }
  })
}

/** Why a transcript of `bytes` does not fit `room`, in words. */
export const refusalText = (room: TranscriptRoom, bytes: number, what = "the transcript"): string => {
  const carried = `${what} would be ${bytes} bytes of JSON in the loop's next input (${room.tailMessages === undefined ? "all of it" : "its tail"})`
  // A session made under larger settings (BRAIN_MAX_WASM_IO_BYTES lowered since): its configuration alone fills the input.
  const none = noRoom(room)
  return none !== undefined ? `${carried}, but ${none.text}` : `${carried}, above the ${room.bytes} bytes BRAIN_MAX_WASM_IO_BYTES leaves it (docs/abi.md, "The transcript's room")`
}
