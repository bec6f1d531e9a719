/**
 * A host's side of the command stream, for tests: an SSE parser over any source of text chunks
 * (a node Readable in process, a fetch body against a real server) and a queue of the frames it
 * read, awaited one by one.
 */
import type { Readable } from "node:stream"

export interface Frame {
  readonly event: string
  readonly data: any
}

export class Frames {
  private readonly received: Array<Frame> = []
  private readonly waiting: Array<(f: Frame) => void> = []
  private pending = ""
  /** Every frame read so far, in order (heartbeats are comments, not frames). */
  readonly all: Array<Frame> = []
  ended = false

  feed(text: string) {
    this.pending += text
    let cut: number
    while ((cut = this.pending.indexOf("\n\n")) >= 0) {
      const block = this.pending.slice(0, cut)
      this.pending = this.pending.slice(cut + 2)
      let event = "message"
      const data: Array<string> = []
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue
        if (line.startsWith("event: ")) event = line.slice(7)
        else if (line.startsWith("data: ")) data.push(line.slice(6))
      }
      if (data.length === 0) continue
      const frame = { event, data: JSON.parse(data.join("\n")) }
      this.all.push(frame)
      const w = this.waiting.shift()
      if (w) w(frame)
      else this.received.push(frame)
    }
  }

  /** The next frame (waits for it). */
  next(): Promise<Frame> {
    const f = this.received.shift()
    if (f) return Promise.resolve(f)
    return new Promise((resolve) => this.waiting.push(resolve))
  }

  /** The next frame of `event`, skipping none: fails if another comes first. */
  async expect(event: string): Promise<Frame> {
    const f = await this.next()
    if (f.event !== event) throw new Error(`expected an ${event} frame, got ${JSON.stringify(f)}`)
    return f
  }
}

/** Reads a node Readable (the in-process command stream). */
export const framesOf = (body: Readable): Frames => {
  const frames = new Frames()
  body.setEncoding("utf8")
  body.on("data", (chunk: string) => frames.feed(chunk))
  body.on("end", () => void (frames.ended = true))
  return frames
}

/** Reads a fetch response's body (a real server's command stream) until it ends or `abort`. */
export const framesOfResponse = (response: Response): Frames => {
  const frames = new Frames()
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  void (async () => {
    try {
      for (;;) {
        const { done, value } = await reader.read()
        if (done) break
        frames.feed(decoder.decode(value, { stream: true }))
      }
    } catch {
      // aborted
    }
    frames.ended = true
  })()
  return frames
}
