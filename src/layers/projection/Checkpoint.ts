/**
 * The checkpoint file: `crc32-hex\n` then a JSON body `{format, session, through, state}`.
 * `through` names the last record it covers by sequence and a digest of that record, so an open
 * can tell whether the journal still holds the exact prefix the checkpoint was folded from.
 *
 * A state can be larger than V8's largest string (about 2^29 characters, 512 MiB): a long
 * conversation of large messages (docs/abi.md: "Its conversation grows without this bound"). So
 * the body is never one string. It is written piece by piece (`encodeCheckpoint`): the body, the
 * state and the state's arrays member by member, anything deeper whole unless its text passes the
 * limit (then member by member too, a string in slices), each piece's UTF-8 bytes added to the
 * checksum as they go, in chunks of CHECKPOINT_CHUNK_CHARS. The text is byte for byte what one
 * `JSON.stringify` of the body gave, so the format is unchanged. It is read back the same way
 * (`decodeCheckpoint`): from bytes, whole when they fit one string, else member by member.
 */
import { constants } from "node:buffer"
import { crc32 } from "../journal/Frame.js"
import type { JournalRecord } from "../../domain/Records.js"
import type { SerializedState } from "../../domain/SerializedState.js"
import type { CheckpointPieces } from "../../services/Projection.js"

export const CHECKPOINT_FORMAT = "brain-checkpoint/3"

export interface CheckpointBody {
  readonly format: typeof CHECKPOINT_FORMAT
  readonly session: string
  readonly through: { readonly sequence: number; readonly digest: number }
  readonly state: SerializedState
}

/** Identifies one record: its sequence, time, kind and payload. */
export const recordDigest = (r: JournalRecord): number =>
  crc32(Buffer.from(JSON.stringify([r.sequence, r.recorded_at_ms, r.kind, r.payload]), "utf8"))

/** Bytes. The header line, `crc32-hex\n`. */
export const CHECKPOINT_HEADER_BYTES = 9

/** Characters. The longest string V8 makes: no piece of a checkpoint's text is longer. */
export const MAX_STRING_CHARS = constants.MAX_STRING_LENGTH

/** Characters. About how much text one chunk of a checkpoint being written holds (one write, one checksum step). */
export const CHECKPOINT_CHUNK_CHARS = 1 << 20

/**
 * Depth below which containers are always written and read member by member: the body (0), the
 * state (1) and the state's arrays (2), which grow without bound (transcript, kv, requests).
 */
const SPLIT_DEPTH = 3

export interface CheckpointLimits {
  /** The longest string a piece may be (tests set it small to reach the split paths). */
  readonly maxStringChars?: number
  readonly chunkChars?: number
}

const omitted = (v: unknown) => v === undefined || typeof v === "function" || typeof v === "symbol"

/** The value's JSON if it is at most `limit` characters; undefined when longer (or longer than V8 makes). */
const stringifyWithin = (value: unknown, limit: number): string | undefined => {
  try {
    const text = JSON.stringify(value)
    return text.length > limit ? undefined : text
  } catch (e) {
    if (e instanceof RangeError) return undefined
    throw e
  }
}

/** The pieces of `value`'s JSON, in order: their concatenation is `JSON.stringify(value)`. */
function* jsonPieces(value: unknown, depth: number, limit: number): Generator<string> {
  if (depth >= SPLIT_DEPTH) {
    const whole = stringifyWithin(value, limit)
    if (whole !== undefined) return yield whole
  }
  if (value !== null && typeof value === "object" && typeof (value as { toJSON?: unknown }).toJSON === "function") {
    value = (value as { toJSON: () => unknown }).toJSON()
  }
  if (Array.isArray(value)) {
    yield "["
    for (let i = 0; i < value.length; i++) {
      if (i > 0) yield ","
      const item: unknown = value[i]
      if (omitted(item)) yield "null"
      else yield* jsonPieces(item, depth + 1, limit)
    }
    return yield "]"
  }
  if (value !== null && typeof value === "object") {
    let first = true
    yield "{"
    for (const key of Object.keys(value)) {
      const item: unknown = (value as Record<string, unknown>)[key]
      if (omitted(item)) continue
      yield `${first ? "" : ","}${JSON.stringify(key)}:`
      first = false
      yield* jsonPieces(item, depth + 1, limit)
    }
    return yield "}"
  }
  if (typeof value === "string") {
    const whole = stringifyWithin(value, limit)
    if (whole !== undefined) return yield whole
    // Slices that each escape to at most `limit` (an escape is at most 6 characters), never
    // splitting a surrogate pair: the same text as the whole string's JSON.
    const step = Math.max(2, Math.floor(limit / 6))
    yield "\""
    for (let at = 0; at < value.length;) {
      let end = Math.min(value.length, at + step)
      const last = value.charCodeAt(end - 1)
      if (end < value.length && last >= 0xd800 && last <= 0xdbff) end--
      yield JSON.stringify(value.slice(at, end)).slice(1, -1)
      at = end
    }
    return yield "\""
  }
  yield JSON.stringify(value)
}

/**
 * The checkpoint's bytes, computed as they are written: its body in chunks of about
 * `chunkChars`, then its header (the body's checksum), which goes at the file's start.
 * Nothing of it is a string longer than `maxStringChars`.
 */
export const encodeCheckpoint = (body: CheckpointBody, limits: CheckpointLimits = {}): CheckpointPieces => {
  const limit = limits.maxStringChars ?? MAX_STRING_CHARS
  const chunkChars = Math.min(limits.chunkChars ?? CHECKPOINT_CHUNK_CHARS, limit)
  let crc = 0
  let done = false
  const bytesOf = (text: string) => {
    const bytes = Buffer.from(text, "utf8")
    crc = crc32(bytes, crc)
    return bytes
  }
  function* chunks(): Generator<Uint8Array> {
    let held = ""
    for (const piece of jsonPieces(body, 0, limit)) {
      if (held.length + piece.length > chunkChars) {
        if (held.length > 0) yield bytesOf(held)
        held = ""
        if (piece.length >= chunkChars) {
          yield bytesOf(piece)
          continue
        }
      }
      held += piece
    }
    if (held.length > 0) yield bytesOf(held)
    done = true
  }
  return {
    headBytes: CHECKPOINT_HEADER_BYTES,
    rest: { [Symbol.iterator]: chunks },
    head: () => {
      if (!done) throw new Error("a checkpoint's header is known only once its body is written")
      return Buffer.from(`${crc.toString(16).padStart(8, "0")}\n`, "utf8")
    }
  }
}

/** Bytes. How much of a checkpoint's start `checkpointThrough` needs: its header and `format`, `session` and `through`, which come first. */
export const CHECKPOINT_HEAD_BYTES = 256

/**
 * The sequence a checkpoint says it covers, read from its first bytes (CHECKPOINT_HEAD_BYTES)
 * without checking the rest: for weighing what an open with it will read, never for using it
 * (`decodeCheckpoint` does that). Undefined when its start does not say.
 */
export const checkpointThrough = (head: string): number | undefined => {
  const found = /^[0-9a-f]{8}\n\{"format":"[^"]*","session":"[^"]*","through":\{"sequence":(\d{1,15})[,}]/.exec(head)
  return found === null ? undefined : Number(found[1])
}

/** What a checkpoint's head says: its checksum, session and the record it was folded through. */
export interface CheckpointHead {
  /** The header line's CRC-32 of the body, as written (8 hex digits). */
  readonly checksum: string
  readonly session: string
  readonly through: { readonly sequence: number; readonly digest: number }
}

const HEAD = new RegExp(
  `^([0-9a-f]{8})\\n\\{"format":${JSON.stringify(CHECKPOINT_FORMAT).replace(/[/]/g, "\\/")},"session":"([^"\\\\]*)","through":\\{"sequence":(\\d{1,15}),"digest":(\\d{1,10})\\}`
)

/**
 * A checkpoint of this format's head, read from its first bytes (CHECKPOINT_HEAD_BYTES), as its
 * encoder writes it (`format`, `session`, `through` first, in that order), without checking the
 * rest: the caller checks the body against `checksum`. Undefined when its start does not say.
 */
export const checkpointHead = (head: string): CheckpointHead | undefined => {
  const found = HEAD.exec(head)
  if (found === null) return undefined
  const sequence = Number(found[3])
  return sequence < 1 ? undefined : { checksum: found[1]!, session: found[2]!, through: { sequence, digest: Number(found[4]) } }
}

const QUOTE = 0x22
const BACKSLASH = 0x5c
const COMMA = 0x2c
const COLON = 0x3a
const OPEN_OBJECT = 0x7b
const CLOSE_OBJECT = 0x7d
const OPEN_ARRAY = 0x5b
const CLOSE_ARRAY = 0x5d

class Malformed extends Error {}

const isSpace = (b: number | undefined) => b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d

/**
 * Reads JSON from UTF-8 bytes without making a string longer than `limit`: a value whose bytes
 * fit is parsed whole; a container above SPLIT_DEPTH, or one too long, member by member; a string
 * too long, in slices. (JSON's structural characters are ASCII, and no byte of a multi-byte UTF-8
 * character is, so the bytes can be scanned for them.)
 */
class PieceReader {
  constructor(readonly buf: Uint8Array, readonly limit: number) {}

  skip(at: number): number {
    while (isSpace(this.buf[at])) at++
    return at
  }

  /** Just past the string starting at `at` (a quote). */
  stringEnd(at: number): number {
    let from = at + 1
    for (;;) {
      const quote = this.buf.indexOf(QUOTE, from)
      if (quote < 0) throw new Malformed()
      let escapes = 0
      for (let k = quote - 1; this.buf[k] === BACKSLASH; k--) escapes++
      if (escapes % 2 === 0) return quote + 1
      from = quote + 1
    }
  }

  /** Just past the value starting at `at`. */
  valueEnd(at: number): number {
    const first = this.buf[at]
    if (first === QUOTE) return this.stringEnd(at)
    if (first === OPEN_OBJECT || first === OPEN_ARRAY) {
      let open = 0
      for (let k = at; k < this.buf.length; k++) {
        const b = this.buf[k]
        if (b === QUOTE) k = this.stringEnd(k) - 1
        else if (b === OPEN_OBJECT || b === OPEN_ARRAY) open++
        else if (b === CLOSE_OBJECT || b === CLOSE_ARRAY) {
          if (--open === 0) return k + 1
        }
      }
      throw new Malformed()
    }
    let k = at
    while (k < this.buf.length && !isSpace(this.buf[k]) && this.buf[k] !== COMMA && this.buf[k] !== CLOSE_OBJECT && this.buf[k] !== CLOSE_ARRAY) k++
    if (k === at) throw new Malformed()
    return k
  }

  text(from: number, to: number): string {
    return Buffer.from(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength).toString("utf8", from, to)
  }

  /** The value starting at `at` and just past it. */
  value(at: number, depth: number): readonly [unknown, number] {
    const first = this.buf[at]
    const container = first === OPEN_OBJECT || first === OPEN_ARRAY
    if (!container || depth >= SPLIT_DEPTH) {
      const end = this.valueEnd(at)
      if (end - at <= this.limit) return [JSON.parse(this.text(at, end)), end]
      if (first === QUOTE) return [this.longString(at, end), end]
      if (!container) throw new Malformed()
    }
    return first === OPEN_OBJECT ? this.object(at, depth) : this.array(at, depth)
  }

  object(at: number, depth: number): readonly [unknown, number] {
    const out: Record<string, unknown> = {}
    let k = this.skip(at + 1)
    if (this.buf[k] === CLOSE_OBJECT) return [out, k + 1]
    for (;;) {
      if (this.buf[k] !== QUOTE) throw new Malformed()
      const keyEnd = this.stringEnd(k)
      const key = this.value(k, SPLIT_DEPTH)[0] as string
      k = this.skip(keyEnd)
      if (this.buf[k] !== COLON) throw new Malformed()
      const [item, end] = this.value(this.skip(k + 1), depth + 1)
      // As JSON.parse does: a key named __proto__ is an own property.
      Object.defineProperty(out, key, { value: item, writable: true, enumerable: true, configurable: true })
      k = this.skip(end)
      if (this.buf[k] === CLOSE_OBJECT) return [out, k + 1]
      if (this.buf[k] !== COMMA) throw new Malformed()
      k = this.skip(k + 1)
    }
  }

  array(at: number, depth: number): readonly [unknown, number] {
    const out: Array<unknown> = []
    let k = this.skip(at + 1)
    if (this.buf[k] === CLOSE_ARRAY) return [out, k + 1]
    for (;;) {
      const [item, end] = this.value(k, depth + 1)
      out.push(item)
      k = this.skip(end)
      if (this.buf[k] === CLOSE_ARRAY) return [out, k + 1]
      if (this.buf[k] !== COMMA) throw new Malformed()
      k = this.skip(k + 1)
    }
  }

  /** A string whose JSON is longer than the limit, read in slices cut between two characters and outside an escape. */
  longString(at: number, end: number): string {
    const last = end - 1
    const step = Math.max(16, this.limit - 2)
    let out = ""
    for (let from = at + 1; from < last;) {
      let to = Math.min(last, from + step)
      while (to < last && (this.buf[to]! & 0xc0) === 0x80) to--
      // The escape that `to` would cut, if any, starts at the last backslash within 6 bytes before
      // it that an even run of backslashes precedes.
      for (let k = to - 1; k >= from && k >= to - 6; k--) {
        if (this.buf[k] !== BACKSLASH) continue
        let run = 0
        for (let j = k; j >= from && this.buf[j] === BACKSLASH; j--) run++
        if (run % 2 === 1 && k + (this.buf[k + 1] === 0x75 ? 6 : 2) > to) to = k
        break
      }
      if (to <= from) throw new Malformed()
      out += JSON.parse(`"${this.text(from, to)}"`) as string
      from = to
    }
    return out
  }
}

/** The body if the bytes are whole and of this format; undefined when damaged. */
export const decodeCheckpoint = (bytes: Uint8Array, session: string, limits: CheckpointLimits = {}): CheckpointBody | undefined => {
  if (bytes.length <= CHECKPOINT_HEADER_BYTES || bytes[CHECKPOINT_HEADER_BYTES - 1] !== 0x0a) return undefined
  const json = bytes.subarray(CHECKPOINT_HEADER_BYTES)
  const header = Buffer.from(bytes.buffer, bytes.byteOffset, CHECKPOINT_HEADER_BYTES - 1).toString("latin1")
  if (crc32(json).toString(16).padStart(8, "0") !== header) return undefined
  const limit = limits.maxStringChars ?? MAX_STRING_CHARS
  let body: CheckpointBody
  try {
    const reader = new PieceReader(json, limit)
    const start = reader.skip(0)
    const [value, end] = json.length <= limit ? [JSON.parse(reader.text(0, json.length)), json.length] : reader.value(start, 0)
    if (reader.skip(end) !== json.length) return undefined
    body = value as CheckpointBody
  } catch {
    return undefined
  }
  if (body === null || typeof body !== "object") return undefined
  if (body.format !== CHECKPOINT_FORMAT || body.session !== session) return undefined
  if (!Number.isInteger(body.through?.sequence) || body.through.sequence < 1) return undefined
  return body
}
