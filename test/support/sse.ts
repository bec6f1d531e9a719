/**
 * A small SSE client over node:http for end-to-end tests: it keeps every frame (recorded ones with
 * `id`, `event`, `data`; comments separately), knows when the server ended the stream, and can be
 * paused (the socket then stops being read, so the server's writes back up).
 */
import * as http from "node:http"

export interface SseFrame {
  readonly id: string | undefined
  readonly event: string | undefined
  readonly data: string
  /** `data` parsed as JSON. */
  readonly json: any
}

export class SseClient {
  readonly frames: Array<SseFrame> = []
  readonly comments: Array<string> = []
  status = 0
  headers: http.IncomingHttpHeaders = {}
  /** Bytes of body received. */
  received = 0
  /** Set when the response ended (the server closed the stream) or failed. */
  ended: "end" | "error" | undefined
  /** Raw body text received, while `keepRaw` is set. */
  raw = ""
  private waiters: Array<() => void> = []
  private req!: http.ClientRequest
  private res: http.IncomingMessage | undefined
  readonly done: Promise<void>
  private resolveDone!: () => void

  constructor(readonly url: string, readonly requestHeaders: Readonly<Record<string, string>> = {}, readonly keepRaw = false) {
    this.done = new Promise((resolve) => (this.resolveDone = resolve))
  }

  /** Opens the stream; resolves once the response head has arrived. */
  open(): Promise<this> {
    return new Promise((resolve, reject) => {
      this.req = http.get(this.url, { headers: { accept: "text/event-stream", ...this.requestHeaders }, agent: false }, (res) => {
        this.res = res
        this.status = res.statusCode ?? 0
        this.headers = res.headers
        res.setEncoding("utf8")
        res.on("data", (chunk: string) => this.onData(chunk))
        res.on("end", () => this.finish("end"))
        res.on("error", () => this.finish("error"))
        res.on("aborted", () => this.finish("error"))
        resolve(this)
      })
      this.req.on("error", (err) => {
        if (this.res) this.finish("error")
        else reject(err)
      })
    })
  }

  private finish(how: "end" | "error") {
    if (this.ended) return
    this.ended = how
    this.resolveDone()
    this.wake()
  }

  private wake() {
    const waiters = this.waiters
    this.waiters = []
    for (const w of waiters) w()
  }

  /**
   * Text since the last frame's end, in the pieces it came in: a large frame arrives in many
   * chunks, and searching (or concatenating) everything received so far on each one would cost
   * time quadratic in the frame's size. Each chunk is searched once, plus the one character a
   * `\n\n` may straddle.
   */
  private pending: Array<string> = []
  private pendingEndsWithNewline = false

  private onData(chunk: string) {
    this.received += Buffer.byteLength(chunk)
    if (this.keepRaw) this.raw += chunk
    let start = 0
    if (this.pendingEndsWithNewline && chunk.startsWith("\n")) {
      const joined = this.pending.join("")
      this.pending = []
      this.pendingEndsWithNewline = false
      this.onBlock(joined.slice(0, -1))
      start = 1
    }
    for (;;) {
      const end = chunk.indexOf("\n\n", start)
      if (end < 0) break
      const block = this.pending.length > 0 ? this.pending.join("") + chunk.slice(start, end) : chunk.slice(start, end)
      this.pending = []
      this.pendingEndsWithNewline = false
      this.onBlock(block)
      start = end + 2
    }
    if (start < chunk.length) {
      this.pending.push(chunk.slice(start))
      this.pendingEndsWithNewline = chunk.endsWith("\n")
    }
    this.wake()
  }

  private onBlock(block: string) {
    let id: string | undefined
    let event: string | undefined
    const data: Array<string> = []
    let comment = false
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) {
        this.comments.push(line.slice(1).trim())
        comment = true
        continue
      }
      const colon = line.indexOf(":")
      const field = colon < 0 ? line : line.slice(0, colon)
      let value = colon < 0 ? "" : line.slice(colon + 1)
      if (value.startsWith(" ")) value = value.slice(1)
      if (field === "id") id = value
      else if (field === "event") event = value
      else if (field === "data") data.push(value)
    }
    if (comment && data.length === 0 && id === undefined && event === undefined) return
    const text = data.join("\n")
    let json: unknown
    try {
      json = JSON.parse(text)
    } catch {
      json = undefined
    }
    this.frames.push({ id, event, data: text, json })
  }

  /** Control frames (no `id:`): why the server ended the stream other than after `session_ended`. */
  get controls(): Array<SseFrame> {
    return this.frames.filter((f) => f.id === undefined)
  }

  /** Recorded frames' sequences (frames with an id). */
  get sequences(): Array<number> {
    return this.frames.filter((f) => f.id !== undefined).map((f) => Number(f.id))
  }

  /** Resolves when `predicate` holds (checked on every chunk), or fails after `deadlineMs`. */
  async until(what: string, predicate: () => boolean, deadlineMs = 10_000): Promise<void> {
    const deadline = Date.now() + deadlineMs
    while (!predicate()) {
      const left = deadline - Date.now()
      if (left <= 0) {
        throw new Error(`SSE: timed out waiting for ${what}; ${this.frames.length} frames, last id ${this.frames.at(-1)?.id}, ended ${this.ended}`)
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, 200))
        this.waiters.push(() => {
          clearTimeout(timer)
          resolve()
        })
      })
    }
  }

  /** Stops reading: the socket is no longer drained, so the server's writes back up. */
  pause() {
    this.res?.pause()
  }

  resume() {
    this.res?.resume()
  }

  close() {
    this.req?.destroy()
    this.res?.destroy()
  }
}

export const openSse = (url: string, headers: Readonly<Record<string, string>> = {}, keepRaw = false) =>
  new SseClient(url, headers, keepRaw).open()
