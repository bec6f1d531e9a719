/**
 * One host's command stream (docs/environments.md, "The `host` driver"): the body of one SSE
 * response, a byte stream the server pipes to the socket.
 *
 * - Frames wait in a backlog and are handed to the socket only while it asks for more (Node's
 *   stream demand). The bound (HOST_COMMAND_QUEUE, in commands) is on what waits while the socket
 *   takes no more, a host that does not read: `offer` answers false when that many wait then, or
 *   the stream is over, and the caller then sends nothing. While the socket takes what it is given,
 *   a burst of any size (the calls of many dispatches at once) is taken, and handed over whole at
 *   the end of the step; a reader that then stops leaves at most that burst and the bound waiting.
 * - Frames offered in one run of the event loop's microtasks (the calls of one dispatch, started
 *   together) go to the socket as one chunk: one write, not one per call.
 * - A heartbeat comment goes out every `heartbeatMs` while nothing else waits, so that a dead
 *   peer is noticed by the socket and proxies keep the stream open.
 * - `onGone` runs exactly once, when the stream is over for any reason: the client went away
 *   (the pipe destroys the body), `close` (replaced by a new stream, or the server stops), or an
 *   error. The registry then makes the stream's calls in flight uncertain.
 */
import { Readable } from "node:stream"
import { HEARTBEAT } from "../sessions/SseFrames.js"

export class CommandStreamBody extends Readable {
  private readonly backlog: Array<Uint8Array> = []
  private wanting = false
  /** A flush is queued for the end of this run of microtasks. */
  private scheduled = false
  private over = false
  private readonly timer: ReturnType<typeof setInterval> | undefined

  constructor(
    private readonly limits: { readonly commands: number; readonly heartbeatMs: number },
    private readonly onGone: () => void
  ) {
    super()
    if (limits.heartbeatMs > 0) {
      this.timer = setInterval(() => {
        if (!this.over && this.backlog.length === 0) this.enqueue(HEARTBEAT)
      }, limits.heartbeatMs)
      this.timer.unref()
    }
  }

  /**
   * Queues a frame for the socket; false (nothing queued) when the stream is over, or when the
   * socket takes no more and the bound's worth of frames waits already.
   */
  offer(bytes: Uint8Array): boolean {
    if (this.over || (!this.wanting && this.backlog.length >= this.limits.commands)) return false
    this.enqueue(bytes)
    return true
  }

  /** Ends the stream now: what is queued is still written, then the response ends. */
  close(): void {
    if (!this.finish()) return
    for (const bytes of this.backlog.splice(0)) this.push(bytes)
    this.push(null)
  }

  private enqueue(bytes: Uint8Array) {
    this.backlog.push(bytes)
    if (this.scheduled) return
    this.scheduled = true
    queueMicrotask(() => {
      this.scheduled = false
      this.flush()
    })
  }

  /** Hands what waits to the socket while it wants more: everything at once when it does. */
  private flush() {
    if (!this.wanting || this.backlog.length === 0) return
    const waiting = this.backlog.splice(0)
    this.wanting = this.push(waiting.length === 1 ? waiting[0] : Buffer.concat(waiting))
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
    this.backlog.length = 0
    callback(error)
  }
}
