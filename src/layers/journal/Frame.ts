/**
 * The on-disk frame (DESIGN §2):
 *
 *   u32 LE body length | u32 LE CRC-32 of the length field | u32 LE CRC-32 of the body | body
 *   body = u64 LE sequence | u64 LE recorded_at_ms | u16 LE kind field | kind (UTF-8) | JSON payload
 *
 * CRC-32 (zlib.crc32, hardware-assisted in Node 20.15+) detects torn and flipped bytes; it is not
 * a defence against deliberate tampering. The header checksum keeps a damaged length from ever
 * passing for a torn write. Bit 15 of the kind field marks "another frame of the same atomic
 * append follows"; the low 15 bits are the kind's length.
 */
import * as zlib from "node:zlib"
import { MAX_FRAME_BYTES } from "../../domain/Limits.js"

export const HEADER_BYTES = 12
export const BODY_FIXED_BYTES = 18
export const GROUP_CONTINUES = 0x8000
const KIND_LENGTH_MASK = 0x7fff

export const crc32 = (data: Uint8Array, initial = 0): number => zlib.crc32(data, initial)

/** The CRC-32 table (the zlib polynomial), for the four bytes of a length field. */
const CRC_TABLE = (() => {
  const table = new Int32Array(256)
  for (let n = 0; n < 256; n++) {
    let c = n
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
    table[n] = c
  }
  return table
})()

/**
 * CRC-32 of the four bytes at `offset` (a frame's length field): `crc32` of them, computed here,
 * without the view and the native call that cost more than the four bytes' work (an open checks
 * every frame's header: 100,000 of them took 12–33 ms through zlib, 3–6 ms this way).
 */
export const lengthCrc = (buf: Uint8Array, offset: number): number => {
  let c = -1
  c = CRC_TABLE[(c ^ buf[offset]!) & 0xff]! ^ (c >>> 8)
  c = CRC_TABLE[(c ^ buf[offset + 1]!) & 0xff]! ^ (c >>> 8)
  c = CRC_TABLE[(c ^ buf[offset + 2]!) & 0xff]! ^ (c >>> 8)
  c = CRC_TABLE[(c ^ buf[offset + 3]!) & 0xff]! ^ (c >>> 8)
  return (c ^ -1) >>> 0
}

const writeU64 = (buf: Buffer, value: number, offset: number) => {
  buf.writeUInt32LE(value % 0x1_0000_0000, offset)
  buf.writeUInt32LE(Math.floor(value / 0x1_0000_0000), offset + 4)
}

const readU64 = (buf: Buffer, offset: number): number =>
  buf.readUInt32LE(offset) + buf.readUInt32LE(offset + 4) * 0x1_0000_0000

/**
 * Encodes one frame as two buffers (header with body prefix, then the JSON bytes) so the
 * payload, serialized by the appender, is never copied.
 */
export const encodeFrame = (
  sequence: number,
  recordedAtMs: number,
  kind: Buffer,
  json: Buffer,
  groupContinues: boolean
): [Buffer, Buffer] => {
  const head = Buffer.allocUnsafe(HEADER_BYTES + BODY_FIXED_BYTES + kind.length)
  const bodyLength = BODY_FIXED_BYTES + kind.length + json.length
  head.writeUInt32LE(bodyLength, 0)
  head.writeUInt32LE(crc32(head.subarray(0, 4)), 4)
  writeU64(head, sequence, 12)
  writeU64(head, recordedAtMs, 20)
  head.writeUInt16LE(kind.length | (groupContinues ? GROUP_CONTINUES : 0), 28)
  kind.copy(head, 30)
  const bodyCrc = crc32(json, crc32(head.subarray(HEADER_BYTES)))
  head.writeUInt32LE(bodyCrc, 8)
  return [head, json]
}

export const frameBytes = (kind: Buffer, json: Buffer) => HEADER_BYTES + BODY_FIXED_BYTES + kind.length + json.length

export interface DecodedFrame {
  readonly sequence: number
  readonly recordedAtMs: number
  readonly kind: string
  readonly groupContinues: boolean
  /** The JSON payload bytes (a view into the read buffer). */
  readonly json: Buffer
  /** The frame's total size on disk. */
  readonly size: number
  /** CRC-32 of the body, as stored in the header. */
  readonly bodyCrc: number
}

/** Outcome of reading one frame at an offset. */
export type FrameRead =
  | { readonly _tag: "Frame"; readonly frame: DecodedFrame }
  /** The bytes end inside this frame: a torn write if this is the end of the final segment. */
  | { readonly _tag: "Incomplete"; readonly reason: string }
  /** A complete frame (or header) failed a check. */
  | { readonly _tag: "Corrupt"; readonly reason: string }

export const readFrame = (buf: Buffer, offset: number, end: number = buf.length): FrameRead => {
  const available = end - offset
  if (available < HEADER_BYTES) return { _tag: "Incomplete", reason: "the segment ends inside a frame header" }
  const bodyLength = buf.readUInt32LE(offset)
  if (lengthCrc(buf, offset) !== buf.readUInt32LE(offset + 4)) {
    return { _tag: "Corrupt", reason: "frame header checksum mismatch" }
  }
  if (bodyLength > MAX_FRAME_BYTES) return { _tag: "Corrupt", reason: `frame length ${bodyLength} above the maximum` }
  if (bodyLength < BODY_FIXED_BYTES) return { _tag: "Corrupt", reason: `frame length ${bodyLength} below the minimum` }
  if (available < HEADER_BYTES + bodyLength) {
    return { _tag: "Incomplete", reason: "the segment ends inside a frame body" }
  }
  const bodyStart = offset + HEADER_BYTES
  const bodyEnd = bodyStart + bodyLength
  const bodyCrc = buf.readUInt32LE(offset + 8)
  if (crc32(buf.subarray(bodyStart, bodyEnd)) !== bodyCrc) {
    return { _tag: "Corrupt", reason: "frame body checksum mismatch" }
  }
  const kindField = buf.readUInt16LE(bodyStart + 16)
  const kindLength = kindField & KIND_LENGTH_MASK
  if (BODY_FIXED_BYTES + kindLength > bodyLength) {
    return { _tag: "Corrupt", reason: "kind length runs past the frame body" }
  }
  const kindStart = bodyStart + BODY_FIXED_BYTES
  return {
    _tag: "Frame",
    frame: new Frame(
      buf,
      kindStart,
      kindStart + kindLength,
      bodyEnd,
      readU64(buf, bodyStart),
      readU64(buf, bodyStart + 8),
      (kindField & GROUP_CONTINUES) !== 0,
      HEADER_BYTES + bodyLength,
      bodyCrc
    )
  }
}

/**
 * A decoded frame whose kind and payload are made (a string, a view) only when asked: an open
 * checks every frame but makes neither for most of them (the records a checkpoint covers).
 */
class Frame implements DecodedFrame {
  #kind: string | undefined
  #json: Buffer | undefined
  constructor(
    private readonly buf: Buffer,
    private readonly kindStart: number,
    private readonly kindEnd: number,
    private readonly bodyEnd: number,
    readonly sequence: number,
    readonly recordedAtMs: number,
    readonly groupContinues: boolean,
    readonly size: number,
    readonly bodyCrc: number
  ) {}
  get kind(): string {
    return this.#kind ??= this.buf.toString("utf8", this.kindStart, this.kindEnd)
  }
  get json(): Buffer {
    return this.#json ??= this.buf.subarray(this.kindEnd, this.bodyEnd)
  }
}

/** True when every byte from offset to end is zero: space the file system allocated but never wrote. */
export const isZeroTail = (buf: Buffer, offset: number, end: number = buf.length): boolean => {
  for (let i = offset; i < end; i++) if (buf[i] !== 0) return false
  return true
}
