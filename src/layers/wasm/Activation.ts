/**
 * One activation on a pool thread: start the guest, answer its host calls one at a time through
 * `perform`, and take its output — within the compute budget, which counts only the time the
 * guest has control (not the time Brain spends performing its host calls).
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
import type { GuestThread, Pool, ThreadEvent } from "./Pool.js"

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

export interface Activation {
  /** The module's content hash: a worker keeps modules it has been sent by it. */
  readonly moduleId: string
  readonly module: WebAssembly.Module
  readonly memory: MemoryLimits
  readonly entry: "brain_run" | "brain_tool"
  /**
   * The input JSON as UTF-8 (`jsonBytes`). Its buffer is handed to the worker, so the caller keeps
   * no copy: a turn with a big transcript holds it on no JavaScript heap while the guest runs.
   */
  readonly input: Uint8Array
  /** Performs one host call; the answer's JSON text (never fails: errors are answers too). */
  readonly perform: (op: string, request: string) => Effect.Effect<string>
}

const encoder = new TextEncoder()
/** The worker checks every payload it sends is well-formed UTF-8. */
const decoder = new TextDecoder()

/** A value's JSON as UTF-8 in a buffer of its own (it is transferred, so never a pooled Buffer). */
export const jsonBytes = (value: unknown): Uint8Array => encoder.encode(JSON.stringify(value))

export const activate = (pool: Pool, activation: Activation, limits: ActivationLimits): Effect.Effect<string, ActivationFailure> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function*() {
      if (activation.input.byteLength > limits.ioBytes) {
        return yield* Effect.fail<ActivationFailure>({
          _tag: "guest",
          message: `the activation's input is above BRAIN_MAX_WASM_IO_BYTES (${limits.ioBytes})`
        })
      }
      const thread = yield* restore(pool.acquire(activation.entry === "brain_run"))
      let healthy = false
      let computing = false
      const compute: Compute = {
        // Marked held in the same uninterruptible step that took it, so the ensuring below always gives it back.
        take: Effect.uninterruptibleMask((r) => r(pool.compute.take(1)).pipe(Effect.zipRight(Effect.sync(() => void (computing = true))))),
        give: Effect.suspend(() => {
          if (!computing) return Effect.void
          computing = false
          return Effect.asVoid(pool.compute.release(1))
        })
      }
      return yield* restore(run(thread, activation, limits, compute, () => void (healthy = true))).pipe(
        Effect.ensuring(Effect.zipRight(compute.give, Effect.suspend(() => pool.release(thread, healthy))))
      )
    })
  )

/** The guest's hold on one of the pool's compute slots: taken while it runs, given back while it waits. */
interface Compute {
  readonly take: Effect.Effect<void>
  readonly give: Effect.Effect<void>
}

/**
 * The thread's events, one at a time: `next(ms)` is the next one, or none when `ms` (> 0)
 * milliseconds pass first. A plain callback and one timer per wait: this runs for every host call.
 */
const eventsOf = (thread: GuestThread) => {
  const pending: Array<ThreadEvent> = []
  let wake: ((event: ThreadEvent) => void) | undefined
  thread.listener = (event) => {
    const w = wake
    if (w) {
      wake = undefined
      w(event)
    } else pending.push(event)
  }
  return (ms: number) =>
    Effect.async<Option.Option<ThreadEvent>>((resume) => {
      const queued = pending.shift()
      if (queued) return resume(Effect.succeed(Option.some(queued)))
      const timer = ms > 0
        ? setTimeout(() => {
          wake = undefined
          resume(Effect.succeed(Option.none()))
        }, ms)
        : undefined
      wake = (event) => {
        if (timer) clearTimeout(timer)
        resume(Effect.succeed(Option.some(event)))
      }
      return Effect.sync(() => {
        wake = undefined
        if (timer) clearTimeout(timer)
      })
    })
}

const run = (thread: GuestThread, activation: Activation, limits: ActivationLimits, compute: Compute, fine: () => void) =>
  Effect.gen(function*() {
    // A new thread may still be loading: its start-up is not the guest's compute.
    if (!thread.loaded) yield* Effect.promise(() => thread.ready)
    if (thread.dead) return yield* Effect.fail<ActivationFailure>({ _tag: "guest", message: thread.deathReason ?? "the worker died" })
    const next = eventsOf(thread)
    const maxPages = Math.floor(limits.memoryBytes / PAGE_BYTES)
    yield* compute.take
    thread.start({
      type: "activate",
      moduleId: activation.moduleId,
      entry: activation.entry,
      input: activation.input,
      memory: {
        initial: activation.memory.initial,
        maximum: Math.max(activation.memory.initial, Math.min(maxPages, activation.memory.maximum ?? maxPages))
      },
      maxRequestBytes: limits.ioBytes
    }, activation.module)
    let remaining = limits.computeMs
    for (;;) {
      const before = performance.now()
      // With a budget, a wait that outlasts what is left of it ends the activation (at least 1 ms: 0 would mean no timer).
      const got = yield* next(limits.computeMs > 0 ? Math.max(1, Math.ceil(remaining)) : 0)
      if (Option.isNone(got)) {
        return yield* Effect.fail<ActivationFailure>({
          _tag: "budget",
          message: `the guest ran past its compute budget of ${limits.computeMs} ms (BRAIN_MAX_WASM_COMPUTE_MS) and was stopped`
        })
      }
      remaining -= performance.now() - before
      const event = got.value
      switch (event.type) {
        case "call": {
          // The guest waits: other guests may compute until its answer is ready.
          yield* compute.give
          const answer = encoder.encode(yield* activation.perform(event.op, decoder.decode(event.request)))
          yield* compute.take
          thread.answer(answer)
          continue
        }
        case "done":
          yield* compute.give
          fine()
          if (event.output.byteLength > limits.ioBytes) {
            return yield* Effect.fail<ActivationFailure>({
              _tag: "guest",
              message: `the guest's output is above BRAIN_MAX_WASM_IO_BYTES (${limits.ioBytes})`
            })
          }
          return decoder.decode(event.output)
        case "failed":
          if (event.kind !== "error") fine()
          return yield* Effect.fail<ActivationFailure>({ _tag: "guest", message: describe(event.kind, event.reason) })
        case "died":
          return yield* Effect.fail<ActivationFailure>({ _tag: "guest", message: event.reason })
      }
    }
  })

const describe = (kind: "guest" | "trap" | "link" | "error", reason: string) =>
  kind === "trap"
    ? `the guest trapped: ${reason}`
    : kind === "link"
    ? `the guest could not be instantiated: ${reason}`
    : kind === "guest"
    ? reason
    : `the guest failed: ${reason}`
