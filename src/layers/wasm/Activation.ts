/**
 * One activation on a pool thread: start the guest, answer its host calls one at a time through
 * `perform`, and take its output — within the compute budget, which counts the time the guest
 * has control and the main thread's work on its host calls (HostCallCost.ts), not the time
 * Brain waits for the effects they ask for.
 *
 * - The budget passes, the thread dies, or the activation is interrupted (a cancel the guest
 *   ignored past its grace, a server stop): the thread is terminated and replaced; the guest never
 *   runs on after its activation is over.
 * - A trap, a link error, a `brain.fail`, ABI misuse: the activation fails with the reason; the
 *   thread is fine (its instance is simply dropped) and goes back to the pool.
 */
import { Effect, Option } from "effect"
import type { MemoryLimits } from "../../services/WasmHost.js"
import { PAGE_BYTES } from "./Module.js"
import { eventLoopTurn } from "../Waits.js"
import { chargedCall, yieldsAfter } from "./HostCallCost.js"
import type { GuestThread, Pool, PoolClosed, ThreadEvent } from "./Pool.js"
import type { FailedKind } from "./WorkerProtocol.js"

export interface ActivationLimits {
  /** Milliseconds the guest may run, host calls excluded; 0 = no bound. */
  readonly computeMs: number
  /** Bytes of input, output and each host request. */
  readonly ioBytes: number
  /** Bytes of guest memory at most. */
  readonly memoryBytes: number
}

/** Why an activation did not give an output. */
export type ActivationFailure =
  | { readonly _tag: "budget"; readonly message: string }
  | { readonly _tag: "guest"; readonly message: string }
  | PoolClosed

export interface Activation {
  /** The module's content hash: a worker keeps modules it has been sent by it. */
  readonly moduleId: string
  readonly module: WebAssembly.Module
  readonly memory: MemoryLimits
  readonly entry: "brain_run" | "brain_tool"
  /**
   * The input JSON: as UTF-8 (`jsonBytes`), or as text, which the main thread writes into its
   * guest's memory as UTF-8 directly (Inline.ts) and a worker's activation encodes first. Bytes
   * are copied into the thread's shared buffer when they fit (WorkerProtocol.ts), else their buffer
   * is handed to the worker: either way the caller keeps no copy of a big input, so a turn with a
   * big transcript holds it on no JavaScript heap while the guest runs on a worker.
   */
  readonly input: Uint8Array | string
  /** Performs one host call; the answer's JSON text (never fails: errors are answers too). */
  readonly perform: (op: string, request: string) => Effect.Effect<string>
  /** Called when the guest starts (its thread and compute slot taken), if the caller wants to know. */
  readonly began?: () => void
}

const encoder = new TextEncoder()

/**
 * The memory an activation's instance gets: the module's declared initial size, and the lower of
 * its declared maximum and the host's (never below the initial size, which admission bounds).
 */
export const memoryLimitsOf = (memory: MemoryLimits, memoryBytes: number): { readonly initial: number; readonly maximum: number } => {
  const maxPages = Math.floor(memoryBytes / PAGE_BYTES)
  return { initial: memory.initial, maximum: Math.max(memory.initial, Math.min(maxPages, memory.maximum ?? maxPages)) }
}

/** The input's size in UTF-8 bytes. */
export const inputBytes = (input: Uint8Array | string): number => typeof input === "string" ? Buffer.byteLength(input, "utf8") : input.byteLength

/** A value's JSON as UTF-8 in a buffer of its own (it may be transferred, so never a pooled Buffer). */
export const jsonBytes = (value: unknown): Uint8Array => encoder.encode(JSON.stringify(value))

/**
 * Runs one activation. The thread and a compute slot are taken without suspending the fiber when
 * they are free (the common case), each in the same synchronous step that arms what gives it back.
 */
export const activate = (pool: Pool, activation: Activation, limits: ActivationLimits): Effect.Effect<string, ActivationFailure> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.suspend(() => {
      if (inputBytes(activation.input) > limits.ioBytes) {
        return Effect.fail<ActivationFailure>({
          _tag: "guest",
          message: `the activation's input is above BRAIN_MAX_WASM_IO_BYTES (${limits.ioBytes})`
        })
      }
      const loop = activation.entry === "brain_run"
      const now = pool.tryAcquire(loop)
      if (now !== undefined) return hold(pool, now, activation, limits, restore)
      return Effect.flatMap(restore(pool.acquire(loop)), (thread) => hold(pool, thread, activation, limits, restore))
    })
  )

/** What an activation holds: its compute slot (while its guest runs), and whether its thread may go back to the pool. */
export interface Hold {
  computing: boolean
  healthy: boolean
}

/** Runs the activation on `thread` (already taken), and gives back the thread and any slot it holds however it ends. */
const hold = (
  pool: Pool,
  thread: GuestThread,
  activation: Activation,
  limits: ActivationLimits,
  restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
): Effect.Effect<string, ActivationFailure> => {
  const held: Hold = { computing: false, healthy: false }
  return restore(run(pool, thread, activation, limits, held)).pipe(
    Effect.ensuring(Effect.sync(() => {
      giveSlot(pool, held)
      pool.releaseNow(thread, held.healthy)
    }))
  )
}

/** Takes a compute slot if one is free now (synchronously: nothing can interrupt between the take and its mark). */
export const takeSlotNow = (pool: Pool, held: Hold): boolean => {
  if (!pool.compute.tryTake()) return false
  held.computing = true
  return true
}

/** Waits for a compute slot; marked held in the same uninterruptible step that took it, so the activation's end always gives it back. */
export const takeSlot = (pool: Pool, held: Hold): Effect.Effect<void> =>
  Effect.uninterruptibleMask((restore) => Effect.zipRight(restore(pool.compute.take), Effect.sync(() => void (held.computing = true))))

export const giveSlot = (pool: Pool, held: Hold) => {
  if (!held.computing) return
  held.computing = false
  pool.compute.give()
}

/**
 * The thread's events, one at a time: `next(ms, spent)` is the next one, or none when `ms` (> 0)
 * milliseconds pass first; `spent` is told how long it waited. A plain callback and one timer per
 * wait: this runs for every host call. `seen` is told of each event as it arrives, before anyone
 * takes it (an activation given up then knows its guest no longer runs).
 */
export const eventsOf = (thread: GuestThread, seen?: (event: ThreadEvent) => void) => {
  const pending: Array<ThreadEvent> = []
  let wake: ((event: ThreadEvent) => void) | undefined
  thread.listener = (event) => {
    seen?.(event)
    const w = wake
    if (w) {
      wake = undefined
      w(event)
    } else pending.push(event)
  }
  return (ms: number, spent: (ms: number) => void) =>
    Effect.async<Option.Option<ThreadEvent>>((resume) => {
      const queued = pending.shift()
      if (queued) return resume(Effect.succeed(Option.some(queued)))
      const before = performance.now()
      const timer = ms > 0
        ? setTimeout(() => {
          wake = undefined
          spent(performance.now() - before)
          resume(Effect.succeed(Option.none()))
        }, ms)
        : undefined
      wake = (event) => {
        if (timer) clearTimeout(timer)
        spent(performance.now() - before)
        resume(Effect.succeed(Option.some(event)))
      }
      return Effect.sync(() => {
        wake = undefined
        if (timer) clearTimeout(timer)
      })
    })
}

const run = (pool: Pool, thread: GuestThread, activation: Activation, limits: ActivationLimits, held: Hold): Effect.Effect<string, ActivationFailure> => {
  const begin = (): Effect.Effect<string, ActivationFailure> => {
    if (thread.dead) return Effect.fail({ _tag: "guest", message: thread.deathReason ?? "the worker died" })
    const next = eventsOf(thread)
    let remaining = limits.computeMs
    const spent = (ms: number) => void (remaining -= ms)
    // With a budget, a wait that outlasts what is left of it ends the activation (at least 1 ms: 0 would mean no timer).
    const wait = () => Effect.flatMap(next(limits.computeMs > 0 ? Math.max(1, Math.ceil(remaining)) : 0, spent), onEvent)
    const onEvent = (got: Option.Option<ThreadEvent>): Effect.Effect<string, ActivationFailure> => {
      if (Option.isNone(got)) return Effect.fail(overBudget(limits))
      const event = got.value
      switch (event.type) {
        case "call":
          // The guest waits: other guests may compute until its answer is ready.
          giveSlot(pool, held)
          // The main thread's work on the call is the guest's compute (HostCallCost.ts).
          return chargedCall(activation.perform, event.op, event.request, (answer, callMs) => {
            spent(callMs)
            if (limits.computeMs > 0 && remaining <= 0) return Effect.fail(overBudget(limits))
            const resume = () => {
              thread.answer(answer)
              return yieldsAfter(callMs) ? Effect.flatMap(eventLoopTurn, wait) : wait()
            }
            return takeSlotNow(pool, held) ? resume() : Effect.flatMap(takeSlot(pool, held), resume)
          })
        case "done":
          giveSlot(pool, held)
          held.healthy = true
          if (event.bytes > limits.ioBytes) {
            return Effect.fail({ _tag: "guest", message: `the guest's output is above BRAIN_MAX_WASM_IO_BYTES (${limits.ioBytes})` })
          }
          return Effect.succeed(event.output)
        case "failed":
          if (event.kind !== "error") held.healthy = true
          return Effect.fail({ _tag: "guest", message: describe(event.kind, event.reason) })
        case "died":
          return Effect.fail({ _tag: "guest", message: event.reason })
      }
    }
    const go = () => {
      activation.began?.()
      thread.start({
        moduleId: activation.moduleId,
        entry: activation.entry,
        input: typeof activation.input === "string" ? encoder.encode(activation.input) : activation.input,
        memory: memoryLimitsOf(activation.memory, limits.memoryBytes),
        maxRequestBytes: limits.ioBytes
      }, activation.module)
      return wait()
    }
    return takeSlotNow(pool, held) ? go() : Effect.flatMap(takeSlot(pool, held), go)
  }
  // A new thread may still be loading: its start-up is not the guest's compute.
  return thread.loaded ? Effect.suspend(begin) : Effect.flatMap(Effect.promise(() => thread.ready), begin)
}

export const overBudget = (limits: ActivationLimits): ActivationFailure => ({
  _tag: "budget",
  message: `the guest ran past its compute budget of ${limits.computeMs} ms (BRAIN_MAX_WASM_COMPUTE_MS) and was stopped`
})

export const describe = (kind: FailedKind, reason: string) =>
  kind === "trap"
    ? `the guest trapped: ${reason}`
    : kind === "link"
    ? `the guest could not be instantiated: ${reason}`
    : kind === "guest"
    ? reason
    : `the guest failed: ${reason}`
