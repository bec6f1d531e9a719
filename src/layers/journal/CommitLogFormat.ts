/**
 * The commit log's bytes (docs/journal.md, "The commit log"): one batch per group-commit round,
 * holding what the round wrote to each session's segment file and where.
 *
 *   batch  = u32 LE magic | u32 LE epoch | u64 LE salt | u32 LE body length
 *            | u32 LE CRC-32 of the body | u32 LE CRC-32 of the 24 bytes before it | body
 *   body   = entry*
 *   entry  = u16 LE path length | path (UTF-8, relative to the data directory)
 *            | f64 LE position in that file | u32 LE length | the bytes written there
 *
 * A log file is written from its start by batches of one use: the epoch, a new number each time
 * a file is taken up again, orders the two files' uses; the salt, 48 random bits drawn for each
 * use, is what makes a batch this use's: a batch left from an earlier use (the file is written
 * over, not truncated), or bytes inside a batch's body that happen to look like a header — a
 * session's payload is anyone's text — never pass for one of this use, since no one outside
 * this process knows the salt. A batch counts only whole: a header or a body whose
 * checksum fails, or one that runs past the file, ends the file's batches (a torn write: its round
 * was never acknowledged). No Effect here: the sync thread (SyncWorker.ts) encodes batches too.
 */
import * as zlib from "node:zlib"

export const BATCH_MAGIC = 0x4c43_4e42 // "BNCL" read as LE bytes B N C L
export const BATCH_HEADER_BYTES = 28
const ENTRY_FIXED_BYTES = 2 + 8 + 4

/** One file's bytes in a batch. */
export interface LogEntry {
  readonly path: string
  readonly position: number
  readonly bytes: Uint8Array
}

/** An entry to encode: its bytes as one or more pieces, in order. */
export interface LogPiece {
  readonly path: Uint8Array
  readonly position: number
  readonly pieces: ReadonlyArray<Uint8Array>
}

/** A log file's use: its epoch and its salt (a 48-bit random integer). */
export interface LogUse {
  readonly epoch: number
  readonly salt: number
}

/** Encodes a batch of `use` in one buffer (the pieces copied in once). */
export const encodeBatch = (use: LogUse, entries: ReadonlyArray<LogPiece>): Buffer => {
  let body = 0
  for (const e of entries) {
    body += ENTRY_FIXED_BYTES + e.path.length
    for (const p of e.pieces) body += p.length
  }
  const out = Buffer.allocUnsafe(BATCH_HEADER_BYTES + body)
  let at = BATCH_HEADER_BYTES
  for (const e of entries) {
    let length = 0
    for (const p of e.pieces) length += p.length
    out.writeUInt16LE(e.path.length, at)
    out.set(e.path, at + 2)
    at += 2 + e.path.length
    out.writeDoubleLE(e.position, at)
    out.writeUInt32LE(length, at + 8)
    at += 12
    for (const p of e.pieces) {
      out.set(p, at)
      at += p.length
    }
  }
  out.writeUInt32LE(BATCH_MAGIC, 0)
  out.writeUInt32LE(use.epoch >>> 0, 4)
  out.writeUIntLE(use.salt, 8, 6)
  out.writeUInt16LE(0, 14)
  out.writeUInt32LE(body, 16)
  out.writeUInt32LE(zlib.crc32(out.subarray(BATCH_HEADER_BYTES)), 20)
  out.writeUInt32LE(zlib.crc32(out.subarray(0, 24)), 24)
  return out
}

/** Whether `header` (BATCH_HEADER_BYTES of a log, or fewer where the file ends) is a sound batch header of any use. */
export const isBatchHeader = (header: Buffer): boolean =>
  header.length >= BATCH_HEADER_BYTES && header.readUInt32LE(0) === BATCH_MAGIC &&
  zlib.crc32(header.subarray(0, 24)) === header.readUInt32LE(24)

/** What a log file holds: its epoch (undefined when it holds no whole batch) and its batches' entries, in order. */
export interface ScannedLog {
  readonly epoch: number | undefined
  readonly batches: ReadonlyArray<ReadonlyArray<LogEntry>>
  /** Where its last whole batch ends. */
  readonly end: number
}

/**
 * The whole batches at the start of `buf` of the first one's use (epoch and salt). Stops at the
 * first that fails a check, is of another use, or runs past the end; an entry that runs past its
 * batch's body (a checksummed body cannot, unless written wrongly) is an error.
 */
export const scanLog = (buf: Buffer): ScannedLog => {
  const batches: Array<Array<LogEntry>> = []
  let epoch: number | undefined
  let salt: Buffer | undefined
  let at = 0
  while (at + BATCH_HEADER_BYTES <= buf.length) {
    if (buf.readUInt32LE(at) !== BATCH_MAGIC) break
    if (zlib.crc32(buf.subarray(at, at + 24)) !== buf.readUInt32LE(at + 24)) break
    const e = buf.readUInt32LE(at + 4)
    const s = buf.subarray(at + 8, at + 16)
    if (epoch !== undefined && (e !== epoch || !s.equals(salt!))) break
    const length = buf.readUInt32LE(at + 16)
    const start = at + BATCH_HEADER_BYTES
    if (start + length > buf.length) break
    const body = buf.subarray(start, start + length)
    if (zlib.crc32(body) !== buf.readUInt32LE(at + 20)) break
    batches.push(entriesOf(body))
    epoch = e
    salt = s
    at = start + length
  }
  return { epoch, batches, end: at }
}

/**
 * Whether more of the file than `buf` could hold more of its first use's batches: the scan of
 * `buf` stopped only because a header, or the body a sound header announces, runs past its end.
 */
export const scanNeedsMore = (buf: Buffer): boolean => {
  const at = scanLog(buf).end
  if (at + BATCH_HEADER_BYTES > buf.length) return true
  if (buf.readUInt32LE(at) !== BATCH_MAGIC || zlib.crc32(buf.subarray(at, at + 24)) !== buf.readUInt32LE(at + 24)) return false
  return at + BATCH_HEADER_BYTES + buf.readUInt32LE(at + 16) > buf.length
}

const entriesOf = (body: Buffer): Array<LogEntry> => {
  const out: Array<LogEntry> = []
  let at = 0
  while (at < body.length) {
    if (at + 2 > body.length) throw new Error("a commit-log entry runs past its batch")
    const pathBytes = body.readUInt16LE(at)
    const fixedEnd = at + 2 + pathBytes + 12
    if (fixedEnd > body.length) throw new Error("a commit-log entry runs past its batch")
    const path = body.toString("utf8", at + 2, at + 2 + pathBytes)
    const position = body.readDoubleLE(at + 2 + pathBytes)
    const length = body.readUInt32LE(at + 2 + pathBytes + 8)
    if (fixedEnd + length > body.length) throw new Error("a commit-log entry runs past its batch")
    out.push({ path, position, bytes: body.subarray(fixedEnd, fixedEnd + length) })
    at = fixedEnd + length
  }
  return out
}
