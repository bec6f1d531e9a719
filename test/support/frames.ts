/**
 * Reads frame boundaries straight from file bytes with the DESIGN §2 layout (u32 length, two u32
 * CRCs, body), independently of the code under test, so tests can cut and damage exact frames;
 * and builds whole frames of that layout carrying any record, damaged ones included.
 */
import * as zlib from "node:zlib"
import type { JournalRecord } from "../../src/domain/Records.js"
import type { SerializedState } from "../../src/domain/SerializedState.js"
import { piecesBytes } from "../../src/layers/CheckpointStore.js"
import { CHECKPOINT_FORMAT, encodeCheckpoint, recordDigest } from "../../src/layers/projection/Checkpoint.js"

export interface FrameAt {
  readonly start: number
  readonly end: number
  readonly sequence: number
  readonly kind: string
}

export const framesOf = (buf: Buffer): Array<FrameAt> => {
  const out: Array<FrameAt> = []
  let offset = 0
  while (offset + 12 <= buf.length) {
    const end = offset + 12 + buf.readUInt32LE(offset)
    if (end > buf.length) break
    const kindLength = buf.readUInt16LE(offset + 28) & 0x7fff
    out.push({
      start: offset,
      end,
      sequence: buf.readUInt32LE(offset + 12) + buf.readUInt32LE(offset + 16) * 2 ** 32,
      kind: buf.toString("utf8", offset + 30, offset + 30 + kindLength)
    })
    offset = end
  }
  return out
}

/**
 * A whole frame with valid checksums (the DESIGN §2 layout, built here independently of the code
 * under test) whose record is whatever `json` says: what a bug or a foreign writer leaves, which
 * no checksum catches.
 */
export const wellFramed = (sequence: number, kind: string, json: string, recordedAtMs: number = Date.now()): Buffer => {
  const k = Buffer.from(kind, "utf8")
  const body = Buffer.concat([Buffer.alloc(18), k, Buffer.from(json, "utf8")])
  body.writeUInt32LE(sequence % 2 ** 32, 0)
  body.writeUInt32LE(Math.floor(sequence / 2 ** 32), 4)
  body.writeUInt32LE(recordedAtMs % 2 ** 32, 8)
  body.writeUInt32LE(Math.floor(recordedAtMs / 2 ** 32), 12)
  body.writeUInt16LE(k.length, 16)
  const header = Buffer.alloc(12)
  header.writeUInt32LE(body.length, 0)
  header.writeUInt32LE(zlib.crc32(header.subarray(0, 4)), 4)
  header.writeUInt32LE(zlib.crc32(body), 8)
  return Buffer.concat([header, body])
}

/**
 * The file a valid checkpoint of `session` folded through `record` is (its checksum, format,
 * session and `through`, written by the checkpoint's own encoder), with a stand-in state: an
 * open of the journal reads only the rest.
 */
export const checkpointFile = (session: string, record: JournalRecord): Buffer =>
  piecesBytes(encodeCheckpoint({
    format: CHECKPOINT_FORMAT,
    session,
    through: { sequence: record.sequence, digest: recordDigest(record) },
    state: { lastSequence: record.sequence } as unknown as SerializedState
  }))
