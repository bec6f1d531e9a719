/**
 * The SSE wire form of a session's Events (DESIGN §7): a recorded Event is `id: <sequence>`,
 * `event: <kind>`, `data: <the whole Event envelope>`, then a blank line. Comments (`: …`) keep
 * idle connections open.
 *
 * Control frames say why a stream ends other than after `session_ended`. They carry no `id:`, so
 * a reconnecting client's Last-Event-ID stays at the last recorded Event, and their names are
 * reserved kinds (Records.ts), so no Event can be taken for one:
 * - `stream_lagged`, `data: {after, message}`: the reader fell too far behind; resume after `after`.
 * - `stream_error`, `data: {code, message, retryable, details?}` (the error body): the stream failed.
 *
 * Live model deltas are frames without `id:` too: `event: model_delta`, `data: {session_id,
 * model_call, type, …}` where `model_call` is the sequence of the call's `model_call_started`. They
 * are never journaled and never in a page; a reader that reconnects gets the committed
 * `model_call_ended` instead.
 */
import type { Failure } from "../../domain/Failure.js"
import { type Event, eventJson } from "../../domain/Events.js"
import type { ModelDelta } from "../../domain/Model.js"
import { MODEL_DELTA, STREAM_ERROR, STREAM_LAGGED } from "../../domain/Records.js"

/**
 * One recorded Event's frame. No kind holding a line break is emitted any more (Records.ts
 * `emitRefusal`), but a journal written before that rule may hold one: it cannot be an `event:`
 * field (it would split the frame), so such an Event goes without one (a plain `message`), its
 * kind in `data`.
 */
export const eventFrame = (e: Event): string =>
  /[\r\n]/.test(e.kind)
    ? `id: ${e.sequence}\ndata: ${eventJson(e)}\n\n`
    : `id: ${e.sequence}\nevent: ${e.kind}\ndata: ${eventJson(e)}\n\n`

export const encode = (text: string): Uint8Array => Buffer.from(text, "utf8")

export const CONNECTED = encode(": connected\n\n")
export const HEARTBEAT = encode(": heartbeat\n\n")

/** A frame with no `id:`: `event: <name>` and one `data:` line of JSON (JSON has no raw line break). */
export const namedFrame = (event: string, data: unknown): Uint8Array => encode(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`)

export const laggedFrame = (after: number, message: string): Uint8Array => namedFrame(STREAM_LAGGED, { after, message })

export const errorFrame = (f: Pick<Failure, "code" | "message" | "retryable" | "details">): Uint8Array =>
  namedFrame(STREAM_ERROR, {
    code: f.code,
    message: f.message,
    retryable: f.retryable,
    ...(f.details !== undefined ? { details: f.details } : {})
  })

export const deltaFrame = (session: string, modelCall: number, delta: ModelDelta): Uint8Array =>
  namedFrame(MODEL_DELTA, { session_id: session, model_call: modelCall, ...delta })

const FRAME_END = Buffer.from("\n\n")

/** The sequence of the recorded frame at `at` ("id: <sequence>\n"). */
const sequenceAt = (buf: Buffer, at: number): number => Number(buf.toString("latin1", at + 4, buf.indexOf(10, at)))

/**
 * `bytes` (recorded frames as `eventFrame` writes them) in parts of whole frames, each at most
 * `maxBytes` and `maxEvents` (a larger frame alone): views of `bytes`, not copies, with how many
 * frames each holds and the sequence of its last.
 */
export const frameParts = (
  bytes: Uint8Array,
  maxBytes: number,
  maxEvents: number
): Array<{ readonly bytes: Uint8Array; readonly events: number; readonly last: number }> => {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const parts: Array<{ readonly bytes: Uint8Array; readonly events: number; readonly last: number }> = []
  let start = 0
  let events = 0
  let last = 0
  for (let at = 0; at < buf.length;) {
    const end = buf.indexOf(FRAME_END, at)
    const next = end < 0 ? buf.length : end + 2
    if (events > 0 && (next - start > maxBytes || events >= maxEvents)) {
      parts.push({ bytes: buf.subarray(start, at), events, last })
      start = at
      events = 0
    }
    last = sequenceAt(buf, at)
    events++
    at = next
  }
  if (events > 0) parts.push({ bytes: buf.subarray(start), events, last })
  return parts
}

/**
 * The frames of `bytes` (recorded frames as `eventFrame` writes them) whose sequence is past
 * `after`, and how many. A frame ends at its first blank line: its JSON data holds no line break.
 */
export const framesAfter = (bytes: Uint8Array, after: number): { readonly bytes: Uint8Array; readonly events: number } => {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  let events = 0
  let start = -1
  for (let at = 0; at < buf.length;) {
    const end = buf.indexOf(FRAME_END, at)
    const next = end < 0 ? buf.length : end + 2
    if (sequenceAt(buf, at) > after) {
      if (start < 0) start = at
      events++
    }
    at = next
  }
  return { bytes: start < 0 ? buf.subarray(0, 0) : buf.subarray(start), events }
}
