/**
 * The answer of `GET /v1/sessions/{id}/transcript`, `{"messages": […], "through_sequence": n}`,
 * written piece by piece.
 *
 * A session holds its transcript as messages, and its JSON can be far larger than what it holds
 * (a character escaped as `\u0001` takes six): one string of the whole answer could pass V8's
 * maximum string length (about 2^29 characters), and a client that does not read would hold all of
 * it, encoded, until its connection is cut. So the JSON is made by pieces of about PIECE_CHARS (a
 * long string, a message's content most often, is written in parts of its own), each encoded and
 * written only when the socket has taken the one before (the platform's stream body waits for
 * `drain`): an answer not taken holds the transcript it is made from, one piece, and what the
 * socket buffers. An answer surely below WHOLE_CHARS is made and sent whole, with its length.
 *
 * Every answer holds its share of the server's answer memory (AnswerMemory.ts) until it is written
 * or its connection closed: one sent whole, by its JSON; one sent by pieces, by the characters of
 * its transcript (which the answer keeps: a released session's transcript is its own copy) and one
 * encoded piece. One that does not fit is refused 503 `overloaded` before anything of it is encoded.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Schema, type Scope, Stream } from "effect"
import type { Overloaded } from "../domain/Errors.js"
import type { Message } from "../domain/Messages.js"
import type { AnswerMemory } from "./AnswerMemory.js"
import { Transcript } from "./Schemas.js"

/** Characters. About this much JSON is gathered before a piece is encoded and written: large enough that a piece costs little, small enough that a client that does not read holds little. */
export const PIECE_CHARS = 256 * 1024

/** Characters of a long string written at once (its JSON at most six times as many: `\u0001`). */
const STRING_PART_CHARS = PIECE_CHARS / 4

const encode = Schema.encodeSync(Transcript)

/**
 * The JSON of `value` (data as the contract's encoder makes it) in parts, as `JSON.stringify`
 * writes it: a value whose JSON is surely at most PIECE_CHARS in one part, a larger array or
 * object member by member, a longer string in parts of STRING_PART_CHARS characters (never
 * between the halves of a surrogate pair, which JSON.stringify would escape apart).
 */
function* jsonParts(value: unknown, key = ""): Generator<string, void> {
  if (value !== null && typeof value === "object" && typeof (value as { toJSON?: unknown }).toJSON === "function") {
    value = (value as { toJSON: (key: string) => unknown }).toJSON(key)
  }
  if (typeof value !== "object" || value === null) {
    if (typeof value !== "string" || value.length <= STRING_PART_CHARS) {
      yield JSON.stringify(value) ?? "null"
      return
    }
    yield "\""
    for (let at = 0; at < value.length;) {
      let end = Math.min(value.length, at + STRING_PART_CHARS)
      const last = value.charCodeAt(end - 1)
      if (end < value.length && last >= 0xd800 && last <= 0xdbff) end--
      yield JSON.stringify(value.slice(at, end)).slice(1, -1)
      at = end
    }
    yield "\""
    return
  }
  if (jsonCharsAtMost(value, PIECE_CHARS) <= PIECE_CHARS) {
    yield JSON.stringify(value)
    return
  }
  if (Array.isArray(value)) {
    yield "["
    for (let i = 0; i < value.length; i++) {
      if (i > 0) yield ","
      const item: unknown = value[i]
      if (item === undefined || typeof item === "function" || typeof item === "symbol") yield "null"
      else yield* jsonParts(item, String(i))
    }
    yield "]"
    return
  }
  yield "{"
  let first = true
  for (const name of Object.keys(value)) {
    const member: unknown = (value as Record<string, unknown>)[name]
    if (member === undefined || typeof member === "function" || typeof member === "symbol") continue
    yield `${first ? "" : ","}${JSON.stringify(name)}:`
    first = false
    yield* jsonParts(member, name)
  }
  yield "}"
}

/**
 * The answer's JSON in pieces of about PIECE_CHARS (less than two and a half at most), made as
 * they are taken. Their concatenation is the JSON of `transcript` as the contract encodes it.
 */
export function* transcriptPieces(transcript: typeof Transcript.Type): Generator<string, void> {
  // Encoded at once, as the contract's encoder did (it makes each message's object again, sharing
  // its strings): one call costs less than one per message. Only the JSON is made by pieces.
  let piece = ""
  for (const part of jsonParts(encode(transcript))) {
    piece += part
    if (piece.length >= PIECE_CHARS) {
      yield piece
      piece = ""
    }
  }
  if (piece.length > 0) yield piece
}

/** The pieces, each encoded (UTF-8) only when it is taken: its string is let go at once. */
function* encodedPieces(transcript: typeof Transcript.Type): Generator<Uint8Array, void> {
  for (const piece of transcriptPieces(transcript)) yield Buffer.from(piece, "utf8")
}

/**
 * Characters. An answer whose JSON is surely below this is made as one string (it costs less than
 * pieces, about a fifth for a transcript of twenty messages); a larger one, by pieces.
 */
export const WHOLE_CHARS = PIECE_CHARS

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

/** Characters a value holds, about (a string's length; anything else, a sixth of its JSON's bound). */
const heldChars = (value: unknown): number => typeof value === "string" ? value.length : Math.ceil(jsonCharsAtMost(value, Infinity) / 6)

/**
 * Bytes. What an answer not taken holds, about: the characters of its transcript (a byte each, as
 * V8 holds Latin-1 text), MESSAGE_CHARS a message, and one encoded piece (three bytes a character at most).
 */
export const transcriptWeight = (messages: ReadonlyArray<Message>): number => {
  let n = 3 * PIECE_CHARS
  for (const m of messages) {
    n += MESSAGE_CHARS + heldChars(m.content)
    if (m.tool_calls !== undefined) n += heldChars(m.tool_calls)
    if (m.tool_call_id !== undefined) n += m.tool_call_id.length
  }
  return n
}

/**
 * The transcript's answer, holding its weight of `answers` for as long as the response lasts
 * (refused 503 `overloaded` when it does not fit): whole when it is surely below WHOLE_CHARS, else
 * a stream of encoded pieces, each made once the socket has taken the one before. A transcript
 * off the contract is the server's fault: a defect (500 before anything is written).
 */
export const transcriptAnswer = (
  transcript: typeof Transcript.Type,
  answers: AnswerMemory
): Effect.Effect<HttpServerResponse.HttpServerResponse, Overloaded, Scope.Scope> =>
  Effect.suspend(() => {
    const chars = transcriptCharsAtMost(transcript.messages, WHOLE_CHARS)
    // Sent whole, it holds its JSON (three bytes a character at most, encoded); by pieces, its
    // transcript and one piece.
    return chars <= WHOLE_CHARS
      ? Effect.zipRight(answers.hold(3 * chars, WHAT), Effect.sync(() => HttpServerResponse.unsafeJson(encode(transcript))))
      : Effect.zipRight(
        answers.hold(transcriptWeight(transcript.messages), WHAT),
        Effect.sync(() => HttpServerResponse.stream(Stream.fromIteratorSucceed(encodedPieces(transcript), 1), { contentType: "application/json" }))
      )
  })

const WHAT = "this transcript's answer"
