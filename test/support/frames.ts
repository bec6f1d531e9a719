/**
 * Reads frame boundaries straight from file bytes with the DESIGN §2 layout (u32 length, two u32
 * CRCs, body), independently of the code under test, so tests can cut and damage exact frames.
 */

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
