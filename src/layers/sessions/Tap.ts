/**
 * One SSE subscriber of a session's live feed (LiveFeeds.ts), from its cursor on: the body of one
 * SSE response, a byte stream the server pipes to the socket.
 *
 * - It is registered on the feed at the feed's position T before it reads anything, catches up by
 *   reading the journal through T, then sends the commits the feed offered after T: no gap, no
 *   duplicate.
 * - The feed offers each commit's frames, encoded once and shared by every subscriber, and never
 *   waits. What was offered and not yet handed to the socket (the backlog) is bounded in Events
 *   (SUBSCRIBER_BACKLOG_RECORDS) and in bytes (BRAIN_SSE_BACKLOG_BYTES). A commit that would pass
 *   either, onto a non-empty backlog,
 *   - cuts a live subscriber off: the backlog is dropped, and the stream ends with a
 *     `stream_lagged` frame naming the cursor to resume after (the last Event handed to the socket);
 *   - only drops the backlog of one still catching up: its catch-up goes on, through the feed's
 *     position at that time.
 *   An empty backlog always takes the next commit, so one larger than the budget still comes through
 *   (the feed offers what no backlog holds at once in parts of whole Events: only one Event is larger).
 * - Bytes are handed to the socket only while it asks for more (Node's stream demand, about
 *   SSE_WRITE_BYTES buffered): a slow reader holds its backlog plus one write, no more. A live
 *   commit goes out from the feed's own call, so a subscriber costs about a socket write per commit.
 * - Catch-up reads the next page only once the socket has taken the last one (the pipe pauses this
 *   stream while the socket has not drained) and never in the turn of the event loop that asked:
 *   a reader that stops reading holds one page and what its socket buffers, and pages of many
 *   readers take turns with the rest of the server's work. A reader whose socket has not drained
 *   for `stallMs` while still catching up is cut off as a lagging live one is (`stream_lagged`).
 * - Once the stream has ended, its socket has `closeMs` (after a cut: `stream_lagged`,
 *   `stream_error`) or `stallMs` (after the session's final Event) to take what it was handed;
 *   then the connection is closed and its unsent bytes let go.
 * - The stream ends after the session's final Event (`session_ended`, or a failed creation's
 *   `session_creation_failed`: Records.ts `isFinalKind`); a read failure after the 200 ends it with a
 *   `stream_error` frame, and so does a server stop (retryable). Once it has ended (or its client
 *   went away) the feed forgets it at once (`onDone`), whatever the socket still has to send.
 */
import { finished, Readable, type Writable } from "node:stream"
import { Effect } from "effect"
import { type ApiError, isApiError } from "../../domain/Errors.js"
import { CONNECTED, errorFrame, framesAfter, HEARTBEAT, laggedFrame } from "./SseFrames.js"
import type { CatchUpPage, Commit, TapOptions } from "./TapOptions.js"

export type { CatchUpPage, Commit, ReadCatchUp, TapLimits, TapOptions } from "./TapOptions.js"

const END = Symbol("end")

export class Tap<E extends ApiError> extends Readable {
  /** The last sequence handed to the socket (examined, while catching up). */
  private cursor: number
  /** The transcript's length just after `cursor`, while catching up. */
  private length: number
  /** Catch-up reads the journal through this sequence. */
  private until: number
  private live = false
  private reading = false
  /** The backlog overflowed while catching up: offers are ignored until catch-up is extended. */
  private stale = false
  private backlog: Array<Commit> = []
  private backlogBytes = 0
  private backlogEvents = 0
  /** Bytes to send before anything else: the connected comment, a caught-up page, a heartbeat. */
  private pending: Array<Uint8Array> = [CONNECTED]
  /** Nothing comes after the backlog (the session ended). */
  private finished = false
  /** Ended (or torn down): nothing more is sent. */
  private over = false
  /** The socket asked for more and nothing was handed to it since. */
  private wanting = false
  private delivering = false
  private again = false
  /** A catch-up read is asked for: it starts on a later turn of the event loop, once the socket has drained. */
  private due = false
  /** Interrupts the catch-up read under way. */
  private cancelRead: (() => void) | undefined
  /** Cuts the stream off: its socket has not drained for `stallMs` while it was catching up. */
  private stall: ReturnType<typeof setTimeout> | undefined
  /** Where this body is piped: the response, which a stream that ended and does not drain is closed by. */
  private sink: Writable | undefined
  /** The last catch-up page's bytes and what gives back its hold on the process's bound (HeldPages.ts), until its socket has taken it. */
  private heldPage: { readonly bytes: Uint8Array; readonly release: () => void } | undefined

  constructor(private readonly options: TapOptions<E>) {
    super({ highWaterMark: options.limits.writeBytes })
    this.cursor = options.from.after
    this.length = options.from.length
    this.until = options.registeredAt
    // A pipe pauses its source while the destination has not drained, and resumes it once it has.
    this.on("pause", () => this.onPause())
    this.on("resume", () => this.onResume())
  }

  override pipe<T extends NodeJS.WritableStream>(destination: T, options?: { end?: boolean | undefined }): T {
    this.sink ??= destination as unknown as Writable
    return super.pipe(destination, options)
  }

  /** The first catch-up read, made before the response is answered so that a failure is a plain error. */
  readonly prime: Effect.Effect<void, E> = Effect.suspend(() => {
    if (this.cursor >= this.until) return Effect.sync(() => this.caughtUp())
    const from = this.cursor
    return Effect.map(this.options.read(from, this.length, this.until), (page) => this.accept(page, from))
  })

  /** Called by the feed, in sequence order, for every commit after the registration point. */
  offer(offered: Commit): void {
    if (this.over || this.finished || this.stale) return
    const commit = this.unseen(offered)
    if (commit === undefined) return
    const { limits } = this.options
    const overflows = () =>
      this.backlog.length > 0 &&
      (this.backlogEvents + commit.events > limits.events || this.backlogBytes + commit.bytes.length > limits.bytes)
    // Live deltas waiting in the backlog give way to recorded Events first.
    if (overflows()) this.dropDeltas()
    if (overflows()) {
      if (this.live) {
        return this.cutOff(`the reader fell more than ${limits.events} Events or ${limits.bytes} bytes behind the live feed`)
      }
      this.stale = true
      this.dropBacklog()
      return
    }
    this.backlog.push(commit)
    this.backlogBytes += commit.bytes.length
    this.backlogEvents += commit.events
    if (this.wanting && this.live) this.deliver()
  }

  /**
   * What of a commit this subscriber has not had. Only one registered behind its own cursor (the
   * feed had not yet published what a page had already shown its client) is offered commits at or
   * before the cursor, for as long as the feed takes to catch up with it.
   */
  private unseen(commit: Commit): Commit | undefined {
    const after = this.options.from.after
    if (after <= this.options.registeredAt || commit.first > after) return commit
    if (commit.last <= after) return undefined
    const rest = framesAfter(commit.bytes, after)
    return rest.events === 0 ? undefined : { ...commit, first: after + 1, bytes: rest.bytes, events: rest.events }
  }

  /** Ends the stream with `stream_lagged` at the cursor. */
  cutOff(message: string): void {
    this.endWith(laggedFrame(this.cursor, `${message}; resume after sequence ${this.cursor}`))
  }

  /** Ends the stream with a retryable `stream_error`: the server is stopping. */
  stop(): void {
    this.endWith(errorFrame({ code: "overloaded", message: "the server is stopping; resume by cursor", retryable: true }))
  }

  /**
   * A live model delta: for a subscriber that is live, after everything already offered; a
   * subscriber still catching up, or one whose backlog has no room for it, goes without (deltas
   * are live-only and best effort; the committed result is what counts).
   */
  delta(bytes: Uint8Array): void {
    if (this.over || this.finished || !this.live) return
    if (this.backlogBytes + bytes.length > this.options.limits.bytes) return
    this.backlog.push({ first: this.cursor + 1, last: this.lastOffered(), bytes, events: 0, ended: false })
    this.backlogBytes += bytes.length
    if (this.wanting) this.deliver()
  }

  /** The sequence the cursor reaches once the backlog is sent. */
  private lastOffered(): number {
    const tail = this.backlog[this.backlog.length - 1]
    return tail ? tail.last : this.cursor
  }

  heartbeat(): void {
    if (this.over || this.pending.includes(HEARTBEAT)) return
    this.pending.push(HEARTBEAT)
    if (this.wanting) this.deliver()
  }

  override _read(): void {
    this.releaseTaken()
    this.wanting = true
    this.deliver()
  }

  /**
   * Gives back the last page's hold once it has left this stream and the socket took it without
   * holding this stream back (or has drained since): flowing, nothing of it buffered or pending.
   */
  private releaseTaken() {
    const page = this.heldPage
    if (page === undefined || this.readableFlowing === false || this.readableLength > 0 || this.pending.includes(page.bytes)) return
    this.heldPage = undefined
    page.release()
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.conclude(false)
    callback(error)
  }

  /**
   * Hands the socket what there is while it asks for more. A call made while delivering (a
   * catch-up read that completed at once, a push that asked for more) makes the loop look again.
   */
  private deliver(): void {
    if (this.delivering) {
      this.again = true
      return
    }
    this.delivering = true
    do {
      this.again = false
      while (this.wanting && !this.over) {
        const part = this.nextPart()
        if (part === undefined) break
        if (part === END) this.conclude(true, this.options.limits.stallMs)
        else this.wanting = this.push(part)
      }
    } while (this.again && this.wanting && !this.over)
    this.delivering = false
  }

  private nextPart(): Uint8Array | typeof END | undefined {
    const first = this.pending.shift()
    if (first) return first
    if (!this.live && !this.finished) {
      this.catchUp()
      return undefined
    }
    const c = this.backlog.shift()
    if (c) {
      this.backlogBytes -= c.bytes.length
      this.backlogEvents -= c.events
      this.cursor = c.last
      if (c.ended) {
        this.finished = true
        this.dropBacklog()
      }
      return c.bytes
    }
    return this.finished ? END : undefined
  }

  /**
   * Asks for the next page. It is read on a later turn of the event loop (other work goes first,
   * and by then the socket has said whether it took the last page), and only once the socket has
   * drained: while the pipe holds this stream paused, its `resume` reads it.
   */
  private catchUp() {
    if (this.reading || this.due) return
    this.due = true
    setImmediate(() => this.readDue())
  }

  private readDue() {
    if (!this.due || this.over || this.readableFlowing === false) return
    this.due = false
    this.reading = true
    const from = this.cursor
    this.releaseTaken()
    const cancel = this.options.run(this.options.read(from, this.length, this.until), (outcome) => {
      this.reading = false
      this.cancelRead = undefined
      if (this.over) {
        if (!isApiError(outcome)) outcome.release?.()
        return
      }
      if (isApiError(outcome)) return this.endWith(errorFrame(outcome))
      this.accept(outcome, from)
      this.deliver()
    })
    if (this.reading) this.cancelRead = cancel
  }

  private onPause() {
    const { stallMs } = this.options.limits
    if (this.live || this.over || stallMs === 0 || this.stall !== undefined) return
    this.stall = setTimeout(() => this.stalled(), stallMs)
    this.stall.unref()
  }

  private onResume() {
    this.clearStall()
    this.releaseTaken()
    // Not at once: a pipe emits `resume` before it hands on what this stream holds, which may fill the socket again.
    if (this.due) setImmediate(() => this.readDue())
  }

  private clearStall() {
    if (this.stall === undefined) return
    clearTimeout(this.stall)
    this.stall = undefined
  }

  /** The socket has not drained for `stallMs` while this stream was catching up. */
  private stalled() {
    this.stall = undefined
    if (this.over || this.live) return
    // Its final Events are read but not taken: nothing is left to say, the connection just closes.
    if (this.finished) return this.close()
    this.cutOff(`the reader's socket did not drain for ${this.options.limits.stallMs} ms while it was catching up`)
  }

  /** Closes the connection, dropping what its socket has not taken. */
  private close() {
    const sink = this.sink
    if (sink === undefined) {
      if (!this.readableEnded) this.destroy()
    } else if (!sink.writableFinished) sink.destroy()
  }

  /** A timer that closes the connection unless its socket has taken everything within `ms` (0: none). */
  private closeUnlessDrained(ms: number): ReturnType<typeof setTimeout> | undefined {
    if (ms === 0) return undefined
    const timer = setTimeout(() => this.close(), ms)
    timer.unref()
    return timer
  }

  private accept(page: CatchUpPage, from: number) {
    this.cursor = page.next
    this.length = page.length
    if (page.bytes) this.pending.push(page.bytes)
    if (page.release !== undefined) {
      // The page before was taken (a page is read only once the socket has drained).
      this.heldPage?.release()
      this.heldPage = page.bytes !== undefined ? { bytes: page.bytes, release: page.release } : undefined
      if (page.bytes === undefined) page.release()
    }
    if (page.ended) {
      this.finished = true
      this.dropBacklog()
    } else if (page.next >= this.until || page.next === from) this.caughtUp()
  }

  private caughtUp() {
    if (this.stale) {
      // The backlog overflowed meanwhile: read on from the journal, through where the feed is now.
      this.stale = false
      this.until = this.options.position()
      if (this.cursor < this.until) return
    }
    if (this.options.atEnd) this.finished = true
    else {
      this.live = true
      this.clearStall()
    }
  }

  /**
   * Ends the stream with a control frame after what was already handed over (and the pending
   * bytes, which the cursor counts), whether or not the socket asks for more: the backlog is
   * dropped and the feed forgets this subscriber now; the client reads the frame when it reads again.
   */
  private endWith(frame: Uint8Array) {
    if (this.over) return
    this.dropBacklog()
    for (const part of this.pending) if (part !== HEARTBEAT) this.push(part)
    this.pending = []
    this.push(frame)
    this.conclude(true, this.options.limits.closeMs)
  }

  /** Ends the stream: gracefully (what was handed over goes out, within `closeAfterMs`) or torn down. */
  private conclude(graceful: boolean, closeAfterMs = 0) {
    if (this.over) return
    this.over = true
    this.due = false
    this.clearStall()
    this.cancelRead?.()
    this.cancelRead = undefined
    this.dropBacklog()
    this.pending = []
    let timer: ReturnType<typeof setTimeout> | undefined
    if (graceful) {
      this.push(null)
      timer = this.closeUnlessDrained(closeAfterMs)
    }
    // The last page's hold lasts until its connection is done with it (taken, or closed), and so
    // does the close's timer: one wait on the response for both (each adds its listeners to it).
    const page = this.heldPage
    this.heldPage = undefined
    if (this.sink === undefined) page?.release()
    else if (page !== undefined || timer !== undefined) {
      if (page !== undefined && (this.sink.writableFinished || this.sink.destroyed)) page.release()
      finished(this.sink, () => {
        if (timer !== undefined) clearTimeout(timer)
        page?.release()
      })
    }
    this.options.onDone()
  }

  /** Drops the live deltas still waiting (they carry no Event: nothing a cursor counts is lost). */
  private dropDeltas() {
    const kept = this.backlog.filter((c) => c.events > 0 || c.ended)
    if (kept.length === this.backlog.length) return
    this.backlog = kept
    this.backlogBytes = kept.reduce((n, c) => n + c.bytes.length, 0)
  }

  private dropBacklog() {
    this.backlog = []
    this.backlogBytes = 0
    this.backlogEvents = 0
  }
}

