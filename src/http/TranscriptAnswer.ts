/**
 * The answer of `GET /v1/sessions/{id}/transcript`, `{"messages": […], "through_sequence": n}`,
 * written piece by piece.
 *
 * A session holds its transcript as messages, and its JSON can be far larger than what it holds
 * (a character escaped as `\u0001` takes six): one string of the whole answer could pass V8's
 * maximum string length (about 2^29 characters), and the transcript, which the session legally
 * holds, could then never be read. So each message's JSON is made on its own, gathered into pieces
 * of about PIECE_CHARS, and each piece written when the socket has taken the one before (the
 * platform's stream body waits for `drain`). An answer surely below WHOLE_CHARS — nearly every one —
 * is made and sent whole, with its length, as before.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Schema, Stream } from "effect"
import type { Message } from "../domain/Messages.js"
import { Transcript } from "./Schemas.js"

/** Characters. About this much JSON is gathered before a piece is written: large enough that a piece costs little, small enough to hold many at once. */
export const PIECE_CHARS = 256 * 1024

const encode = Schema.encodeSync(Transcript)

/**
 * The answer's JSON in pieces of about PIECE_CHARS (one message's JSON more at most), made as
 * they are taken. Their concatenation is the JSON of `transcript` as the contract encodes it.
 */
export function* transcriptPieces(transcript: typeof Transcript.Type): Generator<string, void> {
  // Encoded at once, as the contract's encoder did (it makes each message's object again, sharing
  // its strings): one call costs less than one per message. Only the JSON is made by pieces.
  const encoded = encode(transcript)
  const messages = encoded.messages
  let piece = "{\"messages\":["
  for (let i = 0; i < messages.length; i++) {
    piece += (i === 0 ? "" : ",") + JSON.stringify(messages[i])
    if (piece.length >= PIECE_CHARS) {
      yield piece
      piece = ""
    }
  }
  yield `${piece}],"through_sequence":${JSON.stringify(encoded.through_sequence)}}`
}

const encoder = new TextEncoder()

/**
 * Characters. An answer whose JSON is surely below this is made as one string, as before (it costs
 * less than pieces, about a fifth for a transcript of twenty messages); a larger one, by pieces.
 */
export const WHOLE_CHARS = 16 * 1024 * 1024

/**
 * An upper bound of the characters of `value`'s JSON (six a string character, as `\u0001`), or
 * more than `limit` once past it (it stops there): a walk that allocates nothing.
 */
export const jsonCharsAtMost = (value: unknown, limit: number): number => {
  switch (typeof value) {
    case "string":
      return 2 + 6 * value.length
    case "number":
      return 24
    case "boolean":
      return 5
    case "object": {
      if (value === null) return 4
      let n = 2
      if (Array.isArray(value)) {
        for (const item of value) {
          n += 1 + jsonCharsAtMost(item, limit - n)
          if (n > limit) return n
        }
        return n
      }
      for (const key in value) {
        n += 4 + 6 * key.length + jsonCharsAtMost((value as Record<string, unknown>)[key], limit - n)
        if (n > limit) return n
      }
      return n
    }
    default:
      return 4
  }
}

/** Characters. A message's JSON besides its content, tool calls and call id: its keys, its role, the answer's envelope share. */
const MESSAGE_CHARS = 96

/** `jsonCharsAtMost` of the answer's messages, a message's usual fields read directly (a string content is most of it). */
const transcriptCharsAtMost = (messages: ReadonlyArray<Message>, limit: number): number => {
  let n = 64
  for (let i = 0; i < messages.length && n <= limit; i++) {
    const m = messages[i]!
    n += MESSAGE_CHARS + (typeof m.content === "string" ? 6 * m.content.length : jsonCharsAtMost(m.content, limit - n))
    if (m.tool_calls !== undefined) n += jsonCharsAtMost(m.tool_calls, limit - n)
    if (m.tool_call_id !== undefined) n += 6 * m.tool_call_id.length
  }
  return n
}

/**
 * The transcript's answer: whole when it is surely below WHOLE_CHARS, else a stream of pieces (or
 * whole, when it fits one). A transcript off the contract is the server's fault: a defect (500
 * before anything is written).
 */
export const transcriptAnswer = (transcript: typeof Transcript.Type): Effect.Effect<HttpServerResponse.HttpServerResponse> =>
  Effect.sync(() => {
    if (transcriptCharsAtMost(transcript.messages, WHOLE_CHARS) <= WHOLE_CHARS) return HttpServerResponse.unsafeJson(encode(transcript))
    const pieces = transcriptPieces(transcript)
    // Never done at the first: the answer's closing piece is always made.
    const first = pieces.next().value ?? ""
    const second = pieces.next()
    if (second.done === true) return HttpServerResponse.text(first, { contentType: "application/json" })
    const head = [first, second.value]
    const rest = Stream.fromIteratorSucceed(pieces[Symbol.iterator](), 1)
    return HttpServerResponse.stream(
      Stream.map(Stream.concat(Stream.fromIterable(head), rest), (piece) => encoder.encode(piece)),
      { contentType: "application/json" }
    )
  })
