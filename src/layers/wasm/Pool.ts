/**
 * The pool of guest worker threads (GuestWorker.ts): started on demand, each running one
 * activation at a time; the guests that run at once are bounded apart from the threads (see
 * Pool). An activation takes a thread, gives it back when done, and gives back a *broken* one
 * (terminated: a runaway guest, a crash, an interrupted activation) to be replaced: the pool
 * never hands out a thread in an unknown state. A thread that dies free (idle, or shared while its
 * pinned guests wait on their calls) is counted out at once, its place handed to the activations
 * waiting for a thread.
 */
import { Deferred, Effect, FiberId } from "effect"
import { ComputeSlots } from "./ComputeSlots.js"
import { GuestThread } from "./GuestThread.js"

export { ComputeSlots } from "./ComputeSlots.js"
export { GuestThread, type StartMessage, type ThreadEvent, WORKER_HEAP_MB, WORKER_URL } from "./GuestThread.js"

/**
 * What an activation asking a closed pool for a thread gets (the server is stopping): it ends at
 * once instead of waiting for a thread no one will give back. Nothing of its guest runs.
 */
export interface PoolClosed {
  readonly _tag: "stopped"
  readonly message: string
}

export const POOL_CLOSED: PoolClosed = { _tag: "stopped", message: "the server is stopping: the activation was given no worker thread" }

/** Milliseconds a thread above the pool's `compute` count may sit idle before it is stopped. */
export const SPARE_THREAD_IDLE_MS = 10_000

export interface PoolSize {
  /** Guests that may run at once (BRAIN_WASM_WORKERS): the rest wait for a turn to compute. */
  readonly compute: number
  /**
   * Threads at most (BRAIN_WASM_THREADS), counting those whose guest is blocked in a host call:
   * such a guest holds its thread but no compute. At least `compute`.
   */
  readonly threads: number
}

/** Pinned activations one thread keeps at most: each suspended one holds its instance there (its tables on the worker's heap, WORKER_HEAP_MB). */
export const PINS_PER_THREAD = 64

/** What an activation takes a thread for: a blocking Agentloop's, a blocking Wasm tool's, or a pinned activation's turn (Pinned.ts). */
export type ThreadKind = "loop" | "tool" | "pinned"

/**
 * Threads and compute, counted apart. A guest blocked in a host call (`Atomics.wait`) keeps its
 * thread, because its stack lives there, but uses no CPU: so while Brain journals a model call or
 * runs a tool for one session, other sessions' guests run. `compute` bounds the guests running at
 * once; `threads` bounds the threads, which cost memory (an idle Node worker is about 8 MiB), and
 * threads above `compute` are stopped after SPARE_THREAD_IDLE_MS idle.
 *
 * A guest whose module has an instrumented twin runs it **pinned** (Pinned.ts): at a host call it
 * unwinds and gives its thread back, and its instance waits on that thread (`pins`) for the
 * answer. Such guests never block a thread, so at most `compute` threads are **shared** among them
 * (each keeps up to PINS_PER_THREAD): a shared thread runs one pinned guest (or a blocking tool)
 * at a time, and a pinned guest whose answer is there waits for its own thread to be free
 * (`reclaim`) — never for long, since nothing there waits on a host call. A shared thread whose
 * pins are all gone goes back to the idle threads. A pinned activation never waits for a pin to
 * end: finding every shared thread full it runs blocking (`pinnedFull`, Pinned.ts), and so does one
 * that waited for a busy shared thread while they filled (`acquirePinned`); room a pin frees on a
 * free thread goes at once to an activation waiting for a shared thread.
 *
 * Blocking Agentloops (modules without a twin) may hold at most `threads - compute` threads, and
 * never a thread with pins (their wait would hold those pins' answers): a loop waits in `dispatch`
 * for its tools, and a Wasm tool needs a thread of its own, so the last `compute` threads are kept
 * for tools, which wait for nothing (they may only emit and report telemetry) and may run on a
 * shared thread — loops blocked on their tools can never hold every thread.
 */
export class Pool {
  private readonly idle: Array<{ readonly thread: GuestThread; readonly since: number }> = []
  /** Activations waiting for a thread, first come first served; a pinned one is handed none when the shared threads fill (`acquirePinned`). */
  private readonly waiting: Array<{ readonly kind: ThreadKind; readonly deferred: Deferred.Deferred<GuestThread | undefined, PoolClosed> }> = []
  /** Threads shared by pinned activations (at most `compute`). */
  private readonly shared = new Set<GuestThread>()
  private started = 0
  private loops = 0
  private closed = false
  private readonly trim: ReturnType<typeof setInterval>
  readonly size: PoolSize
  /** Held while a guest runs: taken before it starts or gets a host call's answer, given back when it calls or ends. */
  readonly compute: ComputeSlots

  constructor(size: number | PoolSize) {
    const s = typeof size === "number" ? { compute: size, threads: size } : size
    const compute = Math.max(1, s.compute)
    // With one thread per compute slot there is no spare for tools: give tools their own.
    this.size = { compute, threads: Math.max(compute + 1, s.threads) }
    this.compute = new ComputeSlots(compute)
    this.trim = setInterval(() => this.stopSpares(), SPARE_THREAD_IDLE_MS)
    this.trim.unref()
  }

  /** Whether a waiter of `kind` may take `thread` (free: not busy) now. */
  private fits(kind: ThreadKind, thread: GuestThread): boolean {
    if (thread.dead && thread.pins > 0) return false
    switch (kind) {
      case "loop":
        return thread.pins === 0 && this.loops < this.size.threads - this.size.compute
      case "tool":
        return true
      case "pinned":
        return thread.pins < PINS_PER_THREAD && (thread.shared || this.shared.size < this.size.compute)
    }
  }

  private take(thread: GuestThread, kind: ThreadKind) {
    thread.busy = true
    if (kind === "loop") {
      this.loops++
      thread.loop = true
      if (thread.shared) this.unshare(thread)
    }
    if (kind === "pinned" && !thread.shared) {
      thread.shared = true
      this.shared.add(thread)
    }
    return thread
  }

  /** A new thread, counted by its taker (`started`) or in place of one that broke. */
  private spawn(): GuestThread {
    const thread = new GuestThread()
    thread.onDeath = () => this.diedFree(thread)
    return thread
  }

  /**
   * A thread died. Held, its holder gives it back (`release`), which replaces it. Free (idle, or
   * shared with its pins waiting on their calls), nothing would: it is counted out at once and its
   * place goes to the activations waiting for a thread, which would otherwise wait for another to
   * be given back, maybe for ever.
   */
  private diedFree(thread: GuestThread) {
    if (thread.busy) return
    const i = this.idle.findIndex((t) => t.thread === thread)
    if (i >= 0) this.idle.splice(i, 1)
    else if (!this.shared.has(thread)) return
    if (thread.shared) this.unshare(thread)
    this.started--
    if (!this.closed) this.serveWaiting()
  }

  /** Hands each waiter, first come first served, a thread it can have now (a free one it fits, or a new one while under the size). */
  private serveWaiting() {
    for (let i = 0; i < this.waiting.length;) {
      const waiter = this.waiting[i]!
      const thread = this.tryAcquire(waiter.kind)
      if (thread === undefined) {
        i++
        continue
      }
      this.waiting.splice(i, 1)
      Deferred.unsafeDone(waiter.deferred, Effect.succeed(thread))
    }
  }

  private unshare(thread: GuestThread) {
    thread.shared = false
    this.shared.delete(thread)
  }

  /**
   * A thread for one blocking activation of `kind` (an Agentloop's or a Wasm tool's; a pinned one's
   * turn: `acquirePinned`): a free one it fits, a new one while under the size, else the next one
   * released that it fits. `true` and `false` stand for a blocking loop and tool. Once the pool is
   * closed, POOL_CLOSED: at once, or when the close comes while it waits.
   */
  acquire(k: Exclude<ThreadKind, "pinned"> | boolean): Effect.Effect<GuestThread, PoolClosed> {
    // Only a pinned activation's wait is ever handed none.
    return this.wait(kindOf(k)) as Effect.Effect<GuestThread, PoolClosed>
  }

  /**
   * A shared thread with room for a pinned activation (`acquire`), or none once every shared thread
   * has filled while it waited (it found room when it began to wait, taken since by those ahead of
   * it): it runs blocking then (Pinned.ts), as one that finds them full at once, instead of waiting
   * for a pin to end, which may be never.
   */
  readonly acquirePinned: Effect.Effect<GuestThread | undefined, PoolClosed> = Effect.suspend(() => this.wait("pinned"))

  private wait(kind: ThreadKind): Effect.Effect<GuestThread | undefined, PoolClosed> {
    return Effect.suspend(() => {
      if (this.closed) return Effect.fail(POOL_CLOSED)
      const now = this.tryAcquire(kind)
      if (now !== undefined) return Effect.succeed(now)
      const deferred = Deferred.unsafeMake<GuestThread | undefined, PoolClosed>(FiberId.none)
      const waiter = { kind, deferred }
      this.waiting.push(waiter)
      return Deferred.await(deferred).pipe(
        // Given up (the activation was interrupted while waiting): hand on a thread it got.
        Effect.onInterrupt(() =>
          Effect.sync(() => {
            const i = this.waiting.indexOf(waiter)
            if (i >= 0) this.waiting.splice(i, 1)
          }).pipe(
            Effect.zipRight(Deferred.poll(deferred)),
            Effect.flatMap((got) => (got._tag === "Some" ? Effect.flatMap(Effect.orElseSucceed(got.value, () => undefined), (t) => (t === undefined ? Effect.void : this.release(t, true))) : Effect.void))
          )
        )
      )
    })
  }

  /** A thread now (a free one, else a new one while under the size), or none (always once closed): `acquire` without waiting. */
  tryAcquire(k: ThreadKind | boolean): GuestThread | undefined {
    if (this.closed) return undefined
    const kind = kindOf(k)
    if (kind === "loop" && this.loops >= this.size.threads - this.size.compute) return undefined
    if (kind === "pinned") {
      for (const t of this.shared) if (!t.busy && !t.dead && this.fits(kind, t)) return this.take(t, kind)
      if (this.shared.size >= this.size.compute) return undefined
    }
    const idle = this.idle.pop()
    if (idle) return this.take(idle.thread, kind)
    if (this.started < this.size.threads) {
      this.started++
      return this.take(this.spawn(), kind)
    }
    if (kind === "tool") for (const t of this.shared) if (!t.busy && !t.dead) return this.take(t, kind)
    return undefined
  }

  /**
   * Whether every thread pinned activations may share keeps PINS_PER_THREAD of them: a pinned
   * activation would wait for one to end, which may be never (its host call waits on a tool that
   * does not answer); it runs blocking instead (Pinned.ts).
   */
  get pinnedFull(): boolean {
    if (this.shared.size < this.size.compute) return false
    for (const t of this.shared) if (!t.dead && t.pins < PINS_PER_THREAD) return false
    return true
  }

  /**
   * Takes `thread` back for a pinned activation of its whose host call has answered: at once when
   * it is free, else once its holder gives it back (its pinned activations first, in order). False
   * when the thread died meanwhile.
   */
  reclaim(thread: GuestThread, taken: () => void): Effect.Effect<boolean> {
    return Effect.suspend(() => {
      if (thread.dead) return Effect.succeed(false)
      if (!thread.busy) {
        thread.busy = true
        taken()
        return Effect.succeed(true)
      }
      return Effect.async<boolean>((resume) => {
        // Called with the thread handed to it (busy already), or dead: marked taken in the same step, so its end gives it back.
        const resumer = () => {
          if (!thread.dead) taken()
          resume(Effect.succeed(!thread.dead))
        }
        thread.resumers.push(resumer)
        return Effect.sync(() => {
          const i = thread.resumers.indexOf(resumer)
          if (i >= 0) thread.resumers.splice(i, 1)
        })
      })
    })
  }

  /**
   * A pinned activation on `thread` is over (`suspended`: given up in a host call, its instance
   * left there for the worker to drop). A free thread with no pins left is no longer shared.
   */
  unpinned(thread: GuestThread, pin: number, suspended: boolean): void {
    thread.unpin(pin, suspended)
    if (thread.dead || thread.busy || !thread.shared) return
    if (thread.pins === 0) {
      this.unshare(thread)
      if (this.closed) {
        thread.terminate()
        this.started--
        return
      }
    }
    // Free, it has room now: an activation waiting for a shared thread may take it.
    this.handOn(thread)
  }

  /** Gives a thread back; a broken one is terminated and replaced. */
  release(thread: GuestThread, healthy: boolean): Effect.Effect<void> {
    return Effect.sync(() => this.releaseNow(thread, healthy))
  }

  /** `release`, synchronously. */
  releaseNow(thread: GuestThread, healthy: boolean): void {
    {
      thread.listener = undefined
      if (thread.loop) this.loops--
      thread.loop = false
      thread.busy = false
      let next: GuestThread | undefined = thread
      if (!healthy || thread.dead) {
        if (!thread.dead) thread.terminate()
        // Its pinned activations find it dead (GuestThread: `resumers` woken) and run again elsewhere.
        if (thread.shared) this.unshare(thread)
        next = this.closed ? undefined : this.spawn()
      }
      if (this.closed) {
        next?.terminate()
        this.started--
        return
      }
      this.handOn(next!)
    }
  }

  /** Gives a free thread to its first pinned activation waiting for it, else the first waiter it fits, else keeps it (idle, or shared while it has pins). */
  private handOn(thread: GuestThread) {
    thread.busy = false
    // Its own pinned activations first: their answers wait for this thread and no other.
    const resumer = thread.resumers.shift()
    if (resumer !== undefined) {
      thread.busy = true
      resumer()
      return
    }
    const i = this.waiting.findIndex((w) => this.fits(w.kind, thread))
    if (i >= 0) {
      const [waiter] = this.waiting.splice(i, 1)
      Deferred.unsafeDone(waiter!.deferred, Effect.succeed(this.take(thread, waiter!.kind)))
      return
    }
    this.noRoomForPinned()
    // Free but keeping pins, it stays shared (tryAcquire finds it there).
    if (thread.pins > 0) return
    if (thread.shared) this.unshare(thread)
    this.idle.push({ thread, since: Date.now() })
  }

  /**
   * Hands none to the pinned activations waiting for a shared thread once every one is full: each
   * began to wait when one had room, and ran blocking had it found them full (`acquirePinned`).
   * Checked whenever a free thread fits no waiter: a shared thread fills only while it is held, so
   * its release (a free thread) is where the last room goes.
   */
  private noRoomForPinned() {
    if (!this.waiting.some((w) => w.kind === "pinned") || !this.pinnedFull) return
    for (let i = this.waiting.length - 1; i >= 0; i--) {
      const waiter = this.waiting[i]!
      if (waiter.kind !== "pinned") continue
      this.waiting.splice(i, 1)
      Deferred.unsafeDone(waiter.deferred, Effect.succeed(undefined))
    }
  }

  /** Stops threads above `compute` that have been idle for SPARE_THREAD_IDLE_MS. */
  private stopSpares() {
    const cutoff = Date.now() - SPARE_THREAD_IDLE_MS
    // The oldest idle threads are first (idle threads are taken from the end).
    while (this.started > this.size.compute && this.idle.length > 0 && this.idle[0]!.since <= cutoff) {
      this.idle.shift()!.thread.terminate()
      this.started--
    }
  }

  /** Activations waiting for a thread now (for tests). */
  get waiters(): number {
    return this.waiting.length
  }

  /**
   * Terminates every idle thread (threads in use are terminated when given back), and fails every
   * activation waiting for a thread with POOL_CLOSED, as it does every later request: no thread
   * will be handed out again, and a wait left here would hold the server's stop until its fiber
   * was interrupted.
   */
  readonly close = Effect.sync(() => {
    this.closed = true
    clearInterval(this.trim)
    for (const waiter of this.waiting.splice(0)) Deferred.unsafeDone(waiter.deferred, Effect.fail(POOL_CLOSED))
    for (const t of this.idle.splice(0)) {
      t.thread.terminate()
      this.started--
    }
  })
}

const kindOf = (k: ThreadKind | boolean): ThreadKind => (k === true ? "loop" : k === false ? "tool" : k)
