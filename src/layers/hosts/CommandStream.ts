/**
 * One host's command stream (docs/environments.md, "The `host` driver"): the body of one SSE
 * response, a byte stream the server pipes to the socket.
 *
 * - Frames wait in a backlog, Brain's own, and are handed to the connection only while it asks for
 *   more (Node's stream demand). A frame in the backlog can be taken back (`Queued.withdraw`): the
 *   call it carries was never sent. A frame handed over cannot: the connection holds it, then the
 *   operating system's socket buffers, and the host reads it whenever it reads again. So what is
 *   handed over is kept small: at most HOST_COMMAND_CHUNK_BYTES at a time (or one larger frame),
 *   and the body buffers nothing of its own (`highWaterMark` 0): a connection that stops taking
 *   holds at most the chunk it stopped on and the one after it.
 * - The bound (HOST_COMMAND_QUEUE, in commands) is on what waits while the connection takes no
 *   more, a host that does not read: `offer` answers undefined when that many wait then, or the
 *   stream is over, and the caller then sends nothing. While the connection takes what it is
 *   given, a burst of any size (the calls of many dispatches at once) is taken, and handed over at
 *   the end of the step; a reader that then stops leaves at most that burst and the bound waiting.
 * - Frames offered in one run of the event loop's microtasks (the calls of one dispatch, started
 *   together) go to the socket together: one write per chunk, not one per call.
 * - A heartbeat comment goes out every `heartbeatMs` while nothing else waits, so that a dead
 *   peer is noticed by the socket and proxies keep the stream open.
 * - `onGone` runs exactly once, when the stream is over for any reason: the client went away
 *   (the pipe destroys the body), `close` (replaced by a new stream, or the server stops), or an
 *   error. The registry then settles the stream's calls in flight: those whose frame still waits
 *   are withdrawn (not sent), the others uncertain. A stream over writes nothing more: what
 *   still waits then is dropped.
 */
import { Readable } from "node:stream"
import { HOST_COMMAND_CHUNK_BYTES } from "../../domain/Limits.js"
import { HEARTBEAT } from "../sessions/SseFrames.js"

/** A frame offered to a command stream: waiting in its backlog until handed to the connection or withdrawn. */
export class Queued {
  /** The frame's bytes while it waits; undefined once handed over or withdrawn. */
  bytes: Uint8Array | undefined
  constructor(private readonly body: CommandStreamBody, bytes: Uint8Array) {
    this.bytes = bytes
  }

  /** Whether it still waits in the backlog (neither handed over nor withdrawn). */
  get waiting(): boolean {
    return this.bytes !== undefined
  }

  /**
   * Takes the frame back if it still waits: true when it did (it will never be written), false
   * when it was handed to the connection already (or withdrawn before).
   */
  withdraw(): boolean {
    if (this.bytes === undefined) return false
    this.bytes = undefined
    this.body.dropped()
    return true
  }
}

export class CommandStreamBody extends Readable {
  private backlog: Array<Queued> = []
  /** Where the backlog starts: what is before it was handed over or withdrawn. */
  private head = 0
  /** How many frames of the backlog still wait (the others were withdrawn, and are skipped). */
  private waitingFrames = 0
  private wanting = false
  /** A flush is queued for the end of this run of microtasks. */
  private scheduled = false
  private over = false
  private readonly timer: ReturnType<typeof setInterval> | undefined

  constructor(
    private readonly limits: { readonly commands: number; readonly heartbeatMs: number },
    private readonly onGone: () => void
  ) {
    // Nothing of its own buffered: what is not handed over stays in the backlog, withdrawable.
    super({ highWaterMark: 0 })
    if (limits.heartbeatMs > 0) {
      this.timer = setInterval(() => {
        if (!this.over && this.waitingFrames === 0) this.enqueue(HEARTBEAT)
      }, limits.heartbeatMs)
      this.timer.unref()
    }
  }

  /**
   * Queues a frame for the connection: its handle in the backlog, or undefined (nothing queued)
   * when the stream is over, or when the connection takes no more and the bound's worth of frames
   * waits already.
   */
  offer(bytes: Uint8Array): Queued | undefined {
    if (this.over || (!this.wanting && this.waitingFrames >= this.limits.commands)) return undefined
    return this.enqueue(bytes)
  }

  /** Ends the stream now: what still waits is dropped (its calls were never sent), then the response ends. */
  close(): void {
    if (!this.finish()) return
    this.clear()
    this.push(null)
  }

  /** A frame of the backlog was withdrawn (`Queued.withdraw`). */
  dropped() {
    this.waitingFrames--
    // Withdrawn frames are skipped when handed over; past half the backlog they are swept out, so
    // that a host that never reads while its calls are stopped does not grow it.
    if (this.backlog.length - this.head > 64 && this.waitingFrames < (this.backlog.length - this.head) / 2) {
      this.backlog = this.backlog.filter((q) => q.waiting)
      this.head = 0
    }
  }

  private enqueue(bytes: Uint8Array): Queued {
    const queued = new Queued(this, bytes)
    this.backlog.push(queued)
    this.waitingFrames++
    if (!this.scheduled) {
      this.scheduled = true
      queueMicrotask(() => {
        this.scheduled = false
        this.flush()
      })
    }
    return queued
  }

  /**
   * Hands what waits to the connection while it wants more, a chunk at a time: the waiting
   * frames from the front of the backlog, up to HOST_COMMAND_CHUNK_BYTES (at least one frame).
   */
  private flush() {
    while (this.wanting && this.waitingFrames > 0) {
      const chunk: Array<Uint8Array> = []
      let bytes = 0
      while (this.head < this.backlog.length) {
        const queued = this.backlog[this.head]
        const frame = queued.bytes
        if (frame !== undefined) {
          if (chunk.length > 0 && bytes + frame.byteLength > HOST_COMMAND_CHUNK_BYTES) break
          chunk.push(frame)
          bytes += frame.byteLength
          queued.bytes = undefined
        }
        this.head++
      }
      if (this.head === this.backlog.length) {
        this.backlog = []
        this.head = 0
      } else if (this.head > 64 && this.head > this.backlog.length / 2) {
        // What was handed over is let go of, by halves: a backlog that never empties does not grow.
        this.backlog.splice(0, this.head)
        this.head = 0
      }
      this.waitingFrames -= chunk.length
      this.wanting = this.push(chunk.length === 1 ? chunk[0] : Buffer.concat(chunk))
    }
  }

  /** Drops what waits. */
  private clear() {
    for (const queued of this.backlog) queued.bytes = undefined
    this.backlog = []
    this.head = 0
    this.waitingFrames = 0
  }

  /** Marks the stream over and tells the registry, once; false when it was over already. */
  private finish(): boolean {
    if (this.over) return false
    this.over = true
    if (this.timer !== undefined) clearInterval(this.timer)
    this.onGone()
    return true
  }

  override _read(): void {
    this.wanting = true
    this.flush()
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.finish()
    this.clear()
    callback(error)
  }
}
